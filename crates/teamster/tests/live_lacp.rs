//! LACP against a real partner: Open vSwitch (Debian's package, userspace datapath) as the
//! physical switch in tmt-phys, with a bond in `lacp=active` mode towards Teamster's uplinks.
//! Both sides must report the bundle negotiated, traffic must use both members both ways, a
//! member whose partner goes quiet must leave within three fast periods, carrier loss at once,
//! and a member whose partner has another key must stay out. Passive and slow rates too.
//! Topology: [`netns`], with the Linux bridge in tmt-phys replaced by Open vSwitch and a third
//! uplink (tmt-u3, p3) made here.

mod netns;
use netns::*;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Open vSwitch as the physical switch: its own ovsdb-server and ovs-vswitchd (run files in a
/// temporary directory; the system's service, if any, is never touched), ovs-vswitchd in
/// tmt-phys, bridge br0 (netdev) with the remote host's port r0. Both daemons are killed when
/// it is dropped.
struct Ovs {
    dir: tempfile::TempDir,
}

impl Ovs {
    fn start() -> Ovs {
        let ovs = Ovs {
            dir: tempfile::tempdir().unwrap(),
        };
        let d = ovs.path();
        let db = d.join("conf.db");
        ovs.run(&[
            "ovsdb-tool",
            "create",
            db.to_str().unwrap(),
            "/usr/share/openvswitch/vswitch.ovsschema",
        ]);
        let opt = |k: &str, f: &str| format!("--{k}={}", d.join(f).display());
        ovs.run(&[
            "ovsdb-server",
            db.to_str().unwrap(),
            &format!("--remote=punix:{}", d.join("db.sock").display()),
            &opt("pidfile", "ovsdb-server.pid"),
            &opt("unixctl", "ovsdb-server.ctl"),
            &opt("log-file", "ovsdb-server.log"),
            "--detach",
            "--no-chdir",
        ]);
        ovs.vsctl(&["--no-wait", "init"]);
        ovs.run(&[
            "ip",
            "netns",
            "exec",
            "tmt-phys",
            "ovs-vswitchd",
            &format!("unix:{}", d.join("db.sock").display()),
            &opt("pidfile", "ovs-vswitchd.pid"),
            &opt("unixctl", "ovs-vswitchd.ctl"),
            &opt("log-file", "ovs-vswitchd.log"),
            "--detach",
            "--no-chdir",
            "--disable-system",
            "-vconsole:off",
        ]);
        ovs.vsctl(&[
            "add-br",
            "br0",
            "--",
            "set",
            "bridge",
            "br0",
            "datapath_type=netdev",
            "fail_mode=standalone",
        ]);
        ovs.vsctl(&["add-port", "br0", "r0"]);
        ovs
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs an OVS command with its run files here, bounded to 20 s; panics on failure.
    fn run(&self, args: &[&str]) -> String {
        let d = self.path();
        let out = Command::new("timeout")
            .arg("20")
            .args(args)
            .envs(["OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"].map(|k| (k, d)))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    fn vsctl(&self, args: &[&str]) {
        let db = format!("--db=unix:{}", self.path().join("db.sock").display());
        let mut all = vec!["ovs-vsctl", db.as_str(), "--timeout=20"];
        all.extend_from_slice(args);
        self.run(&all);
    }

    fn appctl(&self, args: &[&str]) -> String {
        let ctl = self.path().join("ovs-vswitchd.ctl");
        let mut all = vec!["ovs-appctl", "-t", ctl.to_str().unwrap()];
        all.extend_from_slice(args);
        self.run(&all)
    }

    /// Bond `bond0` of `members`, balance-tcp with active LACP at `time` (fast or slow). Its
    /// hash buckets start on one member and are rebalanced by load: every second here (the
    /// least Open vSwitch takes; its default is 10 s, longer than a test's streams).
    fn bond(&self, members: &[&str], time: &str) {
        let time = format!("other_config:lacp-time={time}");
        let mut args = vec!["add-bond", "br0", "bond0"];
        args.extend_from_slice(members);
        args.extend([
            "bond_mode=balance-tcp",
            "lacp=active",
            time.as_str(),
            "other_config:bond-rebalance-interval=1000",
        ]);
        self.vsctl(&args);
    }

    /// `bond/show` says member `m` is enabled.
    fn enabled(&self, bond: &str, m: &str) -> bool {
        self.appctl(&["bond/show", bond])
            .contains(&format!("member {m}: enabled"))
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        for pid in ["ovs-vswitchd.pid", "ovsdb-server.pid"] {
            if let Some(pid) = std::fs::read_to_string(self.path().join(pid))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            {
                // SAFETY: kill(2) on a pid from the pidfile of a daemon this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// The shared topology with the Linux bridge in tmt-phys gone (Open vSwitch takes p1, p2, r0)
/// and a third uplink tmt-u3 whose far end p3 is in tmt-phys.
struct LacpTopology {
    _inner: Topology,
}

impl LacpTopology {
    fn up() -> LacpTopology {
        let inner = Topology::up();
        must(&["ip", "-n", "tmt-phys", "link", "del", "br0"]);
        sh(&["ip", "link", "del", "tmt-u3"]);
        must(&[
            "ip", "link", "add", "tmt-u3", "type", "veth", "peer", "name", "p3", "netns", "tmt-phys",
        ]);
        must(&["ip", "link", "set", "tmt-u3", "up"]);
        for p in ["p1", "p2", "p3", "r0"] {
            must(&["ip", "-n", "tmt-phys", "link", "set", p, "up"]);
        }
        // Open vSwitch's userspace datapath reads and writes frames whole (without its TSO
        // option): a frame handed to it with a checksum left to the NIC, or a segment larger
        // than the MTU, would leave it broken. So no checksum or segmentation offload anywhere
        // on its links, on either end (Teamster segments and checksums in software instead);
        // the same for the remote host's stack. Open vSwitch's peer harness does the same.
        let off = ["tx", "off", "tso", "off", "gso", "off", "gro", "off"];
        for u in ["tmt-u1", "tmt-u2", "tmt-u3"] {
            let mut cmd = vec!["ethtool", "-K", u];
            cmd.extend(off);
            must(&cmd);
        }
        for (ns, dev) in [
            ("tmt-phys", "p1"),
            ("tmt-phys", "p2"),
            ("tmt-phys", "p3"),
            ("tmt-phys", "r0"),
            ("tmt-remote", "eth0"),
        ] {
            let mut cmd = vec!["ip", "netns", "exec", ns, "ethtool", "-K", dev];
            cmd.extend(off);
            must(&cmd);
        }
        LacpTopology { _inner: inner }
    }
}

impl Drop for LacpTopology {
    fn drop(&mut self) {
        sh(&["ip", "link", "del", "tmt-u3"]);
    }
}

/// Teamster with three 1G uplinks (tmt-u1..3) in one `lacp` group using Address Hash, the
/// `[port_groups.lacp]` table `lacp`, and vm1.
fn config(lacp: &str) -> String {
    let uplinks: String = (1..=3)
        .map(|i| format!("[[uplinks]]\nname = \"uplink{i}\"\ninterface = \"tmt-u{i}\"\ncapacity = \"1G\"\n\n"))
        .collect();
    format!(
        r#"workers = 1
{uplinks}
[[port_groups]]
name = "vms"
policy = "address-hash"
mode = "lacp"
active = ["uplink1", "uplink2", "uplink3"]

[port_groups.lacp]
{lacp}

[[ports]]
name = "vm1"
interface = "tmt-v1"
mac = "02:00:00:00:00:01"
group = "vms"
"#
    )
}

/// Teamster's LACP members, by uplink name.
fn members(dir: &Path) -> Vec<Value> {
    let (code, out, err) = ctl(dir, &["--json", "lacp"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(&out).unwrap().as_array().unwrap().clone()
}

fn member(dir: &Path, uplink: &str) -> Value {
    members(dir)
        .into_iter()
        .find(|m| m["uplink"] == uplink)
        .unwrap_or_else(|| panic!("no LACP member {uplink}"))
}

fn distributing(dir: &Path, uplink: &str) -> bool {
    member(dir, uplink)["mux_state"] == "collecting-distributing"
}

/// Waits up to `secs` for `cond`; panics naming `what` with both sides' views.
fn within(secs: u64, what: &str, ovs: &Ovs, dir: &Path, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > Duration::from_secs(secs) {
            let (_, ours, _) = ctl(dir, &["lacp"]);
            panic!(
                "not within {secs} s: {what}\n--- teamster ctl lacp ---\n{ours}\n--- ovs-appctl lacp/show ---\n{}",
                ovs.appctl(&["lacp/show"])
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// Bytes uplink `name` sent and received so far.
fn bytes_of(dir: &Path, name: &str) -> (u64, u64) {
    uplink_bytes(dir).into_iter().find(|(n, _)| n == name).unwrap().1
}

/// Each uplink's share of the bytes moved in one direction while `traffic` runs.
fn shares(dir: &Path, rx: bool, traffic: impl FnOnce()) -> Vec<f64> {
    let names = ["uplink1", "uplink2", "uplink3"];
    let pick = |(tx, r): (u64, u64)| if rx { r } else { tx };
    let before: Vec<u64> = names.iter().map(|n| pick(bytes_of(dir, n))).collect();
    traffic();
    let delta: Vec<u64> = names
        .iter()
        .zip(&before)
        .map(|(n, b)| pick(bytes_of(dir, n)) - b)
        .collect();
    let total: u64 = delta.iter().sum();
    assert!(total > 5_000_000, "only {total} bytes moved: {delta:?}");
    delta.iter().map(|d| *d as f64 / total as f64).collect()
}

/// Sixteen TCP streams between vm1 and the remote host for 4 s (`reverse`: towards vm1).
fn streams(reverse: bool) {
    let mut server = iperf_server();
    let mut args = vec!["-t", "4", "-P", "16"];
    if reverse {
        args.push("-R");
    }
    let out = iperf_client("tmt-vm1", &args).output().unwrap();
    // The one-off server exits after its test: gone before the next one listens.
    let _ = server.wait();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes tmt-phys's p2 drop every slow-protocol frame it would send (the partner on that link
/// goes quiet while its carrier stays up), or stop doing so. The kernel has htb, pfifo and u32
/// but no drop action: LACPDUs are classified into a class whose queue holds nothing.
fn quiet_p2(quiet: bool) {
    let tc = |args: &[&str]| {
        let mut all = vec!["ip", "netns", "exec", "tmt-phys", "tc"];
        all.extend_from_slice(args);
        must(&all);
    };
    if !quiet {
        tc(&["qdisc", "del", "dev", "p2", "root"]);
        return;
    }
    tc(&[
        "qdisc", "add", "dev", "p2", "root", "handle", "1:", "htb", "default", "10",
    ]);
    tc(&[
        "class", "add", "dev", "p2", "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit",
    ]);
    tc(&[
        "class", "add", "dev", "p2", "parent", "1:", "classid", "1:20", "htb", "rate", "8kbit",
    ]);
    tc(&[
        "qdisc", "add", "dev", "p2", "parent", "1:20", "handle", "20:", "pfifo", "limit", "0",
    ]);
    tc(&[
        "filter", "add", "dev", "p2", "parent", "1:", "protocol", "0x8809", "prio", "1", "u32", "match", "u32", "0",
        "0", "classid", "1:20",
    ]);
}

fn ovs_ready() -> bool {
    ready()
        && skip_unless(
            sh(&[
                "sh",
                "-c",
                "command -v ovs-vswitchd && command -v ovsdb-server && command -v ovs-vsctl && command -v ethtool",
            ]),
            "Open vSwitch (Debian's openvswitch-switch) as the LACP partner, and ethtool",
        )
}

#[test]
fn open_vswitch_and_teamster_negotiate_a_bundle_and_keep_it_honest() {
    let _one_at_a_time = netns::lock();
    if !ovs_ready() {
        return;
    }
    let _topology = LacpTopology::up();
    let ovs = Ovs::start();
    // p1 and p2 bonded (fast LACP); p3 a port of its own with LACP: another key, individual.
    ovs.bond(&["p1", "p2"], "fast");
    ovs.vsctl(&[
        "add-port",
        "br0",
        "p3",
        "--",
        "set",
        "port",
        "p3",
        "lacp=active",
        "other_config:lacp-time=fast",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_daemon, _status) = start(d, &config("rate = \"fast\""));

    // Both sides report the bundle: Teamster's uplink1 and uplink2 collecting and distributing,
    // Open vSwitch's bond negotiated with both members enabled.
    let took = within(15, "both members distributing on both sides", &ovs, d, || {
        distributing(d, "uplink1")
            && distributing(d, "uplink2")
            && ovs
                .appctl(&["lacp/show", "bond0"])
                .contains("status: active negotiated")
            && ovs.enabled("bond0", "p1")
            && ovs.enabled("bond0", "p2")
    });
    eprintln!("negotiated in {took:?}");
    let ours = member(d, "uplink1");
    let theirs = ovs.appctl(&["lacp/show", "bond0"]);
    assert!(
        theirs.contains(&format!(
            "partner sys_id: {}",
            ours["actor"]["system_id"].as_str().unwrap()
        )),
        "Open vSwitch's partner is not Teamster:\n{theirs}"
    );
    assert!(theirs.contains(&format!(
        "actor sys_id: {}",
        ours["partner"]["system_id"].as_str().unwrap()
    )));
    // The actor's system ID is uplink1's MAC (none was configured).
    let mac = std::fs::read_to_string("/sys/class/net/tmt-u1/address").unwrap();
    assert_eq!(ours["actor"]["system_id"], mac.trim());
    // uplink3's partner (p3) has another key and cannot aggregate: left out, carrying nothing.
    let third = member(d, "uplink3");
    assert_eq!(third["selected"], false, "{third}");
    assert_eq!(third["usable"], false, "{third}");
    assert_ne!(third["partner"]["key"], ours["partner"]["key"]);
    assert!(reaches_remote("tmt-vm1"));

    // Traffic uses both members, both ways; none goes through uplink3. Teamster's hash splits
    // what it sends; what it receives Open vSwitch splits (its buckets start on one member and
    // are rebalanced every second): both members must carry some of it.
    let tx = shares(d, false, || streams(false));
    let rx = shares(d, true, || streams(true));
    eprintln!("send shares {tx:.2?}, receive shares {rx:.2?}");
    for (what, s, least) in [("send", &tx, 0.1), ("receive", &rx, 0.01)] {
        assert!(s[0] > least && s[1] > least, "{what}: {s:?}");
        assert!(s[2] < 0.01, "{what} through the unbundled uplink3: {s:?}");
    }

    // p2's side goes quiet: Teamster takes uplink2 out 3 s after the last LACPDU it heard,
    // so 2 to 3 s after the filter (the partner sends one a second); never before two were
    // missed. `ctl` sees it up to a snapshot later (about half a second), hence 4.5 s at most.
    quiet_p2(true);
    let out_after = within(6, "uplink2 out of the bundle", &ovs, d, || !distributing(d, "uplink2"));
    eprintln!("a quiet partner was out after {out_after:?}");
    assert!(
        out_after >= Duration::from_millis(1900) && out_after <= Duration::from_millis(4500),
        "{out_after:?}"
    );
    assert_eq!(member(d, "uplink2")["usable"], false);
    assert!(distributing(d, "uplink1"));
    assert!(reaches_remote("tmt-vm1"));
    quiet_p2(false);
    within(10, "uplink2 back", &ovs, d, || distributing(d, "uplink2"));

    // Carrier loss on p1: out at once (no LACP timeout), and back when the link returns.
    must(&["ip", "-n", "tmt-phys", "link", "set", "p1", "down"]);
    let gone = within(2, "uplink1 unusable", &ovs, d, || {
        member(d, "uplink1")["usable"] == false
    });
    eprintln!("carrier loss took uplink1 out after {gone:?}");
    assert!(reaches_remote("tmt-vm1"));
    must(&["ip", "-n", "tmt-phys", "link", "set", "p1", "up"]);
    within(10, "uplink1 back", &ovs, d, || distributing(d, "uplink1"));
    let c = &member(d, "uplink1")["counters"];
    assert!(c["rx_lacpdus"].as_u64().unwrap() > 5 && c["rx_bad"] == 0, "{c}");
}

#[test]
fn passive_and_slow_teamster_bundles_with_an_active_open_vswitch() {
    let _one_at_a_time = netns::lock();
    if !ovs_ready() {
        return;
    }
    let _topology = LacpTopology::up();
    let ovs = Ovs::start();
    ovs.bond(&["p1", "p2", "p3"], "slow");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_daemon, _status) = start(d, &config("activity = \"passive\"\nrate = \"slow\""));
    within(20, "all three members distributing", &ovs, d, || {
        ["uplink1", "uplink2", "uplink3"].iter().all(|u| distributing(d, u))
            && ovs
                .appctl(&["lacp/show", "bond0"])
                .contains("status: active negotiated")
    });
    let m = member(d, "uplink1");
    let bits = |side: &str| {
        m[side]["state_bits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    // We are passive and slow; Open vSwitch active and slow.
    assert!(!bits("actor").contains(&"activity".into()) && !bits("actor").contains(&"timeout".into()));
    assert!(bits("partner").contains(&"activity".into()) && !bits("partner").contains(&"timeout".into()));
    let theirs = ovs.appctl(&["lacp/show", "bond0"]);
    assert!(theirs.contains("lacp_time: slow"), "{theirs}");
    assert!(reaches_remote("tmt-vm1"));
    // A passive actor answers; it does not chatter: a handful of LACPDUs in the first seconds.
    let sent: u64 = members(d)
        .iter()
        .map(|m| m["counters"]["tx_lacpdus"].as_u64().unwrap())
        .sum();
    assert!(sent <= 30, "{sent} LACPDUs from a passive, slow actor");
}
