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

fn run(text: &str, changes: &[Change]) -> Result<Answer, String> {
    answer(text, Path::new("past.toml"), changes).map_err(|e| {
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
    let e = answer("name = 1", Path::new("past.toml"), &[]).unwrap_err();
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
                tx: "200M".parse().unwrap(),
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
