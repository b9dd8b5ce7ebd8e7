//! The switch's past as a scenario: what it holds, and that the simulator takes it.

use super::*;
use crate::api::history::{Queue, Sample};
use crate::live::snapshot::UplinkView;
use std::path::Path;

fn config() -> SwitchFile {
    let text = r#"
[[uplinks]]
name = "uplink1"
interface = "eth1"

[[uplinks]]
name = "uplink2"
interface = "eth2"
capacity = "1G"

[[port_groups]]
name = "vms"
policy = "load-based"
active = ["uplink1", "uplink2"]

[[traffic_classes]]
class = "vm"
reservation = "500M"

[[ports]]
name = "vm1"
interface = "tap1"
group = "vms"
reservation = "200M"
mac_takeover = true

[[ports]]
name = "vm2"
interface = "tap2"
group = "vms"
limit = "300M"
"#;
    toml::from_str(text).unwrap()
}

fn snapshot() -> Snapshot {
    Snapshot {
        unix_ms: 1_000_000,
        uplinks: ["uplink1", "uplink2"]
            .iter()
            .map(|n| UplinkView {
                name: n.to_string(),
                link: "up".into(),
                admin: "up".into(),
                // uplink1's capacity is the kernel's speed (none in the file): 10G here.
                capacity_bps: if *n == "uplink1" { 10_000_000_000 } else { 1_000_000_000 },
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// `n` seconds: vm1 sending 400M and receiving 100M, vm2 at its 300M limit; vm2 missing from
/// the first point (not among its busiest ports).
fn points(n: u64) -> Vec<Point> {
    (0..n)
        .map(|k| Point {
            unix_ms: 1_000_000 + k * 1000,
            uplinks: vec![],
            ports: [("vm1", 400e6, 100e6), ("vm2", 300e6, 0.0)]
                .iter()
                .filter(|(name, ..)| !(k == 0 && *name == "vm2"))
                .map(|(name, tx, rx)| Sample {
                    name: name.to_string(),
                    // The window's means lag; the last second's are what is replayed.
                    tx: tx / 2.0,
                    rx: rx / 2.0,
                    last: Some([*tx, *rx]),
                    // vm2's queue turned away 100M of its 300M a second; vm1's never spoke.
                    queue: (*name == "vm2").then_some(Queue {
                        turned_away: 100e6,
                        marked: 0.0,
                        waited: Some(0.95),
                        tcp: Some(0.0),
                    }),
                })
                .collect(),
        })
        .collect()
}

#[test]
fn the_past_is_a_scenario_of_the_running_configuration_and_its_measured_rates() {
    let text = past(&config(), &snapshot(), &points(30)).unwrap();
    let s = teamster_sim::Scenario::from_str(&text, Path::new("past.toml")).unwrap();
    assert_eq!(s.file.duration_s, 30.0);
    // The capacity the uplink runs at, the file's where the kernel gives none.
    let caps: Vec<u64> = s.file.uplinks.iter().map(|u| u.capacity.bps()).collect();
    assert_eq!(caps, [10_000_000_000, 1_000_000_000]);
    let vm1 = s.ports.iter().find(|p| p.name == "vm1").unwrap();
    let vm2 = s.ports.iter().find(|p| p.name == "vm2").unwrap();
    assert_eq!((vm1.tx.at(10.0), vm1.rx.at(10.0)), (400e6, 100e6));
    assert_eq!(
        (vm2.tx.at(0.0), vm2.tx.at(1.0)),
        (0.0, 300e6),
        "missing from a point: nothing then"
    );
    // The controls and the tree come along; the switch's own keys do not.
    assert_eq!(s.file.ports[0].reservation.bps(), 200_000_000);
    assert_eq!(s.file.ports[1].limit.map(|l| l.bps()), Some(300_000_000));
    assert!(
        !text.contains("tap1") && !text.contains("mac_takeover") && !text.contains("eth1"),
        "{text}"
    );
    // And a what-if runs on it: vm2's limit raised, with vm2 named as unsure of its demand.
    let a = teamster_sim::whatif::answer(
        &request(
            &text,
            &[teamster_sim::whatif::Change::Port {
                port: "vm2".into(),
                reservation: None,
                shares: None,
                limit: Some(teamster_sim::whatif::LimitChange::To("1G".parse().unwrap())),
            }],
        ),
        Path::new("past.toml"),
    )
    .unwrap();
    let vm2 = a.ports.iter().find(|p| p.name == "vm2").unwrap();
    assert!(vm2.may_want_more, "{vm2:?}");
    assert!((vm1_rate(&a) - 400e6).abs() < 5e6);
}

/// A request without evidence (each port wants what it was measured at).
fn request(text: &str, changes: &[teamster_sim::whatif::Change]) -> teamster_sim::whatif::Request {
    teamster_sim::whatif::Request {
        scenario: text.to_string(),
        changes: changes.to_vec(),
        ..Default::default()
    }
}

#[test]
fn the_queues_counts_are_the_evidence_of_what_a_port_wanted() {
    let pts = points(20);
    let ev = evidence(&config(), &pts);
    assert!(!ev.contains_key("vm1"), "no queue counts, no evidence: {ev:?}");
    let vm2 = &ev["vm2"];
    // From the second point on (vm2 is missing from the first), at each point's own time.
    assert_eq!(vm2["turned_away"][0], json!([1.0, 100e6]));
    assert_eq!(vm2["waited"][18], json!([19.0, 0.95]));
    // Through the simulator: vm2 offered 300M and had 100M turned away, so it got 200M and
    // wanted 300M; with its limit raised, it is predicted to get its 300M.
    let text = past(&config(), &snapshot(), &pts).unwrap();
    let mut req = request(
        &text,
        &[teamster_sim::whatif::Change::Port {
            port: "vm2".into(),
            reservation: None,
            shares: None,
            limit: Some(teamster_sim::whatif::LimitChange::To("1G".parse().unwrap())),
        }],
    );
    req.evidence = serde_json::from_value(JsonValue::Object(ev)).unwrap();
    let a = teamster_sim::whatif::answer(&req, Path::new("past.toml")).unwrap();
    let vm2 = a.ports.iter().find(|p| p.name == "vm2").unwrap();
    let d = vm2.demand.as_ref().unwrap();
    assert_eq!(d.how, teamster_sim::whatif::How::Offered, "{d:?}");
    // Measured is what it got (200M from the second second on, nothing in the first).
    assert!((vm2.measured_bps.unwrap() - 200e6 * 19.0 / 20.0).abs() < 1e6, "{vm2:?}");
    assert!(
        (vm2.predicted_bps.unwrap() - 300e6 * 19.0 / 20.0).abs() < 5e6,
        "{vm2:?}"
    );
}

fn vm1_rate(a: &teamster_sim::whatif::Answer) -> f64 {
    a.ports.iter().find(|p| p.name == "vm1").unwrap().predicted_bps.unwrap()
}

#[test]
fn points_keep_their_own_times_and_a_down_uplink_is_down_all_along() {
    // Points 1.0, 1.5, 1.0 s apart (the history keeps one at least a second after the last,
    // from snapshots every half second): at 0, 1, 2.5 and 3.5 s.
    let mut pts = points(4);
    for (p, ms) in pts.iter_mut().zip([0u64, 1000, 2500, 3500]) {
        p.unix_ms = 1_000_000 + ms;
    }
    let mut snap = snapshot();
    snap.uplinks[1].link = "down".into();
    snap.uplinks[0].link = "up".into();
    let text = past(&config(), &snap, &pts).unwrap();
    let s = teamster_sim::Scenario::from_str(&text, Path::new("past.toml")).unwrap();
    assert_eq!(s.file.duration_s, 4.0);
    assert!(text.contains("[2.5, 400000000.0]"), "{text}");
    assert_eq!(s.events.len(), 1, "uplink2 down all along: {text}");
    // An uplink down in the past and again in the change is down once.
    let a = teamster_sim::whatif::answer(
        &request(
            &text,
            &[teamster_sim::whatif::Change::UplinkDown {
                uplink: "uplink2".into(),
            }],
        ),
        Path::new("past.toml"),
    )
    .unwrap();
    for p in &a.ports {
        assert_eq!(p.uplink_before.as_deref(), Some("uplink1"), "{p:?}");
    }
    // A short LBT window: a finer step, so load-based teaming's rule still reads.
    let mut c = config();
    c.lbt.window_s = 3.0;
    let text = past(&c, &snapshot(), &points(5)).unwrap();
    teamster_sim::Scenario::from_str(&text, Path::new("past.toml")).unwrap();
}

#[test]
fn an_uplink_without_a_known_capacity_is_an_error_naming_it() {
    let mut snap = snapshot();
    snap.uplinks[0].capacity_bps = 0;
    let e = past(&config(), &snap, &points(3)).unwrap_err();
    assert!(e.contains("uplink1"), "{e}");
}

#[test]
fn the_simulators_errors_name_the_change_as_the_request_has_it() {
    let w: WhatIf = serde_json::from_value(json!({
        "ports": [{ "port": "vm1", "limit": null }],
        "nodes": [{ "node": "gold", "shares": 80 }],
        "failover_orders": [{ "group": "vms", "active": ["uplink2"] }],
        "remove_ports": ["vm1", "vm7"],
    }))
    .unwrap();
    let (changes, at) = w.changes();
    assert_eq!(
        at,
        [
            "ports[0]",
            "nodes[0]",
            "failover_orders[0]",
            "remove_ports[0]",
            "remove_ports[1]"
        ]
    );
    assert_eq!(changes[0]["limit"], "none");
    assert_eq!(changes[1], json!({ "kind": "node", "node": "gold", "shares": 80 }));
    assert_eq!(
        changes[2],
        json!({ "kind": "order", "group": "vms", "active": ["uplink2"] })
    );
    assert_eq!(
        in_request_terms("changes[4]: no port named `vm7`", &at),
        "remove_ports[1]: no port named `vm7`"
    );
    // What does not name a change stays as it was.
    for m in ["with the change: port `vm1`: ...", "changes[9]: x", "changes[x"] {
        assert_eq!(in_request_terms(m, &at), m);
    }
}

#[test]
fn a_port_added_with_a_profile_reaches_the_simulator_as_it_reads_it() {
    let w: WhatIf = serde_json::from_value(json!({
        "add_ports": [
            { "name": "vm9", "group": "vms", "tx": { "kind": "on-off", "rate": "500M", "on_s": 2, "off_s": 3 } },
            { "name": "vm8", "group": "vms", "tx": { "kind": "step", "before": "0", "after": "1G", "at_s": 4 } },
            { "name": "vm7", "group": "vms", "tx": "100M" },
        ],
    }))
    .unwrap();
    let (changes, _) = w.changes();
    let changes: Vec<teamster_sim::whatif::Change> = serde_json::from_value(JsonValue::Array(changes)).unwrap();
    let text = past(&config(), &snapshot(), &points(10)).unwrap();
    let a = teamster_sim::whatif::answer(&request(&text, &changes), Path::new("past.toml")).unwrap();
    let vm9 = a.series.ports.iter().find(|p| p.name == "vm9").unwrap();
    assert_eq!(
        vm9.predicted[..5],
        [Some(500e6), Some(500e6), Some(0.0), Some(0.0), Some(0.0)]
    );
    let vm8 = a.series.ports.iter().find(|p| p.name == "vm8").unwrap();
    assert_eq!((vm8.predicted[3], vm8.predicted[4]), (Some(0.0), Some(1e9)));
    // A kind the simulator's curves do not have, or a field they do not, is out of form.
    for bad in [
        json!({ "add_ports": [{ "name": "x", "group": "vms", "tx": { "kind": "csv", "file": "/etc/shadow" } }] }),
        json!({ "add_ports": [{ "name": "x", "group": "vms", "tx": { "kind": "constant", "rate": "1G", "x": 1 } }] }),
        json!({ "add_ports": [{ "name": "x", "group": "vms" }] }),
        json!({ "add_ports": [{ "name": "x", "group": "vms", "tx": "1 GB" }] }),
    ] {
        let e = serde_json::from_value::<WhatIf>(bad.clone()).unwrap_err().to_string();
        assert!(!e.contains("untagged"), "{bad}: {e}");
    }
    let vm7 = a.series.ports.iter().find(|p| p.name == "vm7").unwrap();
    assert_eq!(vm7.predicted[0], Some(100e6));
}
