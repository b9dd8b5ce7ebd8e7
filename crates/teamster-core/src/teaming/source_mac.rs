//! Route based on source MAC hash: a port's home is `active[FNV-1a(MAC) mod n]` over the group's
//! `n` active uplinks ([`super::source_mac_hash`]), and every frame of the port takes the port's
//! current uplink.

use super::policy::{PolicyEntry, TeamView, TeamingPolicy};
use super::{source_mac_hash, Policy, PortSpec, UplinkId};

#[derive(Debug, Clone)]
struct SourceMacHash;

impl TeamingPolicy for SourceMacHash {
    fn home(&self, team: &TeamView<'_>, port: &PortSpec) -> UplinkId {
        by_source_mac(team, port)
    }
}

/// `active[FNV-1a(MAC) mod n]`; IP hash homes its ports' non-IP frames the same way.
pub(super) fn by_source_mac(team: &TeamView<'_>, port: &PortSpec) -> UplinkId {
    let active = &team.order().active;
    active[source_mac_hash(port.mac) as usize % active.len()]
}

static ENTRY: PolicyEntry = PolicyEntry {
    name: "source-mac",
    build: |_| Box::new(SourceMacHash),
};

impl Policy {
    /// Route based on source MAC hash: `"source-mac"`.
    pub const SOURCE_MAC: Policy = Policy::new(&ENTRY);
}
