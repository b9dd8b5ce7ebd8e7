//! The teaming-policy trait, the read-only view of the team a policy decides from, and
//! [`Policy`], a policy's name.
//!
//! Model. A port group balances its load with one [`TeamingPolicy`] instance, built for the group
//! from its registry entry ([`PolicyEntry`]) when the group is added or its policy changes, and
//! owned by the team. The team keeps link state, the failover order, every port's home and
//! current uplink, and the load meters; it applies failover itself. A policy decides, from a
//! [`TeamView`] of the team and of its own group:
//! - a joining port's *home*, one of the group's active uplinks ([`TeamingPolicy::home`]);
//! - the uplink of each sent frame. A per-port policy answers nothing per frame: every frame of
//!   a port uses the port's current uplink, and the team returns it without calling the policy.
//!   A per-flow policy ([`TeamingPolicy::per_flow`]) is asked for every frame, as a pure query
//!   ([`TeamingPolicy::select`]) or as the frame is sent ([`TeamingPolicy::select_frame`], which
//!   sees the frame's length and `now` and may update per-flow state);
//! - the uplink a group, or one port, receives flooded frames on ([`TeamingPolicy::receive_uplink`]);
//! - timed work ([`TeamingPolicy::poll_at`], [`TeamingPolicy::handle_timeout`], as the team's
//!   own timers): re-homing ports, returned as [`Rehome`]s that the team checks, applies,
//!   reports and announces to the physical switches;
//! - whether failover places the group's ports by load rather than by hash
//!   ([`TeamingPolicy::places_by_load`]).
//!
//! A policy keeps state per group (`&mut self`), is sans-IO and deterministic like the team.
//! Adding a policy is one file (the trait, a `PolicyEntry` and a `Policy` constant) and one line
//! in the [registry](super::registry).

use super::lbt::LbtConfig;
pub use super::state::Rates;
use super::state::{PortState, UplinkState};
use super::tuning::PolicyTuning;
use super::{rendezvous_pick, FailoverOrder, GroupId, MoveReason, PortGroupSpec, PortId, PortSpec, UplinkId};
use crate::wire::FlowKey;
use crate::Instant;
use core::fmt;
use core::str::FromStr;

/// A port group's load-balancing policy, decided per group (see the [module documentation](self)).
pub trait TeamingPolicy: PolicyClone + fmt::Debug + Send {
    /// The home of `port`, which joins the group (or whose group was reconfigured): one of
    /// `team.order().active`, which is never empty.
    fn home(&self, team: &TeamView<'_>, port: &PortSpec) -> UplinkId;

    /// True if frames of one port may take different uplinks: the team then asks
    /// [`TeamingPolicy::select`] for every frame. False (the default): a port's frames all take
    /// the port's current uplink.
    fn per_flow(&self) -> bool {
        false
    }

    /// The uplink for a frame of `port` with flow key `flow`, without changing any state.
    fn select(&self, team: &TeamView<'_>, port: &PortView<'_>, flow: &FlowKey) -> Option<UplinkId> {
        let _ = (team, flow);
        port.current()
    }

    /// The uplink for a frame of `len` bytes that `port` sends at `now`; a policy that keeps
    /// per-flow state (flowlets) records the frame here. Default: [`TeamingPolicy::select`].
    fn select_frame(
        &mut self,
        team: &TeamView<'_>,
        port: &PortView<'_>,
        flow: &FlowKey,
        len: usize,
        now: Instant,
    ) -> Option<UplinkId> {
        let _ = (len, now);
        self.select(team, port, flow)
    }

    /// The uplink on which the group (`port` None) or one port takes in flooded frames
    /// (broadcast, multicast, unknown unicast). Default: one per group, its first live active
    /// uplink, else its first live standby, so that frames a physical switch floods to every
    /// member are taken in once.
    fn receive_uplink(&self, team: &TeamView<'_>, port: Option<&PortView<'_>>) -> Option<UplinkId> {
        let _ = port;
        team.first_live()
    }

    /// True if the policy sends one port's frames on several members (per flow) while the port
    /// receives on one: in a switch-independent group the switch then sends a frame on a member
    /// other than the port's own with that member's MAC as its source, and the port's
    /// broadcasts and multicasts on its own member (Windows Server's rule for Address Hash and
    /// Dynamic), so no physical switch sees the port's MAC move between its ports. Default:
    /// false (IP hash, meant for a static bundle, keeps the VM's MAC, as vSphere does).
    fn rewrites_source(&self) -> bool {
        false
    }

    /// True if failover places this group's ports by load, where their resulting utilisation is
    /// lowest, rather than by the load-blind rendezvous hash (see [`super::failover`]).
    fn places_by_load(&self) -> bool {
        false
    }

    /// When [`TeamingPolicy::handle_timeout`] next has work, if ever.
    fn poll_at(&self) -> Option<Instant> {
        None
    }

    /// Runs the policy's timed work due at `now`; returns the ports to re-home.
    fn handle_timeout(&mut self, team: &TeamView<'_>, now: Instant) -> Vec<Rehome> {
        let _ = (team, now);
        Vec::new()
    }

    /// What [`TeamingPolicy::handle_timeout`] would re-home at `now` if its timer were due,
    /// without changing any state: for operators and benchmarks.
    fn preview(&self, team: &TeamView<'_>, now: Instant) -> Vec<Rehome> {
        let _ = (team, now);
        Vec::new()
    }

    /// Uplink `removed` left the team (no group listed it) and the uplinks after it moved down
    /// one index: a policy that keeps uplink IDs in its state renumbers them. None does today.
    fn uplink_removed(&mut self, removed: UplinkId) {
        let _ = removed;
    }

    /// For a flowlet policy, each member's share of the group's sending at `now` (None: the
    /// policy keeps no per-flow state).
    fn member_shares(&self, team: &TeamView<'_>, now: Instant) -> Option<Vec<MemberShare>> {
        let _ = (team, now);
        None
    }

    /// For a flowlet policy, its counters.
    fn flowlet_counters(&self) -> Option<FlowletCounters> {
        None
    }

    /// For a flowlet policy, every bucket's state (see [`BucketState`]).
    fn flowlet_buckets(&self) -> Option<Vec<BucketState>> {
        None
    }

    /// For a flowlet policy, what a data plane that sends on its own saw of bucket `b` and the
    /// bytes it sent since it last told, as of `at` ([`super::flowlet::Flowlets`]'s `seen`).
    fn flowlet_seen(&mut self, team: &TeamView<'_>, b: usize, seen: BucketState, bytes: u64, at: Instant) {
        let _ = (team, b, seen, bytes, at);
    }
}

/// What a data plane that sends without the engine (the kernel fast path) needs of a bucket,
/// and tells the engine back: the member its frames take now, when it last sent and when its
/// last flowlet started. Its target is the engine's alone (`Flowlets::buckets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BucketState {
    /// The member set by the engine (rebalance, or the bucket's first frame); None: the bucket
    /// has not sent yet, and its first frame is the engine's to place.
    pub target: Option<UplinkId>,
    /// The member its frames take until its next flowlet.
    pub current: Option<UplinkId>,
    pub last_seen: Option<Instant>,
    pub flowlet_at: Option<Instant>,
}

