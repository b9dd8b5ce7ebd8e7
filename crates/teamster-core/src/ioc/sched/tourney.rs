//! The scheduler's priority queue of an inner node's children: a binary heap while few are
//! present, a tournament (winner) tree while many are.
//!
//! Model. Every child has a fixed position (its index among its parent's children) and holds a
//! key or is absent. The least entry is the least `(key, round, position)`, where `round` is the
//! parent's virtual-time round when the key was filed (how many times the parent's virtual time
//! had risen, from 1), or 0 for a child filed as it wakes from idle. Among equal keys, the one
//! filed in an earlier round wins, then the earlier child (positions follow node order): a
//! waking child goes ahead of those waiting with its tag, children re-filed in the same round
//! keep their tree order. An entry is one `u128` (key, round, position), so every comparison is one unsigned
//! comparison and the order is total: which structure holds the entries never changes a decision.
//!
//! Why two structures. A tournament tree over all `m` positions (a power of two) makes a change
//! walk up log2(m) levels whose slots are known in advance (the siblings along the path), so
//! their loads issue together and only the comparisons chain; it stops as soon as a level's
//! winner is unchanged. That is what thousands of backlogged children need: re-keying the top of
//! a heap of thousands sinks it through as many levels, each waiting on the load of the one
//! before. But with a few children present among thousands, the tree still walks all its levels
//! for every removal, while a heap of the few present is a handful of levels. So the queue keeps
//! an indexed heap (position -> heap index) until more than [`BIG_AT`] are present, then a
//! tournament tree until fewer than [`SMALL_AT`] are; the gap keeps it from switching back and
//! forth, and a switch is one pass over the entries.
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

/// An entry: `key << 64 | round << 32 | position`, ordered as `(key, round, position)`.
type Slot = u128;

/// An empty tree slot: above every entry.
const EMPTY: Slot = u128::MAX;

/// "Not in the heap" in the position map.
const NOWHERE: u32 = u32::MAX;

/// More present entries than this: the tournament tree.
pub(super) const BIG_AT: u32 = 128;
/// Fewer present entries than this: the heap.
pub(super) const SMALL_AT: u32 = 32;

/// The entry of position `pos` holding `key`, filed in round `round`.
#[inline]
fn slot(key: u64, round: u32, pos: u32) -> Slot {
    (u128::from(key) << 64) | (u128::from(round) << 32) | u128::from(pos)
}

/// An entry's key.
#[inline]
fn key_of(s: Slot) -> u64 {
    (s >> 64) as u64
}

/// An entry's round.
#[inline]
fn round_of(s: Slot) -> u32 {
    (s >> 32) as u32
}

/// An entry's position.
#[inline]
fn pos_of(s: Slot) -> u32 {
    s as u32
}

/// The lesser of two entries, without a branch: which side wins is data-dependent and often
/// unpredictable (children with equal tags are decided by round and position).
#[inline]
fn min(a: Slot, b: Slot) -> Slot {
    let take_b = u128::from(b < a).wrapping_neg();
    a ^ ((a ^ b) & take_b)
}

/// The priority queue; see the module documentation.
#[derive(Debug, Clone, Default)]
pub(super) struct Tourney {
    /// Each position's child (node index).
    children: Vec<u32>,
    /// Present entries.
    count: u32,
    /// Whether the tournament tree holds the entries (else the heap does).
    big: bool,
    /// The heap: a binary min-heap of the present entries.
    heap: Vec<Slot>,
    /// Each position's index in `heap`, or NOWHERE.
    at: Vec<u32>,
    /// The tournament tree: slot 1 is the root, slot `j` has children `2j` and `2j + 1`,
    /// positions are slots `m .. 2m`; slot 0 is unused. Allocated when first needed.
    tree: Vec<Slot>,
}

impl Tourney {
    /// A queue over `children` (node indices, in position order), all absent.
    pub fn new(children: Vec<u32>) -> Tourney {
        Tourney {
            at: vec![NOWHERE; children.len()],
            children,
            ..Tourney::default()
        }
    }

    /// The least entry.
    #[inline]
    fn top(&self) -> Option<Slot> {
        if self.big {
            Some(self.tree[1]).filter(|&s| s != EMPTY)
        } else {
            self.heap.first().copied()
        }
    }

