//! Route based on IP hash, per flow: a frame with IP addresses takes `active[h mod n]`, where `h`
//! is [`super::ip_hash`](fn@super::ip_hash) over the addresses (`"ip-hash"`) or the addresses and TCP/UDP ports
//! (`"ip-hash-l4"`) and `n` the number of active uplinks. If that uplink is down, the flow takes a
//! rendezvous pick on `h` among the live active uplinks (so only the failed uplink's flows move),
//! else the first live standby. Frames without IP addresses take the port's current uplink, whose
//! home is the source-MAC one. Meant for a static EtherChannel upstream.

use super::policy::{PolicyEntry, PortView, TeamView, TeamingPolicy};
use super::source_mac::by_source_mac;
use super::{ip_hash, IpHashMode, Policy, PortSpec, UplinkId};
use crate::wire::FlowKey;

#[derive(Debug, Clone)]
struct IpHash(IpHashMode);

impl TeamingPolicy for IpHash {
    fn home(&self, team: &TeamView<'_>, port: &PortSpec) -> UplinkId {
        by_source_mac(team, port)
    }

    fn per_flow(&self) -> bool {
        true
    }

    fn select(&self, team: &TeamView<'_>, port: &PortView<'_>, flow: &FlowKey) -> Option<UplinkId> {
        let Some(h) = ip_hash(flow, self.0) else {
            return port.current();
        };
        let active = &team.order().active;
        let primary = active[h as usize % active.len()];
        if team.is_up(primary) {
            Some(primary)
        } else {
            team.fallback(u64::from(h), None)
        }
    }
}

static L3: PolicyEntry = PolicyEntry {
    name: "ip-hash",
    build: |_| Box::new(IpHash(IpHashMode::L3)),
};

static L3L4: PolicyEntry = PolicyEntry {
    name: "ip-hash-l4",
    build: |_| Box::new(IpHash(IpHashMode::L3L4)),
};

impl Policy {
    /// Route based on IP hash over the addresses: `"ip-hash"`.
    pub const IP_HASH: Policy = Policy::new(&L3);
    /// Route based on IP hash over the addresses and TCP/UDP ports: `"ip-hash-l4"`.
    pub const IP_HASH_L4: Policy = Policy::new(&L3L4);
}
