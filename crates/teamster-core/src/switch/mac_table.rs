//! The MAC table: where each (VLAN, MAC) was last seen, with ageing.
//!
//! Port MACs from the configuration are static and never age. Learned entries expire `ageing`
//! after they were last refreshed (default 300 s, as on most switches); expiry is checked on
//! lookup and swept by [`MacTable::expire`].

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
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    at: Location,
    /// None: static.
    seen: Option<Instant>,
}

/// (VLAN or none, MAC) -> location.
#[derive(Debug, Clone)]
pub struct MacTable {
    entries: HashMap<(Option<u16>, MacAddr), Entry>,
    ageing: Duration,
}

impl MacTable {
    /// The default ageing time.
    pub const DEFAULT_AGEING: Duration = Duration::from_secs(300);

    pub fn new(ageing: Duration) -> MacTable {
        MacTable {
            entries: HashMap::new(),
            ageing,
        }
    }

    /// Pins a configured port MAC.
    pub fn add_static(&mut self, vlan: Option<u16>, mac: MacAddr, port: PortId) {
        self.entries.insert(
            (vlan, mac),
            Entry {
                at: Location::Port(port),
                seen: None,
            },
        );
    }

    /// Where `mac` lives in `vlan`, if known and not expired at `now`.
    pub fn lookup(&self, vlan: Option<u16>, mac: MacAddr, now: Instant) -> Option<Location> {
        let e = self.entries.get(&(vlan, mac))?;
        match e.seen {
            Some(t) if now - t >= self.ageing => None,
            _ => Some(e.at),
        }
    }

    /// Records that `mac` was seen at `at`; a static entry is never overwritten.
    pub fn learn(&mut self, vlan: Option<u16>, mac: MacAddr, at: Location, now: Instant) {
        if mac.is_multicast() {
            return;
        }
        let e = self.entries.entry((vlan, mac)).or_insert(Entry { at, seen: Some(now) });
        if e.seen.is_some() {
            *e = Entry { at, seen: Some(now) };
        }
    }

    /// Drops every learned entry older than the ageing time.
    pub fn expire(&mut self, now: Instant) {
        let ageing = self.ageing;
        self.entries.retain(|_, e| e.seen.is_none_or(|t| now - t < ageing));
    }

    /// Learned and static entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The ageing time.
    pub fn ageing(&self) -> Duration {
        self.ageing
    }
}
