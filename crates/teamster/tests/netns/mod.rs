//! The namespace topology and helpers the live tests share. The tests need root, iproute2, ping
//! and iperf3 (CI installs them and runs as root) and are skipped with a message otherwise. Everything it creates is named `tmt…` and removed by name
//! when the test ends, whatever happens; every command is bounded in time.

#![allow(dead_code)] // each test binary uses its own part of these helpers

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod beside;
#[path = "../../../teamster-dp/tests/live/mod.rs"]
mod live;
pub mod raw;
pub use live::{running_as_root, skip_unless};

pub const NAMESPACES: [&str; 4] = ["tmt-vm1", "tmt-vm2", "tmt-phys", "tmt-remote"];
/// The third VM's namespace, made by [`Topology::shaped_vms`] only, removed with the others.
pub const THIRD_VM: &str = "tmt-vm3";

/// The tests share one topology's names: one at a time, across test binaries and across
/// processes (two checkouts testing at once on one machine), by an exclusive `flock` on a file
/// in /tmp held until the guard is dropped. The lock is released by the kernel if the holder
/// dies, so a crashed test never wedges the next one.
pub struct TopologyLock {
    _file: std::fs::File,
    _inner: std::sync::MutexGuard<'static, ()>,
}

static IN_PROCESS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits for the topology to be free and holds it.
pub fn lock() -> TopologyLock {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let inner = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    // Never through a symlink another user may have planted in /tmp.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open("/tmp/teamster-live-tests.lock")
        .expect("open /tmp/teamster-live-tests.lock");
    // SAFETY: flock on a descriptor this function owns; blocks until the lock is free.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock /tmp/teamster-live-tests.lock");
    TopologyLock {
        _file: file,
        _inner: inner,
    }
}

pub fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Creates VM `i`'s link: tmt-v`i` on the switch, eth0 in tmt-vm`i` (which must exist) with
/// MAC 02:00:00:00:00:0`i` and address 10.77.0.`i`/24. Tests that delete and recreate a VM's
/// interface call it again.
pub fn vm_link(i: u8) {
    let (port, ns) = (format!("tmt-v{i}"), format!("tmt-vm{i}"));
    must(&[
        "ip", "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
    ]);
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
    must(&["ip", "link", "set", &port, "up"]);
}

/// Caps what leaves `dev` (in namespace `ns`, or the host's) at `rate` with one htb class.
pub fn htb(ns: Option<&str>, dev: &str, rate: &str) {
    let mut cmd: Vec<&str> = ns.map_or(vec!["tc"], |n| vec!["ip", "netns", "exec", n, "tc"]);
    let base = cmd.len();
    cmd.extend([
        "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10",
    ]);
    must(&cmd);
    cmd.truncate(base);
    cmd.extend([
        "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate,
    ]);
    must(&cmd);
}

pub fn must(args: &[&str]) {
    assert!(sh(args), "command failed: {}", args.join(" "));
}

/// The topology: two VM namespaces on switch ports tmt-v1/2, two uplinks tmt-u1/2 into a bridge
/// in tmt-phys (the physical switch), and a remote host 10.77.0.100 behind it.
pub struct Topology;

impl Topology {
    /// The topology with every uplink capped by tc htb in both directions: at `mbit` on the
    /// physical switch's side for traffic to the switch, and at 10% above it on the switch's
    /// side for traffic leaving it. That side stands for the wire behind a switch that paces
    /// at `mbit` itself (its configured capacity); htb dequeues from a kernel timer, which a
    /// busy VM fires late, and at exactly the pacer's rate it, not the switch under test, was
    /// the bottleneck whenever the machine stalled.
    pub fn shaped(mbit: u32) -> Topology {
        Topology::shaped_vms(mbit, 2)
    }

    /// [`Topology::shaped`] with `vms` VMs (2 or 3): the third is tmt-vm3 on tmt-v3, MAC
    /// 02:00:00:00:00:03, 10.77.0.3.
    pub fn shaped_vms(mbit: u32, vms: u8) -> Topology {
        Topology::shaped_vms_on(mbit, vms, true)
    }

