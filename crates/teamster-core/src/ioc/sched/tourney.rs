//! A tournament (winner) tree over an inner node's children: the scheduler's priority queue.
//!
//! Model. Every child has a fixed position (its index among its parent's children) and holds a
//! key or is absent. The tree is a complete binary tree over `m` positions (a power of two);
//! each internal slot holds the winner of its two halves: the least `(key, seq)`, where `seq` is
//! the scheduler's count of filings when the key was set. Among equal keys the one filed first
//! wins: a child that wakes with the virtual time as its tag queues behind those already waiting
//! with that tag, as it would behind equal finish times in a fair queue. A slot is one `u128`
//! (key, then seq, then child), so a match is one unsigned comparison.
//!
//! Why not a binary heap: re-keying the top of a heap of n entries sinks it through log2(n)
//! levels, each waiting on the load of the one before, and with thousands of children the lower
//! levels are not in the first-level cache. Here a change walks up log2(m) levels whose slots are
//! known in advance (the siblings along the path), so their loads issue together and only the
//! comparisons chain; and it stops as soon as a level's winner is unchanged. Entries never go
//! stale, so the scheduler needs no versions and no lazy deletion.
//!
//! Keys are `u64`s whose unsigned order is the order of the float tags they encode
//! ([`ord_key`]); [`ABSENT`], above every real key, marks an empty position.

/// Maps a float to a u64 with the same order (negative numbers flipped, positives offset).
#[inline]
pub(super) fn ord_key(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

/// The float whose [`ord_key`] is `b`.
#[inline]
pub(super) fn from_ord_key(b: u64) -> f64 {
    f64::from_bits(if b >> 63 == 1 { b & !(1 << 63) } else { !b })
}

/// The key of an empty position: above the key of every float, infinity included (it would be
/// a NaN's, and tags are never NaN).
pub(super) const ABSENT: u64 = u64::MAX;

/// A winner: a key and the child (node index) that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Win {
    pub key: u64,
    pub child: u32,
}

/// A slot: `key << 64 | seq << 32 | child`, ordered as `(key, seq)` (seqs are unique).
type Slot = u128;

/// An empty slot: above every present one.
const EMPTY: Slot = u128::MAX;

/// The slot of `child` holding `key`, filed as number `seq`.
#[inline]
fn slot(key: u64, seq: u32, child: u32) -> Slot {
    (u128::from(key) << 64) | (u128::from(seq) << 32) | u128::from(child)
}

/// The lesser of two slots, without a branch: which side wins is data-dependent and often
/// unpredictable (children with equal tags are decided by their index).
#[inline]
fn min(a: Slot, b: Slot) -> Slot {
    let take_b = u128::from(b < a).wrapping_neg();
    (b & take_b) | (a & !take_b)
}

/// The winner a slot holds.
#[inline]
fn win(s: Slot) -> Win {
    Win {
        key: (s >> 64) as u64,
        child: s as u32,
    }
}

/// A tournament tree; see the module documentation.
#[derive(Debug, Clone, Default)]
pub(super) struct Tourney {
    /// Slot 1 is the root, slot `j` has children `2j` and `2j + 1`, positions are slots
    /// `m .. 2m`; slot 0 is unused. Empty for a node without children.
    slots: Vec<Slot>,
}

impl Tourney {
    /// A tree for `n` children, all absent.
    pub fn new(n: usize) -> Tourney {
        if n == 0 {
            return Tourney::default();
        }
        Tourney {
            slots: vec![EMPTY; 2 * n.next_power_of_two()],
        }
    }

    /// The least `(key, position)`, if any position holds a key.
    #[inline]
    pub fn peek(&self) -> Option<Win> {
        self.slots.get(1).map(|&s| win(s)).filter(|w| w.key != ABSENT)
    }

    /// The root's key ([`ABSENT`] if the tree is empty).
    #[inline]
    pub fn min_key(&self) -> u64 {
        self.slots.get(1).map_or(ABSENT, |&s| (s >> 64) as u64)
    }

