//! Fluid mode: rates per clock step, max-min sharing per uplink, the real team deciding the map.
//!
//! Each step at time `t`:
//! 1. timeline events due at or before `t` are applied to the team (link down/up, policy);
//! 2. the team's timers run (Load-Based Teaming checks), and its effects are collected;
//! 3. every port offers its demand at `t` (with its seeded jitter), split evenly across its
//!    flows; [`Team::select`] maps each flow to an uplink;
//! 4. each live uplink's capacity is shared max-min fairly among the flows mapped to it,
//!    separately for send and receive (receive traffic is taken to arrive on the uplink its flow
//!    sends on, as a physical switch that learned the MAC there delivers it);
//! 5. the delivered bytes are accounted to the team's meters, and recorded.
//!
//! Rows are recorded every second (every step if the step is longer), as means over the row.

use crate::maxmin;
use crate::scenario::{Event, Scenario};
use core::net::Ipv4Addr;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use teamster_core::teaming::{
    Direction, Effect, LbtDecision, LinkState, MoveReason, Policy, PortId, PortMove, PortSpec, Team, UplinkId,
};
use teamster_core::wire::{FlowKey, MacAddr};
use teamster_core::Instant;

/// One recorded row: means over `[t_s, t_s + interval)`, in bits/s.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub t_s: f64,
    pub uplink_tx: Vec<f64>,
    pub uplink_rx: Vec<f64>,
    pub offered_tx: Vec<f64>,
    pub delivered_tx: Vec<f64>,
    pub offered_rx: Vec<f64>,
    pub delivered_rx: Vec<f64>,
}

impl Row {
    pub fn total_offered_tx(&self) -> f64 {
        self.offered_tx.iter().sum()
    }
    pub fn total_delivered(&self) -> f64 {
        self.delivered_tx.iter().sum::<f64>() + self.delivered_rx.iter().sum::<f64>()
    }
    pub fn total_delivered_tx(&self) -> f64 {
        self.delivered_tx.iter().sum()
    }
}

/// A port's move as the run saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveRecord {
    pub t_s: f64,
    pub port: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
    /// The figures behind a Load-Based Teaming move.
    pub lbt: Option<LbtDecision>,
}

/// Everything a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutput {
    pub uplinks: Vec<String>,
    pub capacities: Vec<f64>,
    pub ports: Vec<String>,
    pub rows: Vec<Row>,
    pub moves: Vec<MoveRecord>,
    /// Timeline events applied, as `(t_s, description)`.
    pub events: Vec<(f64, String)>,
    /// Notify-switch frames sent.
    pub notifications: usize,
    /// The LBT threshold, if any port group uses Load-Based Teaming.
    pub lbt_threshold: Option<f64>,
    /// Packet mode: per port, each TCP_RR transaction's (completion time in s, latency in µs).
    pub latencies: Vec<Vec<(f64, f64)>>,
    /// Packet mode: changes refused by admission control, as (time in s, error).
    pub rejections: Vec<(f64, String)>,
    /// Packet mode: packets sent.
    pub packets: u64,
    /// Per port, the uplink it was on when the run ended.
    pub port_uplinks: Vec<Option<String>>,
}

/// A port's traffic: its flows' keys and its own jitter generator.
struct PortTraffic {
    flows: Vec<FlowKey>,
    rng: ChaCha8Rng,
}

