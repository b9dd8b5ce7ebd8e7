//! The live switch end to end in network namespaces: reachability, no broadcast loop, failover
//! under TCP, clean shutdown. Topology and helpers: [`netns`].

mod netns;
use netns::*;
use std::process::{Command, Stdio};
use std::time::Duration;

fn switch() -> String {
    switch_toml(
        "",
        "1G",
        "policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]",
        "",
        "",
        "",
    )
}

#[test]
fn live_switch_end_to_end() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, status_path) = start(dir.path(), &switch());

    // Every VM reaches the remote host, and each other.
    assert_eq!(received(&ping("tmt-vm1", "10.77.0.100", "3", "0.2")), 3);
    assert_eq!(received(&ping("tmt-vm2", "10.77.0.100", "3", "0.2")), 3);
    assert_eq!(received(&ping("tmt-vm1", "10.77.0.2", "3", "0.2")), 3);

    // No broadcast loop: a burst of broadcasts leaves frame counters bounded.
    Command::new("timeout")
        .args([
            "5",
            "ip",
            "netns",
            "exec",
            "tmt-vm1",
            "ping",
            "-b",
            "-c",
            "50",
            "-i",
            "0.01",
            "10.77.0.255",
        ])
        .output()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let s = status(&status_path);
    let uplink_rx: u64 = s["uplinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["counters"]["rx_packets"].as_u64().unwrap())
        .sum();
    let port_tx: u64 = s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["counters"]["tx_packets"].as_u64().unwrap())
        .sum();
    assert!(
        uplink_rx < 1000 && port_tx < 1000,
        "frames multiplied: uplinks rx {uplink_rx}, ports tx {port_tx}"
    );

    // Failover under TCP: vm1's uplink goes down while iperf3 runs; no reset, gap measured by a
    // 10 ms ping.
    let vm1_uplink_name = s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["interface"] == "tmt-v1")
        .unwrap()["uplink"]
        .as_str()
        .unwrap()
        .to_string();
    let vm1_uplink = s["uplinks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == vm1_uplink_name.as_str())
        .unwrap()["interface"]
        .as_str()
        .unwrap()
        .to_string();
    let mut server = iperf_server();
    let client = iperf_client("tmt-vm1", &["-t", "4", "-b", "50M"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pinger = std::thread::spawn(|| ping("tmt-vm1", "10.77.0.100", "300", "0.01"));
    std::thread::sleep(Duration::from_millis(1000));
    must(&["ip", "link", "set", &vm1_uplink, "down"]);
    let pings = pinger.join().unwrap();
    let iperf = client.wait_with_output().unwrap();
    let _ = server.wait();
    must(&["ip", "link", "set", &vm1_uplink, "up"]);
    let seqs: Vec<u32> = pings
        .split("icmp_seq=")
        .skip(1)
        .filter_map(|s| s.split_whitespace().next()?.parse().ok())
        .collect();
    let gap_ms = seqs.windows(2).map(|w| (w[1] - w[0] - 1) * 10).max().unwrap_or(0);
    eprintln!(
        "failover: {} of 300 pings answered, longest gap {gap_ms} ms",
        seqs.len()
    );
    assert!(gap_ms < 1000, "traffic resumed only after {gap_ms} ms");
    assert!(
        iperf.status.success(),
        "iperf3 failed (reset?): {}",
        String::from_utf8_lossy(&iperf.stdout)
    );
    let s = status(&status_path);
    let moves = s["lbt"]["moves"].as_array().unwrap();
    assert!(
        moves
            .iter()
            .any(|m| m["reason"] == "link down" && m["from"] == vm1_uplink_name.as_str()),
        "{moves:?}"
    );

    // SIGTERM: a clean exit, and the interfaces as they were (not left promiscuous).
    stop_cleanly(&mut daemon);
    for dev in ["tmt-v1", "tmt-v2", "tmt-u1", "tmt-u2"] {
        let flags = std::fs::read_to_string(format!("/sys/class/net/{dev}/flags")).unwrap();
        let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap();
        assert_eq!(flags & 0x100, 0, "{dev} left promiscuous");
    }
}