    /// [`Topology::shaped_vms`], with the switch's side shaped only if `switch_side` (the
    /// kernel path puts its own HTB there, and refuses an uplink that has someone else's).
    pub fn shaped_vms_on(mbit: u32, vms: u8, switch_side: bool) -> Topology {
        let t = Topology::up_vms(vms);
        let (wire, to_switch) = (format!("{}kbit", mbit * 1100), format!("{mbit}mbit"));
        let switch = [(None, "tmt-u1", &wire), (None, "tmt-u2", &wire)];
        let phys = [
            (Some("tmt-phys"), "p1", &to_switch),
            (Some("tmt-phys"), "p2", &to_switch),
        ];
        for (ns, dev, rate) in phys.into_iter().chain(switch.into_iter().filter(|_| switch_side)) {
            htb(ns, dev, rate);
        }
        t
    }

    pub fn up() -> Topology {
        Topology::up_vms(2)
    }

    /// The topology with `vms` VMs (2 or 3).
    pub fn up_vms(vms: u8) -> Topology {
        assert!((2..=3).contains(&vms), "2 or 3 VMs");
        Topology::clean();
        let t = Topology;
        let third = (vms == 3).then_some(THIRD_VM);
        for n in NAMESPACES.into_iter().chain(third) {
            must(&["ip", "netns", "add", n]);
            must(&["ip", "-n", n, "link", "set", "lo", "up"]);
        }
        for i in 1..=vms {
            vm_link(i);
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

    pub fn clean() {
        for l in ["tmt-v1", "tmt-v2", "tmt-v3", "tmt-t1", "tmt-u1", "tmt-u2"] {
            sh(&["ip", "link", "del", l]);
        }
        for n in NAMESPACES.into_iter().chain([THIRD_VM]) {
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
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        signal(&self.0, libc::SIGTERM);
        let _ = self.0.wait();
    }
}

/// Sends `signal` to a child process.
pub fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on our own child's pid; no memory is shared.
    unsafe { libc::kill(child.id() as i32, signal) };
}

pub fn ready() -> bool {
    let root = running_as_root();
    let tools = ["ip", "ping", "iperf3", "timeout"]
        .iter()
        .all(|t| sh(&["sh", "-c", &format!("command -v {t}")]));
    skip_unless(root && tools, "root with ip, ping, iperf3 and timeout")
}

/// One line per port and uplink from the daemon's status: frames in and out and every non-zero
/// drop reason, to tell on a failure whether the senders, the switch or the machine fell short.
pub fn counters_line(status: &serde_json::Value) -> String {
    let mut out = Vec::new();
    for kind in ["ports", "uplinks"] {
        for x in status[kind].as_array().into_iter().flatten() {
            let c = &x["counters"];
            let drops: Vec<String> = c["drops"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            out.push(format!(
                "{} rx {} tx {} drops [{}]",
                x["name"].as_str().unwrap_or("?"),
                c["rx_packets"],
                c["tx_packets"],
                drops.join(", ")
            ));
        }
    }
    out.join("; ")
}

pub fn status(path: &Path) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(v) = std::fs::read_to_string(path)
            .map_err(|_| ())
            .and_then(|t| serde_json::from_str(&t).map_err(|_| ()))
        {
            return v;
        }
        if Instant::now() >= deadline {
            let log = path.parent().map(|d| d.join("daemon.log"));
            let log = log.and_then(|l| std::fs::read_to_string(l).ok()).unwrap_or_default();
            panic!("no status file; the daemon said:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn ping(ns: &str, to: &str, count: &str, interval: &str) -> String {
    let out = Command::new("timeout")
        .args([
            "20", "ip", "netns", "exec", ns, "ping", "-n", "-c", count, "-i", interval, "-W", "1", to,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

pub fn received(ping_output: &str) -> usize {
    ping_output.matches("icmp_seq=").count()
}

/// `teamster ctl` against the socket in `dir`, bounded in time; (exit code, stdout, stderr).
pub fn ctl(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("timeout")
        .arg("20")
        .arg(env!("CARGO_BIN_EXE_teamster"))
        .args(["ctl", "--socket", dir.join("api.sock").to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Each uplink's name and (tx, rx) bytes as `teamster ctl uplinks` reports them, in order.
pub fn uplink_bytes(dir: &Path) -> Vec<(String, (u64, u64))> {
    let (code, out, err) = ctl(dir, &["--json", "uplinks"]);
    assert_eq!(code, 0, "{err}");
    let all: serde_json::Value = serde_json::from_str(&out).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .map(|u| {
            let c = &u["counters"];
            (
                u["name"].as_str().unwrap().to_string(),
                (c["tx_bytes"].as_u64().unwrap(), c["rx_bytes"].as_u64().unwrap()),
            )
        })
        .collect()
}

/// Starts the daemon on `config` text; returns it and its status file path. Its API listens on
/// `api.sock` in `dir`.
pub fn start(dir: &Path, config: &str) -> (Daemon, std::path::PathBuf) {
    start_with(dir, config, &[])
}

/// Starts the daemon on `config` text with its API also on 127.0.0.1:`port` (0: a free port,
/// see [`api_port`]), guarded by `token`.
pub fn start_with_api(dir: &Path, config: &str, port: u16, token: &str) -> (Daemon, std::path::PathBuf) {
    start_with_api_in(None, dir, config, port, token)
}

/// As [`start_with_api`], in network namespace `ns` if given.
pub fn start_with_api_in(
    ns: Option<&str>,
    dir: &Path,
    config: &str,
    port: u16,
    token: &str,
) -> (Daemon, std::path::PathBuf) {
    use std::os::unix::fs::OpenOptionsExt;
    let token_file = dir.join("token");
    // Private to its owner, as the daemon demands of a token file.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&token_file)
        .unwrap();
    std::io::Write::write_all(&mut f, token.as_bytes()).unwrap();
    let listen = format!("127.0.0.1:{port}");
    start_in(
        ns,
        dir,
        config,
        &[
            "--api-listen",
            &listen,
            "--api-token-file",
            token_file.to_str().unwrap(),
        ],
        &[],
    )
}

/// The TCP port the daemon started last in `dir` listens on, from its log.
pub fn api_port(dir: &Path) -> u16 {
    let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
    log.lines()
        .rev()
        .find_map(|l| l.split_once("API and dashboard on http://127.0.0.1:"))
        .and_then(|(_, rest)| rest.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("no TCP API address in the daemon's log:\n{log}"))
}

/// Starts the daemon on `config` text with extra arguments.
pub fn start_with(dir: &Path, config: &str, extra: &[&str]) -> (Daemon, std::path::PathBuf) {
    start_with_env(dir, config, extra, &[])
}

/// Starts the daemon on `config` text with extra arguments and environment variables.
pub fn start_with_env(dir: &Path, config: &str, extra: &[&str], env: &[(&str, &str)]) -> (Daemon, std::path::PathBuf) {
    start_in(None, dir, config, extra, env)
}

/// Starts the daemon on `config` text with extra arguments and environment variables, in
/// network namespace `ns` if given (its API socket is a file: `ctl` reaches it from anywhere).
pub fn start_in(
    ns: Option<&str>,
    dir: &Path,
    config: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Daemon, std::path::PathBuf) {
    let path = dir.join("switch.toml");
    // A test's file names the data plane it tests; one that names none was written for the
    // user-space path and runs there, unless TEAMSTER_TEST_DATAPATH=kernel (or userspace) says
    // otherwise. (The default, the kernel path where it can run, has tests of its own.)
    let config = if config.contains("datapath =") {
        config.to_string()
    } else {
        let plane = std::env::var("TEAMSTER_TEST_DATAPATH").unwrap_or_else(|_| "userspace".into());
        format!("datapath = \"{plane}\"\n{config}")
    };
    std::fs::write(&path, &config).unwrap();
    let status_path = dir.join("status.json");
    let _ = std::fs::remove_file(&status_path);
    let socket = dir.join("api.sock");
    let mut command = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_teamster")]);
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_teamster")),
    };
    let child = command
        .args([
            "run",
            path.to_str().unwrap(),
            "--status-file",
            status_path.to_str().unwrap(),
            "--api-socket",
            socket.to_str().unwrap(),
        ])
        .args(extra)
        .envs(env.iter().copied())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("daemon.log"))
                .unwrap(),
        )
        .spawn()
        .unwrap();
    let daemon = Daemon(child);
    status(&status_path);
    (daemon, status_path)
}

/// Waits (up to 5 s) until something listens on TCP `port` in namespace `ns`: an iperf3 server
/// is ready for its client, however slowly it started on a busy machine.
pub fn await_listener(ns: &str, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let filter = format!("sport = :{port}");
    loop {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "ss", "-Hltn", &filter])
            .output()
            .expect("run ss");
        if !out.stdout.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nothing listens on {ns} port {port} after 5 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What an iperf3 server received, second by second, from its own interval reports: these
/// are taken at the receiver, so a slow end-of-test exchange on iperf3's control connection
/// (which shares the sending port's queue, and so its drops) neither stretches nor empties them.
#[derive(Debug, Clone)]
pub struct Received {
    /// Mbit/s received in each interval (one second unless asked otherwise), from the
    /// server's start.
    pub per_second: Vec<f64>,
    /// Bytes received in all.
    pub bytes: f64,
    /// The sender's duration, s.
    pub secs: u32,
}

impl Received {
    /// Everything received, over the sender's duration, in Mbit/s.
    pub fn mean(&self) -> f64 {
        self.bytes * 8.0 / 1e6 / f64::from(self.secs)
    }

    /// The most this stream and `other` received together in one second, in Mbit/s.
    pub fn best_second_with(&self, other: &Received) -> f64 {
        self.per_second
            .iter()
            .zip(&other.per_second)
            .map(|(x, y)| x + y)
            .fold(0.0, f64::max)
    }

    /// The median rate of the intervals while the sender ran, leaving out the first (the
    /// stream and the queues starting up), in Mbit/s: the steady rate, robust to one stall of
    /// a busy machine.
    pub fn steady(&self) -> f64 {
        let end = (self.secs as usize).min(self.per_second.len());
        let mut r: Vec<f64> = self.per_second.get(1..end).unwrap_or_default().to_vec();
        if r.is_empty() {
            return 0.0;
        }
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    }
}

/// Runs a UDP iperf3 stream from `vm` to the remote at `mbit` for `secs` (server on `port`, a
/// port in the remote's own namespace) and returns what the receiver got.
pub fn udp_stream(vm: &'static str, port: u16, mbit: u32, secs: u32) -> std::thread::JoinHandle<Received> {
    udp_stream_to(("tmt-remote", "10.77.0.100"), vm, port, mbit, secs, 1.0)
}

/// As [`udp_stream`], to the remote host `(namespace, address)`, with the receiver reporting
/// every `interval_s` (`per_second` then holds one rate per interval).
pub fn udp_stream_to(
    remote: (&'static str, &'static str),
    vm: &'static str,
    port: u16,
    mbit: u32,
    secs: u32,
    interval_s: f64,
) -> std::thread::JoinHandle<Received> {
    stream_to(remote, vm, port, Some(mbit), secs, interval_s)
}

/// One TCP iperf3 stream (the kernel's default congestion control, offloads as the VM's
/// interface has them) from `vm` to the remote host for `secs`, measured at the receiver every
/// `interval_s`.
pub fn tcp_stream(vm: &'static str, port: u16, secs: u32, interval_s: f64) -> std::thread::JoinHandle<Received> {
    stream_to(("tmt-remote", "10.77.0.100"), vm, port, None, secs, interval_s)
}

/// An iperf3 stream from `vm` to `remote` on server port `port`: UDP at `udp_mbit` (1400-byte
/// datagrams) if given, else one TCP connection; what the receiver got, every `interval_s`.
fn stream_to(
    remote: (&'static str, &'static str),
    vm: &'static str,
    port: u16,
    udp_mbit: Option<u32>,
    secs: u32,
    interval_s: f64,
) -> std::thread::JoinHandle<Received> {
    let (remote_ns, remote_ip) = remote;
    std::thread::spawn(move || {
        let p = port.to_string();
        let server = Command::new("timeout")
            .args([
                &(secs + 8).to_string(),
                "ip",
                "netns",
                "exec",
                remote_ns,
                "iperf3",
                "-s",
                "-1",
                "-J",
                "-i",
                &interval_s.to_string(),
                "-p",
                &p,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        await_listener(remote_ns, port);
        let limit = (secs + 6).to_string();
        let t = secs.to_string();
        let mut args = vec![
            &limit[..],
            "ip",
            "netns",
            "exec",
            vm,
            "iperf3",
            "-c",
            remote_ip,
            "-p",
            &p,
            "-t",
            &t,
        ];
        let rate = udp_mbit.map(|m| format!("{m}M"));
        if let Some(rate) = &rate {
            args.extend(["-u", "-b", rate, "-l", "1400"]);
        }
        let _ = Command::new("timeout").args(args).output().unwrap();
        // The server prints its intervals even when ended by `timeout` (SIGTERM).
        let out = server.wait_with_output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let sums: Vec<(f64, f64)> = v["intervals"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|i| {
                        (
                            i["sum"]["bytes"].as_f64().unwrap_or(0.0),
                            i["sum"]["seconds"].as_f64().unwrap_or(1.0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Received {
            // Whole intervals only: the last, cut short by the end, would read high.
            per_second: sums
                .iter()
                .filter(|(_, s)| *s >= 0.9 * interval_s)
                .map(|(b, s)| b * 8.0 / 1e6 / s)
                .collect(),
            bytes: sums.iter().map(|(b, _)| b).sum(),
            secs,
        }
    })
}

/// A switch file for the shared topology: `head` first (an `[lbt]` table, say), uplinks
/// `uplink1`/`uplink2` on tmt-u1/tmt-u2 at `capacity`, port group `vms` with the `group` lines
/// (policy, failover order), the `classes` tables, and ports vm1 and vm2 on tmt-v1/tmt-v2 with
/// their extra lines (reservation, limit, id). One data-plane thread (the default on two cores)
/// whatever the machine's cores, unless `head` sets `workers` (`live_counters`, `live_qos` and
/// `linkstate_live` also run two).
pub fn switch_toml(head: &str, capacity: &str, group: &str, classes: &str, vm1: &str, vm2: &str) -> String {
    let workers = if head.contains("workers =") { "" } else { "workers = 1" };
    format!(
        r#"{workers}
{head}
[[uplinks]]
name = "uplink1"
interface = "tmt-u1"
capacity = "{capacity}"

[[uplinks]]
name = "uplink2"
interface = "tmt-u2"
capacity = "{capacity}"

[[port_groups]]
name = "vms"
{group}

{classes}

[[ports]]
name = "vm1"
interface = "tmt-v1"
mac = "02:00:00:00:00:01"
group = "vms"
{vm1}

[[ports]]
name = "vm2"
interface = "tmt-v2"
mac = "02:00:00:00:00:02"
group = "vms"
{vm2}
"#
    )
}

/// The switch the API tests drive: two 1G uplinks, port-ID teaming, class `vm` reserving 600M,
/// vm1 reserving 100M.
pub fn api_switch() -> String {
    switch_toml(
        "",
        "1G",
        "policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"600M\"",
        "reservation = \"100M\"",
        "",
    )
}

/// An iperf3 server for one test in the remote host's namespace (gone after 15 s at most),
/// listening when this returns.
pub fn iperf_server() -> std::process::Child {
    let server = Command::new("timeout")
        .args(["15", "ip", "netns", "exec", "tmt-remote", "iperf3", "-s", "-1"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    await_listener("tmt-remote", 5201);
    server
}

/// An iperf3 client in `vm`'s namespace to the remote host (10.77.0.100), bounded to 12 s,
/// with `args` after the target.
pub fn iperf_client(vm: &str, args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.args(["12", "ip", "netns", "exec", vm, "iperf3", "-c", "10.77.0.100"])
        .args(args);
    c
}

/// Stops the daemon with SIGTERM and waits (3 s at most) for a clean exit.
pub fn stop_cleanly(daemon: &mut Daemon) {
    signal(&daemon.0, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(3);
    let code = loop {
        if let Some(st) = daemon.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "did not stop within 3 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(code.success(), "exit status {code:?}");
}

/// Waits (10 s at most) until `what` holds.
#[allow(dead_code)]
pub fn await_that(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The frames the switch dropped from port `name`, all reasons, in a status.
pub fn port_drops(status: &serde_json::Value, name: &str) -> u64 {
    let port = status["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no port {name} in the status"));
    port["counters"]["drops"]
        .as_object()
        .expect("drops by reason")
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum()
}

/// Whether `ns` reaches the remote host: ten pings 0.2 s apart, one answer is enough (the
/// first may go before the port is attached or moved).
pub fn reaches_remote(ns: &str) -> bool {
    received(&ping(ns, "10.77.0.100", "10", "0.2")) > 0
}

/// The drops for `reason` of the port or uplink (`kind` "ports" or "uplinks") named `name` in
/// the status file, once at least `want` (the file is written every second), or the last seen
/// after 5 s.
pub fn drops(status_path: &Path, kind: &str, name: &str, reason: &str, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = status(status_path);
        let n = s[kind]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["counters"]["drops"][reason].as_u64())
            .unwrap_or(0);
        if n >= want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
