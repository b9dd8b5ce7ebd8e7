//! The MAC table: where each (VLAN, MAC) was last seen, with ageing and bounded size.
//!
//! Port MACs from the configuration are static and never age. Learned entries expire `ageing`
//! after they were last refreshed (default 300 s, as on most switches); expiry is checked on
//! lookup and swept by [`MacTable::expire`], which also gives memory back to the system when a
//! flood has left the map much larger than what it now holds.
//!
//! Learned entries are bounded ([`MacLimits`]): at most `total` in all, and at most `per_port`
//! behind any one VM port or remote VTEP (so one overlay peer cannot fill the table). Uplinks share the total (the physical network has as many hosts as
//! it has). Past a limit a new address is not learned: the frame is still switched (as a
//! production switch does: forward, do not learn), traffic to that address is flooded as
//! unknown unicast until an entry frees up, and the refusal is counted by the caller. Static
//! entries do not count against the limits. An entry moving to a port that is at its limit is
//! forgotten rather than left pointing at its old place.

use crate::teaming::{PortId, UplinkId};
use crate::wire::MacAddr;
use crate::Instant;
use core::time::Duration;
use std::collections::HashMap;

/// Where a MAC lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// Behind a local port.
    Port(PortId),
    /// Somewhere beyond the uplinks (last seen arriving on this one).
    Remote(UplinkId),
    /// Behind this remote VTEP, in an overlay segment.
    Tunnel(core::net::Ipv4Addr),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) at: Location,
    /// None: static.
    pub(super) seen: Option<Instant>,
}

/// How many learned addresses the table holds at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacLimits {
    /// Learned entries in all.
    pub total: usize,
    /// Learned entries behind one VM port.
    pub per_port: usize,
}

impl MacLimits {
    /// The largest `total` a configuration may set (about 50 MB of table).
    pub const MAX: usize = 1 << 20;
}

impl Default for MacLimits {
    /// 16,384 in all, 4,096 per port (vSphere's default MAC-learning limit per port).
    fn default() -> MacLimits {
        MacLimits {
            total: 16_384,
            per_port: 4_096,
        }
    }
}

/// What [`MacTable::learn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// Already known there (refreshed), a static entry, or not an address to learn.
    Known,
    /// A new entry, or an entry moved from elsewhere.
    Added,
    /// Not learned: a limit was reached.
    Refused,
}

/// (VLAN or none, MAC) -> location, bounded.
#[derive(Debug, Clone)]
pub struct MacTable {
    pub(super) entries: HashMap<(Option<u16>, MacAddr), Entry>,
    ageing: Duration,
    limits: MacLimits,
    /// Learned entries held (expired ones included until swept).
    pub(super) learned: usize,
    /// Learned entries held behind each port (ports with none are absent).
    /// Learned entries behind each port and each remote VTEP (both bounded by `per_port`).
    pub(super) per_port: HashMap<Location, usize>,
    /// Changes to learned entries, kept for a data plane that holds a copy of the table (see
    /// [`super::mac_mirror`]); None unless asked for.
    pub(super) journal: Option<Journal>,
}

impl MacTable {
    /// The default ageing time.
    pub const DEFAULT_AGEING: Duration = Duration::from_secs(300);

    pub fn new(ageing: Duration) -> MacTable {
        MacTable::with_limits(ageing, MacLimits::default())
    }

    pub fn with_limits(ageing: Duration, limits: MacLimits) -> MacTable {
        MacTable {
            entries: HashMap::new(),
            ageing,
            limits,
            learned: 0,
            per_port: HashMap::new(),
            journal: None,
        }
    }

    /// Pins a configured port MAC.
    pub fn add_static(&mut self, vlan: Option<u16>, mac: MacAddr, port: PortId) {
        let old = self.entries.insert(
            (vlan, mac),
            Entry {
                at: Location::Port(port),
                seen: None,
            },
        );
        if let Some(old) = old.filter(|e| e.seen.is_some()) {
            self.forget(old.at);
            self.note(vlan, mac, None);
        }
    }

    /// Where `mac` lives in `vlan`, if known and not expired at `now`.
    pub fn lookup(&self, vlan: Option<u16>, mac: MacAddr, now: Instant) -> Option<Location> {
        let e = self.entries.get(&(vlan, mac))?;
        match e.seen {
            Some(t) if now - t >= self.ageing => None,
            _ => Some(e.at),
        }
    }

