//! The team: uplinks, port groups and ports, and the decisions that map ports to uplinks.
//! The model is described in the [parent module](super).

use super::lbt::{self, LbtConfig, PortLoad, UplinkLoad};
use super::meter::RateMeter;
use super::{
    ip_hash, rendezvous_pick, Direction, Effect, FailoverOrder, GroupId, LinkState, MoveReason, Policy, PortGroupSpec,
    PortId, PortMove, PortSpec, UplinkId, UplinkSpec, Utilisation,
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
}

#[derive(Debug, Clone)]
struct UplinkState {
    spec: UplinkSpec,
    link: LinkState,
    tx: RateMeter,
    rx: RateMeter,
}

#[derive(Debug, Clone)]
struct PortState {
    spec: PortSpec,
    home: UplinkId,
    current: Option<UplinkId>,
    tx: RateMeter,
    rx: RateMeter,
}

/// A NIC team. See the [module documentation](super) for the model.
#[derive(Debug, Clone)]
pub struct Team {
    uplinks: Vec<UplinkState>,
    groups: Vec<PortGroupSpec>,
    ports: Vec<PortState>,
    index: HashMap<PortId, usize>,
    lbt: LbtConfig,
    last_lbt_move: Option<Instant>,
    next_lbt_check: Instant,
    effects: VecDeque<Effect>,
}

impl Team {
    /// A team of `uplinks`, all up, with Load-Based Teaming knobs `lbt`.
    pub fn new(uplinks: Vec<UplinkSpec>, lbt: LbtConfig) -> Result<Team, TeamError> {
        if uplinks.is_empty() {
            return Err(TeamError::NoUplinks);
        }
        lbt.validate().map_err(TeamError::Lbt)?;
        for (i, u) in uplinks.iter().enumerate() {
            if uplinks[..i].iter().any(|o| o.name == u.name) {
                return Err(TeamError::DuplicateUplink(u.name.clone()));
            }
            if u.capacity.bps() == 0 {
                return Err(TeamError::ZeroCapacity(u.name.clone()));
            }
        }
        let meter = RateMeter::new(lbt.window);
        Ok(Team {
            next_lbt_check: meter.next_boundary(Instant::ZERO),
            uplinks: uplinks
                .into_iter()
                .map(|spec| UplinkState {
                    spec,
                    link: LinkState::Up,
                    tx: meter.clone(),
                    rx: meter.clone(),
                })
                .collect(),
            groups: Vec::new(),
            ports: Vec::new(),
            index: HashMap::new(),
            lbt,
            last_lbt_move: None,
            effects: VecDeque::new(),
        })
    }

    /// Adds a port group after checking its failover order and VLAN.
    pub fn add_group(&mut self, spec: PortGroupSpec) -> Result<GroupId, TeamError> {
        self.check_group(&spec)?;
        self.groups.push(spec);
        Ok(GroupId(self.groups.len() - 1))
    }

