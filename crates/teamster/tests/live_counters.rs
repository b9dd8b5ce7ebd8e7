//! Counters tell the truth: under a TCP stream (whose super-frames the switch cuts into
//! segments), the uplinks' `tx_packets`/`tx_bytes` match what the physical switch's ports
//! received, and the VM port's match what the VM received; a frame over the uplink's MTU is
//! one `oversize` drop on the uplink. Topology and helpers: [`netns`].

mod netns;
use netns::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A kernel interface counter of `dev` in namespace `ns`.
fn kernel_counter(ns: &str, dev: &str, what: &str) -> u64 {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "cat",
            &format!("/sys/class/net/{dev}/statistics/{what}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// (packets, bytes) the switch says it sent: on both uplinks, and on port tmt-v1.
fn switch_sent(s: &serde_json::Value) -> ((u64, u64), (u64, u64)) {
    let c = |v: &serde_json::Value| {
        (
            v["counters"]["tx_packets"].as_u64().unwrap(),
            v["counters"]["tx_bytes"].as_u64().unwrap(),
        )
    };
    let ups = s["uplinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(c)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let vm1 = s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["interface"] == "tmt-v1")
        .unwrap();
    (ups, c(vm1))
}

/// (packets, bytes) received from the switch: by the physical switch's ports, and by vm1.
fn wire_received() -> ((u64, u64), (u64, u64)) {
    let phys = ["p1", "p2"].iter().fold((0, 0), |a, p| {
        (
            a.0 + kernel_counter("tmt-phys", p, "rx_packets"),
            a.1 + kernel_counter("tmt-phys", p, "rx_bytes"),
        )
    });
    let vm1 = (
        kernel_counter("tmt-vm1", "eth0", "rx_packets"),
        kernel_counter("tmt-vm1", "eth0", "rx_bytes"),
    );
    (phys, vm1)
}

type Pair = (u64, u64);

/// The next status file written after this call (its snapshot taken after it).
fn fresh_status(path: &std::path::Path) -> serde_json::Value {
    let seen = status(path)["t_s"].as_f64().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let s = status(path);
        if s["t_s"].as_f64().unwrap() > seen {
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "status file not rewritten");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The switch's counters from a fresh status file, bracketed by the kernel's: (wire before,
/// switch, wire after). The status file is rewritten every second from a snapshot taken then,
/// so the kernel is read before the last snapshot seen and after the next one.
fn bracketed(path: &std::path::Path) -> ((Pair, Pair), (Pair, Pair), (Pair, Pair)) {
    let before = wire_received();
    let s = fresh_status(path);
    (before, switch_sent(&s), wire_received())
}

/// Drops for `reason`: summed over the uplinks, and on port tmt-v1.
fn drops(s: &serde_json::Value, reason: &str) -> (u64, u64) {
    let uplinks = s["uplinks"].as_array().unwrap();
    let up = uplinks
        .iter()
        .map(|u| u["counters"]["drops"][reason].as_u64().unwrap())
        .sum();
    let vm1 = s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["interface"] == "tmt-v1")
        .unwrap();
    (up, vm1["counters"]["drops"][reason].as_u64().unwrap())
}

/// Runs a 3-second 200 Mbit/s TCP stream from vm1 to the remote host and returns what the
/// switch counted sending over it (uplinks, vm1's port), and the least and most the kernel saw.
fn stream_counts(status_path: &std::path::Path) -> (Pair2, Pair2, Pair2) {
    let before = bracketed(status_path);
    let mut server = iperf_server();
    let client = iperf_client("tmt-vm1", &["-t", "3", "-b", "200M"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    let _ = server.wait();
    assert!(client.success(), "iperf3 failed");
    std::thread::sleep(Duration::from_millis(500));
    let after = bracketed(status_path);
    let d = |a: Pair, b: Pair| (a.0 - b.0, a.1 - b.1);
    let ours = (d(after.1 .0, before.1 .0), d(after.1 .1, before.1 .1));
    let least = (d(after.0 .0, before.2 .0), d(after.0 .1, before.2 .1));
    let most = (d(after.2 .0, before.0 .0), d(after.2 .1, before.0 .1));
    eprintln!(
        "uplinks: switch sent {:?}, the physical switch received {:?} to {:?}",
        ours.0, least.0, most.0
    );
    eprintln!(
        "vm1 port: switch sent {:?}, vm1 received {:?} to {:?}",
        ours.1, least.1, most.1
    );
    (ours, least, most)
}

/// (uplinks, vm1's port), each (packets, bytes).
type Pair2 = (Pair, Pair);

/// Two data-plane threads: the ports' frames cross between threads, and their counts are
/// taken from the port worker.
#[test]
fn tx_counters_count_what_went_on_the_wire() {
    counters_match_the_wire("workers = 2");
}

/// One data-plane thread: the switching worker does every interface's I/O.
#[test]
fn tx_counters_count_what_went_on_the_wire_with_one_thread() {
    counters_match_the_wire("workers = 1");
}

fn counters_match_the_wire(workers: &str) {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let config = switch_toml(
        workers,
        "1G",
        "policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]",
        "",
        "",
        "",
    );
    let (_daemon, status_path) = start(dir.path(), &config);
    assert_eq!(received(&ping("tmt-vm1", "10.77.0.100", "2", "0.2")), 2);

    // With vm1's segmentation offloads off, every frame is one frame on the wire: the switch's
    // counts must match the kernel's exactly (but for the host's own few packets).
    must(&[
        "ip", "netns", "exec", "tmt-vm1", "ethtool", "-K", "eth0", "tso", "off", "gso", "off",
    ]);
    let (ours, least, most) = stream_counts(&status_path);
    assert!(least.0 .0 > 10_000, "the stream did not run");
    // The host's own few packets on the uplinks (IPv6 neighbour discovery) are the only
    // difference allowed, and they are on the kernel's side.
    let within = |ours: Pair, least: Pair, most: Pair| {
        ours.0 + 20 >= least.0 && ours.0 <= most.0 && ours.1 + 20 * 200 >= least.1 && ours.1 <= most.1
    };
    assert!(
        within(ours.0, least.0, most.0),
        "uplinks: {ours:?} not within {least:?}..{most:?}"
    );
    assert!(
        within(ours.1, least.1, most.1),
        "vm1: {ours:?} not within {least:?}..{most:?}"
    );

    // With them on (as a virtio-net guest has them), vm1 sends TSO super-frames, and the switch
    // passes them on whole: the veths count each as one packet of its own length, the switch
    // counts the segments and bytes it becomes on a wire (headers repeated, as a NIC counts).
    must(&[
        "ip", "netns", "exec", "tmt-vm1", "ethtool", "-K", "eth0", "tso", "on", "gso", "on",
    ]);
    let (ours, least, most) = stream_counts(&status_path);
    assert!(ours.0 .0 > 10_000, "the stream did not run");
    assert!(
        ours.0 .0 > 4 * most.0 .0,
        "super-frames were cut before the uplinks: {ours:?} segments, {least:?}..{most:?} frames"
    );
    assert!(
        ours.0 .1 >= least.0 .1 && ours.0 .1 <= most.0 .1 + most.0 .1 / 20,
        "uplinks' wire bytes {ours:?} not within 5% above the frames' {least:?}..{most:?}"
    );

    // vm1 may now send 9000-byte frames; the uplinks still carry 1500. Three pings of 3028-byte
    // IP packets (not TCP, so not cut) are each one `oversize` drop on the uplink, counted
    // once: not a `tx_error`, not on the port, not sent.
    must(&["ip", "link", "set", "tmt-v1", "mtu", "9000"]);
    must(&["ip", "-n", "tmt-vm1", "link", "set", "eth0", "mtu", "9000"]);
    let before = fresh_status(&status_path);
    let big = Command::new("timeout")
        .args([
            "10",
            "ip",
            "netns",
            "exec",
            "tmt-vm1",
            "ping",
            "-n",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "1",
            "-s",
            "3000",
            "10.77.0.100",
        ])
        .output()
        .unwrap();
    let big = String::from_utf8_lossy(&big.stdout);
    assert_eq!(received(&big), 0, "a 3028-byte packet crossed a 1500 MTU: {big}");
    let after = fresh_status(&status_path);
    let delta = |reason: &str| {
        let (a, b) = (drops(&after, reason), drops(&before, reason));
        (a.0 - b.0, a.1 - b.1)
    };
    eprintln!(
        "after 3 oversize pings: oversize (uplinks, vm1) {:?}, tx_error {:?}",
        delta("oversize"),
        delta("tx_error")
    );
    assert_eq!(delta("oversize"), (3, 0));
    assert_eq!(delta("tx_error"), (0, 0));
}
