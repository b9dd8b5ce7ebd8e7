//! The live switch in network namespaces: reachability, no broadcast loop, failover under TCP,
//! clean shutdown. Needs root, iproute2, ping and iperf3 (CI installs them and runs as root);
//! skipped with a message otherwise. Everything it creates is named `tmt…` and removed by name
//! when the test ends, whatever happens; every command is bounded in time.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAMESPACES: [&str; 4] = ["tmt-vm1", "tmt-vm2", "tmt-phys", "tmt-remote"];

/// The tests share one topology's names: one at a time.
static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn must(args: &[&str]) {
    assert!(sh(args), "command failed: {}", args.join(" "));
}

/// The topology: two VM namespaces on switch ports tmt-v1/2, two uplinks tmt-u1/2 into a bridge
/// in tmt-phys (the physical switch), and a remote host 10.77.0.100 behind it.
struct Topology;

impl Topology {
    /// The topology with every uplink capped at `mbit` in both directions by tc htb: on the
    /// switch's side for traffic leaving it, on the physical switch's side for traffic to it.
    fn shaped(mbit: u32) -> Topology {
        let t = Topology::up();
        let rate = format!("{mbit}mbit");
        for (ns, dev) in [
            (None, "tmt-u1"),
            (None, "tmt-u2"),
            (Some("tmt-phys"), "p1"),
            (Some("tmt-phys"), "p2"),
        ] {
            let mut cmd: Vec<&str> = match ns {
                Some(n) => vec!["ip", "netns", "exec", n, "tc"],
                None => vec!["tc"],
            };
            let base = cmd.len();
            cmd.extend([
                "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10",
            ]);
            must(&cmd);
            cmd.truncate(base);
            cmd.extend([
                "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", &rate, "ceil", &rate,
            ]);
            must(&cmd);
        }
        t
    }