    /// Rejects a group whose order is empty, names an unknown uplink or lists one twice.
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
        Ok(())
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
        let home = home_of(group, &spec);
        let meter = RateMeter::new(self.lbt.window);
        self.ports.push(PortState {
            spec,
            home,
            current: None,
            tx: meter.clone(),
            rx: meter,
        });
        let i = self.ports.len() - 1;
        self.ports[i].current = self.placement(i);
        self.index.insert(self.ports[i].spec.id, i);
        Ok(())
    }

    /// Where port `i` belongs now: its home if live, else its failover choice.
    fn placement(&self, i: usize) -> Option<UplinkId> {
        let p = &self.ports[i];
        if self.is_up(p.home) && self.groups[p.spec.group.0].order.active.contains(&p.home) {
            Some(p.home)
        } else {
            self.failover_choice(i, None)
        }
    }

    /// The failover target of port `i`, ignoring `exclude`: a live active uplink chosen by
    /// rendezvous hashing on the port ID, else the first live standby.
    fn failover_choice(&self, i: usize, exclude: Option<UplinkId>) -> Option<UplinkId> {
        let p = &self.ports[i];
        let order = &self.groups[p.spec.group.0].order;
        let usable = |u: &&UplinkId| Some(**u) != exclude && self.is_up(**u);
        let live = order.active.iter().filter(usable).map(|u| u.0);
        rendezvous_pick(u64::from(p.spec.id.0), live)
            .map(UplinkId)
            .or_else(|| order.standby.iter().find(usable).copied())
    }

    fn is_up(&self, u: UplinkId) -> bool {
        self.uplinks[u.0].link == LinkState::Up
    }

    /// Moves port `i` to `to`, reporting the move and, if the group asks, a RARP on the new uplink.
    fn move_port(&mut self, i: usize, to: Option<UplinkId>, reason: MoveReason, now: Instant) {
        let from = self.ports[i].current;
        if from == to {
            return;
        }
        self.ports[i].current = to;
        let p = &self.ports[i];
        let group = &self.groups[p.spec.group.0];
        self.effects.push_back(Effect::PortMoved(PortMove {
            at: now,
            port: p.spec.id,
            from,
            to,
            reason,
        }));
        if let (Some(uplink), true) = (to, group.notify_switches) {
            self.effects.push_back(Effect::Transmit {
                uplink,
                frame: build_rarp(p.spec.mac, group.vlan),
            });
        }
    }

    /// Applies a link state change: failover of the ports on a failed uplink, or attach and
    /// failback when one recovers (see the module documentation for the exact rules).
    pub fn set_link(&mut self, uplink: UplinkId, state: LinkState, now: Instant) -> Result<(), TeamError> {
        if uplink.0 >= self.uplinks.len() {
            return Err(TeamError::UnknownUplink(uplink.0));
        }
        if self.uplinks[uplink.0].link == state {
            return Ok(());
        }
        self.uplinks[uplink.0].link = state;
        if state == LinkState::Down {
            self.fail_over(uplink, now);
            return Ok(());
        }
        for i in 0..self.ports.len() {
            let p = &self.ports[i];
            let order = &self.groups[p.spec.group.0].order;
            if p.current.is_none() {
                let to = self.placement(i);
                self.move_port(i, to, MoveReason::LinkUp, now);
            } else if self.groups[p.spec.group.0].failback {
                let on_standby = p.current.is_some_and(|c| !order.active.contains(&c));
                let returns_home = p.home == uplink && p.current != Some(uplink);
                if returns_home || (on_standby && order.active.contains(&uplink)) {
                    let to = self.placement(i);
                    self.move_port(i, to, MoveReason::Failback, now);
                }
            }
        }
        Ok(())
    }

    /// Moves every port off the failed `uplink`. Ports of static policies go to their
    /// [`Team::failover_choice`]. Ports of Load-Based Teaming groups are placed by load, largest
    /// first, each on the live active uplink where its resulting utilisation is lowest (their
    /// policy is capacity-aware, so a failover must not park a 4 Gbit/s port on a 1 GbE uplink
    /// while a 10 GbE one has room); an idle port falls back to the rendezvous choice.
    fn fail_over(&mut self, uplink: UplinkId, now: Instant) {
        let on_failed: Vec<usize> = (0..self.ports.len())
            .filter(|&i| self.ports[i].current == Some(uplink))
            .collect();
        let load = |p: &PortState| (p.tx.mean_bps(now), p.rx.mean_bps(now));
        let mut mapped = vec![(0.0f64, 0.0f64); self.uplinks.len()];
        for p in &self.ports {
            if let Some(c) = p.current.filter(|&c| c != uplink) {
                let (tx, rx) = load(p);
                mapped[c.0].0 += tx;
                mapped[c.0].1 += rx;
            }
        }
        let mut by_load: Vec<(usize, (f64, f64))> = on_failed.iter().map(|&i| (i, load(&self.ports[i]))).collect();
        by_load.sort_by(|a, b| (b.1 .0 + b.1 .1).total_cmp(&(a.1 .0 + a.1 .1)).then(a.0.cmp(&b.0)));
        for (i, (tx, rx)) in by_load {
            let group = &self.groups[self.ports[i].spec.group.0];
            let by_headroom = (group.policy == Policy::LoadBased && tx + rx > 0.0)
                .then(|| {
                    let util = |u: &UplinkId| {
                        let cap = self.uplinks[u.0].spec.capacity.bps_f64();
                        ((mapped[u.0].0 + tx) / cap).max((mapped[u.0].1 + rx) / cap)
                    };
                    group
                        .order
                        .active
                        .iter()
                        .filter(|u| **u != uplink && self.is_up(**u))
                        .min_by(|a, b| util(a).total_cmp(&util(b)).then(a.cmp(b)))
                        .copied()
                })
                .flatten();
            let to = by_headroom.or_else(|| self.failover_choice(i, Some(uplink)));
            if let Some(t) = to {
                mapped[t.0].0 += tx;
                mapped[t.0].1 += rx;
            }
            self.move_port(i, to, MoveReason::LinkDown, now);
        }
    }

    /// Changes a group's policy, failover order and failback; its ports are re-homed by the new
    /// policy and move where needed (reason [`MoveReason::PolicyChange`]).
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
            ..old.clone()
        };
        self.check_group(&spec)?;
        self.groups[group.0] = spec;
        for i in 0..self.ports.len() {
            if self.ports[i].spec.group == group {
                self.ports[i].home = home_of(&self.groups[group.0], &self.ports[i].spec);
                let to = self.placement(i);
                self.move_port(i, to, MoveReason::PolicyChange, now);
            }
        }
        Ok(())
    }

    /// The uplink that carries a frame of `port`; `flow` is consulted only under IP hash.
    pub fn select(&self, port: PortId, flow: Option<&FlowKey>) -> Option<UplinkId> {
        let i = *self.index.get(&port)?;
        let p = &self.ports[i];
        let group = &self.groups[p.spec.group.0];
        if let (Policy::IpHash(mode), Some(flow)) = (group.policy, flow) {
            if let Some(h) = ip_hash(flow, mode) {
                return self.select_by_hash(group, h);
            }
        }
        p.current
    }

    /// IP hash's uplink for hash `h`: active\[h mod n\] if live; else a rendezvous pick among the
    /// live active uplinks (only the failed uplink's flows move), else the first live standby.
    fn select_by_hash(&self, group: &PortGroupSpec, h: u32) -> Option<UplinkId> {
        let active = &group.order.active;
        let primary = active[h as usize % active.len()];
        if self.is_up(primary) {
            return Some(primary);
        }
        let live = active.iter().filter(|u| self.is_up(**u)).map(|u| u.0);
        rendezvous_pick(u64::from(h), live)
            .map(UplinkId)
            .or_else(|| group.order.standby.iter().find(|u| self.is_up(**u)).copied())
    }

    /// Counts `bytes` of `port`'s traffic carried by `uplink` in direction `dir` at `now`.
    pub fn account(&mut self, port: PortId, uplink: UplinkId, dir: Direction, bytes: u64, now: Instant) {
        if let Some(&i) = self.index.get(&port) {
            let p = &mut self.ports[i];
            match dir {
                Direction::Tx => p.tx.record(bytes, now),
                Direction::Rx => p.rx.record(bytes, now),
            }
        }
        if let Some(u) = self.uplinks.get_mut(uplink.0) {
            match dir {
                Direction::Tx => u.tx.record(bytes, now),
                Direction::Rx => u.rx.record(bytes, now),
            }
        }
    }

    /// When [`Team::handle_timeout`] next has work: the next LBT check, if a group uses LBT.
    pub fn poll_at(&self) -> Option<Instant> {
        self.groups
            .iter()
            .any(|g| g.policy == Policy::LoadBased)
            .then_some(self.next_lbt_check)
    }

    /// Runs the timers due at `now`: the Load-Based Teaming check.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.next_lbt_check {
            return;
        }
        self.next_lbt_check = self.uplinks[0].tx.next_boundary(now);
        if self.poll_at().is_none() || self.last_lbt_move.is_some_and(|t| now - t < self.lbt.period) {
            return;
        }
        if let Some(d) = self.lbt_decision(now) {
            let i = self.index[&d.port];
            self.ports[i].home = d.to;
            self.last_lbt_move = Some(now);
            self.move_port(i, Some(d.to), MoveReason::LoadBased(d), now);
        }
    }

    /// What Load-Based Teaming would move at `now`, from the meters and the current mapping.
    pub fn lbt_decision(&self, now: Instant) -> Option<lbt::LbtDecision> {
        let uplinks: Vec<UplinkLoad> = self
            .uplinks
            .iter()
            .map(|u| UplinkLoad {
                capacity_bps: u.spec.capacity.bps_f64(),
                live: u.link == LinkState::Up,
                tx_bps: u.tx.mean_bps(now),
                rx_bps: u.rx.mean_bps(now),
            })
            .collect();
        let ports: Vec<PortLoad> = self
            .ports
            .iter()
            .map(|p| {
                let group = &self.groups[p.spec.group.0];
                PortLoad {
                    port: p.spec.id,
                    current: p.current,
                    tx_bps: p.tx.mean_bps(now),
                    rx_bps: p.rx.mean_bps(now),
                    movable_to: if group.policy == Policy::LoadBased {
                        &group.order.active
                    } else {
                        &[]
                    },
                }
            })
            .collect();
        lbt::evaluate(self.lbt.threshold, &uplinks, &ports)
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

    /// An uplink's link state.
    pub fn link_state(&self, u: UplinkId) -> Option<LinkState> {
        self.uplinks.get(u.0).map(|s| s.link)
    }

    /// Mean send and receive utilisation of an uplink over the LBT window ending before `now`.
    pub fn utilisation(&self, u: UplinkId, now: Instant) -> Option<Utilisation> {
        let s = self.uplinks.get(u.0)?;
        let cap = s.spec.capacity.bps_f64();
        Some(Utilisation {
            tx: s.tx.mean_bps(now) / cap,
            rx: s.rx.mean_bps(now) / cap,
        })
    }

    /// A port's mean send (`tx`) and receive (`rx`) rate in bits/s over the LBT window ending
    /// before `now` (rates, not fractions: a port has no capacity of its own).
    pub fn port_rates(&self, port: PortId, now: Instant) -> Option<Utilisation> {
        let p = &self.ports[*self.index.get(&port)?];
        Some(Utilisation {
            tx: p.tx.mean_bps(now),
            rx: p.rx.mean_bps(now),
        })
    }

    /// When Load-Based Teaming last moved a port, and the earliest it may move one again.
    pub fn lbt_timing(&self) -> (Option<Instant>, Option<Instant>) {
        (self.last_lbt_move, self.last_lbt_move.map(|t| t + self.lbt.period))
    }

    /// The uplink a port's traffic uses now (its home or failover choice), if any.
    pub fn port_uplink(&self, port: PortId) -> Option<UplinkId> {
        self.index.get(&port).and_then(|&i| self.ports[i].current)
    }

    /// A port's home uplink (where it returns on failback).
    pub fn port_home(&self, port: PortId) -> Option<UplinkId> {
        self.index.get(&port).map(|&i| self.ports[i].home)
    }

    /// The group a port belongs to.
    pub fn port_group(&self, port: PortId) -> Option<GroupId> {
        self.index.get(&port).map(|&i| self.ports[i].spec.group)
    }

    /// Every port's configuration, in the order they were added.
    pub fn ports(&self) -> impl Iterator<Item = &PortSpec> {
        self.ports.iter().map(|p| &p.spec)
    }

    /// The uplink a group receives broadcast, multicast and unknown unicast on: its first live
    /// active uplink, else its first live standby. One per group, so that frames a physical
    /// switch floods to every member are taken in once.
    pub fn group_receive_uplink(&self, g: GroupId) -> Option<UplinkId> {
        let order = &self.groups.get(g.0)?.order;
        order
            .active
            .iter()
            .chain(&order.standby)
            .find(|u| self.is_up(**u))
            .copied()
    }

    /// A group's configuration.
    pub fn group(&self, g: GroupId) -> Option<&PortGroupSpec> {
        self.groups.get(g.0)
    }

    /// The Load-Based Teaming knobs.
    pub fn lbt_config(&self) -> LbtConfig {
        self.lbt
    }
}

/// The home uplink the group's policy gives a port.
fn home_of(group: &PortGroupSpec, port: &PortSpec) -> UplinkId {
    let active = &group.order.active;
    active[group.policy.home_index(port.id, port.mac, active.len())]
}
