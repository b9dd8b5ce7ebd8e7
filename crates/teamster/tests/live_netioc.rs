//! Network I/O Control live under TCP and UDP, on both data planes: three VMs share one
//! 100 Mbit/s uplink, and each gets what the fluid model gives it, within 10% of the link, with
//! real TCP senders as with greedy UDP ones, before and after that uplink fails. Topology and
//! helpers: [`netns`]. (The user-space path runs the TCP case here; its UDP reservation and
//! limit are `live_qos.rs`'s, which keeps CI's time: this case matched the model within 0.3%.)
//!
//! Phase 1: vm1 reserves 60M, vm2 is limited to 10M, vm3 has neither (model 75 / 10 / 15).
//! Then uplink1 loses its carrier and every VM fails over to uplink2. Phase 2: the same controls
//! on uplink2. Phase 3, set through `teamster ctl` while the streams run: vm1 gives up its
//! reservation and has shares low (25), vm2 no limit and shares high (100), vm3 normal (50):
//! 14.3 / 57.1 / 28.6.
//!
//! On the user-space path the switch's own scheduler shares the uplink and the uplinks' HTB at
//! 110% of the line stands for the wire. On the kernel path the switch programs an HTB qdisc on
//! each uplink (`teamster_kernel::shaping`), which paces it at its capacity; the test reads that
//! hierarchy with `tc` (both uplinks have every VM's class, the classes on uplink2 carried the
//! traffic after the failure, each queue's limit) and checks it is gone after SIGTERM.
//!
//! The model is `teamster ioc allocate` (the engine's fluid allocator) over the capacity the
//! uplink carried, so a machine too busy to fill the link fails the policy only if the policy is
//! wrong: the reservation still comes first out of what was carried. Whether the link filled at
//! all is checked on its best second.
//!
//! Before each port's part of the queue budget followed its allocation
//! (`teamster_core::ioc::queue_share`), the reserved VM's TCP got 29-53 Mbit/s of its model's 72
//! and the shares phase came out 31 / 25 / 35 instead of 55 / 14 / 27: its part of the budget was
//! an equal third, the shortest queue in time of the three.

mod netns;
use netns::*;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The uplink's rate, Mbit/s.
const LINE: u32 = 100;
/// How long the streams run, s; when uplink1 fails and when the controls change.
const SECS: u32 = 30;
const FAIL_AT: u64 = 10;
const CHANGE_AT: u64 = 20;
/// The seconds (intervals from a stream's start) each phase is judged over.
const PHASE1: (usize, usize) = (3, 10);
const PHASE2: (usize, usize) = (13, 20);
const PHASE3: (usize, usize) = (22, 29);

fn config(plane: &str) -> String {
    let mut t = format!("datapath = \"{plane}\"\n");
    t += &switch_toml(
        "",
        &format!("{LINE}M"),
        "policy = \"port-id\"\nactive = [\"uplink1\"]\nstandby = [\"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"60M\"",
        "reservation = \"60M\"",
        "limit = \"10M\"",
    );
    t.push_str("\n[[ports]]\nname = \"vm3\"\ninterface = \"tmt-v3\"\nmac = \"02:00:00:00:00:03\"\ngroup = \"vms\"\n");
    t
}

/// The fluid model's allocation of `capacity_mbit` to the three VMs, from `teamster ioc
/// allocate` over the tree the switch has in the phase.
fn model(dir: &Path, capacity_mbit: f64, ports: &str) -> [f64; 3] {
    let file = dir.join("model.json");
    let tree = format!(
        r#"{{"capacity": {}, "nodes": [{{"name": "vm", "reservation": "60M", "children": [{ports}]}}]}}"#,
        (capacity_mbit * 1e6) as u64
    );
    std::fs::write(&file, tree).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["ioc", "allocate", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    ["vm1", "vm2", "vm3"].map(|n| v["allocations"][n].as_f64().unwrap() / 1e6)
}

fn mean(per_second: &[f64], (from, to): (usize, usize)) -> f64 {
    let w = &per_second[from.min(per_second.len())..to.min(per_second.len())];
    assert!(
        w.len() >= (to - from) / 2,
        "the receiver reported {} intervals",
        per_second.len()
    );
    w.iter().sum::<f64>() / w.len() as f64
}

/// The HTB classes on `dev` (the kernel path's hierarchy), from `tc -s class show` (iproute2
/// 6.1 has no JSON for classes): each class's ID, whether it is a leaf, and the bytes it sent.
fn classes(dev: &str) -> Vec<(String, bool, u64)> {
    let out = Command::new("tc")
        .args(["-s", "class", "show", "dev", dev])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut got: Vec<(String, bool, u64)> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["class", "htb", id, rest @ ..] => got.push((id.to_string(), rest.contains(&"leaf"), 0)),
            ["Sent", bytes, "bytes", ..] => {
                if let Some(last) = got.last_mut() {
                    last.2 = bytes.parse().unwrap_or(0);
                }
            }
            _ => {}
        }
    }
    got
}

