//! The host model's checks, through a small file shape declared with [`port_entry!`].

use super::*;
use crate::ioc::{Ioc, NodeSpec, QueueLimit};
use crate::units::Bandwidth;
use crate::wire::MacAddr;
use crate::Instant;
use serde::Deserialize;

crate::port_entry! {
    /// A test file's port: the shared fields and a `note`.
    pub struct TestPort {
        #[serde(default)]
        pub note: String,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestFile {
    #[serde(default)]
    lbt: LbtSection,
    reservation_cap: Option<f64>,
    uplinks: Vec<(String, String)>,
    port_groups: Vec<GroupEntry>,
    #[serde(default)]
    traffic_classes: Vec<ClassEntry>,
    #[serde(default)]
    pools: Vec<PoolEntry>,
    ports: Vec<TestPort>,
}

const GOOD: &str = r#"
uplinks = [["uplink1", "10G"], ["uplink2", "1G"]]
[[port_groups]]
name = "vms"
policy = "port-id"
active = ["uplink1", "uplink2"]
[[traffic_classes]]
class = "vm"
reservation = "600M"
[[pools]]
name = "gold"
reservation = "500M"
[[ports]]
name = "vm1"
mac = "52:54:00:00:00:01"
group = "vms"
pool = "gold"
reservation = "200M"
note = "a test port"
[[ports]]
name = "vm2"
group = "vms"
limit = "300M"
"#;

fn build_text(text: &str) -> Result<Host, String> {
    let f: TestFile = parse_toml(text)?;
    let uplinks = f
        .uplinks
        .iter()
        .map(|(n, c)| UplinkDesc {
            name: n.clone(),
            capacity: c.parse().unwrap(),
        })
        .collect();
    build(
        HostSpec {
            lbt: &f.lbt,
            reservation_cap: f.reservation_cap,
            uplinks,
            port_groups: &f.port_groups,
            traffic_classes: &f.traffic_classes,
            pools: &f.pools,
            ports: &f.ports,
        },
        &mut |i, _| Some(MacAddr([2, 0, 0, 0, 0, i as u8 + 1])),
    )
}

#[test]
fn a_good_host_builds_its_team_and_tree() {
    let h = build_text(GOOD).unwrap();
    assert_eq!(h.ports.len(), 2);
    assert_eq!(
        h.ports[1].mac,
        MacAddr([2, 0, 0, 0, 0, 2]),
        "a missing MAC comes from the caller"
    );
    assert_eq!(h.tree.node(h.ports[0].leaf).spec.reservation, Bandwidth::from_mbps(200));
    assert_eq!(h.tree.node(h.ports[1].leaf).spec.limit, Some(Bandwidth::from_mbps(300)));
    // The root is the smallest uplink: admission counts against it.
    assert_eq!(h.tree.node(crate::ioc::NodeId::ROOT).spec.name, "uplink2");
    assert_eq!(h.team.ports().count(), 2);
}

#[test]
fn bad_hosts_name_the_key() {
    let cases = [
        (
            GOOD.replace("\"1G\"", "\"100\""),
            "uplinks[1].capacity: 100bps is under 1Mbps",
        ),
        (
            GOOD.replace("limit = \"300M\"", "limit = 0"),
            "ports[1].limit: 0bps is below the smallest limit",
        ),
        (
            GOOD.replace("limit = \"300M\"", "limit = \"1k\""),
            "ports[1].limit: 1kbps is below",
        ),
        (
            GOOD.replace("52:54:00:00:00:01", "00:00:00:00:00:00"),
            "ports[0].mac: the all-zero MAC",
        ),
        (
            GOOD.replace("52:54:00:00:00:01", "33:33:00:00:00:01"),
            "ports[0].mac: 33:33:00:00:00:01 is a group address",
        ),
        (
            GOOD.replace("name = \"vm2\"", "name = \"\""),
            "ports[1].name: expected a name of 1 to 64",
        ),
        (
            GOOD.replace("name = \"vm2\"", "name = \"..\""),
            "ports[1].name: `..` is not a usable name",
        ),
        (
            GOOD.replace("name = \"vm2\"", "name = \"nfs\"")
                + "[[ports]]\nname = \"vm3\"\ngroup = \"vms\"\nclass = \"nfs\"\n",
            "ports[2]: needs the traffic class `nfs`, but a pool or port is named `nfs`",
        ),
        (
            GOOD.replace("name = \"gold\"", "name = \"a/b\"\n")
                .replace("pool = \"gold\"", "pool = \"a/b\""),
            "not a usable name",
        ),
        (
            GOOD.replace("[\"uplink1\", \"uplink2\"]", "[\"uplink1\", \"uplink1\"]"),
            "port_groups[0].active: uplink `uplink1` is listed twice",
        ),
        (
            GOOD.replace("[\"uplink1\", \"uplink2\"]", "[]"),
            "port_groups[0].active: expected at least one",
        ),
        (
            GOOD.replace("[\"uplink1\", \"uplink2\"]", "[\"uplink9\"]"),
            "port_groups[0].active[0]: no uplink named `uplink9`",
        ),
        (
            GOOD.replace("reservation = \"200M\"", "reservation = \"900M\""),
            "ports[0]: the name",
        ),
        (
            format!("{GOOD}[lbt]\nwindow_s = 1e20\n"),
            "lbt.window_s = 100000000000000000000: expected seconds",
        ),
        (
            format!("{GOOD}[lbt]\nperiod_s = -1\n"),
            "lbt.period_s = -1: expected seconds",
        ),
        (format!("{GOOD}[lbt]\nthreshold = 2\n"), "lbt.threshold"),
        (format!("reservation_cap = 1.5\n{GOOD}"), "reservation_cap"),
        (GOOD.replace("note = ", "colour = "), "unknown field `colour`"),
        (
            GOOD.replace("group = \"vms\"\nlimit", "group = \"web\"\nlimit"),
            "ports[1].group: no port group named `web`",
        ),
        (
            GOOD.replace("policy = \"port-id\"", "policy = \"load-based\"\nmode = \"lacp\""),
            "port_groups[0].policy: `load-based` is switch independent only",
        ),
        (
            GOOD.replace(
                "active = [\"uplink1\", \"uplink2\"]",
                "active = [\"uplink1\"]\nstandby = [\"uplink2\"]\nmode = \"static\"",
            ),
            "port_groups[0].standby: a `static` bundle has no standby uplinks",
        ),
        (
            GOOD.replace("policy = \"port-id\"", "policy = \"dynamic\"\nflowlet_gap_us = 0"),
            "port_groups[0].flowlet_gap_us: 0 µs",
        ),
        (
            GOOD.replace("policy = \"port-id\"", "policy = \"dynamic\"\nrebalance_ms = 600000"),
            "port_groups[0].rebalance_ms: 600000 ms",
        ),
        (
            GOOD.replace("policy = \"port-id\"", "policy = \"port-id\"\nmode = \"LACP\""),
            "unknown variant `LACP`",
        ),
        (
            GOOD.replace("policy = \"port-id\"", "policy = \"address-hash\"\nhash_fields = \"ports\""),
            "unknown variant `ports`",
        ),
        (
            GOOD.replace(
                "[[traffic_classes]]",
                "[[port_groups]]\nname = \"lag\"\npolicy = \"address-hash\"\nmode = \"static\"\nactive = [\"uplink2\"]\n[[traffic_classes]]",
            ),
            "port_groups[1].mode: `static`, but uplink `uplink2` is also in port group `vms`, whose mode is `switch-independent`",
        ),
    ];
    for (text, want) in cases {
        match build_text(&text) {
            Ok(_) if want == "ports[0]: the name" => panic!("a 900M reservation in a 500M pool was admitted"),
            Ok(_) => panic!("accepted; wanted `{want}`"),
            Err(e) if want == "ports[0]: the name" => assert!(e.contains("admission control"), "{e}"),
            Err(e) => assert!(e.contains(want), "`{want}` not in: {e}"),
        }
    }
}

/// NetIOC over host `h`'s tree, ports and uplinks, with queues bounded by `limit`.
fn ioc_of(h: &Host, limit: QueueLimit) -> Ioc<u32> {
    let leaves: Vec<_> = h.ports.iter().map(|p| p.leaf).collect();
    let caps = h.uplinks.iter().map(|u| u.capacity).collect();
    Ioc::new(h.tree.clone(), &leaves, caps, h.reservation_cap, limit)
}

/// A limit set and then removed leaves the port sending again (a limit of 0 could not be
/// undone: its frames stayed queued for ever; the smallest limit is now 1 Mbit/s).
#[test]
fn a_limit_set_and_removed_restores_service() {
    let h = build_text(GOOD).unwrap();
    let mut ioc = ioc_of(&h, QueueLimit::frames(64));
    let vm2 = h.ports[1].leaf;
    let spec = |limit| NodeSpec {
        limit,
        ..h.tree.node(vm2).spec.clone()
    };
    assert!(ioc
        .set_controls(vm2, spec(Some(Bandwidth::ZERO)), Instant::ZERO)
        .is_err());
    ioc.set_controls(vm2, spec(Some(Bandwidth::from_mbps(1))), Instant::ZERO)
        .unwrap();
    let t0 = Instant::from_millis(10);
    for k in 0..10 {
        ioc.enqueue(0, vm2, 1500, k, t0).unwrap();
    }
    // At 1 Mbit/s one 1500-byte frame per 12 ms: one now, the rest held.
    assert!(ioc.dequeue(0, t0).is_some());
    assert!(ioc.dequeue(0, t0).is_none());
    ioc.set_controls(vm2, spec(None), t0).unwrap();
    let sent = std::iter::from_fn(|| ioc.dequeue(0, t0)).count();
    assert_eq!(sent, 9, "every held frame leaves once the limit is gone");
}

/// Admission counts against the smallest uplink, and a capacity change applies even when the
/// reservations no longer fit (the error says so).
#[test]
fn admission_follows_the_smallest_uplink() {
    let h = build_text(GOOD).unwrap();
    let mut ioc = ioc_of(&h, QueueLimit::frames(64));
    assert_eq!(ioc.admission_capacity(), Bandwidth::from_gbps(1));
    let e = ioc.set_capacity(1, Bandwidth::from_mbps(100)).unwrap_err();
    assert!(e.to_string().contains("`vm`: reservation 600Mbps does not fit"), "{e}");
    assert_eq!(ioc.admission_capacity(), Bandwidth::from_mbps(100));
    ioc.set_capacity(1, Bandwidth::from_gbps(1)).unwrap();
}

/// An uplink's queue is bounded in bytes: a port that fills it cannot shut out one that sends
/// little, ECN-capable frames are marked rather than refused up to twice the budget, and the
/// byte counts return to zero as frames leave.
#[test]
fn the_byte_budget_bounds_the_queue_and_shares_it_fairly() {
    let h = build_text(GOOD).unwrap();
    let limit = QueueLimit {
        frames_per_port: 100_000,
        time: Some(core::time::Duration::from_millis(5)),
    };
    let mut ioc = ioc_of(&h, limit);
    let (hog, light) = (h.ports[0].leaf, h.ports[1].leaf);
    let budget = ioc.budget(0);
    assert_eq!(budget, (ioc.capacity(0).bps_f64() / 8.0 * 0.005) as u64);
    let t = Instant::ZERO;
    let mut hog_in = 0u64;
    while ioc.enqueue(0, hog, 1500, 0, t).is_ok() {
        hog_in += 1500;
    }
    assert!(
        hog_in <= budget && hog_in + 1500 > budget,
        "the hog alone fills the budget: {hog_in}"
    );
    // The light port holds nothing: its fair part is half the budget, past the budget.
    let mut light_in = 0u64;
    while ioc.enqueue(0, light, 1500, 1, t).is_ok() {
        light_in += 1500;
    }
    assert!(light_in + 1500 > budget / 2 && light_in <= budget / 2, "{light_in}");
    // ECN-capable frames of the hog join, marked, up to twice the budget; then nothing does.
    let mut marked = 0u64;
    while let Ok(how) = ioc.enqueue_marking(0, hog, 1500, 2, t, |_| true) {
        assert_eq!(how, crate::ioc::Enqueued::Marked);
        marked += 1500;
    }
    let total = hog_in + light_in + marked;
    assert!(total <= 2 * budget && total + 1500 > 2 * budget, "{total} vs {budget}");
    assert_eq!(ioc.queued_bytes(0), total);
    // Frames leave (a limit on a port may hold some back; draining takes them all).
    assert!(ioc.dequeue(0, Instant::from_millis(1)).is_some());
    assert!(ioc.queued_bytes(0) < total);
    ioc.drain(0);
    assert_eq!(ioc.queued_bytes(0), 0);
    assert!(ioc.enqueue(0, light, 1500, 1, t).is_ok(), "empty again: open to all");
}

/// A port added or removed while frames wait: the tree is rebuilt, every frame of a port that
/// stays is still queued on its uplink in its port's order and leaves, the removed port's come
/// back to the caller, and the byte counts follow.
#[test]
fn a_reshaped_tree_keeps_the_frames_of_ports_that_stay() {
    let h = build_text(GOOD).unwrap();
    let mut ioc = ioc_of(&h, QueueLimit::frames(64));
    let (vm1, vm2) = (h.ports[0].leaf, h.ports[1].leaf);
    let t = Instant::ZERO;
    for k in 0..5 {
        ioc.enqueue(0, vm1, 1000, 100 + k, t).unwrap();
        ioc.enqueue(1, vm2, 500, 200 + k, t).unwrap();
        ioc.enqueue(0, vm2, 500, 300 + k, t).unwrap();
    }
    // vm1 leaves: the new tree has vm2 only, at whatever leaf the new build gives it.
    let start = GOOD.find("[[ports]]").unwrap();
    let end = start + 1 + GOOD[start + 1..].find("[[ports]]").unwrap();
    let smaller = build_text(&format!("{}{}", &GOOD[..start], &GOOD[end..])).unwrap();
    assert_eq!(smaller.ports.len(), 1);
    let vm2_new = smaller.ports[0].leaf;
    let moved = |leaf: crate::ioc::NodeId| (leaf == vm2).then_some(vm2_new);
    let back = ioc.reshape(smaller.tree.clone(), &[vm2_new], moved, t);
    assert_eq!(back, (100..105).collect::<Vec<_>>());
    assert_eq!(ioc.queued_bytes(0), 5 * 500);
    assert_eq!(ioc.queued_bytes(1), 5 * 500);
    // vm2's 300M limit lets a frame go every 13.3 us; 1 ms apart, each is free to go.
    let sent: Vec<u32> = (1..=6)
        .filter_map(|ms| ioc.dequeue(0, Instant::from_millis(ms)))
        .map(|(leaf, _, k)| {
            assert_eq!(leaf, vm2_new);
            k
        })
        .collect();
    assert_eq!(sent, (300..305).collect::<Vec<_>>(), "in the port's order");
    assert_eq!(
        ioc.drain(1).into_iter().map(|(_, k)| k).collect::<Vec<_>>(),
        (200..205).collect::<Vec<_>>()
    );
    assert_eq!(ioc.queued_bytes(0) + ioc.queued_bytes(1), 0);
}

/// An uplink added gets an empty scheduler and counts in admission; one removed hands back
/// what waited for it, and the uplinks after it keep their frames under their new index.
#[test]
fn uplinks_join_and_leave_network_io_control() {
    let h = build_text(GOOD).unwrap();
    let mut ioc = ioc_of(&h, QueueLimit::frames(64));
    let (vm1, vm2) = (h.ports[0].leaf, h.ports[1].leaf);
    let t = Instant::ZERO;
    ioc.add_uplink(Bandwidth::from_mbps(700));
    assert_eq!(ioc.admission_capacity(), Bandwidth::from_mbps(700));
    for k in 0..3 {
        ioc.enqueue(0, vm1, 1000, 100 + k, t).unwrap();
        ioc.enqueue(1, vm1, 1000, 200 + k, t).unwrap();
        ioc.enqueue(2, vm2, 500, 300 + k, t).unwrap();
    }
    assert_eq!(ioc.remove_uplink(1), vec![(vm1, 200), (vm1, 201), (vm1, 202)]);
    assert_eq!(ioc.capacity(1), Bandwidth::from_mbps(700));
    assert_eq!(ioc.queued_bytes(1), 3 * 500);
    let moved: Vec<u32> = ioc.drain(1).into_iter().map(|(_, k)| k).collect();
    assert_eq!(moved, vec![300, 301, 302]);
    assert_eq!(ioc.queued_bytes(0), 3 * 1000, "uplink 0 untouched");
}

#[test]
fn teaming_knobs_reach_the_team() {
    use crate::teaming::{HashFields, Policy, PolicyTuning, TeamMode};
    use core::time::Duration;
    let text = GOOD.replace(
        "policy = \"port-id\"",
        "policy = \"dynamic\"\nmode = \"static\"\nhash_fields = \"ip-addresses\"\nflowlet_gap_us = 250\nrebalance_ms = 500",
    );
    let h = build_text(&text).unwrap();
    let g = &h.groups[0];
    assert_eq!((g.policy, g.mode), (Policy::DYNAMIC, TeamMode::Static));
    let want = PolicyTuning {
        hash_fields: HashFields::IpAddresses,
        flowlet_gap: Duration::from_micros(250),
        rebalance: Duration::from_millis(500),
    };
    assert_eq!(g.tuning, want);
    assert_eq!(h.team.group(crate::teaming::GroupId(0)).unwrap().tuning, want);
    // Left out, the knobs take their defaults.
    let h = build_text(GOOD).unwrap();
    assert_eq!(
        (h.groups[0].mode, h.groups[0].tuning),
        (TeamMode::default(), PolicyTuning::default())
    );
}

#[test]
fn overlay_groups_are_checked_key_by_key() {
    let group = |name: &str, extra: &str| {
        format!("[[port_groups]]\nname = \"{name}\"\npolicy = \"port-id\"\nactive = [\"uplink1\"]\n{extra}\n")
    };
    let overlay = |vni: u64, local: &str| {
        format!("overlay = {{ vni = {vni}, local_vtep = \"{local}\", remote_vteps = [\"192.0.2.2\"] }}")
    };
    // The plain group is tagged: an untagged one may not share the VTEP's uplinks.
    let tagged = GOOD.replace(
        "active = [\"uplink1\", \"uplink2\"]",
        "active = [\"uplink1\", \"uplink2\"]\nvlan = 10",
    );
    let with = |groups: &str| tagged.replace("[[traffic_classes]]", &format!("{groups}[[traffic_classes]]"));
    let good = with(&group("t1", &overlay(5001, "192.0.2.1")));
    build_text(&good).unwrap();
    let untagged = GOOD.replace(
        "[[traffic_classes]]",
        &format!("{}[[traffic_classes]]", group("t1", &overlay(5001, "192.0.2.1"))),
    );
    let e = build_text(&untagged).unwrap_err();
    assert!(
        e.contains("port_groups[1].overlay: port_groups[0] (`vms`) is untagged on uplink `uplink1`"),
        "{e}"
    );
    let f: TestFile = parse_toml(&good).unwrap();
    let o = overlays(&f.port_groups);
    assert_eq!(o.len(), 2);
    assert!(o[0].is_none() && o[1].as_ref().is_some_and(|o| o.vni.get() == 5001));
    let cases = [
        (
            group("t1", &overlay(1 << 24, "192.0.2.1")),
            "port_groups[1].overlay.vni: VNI 16777216 is out of range",
        ),
        (
            group("t1", &format!("vlan = 5\n{}", overlay(1, "192.0.2.1"))),
            "port_groups[1].overlay: an overlay group carries",
        ),
        (
            group("t1", &overlay(1, "192.0.2.1")) + &group("t2", &overlay(2, "192.0.2.9")),
            "port_groups[2].overlay.local_vtep = 192.0.2.9: port_groups[1] has 192.0.2.1",
        ),
        (
            group("t1", &overlay(7, "192.0.2.1")) + &group("t2", &overlay(7, "192.0.2.1")),
            "port_groups[2].overlay.vni = 7: port_groups[1] uses it too",
        ),
        (
            group("t1", &overlay(1, "192.0.2.2")),
            "port_groups[1].overlay.remote_vteps[0] = 192.0.2.2: this host's own VTEP",
        ),
        (
            group(
                "t1",
                "overlay = { vni = 1, local_vtep = \"192.0.2.1\", remote_vteps = [], ttl = 3 }",
            ),
            "ttl",
        ),
    ];
    for (groups, want) in cases {
        let e = build_text(&with(&groups)).unwrap_err();
        assert!(e.contains(want), "{want}: got {e}");
    }
}
