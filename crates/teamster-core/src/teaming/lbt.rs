//! Load-Based Teaming (vSphere's "route based on physical NIC load").
//!
//! Model. The team keeps, per uplink and per port, the mean send and the mean receive rate over
//! a sliding window ([`LbtConfig::window`], default 30 s). At each meter bucket boundary (one
//! thirtieth of the window) the team checks its uplinks, and moves at most one port per
//! [`LbtConfig::period`] (default 30 s, team-wide):
//!
//! 1. An uplink is *saturated* when its measured mean send or receive utilisation, as a fraction
//!    of its own capacity, exceeds [`LbtConfig::threshold`] (default 0.75), and the load of the
//!    ports now mapped to it (the sum of their means) still does. The second test keeps a move
//!    already made from being counted again while the window still holds its traffic.
//! 2. Saturated uplinks are taken most-utilised first. For each, the candidates are the ports on
//!    it whose group uses Load-Based Teaming. A candidate may go to a live active uplink of its
//!    group where its own mean rate, added to that uplink's load (the larger of the measured mean
//!    and the mapped ports' sum), stays at or under the threshold in both directions; among
//!    those it goes where it fits best, the lowest resulting utilisation.
//! 3. The port moved is the one that takes the saturated uplink back under the threshold with
//!    the least disruption: the smallest such port (its send + receive rate). If no single port
//!    does, the largest port that fits anywhere moves, for the most relief. Ties go to the lower
//!    port ID. If no port fits anywhere, nothing moves.
//!
//! Utilisation is relative to each uplink's own capacity, so a 1 GbE and a 10 GbE uplink in one
//! team are both kept under the threshold. [`evaluate`] is a pure function of its inputs.

use super::{Direction, PortId, UplinkId, Utilisation};
use crate::units::Bandwidth;
use core::time::Duration;

/// Load-Based Teaming's three knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LbtConfig {
    /// Span of the mean utilisation (vSphere: 30 s).
    pub window: Duration,
    /// Saturation threshold as a fraction of an uplink's capacity, in (0, 1] (vSphere: 0.75).
    pub threshold: f64,
    /// Least time between two moves (vSphere: 30 s).
    pub period: Duration,
}

impl Default for LbtConfig {
    fn default() -> Self {
        LbtConfig {
            window: Duration::from_secs(30),
            threshold: 0.75,
            period: Duration::from_secs(30),
        }
    }
}

impl LbtConfig {
    /// Checks the knobs' ranges, naming the one that is out of range.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(format!(
                "lbt threshold {} must be in (0, 1] (0.75 = 75% of capacity)",
                self.threshold
            ));
        }
        if self.window < Duration::from_millis(30) {
            return Err(format!("lbt window {:?} must be at least 30 ms", self.window));
        }
        if self.period.is_zero() {
            return Err("lbt period must be greater than zero".into());
        }
        Ok(())
    }
}

/// One uplink as Load-Based Teaming sees it.
#[derive(Debug, Clone, Copy)]
pub struct UplinkLoad {
    pub capacity_bps: f64,
    pub live: bool,
    /// Measured mean send rate over the window, bits/s.
    pub tx_bps: f64,
    /// Measured mean receive rate over the window, bits/s.
    pub rx_bps: f64,
}

/// One port as Load-Based Teaming sees it.
#[derive(Debug, Clone, Copy)]
pub struct PortLoad<'a> {
    pub port: PortId,
    pub current: Option<UplinkId>,
    pub tx_bps: f64,
    pub rx_bps: f64,
    /// The group's active uplinks if the group uses Load-Based Teaming, else empty (not movable).
    pub movable_to: &'a [UplinkId],
}

/// A move chosen by Load-Based Teaming, with the figures behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LbtDecision {
    pub port: PortId,
    pub from: UplinkId,
    pub to: UplinkId,
    /// The direction whose utilisation triggered the move.
    pub direction: Direction,
    pub threshold: f64,
    /// Measured mean utilisation of the saturated uplink.
    pub from_before: Utilisation,
    /// Mapped-port load of the saturated uplink after the move.
    pub from_after: Utilisation,
    /// Load of the target uplink before the move.
    pub to_before: Utilisation,
    /// Load of the target uplink after the move.
    pub to_after: Utilisation,
    /// The moved port's mean send rate.
    pub port_tx: Bandwidth,
    /// The moved port's mean receive rate.
    pub port_rx: Bandwidth,
}

