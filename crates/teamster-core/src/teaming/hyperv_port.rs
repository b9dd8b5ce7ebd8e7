//! Hyper-V Port (Windows Server's per-vSwitch-port distribution): every frame of a port, sent
//! and received, uses one member, so one VM never exceeds one member's bandwidth.
//!
//! A joining port's home is the group's active uplink that is home to the fewest of the group's
//! other ports (ties to the first in failover order): spread by port, not by a hash of its ID or
//! MAC, so `n` ports over `n` members use every member whatever their IDs (a VM may own several
//! MACs; the port is what Windows affinitises). In switch-independent mode the port also takes
//! flooded frames on its own uplink, and a RARP from its MAC on that uplink (notify switches)
//! makes the physical switch learn it there, so it receives there too.

use super::policy::{PolicyEntry, PortView, TeamView, TeamingPolicy};
use super::{Policy, PortSpec, UplinkId};

#[derive(Debug, Clone)]
struct HyperVPort;

impl TeamingPolicy for HyperVPort {
    fn home(&self, team: &TeamView<'_>, port: &PortSpec) -> UplinkId {
        least_homed(team, port)
    }

    fn receive_uplink(&self, team: &TeamView<'_>, port: Option<&PortView<'_>>) -> Option<UplinkId> {
        port_receives_on_its_uplink(team, port)
    }
}

/// The active uplink home to the fewest other ports of the group, first in order on a tie;
/// Dynamic affinitises its ports the same way.
pub(super) fn least_homed(team: &TeamView<'_>, port: &PortSpec) -> UplinkId {
    let active = &team.order().active;
    let mut count = vec![0usize; active.len()];
    for p in team.ports().filter(|p| p.group() == team.group() && p.id() != port.id) {
        if let Some(i) = active.iter().position(|u| *u == p.home()) {
            count[i] += 1;
        }
    }
    let best = (0..active.len()).min_by_key(|&i| (count[i], i)).unwrap_or(0);
    active[best]
}

/// A port takes floods on its current uplink (the group, on its first live one): each port
/// gets the one copy the physical switch sends to the member that port lives on.
pub(super) fn port_receives_on_its_uplink(team: &TeamView<'_>, port: Option<&PortView<'_>>) -> Option<UplinkId> {
    match port {
        Some(p) => p.current(),
        None => team.first_live(),
    }
}

static ENTRY: PolicyEntry = PolicyEntry {
    name: "hyperv-port",
    build: |_| Box::new(HyperVPort),
};

impl Policy {
    /// Windows Server's Hyper-V Port: `"hyperv-port"`.
    pub const HYPERV_PORT: Policy = Policy::new(&ENTRY);
}
