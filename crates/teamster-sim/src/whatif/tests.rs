//! What-ifs on small pasts whose answers can be worked out by hand.

use super::*;

/// Two 1 Gbit/s uplinks; group `vms` (`policy`) over both; the `vm` class reserving 750M (the
/// most admission control allows, 75% of an uplink: VM ports' reservations come out of it);
/// ports offering constant rates as measured points (one a second for `secs` seconds), with
/// NetIOC controls as given.
fn past(policy: &str, secs: u32, ports: &[(&str, u32, f64, &str)]) -> String {
    let mut s = format!(
        "name = \"past\"\nduration_s = {secs}\nstep_s = 1\n\n[lbt]\nwindow_s = 30\nperiod_s = 30\n\n\
         [[uplinks]]\nname = \"uplink1\"\ncapacity = \"1G\"\n\n[[uplinks]]\nname = \"uplink2\"\ncapacity = \"1G\"\n\n\
         [[port_groups]]\nname = \"vms\"\npolicy = \"{policy}\"\nactive = [\"uplink1\", \"uplink2\"]\n\n\
         [[traffic_classes]]\nclass = \"vm\"\nreservation = \"750M\"\n"
    );
    for (name, id, rate, extra) in ports {
        let points: Vec<String> = (0..secs).map(|t| format!("[{t}.0, {rate:.1}]")).collect();
        s.push_str(&format!(
            "\n[[ports]]\nname = \"{name}\"\nid = {id}\ngroup = \"vms\"\n{extra}\ntx = {{ kind = \"points\", points = [{}] }}\n",
            points.join(", ")
        ));
    }
    s
}

fn port<'a>(a: &'a Answer, name: &str) -> &'a PortAnswer {
    a.ports.iter().find(|p| p.name == name).unwrap()
}

fn request(text: &str, changes: &[Change]) -> Request {
    Request {
        scenario: text.to_string(),
        changes: changes.to_vec(),
        ..Request::default()
    }
}

fn run(text: &str, changes: &[Change]) -> Result<Answer, String> {
    answer(&request(text, changes), Path::new("past.toml")).map_err(|e| {
        assert!(matches!(e, WhatIfError::Changes(_)), "the past itself failed: {e}");
        e.to_string()
    })
}

#[test]
fn a_reservation_raised_under_contention_is_predicted_to_hold() {
    // vm1 and vm2 share uplink1 (one uplink active), each measured at 480M (half of what the
    // two got between them); vm1's reservation raised to 700M.
    let mut text = past(
        "port-id",
        20,
        &[("vm1", 1, 480e6, "shares = 50"), ("vm2", 2, 480e6, "shares = 50")],
    );
    text = text.replace("active = [\"uplink1\", \"uplink2\"]", "active = [\"uplink1\"]");
    let a = run(
        &text,
        &[Change::Port {
            port: "vm1".into(),
            reservation: Some("700M".parse().unwrap()),
            shares: None,
            limit: None,
        }],
    )
    .unwrap();
    let (vm1, vm2) = (port(&a, "vm1"), port(&a, "vm2"));
    // The model of the past fits what was measured.
    assert!((vm1.baseline_bps.unwrap() - 480e6).abs() < 10e6, "{vm1:?}");
    // Its demand is what it got: it cannot be given more than 480M, and its reservation (over
    // what it offers) holds because it gets all it offers.
    assert!((vm1.predicted_bps.unwrap() - 480e6).abs() < 10e6, "{vm1:?}");
    assert_eq!(vm1.reservation_holds, Some(true));
    assert_eq!(vm2.reservation_holds, None);
    // Both were on a full uplink: the answer says it cannot tell what they wanted.
    assert!(vm1.may_want_more && vm2.may_want_more, "{a:#?}");
    assert!(
        a.notes.iter().any(|n| n.contains("uncertain") && n.contains("vm1")),
        "{:?}",
        a.notes
    );
    // The same with greedy demands the model can share: vm1 offering 900M now.
    let greedy = past("port-id", 20, &[("vm1", 1, 900e6, ""), ("vm2", 2, 900e6, "")])
        .replace("active = [\"uplink1\", \"uplink2\"]", "active = [\"uplink1\"]");
    let a = run(
        &greedy,
        &[Change::Port {
            port: "vm1".into(),
            reservation: Some("700M".parse().unwrap()),
            shares: None,
            limit: None,
        }],
    )
    .unwrap();
    let (vm1, vm2) = (port(&a, "vm1"), port(&a, "vm2"));
    assert!((vm1.baseline_bps.unwrap() - 500e6).abs() < 20e6, "{vm1:?}");
    assert!(vm1.predicted_bps.unwrap() >= 0.99 * 700e6, "{vm1:?}");
    assert!(vm2.predicted_bps.unwrap() <= 310e6, "{vm2:?}");
    assert_eq!(vm1.reservation_holds, Some(true));
}

