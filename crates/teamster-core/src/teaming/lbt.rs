//! Load-Based Teaming (vSphere's "route based on physical NIC load"), under vSphere's plain rule
//! or Teamster's damped one.
//!
//! Model. The team meters, per uplink and per port, the send and the receive rate: the *mean*
//! over a sliding window ([`LbtConfig::window`], default 30 s) and the *recent* rate over the
//! window's last [`RECENT`](super::RateMeter::RECENT) buckets (3 s by default). At each meter bucket boundary
//! (one thirtieth of the window) each port group using LBT checks the uplinks and moves at most
//! one of its ports per [`LbtConfig::period`] (default 30 s). A port's *load* is the figure the
//! rule judges it by: its recent rate under Teamster's rule, its mean under vSphere's.
//!
//! 1. An uplink is *saturated* when its mean send or receive utilisation, as a fraction of its
//!    own capacity, exceeds [`LbtConfig::threshold`] (default 0.75: vSphere's trigger), and the
//!    load of the ports now mapped to it (the sum) still does. The second test keeps a move
//!    already made, or a port gone quiet, from counting while the window still holds its traffic.
//! 2. Saturated uplinks are taken most-utilised first. For each, the candidates are the group's
//!    ports on it with a load above zero. A candidate may go to a live active uplink of its group
//!    where its load, added to that uplink's load, stays at or under the threshold in both
//!    directions; among those it goes where it fits best, the lowest resulting utilisation.
//! 3. The port moved is the one that takes the saturated uplink back under the threshold with
//!    the least disruption: the smallest such port. If no single port does, the largest port
//!    that fits anywhere moves, for the most relief. Ties go to the lower port ID. If no port
//!    fits anywhere, nothing moves.
//!
//! The two rules (`[lbt] damping`, [`Damping`]) differ in three places:
//!
//! | | `vsphere` (plain) | `teamster` (default) |
//! |---|---|---|
//! | a port's load (choice, relief, fit) | its window mean | its recent rate |
//! | a target uplink's load | max(its mean, its ports' means summed) | the same, or its ports' recent rates summed if larger |
//! | a port LBT moved within the hold | moves like any other | moves only as the only relief |
//!
//! Why the recent rate. The window mean lags by up to a window: a port that has just stepped up
//! looks small, so choosing "the smallest port that relieves" by mean can pick one that does not
//! relieve; a port that has gone idle still looks busy, so it can be moved, which relieves
//! nothing and, on the plain rule, is what a ping-pong is made of. Judged by its recent rate, an
//! idle port is never a candidate, and the relief test holds for the load that is there now.
//! The relief guarantee: after a move the source uplink is under the threshold (by these
//! figures) whenever any single candidate's move could achieve that.
//!
//! Damping. Under Teamster's rule a port that LBT moved within the last [`HOLD_PERIODS`] periods
//! (5 minutes at the defaults) is *held*: it moves again only if it is the only candidate whose
//! move relieves its uplink, and never for a partial relief. Without it, loads that alternate
//! (ports on and off in anti-phase on two uplinks, a constant port between them) make LBT move a
//! port to whichever uplink is quiet now and back when that uplink's ports wake, at the period's
//! rate for ever: each move fits when it is made and is undone half a cycle later. With the hold,
//! the next relief must come from another port, typically one of the waking ones, whose move
//! pairs anti-phase loads on one uplink, and the team settles. Since a held port still moves when
//! nothing else relieves, damping never leaves saturated an uplink that one move could relieve.
//!
//! Utilisation is relative to each uplink's own capacity, so a 1 GbE and a 10 GbE uplink in one
//! team are both kept under the threshold. [`evaluate`] is a pure function of its inputs.

use super::state::Rates;
use super::{Direction, PortId, UplinkId, Utilisation};
use crate::units::Bandwidth;
use core::fmt;
use core::str::FromStr;
use core::time::Duration;

/// How many periods a port moved by Teamster's rule stays held (see the module documentation).
pub const HOLD_PERIODS: u32 = 10;

/// Which rule Load-Based Teaming follows (`[lbt] damping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Damping {
    /// Ports judged by their recent rate; a recently moved port is held.
    #[default]
    Teamster,
    /// vSphere's plain rule: ports judged by their window mean, no hold.
    Vsphere,
}

impl fmt::Display for Damping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Damping::Teamster => "teamster",
            Damping::Vsphere => "vsphere",
        })
    }
}

impl FromStr for Damping {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "teamster" => Ok(Damping::Teamster),
            "vsphere" => Ok(Damping::Vsphere),
            _ => Err(format!("unknown lbt damping `{s}`: expected teamster or vsphere")),
        }
    }
}

