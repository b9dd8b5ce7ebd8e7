//! Fluid mode: rates per clock step, max-min sharing per uplink, the real team deciding the map.
//!
//! Each step at time `t`:
//! 1. timeline events due at or before `t` are applied to the team (link down/up, policy);
//! 2. the team's timers run (Load-Based Teaming checks), and its effects are collected;
//! 3. every port offers its demand at `t` (with its seeded jitter), split evenly across its
//!    flows; [`Team::select_frame`] maps each flow to an uplink, recording the step's bytes for
//!    the flowlet policies (with steps at least the flowlet gap, each step is a new flowlet);
//! 4. each live uplink's capacity is shared max-min fairly among the flows mapped to it,
//!    separately for send and receive (receive traffic is taken to arrive on the uplink its flow
//!    sends on, as a physical switch that learned the MAC there delivers it);
//! 5. the delivered bytes are accounted to the team's meters, and recorded.
//!
//! Rows are recorded every second (every step if the step is longer), as means over the row.

use crate::maxmin;
use crate::run::{MoveRecord, Row, RunOutput};
use crate::scenario::{Event, Scenario};
use core::net::Ipv4Addr;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use teamster_core::teaming::{Direction, Effect, LinkState, Policy, PortId, Team, UplinkId};
use teamster_core::wire::FlowKey;
use teamster_core::Instant;

/// A port's traffic: its flows' keys and its own jitter generator.
struct PortTraffic {
    flows: Vec<FlowKey>,
    rng: ChaCha8Rng,
}

/// Runs `s` to its end. Errors only if the team refuses the scenario's configuration.
pub fn run(s: &Scenario) -> Result<RunOutput, String> {
    let f = &s.file;
    let mut team = s.host.team.clone();
    let mut rng = ChaCha8Rng::seed_from_u64(f.seed);
    let mut traffic = Vec::new();
    for (i, p) in s.ports.iter().enumerate() {
        let mac = p.mac;
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
    let mut out = RunOutput::new(
        f.uplinks.iter().map(|u| u.name.clone()).collect(),
        f.uplinks.iter().map(|u| u.capacity.bps_f64()).collect(),
        s.ports.iter().map(|p| p.name.clone()).collect(),
    );
    out.lbt_threshold = uses_lbt(s).then_some(s.host.lbt.threshold);
    // A fluid run's reservations stand all along.
    out.reservations = s
        .ports
        .iter()
        .map(|p| {
            f.ports
                .iter()
                .find(|e| e.name == p.name)
                .map(|e| vec![(0.0, e.reservation.bps_f64())])
                .unwrap_or_default()
        })
        .collect();
    let steps = (f.duration_s / f.step_s).round() as u64;
    let per_row = (1.0 / f.step_s).round().max(1.0) as u64;
    let mut acc = empty_row(0.0, nu, np);
    let mut next_event = 0;
    let mut claims: Vec<Vec<(usize, f64)>> = vec![Vec::new(); nu];
    let netioc = s.uses_netioc();
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
                    // Sending records the step's bytes at the step's instant (flowlet policies
                    // place and balance by them; a flow pauses between steps as long as the step,
                    // so with steps at least the flowlet gap every step is a new flowlet);
                    // receiving follows where the flow now sends.
                    let u = if dir == Direction::Tx {
                        let bytes = (per_flow * f.step_s / 8.0).max(1.0) as usize;
                        team.select_frame(PortId(p.id), Some(flow), bytes, now)
                    } else {
                        team.select(PortId(p.id), Some(flow))
                    };
                    if let Some(u) = u {
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
                let per_port = if netioc && dir == Direction::Tx {
                    share_by_netioc(s, cap, c)
                } else {
                    let demands: Vec<f64> = c.iter().map(|&(_, d)| d).collect();
                    let mut per_port = vec![0.0; np];
                    for ((i, _), got) in c.iter().zip(maxmin::share(cap, &demands)) {
                        per_port[*i] += got;
                    }
                    per_port
                };
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

/// One uplink's send bandwidth `cap` shared among the ports claiming it by the host's NetIOC
/// tree (reservations, shares, limits; each port's demand is what its flows offer here).
fn share_by_netioc(s: &Scenario, cap: f64, claims: &[(usize, f64)]) -> Vec<f64> {
    let tree = &s.host.tree;
    let mut demand: Vec<Option<f64>> = vec![None; tree.len()];
    for hp in &s.host.ports {
        demand[hp.leaf.0] = Some(0.0);
    }
    for &(i, d) in claims {
        let leaf = s.host.ports[i].leaf.0;
        demand[leaf] = Some(demand[leaf].unwrap_or(0.0) + d);
    }
    let got = teamster_core::ioc::allocate(tree, cap, &demand);
    s.host.ports.iter().map(|hp| got.get(hp.leaf)).collect()
}

/// True if a port group uses Load-Based Teaming at the start or after a policy event.
fn uses_lbt(s: &Scenario) -> bool {
    s.host.groups.iter().any(|g| g.policy == Policy::LOAD_BASED)
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
            Ok(format!("port group {} policy {policy:?}", s.host.groups[*group].name))
        }
    }
}
