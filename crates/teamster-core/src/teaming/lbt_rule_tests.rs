//! The LBT rule itself ([`lbt::evaluate`]) on hand-made figures: which port, by which figure,
//! the relief guarantee, and the hold.

use super::lbt::{evaluate, Damping, LbtConfig, PortLoad, UplinkLoad};
use super::{PortId, Rates, UplinkId};

const G: f64 = 1e9;
const BOTH: [UplinkId; 2] = [UplinkId(0), UplinkId(1)];

fn rule(damping: Damping) -> LbtConfig {
    LbtConfig {
        damping,
        ..Default::default()
    }
}

/// A 10 GbE uplink whose window mean sends `mean_gbps`.
fn uplink(mean_gbps: f64) -> UplinkLoad {
    UplinkLoad {
        capacity_bps: 10.0 * G,
        live: true,
        tx_bps: mean_gbps * G,
        rx_bps: 0.0,
    }
}

/// A movable port on `on` sending `mean` Gbit/s over the window and `recent` Gbit/s now.
fn port(id: u32, on: usize, mean: f64, recent: f64) -> PortLoad<'static> {
    PortLoad {
        port: PortId(id),
        current: Some(UplinkId(on)),
        mean: Rates { tx: mean * G, rx: 0.0 },
        recent: Rates {
            tx: recent * G,
            rx: 0.0,
        },
        held: false,
        movable_to: &BOTH,
    }
}

#[test]
fn a_port_that_just_stepped_up_is_judged_by_its_new_rate() {
    // uplink1: p stepped up to 4 Gbit/s recently (its window mean is still 2); q and r send
    // 2.8 each. uplink2 carries 4.5 Gbit/s.
    let uplinks = [uplink(7.6), uplink(4.5)];
    let ports = [
        port(1, 0, 2.0, 4.0),
        port(2, 0, 2.8, 2.8),
        port(3, 0, 2.8, 2.8),
        port(4, 1, 4.5, 4.5),
    ];
    // The plain rule takes p for the smallest relief, and by its mean it fits on uplink2: in truth
    // uplink2 goes to 8.5 Gbit/s, over the threshold.
    let plain = evaluate(&rule(Damping::Vsphere), &uplinks, &ports).unwrap();
    assert_eq!((plain.port, plain.to), (PortId(1), UplinkId(1)));
    assert!(
        plain.to_after.tx <= 0.75 && 4.5 + 4.0 > 7.5,
        "p's real rate overloads the target"
    );
    // Teamster's rule sees 4 Gbit/s: p does not fit on uplink2; q relieves (9.6 - 2.8 = 6.8)
    // and fits (4.5 + 2.8 = 7.3).
    let d = evaluate(&rule(Damping::Teamster), &uplinks, &ports).unwrap();
    assert_eq!((d.port, d.to), (PortId(2), UplinkId(1)));
    assert!(
        (d.from_after.tx - 0.68).abs() < 1e-9 && (d.to_after.tx - 0.73).abs() < 1e-9,
        "{d:?}"
    );
    assert_eq!(d.port_tx_recent.bps_f64(), 2.8 * G);
    // The explanation states the figures, the recent rate among them.
    let text = d.to_string();
    assert!(
        text.contains("tx mean 76.00% > 75%") && text.contains("recent 2.80 Gbit/s") && text.contains("after 68.00%"),
        "{text}"
    );
}

