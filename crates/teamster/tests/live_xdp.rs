//! The live switch with `backend = "af_xdp"` (and `auto`) in network namespaces: VMs reach the
//! remote host and each other, TCP runs (its checksums, left to offload by the VMs' stacks,
//! completed on the way), a killed daemon leaves nothing that stops the next one, a clean exit
//! detaches every program, and a switch that cannot put one interface on AF_XDP does not start
//! with the others attached. Topology and helpers: [`netns`].

mod netns;
use netns::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEVICES: [&str; 4] = ["tmt-v1", "tmt-v2", "tmt-u1", "tmt-u2"];

/// The end-to-end switch with every uplink on `uplinks` and every port on `ports`.
fn switch(uplinks: &str, ports: &str) -> String {
    switch_toml(
        "",
        "1G",
        "policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]",
        "",
        &format!("backend = \"{ports}\""),
        &format!("backend = \"{ports}\""),
    )
    .replace(
        "capacity = \"1G\"\n",
        &format!("capacity = \"1G\"\nbackend = \"{uplinks}\"\n"),
    )
}

/// Whether `dev` has an XDP program attached, as `ip -d link` shows it.
fn has_xdp(dev: &str) -> bool {
    let out = Command::new("ip")
        .args(["-d", "link", "show", "dev", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// Runs the daemon on `config` expecting it to refuse to start; returns its log.
fn refused(dir: &std::path::Path, config: &str) -> String {
    let path = dir.join("bad.toml");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["run", path.to_str().unwrap(), "--api-socket"])
        .arg(dir.join("bad.sock"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut daemon = Daemon(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(st) = daemon.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "started, though it could not attach");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut log = String::new();
    std::io::Read::read_to_string(&mut daemon.0.stderr.take().unwrap(), &mut log).unwrap();
    assert!(!code.success(), "exit status {code:?}; log:\n{log}");
    log
}

#[test]
fn af_xdp_switch_forwards_survives_a_kill_and_detaches_on_exit() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let config = switch("af_xdp", "af_xdp");
    let (mut daemon, status_path) = start(dir.path(), &config);
    let s = status(&status_path);
    for kind in ["ports", "uplinks"] {
        for x in s[kind].as_array().unwrap() {
            let backend = x["backend"].as_str().unwrap_or("none");
            assert_eq!(backend, "af_xdp, native XDP, copy mode", "{}", x["name"]);
        }
    }
    assert!(DEVICES.iter().all(|d| has_xdp(d)), "a program on every interface");

    assert_eq!(received(&ping("tmt-vm1", "10.77.0.100", "3", "0.2")), 3);
    assert_eq!(received(&ping("tmt-vm2", "10.77.0.100", "3", "0.2")), 3);
    assert_eq!(received(&ping("tmt-vm1", "10.77.0.2", "3", "0.2")), 3);

    // Killed outright: the kernel detaches its programs with its descriptors, and a new daemon
    // starts on the same interfaces at once.
    signal(&daemon.0, libc::SIGKILL);
    let _ = daemon.0.wait();
    assert!(!DEVICES.iter().any(|d| has_xdp(d)), "a killed daemon left a program");
    let (mut daemon, status_path) = start(dir.path(), &config);

    // TCP with the VMs' offloads on (as veth starts): checksums left to offload are completed.
    let mut server = iperf_server();
    let iperf = iperf_client("tmt-vm1", &["-t", "2", "-J"]).output().unwrap();
    let _ = server.wait();
    let out = String::from_utf8_lossy(&iperf.stdout);
    assert!(iperf.status.success(), "iperf3 over AF_XDP failed: {out}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let bps = report["end"]["sum_received"]["bits_per_second"].as_f64().unwrap();
    eprintln!("TCP over AF_XDP: {:.0} Mbit/s", bps / 1e6);
    assert!(bps > 10e6, "TCP crawled at {bps} bit/s");
    std::thread::sleep(Duration::from_millis(1200));
    let s = status(&status_path);
    let line = counters_line(&s);
    let up_tx: u64 = s["uplinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["counters"]["tx_packets"].as_u64().unwrap())
        .sum();
    assert!(up_tx > 1000, "{line}");

    // Failover: vm1's uplink goes down under a 10 ms ping; traffic resumes on the other, and
    // the loop does not spin while the down uplink's AF_XDP socket holds frames it cannot send.
    let vm1_uplink = s["ports"][0]["uplink"].as_str().unwrap().to_string();
    let dev = if vm1_uplink == "uplink1" { "tmt-u1" } else { "tmt-u2" };
    let pinger = std::thread::spawn(|| ping("tmt-vm1", "10.77.0.100", "200", "0.01"));
    std::thread::sleep(Duration::from_millis(500));
    must(&["ip", "link", "set", dev, "down"]);
    let pings = pinger.join().unwrap();
    let seqs: Vec<u32> = pings
        .split("icmp_seq=")
        .skip(1)
        .filter_map(|s| s.split_whitespace().next()?.parse().ok())
        .collect();
    let gap_ms = seqs.windows(2).map(|w| (w[1] - w[0] - 1) * 10).max().unwrap_or(0);
    eprintln!(
        "failover over AF_XDP: {} of 200 answered, longest gap {gap_ms} ms",
        seqs.len()
    );
    assert!(gap_ms < 1000 && seqs.len() > 100, "failover over AF_XDP: {pings}");
    let cpu = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let f: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
    };
    let before = cpu(daemon.0.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu(daemon.0.id()) - before;
    assert!(used < 0.6, "the daemon used {used:.2} CPU-s in 2 s with an uplink down");
    must(&["ip", "link", "set", dev, "up"]);

    stop_cleanly(&mut daemon);
    for dev in DEVICES {
        assert!(!has_xdp(dev), "{dev}: program left after a clean exit");
    }
}

#[test]
fn a_switch_that_cannot_use_af_xdp_does_not_start_half_attached() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    // The second uplink cannot carry AF_XDP (a jumbo MTU): the first, opened before it, must be
    // closed again and the switch must not start.
    must(&["ip", "link", "set", "tmt-u2", "mtu", "9000"]);
    let log = refused(dir.path(), &switch("af_xdp", "af_packet"));
    assert!(
        log.contains("uplink uplink2: tmt-u2: MTU 9000 is more than one AF_XDP frame holds"),
        "{log}"
    );
    assert!(!DEVICES.iter().any(|d| has_xdp(d)), "left half-attached");

    // `auto` on the same interface falls back to AF_PACKET, and says so.
    let (mut daemon, status_path) = start(dir.path(), &switch("auto", "auto"));
    let s = status(&status_path);
    let u2 = &s["uplinks"].as_array().unwrap()[1];
    assert_eq!(u2["backend"], "af_packet");
    assert_eq!(s["uplinks"][0]["backend"], "af_xdp, native XDP, copy mode");
    assert_eq!(s["ports"][0]["backend"], "af_xdp, native XDP, copy mode");
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    assert!(
        log.contains("uplink uplink2: af_xdp unavailable (tmt-u2: MTU 9000"),
        "{log}"
    );
    assert!(
        log.contains("uplink uplink1: tmt-u1 on af_xdp, native XDP, copy mode"),
        "{log}"
    );
    assert_eq!(received(&ping("tmt-vm1", "10.77.0.100", "3", "0.2")), 3);
    stop_cleanly(&mut daemon);
    assert!(!DEVICES.iter().any(|d| has_xdp(d)));
}