/// Decides the one port to move now, if any, following the rules in the module documentation.
pub fn evaluate(threshold: f64, uplinks: &[UplinkLoad], ports: &[PortLoad<'_>]) -> Option<LbtDecision> {
    let mut mapped = vec![(0.0f64, 0.0f64); uplinks.len()];
    for p in ports {
        if let Some(m) = p.current.and_then(|u| mapped.get_mut(u.0)) {
            m.0 += p.tx_bps;
            m.1 += p.rx_bps;
        }
    }
    let util = |u: usize, tx: f64, rx: f64| Utilisation {
        tx: tx / uplinks[u].capacity_bps,
        rx: rx / uplinks[u].capacity_bps,
    };
    let measured = |u: usize| util(u, uplinks[u].tx_bps, uplinks[u].rx_bps);
    let mut saturated: Vec<usize> = (0..uplinks.len())
        .filter(|&u| {
            uplinks[u].live && measured(u).max() > threshold && util(u, mapped[u].0, mapped[u].1).max() > threshold
        })
        .collect();
    saturated.sort_by(|&a, &b| measured(b).max().total_cmp(&measured(a).max()).then(a.cmp(&b)));

    for s in saturated {
        let direction = if measured(s).tx >= measured(s).rx {
            Direction::Tx
        } else {
            Direction::Rx
        };
        // (port index, target, target load after) for the best relieving and the best other port.
        let mut relieving: Option<(usize, usize, Utilisation)> = None;
        let mut partial: Option<(usize, usize, Utilisation)> = None;
        for (i, p) in ports.iter().enumerate() {
            if p.current != Some(UplinkId(s)) || p.movable_to.is_empty() || p.tx_bps + p.rx_bps <= 0.0 {
                continue;
            }
            let Some((target, to_after)) = best_fit(threshold, s, p, uplinks, &mapped) else {
                continue;
            };
            let after = util(s, mapped[s].0 - p.tx_bps, mapped[s].1 - p.rx_bps);
            let load = |j: usize| ports[j].tx_bps + ports[j].rx_bps;
            let size = p.tx_bps + p.rx_bps;
            if after.max() <= threshold {
                if relieving.is_none_or(|(j, _, _)| size < load(j)) {
                    relieving = Some((i, target, to_after));
                }
            } else if partial.is_none_or(|(j, _, _)| size > load(j)) {
                partial = Some((i, target, to_after));
            }
        }
        if let Some((i, t, to_after)) = relieving.or(partial) {
            let p = &ports[i];
            let to_load = (uplinks[t].tx_bps.max(mapped[t].0), uplinks[t].rx_bps.max(mapped[t].1));
            return Some(LbtDecision {
                port: p.port,
                from: UplinkId(s),
                to: UplinkId(t),
                direction,
                threshold,
                from_before: measured(s),
                from_after: util(s, mapped[s].0 - p.tx_bps, mapped[s].1 - p.rx_bps),
                to_before: util(t, to_load.0, to_load.1),
                to_after,
                port_tx: Bandwidth::from_bps_f64(p.tx_bps),
                port_rx: Bandwidth::from_bps_f64(p.rx_bps),
            });
        }
    }
    None
}

/// The live uplink (other than `from`) where `p` fits under the threshold with the lowest
/// resulting utilisation, and that utilisation; ties go to the lower uplink index.
fn best_fit(
    threshold: f64,
    from: usize,
    p: &PortLoad<'_>,
    uplinks: &[UplinkLoad],
    mapped: &[(f64, f64)],
) -> Option<(usize, Utilisation)> {
    let mut best: Option<(usize, Utilisation)> = None;
    for &UplinkId(t) in p.movable_to {
        let Some(u) = uplinks.get(t) else { continue };
        if t == from || !u.live {
            continue;
        }
        let after = Utilisation {
            tx: (u.tx_bps.max(mapped[t].0) + p.tx_bps) / u.capacity_bps,
            rx: (u.rx_bps.max(mapped[t].1) + p.rx_bps) / u.capacity_bps,
        };
        let better = best.is_none_or(|(b, bu)| after.max() < bu.max() || (after.max() == bu.max() && t < b));
        if after.max() <= threshold && better {
            best = Some((t, after));
        }
    }
    best
}
