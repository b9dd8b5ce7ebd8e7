//! Route based on physical NIC load (Load-Based Teaming): ports start on their port-ID home
//! (`active[port ID mod n]`), and at every meter bucket boundary the group's instance runs the
//! check [`super::lbt`] describes, moving at most one of its group's ports per period. The move
//! re-homes the port (failback returns it to its new uplink). Under Teamster's rule the instance
//! remembers the ports it moved within the hold ([`LbtConfig::hold`]): at most one per period,
//! so a few entries. Failover places the group's ports by load. The figures it decides from are the whole team's: uplinks' measured loads and every
//! port mapped to them, whatever its group, so two groups using LBT each see the other's moves.

use super::lbt::{self, LbtConfig, LbtDecision, PortLoad, UplinkLoad};
use super::meter::RateMeter;
use super::policy::{PolicyEntry, Rehome, TeamView, TeamingPolicy};
use super::port_id::by_port_id;
use super::{MoveReason, Policy, PortId, PortSpec, UplinkId};
use crate::Instant;

#[derive(Debug, Clone)]
struct LoadBased {
    config: LbtConfig,
    /// The next meter bucket boundary, when the check runs.
    next_check: Instant,
    /// When this group's last move was made.
    last_move: Option<Instant>,
    /// The ports this group moved, and when, within the hold.
    moved: Vec<(PortId, Instant)>,
}

impl LoadBased {
    fn new(config: LbtConfig) -> Self {
        LoadBased {
            config,
            next_check: RateMeter::boundary_after(config.window, Instant::ZERO),
            last_move: None,
            moved: Vec::new(),
        }
    }

    /// True if `port` was moved within the hold before `now`.
    fn is_held(&self, port: PortId, now: Instant) -> bool {
        let hold = self.config.hold();
        self.moved.iter().any(|&(p, at)| p == port && now - at < hold)
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
    /// [`lbt::evaluate`] finds, if any, and holds the moved port.
    fn handle_timeout(&mut self, team: &TeamView<'_>, now: Instant) -> Vec<Rehome> {
        if now < self.next_check {
            return Vec::new();
        }
        self.next_check = RateMeter::boundary_after(self.config.window, now);
        let hold = self.config.hold();
        self.moved.retain(|&(_, at)| now - at < hold);
        if self.last_move.is_some_and(|t| now - t < self.config.period) {
            return Vec::new();
        }
        let moves = self.preview(team, now);
        for m in &moves {
            self.last_move = Some(now);
            self.moved.retain(|&(p, _)| p != m.port);
            if !hold.is_zero() {
                self.moved.push((m.port, now));
            }
        }
        moves
    }

    fn preview(&self, team: &TeamView<'_>, now: Instant) -> Vec<Rehome> {
        decide(&self.config, team, now, |p| self.is_held(p, now))
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
fn decide(config: &LbtConfig, team: &TeamView<'_>, now: Instant, held: impl Fn(PortId) -> bool) -> Option<LbtDecision> {
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
            let mine = p.group() == team.group();
            PortLoad {
                port: p.id(),
                current: p.current(),
                mean: p.rates(now),
                recent: p.recent(now),
                held: mine && held(p.id()),
                movable_to: if mine { active } else { &[] },
            }
        })
        .collect();
    lbt::evaluate(config, &uplinks, &ports)
}

static ENTRY: PolicyEntry = PolicyEntry {
    name: "load-based",
    build: |knobs| Box::new(LoadBased::new(knobs.lbt)),
};

impl Policy {
    /// Route based on physical NIC load (Load-Based Teaming): `"load-based"`.
    pub const LOAD_BASED: Policy = Policy::new(&ENTRY);
}
