//! Windows-style spreading in switch-independent mode, live: under Address Hash, and then
//! Dynamic, one VM's TCP streams leave on both uplinks, yet the physical switch (the Linux
//! bridge in tmt-phys) only ever learns the VM's MAC on the primary's port (frames on the other
//! member carry that member's MAC), so everything the VM receives comes in on the primary.
//! Topology: [`netns`].

mod netns;
use netns::*;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Bytes each uplink sent and received so far.
/// The bridge ports in tmt-phys on which the bridge has learned `mac` now.
fn learned_on(mac: &str) -> Vec<String> {
    let out = Command::new("timeout")
        .args(["5", "bridge", "-n", "tmt-phys", "fdb", "show", "br", "br0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(mac))
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect()
}

/// Runs eight TCP streams vm1 -> remote (`reverse`: remote -> vm1) for 3 s, sampling where the
/// bridge learned vm1's MAC every 50 ms meanwhile; returns the bridge ports seen and each
/// uplink's (tx, rx) bytes during the run.
fn run(dir: &Path, reverse: bool) -> (Vec<String>, Vec<(u64, u64)>) {
    let bytes = |dir: &Path| uplink_bytes(dir).into_iter().map(|(_, b)| b).collect::<Vec<_>>();
    let before = bytes(dir);
    let mut server = iperf_server();
    let mut args = vec!["-t", "3", "-P", "8"];
    if reverse {
        args.push("-R");
    }
    let mut client = iperf_client("tmt-vm1", &args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut seen: Vec<String> = Vec::new();
    while client.try_wait().unwrap().is_none() {
        for p in learned_on("02:00:00:00:00:01") {
            if !seen.contains(&p) {
                seen.push(p);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(client.wait().unwrap().success(), "iperf3 failed");
    let _ = server.wait();
    let after = bytes(dir);
    let delta = after.iter().zip(&before).map(|(a, b)| (a.0 - b.0, a.1 - b.1)).collect();
    (seen, delta)
}

#[test]
fn a_spread_vm_is_learned_and_reached_on_the_primary_only() {
    spread_on("userspace");
}

/// The same on the kernel path: Address Hash computed in the program, Dynamic's flowlet
/// buckets kept there with the engine's targets.
#[test]
fn a_spread_vm_is_learned_and_reached_on_the_primary_only_on_the_kernel_path() {
    spread_on("kernel");
}

fn spread_on(plane: &str) {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = format!(
        "datapath = \"{plane}\"\n{}",
        switch_toml(
            "",
            "10G",
            "policy = \"address-hash\"\nactive = [\"uplink1\", \"uplink2\"]",
            "",
            "",
            "",
        )
    );
    let (_daemon, _status) = start(d, &config);
    assert!(reaches_remote("tmt-vm1"));
    for policy in ["address-hash", "dynamic"] {
        if policy != "address-hash" {
            let (code, _, err) = ctl(d, &["group", "vms", "--policy", policy]);
            assert_eq!(code, 0, "{err}");
            assert!(reaches_remote("tmt-vm1"));
        }
        // vm1's own member (Address Hash: the primary, uplink1; Dynamic: the member it is
        // affinitised to), the other one, and their ports on the bridge.
        let (code, out, err) = ctl(d, &["--json", "port", "vm1"]);
        assert_eq!(code, 0, "{err}");
        let own: usize = match serde_json::from_str::<Value>(&out).unwrap()["uplink"].as_str() {
            Some("uplink1") => 0,
            Some("uplink2") => 1,
            other => panic!("vm1 on {other:?}"),
        };
        let other = 1 - own;
        let bridge_port = |u: usize| format!("p{}", u + 1);
        let other_mac = std::fs::read_to_string(format!("/sys/class/net/tmt-u{}/address", other + 1)).unwrap();
        let (seen, sent) = run(d, false);
        let total_tx = sent[0].0 + sent[1].0;
        eprintln!(
            "{plane} {policy}: vm1 on uplink{}, sent {sent:?}, vm1 learned on {seen:?}",
            own + 1
        );
        // Both members send, but the bridge saw vm1's MAC on its own member's port only.
        assert!(
            sent[other].0 as f64 > 0.1 * total_tx as f64,
            "{policy}: the other member sent {} of {total_tx} bytes",
            sent[other].0
        );
        assert_eq!(
            seen,
            [bridge_port(own)],
            "{policy}: vm1's MAC moved between the bridge's ports"
        );
        assert_eq!(
            learned_on(other_mac.trim()),
            [bridge_port(other)],
            "{policy}: the other member's frames did not carry its MAC"
        );
        // What vm1 receives comes in on its own member only.
        let (seen, received) = run(d, true);
        eprintln!("{policy} reverse: received {received:?}, vm1 learned on {seen:?}");
        let total_rx = received[0].1 + received[1].1;
        assert!(total_rx > 10_000_000, "{received:?}");
        assert!(
            (received[other].1 as f64) < 0.01 * total_rx as f64,
            "{policy}: the other member received {} of {total_rx} bytes",
            received[other].1
        );
    }
    // Every connection's first SYN got through: on the kernel path each Dynamic bucket's first
    // frame is handed to the engine, and a guest's partial checksum must be completed on the way
    // (it was not: the receiver dropped each first SYN, and a stream stalled a second or more).
    let out = Command::new("ip")
        .args(["netns", "exec", "tmt-vm1", "nstat", "-az", "TcpExtTCPSynRetrans"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let retrans: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("TcpExtTCPSynRetrans"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("nstat: {text}"));
    assert_eq!(retrans, 0, "{plane}: SYNs sent again");
}