/// Runs `s` to its end. Errors only if the team refuses the scenario's configuration.
pub fn run(s: &Scenario) -> Result<RunOutput, String> {
    let f = &s.file;
    let mut team =
        crate::scenario::build_team(f.uplinks.iter().map(|u| (u.name.clone(), u.capacity)), s.lbt, &s.groups)?;
    let mut rng = ChaCha8Rng::seed_from_u64(f.seed);
    let mut traffic = Vec::new();
    let mut used_macs: Vec<MacAddr> = s.ports.iter().filter_map(|p| p.mac).collect();
    for (i, p) in s.ports.iter().enumerate() {
        let mac = p.mac.unwrap_or_else(|| {
            let mac = loop {
                let mut b = [0u8; 6];
                rng.fill(&mut b);
                b[0] = 0x02; // locally administered, unicast
                if !used_macs.contains(&MacAddr(b)) {
                    break MacAddr(b);
                }
            };
            used_macs.push(mac);
            mac
        });
        team.add_port(PortSpec {
            id: PortId(p.id),
            mac,
            group: teamster_core::teaming::GroupId(p.group),
        })
        .map_err(|e| format!("ports[{i}]: {e}"))?;
        let src = Ipv4Addr::new(10, rng.random(), rng.random(), rng.random_range(1..255));
        let flows = (0..p.flows)
            .map(|_| FlowKey {
                src_mac: mac,
                src_ip: Some(src.into()),
                dst_ip: Some(Ipv4Addr::new(172, 16, rng.random(), rng.random_range(1..255)).into()),
                ip_proto: Some(6),
                src_port: Some(rng.random_range(1024..65535)),
                dst_port: Some(443),
                ..Default::default()
            })
            .collect();
        traffic.push(PortTraffic {
            flows,
            rng: ChaCha8Rng::seed_from_u64(f.seed ^ (0x5eed_0000 + i as u64)),
        });
    }

    let (nu, np) = (f.uplinks.len(), s.ports.len());
    let mut out = RunOutput {
        uplinks: f.uplinks.iter().map(|u| u.name.clone()).collect(),
        capacities: f.uplinks.iter().map(|u| u.capacity.bps_f64()).collect(),
        ports: s.ports.iter().map(|p| p.name.clone()).collect(),
        rows: Vec::new(),
        moves: Vec::new(),
        events: Vec::new(),
        notifications: 0,
        lbt_threshold: uses_lbt(s).then_some(s.lbt.threshold),
        latencies: Vec::new(),
        rejections: Vec::new(),
        packets: 0,
        port_uplinks: Vec::new(),
    };
    let steps = (f.duration_s / f.step_s).round() as u64;
    let per_row = (1.0 / f.step_s).round().max(1.0) as u64;
    let mut acc = empty_row(0.0, nu, np);
    let mut next_event = 0;
    let mut claims: Vec<Vec<(usize, f64)>> = vec![Vec::new(); nu];
    for k in 0..steps {
        let t = k as f64 * f.step_s;
        let now = Instant::from_nanos((t * 1e9).round() as u64);
        while let Some(e) = s.events.get(next_event).filter(|e| e.at_s() <= t + 1e-9) {
            out.events.push((t, apply_event(&mut team, s, e, now)?));
            next_event += 1;
        }
        if team.poll_at().is_some_and(|at| at <= now) {
            team.handle_timeout(now);
        }
        while let Some(effect) = team.poll_effect() {
            match effect {
                Effect::PortMoved(m) => out.moves.push({
                    let port = s.ports.iter().find(|p| p.id == m.port.0).map(|p| p.name.as_str());
                    MoveRecord::new(t, m, &out.uplinks, port)
                }),
                Effect::Transmit { .. } => out.notifications += 1,
            }
        }
        for dir in [Direction::Tx, Direction::Rx] {
            claims.iter_mut().for_each(Vec::clear);
            let mut offered = vec![0.0; np];
            for (i, p) in s.ports.iter().enumerate() {
                let curve = if dir == Direction::Tx { &p.tx } else { &p.rx };
                let jitter = if p.jitter > 0.0 {
                    1.0 + traffic[i].rng.random_range(-p.jitter..p.jitter)
                } else {
                    1.0
                };
                offered[i] = curve.at(t) * jitter;
                let per_flow = offered[i] / traffic[i].flows.len() as f64;
                for flow in &traffic[i].flows {
                    if let Some(u) = team.select(PortId(p.id), Some(flow)) {
                        claims[u.0].push((i, per_flow));
                    }
                }
            }
            let mut delivered = vec![0.0; np];
            for (u, c) in claims.iter().enumerate() {
                let cap = if team.link_state(UplinkId(u)) == Some(LinkState::Up) {
                    out.capacities[u]
                } else {
                    0.0
                };
                let demands: Vec<f64> = c.iter().map(|&(_, d)| d).collect();
                let mut per_port = vec![0.0; np];
                for ((i, _), got) in c.iter().zip(maxmin::share(cap, &demands)) {
                    per_port[*i] += got;
                }
                for (i, &rate) in per_port.iter().enumerate().filter(|(_, r)| **r > 0.0) {
                    delivered[i] += rate;
                    let bytes = (rate * f.step_s / 8.0).round() as u64;
                    team.account(PortId(s.ports[i].id), UplinkId(u), dir, bytes, now);
                }
                let total: f64 = per_port.iter().sum();
                match dir {
                    Direction::Tx => acc.uplink_tx[u] += total,
                    Direction::Rx => acc.uplink_rx[u] += total,
                }
            }
            let (o, d) = match dir {
                Direction::Tx => (&mut acc.offered_tx, &mut acc.delivered_tx),
                Direction::Rx => (&mut acc.offered_rx, &mut acc.delivered_rx),
            };
            o.iter_mut().zip(&offered).for_each(|(a, x)| *a += x);
            d.iter_mut().zip(&delivered).for_each(|(a, x)| *a += x);
        }
        if (k + 1) % per_row == 0 || k + 1 == steps {
            let n = ((k % per_row) + 1) as f64;
            let mut row = std::mem::replace(&mut acc, empty_row((k + 1) as f64 * f.step_s, nu, np));
            for v in [
                &mut row.uplink_tx,
                &mut row.uplink_rx,
                &mut row.offered_tx,
                &mut row.delivered_tx,
                &mut row.offered_rx,
                &mut row.delivered_rx,
            ] {
                v.iter_mut().for_each(|x| *x /= n);
            }
            out.rows.push(row);
        }
    }
    out.port_uplinks = s
        .ports
        .iter()
        .map(|p| team.port_uplink(PortId(p.id)).map(|u| out.uplinks[u.0].clone()))
        .collect();
    Ok(out)
}