    fn up() -> Topology {
        Topology::clean();
        let t = Topology;
        for n in NAMESPACES {
            must(&["ip", "netns", "add", n]);
            must(&["ip", "-n", n, "link", "set", "lo", "up"]);
        }
        for i in ["1", "2"] {
            let (port, ns) = (format!("tmt-v{i}"), format!("tmt-vm{i}"));
            must(&[
                "ip", "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            must(&["ip", "link", "set", &port, "up"]);
            must(&[
                "ip",
                "-n",
                &ns,
                "link",
                "set",
                "eth0",
                "address",
                &format!("02:00:00:00:00:0{i}"),
            ]);
            must(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("10.77.0.{i}/24"),
                "dev",
                "eth0",
            ]);
            must(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
        }
        must(&[
            "ip",
            "-n",
            "tmt-phys",
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "stp_state",
            "0",
        ]);
        must(&["ip", "-n", "tmt-phys", "link", "set", "br0", "up"]);
        for i in ["1", "2"] {
            let (up, peer) = (format!("tmt-u{i}"), format!("p{i}"));
            must(&[
                "ip", "link", "add", &up, "type", "veth", "peer", "name", &peer, "netns", "tmt-phys",
            ]);
            must(&["ip", "link", "set", &up, "up"]);
            must(&["ip", "-n", "tmt-phys", "link", "set", &peer, "master", "br0"]);
            must(&["ip", "-n", "tmt-phys", "link", "set", &peer, "up"]);
        }
        must(&[
            "ip",
            "-n",
            "tmt-phys",
            "link",
            "add",
            "r0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            "tmt-remote",
        ]);
        must(&["ip", "-n", "tmt-phys", "link", "set", "r0", "master", "br0"]);
        must(&["ip", "-n", "tmt-phys", "link", "set", "r0", "up"]);
        must(&["ip", "-n", "tmt-remote", "addr", "add", "10.77.0.100/24", "dev", "eth0"]);
        must(&["ip", "-n", "tmt-remote", "link", "set", "eth0", "up"]);
        t
    }

    fn clean() {
        for l in ["tmt-v1", "tmt-v2", "tmt-u1", "tmt-u2"] {
            sh(&["ip", "link", "del", l]);
        }
        for n in NAMESPACES {
            sh(&["ip", "netns", "del", n]);
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        Topology::clean();
    }
}

/// The daemon, stopped with SIGTERM when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc_kill(self.0.id() as i32, 15) };
        let _ = self.0.wait();
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

const SWITCH: &str = r#"
[[uplinks]]
name = "uplink1"
interface = "tmt-u1"
capacity = "1G"

[[uplinks]]
name = "uplink2"
interface = "tmt-u2"
capacity = "1G"

[[port_groups]]
name = "vms"
policy = "port-id"
active = ["uplink1", "uplink2"]

[[ports]]
name = "vm1"
interface = "tmt-v1"
mac = "02:00:00:00:00:01"
group = "vms"

[[ports]]
name = "vm2"
interface = "tmt-v2"
mac = "02:00:00:00:00:02"
group = "vms"
"#;

fn ready() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false);
    let tools = ["ip", "ping", "iperf3", "timeout"]
        .iter()
        .all(|t| sh(&["sh", "-c", &format!("command -v {t}")]));
    if !(root && tools) {
        eprintln!("skipped: needs root with ip, ping, iperf3 and timeout");
    }
    root && tools
}

fn status(path: &Path) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(v) = std::fs::read_to_string(path)
            .map_err(|_| ())
            .and_then(|t| serde_json::from_str(&t).map_err(|_| ()))
        {
            return v;
        }
        assert!(Instant::now() < deadline, "no status file");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ping(ns: &str, to: &str, count: &str, interval: &str) -> String {
    let out = Command::new("timeout")
        .args([
            "20", "ip", "netns", "exec", ns, "ping", "-n", "-c", count, "-i", interval, "-W", "1", to,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn received(ping_output: &str) -> usize {
    ping_output.matches("icmp_seq=").count()
}

/// Starts the daemon on `config` text; returns it and its status file path.
fn start(dir: &Path, config: &str) -> (Daemon, std::path::PathBuf) {
    let path = dir.join("switch.toml");
    std::fs::write(&path, config).unwrap();
    let status_path = dir.join("status.json");
    let child = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args([
            "run",
            path.to_str().unwrap(),
            "--status-file",
            status_path.to_str().unwrap(),
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let daemon = Daemon(child);
    status(&status_path);
    (daemon, status_path)
}

/// Runs a UDP iperf3 stream from `vm` to the remote at `mbit` for `secs` (server on `port`)
/// and returns what the receiver got, in Mbit/s.
fn udp_stream(vm: &'static str, port: u16, mbit: u32, secs: u32) -> std::thread::JoinHandle<f64> {
    std::thread::spawn(move || {
        let p = port.to_string();
        let mut server = Command::new("timeout")
            .args([
                &(secs + 8).to_string(),
                "ip",
                "netns",
                "exec",
                "tmt-remote",
                "iperf3",
                "-s",
                "-1",
                "-p",
                &p,
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        let args = [
            &(secs + 6).to_string(),
            "ip",
            "netns",
            "exec",
            vm,
            "iperf3",
            "-c",
            "10.77.0.100",
            "-p",
            &p,
            "-u",
            "-b",
            &format!("{mbit}M"),
            "-l",
            "1400",
            "-t",
            &secs.to_string(),
            "-J",
        ];
        let out = Command::new("timeout").args(args).output().unwrap();
        let _ = server.wait();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let end = &v["end"];
        // The receiver's figure: sum_received where this iperf3 has it, else sent less loss.
        let received = end["sum_received"]["bits_per_second"].as_f64().unwrap_or_else(|| {
            let sum = &end["sum"];
            sum["bits_per_second"].as_f64().unwrap_or(0.0)
                * (1.0 - sum["lost_percent"].as_f64().unwrap_or(100.0) / 100.0)
        });
        received / 1e6
    })
}

#[test]
fn live_switch_end_to_end() {
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, status_path) = start(dir.path(), SWITCH);

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
    let vm1_uplink = s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["interface"] == "tmt-v1")
        .unwrap()["uplink"]
        .as_str()
        .unwrap()
        .to_string();
    let mut server = Command::new("timeout")
        .args(["15", "ip", "netns", "exec", "tmt-remote", "iperf3", "-s", "-1"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = Command::new("timeout")
        .args([
            "12",
            "ip",
            "netns",
            "exec",
            "tmt-vm1",
            "iperf3",
            "-c",
            "10.77.0.100",
            "-t",
            "4",
            "-b",
            "50M",
        ])
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
    let moves = s["moves"].as_array().unwrap();
    assert!(
        moves
            .iter()
            .any(|m| m["reason"] == "link down" && m["from"] == vm1_uplink.as_str()),
        "{moves:?}"
    );

    // SIGTERM: a clean exit, and the interfaces as they were (not left promiscuous).
    // SAFETY: signalling our own child.
    unsafe { libc_kill(daemon.0.id() as i32, 15) };
    let deadline = Instant::now() + Duration::from_secs(3);
    let code = loop {
        if let Some(st) = daemon.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "did not stop within 3 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(code.success(), "exit status {code:?}");
    for dev in ["tmt-v1", "tmt-v2", "tmt-u1", "tmt-u2"] {
        let flags = std::fs::read_to_string(format!("/sys/class/net/{dev}/flags")).unwrap();
        let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap();
        assert_eq!(flags & 0x100, 0, "{dev} left promiscuous");
    }
}

/// Both VMs pinned to uplink1 (100 Mbit/s), sending UDP flat out: vm1's reservation holds and
/// vm2's limit caps it.
const PINNED: &str = r#"
[[uplinks]]
name = "uplink1"
interface = "tmt-u1"
capacity = "100M"

[[uplinks]]
name = "uplink2"
interface = "tmt-u2"
capacity = "100M"

[[port_groups]]
name = "vms"
policy = "port-id"
active = ["uplink1"]
standby = ["uplink2"]

[[traffic_classes]]
class = "vm"
reservation = "75M"

[[ports]]
name = "vm1"
interface = "tmt-v1"
mac = "02:00:00:00:00:01"
group = "vms"
reservation = "60M"

[[ports]]
name = "vm2"
interface = "tmt-v2"
mac = "02:00:00:00:00:02"
group = "vms"
limit = "20M"
"#;

#[test]
fn reservation_holds_and_limit_caps_on_a_saturated_uplink() {
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !ready() {
        return;
    }
    let _topology = Topology::shaped(100);
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, _status) = start(dir.path(), PINNED);
    ping("tmt-vm1", "10.77.0.100", "2", "0.2");
    ping("tmt-vm2", "10.77.0.100", "2", "0.2");
    let a = udp_stream("tmt-vm1", 5201, 100, 6);
    let b = udp_stream("tmt-vm2", 5202, 100, 6);
    let (vm1, vm2) = (a.join().unwrap(), b.join().unwrap());
    eprintln!("saturated 100 Mbit/s uplink: vm1 (R 60M) {vm1:.1} Mbit/s, vm2 (L 20M) {vm2:.1} Mbit/s");
    assert!(vm1 >= 0.9 * 60.0, "reservation: vm1 got {vm1:.1} Mbit/s of its 60");
    assert!(vm2 <= 1.05 * 20.0, "limit: vm2 got {vm2:.1} Mbit/s over its 20");
    assert!(vm2 > 10.0, "vm2 still gets its share: {vm2:.1}");
}

/// Both VMs hashed to uplink1 under LBT with a short window: when uplink1 passes 75%, one moves.
const LBT: &str = r#"
[lbt]
window_s = 3
period_s = 3

[[uplinks]]
name = "uplink1"
interface = "tmt-u1"
capacity = "100M"

[[uplinks]]
name = "uplink2"
interface = "tmt-u2"
capacity = "100M"

[[port_groups]]
name = "vms"
policy = "load-based"
active = ["uplink1", "uplink2"]

[[ports]]
name = "vm1"
id = 2
interface = "tmt-v1"
mac = "02:00:00:00:00:01"
group = "vms"

[[ports]]
name = "vm2"
id = 4
interface = "tmt-v2"
mac = "02:00:00:00:00:02"
group = "vms"
"#;

#[test]
fn lbt_moves_a_port_off_a_saturated_uplink() {
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !ready() {
        return;
    }
    let _topology = Topology::shaped(100);
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, status_path) = start(dir.path(), LBT);
    ping("tmt-vm1", "10.77.0.100", "2", "0.2");
    ping("tmt-vm2", "10.77.0.100", "2", "0.2");
    // 70 Mbit/s each: 140 offered on one 100 Mbit/s uplink until LBT moves one of them.
    let a = udp_stream("tmt-vm1", 5201, 70, 12);
    let b = udp_stream("tmt-vm2", 5202, 70, 12);
    let (vm1, vm2) = (a.join().unwrap(), b.join().unwrap());
    let s = status(&status_path);
    let moves: Vec<&serde_json::Value> = s["moves"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["reason"].as_str().unwrap().starts_with("load-based"))
        .collect();
    eprintln!(
        "LBT: moves {moves:?}; vm1 {vm1:.1} + vm2 {vm2:.1} = {:.1} Mbit/s over 12 s",
        vm1 + vm2
    );
    assert_eq!(moves.len(), 1, "one LBT move");
    // Before the move the pair shares 100; after it each gets its 70: over 12 s the total
    // must clearly exceed one uplink's capacity.
    assert!(
        vm1 + vm2 > 110.0,
        "aggregate {:.1} Mbit/s did not rise above one uplink",
        vm1 + vm2
    );
}