#[test]
fn an_uplink_the_past_had_down_is_down_once() {
    let text = past("port-id", 10, &[("vm1", 1, 100e6, "")])
        + "\n[[events]]\nkind = \"link-down\"\nat_s = 0.0\nuplink = \"uplink2\"\n";
    let a = run(
        &text,
        &[Change::UplinkDown {
            uplink: "uplink2".into(),
        }],
    )
    .unwrap();
    assert_eq!(a.scenario.matches("link-down").count(), 1, "{}", a.scenario);
    // A past that does not load is the writer's fault, not the changes'.
    let e = answer(&request("name = 1", &[]), Path::new("past.toml")).unwrap_err();
    assert!(matches!(e, WhatIfError::Past(_)), "{e:?}");
}

#[test]
fn an_uplink_down_puts_every_port_on_the_other() {
    let text = past("port-id", 20, &[("vm1", 1, 600e6, ""), ("vm2", 2, 600e6, "")]);
    let a = run(
        &text,
        &[Change::UplinkDown {
            uplink: "uplink2".into(),
        }],
    )
    .unwrap();
    let before: Vec<_> = a.ports.iter().map(|p| p.uplink_before.clone().unwrap()).collect();
    assert_ne!(before[0], before[1], "port ID spreads the two: {a:#?}");
    for p in &a.ports {
        assert_eq!(p.uplink_after.as_deref(), Some("uplink1"), "{p:?}");
        assert!((p.predicted_bps.unwrap() - 500e6).abs() < 20e6, "{p:?}");
        assert!((p.baseline_bps.unwrap() - 600e6).abs() < 20e6, "{p:?}");
    }
    let u2 = a.uplinks.iter().find(|u| u.name == "uplink2").unwrap();
    assert!(
        u2.baseline_utilisation > 0.5 && u2.predicted_utilisation == 0.0,
        "{u2:?}"
    );
}

#[test]
fn load_based_teaming_is_predicted_to_move_a_port_off_a_busy_uplink() {
    // Under port ID the two busy ports share an uplink (IDs 1 and 3), the light one has the
    // other; load-based teaming moves one off once its uplink passes 75% over 30 s.
    let text = past(
        "port-id",
        90,
        &[("vm1", 1, 500e6, ""), ("vm2", 2, 50e6, ""), ("vm3", 3, 500e6, "")],
    );
    let a = run(
        &text,
        &[Change::Policy {
            group: "vms".into(),
            policy: "load-based".parse().unwrap(),
        }],
    )
    .unwrap();
    assert_eq!(port(&a, "vm1").uplink_before, port(&a, "vm3").uplink_before, "{a:#?}");
    assert!(!a.moves.is_empty(), "{a:#?}");
    assert!(
        a.moves.iter().any(|m| m.port == "vm1" || m.port == "vm3"),
        "{:#?}",
        a.moves
    );
    assert_ne!(port(&a, "vm1").uplink_after, port(&a, "vm3").uplink_after, "{a:#?}");
}