/// The root qdisc's kind on `dev`.
fn root_qdisc(dev: &str) -> String {
    let out = Command::new("tc")
        .args(["-j", "qdisc", "show", "dev", dev, "root"])
        .output()
        .unwrap();
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.first()
        .map_or(String::new(), |q| format!("{} {}", q["kind"], q["handle"]))
}

/// The port classes' bytes sent on `dev`, by class ID, and the bfifo limits of its queues.
fn port_classes(dev: &str) -> (Vec<(String, u64)>, Vec<u64>) {
    let leaves = classes(dev)
        .into_iter()
        .filter(|(id, leaf, _)| *leaf && id != "7473:fffe")
        .map(|(id, _, bytes)| (id, bytes))
        .collect();
    let out = Command::new("tc")
        .args(["-j", "qdisc", "show", "dev", dev])
        .output()
        .unwrap();
    let q: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let limits = q
        .iter()
        .filter(|q| q["kind"] == "bfifo")
        .filter_map(|q| q["options"]["limit"].as_u64())
        .collect();
    (leaves, limits)
}

/// The uplink each VM's port is on, from the status file.
fn vm_uplinks(status_path: &Path) -> Vec<String> {
    let s = status(status_path);
    ["vm1", "vm2", "vm3"]
        .iter()
        .map(|n| {
            s["ports"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == *n)
                .map_or(String::new(), |p| p["uplink"].as_str().unwrap_or("").to_string())
        })
        .collect()
}