#[test]
fn an_idle_port_is_never_moved() {
    // i stopped sending a few seconds ago (its mean still shows 1 Gbit/s); j and k send 4 each.
    let uplinks = [uplink(8.0), uplink(0.0)];
    let ports = [port(1, 0, 1.0, 0.0), port(2, 0, 3.5, 4.0), port(3, 0, 3.5, 4.0)];
    // The plain rule moves the idle port: it "relieves" by its mean, and relieves nothing.
    let plain = evaluate(&rule(Damping::Vsphere), &uplinks, &ports).unwrap();
    assert_eq!(plain.port, PortId(1));
    // Teamster's rule moves a port that is sending.
    let d = evaluate(&rule(Damping::Teamster), &uplinks, &ports).unwrap();
    assert_eq!(d.port, PortId(2));
    assert!(d.from_after.tx <= 0.75);
    // Once the uplink's ports send under the threshold now, nothing moves, though the window
    // mean is still over it.
    let quiet = [port(1, 0, 1.0, 0.0), port(2, 0, 3.5, 3.5), port(3, 0, 3.5, 3.5)];
    assert!(evaluate(&rule(Damping::Teamster), &uplinks, &quiet).is_none());
    assert!(evaluate(&rule(Damping::Vsphere), &uplinks, &quiet).is_some());
}

#[test]
fn a_momentarily_quiet_target_is_not_taken_for_free() {
    // uplink2's ports are idle now but sent 6 Gbit/s on average over the window: a 3 Gbit/s port
    // does not fit there under Teamster's rule (by the mean), nor under the plain rule.
    let uplinks = [uplink(8.0), uplink(6.0)];
    let ports = [port(1, 0, 3.0, 4.0), port(2, 0, 5.0, 4.0), port(3, 1, 6.0, 0.0)];
    assert!(evaluate(&rule(Damping::Teamster), &uplinks, &ports).is_none());
    // Its ports' recent rates count too when they are the larger figure.
    let busy_now = [port(1, 0, 3.0, 4.0), port(2, 0, 5.0, 4.0), port(3, 1, 1.0, 5.0)];
    let uplinks = [uplink(8.0), uplink(1.0)];
    assert!(evaluate(&rule(Damping::Teamster), &uplinks, &busy_now).is_none());
    assert!(evaluate(&rule(Damping::Vsphere), &uplinks, &busy_now).is_some());
}

#[test]
fn a_held_port_moves_only_as_the_only_relief() {
    let uplinks = [uplink(8.0), uplink(0.5)];
    // s (2 Gbit/s, held) and b (3 Gbit/s) both relieve 8 Gbit/s; s is smaller, but held.
    let mut s = port(1, 0, 2.0, 2.0);
    s.held = true;
    let ports = [s, port(2, 0, 3.0, 3.0), port(3, 0, 3.0, 3.0)];
    let d = evaluate(&rule(Damping::Teamster), &uplinks, &ports).unwrap();
    assert_eq!(d.port, PortId(2));
    assert!(!d.held);
    // The plain rule has no hold.
    assert_eq!(
        evaluate(&rule(Damping::Vsphere), &uplinks, &ports).unwrap().port,
        PortId(1)
    );
    // When only the held port relieves (the other does not fit on uplink2), it moves.
    let ports = [s, port(2, 0, 6.0, 6.0)];
    let d = evaluate(&rule(Damping::Teamster), &[uplink(8.0), uplink(2.0)], &ports).unwrap();
    assert_eq!(d.port, PortId(1));
    assert!(d.held && d.to_string().contains("held, moved as the only relief"));
    // A held port never moves for a partial relief.
    let mut big = port(1, 0, 1.0, 1.0);
    big.held = true;
    let ports = [big, port(2, 0, 8.0, 8.0)];
    assert!(evaluate(&rule(Damping::Teamster), &[uplink(9.0), uplink(5.0)], &ports).is_none());
    big.held = false;
    let ports = [big, port(2, 0, 8.0, 8.0)];
    let d = evaluate(&rule(Damping::Teamster), &[uplink(9.0), uplink(5.0)], &ports).unwrap();
    assert!(d.port == PortId(1) && d.from_after.tx > 0.75, "partial relief: {d:?}");
}