#[test]
fn ports_added_and_removed() {
    let text = past("port-id", 10, &[("vm1", 1, 300e6, ""), ("vm2", 2, 300e6, "")]);
    let a = run(
        &text,
        &[
            Change::AddPort {
                name: "vm9".into(),
                group: "vms".into(),
                tx: Some("200M".parse().unwrap()),
                profile: None,
                reservation: Some("100M".parse().unwrap()),
                limit: None,
            },
            Change::RemovePort { port: "vm2".into() },
        ],
    )
    .unwrap();
    let vm9 = port(&a, "vm9");
    assert_eq!(vm9.measured_bps, None);
    assert!((vm9.predicted_bps.unwrap() - 200e6).abs() < 5e6, "{vm9:?}");
    assert_eq!(vm9.reservation_holds, Some(true));
    let vm2 = port(&a, "vm2");
    assert!(vm2.measured_bps.is_some() && vm2.predicted_bps.is_none(), "{vm2:?}");
    // A VM added with a demand profile: on 2 s, off 3 s, at 500M: 200M on average, and its
    // series says when.
    let on_off: crate::demand::DemandSpec =
        toml::from_str("kind = \"on-off\"\nrate = \"500M\"\non_s = 2.0\noff_s = 3.0").unwrap();
    let added = |tx: Option<Bandwidth>, profile: Option<crate::demand::DemandSpec>| Change::AddPort {
        name: "vm9".into(),
        group: "vms".into(),
        tx,
        profile,
        reservation: None,
        limit: None,
    };
    let a = run(&text, &[added(None, Some(on_off.clone()))]).unwrap();
    assert!((port(&a, "vm9").predicted_bps.unwrap() - 200e6).abs() < 5e6, "{a:#?}");
    let s = a.series.ports.iter().find(|p| p.name == "vm9").unwrap();
    assert_eq!(
        s.predicted[0..5],
        [Some(500e6), Some(500e6), Some(0.0), Some(0.0), Some(0.0)]
    );
    // Both, neither, or a profile that would read a file: refused, naming the port.
    for bad in [
        added(Some("1G".parse().unwrap()), Some(on_off)),
        added(None, None),
        added(
            None,
            Some(toml::from_str("kind = \"csv\"\nfile = \"/etc/shadow\"").unwrap()),
        ),
    ] {
        let e = run(&text, &[bad]).unwrap_err();
        assert!(e.contains("changes[0]: port `vm9`"), "{e}");
    }
}

