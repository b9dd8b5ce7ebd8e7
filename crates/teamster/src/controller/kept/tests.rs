use super::*;
use crate::controller::state::{ClusterState, HostReport, HostShape, PowerOn, VmChange};

fn shape(gbps: u32) -> HostShape {
    serde_json::from_value(serde_json::json!({
        "uplinks": [{"name": "uplink1", "capacity": format!("{gbps}G")}, {"name": "uplink2", "capacity": format!("{gbps}G")}],
        "traffic_classes": [{"class": "vm"}],
        "pools": [{"name": "vm-pool"}],
        "derived": ["vm", "vm-pool"],
    }))
    .unwrap()
}

fn on(name: &str, mbps: u64, mac: u8) -> PowerOn {
    serde_json::from_value(serde_json::json!({
        "name": name, "pool": "vm-pool", "reservation": format!("{mbps}M"), "mac": format!("02:00:00:00:00:{mac:02x}"),
    }))
    .unwrap()
}

/// A placement view as a comparable summary: each host's capacity, VMs (sorted), standing and
/// marks; each VM's host.
fn summary(c: &Cluster) -> Vec<String> {
    let mut out: Vec<String> = (c.hosts())
        .map(|h| {
            let mut vms: Vec<String> = (h.vms.iter()).map(|v| format!("{}:{:?}", v.name, v.vnics)).collect();
            vms.sort();
            format!(
                "{} cap {} vms {vms:?} standing {:?} unavailable {:?} closed {:?}",
                h.name,
                h.capacity,
                c.standing(&h.name),
                h.unavailable,
                h.closed
            )
        })
        .collect();
    out.extend(
        c.hosts()
            .flat_map(|h| &h.vms)
            .map(|v| format!("{} on {:?}", v.name, c.host_of(&v.name))),
    );
    out.sort();
    out
}

/// The view built from nothing, with the marks at `now_s`.
fn built(s: &ClusterState, now_s: u64) -> Cluster {
    let mut k = Kept::build(Source {
        hosts: &s.hosts,
        vms: &s.vms,
        quotas: &s.quotas,
    })
    .unwrap();
    s.mark(&mut k, now_s).unwrap();
    k.cluster().clone()
}

/// Checks the kept view against the one built from nothing, and the MAC index against the VMs.
fn check(s: &mut ClusterState, now_s: u64, step: &str) {
    let kept = s.cluster(now_s).unwrap();
    assert_eq!(summary(&kept), summary(&built(s, now_s)), "after {step}");
    for (name, v) in s.vms.clone() {
        let mac = v.mac.as_deref().unwrap().parse().unwrap();
        assert_eq!(s.mac_owner(mac).unwrap().as_ref(), Some(&name), "after {step}");
        assert!(s.vms_on(&v.host).contains(&name), "after {step}");
    }
    let free = "02:00:00:00:00:ff".parse().unwrap();
    assert_eq!(s.mac_owner(free).unwrap(), None);
    // The index of what hosts still hold is their departing sets, no more and no less.
    let k = s.stepped().unwrap().clone();
    let mut indexed: Vec<(String, String)> = (k.departing.iter())
        .flat_map(|(vm, hosts)| hosts.iter().map(move |h| (h.clone(), vm.clone())))
        .collect();
    indexed.sort();
    let held: Vec<(String, String)> = (s.hosts.iter())
        .flat_map(|(h, r)| r.departing.iter().map(move |vm| (h.clone(), vm.clone())))
        .collect();
    assert_eq!(indexed, held, "after {step}");
    let mut indexed: Vec<(String, String, MacAddr)> = (k.departing_macs.iter())
        .flat_map(|(mac, held)| held.iter().map(move |(h, vm)| (h.clone(), vm.clone(), *mac)))
        .collect();
    indexed.sort();
    let held: Vec<(String, String, MacAddr)> = (s.hosts.iter())
        .flat_map(|(h, r)| {
            (r.departing_macs.iter()).map(move |(vm, mac)| (h.clone(), vm.clone(), mac.parse().unwrap()))
        })
        .collect();
    assert_eq!(indexed, held, "after {step}");
}

/// Hosts `hosts` report what they are assigned at `now_s`.
fn reports(s: &mut ClusterState, hosts: &[&str], now_s: u64) {
    for h in hosts {
        let attached: Vec<String> = s.assigned(h).map(|(n, _)| n.clone()).collect();
        let r = HostReport {
            attached,
            ..HostReport::default()
        };
        s.report(h, &r, now_s).unwrap();
    }
}

