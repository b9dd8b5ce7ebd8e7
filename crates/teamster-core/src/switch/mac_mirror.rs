//! The MAC table held twice: for a data plane that switches in the kernel, whose program keeps
//! its own copy of the learned entries (it learns from the frames it switches), while the
//! engine decides from its table what only it decides (a port's claim on its MAC, where a
//! punted frame goes).
//!
//! Model. Two directions, each a plain copy:
//! - engine to kernel: what the engine changes itself (learning from a frame it switched, a
//!   guest changing its MAC, a port or uplink removed, an entry aged out in its sweep) is kept
//!   in a [`Journal`] once [`Switch::keep_mac_changes`] is called, and taken by the data plane
//!   ([`Switch::take_mac_changes`]) to apply to the kernel's table. The journal is bounded
//!   ([`Journal::MAX`]); past it, it says so, and the data plane copies the kernel's table
//!   over again.
//! - kernel to engine: every so often the data plane reads the kernel's learned entries and
//!   gives them to [`Switch::mirror_learned`], which makes the engine's learned entries exactly
//!   those (its configured entries untouched, its counts recomputed).
//!
//! So the engine's sweep ages out what the kernel learned (the kernel's table has no sweep of
//! its own), and both tables hold the same entries, to within one copy.

use super::mac_table::{Location, MacChange};
use super::{MacTable, Switch};
use crate::wire::MacAddr;
use crate::Instant;

impl MacTable {
    /// Makes the learned entries exactly `learned` (each: VLAN, MAC, where, when heard), keeping
    /// the configured ones (a learned entry for a configured address is skipped), and counts
    /// them again. Records nothing in the journal.
    pub fn replace_learned(&mut self, learned: impl IntoIterator<Item = (Option<u16>, MacAddr, Location, Instant)>) {
        self.entries.retain(|_, e| e.seen.is_none());
        self.learned = 0;
        self.per_port.clear();
        for (vlan, mac, at, seen) in learned {
            if self.entries.contains_key(&(vlan, mac)) {
                continue;
            }
            self.entries
                .insert((vlan, mac), super::mac_table::Entry { at, seen: Some(seen) });
            self.learned += 1;
            if !matches!(at, Location::Remote(_)) {
                *self.per_port.entry(at).or_default() += 1;
            }
        }
    }
}

impl Switch {
    /// Starts keeping the changes the engine makes to its learned MAC entries (see the module
    /// documentation).
    pub fn keep_mac_changes(&mut self) {
        if self.macs.journal.is_none() {
            self.macs.journal = Some(Default::default());
        }
    }

    /// The changes kept since the last call, and whether some were lost (the journal was full:
    /// the caller copies the whole table instead).
    pub fn take_mac_changes(&mut self) -> (Vec<MacChange>, bool) {
        self.macs.journal.as_mut().map_or((Vec::new(), false), |j| j.take())
    }

    /// Makes the engine's learned MAC entries exactly `learned`, as the kernel's table holds
    /// them (see [`MacTable::replace_learned`]).
    pub fn mirror_learned(&mut self, learned: impl IntoIterator<Item = (Option<u16>, MacAddr, Location, Instant)>) {
        self.macs.replace_learned(learned);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::{Journal, MacLimits};
    use crate::teaming::{PortId, UplinkId};
    use core::time::Duration;

    fn mac(n: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, n])
    }

    #[test]
    fn the_engines_changes_are_kept_until_taken_and_bounded() {
        let mut t = MacTable::with_limits(
            Duration::from_secs(10),
            MacLimits {
                total: 100,
                per_port: 10,
            },
        );
        t.learn(None, mac(1), Location::Remote(UplinkId(0)), Instant::ZERO);
        assert!(t.journal.is_none(), "nothing kept unless asked");
        t.journal = Some(Journal::default());
        let at = Instant::ZERO + Duration::from_secs(1);
        t.learn(None, mac(2), Location::Port(PortId(1)), at);
        t.learn(None, mac(2), Location::Port(PortId(1)), at + Duration::from_secs(1)); // a refresh: not a change
        t.learn(None, mac(1), Location::Port(PortId(1)), at); // a move
        t.unlearn(None, mac(2), PortId(1));
        let late = Instant::ZERO + Duration::from_secs(30);
        t.expire(late);
        let (changes, overflowed) = t.journal.take().unwrap().take();
        let seen: Vec<(u8, bool)> = changes.iter().map(|c| (c.mac.0[5], c.learned.is_some())).collect();
        assert_eq!(seen, [(2, true), (1, true), (2, false), (1, false)]);
        assert!(!overflowed);
        let mut j = Journal::default();
        for i in 0..=Journal::MAX {
            j.push(None, mac((i % 250) as u8), None);
        }
        let (changes, overflowed) = j.take();
        assert_eq!(changes.len(), Journal::MAX);
        assert!(overflowed);
    }

    #[test]
    fn a_mirrored_table_keeps_its_configured_entries_and_counts_again() {
        let mut t = MacTable::with_limits(Duration::from_secs(300), MacLimits { total: 3, per_port: 2 });
        t.add_static(None, mac(9), PortId(1));
        t.learn(None, mac(1), Location::Port(PortId(1)), Instant::ZERO);
        let now = Instant::ZERO + Duration::from_secs(5);
        t.replace_learned([
            (None, mac(2), Location::Port(PortId(1)), now),
            (None, mac(3), Location::Port(PortId(1)), now),
            (None, mac(9), Location::Remote(UplinkId(0)), now), // configured here: skipped
            (Some(10), mac(4), Location::Remote(UplinkId(0)), now),
        ]);
        assert_eq!(t.lookup(None, mac(1), now), None);
        assert_eq!(t.lookup(None, mac(9), now), Some(Location::Port(PortId(1))));
        assert_eq!((t.learned(), t.learned_behind(PortId(1))), (3, 2));
        // The limits hold on the counts recomputed: the table is full.
        let r = t.learn(None, mac(5), Location::Remote(UplinkId(0)), now);
        assert_eq!(r, crate::switch::Learned::Refused);
    }
}
