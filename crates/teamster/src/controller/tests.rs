use super::liveness::RESTART_RETRY_S;
use super::state::*;
use std::collections::BTreeMap;
use teamster_core::units::Bandwidth;

fn shape() -> HostShape {
    serde_json::from_value(serde_json::json!({
        "uplinks": [{"name": "uplink1", "capacity": "10G"}],
        "traffic_classes": [{"class": "vm"}],
        "pools": [{"name": "vm-pool"}],
        "derived": ["vm", "vm-pool"],
    }))
    .unwrap()
}

fn vm(name: &str, host: &str) -> PowerOn {
    serde_json::from_value(serde_json::json!({"name": name, "host": host, "pool": "vm-pool"})).unwrap()
}

fn report(links: &[(&str, bool)], attached: &[&str]) -> HostReport {
    HostReport {
        links: links.iter().map(|(n, up)| (n.to_string(), *up)).collect(),
        loads: BTreeMap::new(),
        attached: attached.iter().map(|a| a.to_string()).collect(),
    }
}

fn gbps(mbps: u64) -> Bandwidth {
    Bandwidth::from_mbps(mbps)
}

/// Figure 2 through the controller: each change is accepted with the migrations it sets off,
/// and every VM stays on exactly one host.
#[test]
fn figure_2_through_the_controller() {
    let mut s = ClusterState::default();
    s.register("host1", shape(), 1).unwrap();
    s.register("host2", shape(), 1).unwrap();
    s.set_quota("vm-pool", gbps(15_000), 1).unwrap();
    for v in ["vm1", "vm2", "vm3"] {
        let out = s.power_on(vm(v, "host1"), 2).unwrap();
        assert_eq!(out.placed.as_deref(), Some("host1"));
    }
    let set = |r| VmChange {
        reservation: Some(gbps(r)),
        ..VmChange::default()
    };
    // A new limit comes with the new reservation; a limit of null clears it.
    let both: VmChange = serde_json::from_str(r#"{"reservation": "2G", "limit": "3G"}"#).unwrap();
    s.set_vm(
        "vm1",
        VmChange {
            limit: Some(Some(gbps(1000))),
            ..VmChange::default()
        },
        3,
    )
    .unwrap();
    s.set_vm("vm1", both, 3).unwrap();
    assert_eq!(s.vms["vm1"].limit, Some(gbps(3000)));
    s.set_vm(
        "vm1",
        serde_json::from_str(r#"{"limit": null, "reservation": "0"}"#).unwrap(),
        3,
    )
    .unwrap();
    assert_eq!((s.vms["vm1"].limit, s.vms["vm1"].reservation), (None, Bandwidth::ZERO));
    assert!(s.set_vm("vm1", set(7500), 3).unwrap().migrations.is_empty());
    let out = s.set_vm("vm2", set(4500), 4).unwrap();
    let moves: Vec<_> = out
        .migrations
        .iter()
        .map(|m| (m.vm.as_str(), m.from.as_str(), m.to.as_str()))
        .collect();
    assert_eq!(moves, [("vm2", "host1", "host2")]);
    assert_eq!(s.vms["vm2"].moving_from.as_deref(), Some("host1"));
    // The destination reports the port attached: the migration is done.
    s.report("host2", &report(&[], &["vm2"]), 5).unwrap();
    assert_eq!(s.vms["vm2"].moving_from, None);
    let out = s.set_vm("vm3", set(3000), 6).unwrap();
    assert_eq!(out.migrations[0].to, "host2");
    // A fourth VM with any reservation would break the pool's quota.
    let mut v4 = vm("vm4", "auto");
    v4.reservation = Some(gbps(100));
    let e = s.power_on(v4, 7).unwrap_err();
    assert!(
        matches!(e, Refusal::Conflict(ref m) if m.contains("pool `vm-pool`")),
        "{e:?}"
    );
    assert_eq!(s.cluster(9).unwrap().violations(), Vec::<String>::new());
    // Host 1 goes: VM1 fits on host 2 only if there is room, and there is none.
    assert!(matches!(s.remove_host("host1", 8), Err(Refusal::Conflict(_))));
    assert!(matches!(s.set_quota("nope", gbps(1), 8), Err(Refusal::Unknown(_))));
}

/// Bad input is refused with its reason and changes nothing.
#[test]
fn refusals_change_nothing() {
    let mut s = ClusterState::default();
    s.register("host1", shape(), 1).unwrap();
    s.power_on(vm("vm1", "host1"), 1).unwrap();
    let before = s.clone();
    let big = VmChange {
        reservation: Some(gbps(8000)),
        ..VmChange::default()
    };
    let e = s.set_vm("vm1", big, 2).unwrap_err();
    assert!(
        matches!(e, Refusal::Conflict(ref m) if m.contains("75% of uplink")),
        "no host can hold 8G: {e:?}"
    );
    assert!(matches!(
        s.set_vm("vm9", VmChange::default(), 2),
        Err(Refusal::Unknown(_))
    ));
    assert!(matches!(s.power_on(vm("vm2", "host9"), 2), Err(Refusal::Unknown(_))));
    assert!(matches!(s.power_on(vm("vm1", "host1"), 2), Err(Refusal::Conflict(_))));
    assert!(matches!(s.power_on(vm("bad/name", "host1"), 2), Err(Refusal::Bad(_))));
    let mut bad = shape();
    bad.derived = vec!["nope".into()];
    assert!(matches!(s.register("host2", bad, 2), Err(Refusal::Bad(ref m)) if m.contains("derived[0]")));
    let mut low = vm("vm3", "host1");
    low.reservation = Some(gbps(500));
    low.limit = Some(gbps(100));
    assert!(matches!(s.power_on(low, 2), Err(Refusal::Bad(_))));
    assert!(matches!(
        s.report("host1", &report(&[("eth9", false)], &[]), 2),
        Err(Refusal::Bad(_))
    ));
    assert_eq!(s, before);
}

/// A lost uplink is a fact: it stands even when nothing can be mended, as a fault; VMs move
/// where they can, and other changes still go through.
#[test]
fn a_lost_uplink_stands_and_vms_move_where_they_can() {
    let mut s = ClusterState::default();
    s.register("host1", shape(), 1).unwrap();
    s.register("host2", shape(), 1).unwrap();
    let mut v = vm("vm1", "host1");
    v.reservation = Some(gbps(5000));
    s.power_on(v, 1).unwrap();
    let down = report(&[("uplink1", false)], &["vm1"]);
    let out = s.report("host1", &down, 2).unwrap();
    assert_eq!(out.migrations[0].to, "host2");
    let out = s.report("host2", &report(&[("uplink1", false)], &[]), 3).unwrap();
    assert!(out.migrations.is_empty() && s.faults.back().is_some_and(|f| f.host == "host2"));
    // Other changes still go through while host2 cannot be mended.
    s.power_on(vm("vm2", "host1"), 4).unwrap();
    assert_eq!(s.vms.len(), 2);
}

/// With the bundled configuration (the `vm` class and `vm-pool` derived), a new VM goes to the
/// host with the most reservation headroom, not to the one with fewer VMs.
#[test]
fn placement_by_headroom_holds_with_derived_classes_and_pools() {
    let mut s = ClusterState::default();
    s.register("host1", shape(), 1).unwrap();
    s.register("host2", shape(), 1).unwrap();
    let mut big = vm("big", "host1");
    big.reservation = Some(gbps(7000));
    s.power_on(big, 1).unwrap();
    for v in ["s1", "s2"] {
        let mut small = vm(v, "host2");
        small.reservation = Some(gbps(100));
        s.power_on(small, 1).unwrap();
    }
    let mut new = vm("new", "auto");
    new.reservation = Some(gbps(100));
    let c = s.cluster(2).unwrap();
    assert_eq!(c.standing("host1").unwrap(), Ok(Bandwidth::from_mbps(500)));
    assert_eq!(c.standing("host2").unwrap(), Ok(Bandwidth::from_mbps(7300)));
    let out = s.power_on(new, 2).unwrap();
    assert_eq!(out.placed.as_deref(), Some("host2"), "{:?}", out.considered);
    // Host2 ranks first, so placement looks at no other.
    let looked = vec![("host2".to_string(), "7.2Gbps headroom left".to_string())];
    assert_eq!(out.considered, looked);
}

/// A host that has not reported within the host timeout receives no VM, by placement, by
/// name or by a migration, keeps the VMs it has, and takes VMs again once it reports.
#[test]
fn a_host_that_stopped_reporting_receives_no_vm() {
    let mut s = ClusterState {
        host_timeout: HostTimeout(10),
        ..ClusterState::default()
    };
    s.register("quiet", shape(), 100).unwrap();
    s.register("busy", shape(), 100).unwrap();
    let mut big = vm("big", "busy");
    big.reservation = Some(gbps(5000));
    s.power_on(big, 100).unwrap();
    s.power_on(vm("stays", "quiet"), 100).unwrap();
    // busy keeps reporting; quiet stops at 100.
    s.report("busy", &report(&[], &["big"]), 115).unwrap();
    assert_eq!(s.silent("busy", 115), None);
    assert!(s.silent("quiet", 115).is_some_and(|w| w.contains("no report for 15 s")));
    // quiet has the more headroom, and still gets nothing.
    let out = s.power_on(vm("new", "auto"), 115).unwrap();
    assert_eq!(out.placed.as_deref(), Some("busy"));
    let e = s.power_on(vm("named", "quiet"), 115).unwrap_err();
    assert!(
        matches!(e, Refusal::Conflict(ref m) if m.contains("not responding")),
        "{e:?}"
    );
    // busy loses its uplink: its VMs cannot go to quiet, so they stay, as a fault.
    let out = s
        .report("busy", &report(&[("uplink1", false)], &["big", "new"]), 116)
        .unwrap();
    assert!(out.migrations.is_empty(), "{:?}", out.migrations);
    assert!(s.faults.back().is_some_and(|f| f.host == "busy"));
    assert_eq!(s.vms["stays"].host, "quiet");
    // quiet reports again: it takes VMs, and busy's move there.
    let out = s.report("quiet", &report(&[], &["stays"]), 117).unwrap();
    assert_eq!(s.silent("quiet", 117), None);
    let moved: Vec<_> = out.migrations.iter().map(|m| (m.vm.as_str(), m.to.as_str())).collect();
    assert!(moved.contains(&("big", "quiet")), "{moved:?}");
}

/// A host silent past the timeout is marked down once, with an event; its VMs restart where
/// admission allows, largest first, and one that fits nowhere stays with a fault naming why;
/// heard again, the host is up and is assigned only the VMs that stayed.
#[test]
fn a_silent_host_is_failed_and_its_vms_restart_elsewhere() {
    let mut s = ClusterState {
        host_timeout: HostTimeout(10),
        ..ClusterState::default()
    };
    for h in ["h1", "h2", "h3"] {
        s.register(h, shape(), 100).unwrap();
    }
    // h1: 4G + 3G + 0.5G; a 7.5G VM leaves h2 nothing to give; h3 has 7.5G.
    for (v, r) in [("a", 4000), ("b", 3000), ("c", 500)] {
        let mut p = vm(v, "h1");
        p.reservation = Some(gbps(r));
        s.power_on(p, 100).unwrap();
    }
    let mut full = vm("full", "h2");
    full.reservation = Some(gbps(7500));
    s.power_on(full, 100).unwrap();
    let heard = |s: &mut ClusterState, h: &str, at: u64| {
        let attached: Vec<String> = s.assigned(h).map(|(n, _)| n.clone()).collect();
        let names: Vec<&str> = attached.iter().map(String::as_str).collect();
        s.report(h, &report(&[], &names), at).unwrap();
    };
    for t in [105, 110] {
        heard(&mut s, "h2", t);
        heard(&mut s, "h3", t);
    }
    assert!(
        s.fail_silent(110).unwrap().unchanged,
        "10 s silent is not past a 10 s timeout"
    );
    let out = s.fail_silent(111).unwrap();
    assert_eq!(s.hosts["h1"].down_since_s, Some(111));
    assert!(out
        .events
        .iter()
        .any(|e| e.contains("h1: host down: not responding: no report for 11 s")));
    let moved: Vec<_> = out.migrations.iter().map(|m| (m.vm.as_str(), m.to.as_str())).collect();
    // h2 is full; h3 takes all three (7.5G of its 7.5G).
    assert_eq!(
        moved,
        [("a", "h3"), ("b", "h3"), ("c", "h3")],
        "largest first, where it fits"
    );
    assert_eq!(s.vms["a"].moving_from.as_deref(), Some("h1"));
    assert!(s.fail_silent(112).unwrap().unchanged, "a host is failed once");

    // h1 comes back: it is up, and assigned nothing (its VMs run on h3 now).
    heard(&mut s, "h1", 113);
    assert_eq!(s.hosts["h1"].down_since_s, None);
    assert!(s
        .faults
        .back()
        .is_some_and(|f| f.host == "h1" && f.why.contains("host up again")));
    assert_eq!(s.assigned("h1").count(), 0);
    // Held down for a host timeout: it alone has room, and still takes no new VM (a flapping
    // host attracts none that its next flap would have to restart).
    let new = || {
        let mut p = vm("new", "auto");
        p.reservation = Some(gbps(1000));
        p
    };
    let e = s.power_on(new(), 118).unwrap_err();
    assert!(matches!(&e, Refusal::Conflict(m) if m.contains("held down")), "{e:?}");
    heard(&mut s, "h1", 122);
    assert!(s.held_down("h1", 122).is_some());
    // Reporting steadily for the timeout, it takes VMs again.
    heard(&mut s, "h1", 123);
    assert_eq!(s.held_down("h1", 123), None);
    assert_eq!(s.hosts["h1"].up_again_s, None, "the report after the hold-down ends it");
    assert_eq!(
        s.power_on(vm("new", "auto"), 123).unwrap().placed.as_deref(),
        Some("h1")
    );
}

/// A VM that fits on no other host stays assigned to the down host, with a fault naming what
/// is short; a controller that was away does not fail hosts for its own absence.
#[test]
fn a_vm_that_fits_nowhere_stays_and_a_returning_controller_waits() {
    let mut s = ClusterState {
        host_timeout: HostTimeout(10),
        ..ClusterState::default()
    };
    s.register("h1", shape(), 100).unwrap();
    s.register("h2", shape(), 100).unwrap();
    for (v, h) in [("big1", "h1"), ("big2", "h2")] {
        let mut p = vm(v, h);
        p.reservation = Some(gbps(7000));
        s.power_on(p, 100).unwrap();
    }
    // The controller restarts at 500, long after the hosts' last reports.
    s.listening_since_s = 500;
    assert!(s.fail_silent(505).unwrap().unchanged);
    s.report("h2", &report(&[], &["big2"]), 508).unwrap();
    let out = s.fail_silent(511).unwrap();
    assert!(out.migrations.is_empty());
    assert_eq!(s.vms["big1"].host, "h1");
    let why = &s.faults.back().unwrap().why;
    assert!(
        why.contains("VM big1 cannot restart elsewhere") && why.contains("h2:"),
        "{why}"
    );
    assert!(out.events.iter().any(|e| e.contains("cannot restart")));
    // Room appears on h2: big1 is tried again after the retry time, and moves.
    s.power_off("big2", 512).unwrap();
    s.report("h2", &report(&[], &[]), 539).unwrap();
    let faults = s.faults.len();
    assert!(s.fail_silent(540).unwrap().unchanged, "not before {RESTART_RETRY_S} s");
    let out = s.fail_silent(541).unwrap();
    let moved: Vec<_> = out.migrations.iter().map(|m| (m.vm.as_str(), m.to.as_str())).collect();
    assert_eq!(moved, [("big1", "h2")]);
    assert_eq!(s.faults.len(), faults, "a retry adds no fault");
}

/// A host registered with `isolation = "keep"` goes on forwarding for its VMs when cut off:
/// when it goes down they stay assigned to it (a fault says why), never restarted elsewhere.
#[test]
fn a_keep_host_that_goes_down_keeps_its_vms() {
    let mut s = ClusterState {
        host_timeout: HostTimeout(10),
        ..ClusterState::default()
    };
    let mut keep = shape();
    keep.isolation = Isolation::Keep;
    s.register("keeper", keep, 100).unwrap();
    s.register("other", shape(), 100).unwrap();
    s.power_on(vm("v", "keeper"), 100).unwrap();
    s.report("other", &report(&[], &[]), 110).unwrap();
    let out = s.fail_silent(111).unwrap();
    assert!(out.migrations.is_empty(), "{:?}", out.migrations);
    assert_eq!(s.vms["v"].host, "keeper");
    assert_eq!(s.hosts["keeper"].down_since_s, Some(111));
    assert!(s.faults.back().is_some_and(|f| f.why.contains("isolation = keep")));
}

/// A controller whose state was made anew adopts the VMs a host runs, as facts; a VM it knows,
/// a bad MAC or a MAC taken are refused by name; a host unknown or a cluster identity of
/// another state is refused whole, changing nothing.
#[test]
fn a_new_state_adopts_what_hosts_run() {
    use super::adoption::Adopt;
    use super::view::Assignment;
    let mut s = ClusterState {
        cluster_id: 7,
        adoption_until_s: 1 + super::adoption::ADOPTION_WINDOW_S,
        ..ClusterState::default()
    };
    s.register("h1", shape(), 1).unwrap();
    s.register("h2", shape(), 1).unwrap();
    let mut known = vm("known", "h2");
    known.mac = Some("02:00:00:00:00:09".into());
    s.power_on(known, 1).unwrap();
    let a = |name: &str, mac: &str, r: u64| Assignment {
        vm: name.into(),
        mac: Some(mac.into()),
        group: Some("vms".into()),
        pool: "vm-pool".into(),
        reservation: gbps(r),
        shares: teamster_core::ioc::Shares::NORMAL,
        limit: None,
        moving_from: None,
    };
    let req = Adopt {
        cluster_id: 7,
        vms: vec![
            a("web", "02:00:00:00:00:01", 1000),
            a("known", "02:00:00:00:00:02", 0),
            a("bad", "01:00:5e:00:00:01", 0),
            a("twin", "02:00:00:00:00:09", 0),
            a("db", "02:00:00:00:00:03", 500),
            Assignment {
                pool: "nfs".into(),
                ..a("nopool", "02:00:00:00:00:04", 0)
            },
        ],
    };
    let before = s.clone();
    assert!(matches!(s.adopt("h9", &req, 2), Err(Refusal::Unknown(_))));
    let other = Adopt {
        cluster_id: 8,
        vms: req.vms.clone(),
    };
    assert!(matches!(s.adopt("h1", &other, 2), Err(Refusal::Conflict(_))));
    assert_eq!(s, before);
    let out = s.adopt("h1", &req, 2).unwrap();
    let on_h1: Vec<&str> = s.assigned("h1").map(|(n, _)| n.as_str()).collect();
    assert_eq!(on_h1, ["db", "web"]);
    assert_eq!(s.vms["web"].reservation, gbps(1000));
    assert_eq!(
        s.vms["known"].host, "h2",
        "a VM the controller knows stays where it has it"
    );
    for (vm, why) in [
        ("known", "has it on h2"),
        ("bad", "not a unicast"),
        ("twin", "is VM known's"),
    ] {
        assert!(
            out.events
                .iter()
                .any(|e| e.contains(&format!("VM {vm} not adopted")) && e.contains(why)),
            "{vm}: {:?}",
            out.events
        );
    }
    // The same again adopts nothing and changes nothing.
    let again = s.adopt("h1", &req, 3).unwrap();
    assert!(again.unchanged);
    // Once the window has passed, adoption is refused whole.
    let late = Adopt {
        cluster_id: 7,
        vms: vec![a("late", "02:00:00:00:00:05", 0)],
    };
    let before = s.clone();
    let e = s
        .adopt("h1", &late, 2 + super::adoption::ADOPTION_WINDOW_S)
        .unwrap_err();
    assert!(
        matches!(&e, Refusal::Conflict(m) if m.contains("adoption is closed")),
        "{e:?}"
    );
    assert_eq!(s, before);
}

/// A host's report is answered from the index of each host's VMs, which follows every change
/// (a power-on, a migration, a power-off) and agrees with a pass over all the VMs.
#[test]
fn the_assignment_index_follows_every_change() {
    use super::view::AssignmentIndex;
    let mut s = ClusterState::default();
    let mut index = AssignmentIndex::default();
    s.register("host1", shape(), 1).unwrap();
    s.register("host2", shape(), 1).unwrap();
    let names = |index: &mut AssignmentIndex, s: &ClusterState, h: &str| -> Vec<String> {
        let from_index: Vec<String> = index.assignments(s, h).into_iter().map(|a| a.vm).collect();
        let by_pass: Vec<String> = s.assigned(h).map(|(n, _)| n.clone()).collect();
        assert_eq!(from_index, by_pass, "{h}");
        from_index
    };
    for v in ["vm1", "vm2"] {
        s.power_on(vm(v, "host1"), 2).unwrap();
    }
    assert_eq!(names(&mut index, &s, "host1"), ["vm1", "vm2"]);
    assert!(names(&mut index, &s, "host2").is_empty());
    let set = VmChange {
        reservation: Some(gbps(7000)),
        ..VmChange::default()
    };
    s.set_vm("vm1", set, 3).unwrap();
    let set = VmChange {
        reservation: Some(gbps(1000)),
        ..VmChange::default()
    };
    s.set_vm("vm2", set, 3).unwrap();
    assert!(
        names(&mut index, &s, "host2").is_empty(),
        "vm2 on its way: host1 holds it"
    );
    s.report("host1", &report(&[], &["vm1"]), 3).unwrap();
    assert_eq!(names(&mut index, &s, "host2"), ["vm2"], "vm2 moved");
    s.power_off("vm1", 4).unwrap();
    assert!(names(&mut index, &s, "host1").is_empty());
    assert!(names(&mut index, &s, "host9").is_empty());
}

/// A controller started with a shorter host timeout than an earlier one told the hosts waits
/// out the longer one before it fails a host: a host cut off detaches its VMs only that late.
#[test]
fn a_shorter_timeout_after_a_restart_waits_out_the_longer_one() {
    let mut s = ClusterState {
        host_timeout: HostTimeout(15),
        host_timeout_given_s: 60,
        listening_since_s: 1000,
        ..ClusterState::default()
    };
    s.register("h1", shape(), 990).unwrap();
    s.hosts.get_mut("h1").unwrap().reported_s = 990;
    // 990 + 60 = 1050: the host detaches its VMs by then; the controller waits until 1060.
    assert_eq!(s.silent("h1", 1058), None);
    assert!(s.fail_silent(1058).unwrap().unchanged);
    assert!(s.silent("h1", 1061).is_some());
    // Heard again: its own timeout from then on.
    s.report("h1", &report(&[], &[]), 1070).unwrap();
    assert_eq!(s.silent("h1", 1075), None);
    assert!(s.silent("h1", 1086).is_some());
}

/// A migration is break before make: the destination is told to attach the VM only once the
/// source has reported it detached; moved again before that, it still waits for its first
/// source; from a down source, the destination is told at once.
#[test]
fn a_moving_vm_is_attached_by_its_destination_only_once_its_source_let_go() {
    let mut s = ClusterState {
        host_timeout: HostTimeout(10),
        ..ClusterState::default()
    };
    for h in ["h1", "h2", "h3"] {
        s.register(h, shape(), 100).unwrap();
    }
    for (v, r) in [("a", 4000), ("b", 3000)] {
        let mut p = vm(v, "h1");
        p.reservation = Some(gbps(r));
        s.power_on(p, 100).unwrap();
    }
    let names = |s: &ClusterState, h: &str| -> Vec<String> { s.assigned(h).map(|(n, _)| n.clone()).collect() };
    s.report("h1", &report(&[], &["a", "b"]), 101).unwrap();
    // b grows past what h1 holds with a: one of them moves.
    let out = s
        .set_vm(
            "b",
            VmChange {
                reservation: Some(gbps(4000)),
                ..VmChange::default()
            },
            102,
        )
        .unwrap();
    let m = &out.migrations[0];
    let (moved, to) = (m.vm.clone(), m.to.clone());
    assert_eq!(m.from, "h1");
    assert_eq!(s.vms[&moved].host, to);
    assert!(!names(&s, &to).contains(&moved), "told before h1 let go");
    assert!(!names(&s, "h1").contains(&moved), "h1 still told to keep it");
    // h1 reports it still attached (its answer excluded it after this report was made).
    s.report("h1", &report(&[], &["a", "b"]), 103).unwrap();
    assert!(!names(&s, &to).contains(&moved));
    // The destination claims it before it was told: the move ends, but that is its report.
    // h1 reports without it: now the destination is told, and its report ends the move.
    let still: Vec<&str> = ["a", "b"].into_iter().filter(|n| *n != moved).collect();
    s.report("h1", &report(&[], &still), 104).unwrap();
    assert!(s.hosts["h1"].departing.is_empty());
    assert!(names(&s, &to).contains(&moved));
    assert_eq!(s.vms[&moved].moving_from.as_deref(), Some("h1"));
    let touched = s.touch(&to, &report(&[], &[&moved]), 105).unwrap();
    assert!(!touched, "a report that ends a migration is a change");
    s.report(&to, &report(&[], &[&moved]), 105).unwrap();
    assert_eq!(s.vms[&moved].moving_from, None);

    // Moved twice before the first destination was told: it still waits for its first source.
    let other = if to == "h2" { "h3" } else { "h2" };
    let mut s2 = s.clone();
    let relocate = |s: &mut ClusterState, v: &str, from: &str, to: &str| {
        s.vms.get_mut(v).unwrap().host = to.to_string();
        s.begin_move(v, from, 1);
    };
    relocate(&mut s2, still[0], "h1", &to);
    relocate(&mut s2, still[0], &to, other);
    assert_eq!(s2.vms[still[0]].moving_from.as_deref(), Some("h1"));
    assert!(!names(&s2, other).contains(&still[0].to_string()));
    s2.report("h1", &report(&[], &[]), 106).unwrap();
    assert!(names(&s2, other).contains(&still[0].to_string()));

    // The source goes silent and is failed: its VM restarts where it fits, told at once (a
    // host cut off has detached its VMs by its own timer).
    s.report(&to, &report(&[], &[&moved]), 110).unwrap();
    s.report(other, &report(&[], &[]), 110).unwrap();
    let out = s.fail_silent(116).unwrap();
    let left: Vec<_> = out
        .migrations
        .iter()
        .map(|m| (m.vm.as_str(), m.from.as_str()))
        .collect();
    assert_eq!(left, [(still[0], "h1")]);
    let dest = out.migrations[0].to.clone();
    assert!(names(&s, &dest).contains(&still[0].to_string()));
    // h1 comes back, having detached it by its own timer: the destination keeps it.
    assert!(s.hosts["h1"].departing.is_empty(), "emptied when h1 was failed");
    s.report("h1", &report(&[], &[]), 117).unwrap();
    assert!(names(&s, &dest).contains(&still[0].to_string()));

    // A source that keeps forwarding when cut off (isolation = "keep") has let go only when
    // it says so, down or not.
    let mut k = ClusterState {
        host_timeout: HostTimeout(10),
        ..ClusterState::default()
    };
    let mut keep = shape();
    keep.isolation = Isolation::Keep;
    k.register("k1", keep, 100).unwrap();
    k.register("h2", shape(), 100).unwrap();
    let mut p = vm("x", "k1");
    p.reservation = Some(gbps(1000));
    k.power_on(p, 100).unwrap();
    k.vms.get_mut("x").unwrap().host = "h2".into();
    k.begin_move("x", "k1", 110);
    k.report("h2", &report(&[], &[]), 110).unwrap();
    k.fail_silent(112).unwrap();
    assert!(k.hosts["k1"].down_since_s.is_some());
    assert!(!names(&k, "h2").contains(&"x".to_string()), "k1 may forward it still");
    // Nor may it be deleted while it runs VMs, down or not: it may forward for them still.
    k.vms.get_mut("x").unwrap().host = "k1".into();
    let e = k.remove_host("k1", 200).unwrap_err();
    assert!(e.message().contains("isolation = keep"), "{e:?}");
}

/// A VM powered off and on again at once on another host is attached there only once its
/// first host reported it detached: the two never forward for its MAC at the same time.
#[test]
fn a_vm_powered_off_and_on_elsewhere_waits_for_its_first_host() {
    let mut s = ClusterState::default();
    s.register("h1", shape(), 1).unwrap();
    s.register("h2", shape(), 1).unwrap();
    s.power_on(vm("v", "h1"), 2).unwrap();
    s.report("h1", &report(&[], &["v"]), 3).unwrap();
    s.power_off("v", 4).unwrap();
    assert!(s.hosts["h1"].departing.contains("v"));
    s.power_on(vm("v", "h2"), 4).unwrap();
    assert_eq!(s.vms["v"].moving_from.as_deref(), Some("h1"));
    assert_eq!(s.assigned("h2").count(), 0, "h1 still forwards for it");
    assert_eq!(s.assigned("h1").count(), 0, "h1 is told to detach it");
    // h1 reports it still attached (its answer came after this report was made): still waits.
    s.report("h1", &report(&[], &["v"]), 5).unwrap();
    assert_eq!(s.assigned("h2").count(), 0);
    // h1 reports without it: h2 is told, and its report ends the wait.
    s.report("h1", &report(&[], &[]), 6).unwrap();
    assert!(s.hosts["h1"].departing.is_empty());
    assert_eq!(s.assigned("h2").map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["v"]);
    s.report("h2", &report(&[], &["v"]), 7).unwrap();
    assert_eq!(s.vms["v"].moving_from, None);
    // Another VM does not take its MAC while its host still holds it.
    let with_mac = |name: &str, host: &str| -> PowerOn {
        serde_json::from_value(
            serde_json::json!({"name": name, "host": host, "pool": "vm-pool", "mac": "02:00:00:00:00:07"}),
        )
        .unwrap()
    };
    s.power_on(with_mac("m", "h1"), 7).unwrap();
    s.report("h1", &report(&[], &["m"]), 7).unwrap();
    s.power_off("m", 7).unwrap();
    let e = s.power_on(with_mac("other", "h2"), 7).unwrap_err();
    assert!(e.message().contains("has not yet reported it detached"), "{e:?}");
    s.report("h1", &report(&[], &[]), 8).unwrap();
    assert!(s.hosts["h1"].departing_macs.is_empty());
    s.power_on(with_mac("other", "h2"), 8).unwrap();
    // Powered off while on its way from a host that still holds it: the destination was
    // never told, so only the source is waited for.
    s.power_on(vm("w", "h1"), 8).unwrap();
    s.report("h1", &report(&[], &["w"]), 8).unwrap();
    s.power_off("w", 8).unwrap();
    s.power_on(vm("w", "h2"), 8).unwrap();
    s.power_off("w", 8).unwrap();
    assert!(!s.hosts["h2"].departing.contains("w"), "h2 never had it");
    assert!(s.hosts["h1"].departing.contains("w"), "h1 still has it");
    s.power_on(vm("w", "h2"), 8).unwrap();
    assert_eq!(s.vms["w"].moving_from.as_deref(), Some("h1"));
    s.power_off("w", 8).unwrap();
    // Powered off and on again on the same host: nothing to wait for.
    s.power_off("v", 8).unwrap();
    s.power_on(vm("v", "h2"), 8).unwrap();
    assert_eq!(s.vms["v"].moving_from, None);
    assert!(s.assigned("h2").any(|(n, _)| n == "v"));
    s.report("h2", &report(&[], &["v"]), 9).unwrap();
    assert!(s.hosts["h2"].departing.is_empty());
}

/// A host that reports on but never lets go of a VM that left it holds the VM's move: after
/// twice the host timeout that wait is reported once, as an event and a fault naming the VM,
/// the host and the wait; the controller does not attach the VM elsewhere meanwhile.
#[test]
fn a_handover_its_source_never_ends_is_reported_once() {
    let mut s = ClusterState::default();
    s.register("h1", shape(), 100).unwrap();
    s.register("h2", shape(), 100).unwrap();
    s.power_on(vm("v", "h1"), 100).unwrap();
    s.report("h1", &report(&[], &["v"]), 101).unwrap();
    s.power_off("v", 102).unwrap();
    s.power_on(vm("v", "h2"), 102).unwrap();
    // h1 goes on reporting v attached, every second; h2 reports too.
    let beat = |s: &mut ClusterState, t: u64| {
        s.report("h1", &report(&[], &["v"]), t).unwrap();
        s.report("h2", &report(&[], &[]), t).unwrap();
    };
    for t in 103..=132 {
        beat(&mut s, t);
        assert!(s.fail_silent(t).unwrap().unchanged, "{t}: not overdue yet");
    }
    beat(&mut s, 133);
    let out = s.fail_silent(133).unwrap();
    assert!(!out.unchanged);
    assert_eq!(out.events.len(), 1, "{:?}", out.events);
    let said = &out.events[0];
    assert!(
        said.starts_with("h1: VM v has waited 31 s") && said.contains("it runs on host h2 only once it is detached"),
        "{said}"
    );
    assert!(s
        .faults
        .back()
        .is_some_and(|f| f.host == "h1" && f.why.contains("VM v has waited 31 s")));
    assert_eq!(s.assigned("h2").count(), 0, "h2 is still not told");
    for t in 134..140 {
        beat(&mut s, t);
        assert!(s.fail_silent(t).unwrap().unchanged, "{t}: told once");
    }
    // h1 lets go at last: h2 is told, and nothing is left waiting.
    s.report("h1", &report(&[], &[]), 140).unwrap();
    assert!(s.hosts["h1"].departing.is_empty() && s.hosts["h1"].waiting.is_empty());
    assert_eq!(s.assigned("h2").count(), 1);
}
