//! Route based on physical NIC load (Load-Based Teaming): ports start on their port-ID home
//! (`active[port ID mod n]`), and at every meter bucket boundary the group's instance runs the
//! check [`super::lbt`] describes, moving at most one of its group's ports per period. The move
//! re-homes the port (failback returns it to its new uplink). Failover places the group's ports
//! by load. The figures it decides from are the whole team's: uplinks' measured loads and every
//! port mapped to them, whatever its group, so two groups using LBT each see the other's moves.

use super::lbt::{self, LbtConfig, LbtDecision, PortLoad, UplinkLoad};
use super::meter::RateMeter;
use super::policy::{PolicyEntry, Rehome, TeamView, TeamingPolicy};
use super::port_id::by_port_id;
use super::{MoveReason, Policy, PortSpec, UplinkId};
use crate::Instant;

#[derive(Debug, Clone)]
struct LoadBased {
    config: LbtConfig,
    /// The next meter bucket boundary, when the check runs.
    next_check: Instant,
    /// When this group's last move was made.
    last_move: Option<Instant>,
}

impl LoadBased {
    fn new(config: LbtConfig) -> Self {
        LoadBased {
            config,
            next_check: RateMeter::boundary_after(config.window, Instant::ZERO),
            last_move: None,
        }
    }
}

impl TeamingPolicy for LoadBased {
    fn home(&self, team: &TeamView<'_>, port: &PortSpec) -> UplinkId {
        by_port_id(team, port)
    }

    fn places_by_load(&self) -> bool {
        true
    }

    fn poll_at(&self) -> Option<Instant> {
        Some(self.next_check)
    }

    /// At a bucket boundary, and at least a period after the group's last move, makes the move
    /// [`lbt::evaluate`] finds, if any.
    fn handle_timeout(&mut self, team: &TeamView<'_>, now: Instant) -> Vec<Rehome> {
        if now < self.next_check {
            return Vec::new();
        }
        self.next_check = RateMeter::boundary_after(self.config.window, now);
        if self.last_move.is_some_and(|t| now - t < self.config.period) {
            return Vec::new();
        }
        let moves = self.preview(team, now);
        if !moves.is_empty() {
            self.last_move = Some(now);
        }
        moves
    }

    fn preview(&self, team: &TeamView<'_>, now: Instant) -> Vec<Rehome> {
        decide(&self.config, team, now)
            .map(|d| Rehome {
                port: d.port,
                to: d.to,
                reason: MoveReason::LoadBased(d),
            })
            .into_iter()
            .collect()
    }
}

/// The move [`lbt::evaluate`] makes from the team's figures at `now`; only this group's ports are
/// movable, to this group's active uplinks.
fn decide(config: &LbtConfig, team: &TeamView<'_>, now: Instant) -> Option<LbtDecision> {
    let uplinks: Vec<UplinkLoad> = (0..team.uplink_count())
        .map(UplinkId)
        .map(|u| {
            let r = team.uplink_rates(u, now);
            UplinkLoad {
                capacity_bps: team.capacity_bps(u),
                live: team.is_up(u),
                tx_bps: r.tx,
                rx_bps: r.rx,
            }
        })
        .collect();
    let active = &team.order().active[..];
    let ports: Vec<PortLoad> = team
        .ports()
        .map(|p| {
            let r = p.rates(now);
            PortLoad {
                port: p.id(),
                current: p.current(),
                tx_bps: r.tx,
                rx_bps: r.rx,
                movable_to: if p.group() == team.group() { active } else { &[] },
            }
        })
        .collect();
    lbt::evaluate(config.threshold, &uplinks, &ports)
}

static ENTRY: PolicyEntry = PolicyEntry {
    name: "load-based",
    build: |knobs| Box::new(LoadBased::new(knobs.lbt)),
};

impl Policy {
    /// Route based on physical NIC load (Load-Based Teaming): `"load-based"`.
    pub const LOAD_BASED: Policy = Policy::new(&ENTRY);
}