/// Counters of a group's flowlet table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowletCounters {
    /// Flowlets that started on another member than the previous one (after an idle gap).
    pub flowlet_moves: u64,
    /// Buckets moved at once because their member failed or left the group.
    pub forced_moves: u64,
    /// Targets moved by rebalancing.
    pub retargets: u64,
}

/// One member's share of a group's buckets, for operators and the dashboard.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemberShare {
    pub uplink: UplinkId,
    /// Buckets whose frames go there now and that sent within the last interval.
    pub active_buckets: u32,
    /// Their decayed load, in bits/s.
    pub bps: f64,
}

/// A policy's decision to give a port of its group a new home (and move it there now).
#[derive(Debug, Clone, PartialEq)]
pub struct Rehome {
    pub port: PortId,
    pub to: UplinkId,
    pub reason: MoveReason,
}

/// Lets the team, and so a [`crate::switch::Switch`], be cloned with its policies' state. Every
/// `TeamingPolicy` that is `Clone` has it. (Six lines; the `dyn-clone` crate is not worth a
/// dependency for them.)
pub trait PolicyClone {
    fn clone_box(&self) -> Box<dyn TeamingPolicy>;
}

impl<T: TeamingPolicy + Clone + 'static> PolicyClone for T {
    fn clone_box(&self) -> Box<dyn TeamingPolicy> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn TeamingPolicy> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// The knobs a policy may be built with: the team's LBT knobs and its group's tuning.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct PolicyKnobs {
    pub lbt: LbtConfig,
    pub tuning: PolicyTuning,
}

impl PolicyKnobs {
    pub fn new(lbt: LbtConfig, tuning: PolicyTuning) -> Self {
        PolicyKnobs { lbt, tuning }
    }
}

/// A policy as the registry lists it: its name and how to build one group's instance.
#[derive(Debug)]
pub struct PolicyEntry {
    /// The kebab-case name used in configuration files, scenarios and the API.
    pub name: &'static str,
    /// A fresh instance for one port group.
    pub build: fn(&PolicyKnobs) -> Box<dyn TeamingPolicy>,
}

