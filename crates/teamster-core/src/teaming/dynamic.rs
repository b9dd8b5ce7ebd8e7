//! Dynamic (Windows Server's recommended distribution) and its load-based variant.
//!
//! Sending is per flowlet ([`super::flowlet`]): a flow changes member only after an idle gap
//! at least the group's flowlet gap, so TCP sees no reordering and a single long flow stays on
//! one member; a flow's first flowlet takes the least loaded member (by the same measure the
//! rebalance uses), and every rebalance interval the flowlet targets are evened out by measured
//! load. Receiving is as Hyper-V Port: each port is affinitised to one member (the one home to the
//! fewest of the group's ports), announces its MAC and takes its flooded frames there, and
//! sends address resolution there; in switch-independent mode what it sends on other members
//! carries their MACs as source, so its inbound traffic arrives on its own member.
//!
//! - `dynamic` evens out *bytes* per member, as Windows does (its documentation says the
//!   algorithms ignore link speed): on a 10 GbE + 1 GbE team it loads the 1 GbE member as much
//!   as the 10 GbE one.
//! - `lbt-dynamic` combines Load-Based Teaming with Dynamic: it moves flowlets, not ports (so
//!   it can split one busy VM's flows, which LBT cannot), only while a member's utilisation of
//!   its capacity exceeds the LBT threshold (default 75 %), towards the member with the most
//!   headroom relative to its speed, only for a move that lowers the pair's higher utilisation
//!   by at least a tenth, and a moved flowlet bucket stays at least two intervals (damped:
//!   no oscillation, no moves while the team has room). Receiving is as `dynamic`.

use super::flowlet::{Balance, BucketState, Flowlets};
use super::hyperv_port::{least_homed, port_receives_on_its_uplink};
use super::policy::{
    FlowletCounters, MemberShare, PolicyEntry, PolicyKnobs, PortView, Rehome, TeamView, TeamingPolicy,
};
use super::{Policy, PortSpec, UplinkId};
use crate::wire::FlowKey;
use crate::Instant;

#[derive(Debug, Clone)]
struct Dynamic {
    flowlets: Flowlets,
    balance: Balance,
}

impl Dynamic {
    fn new(knobs: &PolicyKnobs, balance: Balance) -> Box<Dynamic> {
        Box::new(Dynamic {
            flowlets: Flowlets::new(&knobs.tuning),
            balance,
        })
    }
}

impl TeamingPolicy for Dynamic {
    fn home(&self, team: &TeamView<'_>, port: &PortSpec) -> UplinkId {
        least_homed(team, port)
    }

    fn per_flow(&self) -> bool {
        true
    }

    fn rewrites_source(&self) -> bool {
        true
    }

    fn select(&self, team: &TeamView<'_>, port: &PortView<'_>, flow: &FlowKey) -> Option<UplinkId> {
        self.flowlets.peek(team, port, flow, self.balance)
    }

    fn select_frame(
        &mut self,
        team: &TeamView<'_>,
        port: &PortView<'_>,
        flow: &FlowKey,
        len: usize,
        now: Instant,
    ) -> Option<UplinkId> {
        self.flowlets.send(team, port, flow, len, self.balance, now)
    }

    fn receive_uplink(&self, team: &TeamView<'_>, port: Option<&PortView<'_>>) -> Option<UplinkId> {
        port_receives_on_its_uplink(team, port)
    }

    fn poll_at(&self) -> Option<Instant> {
        Some(self.flowlets.poll_at())
    }

    fn handle_timeout(&mut self, team: &TeamView<'_>, now: Instant) -> Vec<Rehome> {
        self.flowlets.rebalance(team, self.balance, now);
        Vec::new()
    }

    fn uplink_removed(&mut self, removed: UplinkId) {
        self.flowlets.uplink_removed(removed);
    }

    fn member_shares(&self, team: &TeamView<'_>, now: Instant) -> Option<Vec<MemberShare>> {
        Some(self.flowlets.shares(team, now))
    }

    fn flowlet_counters(&self) -> Option<FlowletCounters> {
        Some(self.flowlets.counters)
    }

    fn flowlet_buckets(&self) -> Option<Vec<BucketState>> {
        Some(self.flowlets.buckets())
    }

    fn flowlet_seen(&mut self, team: &TeamView<'_>, b: usize, seen: BucketState, bytes: u64, at: Instant) {
        self.flowlets.seen(team, b, seen, bytes, at);
    }
}

static DYNAMIC: PolicyEntry = PolicyEntry {
    name: "dynamic",
    build: |knobs| Dynamic::new(knobs, Balance::Bytes),
};

static LBT_DYNAMIC: PolicyEntry = PolicyEntry {
    name: "lbt-dynamic",
    build: |knobs| {
        Dynamic::new(
            knobs,
            Balance::Utilisation {
                threshold: knobs.lbt.threshold,
            },
        )
    },
};

impl Policy {
    /// Windows Server's Dynamic: flowlets balanced by bytes, receive as Hyper-V Port: `"dynamic"`.
    pub const DYNAMIC: Policy = Policy::new(&DYNAMIC);
    /// Dynamic's flowlets balanced by utilisation over the LBT threshold, damped:
    /// `"lbt-dynamic"`.
    pub const LBT_DYNAMIC: Policy = Policy::new(&LBT_DYNAMIC);
}