    /// Where `mac` lives in `vlan` and when it was last seen (None: static), if known and not
    /// expired at `now`.
    pub fn heard(&self, vlan: Option<u16>, mac: MacAddr, now: Instant) -> Option<(Location, Option<Instant>)> {
        let e = self.entries.get(&(vlan, mac))?;
        match e.seen {
            Some(t) if now - t >= self.ageing => None,
            seen => Some((e.at, seen)),
        }
    }

    /// Removes `port`'s static entry for `mac` in `vlan`, if it has one (the port gave the
    /// address up).
    pub fn remove_static(&mut self, vlan: Option<u16>, mac: MacAddr, port: PortId) {
        if self.static_port(vlan, mac) == Some(port) {
            self.entries.remove(&(vlan, mac));
        }
    }

    /// Every MAC behind a local port and not expired at `now`, with its VLAN (or overlay
    /// segment) and port, in no particular order.
    pub fn port_macs(&self, now: Instant) -> impl Iterator<Item = (Option<u16>, MacAddr, PortId)> + '_ {
        self.entries
            .iter()
            .filter_map(move |((vlan, mac), e)| match (e.at, e.seen) {
                (_, Some(t)) if now - t >= self.ageing => None,
                (Location::Port(p), _) => Some((*vlan, *mac, p)),
                _ => None,
            })
    }

    /// Every entry not expired at `now`: VLAN (or overlay segment), MAC, where, and whether
    /// it is static; in no particular order.
    pub fn entries(&self, now: Instant) -> impl Iterator<Item = (Option<u16>, MacAddr, Location, bool)> + '_ {
        self.entries.iter().filter_map(move |((vlan, mac), e)| match e.seen {
            Some(t) if now - t >= self.ageing => None,
            seen => Some((*vlan, *mac, e.at, seen.is_none())),
        })
    }

    /// The port `mac` is configured on in `vlan`, if it is a static entry.
    pub fn static_port(&self, vlan: Option<u16>, mac: MacAddr) -> Option<PortId> {
        match self.entries.get(&(vlan, mac))? {
            Entry {
                at: Location::Port(p),
                seen: None,
            } => Some(*p),
            _ => None,
        }
    }

    /// Records that `mac` was seen at `at`, within the limits; a static entry is never
    /// overwritten, and group and zero addresses are never learned.
    pub fn learn(&mut self, vlan: Option<u16>, mac: MacAddr, at: Location, now: Instant) -> Learned {
        if mac.is_multicast() || mac == MacAddr([0; 6]) {
            return Learned::Known;
        }
        let key = (vlan, mac);
        let old = match self.entries.get_mut(&key) {
            Some(Entry { seen: None, .. }) => return Learned::Known,
            Some(e) if e.at == at => {
                e.seen = Some(now);
                return Learned::Known;
            }
            Some(e) => Some(e.at),
            None => None,
        };
        let port_full = match at {
            Location::Port(_) | Location::Tunnel(_) => {
                self.per_port.get(&at).copied().unwrap_or(0) >= self.limits.per_port
            }
            Location::Remote(_) => false,
        };
        if let Some(from) = old {
            self.entries.remove(&key);
            self.forget(from);
        }
        if port_full || self.learned >= self.limits.total {
            if old.is_some() {
                self.note(vlan, mac, None);
            }
            return Learned::Refused;
        }
        self.entries.insert(key, Entry { at, seen: Some(now) });
        self.note(vlan, mac, Some((at, now)));
        self.learned += 1;
        if !matches!(at, Location::Remote(_)) {
            *self.per_port.entry(at).or_default() += 1;
        }
        Learned::Added
    }

    /// Forgets a learned entry for `mac` if it is behind `port` (a guest changed its MAC again).
    pub fn unlearn(&mut self, vlan: Option<u16>, mac: MacAddr, port: PortId) {
        let key = (vlan, mac);
        if let Some(e) = self
            .entries
            .get(&key)
            .filter(|e| e.seen.is_some() && e.at == Location::Port(port))
        {
            let at = e.at;
            self.entries.remove(&key);
            self.forget(at);
            self.note(vlan, mac, None);
        }
    }

    /// Forgets everything behind `port`, static and learned (the port left the switch), so no
    /// frame is forwarded to it and a port that later takes its ID starts with a clean table.
    pub fn remove_port(&mut self, port: PortId) {
        let at = Location::Port(port);
        let before = self.entries.len();
        let mut learned = 0;
        let mut gone = Vec::new();
        self.entries.retain(|k, e| {
            let behind = e.at == at;
            learned += usize::from(behind && e.seen.is_some());
            if behind && e.seen.is_some() {
                gone.push(*k);
            }
            !behind
        });
        for (vlan, mac) in gone {
            self.note(vlan, mac, None);
        }
        if before != self.entries.len() {
            self.learned -= learned;
            self.per_port.remove(&at);
        }
    }

    /// Forgets the addresses last seen on uplink `u` (it left the team; they are learned again
    /// on the uplink they next arrive on) and renumbers those on the uplinks after it, which
    /// moved down one index.
    pub fn remove_uplink(&mut self, u: UplinkId) {
        let before = self.entries.len();
        let mut gone = Vec::new();
        self.entries.retain(|k, e| {
            let behind = e.at == Location::Remote(u);
            if behind {
                gone.push(*k);
            }
            !behind
        });
        for (vlan, mac) in gone {
            self.note(vlan, mac, None);
        }
        // Static entries are ports': every entry forgotten was learned.
        self.learned -= before - self.entries.len();
        for e in self.entries.values_mut() {
            if let Location::Remote(v) = e.at {
                if v > u {
                    e.at = Location::Remote(UplinkId(v.0 - 1));
                }
            }
        }
    }

    /// Updates the counts for a learned entry at `at` that was removed.
    fn forget(&mut self, at: Location) {
        self.learned -= 1;
        if let Some(n) = self.per_port.get_mut(&at) {
            *n -= 1;
            if *n == 0 {
                self.per_port.remove(&at);
            }
        }
    }

    /// Drops every learned entry older than the ageing time, and shrinks the map if it is
    /// mostly empty (after a flood), so memory follows what the table holds.
    pub fn expire(&mut self, now: Instant) {
        let ageing = self.ageing;
        let (learned, per_port, journal) = (&mut self.learned, &mut self.per_port, &mut self.journal);
        self.entries.retain(|(vlan, mac), e| {
            let keep = e.seen.is_none_or(|t| now - t < ageing);
            if !keep {
                *learned -= 1;
                if let Some(n) = per_port.get_mut(&e.at) {
                    *n -= 1;
                }
                if let Some(j) = journal.as_mut() {
                    j.push(*vlan, *mac, None);
                }
            }
            keep
        });
        per_port.retain(|_, n| *n > 0);
        let len = self.entries.len();
        if self.entries.capacity() > 4 * len.max(256) {
            self.entries.shrink_to(2 * len);
        }
    }

    /// Learned and static entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Learned entries held (expired ones included until the next sweep).
    pub fn learned(&self) -> usize {
        self.learned
    }

    /// Learned entries held behind port `p`.
    pub fn learned_behind(&self, p: PortId) -> usize {
        self.per_port.get(&Location::Port(p)).copied().unwrap_or(0)
    }

    /// Entries the map has room for without growing (a measure of its memory).
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// The map's memory, roughly: its buckets and their control bytes.
    pub fn approx_bytes(&self) -> usize {
        self.entries.capacity() * (size_of::<((Option<u16>, MacAddr), Entry)>() + 1)
    }

    /// The ageing time.
    pub fn ageing(&self) -> Duration {
        self.ageing
    }

    /// The limits on learned entries.
    pub fn limits(&self) -> MacLimits {
        self.limits
    }
}