#[test]
fn damping_parses_and_prints_by_name() {
    for d in [Damping::Teamster, Damping::Vsphere] {
        assert_eq!(d.to_string().parse::<Damping>().unwrap(), d);
        assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{d}\""));
    }
    assert!("VSphere"
        .parse::<Damping>()
        .unwrap_err()
        .contains("teamster or vsphere"));
    assert_eq!(LbtConfig::default().damping, Damping::Teamster);
    assert_eq!(rule(Damping::Vsphere).hold(), core::time::Duration::ZERO);
    assert_eq!(rule(Damping::Teamster).hold(), core::time::Duration::from_secs(300));
    let huge = LbtConfig {
        period: core::time::Duration::MAX,
        ..Default::default()
    };
    assert_eq!(huge.hold(), core::time::Duration::MAX, "saturates, never panics");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]
    /// On any figures: a move never takes its target over the threshold; under Teamster's rule
    /// it never moves an idle port, nor a held one while another relief exists; and after a move
    /// the source is under the threshold whenever any single port's move could achieve that.
    /// (Figures are drawn so that uplink 0 is usually saturated and the others have room.)
    #[test]
    fn relief_guarantee_and_the_rules_invariants(
        caps in proptest::collection::vec(4u32..=10, 2..=4),
        means in proptest::collection::vec(0.0f64..0.7, 1..=3),
        busy in 0.76f64..1.2,
        raw in proptest::collection::vec(
            (proptest::bool::weighted(0.6), 1usize..4, 0.0f64..0.4, 0.0f64..0.4, 0.0f64..0.05, proptest::bool::weighted(0.3)),
            2..12,
        ),
        teamster in proptest::bool::ANY,
    ) {
        let n = caps.len().min(means.len() + 1);
        let all: Vec<UplinkId> = (0..n).map(UplinkId).collect();
        let cap = |u: usize| f64::from(caps[u]) * G;
        let uplinks: Vec<UplinkLoad> = (0..n)
            .map(|u| UplinkLoad {
                capacity_bps: cap(u),
                live: true,
                tx_bps: if u == 0 { busy } else { means[u - 1] } * cap(u),
                rx_bps: 0.0,
            })
            .collect();
        // Port rates are fractions of uplink 0's capacity.
        let ports: Vec<PortLoad> = raw
            .iter()
            .enumerate()
            .map(|(i, &(first, other, mean, recent, rx, held))| PortLoad {
                port: PortId(i as u32),
                current: Some(UplinkId(if first { 0 } else { other % n })),
                mean: Rates { tx: mean * cap(0), rx: rx * cap(0) },
                recent: Rates { tx: recent * cap(0), rx: rx * cap(0) },
                held,
                movable_to: &all,
            })
            .collect();
        let config = rule(if teamster { Damping::Teamster } else { Damping::Vsphere });
        let Some(d) = evaluate(&config, &uplinks, &ports) else { return Ok(()) };
        proptest::prop_assert!(d.to_after.max() <= config.threshold + 1e-12, "{d:?}");
        let moved = ports.iter().find(|p| p.port == d.port).unwrap();
        // Could port `p` alone relieve the source? Ask the rule with only `p` movable.
        let relieves = |p: &PortLoad| {
            let only: Vec<PortLoad> = ports
                .iter()
                .map(|q| PortLoad { movable_to: if q.port == p.port { &all } else { &[] }, held: false, ..*q })
                .collect();
            evaluate(&config, &uplinks, &only).is_some_and(|o| o.from == d.from && o.from_after.max() <= config.threshold)
        };
        let on_source: Vec<&PortLoad> = ports.iter().filter(|p| p.current == Some(d.from)).collect();
        if on_source.iter().any(|p| relieves(p)) {
            proptest::prop_assert!(d.from_after.max() <= config.threshold, "a single port could relieve: {d:?}");
        }
        if teamster {
            proptest::prop_assert!(moved.recent.tx + moved.recent.rx > 0.0, "moved an idle port");
            if moved.held {
                proptest::prop_assert!(d.held && d.from_after.max() <= config.threshold, "held, partial: {d:?}");
                proptest::prop_assert!(
                    !on_source.iter().any(|p| !p.held && relieves(p)),
                    "moved a held port while another relief existed: {d:?}"
                );
            }
        }
    }
}