/// Load-Based Teaming's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LbtConfig {
    /// Span of the mean utilisation (vSphere: 30 s).
    pub window: Duration,
    /// Saturation threshold as a fraction of an uplink's capacity, in (0, 1] (vSphere: 0.75).
    pub threshold: f64,
    /// Least time between two moves of one port group (vSphere: 30 s).
    pub period: Duration,
    /// The rule: Teamster's damped one (default) or vSphere's plain one.
    pub damping: Damping,
}

impl Default for LbtConfig {
    fn default() -> Self {
        LbtConfig {
            window: Duration::from_secs(30),
            threshold: 0.75,
            period: Duration::from_secs(30),
            damping: Damping::Teamster,
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

    /// How long a moved port stays held: [`HOLD_PERIODS`] periods under Teamster's rule, none
    /// under vSphere's.
    pub fn hold(&self) -> Duration {
        match self.damping {
            Damping::Teamster => self.period.saturating_mul(HOLD_PERIODS),
            Damping::Vsphere => Duration::ZERO,
        }
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
    /// Mean rates over the window.
    pub mean: Rates,
    /// Rates over the window's last few buckets.
    pub recent: Rates,
    /// LBT moved it within the hold.
    pub held: bool,
    /// The group's active uplinks if the port may be moved, else empty.
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
    /// The rule that chose the move.
    pub damping: Damping,
    /// The port was held (moved within the hold) and moved as the only relief.
    pub held: bool,
    /// Measured mean utilisation of the saturated uplink.
    pub from_before: Utilisation,
    /// Load of the saturated uplink's remaining ports after the move (by the rule's figures).
    pub from_after: Utilisation,
    /// Load of the target uplink before the move.
    pub to_before: Utilisation,
    /// Load of the target uplink after the move.
    pub to_after: Utilisation,
    /// The moved port's mean send rate.
    pub port_tx: Bandwidth,
    /// The moved port's mean receive rate.
    pub port_rx: Bandwidth,
    /// The moved port's recent send rate.
    pub port_tx_recent: Bandwidth,
    /// The moved port's recent receive rate.
    pub port_rx_recent: Bandwidth,
}

impl fmt::Display for LbtDecision {
    /// The figures behind the move, in the triggering direction: the uplink's mean against the
    /// threshold, the port's rate (the figure the rule judged it by first), and the source's and
    /// target's utilisation after the move.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.direction;
        let pct = |u: Utilisation| 100.0 * u.get(d);
        let gbps = |b: Bandwidth| b.bps_f64() / 1e9;
        let (mean, recent) = match d {
            Direction::Tx => (gbps(self.port_tx), gbps(self.port_tx_recent)),
            Direction::Rx => (gbps(self.port_rx), gbps(self.port_rx_recent)),
        };
        let rule = match self.damping {
            Damping::Teamster => "",
            Damping::Vsphere => " (vsphere rule)",
        };
        write!(
            f,
            "load-based{rule}: {d} mean {:.2}% > {:.0}%; ",
            pct(self.from_before),
            100.0 * self.threshold
        )?;
        match self.damping {
            Damping::Teamster => write!(f, "port {d} recent {recent:.2} Gbit/s (mean {mean:.2})")?,
            Damping::Vsphere => write!(f, "port {d} mean {mean:.2} Gbit/s (recent {recent:.2})")?,
        }
        write!(
            f,
            "; source after {:.2}%, target {:.2}% -> {:.2}%",
            pct(self.from_after),
            pct(self.to_before),
            pct(self.to_after)
        )?;
        if self.held {
            f.write_str("; held, moved as the only relief")?;
        }
        Ok(())
    }
}

/// Decides the one port to move now, if any, following the rules in the module documentation.
pub fn evaluate(config: &LbtConfig, uplinks: &[UplinkLoad], ports: &[PortLoad<'_>]) -> Option<LbtDecision> {
    let threshold = config.threshold;
    let teamster = config.damping == Damping::Teamster;
    let load = |p: &PortLoad<'_>| if teamster { p.recent } else { p.mean };
    let add = |a: Rates, b: Rates| Rates {
        tx: a.tx + b.tx,
        rx: a.rx + b.rx,
    };
    // Per uplink: the ports' loads, means and recent rates, summed.
    let mut mapped = vec![(Rates::default(), Rates::default(), Rates::default()); uplinks.len()];
    for p in ports {
        if let Some(m) = p.current.and_then(|u| mapped.get_mut(u.0)) {
            *m = (add(m.0, load(p)), add(m.1, p.mean), add(m.2, p.recent));
        }
    }
    let util = |u: usize, r: Rates| Utilisation {
        tx: r.tx / uplinks[u].capacity_bps,
        rx: r.rx / uplinks[u].capacity_bps,
    };
    let measured = |u: usize| {
        util(
            u,
            Rates {
                tx: uplinks[u].tx_bps,
                rx: uplinks[u].rx_bps,
            },
        )
    };
    // A target's load: its mean or its ports' means, and under Teamster's rule their recent
    // rates too, whichever is largest, so that a momentarily quiet uplink does not look free.
    let target_load = |t: usize| {
        let (_, mean, recent) = mapped[t];
        let (recent_tx, recent_rx) = if teamster { (recent.tx, recent.rx) } else { (0.0, 0.0) };
        Rates {
            tx: uplinks[t].tx_bps.max(mean.tx).max(recent_tx),
            rx: uplinks[t].rx_bps.max(mean.rx).max(recent_rx),
        }
    };
    let mut saturated: Vec<usize> = (0..uplinks.len())
        .filter(|&u| uplinks[u].live && measured(u).max() > threshold && util(u, mapped[u].0).max() > threshold)
        .collect();
    saturated.sort_by(|&a, &b| measured(b).max().total_cmp(&measured(a).max()).then(a.cmp(&b)));

    for s in saturated {
        let direction = if measured(s).tx >= measured(s).rx {
            Direction::Tx
        } else {
            Direction::Rx
        };
        let size = |j: usize| load(&ports[j]).tx + load(&ports[j]).rx;
        // (port index, target) for the smallest free relief, the smallest held relief and the
        // largest free partial relief.
        let mut relief: Option<(usize, usize)> = None;
        let mut held_relief: Option<(usize, usize)> = None;
        let mut partial: Option<(usize, usize)> = None;
        for (i, p) in ports.iter().enumerate() {
            if p.current != Some(UplinkId(s)) || p.movable_to.is_empty() || size(i) <= 0.0 {
                continue;
            }
            let Some(target) = best_fit(threshold, s, p.movable_to, load(p), uplinks, &target_load) else {
                continue;
            };
            let after = util(s, sub(mapped[s].0, load(p)));
            let held = p.held && teamster;
            let slot = if after.max() > threshold {
                if held {
                    continue;
                }
                &mut partial
            } else if held {
                &mut held_relief
            } else {
                &mut relief
            };
            let better = match slot {
                None => true,
                Some((j, _)) if after.max() > threshold => size(i) > size(*j),
                Some((j, _)) => size(i) < size(*j),
            };
            if better {
                *slot = Some((i, target));
            }
        }
        if let Some((i, t)) = relief.or(held_relief).or(partial) {
            let p = &ports[i];
            let bw = Bandwidth::from_bps_f64;
            return Some(LbtDecision {
                port: p.port,
                from: UplinkId(s),
                to: UplinkId(t),
                direction,
                threshold,
                damping: config.damping,
                held: p.held && teamster,
                from_before: measured(s),
                from_after: util(s, sub(mapped[s].0, load(p))),
                to_before: util(t, target_load(t)),
                to_after: util(t, add(target_load(t), load(p))),
                port_tx: bw(p.mean.tx),
                port_rx: bw(p.mean.rx),
                port_tx_recent: bw(p.recent.tx),
                port_rx_recent: bw(p.recent.rx),
            });
        }
    }
    None
}

/// `a - b`, never below zero (sums of floats may not cancel exactly).
fn sub(a: Rates, b: Rates) -> Rates {
    Rates {
        tx: (a.tx - b.tx).max(0.0),
        rx: (a.rx - b.rx).max(0.0),
    }
}

/// The live uplink of `movable_to` (other than `from`) where a port of load `load` fits under
/// the threshold with the lowest resulting utilisation; ties go to the lower uplink index.
fn best_fit(
    threshold: f64,
    from: usize,
    movable_to: &[UplinkId],
    load: Rates,
    uplinks: &[UplinkLoad],
    target_load: &dyn Fn(usize) -> Rates,
) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for &UplinkId(t) in movable_to {
        let Some(u) = uplinks.get(t) else { continue };
        if t == from || !u.live {
            continue;
        }
        let before = target_load(t);
        let after = ((before.tx + load.tx) / u.capacity_bps).max((before.rx + load.rx) / u.capacity_bps);
        if after <= threshold && best.is_none_or(|(b, bu)| after < bu || (after == bu && t < b)) {
            best = Some((t, after));
        }
    }
    best.map(|(t, _)| t)
}
