//! The team: uplinks, port groups and ports, each group with its policy instance. The model is
//! described in the [parent module](super); failover and failback are in [`super::failover`].

use super::census::Census;
use super::flowlet::BucketState;
use super::lacp::Lacp;
use super::lbt::{LbtConfig, LbtDecision};
use super::meter::RateMeter;
use super::policy::{FlowletCounters, MemberShare};
use super::policy::{PolicyKnobs, PortView, Rehome, TeamView, TeamingPolicy};
use super::state::{PortState, UplinkState};
use super::{
    Direction, Effect, FailoverOrder, GroupId, LinkState, MoveReason, Policy, PortGroupSpec, PortId, PortMove,
    PortSpec, UplinkId, UplinkSpec, Utilisation,
};
use crate::wire::{build_rarp, FlowKey};
use crate::Instant;
use std::collections::{HashMap, VecDeque};

/// A configuration the team refuses; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TeamError {
    #[error("a team needs at least one uplink")]
    NoUplinks,
    #[error("uplink `{0}` is listed twice")]
    DuplicateUplink(String),
    #[error("uplink `{0}` has zero capacity")]
    ZeroCapacity(String),
    #[error("{0}")]
    Lbt(String),
    #[error("port group `{group}`: {what}")]
    Group { group: String, what: String },
    #[error("{0} is already in the team")]
    DuplicatePort(PortId),
    #[error("{port}: MAC {mac} is already used by {other}")]
    DuplicateMac { port: PortId, mac: String, other: PortId },
    #[error("no port group with index {0}")]
    UnknownGroup(usize),
    #[error("no uplink with index {0}")]
    UnknownUplink(usize),
    #[error("{0} is not in the team")]
    UnknownPort(PortId),
    #[error("uplink `{uplink}` is in use: {what}")]
    UplinkInUse { uplink: String, what: String },
}

/// A port group: its configuration and its policy's instance.
#[derive(Debug, Clone)]
pub(super) struct GroupState {
    pub(super) spec: PortGroupSpec,
    pub(super) policy: Box<dyn TeamingPolicy>,
    /// `policy.per_flow()`, read once: the per-frame path skips the policy when false.
    per_flow: bool,
    /// When the policy's timer last re-homed a port.
    last_rehome: Option<Instant>,
    /// Per-flow policies without flowlet buckets of their own: the flows sent, for operators.
    census: Option<Census>,
}

/// A NIC team. See the [module documentation](super) for the model.
#[derive(Debug, Clone)]
pub struct Team {
    pub(super) uplinks: Vec<UplinkState>,
    pub(super) groups: Vec<GroupState>,
    pub(super) ports: Vec<PortState>,
    index: HashMap<PortId, usize>,
    pub(super) lbt: LbtConfig,
    pub(super) effects: VecDeque<Effect>,
    /// The LACP members of the groups whose mode is `lacp`.
    pub(super) lacp: Lacp,
    /// The groups changed since the LACP members were last made theirs (done at the next call
    /// that knows the time).
    pub(super) lacp_stale: bool,
}

impl Team {
    /// A team of uplinks named and sized as given, with `groups` added in order (their IDs are
    /// their indices); ports are added by the caller.
    pub fn with_groups(
        uplinks: impl IntoIterator<Item = (String, crate::units::Bandwidth)>,
        lbt: LbtConfig,
        groups: &[PortGroupSpec],
    ) -> Result<Team, TeamError> {
        let specs = uplinks
            .into_iter()
            .map(|(name, capacity)| UplinkSpec { name, capacity })
            .collect();
        let mut team = Team::new(specs, lbt)?;
        for g in groups {
            team.add_group(g.clone())?;
        }
        Ok(team)
    }