/// The kept view follows every kind of change as the view built from nothing sees it: hosts
/// registered and changing shape, VMs powered on (placed by headroom), a reservation raised
/// until remediation migrates, an uplink lost and back, a host silent then down (its VMs
/// restarted), a VM powered off, a quota, a host deleted; and a change refused leaves it as
/// it was.
#[test]
fn the_kept_view_follows_every_change() {
    let mut s = ClusterState::default();
    for (h, g) in [("h1", 10), ("h2", 10), ("h3", 25)] {
        s.register(h, shape(g), 1).unwrap();
    }
    check(&mut s, 1, "registrations");
    for i in 0..12u8 {
        let mut req = on(&format!("v{i}"), 500 + 100 * u64::from(i), i);
        // Some by hand on the first host, the rest where placement puts them.
        req.host = (i < 3).then(|| "h1".to_string());
        s.power_on(req, 2).unwrap();
        check(&mut s, 2, &format!("power-on v{i}"));
    }
    let copy = s.clone();
    let refused = s.power_on(on("big", 900_000, 200), 2);
    assert!(refused.is_err());
    check(&mut s, 2, "a refused power-on");
    assert_eq!(summary(&s.cluster(2).unwrap()), summary(&copy.cluster(2).unwrap()));
    let raise = VmChange {
        reservation: Some(Bandwidth::from_mbps(6_500)),
        ..VmChange::default()
    };
    let out = s.set_vm("v0", raise, 3).unwrap();
    check(&mut s, 3, "a reservation raised");
    assert!(
        !out.migrations.is_empty(),
        "raising v0 to 6.5G on h1 (7.5G reservable) moves VMs: {out:?}"
    );
    let down = HostReport {
        links: [("uplink1".to_string(), false)].into(),
        ..HostReport::default()
    };
    s.report("h2", &down, 4).unwrap();
    check(&mut s, 4, "an uplink lost");
    let up = HostReport {
        links: [("uplink1".to_string(), true)].into(),
        ..HostReport::default()
    };
    s.report("h2", &up, 5).unwrap();
    check(&mut s, 5, "the uplink back");
    s.register("h2", shape(25), 6).unwrap();
    check(&mut s, 6, "a host's shape changed");
    // h1 goes silent: the others report on; it is unavailable, then down.
    for t in [10, 20, 30] {
        reports(&mut s, &["h2", "h3"], t);
        check(&mut s, t, &format!("reports at {t}"));
        s.fail_silent(t).unwrap();
        check(&mut s, t, &format!("liveness at {t}"));
    }
    assert!(s.hosts["h1"].down_since_s.is_some(), "h1 is down");
    assert!(s.vms_on("h1").is_empty(), "its VMs restarted elsewhere");
    let off = s.vms.keys().next().unwrap().clone();
    s.power_off(&off, 31).unwrap();
    check(&mut s, 31, "a power-off");
    s.set_quota("vm-pool", Bandwidth::from_gbps(100), 32).unwrap();
    check(&mut s, 32, "a quota");
    s.remove_host("h1", 33).unwrap();
    check(&mut s, 33, "a host deleted");
    // Marks that change by time alone: h2 goes silent at 46 (last heard at 30, a 15 s timeout)
    // with no change of its record, is failed, comes back at 50 and is held down until 65.
    reports(&mut s, &["h3"], 40);
    for t in [44, 45, 46] {
        check(&mut s, t, &format!("time alone, at {t}"));
    }
    assert!(s.cluster(46).unwrap().host("h2").unwrap().unavailable.is_some());
    s.fail_silent(46).unwrap();
    check(&mut s, 46, "h2 down");
    reports(&mut s, &["h2", "h3"], 50);
    check(&mut s, 50, "h2 back");
    for t in [55, 60, 64, 65, 66] {
        reports(&mut s, &["h3"], t);
        check(&mut s, t, &format!("h2 held down, at {t}"));
    }
    assert!(s.cluster(64).unwrap().host("h2").unwrap().closed.is_some());
    assert!(s.cluster(65).unwrap().host("h2").unwrap().closed.is_none());
    // Asked about an earlier time than the last: all marked again, the same as built.
    check(&mut s, 47, "an earlier time");
    // Loaded from its records, with nothing kept: built anew, the same.
    let mut loaded =
        ClusterState::from_records((s.records().unwrap().puts.iter()).map(|(k, v)| (k.as_str(), v.as_slice())))
            .unwrap()
            .unwrap();
    loaded.host_timeout = s.host_timeout;
    loaded.listening_since_s = s.listening_since_s;
    assert_eq!(summary(&loaded.cluster(66).unwrap()), summary(&s.cluster(66).unwrap()));
}