    /// The least `(key, round, position)`, if any position holds a key.
    #[inline]
    pub fn peek(&self) -> Option<Win> {
        self.top().map(|s| Win {
            key: key_of(s),
            child: self.children[pos_of(s) as usize],
        })
    }

    /// The least key ([`ABSENT`] if none is present).
    #[inline]
    pub fn min_key(&self) -> u64 {
        self.top().map_or(ABSENT, key_of)
    }

    /// Gives position `pos` (held by `child`) the key `key`, filed in round `round` ([`ABSENT`]:
    /// removes it).
    #[inline]
    pub fn set(&mut self, pos: u32, child: u32, key: u64, round: u32) {
        debug_assert_eq!(self.children[pos as usize], child, "a child's position");
        let new = (key != ABSENT).then(|| slot(key, round, pos));
        if self.big {
            let m = self.tree.len() / 2;
            let was = self.tree[m + pos as usize] != EMPTY;
            self.tree_set(pos, new.unwrap_or(EMPTY));
            self.count = self.count + u32::from(new.is_some()) - u32::from(was);
            if self.count < SMALL_AT {
                self.switch_to_heap();
            }
        } else {
            let was = self.at[pos as usize] != NOWHERE;
            self.heap_set(pos, new);
            self.count = self.count + u32::from(new.is_some()) - u32::from(was);
            if self.count > BIG_AT {
                self.switch_to_tree();
            }
        }
    }

    /// Raises the key of the least entry, at position `pos` (held by `child`), to `key`, filed
    /// in round `round`: what [`Tourney::set`] does, minus its checks for an early stop, since
    /// every match on the least entry's path changes (each held the entry with its old key).
    #[inline]
    pub fn rekey_top(&mut self, pos: u32, child: u32, key: u64, round: u32) {
        debug_assert_eq!(self.peek().map(|w| w.child), Some(child), "the least entry");
        debug_assert!(key != ABSENT && key >= self.min_key(), "a raised key");
        let w = slot(key, round, pos);
        if !self.big {
            self.heap[0] = w;
            self.sift_down(0);
            return;
        }
        let s = &mut self.tree[..];
        let mask = s.len() - 1;
        let mut j = s.len() / 2 + pos as usize;
        let mut w = w;
        s[j & mask] = w;
        while j > 1 {
            w = min(w, s[(j ^ 1) & mask]);
            j >>= 1;
            s[j & mask] = w;
        }
    }

    /// Sets position `pos`'s tree slot and replays the matches above it, up to the first whose
    /// winner does not change.
    #[inline]
    fn tree_set(&mut self, pos: u32, w: Slot) {
        let s = &mut self.tree[..];
        // The length is a power of two: masking every index with `len - 1` keeps it in bounds
        // (it already is), and lets the compiler drop the bounds checks.
        let mask = s.len() - 1;
        let mut j = s.len() / 2 + pos as usize;
        let mut w = w;
        s[j & mask] = w;
        while j > 1 {
            w = min(w, s[(j ^ 1) & mask]);
            j >>= 1;
            let cur = &mut s[j & mask];
            if *cur == w {
                return;
            }
            *cur = w;
        }
    }

    /// Recomputes every match of the tree from its positions.
    fn tree_rebuild(&mut self) {
        let m = self.tree.len() / 2;
        for j in (1..m).rev() {
            self.tree[j] = min(self.tree[2 * j], self.tree[2 * j + 1]);
        }
    }

    /// Sets position `pos`'s heap entry (None: removes it).
    #[inline]
    fn heap_set(&mut self, pos: u32, new: Option<Slot>) {
        let i = self.at[pos as usize];
        match (i != NOWHERE, new) {
            (false, None) => {}
            (false, Some(v)) => {
                self.heap.push(v);
                self.at[pos as usize] = (self.heap.len() - 1) as u32;
                self.sift_up(self.heap.len() - 1);
            }
            (true, Some(v)) => {
                let i = i as usize;
                let old = std::mem::replace(&mut self.heap[i], v);
                if v < old {
                    self.sift_up(i);
                } else {
                    self.sift_down(i);
                }
            }
            (true, None) => {
                let i = i as usize;
                self.at[pos as usize] = NOWHERE;
                let last = self.heap.pop().expect("a present entry");
                if i < self.heap.len() {
                    let old = std::mem::replace(&mut self.heap[i], last);
                    self.at[pos_of(last) as usize] = i as u32;
                    if last < old {
                        self.sift_up(i);
                    } else {
                        self.sift_down(i);
                    }
                }
            }
        }
    }