/// A teaming policy, by name: what a port group's configuration says. It parses from and prints
/// as its kebab-case name (`"port-id"`, `"load-based"`, ...); the names are the
/// [registry's](super::registry).
#[derive(Clone, Copy)]
pub struct Policy(&'static PolicyEntry);

impl Policy {
    /// The policy of a registry entry (for the policies' own files).
    pub(super) const fn new(entry: &'static PolicyEntry) -> Policy {
        Policy(entry)
    }

    /// The policy's kebab-case name.
    pub const fn name(self) -> &'static str {
        self.0.name
    }

    /// Every policy, in registry order.
    pub fn all() -> &'static [Policy] {
        super::registry::POLICIES
    }

    /// Every policy's name, in registry order.
    pub fn names() -> &'static [&'static str] {
        &super::registry::NAMES
    }

    /// A fresh instance of this policy for one port group.
    pub fn build(self, knobs: &PolicyKnobs) -> Box<dyn TeamingPolicy> {
        (self.0.build)(knobs)
    }
}

impl PartialEq for Policy {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Policy {}

impl core::hash::Hash for Policy {
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        self.0.name.hash(h)
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Policy({})", self.0.name)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

/// A policy name that is not in the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown teaming policy `{}`: expected one of {}", .0, Policy::names().join(", "))]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::all()
            .iter()
            .find(|p| p.name() == s)
            .copied()
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

impl serde::Serialize for Policy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Policy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|_| serde::de::Error::unknown_variant(&s, Policy::names()))
    }
}

/// What a policy sees of its team: every uplink and port, read-only, and its own group.
#[derive(Clone, Copy)]
pub struct TeamView<'a> {
    pub(super) uplinks: &'a [UplinkState],
    pub(super) ports: &'a [PortState],
    pub(super) group: GroupId,
    pub(super) spec: &'a PortGroupSpec,
}

impl<'a> TeamView<'a> {
    /// The policy's own group.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// The group's configuration.
    pub fn spec(&self) -> &'a PortGroupSpec {
        self.spec
    }

    /// The group's failover order.
    pub fn order(&self) -> &'a FailoverOrder {
        &self.spec.order
    }

    /// Number of uplinks in the team.
    pub fn uplink_count(&self) -> usize {
        self.uplinks.len()
    }

    /// True if uplink `u` exists and is up.
    pub fn is_up(&self, u: UplinkId) -> bool {
        self.uplinks.get(u.0).is_some_and(UplinkState::is_up)
    }

    /// Uplink `u`'s capacity in bits/s (0 if there is no such uplink).
    pub fn capacity_bps(&self, u: UplinkId) -> f64 {
        self.uplinks.get(u.0).map_or(0.0, |s| s.spec.capacity.bps_f64())
    }

    /// Uplink `u`'s mean rates over the meter window before `now` (zero if there is no such
    /// uplink).
    pub fn uplink_rates(&self, u: UplinkId, now: Instant) -> Rates {
        self.uplinks.get(u.0).map_or(Rates::default(), |s| s.rates(now))
    }

    /// Every port of the team (of every group), in the order they were added.
    pub fn ports(&self) -> impl Iterator<Item = PortView<'a>> + 'a {
        self.ports.iter().map(|state| PortView { state })
    }

    /// The group's first live active uplink, else its first live standby.
    pub fn first_live(&self) -> Option<UplinkId> {
        let order = self.order();
        order
            .active
            .iter()
            .chain(&order.standby)
            .find(|u| self.is_up(**u))
            .copied()
    }

    /// A live active uplink other than `exclude` chosen by rendezvous hashing on `key` (so only
    /// the keys of a failed uplink move), else the first live standby other than `exclude`.
    pub fn fallback(&self, key: u64, exclude: Option<UplinkId>) -> Option<UplinkId> {
        let order = self.order();
        let usable = |u: &&UplinkId| Some(**u) != exclude && self.is_up(**u);
        let live = order
            .active
            .iter()
            .filter(usable)
            .map(|u| (u.0, self.uplinks[u.0].salt));
        rendezvous_pick(key, live)
            .map(UplinkId)
            .or_else(|| order.standby.iter().find(usable).copied())
    }
}

/// A port as a policy sees it.
#[derive(Clone, Copy)]
pub struct PortView<'a> {
    pub(super) state: &'a PortState,
}

impl<'a> PortView<'a> {
    /// The port's configuration (ID, MAC, group).
    pub fn spec(&self) -> &'a PortSpec {
        &self.state.spec
    }

    pub fn id(&self) -> PortId {
        self.state.spec.id
    }

    pub fn group(&self) -> GroupId {
        self.state.spec.group
    }

    /// Where the port returns on failback.
    pub fn home(&self) -> UplinkId {
        self.state.home
    }

    /// The uplink that carries its traffic now, if any.
    pub fn current(&self) -> Option<UplinkId> {
        self.state.current
    }

    /// The port's mean rates over the meter window before `now`.
    pub fn rates(&self, now: Instant) -> Rates {
        self.state.rates(now)
    }

    /// The port's recent rates: the mean over the meter's last few buckets before `now`
    /// ([`super::RateMeter::recent_bps`]).
    pub fn recent(&self, now: Instant) -> Rates {
        self.state.recent(now)
    }
}