/// Runs the three phases on `plane` with TCP senders (`udp` None) or UDP ones offered at `udp`
/// Mbit/s, and checks every port against the model.
fn phases(udp: Option<u32>, plane: &str) {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let kernel = plane == "kernel";
    let _topology = Topology::shaped_vms_on(LINE, 3, !kernel);
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, status_path) = start(dir.path(), &config(plane));
    for vm in ["tmt-vm1", "tmt-vm2", THIRD_VM] {
        assert!(reaches_remote(vm), "{vm} does not reach the remote host");
    }
    let started = Instant::now();
    let streams: Vec<_> = ["tmt-vm1", "tmt-vm2", THIRD_VM]
        .into_iter()
        .zip(5301u16..)
        .map(|(vm, port)| match udp {
            Some(mbit) => udp_stream_to(("tmt-remote", "10.77.0.100"), vm, port, mbit, SECS, 1.0),
            None => tcp_stream(vm, port, SECS, 1.0),
        })
        .collect();
    let at = |s: u64| std::thread::sleep((started + Duration::from_secs(s)).saturating_duration_since(Instant::now()));
    let before_failure = kernel.then(|| {
        let (c1, limits) = port_classes("tmt-u1");
        let (c2, _) = port_classes("tmt-u2");
        (c1, c2, limits)
    });
    at(FAIL_AT);
    must(&["ip", "-n", "tmt-phys", "link", "set", "p1", "down"]);
    await_that("every VM is on uplink2", || {
        vm_uplinks(&status_path).iter().all(|u| u == "uplink2")
    });
    at(CHANGE_AT);
    for (port, args) in [
        ("vm1", ["--reservation", "0", "--shares", "low"]),
        ("vm2", ["--limit", "none", "--shares", "high"]),
    ] {
        let (code, out, err) = ctl(dir.path(), &[&["port", port][..], &args[..]].concat());
        assert_eq!(code, 0, "ctl port {port}: {out}{err}");
    }
    let got: Vec<Vec<f64>> = streams.into_iter().map(|s| s.join().unwrap().per_second).collect();
    let last = status(&status_path);
    eprintln!("switch: {}", counters_line(&last));
    if let Some((c1, c2_before, limits)) = before_failure {
        // Every VM has a class on both uplinks; each port queue holds at most 5 ms at its rate
        // or one super-frame and two frames.
        assert_eq!(c1.len(), 3, "tmt-u1's port classes: {c1:?}");
        assert_eq!(c2_before.len(), 3, "tmt-u2's port classes: {c2_before:?}");
        assert!(
            limits.len() >= 4
                && limits
                    .iter()
                    .all(|l| *l <= (65_536 + 3036).max(LINE as u64 * 1_000_000 / 8 / 200)),
            "bfifo limits {limits:?}"
        );
        // After the failure the VMs' traffic went through tmt-u2's classes.
        let (c2_after, _) = port_classes("tmt-u2");
        let carried: u64 = c2_after.iter().map(|(_, b)| b).sum::<u64>() - c2_before.iter().map(|(_, b)| b).sum::<u64>();
        assert!(
            carried > 10_000_000,
            "tmt-u2's port classes carried {carried} bytes after the failure"
        );
        eprintln!("tmt-u2's port classes after the failure: {c2_after:?}");
        // The team's own frames (its RARPs after the failover) went by HTB's direct queue.
        let out = Command::new("tc")
            .args(["-j", "qdisc", "show", "dev", "tmt-u2", "root"])
            .output()
            .unwrap();
        let q: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let direct = q[0]["options"]["direct_packets_stat"].as_u64().unwrap_or(0);
        assert!(direct >= 3, "tmt-u2's direct queue sent {direct} frames: {q:?}");
        let queue_full: u64 = ["vm1", "vm2", "vm3"].iter().map(|v| port_drops(&last, v)).sum();
        eprintln!("the VMs' drops (their queues full, on the kernel path): {queue_full}");
    }

    // Receivers count payload: a full-size TCP segment carries 1448 bytes in a 1514-byte frame
    // (timestamps on), a datagram 1400 in 1442; the pacer and the reservations count frames.
    let payload = match udp {
        Some(_) => 1400.0 / 1442.0,
        None => 1448.0 / 1514.0,
    };
    let line = f64::from(LINE) * payload;
    let controlled = r#"{"name": "vm1", "reservation": "60M"}, {"name": "vm2", "limit": "10M"}, {"name": "vm3"}"#;
    let trees = [
        controlled,
        controlled,
        r#"{"name": "vm1", "shares": "low"}, {"name": "vm2", "shares": "high"}, {"name": "vm3"}"#,
    ];
    let mut report = String::new();
    let mut worst: f64 = 0.0;
    for (k, (window, tree)) in [PHASE1, PHASE2, PHASE3].into_iter().zip(trees).enumerate() {
        let rates: Vec<f64> = got.iter().map(|s| mean(s, window)).collect();
        let carried: f64 = rates.iter().sum();
        let want = model(dir.path(), carried.min(line) / payload, tree).map(|m| m * payload);
        for (i, (g, w)) in rates.iter().zip(want).enumerate() {
            let off = (g - w) / line;
            worst = worst.max(off.abs());
            report += &format!(
                "phase {}: vm{} {g:.1} Mbit/s, model {w:.1} ({:+.1}% of the link)\n",
                k + 1,
                i + 1,
                off * 100.0
            );
        }
        report += &format!("phase {}: carried {carried:.1} of {line:.1}\n", k + 1);
    }
    let best = (0..got[0].len())
        .map(|i| got.iter().map(|s| s.get(i).copied().unwrap_or(0.0)).sum::<f64>())
        .fold(0.0, f64::max);
    let kind = if udp.is_some() { "UDP" } else { "TCP" };
    let kind = format!("{kind} ({plane})");
    eprintln!("{kind}, per second: {got:.1?}\n{report}best second {best:.1}");
    assert!(
        worst <= 0.10,
        "{kind}: a VM is more than 10% of the link off the model:\n{report}"
    );
    assert!(
        best >= 0.85 * line,
        "{kind}: the uplink never filled: best second {best:.1} Mbit/s"
    );
    if kernel {
        stop_cleanly(&mut daemon);
        for dev in ["tmt-u1", "tmt-u2"] {
            let root = root_qdisc(dev);
            assert!(
                !root.contains("7473"),
                "{dev} still has the switch's qdisc after SIGTERM: {root}"
            );
        }
    }
}

/// One TCP connection per VM (cubic, the VMs' offloads on), as most VM traffic is.
#[test]
fn reservations_shares_and_limits_hold_under_tcp() {
    phases(None, "userspace");
}

/// The same on the kernel path: HTB on the uplinks, classes picked by the tcx program.
#[test]
fn reservations_shares_and_limits_hold_under_tcp_on_the_kernel_path() {
    phases(None, "kernel");
}

/// Greedy UDP senders on the kernel path.
#[test]
fn reservations_shares_and_limits_hold_under_udp_on_the_kernel_path() {
    phases(Some(LINE), "kernel");
}