    /// Moves the heap entry at `i` up past greater parents.
    #[inline]
    fn sift_up(&mut self, mut i: usize) {
        let e = self.heap[i];
        while i > 0 {
            let p = (i - 1) / 2;
            let up = self.heap[p];
            if up <= e {
                break;
            }
            self.heap[i] = up;
            self.at[pos_of(up) as usize] = i as u32;
            i = p;
        }
        self.heap[i] = e;
        self.at[pos_of(e) as usize] = i as u32;
    }

    /// Moves the heap entry at `i` down past lesser children.
    #[inline]
    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        let e = self.heap[i];
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let c = if l + 1 < n {
                l + usize::from(self.heap[l + 1] < self.heap[l])
            } else {
                l
            };
            let down = self.heap[c];
            if e <= down {
                break;
            }
            self.heap[i] = down;
            self.at[pos_of(down) as usize] = i as u32;
            i = c;
        }
        self.heap[i] = e;
        self.at[pos_of(e) as usize] = i as u32;
    }

    /// Rebuilds the heap from its entries (after their keys or rounds changed).
    fn heapify(&mut self) {
        for i in 0..self.heap.len() {
            self.at[pos_of(self.heap[i]) as usize] = i as u32;
        }
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// Moves the entries from the heap to the tree.
    fn switch_to_tree(&mut self) {
        if self.tree.is_empty() {
            self.tree = vec![EMPTY; 2 * self.children.len().next_power_of_two()];
        }
        let m = self.tree.len() / 2;
        for s in std::mem::take(&mut self.heap) {
            self.tree[m + pos_of(s) as usize] = s;
            self.at[pos_of(s) as usize] = NOWHERE;
        }
        self.tree_rebuild();
        self.big = true;
    }

    /// Moves the entries from the tree to the heap.
    fn switch_to_heap(&mut self) {
        let m = self.tree.len() / 2;
        self.heap.clear();
        for j in m..2 * m {
            let s = std::mem::replace(&mut self.tree[j], EMPTY);
            if s != EMPTY {
                self.heap.push(s);
            }
        }
        self.tree.iter_mut().take(m).for_each(|s| *s = EMPTY);
        self.big = false;
        self.heapify();
    }

    /// The present entries, in no particular order.
    fn entries(&self) -> Vec<Slot> {
        if self.big {
            let m = self.tree.len() / 2;
            self.tree[m..].iter().copied().filter(|&s| s != EMPTY).collect()
        } else {
            self.heap.clone()
        }
    }

    /// Replaces every present entry by `f(entry)` (the same position) and restores the order.
    fn map_entries(&mut self, f: impl Fn(Slot) -> Slot) {
        if self.big {
            let m = self.tree.len() / 2;
            for s in self.tree[m..].iter_mut() {
                if *s != EMPTY {
                    *s = f(*s);
                }
            }
            self.tree_rebuild();
        } else {
            for s in self.heap.iter_mut() {
                *s = f(*s);
            }
            self.heapify();
        }
    }

    /// The rounds of the present entries.
    pub fn rounds(&self) -> impl Iterator<Item = u32> {
        self.entries().into_iter().map(round_of)
    }

    /// Replaces every present entry's round `r` by `f(r)`, for an `f` that keeps their order.
    pub fn map_rounds(&mut self, f: impl Fn(u32) -> u32) {
        self.map_entries(|s| slot(key_of(s), f(round_of(s)), pos_of(s)));
    }

    /// Replaces every present key `k` by `f(k)` (after `f`, keys that were distinct may tie, and
    /// a tie goes by round, then position).
    pub fn map_keys(&mut self, f: impl Fn(u64) -> u64) {
        self.map_entries(|s| slot(f(key_of(s)), round_of(s), pos_of(s)));
    }

    /// Whether the tournament tree holds the entries (tests).
    #[cfg(test)]
    pub fn is_big(&self) -> bool {
        self.big
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// After any sequence of changes, the least entry is the least (key, round, position)
        /// present, whichever structure holds the entries; queues wide enough to switch between
        /// the heap and the tree, and back, do so.
        #[test]
        fn the_least_is_the_least_key_then_round_then_position(
            n in 1usize..400,
            ops in proptest::collection::vec((0usize..400, 0u64..5, 0u8..10), 1..1500),
        ) {
            let mut t = Tourney::new((0..n as u32).map(|p| 100 + p).collect());
            let mut keys = vec![(ABSENT, 0u32); n];
            let mut seq = 0u32;
            let least = |keys: &[(u64, u32)]| {
                keys.iter()
                    .enumerate()
                    .filter(|(_, k)| k.0 != ABSENT)
                    .min_by_key(|(p, k)| (k.0, k.1, *p))
                    .map(|(p, k)| Win { key: k.0, child: 100 + p as u32 })
            };
            // (Whether it switched, for the reader of a failure.)
            let (mut was_big, mut back) = (false, false);
            // Fill first (most ops add), then drain (most remove), so that both switches happen.
            let half = ops.len() / 2;
            for (k, (pos, key, r)) in ops.into_iter().enumerate() {
                let pos = pos % n;
                let remove = if k < half { r < 2 } else { r < 8 };
                let key = if remove { ABSENT } else { key };
                // Rounds rise every third filing, so that some entries share one.
                seq += 1;
                t.set(pos as u32, 100 + pos as u32, key, seq / 3);
                keys[pos] = (key, seq / 3);
                prop_assert_eq!(t.peek(), least(&keys));
                prop_assert_eq!(t.min_key(), least(&keys).map_or(ABSENT, |w| w.key));
                was_big |= t.is_big();
                back |= was_big && !t.is_big();
            }
            // A map that merges keys 1 and 2 (a tie the shift creates) still yields the least
            // (key, round, position); so does a map of the rounds that keeps their order.
            t.map_keys(|k| if k == 2 { 1 } else { k });
            keys.iter_mut().filter(|k| k.0 == 2).for_each(|k| k.0 = 1);
            prop_assert_eq!(t.peek(), least(&keys));
            t.map_rounds(|r| r / 2 + 7);
            keys.iter_mut().for_each(|k| k.1 = k.1 / 2 + 7);
            prop_assert_eq!(t.peek(), least(&keys));
            let mut rounds: Vec<u32> = t.rounds().collect();
            let mut want: Vec<u32> = keys.iter().filter(|k| k.0 != ABSENT).map(|k| k.1).collect();
            rounds.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(rounds, want);
            let _ = (was_big, back);
        }

        #[test]
        fn keys_keep_the_float_order(a in proptest::num::f64::ANY, b in proptest::num::f64::ANY) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            prop_assert_eq!(from_ord_key(ord_key(a)).to_bits(), a.to_bits());
            if a < b { prop_assert!(ord_key(a) < ord_key(b)); }
            prop_assert!(ord_key(a) < ABSENT);
        }
    }

    /// Past BIG_AT entries the tree holds them, below SMALL_AT the heap again, and the least
    /// entry is the same all along.
    #[test]
    fn switches_between_the_heap_and_the_tree() {
        let n = 300u32;
        let mut t = Tourney::new((0..n).map(|p| 1000 + p).collect());
        for p in 0..n {
            // Keys from a few values, rounds falling: ties resolved by round, then position.
            t.set(p, 1000 + p, u64::from(p % 3), n - p);
            let want = (0..=p).min_by_key(|&q| (q % 3, n - q, q)).unwrap();
            assert_eq!(t.peek().map(|w| w.child), Some(1000 + want), "adding {p}");
            assert_eq!(t.is_big(), p + 1 > BIG_AT);
        }
        for p in 0..n {
            t.set(p, 1000 + p, ABSENT, 0);
            let want = (p + 1..n).min_by_key(|&q| (q % 3, n - q, q));
            assert_eq!(t.peek().map(|w| w.child), want.map(|q| 1000 + q), "removing {p}");
        }
        assert!(!t.is_big());
        assert_eq!(t.peek(), None);
    }

    #[test]
    fn an_empty_tree_has_no_winner() {
        assert_eq!(Tourney::new(vec![]).peek(), None);
        assert_eq!(Tourney::new(vec![]).min_key(), ABSENT);
        let mut t = Tourney::new(vec![7]);
        assert_eq!(t.peek(), None);
        t.set(0, 7, 3, 1);
        assert_eq!(t.peek(), Some(Win { key: 3, child: 7 }));
        t.set(0, 7, ABSENT, 0);
        assert_eq!(t.peek(), None);
    }
}