    /// A team of `uplinks`, all up, with Load-Based Teaming knobs `lbt`.
    pub fn new(uplinks: Vec<UplinkSpec>, lbt: LbtConfig) -> Result<Team, TeamError> {
        if uplinks.is_empty() {
            return Err(TeamError::NoUplinks);
        }
        lbt.validate().map_err(TeamError::Lbt)?;
        for (i, u) in uplinks.iter().enumerate() {
            check_uplink(u, uplinks[..i].iter())?;
        }
        let meter = RateMeter::new(lbt.window);
        Ok(Team {
            uplinks: uplinks.into_iter().map(|spec| UplinkState::new(spec, &meter)).collect(),
            groups: Vec::new(),
            ports: Vec::new(),
            index: HashMap::new(),
            lbt,
            effects: VecDeque::new(),
            lacp: Lacp::default(),
            lacp_stale: false,
        })
    }

    /// Adds a port group after checking its failover order and VLAN.
    pub fn add_group(&mut self, spec: PortGroupSpec) -> Result<GroupId, TeamError> {
        self.check_group(&spec)?;
        self.groups.push(GroupState::new(spec, &self.lbt));
        self.lacp_changed();
        Ok(GroupId(self.groups.len() - 1))
    }

    /// Removes port group `g`, which must have no ports; the groups after it move down one
    /// index (their ports' specs follow), so a caller holding GroupIds renumbers them the same.
    pub fn remove_group(&mut self, g: GroupId) -> Result<PortGroupSpec, TeamError> {
        if g.0 >= self.groups.len() {
            return Err(TeamError::UnknownGroup(g.0));
        }
        if self.ports.iter().any(|p| p.spec.group == g) {
            return Err(TeamError::Group {
                group: self.groups[g.0].spec.name.clone(),
                what: "it still has ports".into(),
            });
        }
        let gone = self.groups.remove(g.0);
        self.lacp_changed();
        for p in &mut self.ports {
            if p.spec.group.0 > g.0 {
                p.spec.group = GroupId(p.spec.group.0 - 1);
            }
        }
        Ok(gone.spec)
    }

    /// Rejects a group whose order is empty, names an unknown uplink or lists one twice, whose
    /// mode refuses its policy or its standby uplinks, or whose tuning is out of range. (That
    /// groups sharing an uplink share its mode is a property of a whole configuration, checked
    /// by [`crate::host::build`]: a change may pass through mixed states group by group.)
    fn check_group(&self, spec: &PortGroupSpec) -> Result<(), TeamError> {
        let err = |what: String| TeamError::Group {
            group: spec.name.clone(),
            what,
        };
        if spec.order.active.is_empty() {
            return Err(err("the failover order needs at least one active uplink".into()));
        }
        let listed: Vec<UplinkId> = spec.order.active.iter().chain(&spec.order.standby).copied().collect();
        for (i, u) in listed.iter().enumerate() {
            if u.0 >= self.uplinks.len() {
                return Err(err(format!("uplink index {} does not exist", u.0)));
            }
            if listed[..i].contains(u) {
                return Err(err(format!(
                    "uplink `{}` is listed twice in the failover order",
                    self.uplinks[u.0].spec.name
                )));
            }
        }
        if let Some(v) = spec.vlan.filter(|v| !(1..=4094).contains(v)) {
            return Err(err(format!("VLAN {v} is out of range 1-4094")));
        }
        if let Some(why) = spec.mode.refuses(spec.policy) {
            return Err(err(why));
        }
        if spec.mode.switch_dependent() && !spec.order.standby.is_empty() {
            return Err(err(format!(
                "a `{}` bundle has no standby uplinks: the physical switch sends on every member",
                spec.mode
            )));
        }
        spec.tuning.validate().map_err(err)?;
        if spec.mode == super::TeamMode::Lacp {
            spec.lacp.validate().map_err(err)?;
        }
        Ok(())
    }