    /// Gives position `pos` (held by `child`) the key `key`, filed as number `seq` ([`ABSENT`]:
    /// removes it), and replays the matches above it, up to the first whose winner does not
    /// change.
    #[inline]
    pub fn set(&mut self, pos: u32, child: u32, key: u64, seq: u32) {
        let s = &mut self.slots[..];
        let mut j = s.len() / 2 + pos as usize;
        let mut w = if key == ABSENT { EMPTY } else { slot(key, seq, child) };
        s[j] = w;
        while j > 1 {
            w = min(w, s[j ^ 1]);
            j >>= 1;
            if s[j] == w {
                return;
            }
            s[j] = w;
        }
    }

    /// Gives the present entries new filing numbers `1, 2, ...` in their order, and returns how
    /// many there are (the scheduler's count wraps this way, keeping every order).
    pub fn renumber(&mut self) -> u32 {
        let m = self.slots.len() / 2;
        let mut present: Vec<(Slot, usize)> = (m..2 * m)
            .filter(|&j| self.slots[j] != EMPTY)
            .map(|j| (self.slots[j], j))
            .collect();
        present.sort_unstable();
        for (rank, &(s, j)) in present.iter().enumerate() {
            let w = win(s);
            self.slots[j] = slot(w.key, rank as u32 + 1, w.child);
        }
        self.map_keys(|k| k);
        present.len() as u32
    }

    /// Replaces every present key `k` by `f(k)` and replays every match (after `f`, keys that
    /// were distinct may tie, and a tie goes to the earlier child).
    pub fn map_keys(&mut self, f: impl Fn(u64) -> u64) {
        let m = self.slots.len() / 2;
        for s in self.slots[m..].iter_mut() {
            if *s != EMPTY {
                let w = win(*s);
                *s = slot(f(w.key), (*s >> 32) as u32, w.child);
            }
        }
        for j in (1..m).rev() {
            self.slots[j] = self.slots[2 * j].min(self.slots[2 * j + 1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// After any sequence of changes, the root is the least (key, position) present.
        #[test]
        fn the_root_is_the_least_key_then_the_earliest(
            n in 1usize..40,
            ops in proptest::collection::vec((0usize..40, 0u64..5, any::<bool>()), 1..200),
        ) {
            let mut t = Tourney::new(n);
            let mut keys = vec![(ABSENT, 0u32); n];
            let mut seq = 0u32;
            for (pos, key, remove) in ops {
                let pos = pos % n;
                let key = if remove { ABSENT } else { key };
                seq += 1;
                t.set(pos as u32, 100 + pos as u32, key, seq);
                keys[pos] = (key, seq);
                let want = keys
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| k.0 != ABSENT)
                    .min_by_key(|(_, k)| **k)
                    .map(|(p, k)| Win { key: k.0, child: 100 + p as u32 });
                prop_assert_eq!(t.peek(), want);
            }
            // A map that merges keys 1 and 2 (a tie the shift creates) still yields the least
            // (key, filing); so does renumbering the filings.
            t.map_keys(|k| if k == 2 { 1 } else { k });
            let want = keys
                .iter()
                .map(|&(k, q)| (if k == 2 { 1 } else { k }, q))
                .enumerate()
                .filter(|(_, k)| k.0 != ABSENT)
                .min_by_key(|(_, k)| *k)
                .map(|(p, k)| Win { key: k.0, child: 100 + p as u32 });
            prop_assert_eq!(t.peek(), want);
            t.renumber();
            prop_assert_eq!(t.peek(), want);
        }

        #[test]
        fn keys_keep_the_float_order(a in proptest::num::f64::ANY, b in proptest::num::f64::ANY) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            prop_assert_eq!(from_ord_key(ord_key(a)).to_bits(), a.to_bits());
            if a < b { prop_assert!(ord_key(a) < ord_key(b)); }
            prop_assert!(ord_key(a) < ABSENT);
        }
    }

    #[test]
    fn an_empty_tree_has_no_winner() {
        assert_eq!(Tourney::new(0).peek(), None);
        assert_eq!(Tourney::new(0).min_key(), ABSENT);
        let mut t = Tourney::new(1);
        assert_eq!(t.peek(), None);
        t.set(0, 7, 3, 1);
        assert_eq!(t.peek(), Some(Win { key: 3, child: 7 }));
        t.set(0, 7, ABSENT, 0);
        assert_eq!(t.peek(), None);
    }
}