/// True if a port group uses Load-Based Teaming at the start or after a policy event.
fn uses_lbt(s: &Scenario) -> bool {
    s.groups.iter().any(|g| g.policy == Policy::LOAD_BASED)
        || s.events
            .iter()
            .any(|e| matches!(e, Event::Policy { policy, .. } if *policy == Policy::LOAD_BASED))
}

fn empty_row(t_s: f64, nu: usize, np: usize) -> Row {
    Row {
        t_s,
        uplink_tx: vec![0.0; nu],
        uplink_rx: vec![0.0; nu],
        offered_tx: vec![0.0; np],
        delivered_tx: vec![0.0; np],
        offered_rx: vec![0.0; np],
        delivered_rx: vec![0.0; np],
    }
}

/// Applies one timeline event to the team and describes it for the log.
fn apply_event(team: &mut Team, s: &Scenario, e: &Event, now: Instant) -> Result<String, String> {
    match e {
        Event::Link { uplink, up, .. } => {
            let state = if *up { LinkState::Up } else { LinkState::Down };
            team.set_link(*uplink, state, now).map_err(|e| e.to_string())?;
            Ok(format!(
                "link {} {}",
                if *up { "up" } else { "down" },
                s.file.uplinks[uplink.0].name
            ))
        }
        Event::Policy {
            group,
            policy,
            order,
            failback,
            ..
        } => {
            team.reconfigure_group(
                teamster_core::teaming::GroupId(*group),
                *policy,
                order.clone(),
                *failback,
                now,
            )
            .map_err(|e| e.to_string())?;
            Ok(format!("port group {} policy {policy:?}", s.groups[*group].name))
        }
    }
}

impl MoveRecord {
    /// The record of team move `m` at `t_s`, naming uplinks from `uplinks` and the port by
    /// `port_name` (its ID if it has none).
    pub fn new(t_s: f64, m: PortMove, uplinks: &[String], port_name: Option<&str>) -> MoveRecord {
        let name = |u: Option<UplinkId>| u.map(|u| uplinks[u.0].clone());
        MoveRecord {
            t_s,
            port: port_name.map_or_else(|| m.port.to_string(), str::to_string),
            from: name(m.from),
            to: name(m.to),
            reason: m.reason.to_string(),
            lbt: match m.reason {
                MoveReason::LoadBased(d) => Some(d),
                _ => None,
            },
        }
    }
}

/// Formats a rate for reports, e.g. "6.60 Gbps".
pub fn gbps(bps: f64) -> String {
    format!("{:.2} Gbps", bps / 1e9)
}