    /// Group `g`'s view of the team, for its policy.
    pub(super) fn view(&self, g: GroupId) -> TeamView<'_> {
        TeamView {
            uplinks: &self.uplinks,
            ports: &self.ports,
            group: g,
            spec: &self.groups[g.0].spec,
        }
    }

    /// Adds a port and places it on its home uplink (or its failover choice). No move is reported.
    pub fn add_port(&mut self, spec: PortSpec) -> Result<(), TeamError> {
        if self.index.contains_key(&spec.id) {
            return Err(TeamError::DuplicatePort(spec.id));
        }
        if let Some(other) = self.ports.iter().find(|p| p.spec.mac == spec.mac) {
            return Err(TeamError::DuplicateMac {
                port: spec.id,
                mac: spec.mac.to_string(),
                other: other.spec.id,
            });
        }
        let group = self
            .groups
            .get(spec.group.0)
            .ok_or(TeamError::UnknownGroup(spec.group.0))?;
        let home = group.policy.home(&self.view(spec.group), &spec);
        self.ports
            .push(PortState::new(spec, home, &RateMeter::new(self.lbt.window)));
        let i = self.ports.len() - 1;
        self.ports[i].current = self.placement(i);
        self.index.insert(self.ports[i].spec.id, i);
        Ok(())
    }

    /// Announces port `id`'s MAC to the physical switches on the uplink it is placed on (a RARP,
    /// if its group notifies switches): a VM that appeared here (started, or migrated from
    /// another host) is reached here at once, not after the switches' MAC entries age out.
    pub fn announce(&mut self, id: PortId) {
        let Some(&i) = self.index.get(&id) else { return };
        let p = &self.ports[i];
        let group = &self.groups[p.spec.group.0].spec;
        if let (Some(uplink), true) = (p.current, group.notify_switches) {
            self.effects.push_back(Effect::Transmit {
                uplink,
                frame: build_rarp(p.spec.mac, group.vlan),
            });
        }
    }

    /// Takes a port out of the team (its VM went away): it stops counting in its uplink's load
    /// and its group's policy no longer sees it. No move is reported: nothing is left to move.
    /// Effects about it not yet taken (its move, the RARP announcing its MAC) are dropped: a
    /// port added and removed before the caller polled (a refused add undone) must not tell
    /// the physical switches that its MAC lives here.
    pub fn remove_port(&mut self, id: PortId) -> Result<PortSpec, TeamError> {
        let i = self.index.remove(&id).ok_or(TeamError::UnknownPort(id))?;
        let gone = self.ports.remove(i);
        for j in i..self.ports.len() {
            self.index.insert(self.ports[j].spec.id, j);
        }
        let rarp = build_rarp(gone.spec.mac, self.groups[gone.spec.group.0].spec.vlan);
        self.effects.retain(|e| match e {
            Effect::PortMoved(m) => m.port != id,
            Effect::Transmit { frame, .. } => *frame != rarp,
        });
        Ok(gone.spec)
    }

    /// Moves port `i` to `to`, reporting the move and, if the group asks, a RARP on the new uplink.
    pub(super) fn move_port(&mut self, i: usize, to: Option<UplinkId>, reason: MoveReason, now: Instant) {
        let from = self.ports[i].current;
        if from == to {
            return;
        }
        self.ports[i].current = to;
        let port = self.ports[i].spec.id;
        self.effects.push_back(Effect::PortMoved(PortMove {
            at: now,
            port,
            from,
            to,
            reason,
        }));
        self.announce(port);
    }

    /// Changes a group's policy, failover order and failback; see [`Team::reconfigure`].
    pub fn reconfigure_group(
        &mut self,
        group: GroupId,
        policy: Policy,
        order: FailoverOrder,
        failback: bool,
        now: Instant,
    ) -> Result<(), TeamError> {
        let old = self.groups.get(group.0).ok_or(TeamError::UnknownGroup(group.0))?;
        let spec = PortGroupSpec {
            policy,
            order,
            failback,
            ..old.spec.clone()
        };
        self.reconfigure(group, &spec, now)
    }

    /// Changes a group's policy, failover order, failback, switch notification, mode and
    /// tuning to `new`'s (its name and VLAN stay); its ports are re-homed by the policy one by
    /// one (each seeing the homes given before it) and move where needed (reason
    /// [`MoveReason::PolicyChange`]). The policy keeps its state if it and its tuning are
    /// unchanged, and starts afresh otherwise.
    pub fn reconfigure(&mut self, group: GroupId, new: &PortGroupSpec, now: Instant) -> Result<(), TeamError> {
        let old = self.groups.get(group.0).ok_or(TeamError::UnknownGroup(group.0))?;
        let spec = PortGroupSpec {
            name: old.spec.name.clone(),
            vlan: old.spec.vlan,
            ..new.clone()
        };
        self.check_group(&spec)?;
        if spec.policy == old.spec.policy && spec.tuning == old.spec.tuning {
            self.groups[group.0].spec = spec;
        } else {
            self.groups[group.0] = GroupState::new(spec, &self.lbt);
        }
        self.lacp_changed();
        let members: Vec<usize> = (0..self.ports.len())
            .filter(|&i| self.ports[i].spec.group == group)
            .collect();
        for &i in &members {
            let home = self.groups[group.0].policy.home(&self.view(group), &self.ports[i].spec);
            self.ports[i].home = home;
        }
        for i in members {
            let to = self.placement(i);
            self.move_port(i, to, MoveReason::PolicyChange, now);
        }
        Ok(())
    }

    /// The uplink that carries a frame of `port`: the port's current uplink, or under a per-flow
    /// policy (IP hash) the one its policy picks for `flow`. A pure query.
    pub fn select(&self, port: PortId, flow: Option<&FlowKey>) -> Option<UplinkId> {
        let i = *self.index.get(&port)?;
        let p = &self.ports[i];
        let g = &self.groups[p.spec.group.0];
        match flow {
            Some(flow) if g.per_flow => g.policy.select(&self.view(p.spec.group), &PortView { state: p }, flow),
            _ => p.current,
        }
    }

    /// The uplink for a frame of `len` bytes that `port` sends at `now`: as [`Team::select`], but
    /// a per-flow policy that keeps state (flowlets) records the frame.
    pub fn select_frame(&mut self, port: PortId, flow: Option<&FlowKey>, len: usize, now: Instant) -> Option<UplinkId> {
        let i = *self.index.get(&port)?;
        let p = &self.ports[i];
        let gid = p.spec.group;
        let g = &mut self.groups[gid.0];
        match flow {
            Some(flow) if g.per_flow => {
                let view = TeamView {
                    uplinks: &self.uplinks,
                    ports: &self.ports,
                    group: gid,
                    spec: &g.spec,
                };
                let u = g.policy.select_frame(&view, &PortView { state: p }, flow, len, now);
                if let (Some(c), Some(u)) = (g.census.as_mut(), u) {
                    c.record(flow, u, len, now);
                }
                u
            }
            _ => p.current,
        }
    }

    /// Counts `bytes` of `port`'s traffic carried by `uplink` in direction `dir` at `now`.
    pub fn account(&mut self, port: PortId, uplink: UplinkId, dir: Direction, bytes: u64, now: Instant) {
        if let Some(&i) = self.index.get(&port) {
            self.ports[i].record(dir, bytes, now);
        }
        if let Some(u) = self.uplinks.get_mut(uplink.0) {
            u.record(dir, bytes, now);
        }
    }

    /// Counts `bytes` of `port`'s traffic in direction `dir` at `now`, for a data plane that
    /// counts ports and uplinks apart (the kernel fast path; [`Team::account`] takes both).
    pub fn account_port(&mut self, port: PortId, dir: Direction, bytes: u64, now: Instant) {
        if let Some(&i) = self.index.get(&port) {
            self.ports[i].record(dir, bytes, now);
        }
    }

    /// Counts `bytes` carried by `uplink` in direction `dir` at `now` (see
    /// [`Team::account_port`]).
    pub fn account_uplink(&mut self, uplink: UplinkId, dir: Direction, bytes: u64, now: Instant) {
        if let Some(u) = self.uplinks.get_mut(uplink.0) {
            u.record(dir, bytes, now);
        }
    }

    /// When [`Team::handle_timeout`] next has work: the earliest of the policies' timers.
    pub fn poll_at(&self) -> Option<Instant> {
        let stale = self.lacp_stale.then_some(Instant::ZERO);
        let policies = self.groups.iter().filter_map(|g| g.policy.poll_at());
        policies.chain(self.lacp.poll_at()).chain(stale).min()
    }

    /// Runs the policies' timers due at `now` (the Load-Based Teaming check), group by group in
    /// configuration order, each group seeing the moves made before it.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.run_lacp(now);
        for g in 0..self.groups.len() {
            if self.groups[g].policy.poll_at().is_none_or(|t| t > now) {
                continue;
            }
            let group = &mut self.groups[g];
            let view = TeamView {
                uplinks: &self.uplinks,
                ports: &self.ports,
                group: GroupId(g),
                spec: &group.spec,
            };
            let rehomes = group.policy.handle_timeout(&view, now);
            for r in rehomes {
                self.rehome(GroupId(g), r, now);
            }
        }
    }

    /// Applies a policy's re-homing of a port of its group to a live uplink of its order;
    /// anything else (a policy bug) is ignored rather than corrupting the team.
    fn rehome(&mut self, g: GroupId, r: Rehome, now: Instant) {
        let order = &self.groups[g.0].spec.order;
        let Some(&i) = self.index.get(&r.port) else { return };
        let valid = self.ports[i].spec.group == g
            && self.uplinks.get(r.to.0).is_some_and(UplinkState::is_up)
            && (order.active.contains(&r.to) || order.standby.contains(&r.to));
        if valid {
            self.ports[i].home = r.to;
            self.groups[g.0].last_rehome = Some(now);
            self.move_port(i, Some(r.to), r.reason, now);
        }
    }

    /// What Load-Based Teaming would move at `now`, from the meters and the current mapping
    /// (the first group using it that would move a port), whether or not its period allows it.
    pub fn lbt_decision(&self, now: Instant) -> Option<LbtDecision> {
        (0..self.groups.len())
            .filter(|&g| self.groups[g].spec.policy == Policy::LOAD_BASED)
            .flat_map(|g| self.groups[g].policy.preview(&self.view(GroupId(g)), now))
            .find_map(|r| match r.reason {
                MoveReason::LoadBased(d) => Some(d),
                _ => None,
            })
    }

    /// The next effect to carry out, oldest first.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Number of uplinks.
    pub fn uplink_count(&self) -> usize {
        self.uplinks.len()
    }

    /// An uplink's configuration.
    pub fn uplink(&self, u: UplinkId) -> Option<&UplinkSpec> {
        self.uplinks.get(u.0).map(|s| &s.spec)
    }

    /// Uplink `u` now runs at `capacity` (the kernel reported a new link speed): utilisation and
    /// Load-Based Teaming count against it from now on.
    pub fn set_capacity(&mut self, u: UplinkId, capacity: crate::units::Bandwidth) -> Result<(), TeamError> {
        let s = self.uplinks.get_mut(u.0).ok_or(TeamError::UnknownUplink(u.0))?;
        if capacity.bps() == 0 {
            return Err(TeamError::ZeroCapacity(s.spec.name.clone()));
        }
        s.spec.capacity = capacity;
        self.lacp_changed();
        Ok(())
    }

    /// An uplink's link state.
    pub fn link_state(&self, u: UplinkId) -> Option<LinkState> {
        self.uplinks.get(u.0).map(|s| s.link)
    }

    pub(super) fn is_up(&self, u: UplinkId) -> bool {
        self.uplinks[u.0].is_up()
    }

    /// True if uplink `u` can carry traffic: its link is up and, if it runs LACP, it is
    /// collecting and distributing (or its group's fallback member).
    pub fn uplink_usable(&self, u: UplinkId) -> bool {
        self.uplinks.get(u.0).is_some_and(|s| s.is_up())
    }

    /// Mean send and receive utilisation of an uplink over the LBT window ending before `now`.
    pub fn utilisation(&self, u: UplinkId, now: Instant) -> Option<Utilisation> {
        let s = self.uplinks.get(u.0)?;
        let cap = s.spec.capacity.bps_f64();
        let r = s.rates(now);
        Some(Utilisation {
            tx: r.tx / cap,
            rx: r.rx / cap,
        })
    }

    /// A port's mean send (`tx`) and receive (`rx`) rate in bits/s over the LBT window ending
    /// before `now` (rates, not fractions: a port has no capacity of its own).
    pub fn port_rates(&self, port: PortId, now: Instant) -> Option<Utilisation> {
        let r = self.ports[*self.index.get(&port)?].rates(now);
        Some(Utilisation { tx: r.tx, rx: r.rx })
    }

    /// A port's send and receive rates over the LBT window's last complete bucket before `now`
    /// (a second, at the default window): what a what-if takes as the port's rate that second.
    pub fn port_last_rates(&self, port: PortId, now: Instant) -> Option<Utilisation> {
        let r = self.ports[*self.index.get(&port)?].last(now);
        Some(Utilisation { tx: r.tx, rx: r.rx })
    }

    /// When Load-Based Teaming last moved a port (in any group using it), and the earliest it
    /// may move one again.
    pub fn lbt_timing(&self) -> (Option<Instant>, Option<Instant>) {
        let last = self
            .groups
            .iter()
            .filter(|g| g.spec.policy == Policy::LOAD_BASED)
            .filter_map(|g| g.last_rehome)
            .max();
        (last, last.map(|t| t + self.lbt.period))
    }

    /// The uplink a port's traffic uses now (its home or failover choice), if any.
    pub fn port_uplink(&self, port: PortId) -> Option<UplinkId> {
        self.index.get(&port).and_then(|&i| self.ports[i].current)
    }

    /// A port's home uplink (where it returns on failback).
    pub fn port_home(&self, port: PortId) -> Option<UplinkId> {
        self.index.get(&port).map(|&i| self.ports[i].home)
    }

    /// A port's MAC.
    pub fn port_mac(&self, port: PortId) -> Option<crate::wire::MacAddr> {
        self.index.get(&port).map(|&i| self.ports[i].spec.mac)
    }

    /// The group a port belongs to.
    pub fn port_group(&self, port: PortId) -> Option<GroupId> {
        self.index.get(&port).map(|&i| self.ports[i].spec.group)
    }

    /// Every port's configuration, in the order they were added.
    pub fn ports(&self) -> impl Iterator<Item = &PortSpec> {
        self.ports.iter().map(|p| &p.spec)
    }

    /// The uplink a group receives broadcast, multicast and unknown unicast on, as its policy
    /// says: by default its first live active uplink, else its first live standby. One per
    /// group, so that frames a physical switch floods to every member are taken in once.
    pub fn group_receive_uplink(&self, g: GroupId) -> Option<UplinkId> {
        let group = self.groups.get(g.0)?;
        group.policy.receive_uplink(&self.view(g), None)
    }

    /// The uplink a port receives flooded frames on, as its group's policy says (by default the
    /// group's [`Team::group_receive_uplink`]).
    pub fn port_receive_uplink(&self, port: PortId) -> Option<UplinkId> {
        let p = &self.ports[*self.index.get(&port)?];
        let g = p.spec.group;
        self.groups[g.0]
            .policy
            .receive_uplink(&self.view(g), Some(&PortView { state: p }))
    }

    /// True if `port`'s group is switch independent and its policy spreads a port's frames over
    /// members with their own source MACs ([`TeamingPolicy::rewrites_source`]).
    pub fn rewrites_source(&self, port: PortId) -> bool {
        let Some(&i) = self.index.get(&port) else { return false };
        let g = &self.groups[self.ports[i].spec.group.0];
        !g.spec.mode.switch_dependent() && g.policy.rewrites_source()
    }

    /// True if a flooded frame (broadcast, multicast, unknown unicast) from uplink `u` goes to
    /// `port`: in a switch-dependent group from any live member of its order (the switch sends
    /// each frame into the bundle once), else from the port's receive uplink as its policy says.
    pub fn takes_flood(&self, port: PortId, u: UplinkId) -> bool {
        let Some(&i) = self.index.get(&port) else { return false };
        let g = self.ports[i].spec.group;
        let spec = &self.groups[g.0].spec;
        if spec.mode.switch_dependent() {
            self.uplinks.get(u.0).is_some_and(UplinkState::is_up) && spec.order.active.contains(&u)
        } else {
            self.port_receive_uplink(port) == Some(u)
        }
    }

    /// For a group with a per-flow policy, each member's share of its sending at `now` (flowlet
    /// buckets, or for the hash policies buckets of flows), and the flowlet counters (zero for
    /// the hash policies, which move no flow).
    pub fn flowlets(&self, g: GroupId, now: Instant) -> Option<(Vec<MemberShare>, FlowletCounters)> {
        let group = self.groups.get(g.0)?;
        let shares = match &group.census {
            Some(c) => c.shares(now),
            None => group.policy.member_shares(&self.view(g), now)?,
        };
        Some((shares, group.policy.flowlet_counters().unwrap_or_default()))
    }

    /// For a group with a flowlet policy, every bucket's state, by bucket: what the kernel fast
    /// path sends from (the engine keeps the targets; the kernel the rest, told back with
    /// [`Team::flowlet_seen`]).
    pub fn flowlet_buckets(&self, g: GroupId) -> Option<Vec<BucketState>> {
        self.groups.get(g.0)?.policy.flowlet_buckets()
    }

    /// What a data plane that sends on its own saw of group `g`'s flowlet bucket `b` as of `at`,
    /// with the bytes it sent since it last told: the engine's rebalance then works as if it had
    /// sent them. Nothing for a group without flowlets.
    pub fn flowlet_seen(&mut self, g: GroupId, b: usize, seen: BucketState, bytes: u64, at: Instant) {
        let Some(group) = self.groups.get_mut(g.0) else { return };
        let view = TeamView {
            uplinks: &self.uplinks,
            ports: &self.ports,
            group: g,
            spec: &group.spec,
        };
        group.policy.flowlet_seen(&view, b, seen, bytes, at);
    }

    /// What a data plane that sends on its own saw of group `g`'s flow census bucket `b` (the
    /// hash policies': IP hash, Address Hash): `bytes` sent on `uplink` since it last told,
    /// counted at `at`. Nothing for a group without a census.
    pub fn census_seen(&mut self, g: GroupId, b: usize, uplink: UplinkId, bytes: u64, at: Instant) {
        if let Some(c) = self.groups.get_mut(g.0).and_then(|g| g.census.as_mut()) {
            c.seen(b, uplink, bytes, at);
        }
    }

    /// Whether group `g` keeps a flow census (a hash policy: IP hash, Address Hash).
    pub fn has_census(&self, g: GroupId) -> bool {
        self.groups.get(g.0).is_some_and(|g| g.census.is_some())
    }

    /// How many port groups there are (their IDs are 0 to this, less one).
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// A group's configuration.
    pub fn group(&self, g: GroupId) -> Option<&PortGroupSpec> {
        self.groups.get(g.0).map(|s| &s.spec)
    }

    /// The Load-Based Teaming knobs.
    pub fn lbt_config(&self) -> LbtConfig {
        self.lbt
    }
}