#[test]
fn bad_changes_are_refused_by_name_and_the_saved_scenario_runs_again() {
    let text = past("port-id", 10, &[("vm1", 1, 300e6, "")]);
    let refused = |c: Change, want: &str| {
        let e = run(&text, &[c]).unwrap_err();
        assert!(e.contains(want), "{e}");
    };
    refused(
        Change::Port {
            port: "vm7".into(),
            reservation: None,
            shares: None,
            limit: Some(LimitChange::Remove),
        },
        "no port named `vm7`",
    );
    refused(
        Change::UplinkDown {
            uplink: "uplink9".into(),
        },
        "no uplink named `uplink9`",
    );
    refused(
        Change::Policy {
            group: "db".into(),
            policy: "ip-hash".parse().unwrap(),
        },
        "no port group named `db`",
    );
    // Admission control: a reservation past what the uplinks can guarantee.
    let e = run(
        &text,
        &[Change::Port {
            port: "vm1".into(),
            reservation: Some("5G".parse().unwrap()),
            shares: None,
            limit: None,
        }],
    )
    .unwrap_err();
    assert!(e.contains("with the change") && e.contains("vm1"), "{e}");
    // The changed scenario stands alone.
    let a = run(
        &text,
        &[Change::Port {
            port: "vm1".into(),
            reservation: None,
            shares: None,
            limit: Some(LimitChange::To("100M".parse().unwrap())),
        }],
    )
    .unwrap();
    let again = Scenario::from_str(&a.scenario, Path::new("saved.toml")).unwrap();
    let out = crate::fluid::run(&again).unwrap();
    assert!(out.rows.iter().all(|r| r.delivered_tx[0] <= 100e6 + 1.0));
    assert!((port(&a, "vm1").predicted_bps.unwrap() - 100e6).abs() < 1e6);
    // A change list reads as the API and ctl send it.
    let json = r#"[{"kind": "port", "port": "vm1", "limit": "none", "shares": 80},
                   {"kind": "uplink-capacity", "uplink": "uplink1", "capacity": "10G"}]"#;
    let parsed: Vec<Change> = serde_json::from_str(json).unwrap();
    assert_eq!(parsed.len(), 2);
    assert!(serde_json::from_str::<Vec<Change>>(r#"[{"kind": "port", "port": "vm1", "limt": "1G"}]"#).is_err());
}

use super::demand::tests::flat;

/// vm1 and vm2 on uplink1 alone, each measured offering `offered` for 20 s, with `evidence`.
fn held(offered: f64, evidence: Evidence) -> Request {
    let text = past(
        "port-id",
        20,
        &[("vm1", 1, offered, "shares = 50"), ("vm2", 2, offered, "shares = 50")],
    )
    .replace("active = [\"uplink1\", \"uplink2\"]", "active = [\"uplink1\"]");
    Request {
        scenario: text,
        changes: vec![Change::Port {
            port: "vm1".into(),
            reservation: Some("700M".parse().unwrap()),
            shares: None,
            limit: None,
        }],
        evidence: [("vm1".to_string(), evidence.clone()), ("vm2".to_string(), evidence)].into(),
        fidelity: Fidelity::Fluid,
    }
}

#[test]
fn a_tcp_sender_held_down_is_predicted_as_greedy_and_said_to_be_uncertain() {
    // Each got 480M of the uplink's 960M, most frames waiting, a few dropped: both backed off.
    let ev = Evidence {
        turned_away: flat(1e6, 20),
        waited: Some(flat(0.9, 20)),
        ..Evidence::default()
    };
    let a = answer(&held(481e6, ev), Path::new("past.toml")).unwrap();
    let (vm1, vm2) = (port(&a, "vm1"), port(&a, "vm2"));
    assert!((vm1.measured_bps.unwrap() - 480e6).abs() < 1e6, "{vm1:?}");
    let d = vm1.demand.as_ref().unwrap();
    assert_eq!(d.how, How::Greedy);
    assert_eq!(d.high_bps, 1e9, "its uplink's capacity");
    // Greedy, the model of the past shares the uplink as the switch did...
    assert!((vm1.baseline_bps.unwrap() - 500e6).abs() < 20e6, "{vm1:?}");
    // ...and the reservation gives vm1 its 700M and half the 300M left (equal shares of the
    // excess), vm2 the other half.
    assert!((vm1.predicted_bps.unwrap() - 850e6).abs() < 20e6, "{vm1:?}");
    assert!((vm2.predicted_bps.unwrap() - 150e6).abs() < 20e6, "{vm2:?}");
    assert!(vm1.may_want_more && vm2.may_want_more);
    let notes = a.notes.join("\n");
    assert!(
        notes.contains("greedy") && notes.contains("every port that sent was held down"),
        "{notes}"
    );
    // The saved scenario offers the estimate, so it runs again as answered.
    assert!(a.scenario.contains("1000000000"), "{}", a.scenario);
}

#[test]
fn a_udp_sender_held_down_wants_what_it_offered_and_gets_what_is_left() {
    // Each offered 800M and had 320M turned away: each got 480M and wanted 800M.
    let ev = Evidence {
        turned_away: flat(320e6, 20),
        ..Evidence::default()
    };
    let a = answer(&held(800e6, ev), Path::new("past.toml")).unwrap();
    let (vm1, vm2) = (port(&a, "vm1"), port(&a, "vm2"));
    assert!(
        (vm1.measured_bps.unwrap() - 480e6).abs() < 1e6,
        "measured is what it got: {vm1:?}"
    );
    let d = vm1.demand.as_ref().unwrap();
    assert_eq!(
        (d.how, d.estimate_bps, d.low_bps, d.high_bps),
        (How::Offered, 800e6, 800e6, 800e6)
    );
    // 700M reserved and half the excess would be 850M: it wants 800M; vm2 has the rest.
    assert!((vm1.predicted_bps.unwrap() - 800e6).abs() < 20e6, "{vm1:?}");
    assert!((vm2.predicted_bps.unwrap() - 200e6).abs() < 20e6, "{vm2:?}");
    assert!(!a.notes.join("\n").contains("greedy"), "{:?}", a.notes);
    // Evidence for a port the past does not have is the past's writer's fault.
    let mut bad = held(800e6, Evidence::default());
    bad.evidence.insert("vm9".into(), Evidence::default());
    let e = answer(&bad, Path::new("past.toml")).unwrap_err();
    assert!(matches!(&e, WhatIfError::Past(m) if m.contains("`vm9`")), "{e}");
}

#[test]
fn the_series_has_every_second_of_both_runs() {
    let ev = Evidence {
        turned_away: flat(320e6, 20),
        ..Evidence::default()
    };
    let a = answer(&held(800e6, ev), Path::new("past.toml")).unwrap();
    let s = &a.series;
    assert_eq!(s.t_s.len(), 20);
    let vm1 = s.ports.iter().find(|p| p.name == "vm1").unwrap();
    assert_eq!(vm1.reservation_bps, 700e6);
    assert!(vm1.measured.iter().all(|m| (m.unwrap() - 480e6).abs() < 1.0), "{vm1:?}");
    assert!(
        vm1.predicted.iter().skip(1).all(|p| p.unwrap() >= 0.99 * 700e6),
        "{vm1:?}"
    );
    let u1 = s.uplinks.iter().find(|u| u.name == "uplink1").unwrap();
    assert_eq!((u1.capacity_bps, u1.predicted_capacity_bps), (1e9, 1e9));
    assert_eq!(u1.predicted.len(), 20);
    // Both ports fill uplink1 (its NetIOC share of it) in both runs; uplink2 carries nothing.
    assert!(u1.baseline.iter().skip(1).all(|b| *b > 0.9e9), "{u1:?}");
    let u2 = s.uplinks.iter().find(|u| u.name == "uplink2").unwrap();
    assert!(u2.predicted.iter().all(|b| *b == 0.0), "{u2:?}");
    // An uplink at another speed: its series carries both capacities.
    let mut faster = held(800e6, Evidence::default());
    faster.changes = vec![Change::UplinkCapacity {
        uplink: "uplink1".into(),
        capacity: "2G".parse().unwrap(),
    }];
    let a = answer(&faster, Path::new("past.toml")).unwrap();
    let u1 = a.series.uplinks.iter().find(|u| u.name == "uplink1").unwrap();
    assert_eq!((u1.capacity_bps, u1.predicted_capacity_bps), (1e9, 2e9));
    assert!(u1.predicted.iter().skip(1).all(|b| (*b - 1.6e9).abs() < 1e6), "{u1:?}");
}

#[test]
fn packet_fidelity_answers_with_tcp_streams_for_greedy_ports() {
    let ev = Evidence {
        turned_away: flat(1e6, 20),
        waited: Some(flat(0.9, 20)),
        ..Evidence::default()
    };
    let mut req = held(481e6, ev);
    req.fidelity = Fidelity::Packet;
    let a = answer(&req, Path::new("past.toml")).unwrap();
    assert_eq!(a.fidelity, Fidelity::Packet);
    let (vm1, vm2) = (port(&a, "vm1"), port(&a, "vm2"));
    // Two TCP streams share the uplink about evenly; with the reservation vm1 has 700M.
    assert!((vm1.baseline_bps.unwrap() - 480e6).abs() < 60e6, "{vm1:?}");
    assert!(vm1.predicted_bps.unwrap() >= 0.9 * 700e6, "{vm1:?}");
    assert!(vm2.predicted_bps.unwrap() <= 300e6, "{vm2:?}");
    assert!(a.notes.iter().any(|n| n.starts_with("packet model")), "{:?}", a.notes);
    assert_eq!(a.series.t_s.len(), 10, "the packet run is 10 s at most");
    // The group's only active uplink down: its ports fail over to the standby, as in the
    // fluid model (the packet host keeps the uplink and takes it down at once).
    let mut down = req.clone();
    down.changes = vec![
        Change::Order {
            group: "vms".into(),
            active: vec!["uplink1".into()],
            standby: Some(vec!["uplink2".into()]),
        },
        Change::UplinkDown {
            uplink: "uplink1".into(),
        },
    ];
    let a = answer(&down, Path::new("past.toml")).unwrap();
    for p in &a.ports {
        assert_eq!(p.uplink_after.as_deref(), Some("uplink2"), "{p:?}");
        assert!(p.predicted_bps.unwrap() > 100e6, "{p:?}");
    }
    // A change of teaming policy in time is not the packet model's: a 4xx of its own, not
    // the change's fault nor the past's.
    let mut policy = req.clone();
    policy.changes.clear();
    policy
        .scenario
        .push_str("\n[[events]]\nkind = \"policy\"\nat_s = 5.0\ngroup = \"vms\"\npolicy = \"load-based\"\n");
    let e = answer(&policy, Path::new("past.toml")).unwrap_err();
    assert!(
        matches!(&e, WhatIfError::Unsupported(m) if m.contains("policy")),
        "{e:?}"
    );
}

#[test]
fn packet_fidelity_is_bounded_by_uplinks_and_senders() {
    // 4 x 25G: 5M frames is 0.6 s of it, too short to tell: refused, saying why.
    let fast = past("port-id", 20, &[("vm1", 1, 5e9, "")]).replace("\"1G\"", "\"25G\"")
        + "\n[[uplinks]]\nname = \"uplink3\"\ncapacity = \"25G\"\n\n[[uplinks]]\nname = \"uplink4\"\ncapacity = \"25G\"\n";
    let mut req = request(&fast, &[]);
    req.fidelity = Fidelity::Packet;
    let e = answer(&req, Path::new("past.toml")).unwrap_err();
    assert!(
        matches!(&e, WhatIfError::Unsupported(m) if m.contains("fluid model answers")),
        "{e:?}"
    );
    assert!(
        answer(&request(&fast, &[]), Path::new("past.toml")).is_ok(),
        "the fluid model does"
    );
    // A port added at an absurd rate sends at most its fastest uplink in the packet model, so
    // the run stays within its bound (and answers).
    let slow = past("port-id", 20, &[("vm1", 1, 100e6, "")])
        .replace("\"1G\"", "\"100M\"")
        .replace("\"750M\"", "\"75M\"");
    let mut req = request(
        &slow,
        &[Change::AddPort {
            name: "vm9".into(),
            group: "vms".into(),
            tx: Some("1000T".parse().unwrap()),
            profile: None,
            reservation: None,
            limit: None,
        }],
    );
    req.fidelity = Fidelity::Packet;
    let started = std::time::Instant::now();
    let a = answer(&req, Path::new("past.toml")).unwrap();
    assert!(port(&a, "vm9").predicted_bps.unwrap() <= 100e6 * 1.01, "{a:#?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_greedy_port_wants_what_its_uplinks_carry_with_the_change() {
    let ev = Evidence {
        turned_away: flat(1e6, 20),
        waited: Some(flat(0.9, 20)),
        tcp: Some(flat(1.0, 20)),
        ..Evidence::default()
    };
    let mut req = held(481e6, ev);
    req.changes = vec![Change::UplinkCapacity {
        uplink: "uplink1".into(),
        capacity: "10G".parse().unwrap(),
    }];
    let a = answer(&req, Path::new("past.toml")).unwrap();
    // Each wants all of the 10G uplink now, and the two share it.
    for p in &a.ports {
        assert!((p.predicted_bps.unwrap() - 5e9).abs() < 0.1e9, "{p:?}");
        assert_eq!(p.demand.as_ref().unwrap().high_bps, 1e9, "the estimate is the past's");
    }
}

#[test]
fn a_pools_limit_and_a_groups_failover_order() {
    // vm1 in pool `gold` offering 600M, vm2 outside it offering 300M.
    let text = past(
        "port-id",
        10,
        &[("vm1", 1, 600e6, "pool = \"gold\""), ("vm2", 2, 300e6, "")],
    ) + "\n[[pools]]\nname = \"gold\"\n";
    let a = run(
        &text,
        &[Change::Node {
            node: "gold".into(),
            reservation: None,
            shares: None,
            limit: Some(LimitChange::To("200M".parse().unwrap())),
        }],
    )
    .unwrap();
    assert!((port(&a, "vm1").predicted_bps.unwrap() - 200e6).abs() < 2e6, "{a:#?}");
    assert!((port(&a, "vm2").predicted_bps.unwrap() - 300e6).abs() < 2e6, "{a:#?}");
    // A class the scenario does not list is added at its defaults; a name that is neither is
    // refused by name.
    let nfs = Change::Node {
        node: "nfs".into(),
        reservation: None,
        shares: Some(Shares::new(80).unwrap()),
        limit: None,
    };
    assert!(run(&text, &[nfs]).unwrap().scenario.contains("class = \"nfs\""));
    let bogus = Change::Node {
        node: "bogus".into(),
        reservation: None,
        shares: None,
        limit: Some(LimitChange::Remove),
    };
    let e = run(&text, &[bogus]).unwrap_err();
    assert!(e.contains("changes[0]") && e.contains("`bogus`"), "{e}");
    // Every port onto uplink2, uplink1 standing by.
    let order = Change::Order {
        group: "vms".into(),
        active: vec!["uplink2".into()],
        standby: Some(vec!["uplink1".into()]),
    };
    let a = run(&text, &[order]).unwrap();
    for p in &a.ports {
        assert_eq!(p.uplink_after.as_deref(), Some("uplink2"), "{p:?}");
    }
    let e = run(
        &text,
        &[Change::Order {
            group: "vms".into(),
            active: vec!["uplink9".into()],
            standby: None,
        }],
    )
    .unwrap_err();
    assert!(e.contains("no uplink named `uplink9`"), "{e}");
}