/// One change to a learned entry: learned (or moved) at a place, or forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacChange {
    pub vlan: Option<u16>,
    pub mac: MacAddr,
    /// Where, and when heard; None: forgotten.
    pub learned: Option<(Location, Instant)>,
}

/// Changes since the data plane last took them, bounded.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    changes: Vec<MacChange>,
    overflowed: bool,
}

impl Journal {
    /// Changes kept at most between two takes: a flood of new addresses past it is copied back
    /// from the kernel's table whole.
    pub const MAX: usize = 8192;

    pub(super) fn push(&mut self, vlan: Option<u16>, mac: MacAddr, learned: Option<(Location, Instant)>) {
        if self.changes.len() >= Self::MAX {
            self.overflowed = true;
            return;
        }
        self.changes.push(MacChange { vlan, mac, learned });
    }

    /// The changes kept, and whether some were lost; the journal starts again empty.
    pub(super) fn take(&mut self) -> (Vec<MacChange>, bool) {
        (std::mem::take(&mut self.changes), std::mem::take(&mut self.overflowed))
    }
}

impl MacTable {
    /// Records a change to a learned entry, if changes are kept (see [`super::mac_mirror`]).
    pub(super) fn note(&mut self, vlan: Option<u16>, mac: MacAddr, learned: Option<(Location, Instant)>) {
        if let Some(j) = self.journal.as_mut() {
            j.push(vlan, mac, learned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u32) -> MacAddr {
        let b = n.to_be_bytes();
        MacAddr([0x02, 0, b[0], b[1], b[2], b[3]])
    }

    #[test]
    fn limits_refuse_new_addresses_and_moves_into_a_full_port() {
        let limits = MacLimits { total: 4, per_port: 2 };
        let mut t = MacTable::with_limits(MacTable::DEFAULT_AGEING, limits);
        let (p, up) = (Location::Port(PortId(1)), Location::Remote(UplinkId(0)));
        let now = Instant::ZERO;
        t.add_static(None, mac(100), PortId(2));
        assert_eq!(t.learn(None, mac(1), p, now), Learned::Added);
        assert_eq!(t.learn(None, mac(2), p, now), Learned::Added);
        assert_eq!(t.learn(None, mac(3), p, now), Learned::Refused, "per port");
        assert_eq!(t.learn(None, mac(2), p, now), Learned::Known, "refresh is free");
        assert_eq!(t.learn(None, mac(3), up, now), Learned::Added);
        assert_eq!(t.learn(None, mac(4), up, now), Learned::Added);
        assert_eq!(t.learn(None, mac(5), up, now), Learned::Refused, "total");
        assert_eq!(t.learn(None, mac(100), up, now), Learned::Known, "static stays");
        assert_eq!((t.learned(), t.learned_behind(PortId(1)), t.len()), (4, 2, 5));
        // mac(3) moves behind the full port: forgotten, not left on the uplink.
        assert_eq!(t.learn(None, mac(3), p, now), Learned::Refused);
        assert_eq!(t.lookup(None, mac(3), now), None);
        assert_eq!(t.learned(), 3);
        t.unlearn(None, mac(1), PortId(1));
        assert_eq!((t.learned(), t.learned_behind(PortId(1))), (2, 1));
        assert_eq!(t.learn(None, mac(3), p, now), Learned::Added, "room again");
        t.expire(Instant::from_secs(301));
        assert_eq!((t.learned(), t.learned_behind(PortId(1)), t.len()), (0, 0, 1));
    }

    /// An uplink leaving forgets what was learned on it (freeing room under the limit) and
    /// renumbers what was learned on the uplinks after it.
    #[test]
    fn an_uplink_removed_forgets_its_addresses_and_renumbers_the_rest() {
        let mut t = MacTable::with_limits(MacTable::DEFAULT_AGEING, MacLimits { total: 3, per_port: 3 });
        let now = Instant::ZERO;
        t.add_static(None, mac(100), PortId(1));
        for (m, u) in [(1, 0), (2, 1), (3, 2)] {
            assert_eq!(
                t.learn(None, mac(m), Location::Remote(UplinkId(u)), now),
                Learned::Added
            );
        }
        t.remove_uplink(UplinkId(1));
        assert_eq!(t.lookup(None, mac(2), now), None);
        assert_eq!(t.lookup(None, mac(1), now), Some(Location::Remote(UplinkId(0))));
        assert_eq!(t.lookup(None, mac(3), now), Some(Location::Remote(UplinkId(1))));
        assert_eq!(t.lookup(None, mac(100), now), Some(Location::Port(PortId(1))));
        assert_eq!((t.learned(), t.len()), (2, 3));
        assert_eq!(
            t.learn(None, mac(4), Location::Remote(UplinkId(0)), now),
            Learned::Added,
            "room again"
        );
    }
}
