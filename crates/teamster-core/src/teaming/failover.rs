//! Failover and failback: where a port goes when its uplink fails or recovers.
//!
//! Model. A port lives on its home uplink while that is up and one of its group's active
//! uplinks; otherwise on its *failover choice*: a live active uplink picked by rendezvous hashing
//! of the port ID against each uplink's name (so the choice is deterministic and spread, only the
//! failed uplink's ports move, and an uplink added or removed elsewhere in the team changes no
//! choice), else the group's first live standby in order, else nowhere.
//!
//! - Link down: only the ports currently on the failed uplink move. Ports of a group whose policy
//!   [places by load](super::policy::TeamingPolicy::places_by_load) (Load-Based Teaming, which
//!   is capacity-aware) are placed largest first (send + receive window mean), each on the live
//!   active uplink where its resulting utilisation is lowest, so a failover never parks a
//!   4 Gbit/s port on a 1 GbE uplink while a 10 GbE one has room; an idle port, and every port of
//!   the other policies, goes to its failover choice. Ports on healthy uplinks never move.
//! - Link up: a port with no uplink attaches at once (reason `link up`). With failback on, ports
//!   whose home it is return to it, and ports parked on a standby return to an active uplink
//!   (reason `failback`); with failback off, ports stay where they are until their uplink fails.

use super::state::PortState;
use super::team::Team;
use super::{LinkState, MoveReason, TeamError, UplinkId};
use crate::Instant;

impl Team {
    /// Where port `i` belongs now: its home if live and active, else its failover choice.
    pub(super) fn placement(&self, i: usize) -> Option<UplinkId> {
        let p = &self.ports[i];
        if self.is_up(p.home) && self.groups[p.spec.group.0].spec.order.active.contains(&p.home) {
            Some(p.home)
        } else {
            self.failover_choice(i, None)
        }
    }

    /// The failover target of port `i`, ignoring `exclude`: a live active uplink chosen by
    /// rendezvous hashing on the port ID, else the first live standby.
    fn failover_choice(&self, i: usize, exclude: Option<UplinkId>) -> Option<UplinkId> {
        let p = &self.ports[i];
        self.view(p.spec.group).fallback(u64::from(p.spec.id.0), exclude)
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
        let was = self.is_up(uplink);
        self.uplinks[uplink.0].link = state;
        self.usability_changed(uplink, was, now);
        self.lacp.set_link(uplink, state == LinkState::Up, now);
        self.apply_lacp(now);
        Ok(())
    }

    /// Fails over from, or back to, `uplink` if whether it can carry traffic changed from `was`.
    pub(super) fn usability_changed(&mut self, uplink: UplinkId, was: bool, now: Instant) {
        match (was, self.is_up(uplink)) {
            (true, false) => self.fail_over(uplink, now),
            (false, true) => self.fail_back(uplink, now),
            _ => {}
        }
    }

    /// Attaches ports that had no uplink, and with failback on returns ports home (or from a
    /// standby to an active uplink) now that `uplink` is up.
    fn fail_back(&mut self, uplink: UplinkId, now: Instant) {
        for i in 0..self.ports.len() {
            let p = &self.ports[i];
            let group = &self.groups[p.spec.group.0].spec;
            if p.current.is_none() {
                let to = self.placement(i);
                self.move_port(i, to, MoveReason::LinkUp, now);
            } else if group.failback {
                let active = &group.order.active;
                let on_standby = p.current.is_some_and(|c| !active.contains(&c));
                let returns_home = p.home == uplink && p.current != Some(uplink);
                if returns_home || (on_standby && active.contains(&uplink)) {
                    let to = self.placement(i);
                    self.move_port(i, to, MoveReason::Failback, now);
                }
            }
        }
    }

    /// Moves every port off the failed `uplink`: by load for groups whose policy asks, else to
    /// their failover choice (see the module documentation).
    fn fail_over(&mut self, uplink: UplinkId, now: Instant) {
        let load = |p: &PortState| {
            let r = p.rates(now);
            (r.tx, r.rx)
        };
        let mut mapped = vec![(0.0f64, 0.0f64); self.uplinks.len()];
        for p in &self.ports {
            if let Some(c) = p.current.filter(|&c| c != uplink) {
                let (tx, rx) = load(p);
                mapped[c.0].0 += tx;
                mapped[c.0].1 += rx;
            }
        }
        let mut by_load: Vec<(usize, (f64, f64))> = (0..self.ports.len())
            .filter(|&i| self.ports[i].current == Some(uplink))
            .map(|i| (i, load(&self.ports[i])))
            .collect();
        by_load.sort_by(|a, b| (b.1 .0 + b.1 .1).total_cmp(&(a.1 .0 + a.1 .1)).then(a.0.cmp(&b.0)));
        for (i, (tx, rx)) in by_load {
            let group = &self.groups[self.ports[i].spec.group.0];
            let by_headroom = (group.policy.places_by_load() && tx + rx > 0.0)
                .then(|| {
                    let util = |u: &UplinkId| {
                        let cap = self.uplinks[u.0].spec.capacity.bps_f64();
                        ((mapped[u.0].0 + tx) / cap).max((mapped[u.0].1 + rx) / cap)
                    };
                    group
                        .spec
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
}
