//! What the switch has decided, read-only, for a data plane that executes its decisions
//! elsewhere: the kernel fast path copies these into its tables, and switches each frame from
//! them as [`Switch::forward`] would (see `teamster-kernel`). Nothing here changes the switch.

use super::{Location, SecurityPolicy, Switch};
use crate::teaming::{PortId, UplinkId};
use crate::wire::MacAddr;
use crate::Instant;

/// One port as the switch treats its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSwitching {
    /// Its broadcast domain: its group's VLAN, or None (untagged).
    pub vlan: Option<u16>,
    /// True if its group is an overlay segment (its domain is not a VLAN).
    pub overlay: bool,
    /// Its configured MAC.
    pub mac: MacAddr,
    /// The MAC its guest changed to, if it did (MAC changes accepted, forged transmits not).
    pub changed: Option<MacAddr>,
    pub policy: SecurityPolicy,
    /// True if it owns its MAC (attached, no host outside contesting it): its frames need no
    /// decision about its claim.
    pub owned: bool,
    /// When it was last attached.
    pub attached_at: Instant,
}

/// One MAC-table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MacEntry {
    pub vlan: Option<u16>,
    pub mac: MacAddr,
    pub at: EntryAt,
    /// A configured port MAC (never ages).
    pub fixed: bool,
}

/// Where a MAC-table entry points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryAt {
    Port(PortId),
    Uplink(UplinkId),
    /// Behind a remote VTEP (overlays).
    Tunnel,
}

impl Switch {
    /// How the switch treats port `p`'s frames, if it has that port.
    pub fn port_switching(&self, p: PortId) -> Option<PortSwitching> {
        let g = self.guards.get(&p)?;
        Some(PortSwitching {
            vlan: g.vlan.filter(|_| super::overlay::segment_of(g.vlan).is_none()),
            overlay: super::overlay::segment_of(g.vlan).is_some(),
            mac: g.mac,
            changed: g.changed,
            policy: g.policy,
            owned: g.claim.state == super::Claim::Owned,
            attached_at: g.claim.attached_at,
        })
    }

    /// Uplink `u`'s own MAC, if the data plane told it ([`Switch::set_uplink_mac`]).
    pub fn uplink_mac(&self, u: UplinkId) -> Option<MacAddr> {
        self.uplink_macs.get(u.0).copied().flatten()
    }

    /// True if some port group asks for link-local frames (LLDP) from its uplinks.
    pub fn asks_link_local(&self) -> bool {
        self.security.iter().any(|s| !s.link_local.is_none())
    }

    /// True if some port group is an overlay segment.
    pub fn has_overlays(&self) -> bool {
        self.segments.iter().any(Option::is_some)
    }

    /// Adds `delta` to the counters of the port or uplink `at`: what a data plane that switches
    /// frames elsewhere (the kernel fast path) counted there.
    pub fn add_counts(&mut self, at: super::Ingress, delta: &super::Counters) {
        match at {
            super::Ingress::Port(p) => {
                if let Some(c) = self.ports.get_mut(&p) {
                    c.add(delta);
                }
            }
            super::Ingress::Uplink(u) => {
                if let Some(c) = self.uplinks.get_mut(u.0) {
                    c.add(delta);
                }
            }
        }
    }

    /// Every MAC-table entry not expired at `now`, sorted.
    pub fn mac_entries(&self, now: Instant) -> Vec<MacEntry> {
        let mut all: Vec<MacEntry> = self
            .macs
            .entries(now)
            .map(|(vlan, mac, at, fixed)| MacEntry {
                vlan,
                mac,
                at: match at {
                    Location::Port(p) => EntryAt::Port(p),
                    Location::Remote(u) => EntryAt::Uplink(u),
                    Location::Tunnel(_) => EntryAt::Tunnel,
                },
                fixed,
            })
            .collect();
        all.sort();
        all
    }
}
