//! The team's LACP bundle: which uplinks run LACP, and what their negotiation lets them carry.
//!
//! The members are the uplinks in the failover order of the groups whose mode is `lacp` (their
//! settings the first such group's). A change of groups (added, removed, reconfigured) or of an
//! uplink's capacity marks the members stale; the next call that knows the time (a timer, a
//! link change, an LACPDU) makes them the groups' again, and [`Team::poll_at`] is due at once
//! until then. Before that, an uplink newly listed by an LACP group already counts as unusable:
//! nothing is sent on it before its partner agrees. After every LACP event the members'
//! usability ([`super::lacp::Lacp::usable`]) is applied to the uplinks, failing over and back as
//! a carrier change does, and the LACPDUs due are queued as [`Effect::Transmit`].

use super::lacp::{Lacp, MemberPlan};
use super::{Effect, Team, TeamMode, UplinkId};
use crate::Instant;

impl Team {
    /// Marks the LACP members stale after a change of groups or capacities (see the
    /// [module documentation](self)).
    pub(super) fn lacp_changed(&mut self) {
        let lacp = self.groups.iter().any(|g| g.spec.mode == TeamMode::Lacp);
        // A team that never ran LACP has nothing to do, and no timer for it.
        self.lacp_stale |= lacp || !self.lacp.members().is_empty();
        for g in &self.groups {
            if g.spec.mode != TeamMode::Lacp {
                continue;
            }
            for u in g.spec.order.active.iter().chain(&g.spec.order.standby) {
                if self.lacp.member(*u).is_none() {
                    if let Some(s) = self.uplinks.get_mut(u.0) {
                        s.bundled = false;
                    }
                }
            }
        }
    }

    /// Makes the members the groups' if stale, runs the timers due at `now`, and applies.
    pub(super) fn run_lacp(&mut self, now: Instant) {
        if self.lacp_stale {
            self.lacp_stale = false;
            let mut plans: Vec<MemberPlan> = Vec::new();
            for g in self.groups.iter().filter(|g| g.spec.mode == TeamMode::Lacp) {
                for u in &g.spec.order.active {
                    if plans.iter().all(|p| p.uplink != *u) {
                        let s = &self.uplinks[u.0];
                        plans.push(MemberPlan {
                            uplink: *u,
                            settings: g.spec.lacp,
                            link_up: s.link == super::LinkState::Up,
                            capacity_bps: s.spec.capacity.bps(),
                        });
                    }
                }
            }
            for u in self.lacp.set_members(&plans, now) {
                let was = self.is_up(u);
                self.uplinks[u.0].bundled = true;
                self.usability_changed(u, was, now);
            }
        }
        if self.lacp.poll_at().is_some_and(|t| t <= now) {
            self.lacp.handle_timeout(now);
        }
        self.apply_lacp(now);
    }

    /// Applies the members' usability to their uplinks and queues the LACPDUs due at `now`.
    pub(super) fn apply_lacp(&mut self, now: Instant) {
        for (u, usable) in self.lacp.usable() {
            if self.uplinks[u.0].bundled != usable {
                let was = self.is_up(u);
                self.uplinks[u.0].bundled = usable;
                self.usability_changed(u, was, now);
            }
        }
        for (uplink, frame) in self.lacp.transmit(now) {
            self.effects.push_back(Effect::Transmit { uplink, frame });
        }
    }

    /// A slow-protocol frame (LACPDU or Marker) arrived on uplink `u` at `now`: true if `u`
    /// runs LACP and took it (a Marker is answered), false if no LACP group lists `u`.
    pub fn receive_slow(&mut self, u: UplinkId, frame: &[u8], now: Instant) -> bool {
        if self.lacp_stale {
            self.run_lacp(now);
        }
        if self.lacp.member(u).is_none() {
            return false;
        }
        if let Some(response) = self.lacp.receive(u, frame, now) {
            self.effects.push_back(Effect::Transmit {
                uplink: u,
                frame: response,
            });
        }
        self.apply_lacp(now);
        true
    }

    /// The LACP members and their machines, for operators (`teamster ctl lacp`).
    pub fn lacp(&self) -> &Lacp {
        &self.lacp
    }
}
