//! Route based on originating virtual port ID (vSphere's default): a port's home is
//! `active[port ID mod n]` over the group's `n` active uplinks, and every frame of the port takes
//! the port's current uplink (its home, or its failover choice while the home is down).

use super::policy::{PolicyEntry, TeamView, TeamingPolicy};
use super::{Policy, PortSpec, UplinkId};

#[derive(Debug, Clone)]
struct OriginatingPortId;

impl TeamingPolicy for OriginatingPortId {
    fn home(&self, team: &TeamView<'_>, port: &PortSpec) -> UplinkId {
        by_port_id(team, port)
    }
}

/// `active[port ID mod n]`; Load-Based Teaming starts from the same homes.
pub(super) fn by_port_id(team: &TeamView<'_>, port: &PortSpec) -> UplinkId {
    let active = &team.order().active;
    active[port.id.0 as usize % active.len()]
}

static ENTRY: PolicyEntry = PolicyEntry {
    name: "port-id",
    build: |_| Box::new(OriginatingPortId),
};

impl Policy {
    /// Route based on originating virtual port ID: `"port-id"`.
    pub const PORT_ID: Policy = Policy::new(&ENTRY);
}