/// Refuses an uplink named like one of `others`, or of zero capacity.
pub(super) fn check_uplink<'a>(
    u: &UplinkSpec,
    mut others: impl Iterator<Item = &'a UplinkSpec>,
) -> Result<(), TeamError> {
    if others.any(|o| o.name == u.name) {
        return Err(TeamError::DuplicateUplink(u.name.clone()));
    }
    if u.capacity.bps() == 0 {
        return Err(TeamError::ZeroCapacity(u.name.clone()));
    }
    Ok(())
}

impl GroupState {
    /// Uplink `removed` left the team: the census forgets it.
    pub(super) fn uplink_removed(&mut self, removed: UplinkId) {
        if let Some(c) = self.census.as_mut() {
            c.uplink_removed(removed);
        }
    }

    /// A group with a fresh instance of its policy.
    fn new(spec: PortGroupSpec, lbt: &LbtConfig) -> Self {
        let tuning = spec.tuning;
        let policy = spec.policy.build(&PolicyKnobs::new(*lbt, tuning));
        let counted = policy.per_flow() && policy.flowlet_counters().is_none();
        GroupState {
            per_flow: policy.per_flow(),
            spec,
            policy,
            last_rehome: None,
            census: counted.then(|| Census::new(tuning.hash_fields)),
        }
    }
}
