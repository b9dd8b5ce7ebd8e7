//! The cluster live, at 1/100 of Figure 2's scale: a controller, two Teamster hosts whose
//! 100 Mbit/s uplinks reach a remote host through one bridge (the physical network), and three
//! VMs, each a namespace with an interface towards each host (both with the VM's MAC; the
//! harness moves the VM's address from one to the other when the controller moves it, standing
//! in for the hypervisor's migration). The Figure 2 sequence is driven through `teamster ctl`
//! with a greedy sender in each VM (UDP offered at the uplink's rate, measured at the
//! receiver, as the simulator's greedy sources): each VM's throughput follows it within 10% (or
//! 2% of the line, for a VM whose model rate is a small part of it), and pings to each migrating VM are counted through its migration.

mod controllers;
mod etcd;
mod netns;
use controllers::{ca_in, ctl};
use netns::*;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SPACES: [&str; 5] = ["tmt-cphys", "tmt-cremote", "tmt-cvm1", "tmt-cvm2", "tmt-cvm3"];
const REMOTE: &str = "10.78.0.100";

/// The namespaces and links of the test, removed by name when dropped.
struct Cluster;

impl Cluster {
    fn up() -> Cluster {
        Cluster::clean();
        for n in SPACES {
            must(&["ip", "netns", "add", n]);
            must(&["ip", "-n", n, "link", "set", "lo", "up"]);
            sh(&[
                "ip",
                "netns",
                "exec",
                n,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
            ]);
        }
        must(&[
            "ip",
            "-n",
            "tmt-cphys",
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "stp_state",
            "0",
        ]);
        must(&["ip", "-n", "tmt-cphys", "link", "set", "br0", "up"]);
        // Each host's uplink, shaped as the shared topology's: the wire at 110 Mbit/s leaving
        // the host (its switch paces at 100), 100 Mbit/s towards it.
        for h in ["1", "2"] {
            let (up, peer) = (format!("tmt-h{h}u"), format!("p{h}"));
            must(&[
                "ip",
                "link",
                "add",
                &up,
                "type",
                "veth",
                "peer",
                "name",
                &peer,
                "netns",
                "tmt-cphys",
            ]);
            must(&["ip", "link", "set", &up, "up"]);
            must(&["ip", "-n", "tmt-cphys", "link", "set", &peer, "master", "br0"]);
            must(&["ip", "-n", "tmt-cphys", "link", "set", &peer, "up"]);
            htb(None, &up, "110mbit");
            htb(Some("tmt-cphys"), &peer, "100mbit");
        }
        must(&[
            "ip",
            "-n",
            "tmt-cphys",
            "link",
            "add",
            "r0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            "tmt-cremote",
        ]);
        must(&["ip", "-n", "tmt-cphys", "link", "set", "r0", "master", "br0"]);
        must(&["ip", "-n", "tmt-cphys", "link", "set", "r0", "up"]);
        must(&[
            "ip",
            "-n",
            "tmt-cremote",
            "addr",
            "add",
            &format!("{REMOTE}/24"),
            "dev",
            "eth0",
        ]);
        must(&["ip", "-n", "tmt-cremote", "link", "set", "eth0", "up"]);
        // VM i: eth-a towards host 1 (tmt-c{i}a there), eth-b towards host 2, one MAC.
        for i in 1..=3 {
            let ns = format!("tmt-cvm{i}");
            for side in ["a", "b"] {
                let (port, inside) = (format!("tmt-c{i}{side}"), format!("eth-{side}"));
                must(&[
                    "ip", "link", "add", &port, "type", "veth", "peer", "name", &inside, "netns", &ns,
                ]);
                must(&["ip", "-n", &ns, "link", "set", &inside, "address", &mac(i)]);
                must(&["ip", "link", "set", &port, "up"]);
            }
            must(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("10.78.0.{i}/24"),
                "dev",
                "eth-a",
            ]);
            must(&["ip", "-n", &ns, "link", "set", "eth-a", "up"]);
        }
        Cluster
    }

    fn clean() {
        for l in [
            "tmt-h1u", "tmt-h2u", "tmt-c1a", "tmt-c1b", "tmt-c2a", "tmt-c2b", "tmt-c3a", "tmt-c3b",
        ] {
            sh(&["ip", "link", "del", l]);
        }
        for n in SPACES {
            sh(&["ip", "netns", "del", n]);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        Cluster::clean();
    }
}

fn mac(i: u32) -> String {
    format!("02:00:00:00:01:0{i}")
}

/// The hypervisor's part of a migration: VM `i` now sends on its interface towards host 2.
fn move_to_host2(i: u32) {
    let ns = format!("tmt-cvm{i}");
    let addr = format!("10.78.0.{i}/24");
    // The new interface first, so the VM's sockets are never without a route.
    must(&["ip", "-n", &ns, "link", "set", "eth-b", "up"]);
    must(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth-b"]);
    must(&["ip", "-n", &ns, "addr", "del", &addr, "dev", "eth-a"]);
    must(&["ip", "-n", &ns, "link", "set", "eth-a", "down"]);
}

/// Host `h`'s switch.toml: host 1 names the controller's socket in its file, host 2 is given
/// it with `--controller`.
fn host_toml(h: u32, controller: &Path) -> String {
    let side = if h == 1 { "a" } else { "b" };
    let socket = if h == 1 {
        format!("socket = \"{}\"", controller.display())
    } else {
        String::new()
    };
    format!(
        r#"workers = 1

[[uplinks]]
name = "uplink1"
interface = "tmt-h{h}u"
capacity = "100M"

[[port_groups]]
name = "vms"
policy = "port-id"
active = ["uplink1"]

[[traffic_classes]]
class = "vm"
reservation = "75M"

[controller]
{socket}
host = "host{h}"
interface = "tmt-{{vm}}{side}"
group = "vms"
interval_ms = 200
"#
    )
}

fn must_ctl(socket: &Path, args: &[&str]) -> String {
    let (code, out, err) = ctl(socket, args);
    assert_eq!(code, 0, "ctl {args:?}: {err}");
    out
}

/// Powers VM c1 on, on host1, through the controller at `socket`.
fn power_on_c1(socket: &Path) {
    let mac = mac(1);
    let args = [
        "vm", "power-on", "c1", "--host", "host1", "--mac", &mac, "--group", "vms",
    ];
    must_ctl(socket, &args);
}

/// Whether the controller at `socket` has VM c1 on host1.
fn c1_on_host1(socket: &Path) -> bool {
    let (_, out, _) = ctl(socket, &["cluster", "--json"]);
    serde_json::from_str::<serde_json::Value>(&out)
        .ok()
        .is_some_and(|v| (v["vms"].as_array().into_iter().flatten()).any(|m| m["name"] == "c1" && m["host"] == "host1"))
}

/// Host `host`'s attached ports, from its status.
fn attached(status: &Path) -> Vec<String> {
    let s = netns::status(status);
    (s["ports"].as_array().unwrap().iter())
        .filter(|p| p["attached"] == true)
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

/// Pings VM `i` from the remote host every 50 ms for `secs`.
fn ping_vm(i: u32, secs: u32) -> Child {
    let count = (secs * 20).to_string();
    Command::new("timeout")
        .args([
            &(secs + 5).to_string(),
            "ip",
            "netns",
            "exec",
            "tmt-cremote",
            "ping",
            "-n",
            "-i",
            "0.05",
            "-W",
            "1",
            "-c",
            &count,
        ])
        .arg(format!("10.78.0.{i}"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Pings lost of `sent`, and the longest run of them (the outage, in pings 50 ms apart).
fn lost(child: Child, sent: u32) -> (u32, u32) {
    let out = String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).to_string();
    let answered: std::collections::BTreeSet<u32> = (out.lines())
        .filter_map(|l| l.split("icmp_seq=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    let (mut run, mut longest) = (0, 0);
    for seq in 1..=sent {
        run = if answered.contains(&seq) { 0 } else { run + 1 };
        longest = longest.max(run);
    }
    (sent - answered.len() as u32, longest)
}

fn mean(series: &[f64], from: usize, to: usize) -> f64 {
    let w = &series[from.min(series.len())..to.min(series.len())];
    w.iter().sum::<f64>() / w.len().max(1) as f64
}

#[test]
fn figure_2_live_at_a_hundredth_of_the_scale() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Cluster::up();
    let dir = tempfile::tempdir().unwrap();
    let csock = dir.path().join("controller.sock");
    let mut controller = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "--state"])
        .arg(dir.path().join("state.redb"))
        .arg("--socket")
        .arg(&csock)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _reap = Reap(&mut controller);
    await_that("the controller listens", || {
        std::os::unix::net::UnixStream::connect(&csock).is_ok()
    });
    let mut hosts = Vec::new();
    for h in [1, 2] {
        let hdir = dir.path().join(format!("host{h}"));
        std::fs::create_dir(&hdir).unwrap();
        let flag = ["--controller", csock.to_str().unwrap()];
        let extra: &[&str] = if h == 2 { &flag } else { &[] };
        let (daemon, status) = start_with(&hdir, &host_toml(h, &csock), extra);
        hosts.push((daemon, status));
    }
    // Asked while the hosts start: a refusal is shown (to find out why one was once seen on a
    // loaded machine) and asked again, rather than failing the wait.
    await_that("both hosts registered", || {
        let (code, out, err) = ctl(&csock, &["cluster"]);
        if code != 0 {
            eprintln!("ctl cluster while the hosts start: exit {code}: {err}");
        }
        code == 0 && out.contains("host1") && out.contains("host2")
    });
    for i in 1..=3u32 {
        let vm = format!("c{i}");
        must_ctl(
            &csock,
            &[
                "vm",
                "power-on",
                &vm,
                "--host",
                "host1",
                "--mac",
                &mac(i),
                "--group",
                "vms",
            ],
        );
    }
    await_that("host1 attached the three VMs", || attached(&hosts[0].1).len() == 3);

    // A greedy UDP sender in each VM (100 Mbit/s offered, the uplink's rate), 60 s.
    let started = Instant::now();
    const VMS: [&str; 3] = ["tmt-cvm1", "tmt-cvm2", "tmt-cvm3"];
    let streams: Vec<_> = (0..3)
        .map(|k| udp_stream_to(("tmt-cremote", REMOTE), VMS[k], 5301 + k as u16, 100, 60, 0.1))
        .collect();
    let at = |s: u64| {
        let due = started + Duration::from_secs(s);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    };
    at(12);
    must_ctl(&csock, &["vm", "set", "c1", "--reservation", "75M"]);
    // Each migration: the controller moves the VM, host 2 attaches its port (and announces its
    // MAC), the harness moves the VM's address; pings count what is lost meanwhile.
    let mut pings = Vec::new();
    let migrations = [(24, 2u32, "45M"), (40, 3u32, "30M")];
    for (when, i, r) in migrations {
        at(when - 2);
        let ping = ping_vm(i, 6);
        at(when);
        let out = must_ctl(&csock, &["vm", "set", &format!("c{i}"), "--reservation", r]);
        assert!(out.contains(&format!("migrating c{i} host1 -> host2")), "{out}");
        let vm = format!("c{i}");
        await_that("host2 attached the VM", || attached(&hosts[1].1).contains(&vm));
        move_to_host2(i);
        pings.push((i, lost(ping, 120)));
    }
    // The hosts report their uplinks' measured load: host1's carries c1's stream.
    let c: serde_json::Value = serde_json::from_str(&must_ctl(&csock, &["cluster", "--json"])).unwrap();
    let load = c["hosts"][0]["uplinks"][0]["load_bps"].as_f64().unwrap_or(0.0);
    assert!(load > 50e6, "host1's uplink reported {load} bit/s");
    let series: Vec<Vec<f64>> = streams.into_iter().map(|s| s.join().unwrap().per_second).collect();
    let table = must_ctl(&csock, &["cluster"]);
    assert!(table.contains("reservations that cannot be kept: 0"), "{table}");

    // The sequence at 1/100, in UDP payload at the receiver: the switch paces frames at
    // 100 Mbit/s, and 1,400 bytes of payload travel in 1,442 (the reservations too are frame
    // bytes, so every figure scales alike).
    let payload = 1400.0 / 1442.0;
    let line = 100e6 * payload;
    let (r1, r2, r3) = (75e6 * payload, 45e6 * payload, 30e6 * payload);
    let phases: [(&str, usize, usize, [f64; 3]); 4] = [
        ("equal shares", 3, 12, [line / 3.0; 3]),
        (
            "c1 reserves 75M",
            15,
            24,
            [r1 + (line - r1) / 3.0, (line - r1) / 3.0, (line - r1) / 3.0],
        ),
        (
            "c2 moved to host2",
            27,
            40,
            [r1 + (line - r1) / 2.0, line, (line - r1) / 2.0],
        ),
        (
            "c3 moved to host2",
            43,
            58,
            [line, r2 + (line - r2 - r3) / 2.0, r3 + (line - r2 - r3) / 2.0],
        ),
    ];
    let mut report = String::new();
    let mut worst: f64 = 0.0;
    for (name, from, to, want) in phases {
        for (vm, want) in want.iter().enumerate() {
            let got = mean(&series[vm], from * 10, to * 10) * 1e6;
            let off = (got - want) / want;
            // Within 10% of its own model rate, or, for a VM whose model rate is a small part
            // of the line, within 2% of the line (the measurement's own noise on a shared
            // 2-core machine: 0.9 Mbit/s off a model of 8.1 is 11% of it): a starved VM fails.
            if (got - want).abs() > 0.02 * line {
                worst = worst.max(off.abs());
            }
            report += &format!(
                "{name}: c{} {:.1} Mbit/s (model {:.1}, {:+.1}%)\n",
                vm + 1,
                got / 1e6,
                want / 1e6,
                off * 100.0
            );
        }
    }
    // Each migration's outage: the longest run of 0.1 s intervals the receiver got nothing from
    // the VM in, from 2 s before the move to 4 s after.
    let mut outages = Vec::new();
    for (when, i, _) in migrations {
        let s = &series[i as usize - 1];
        let window = &s[((when - 2) * 10) as usize..((when + 4) * 10).min(s.len() as u64) as usize];
        let (mut run, mut longest) = (0, 0);
        for r in window {
            run = if *r > 0.0 { 0 } else { run + 1 };
            longest = longest.max(run);
        }
        outages.push((i, longest * 100));
        report += &format!(
            "c{i}'s migration: its stream stopped for {} ms at most\n",
            longest * 100
        );
    }
    for (i, (l, run)) in &pings {
        report += &format!(
            "c{i}'s migration: {l} of 120 pings lost, longest run {run} ({} ms); the VM's sender saturates its port, whose overflow takes pings too\n",
            run * 50
        );
    }
    eprintln!("{report}");
    assert!(
        worst <= 0.10,
        "a VM is more than 10% off the model (and more than 2% of the line):\n{report}"
    );
    // Connectivity is kept: through each migration the VM's stream stops for under a second.
    for (i, ms) in outages {
        assert!(ms < 1000, "c{i}'s stream stopped for {ms} ms:\n{report}");
    }
}

/// Kills and reaps the controller when the test ends.
struct Reap<'a>(&'a mut Child);

impl Drop for Reap<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A host cut off from its controller detaches its VMs before the controller's host timeout
/// lets it restart them elsewhere, and attaches them again once a report is answered: here the
/// controller (host timeout 4 s) is killed with SIGKILL under a running host reporting every
/// 200 ms, then started again on the same state. Then the state is lost: the controller
/// started on none adopts the VM the host runs, which stays attached, and is obeyed after.
#[test]
fn a_host_cut_off_from_its_controller_detaches_its_vms_in_time() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Cluster::up();
    let dir = tempfile::tempdir().unwrap();
    let csock = dir.path().join("controller.sock");
    let controller = || {
        let c = Command::new(env!("CARGO_BIN_EXE_teamster"))
            .args(["controller", "--host-timeout-s", "4", "--state"])
            .arg(dir.path().join("state.redb"))
            .arg("--socket")
            .arg(&csock)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        await_that("the controller listens", || {
            std::os::unix::net::UnixStream::connect(&csock).is_ok()
        });
        c
    };
    let mut first = controller();
    let hdir = dir.path().join("host1");
    std::fs::create_dir(&hdir).unwrap();
    let (_daemon, status) = start_with(&hdir, &host_toml(1, &csock), &[]);
    await_that("host1 registered", || ctl(&csock, &["cluster"]).1.contains("host1"));
    power_on_c1(&csock);
    await_that("host1 attached c1", || attached(&status) == ["c1"]);

    // The controller dies: host1 must detach c1 within the host timeout of its last answer.
    first.kill().unwrap();
    first.wait().unwrap();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(4);
    while !attached(&status).is_empty() {
        assert!(
            Instant::now() < deadline,
            "c1 still attached {:?} after the controller died (its host timeout is 4 s)",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let detached_after = killed.elapsed();
    // The margin: 2 intervals and a second (1.4 s) before the timeout; never much sooner.
    assert!(
        detached_after >= Duration::from_millis(1000),
        "detached after {detached_after:?}: sooner than the isolation time"
    );
    eprintln!("c1 detached {detached_after:?} after the controller died");

    // The controller comes back on the same state: c1 is still host1's, and attached again.
    let mut second = controller();
    await_that("host1 attached c1 again", || attached(&status) == ["c1"]);

    // The controller's state is lost (killed, its file gone, started anew): it adopts c1 from
    // host1's report, and c1 stays attached all the while.
    second.kill().unwrap();
    second.wait().unwrap();
    std::fs::remove_file(dir.path().join("state.redb")).unwrap();
    let mut third = controller();
    let _reap = Reap(&mut third);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(attached(&status), ["c1"], "c1 detached while the new state adopts it");
        if c1_on_host1(&csock) {
            break;
        }
        assert!(Instant::now() < deadline, "the new state did not adopt c1");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Obeyed from then on: c1 powered off is detached.
    must_ctl(&csock, &["vm", "off", "c1"]);
    await_that("host1 detached c1", || attached(&status).is_empty());

    // The state lost while the host had isolated its VMs: what isolation detached is offered
    // for adoption, adopted, and attached again.
    power_on_c1(&csock);
    await_that("host1 attached c1", || attached(&status) == ["c1"]);
    drop(_reap);
    std::fs::remove_file(dir.path().join("state.redb")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(8);
    while !attached(&status).is_empty() {
        assert!(Instant::now() < deadline, "c1 not detached by isolation");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut fourth = controller();
    let _reap = Reap(&mut fourth);
    await_that("the new state adopted c1 and host1 attached it", || {
        c1_on_host1(&csock) && attached(&status) == ["c1"]
    });
}

/// Two controllers behind etcd (lease 2 s), a host given both (`endpoints`), all of it over
/// TLS with certificates from `teamster controller ca`: etcd requires the controllers' client
/// certificate, the controllers listen on https:// and the host proves its name with its own.
/// The leader killed with SIGKILL, the host's reports reach the new leader within the lease
/// and a few seconds, its VM stays attached all the while (the host never isolates), and the
/// VM is neither lost nor duplicated.
#[test]
fn a_host_follows_the_leader_when_the_leader_is_killed() {
    let _one_at_a_time = netns::lock();
    let have = Command::new("etcd")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready() || !skip_unless(have, "etcd (Debian's etcd-server)") {
        return;
    }
    let _topology = Cluster::up();
    let dir = tempfile::tempdir().unwrap();
    let cadir = dir.path().join("ca");
    let ca = |args: &[&str]| ca_in(&cadir, args);
    ca(&["init"]);
    ca(&["issue-server", "controller", "--address", "127.0.0.1"]);
    ca(&["issue-host", "host1"]);
    // etcd trusts a CA of its own: one that signs hosts' certificates would let any host
    // write the cluster's state.
    let etcd_ca = dir.path().join("etcd-ca");
    let e_ca = |args: &[&str]| ca_in(&etcd_ca, args);
    e_ca(&["init"]);
    e_ca(&["issue-server", "etcd", "--address", "127.0.0.1"]);
    e_ca(&["issue-client", "controller"]);
    let f = |n: &str| cadir.join(n).to_str().unwrap().to_string();
    let e = |n: &str| etcd_ca.join(n).to_str().unwrap().to_string();
    let token = dir.path().join("token");
    std::fs::write(&token, "operator-token\n").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (_etcd, url) = etcd::etcd_tls(dir.path(), &etcd_ca, "etcd");
    let ports = [etcd::free_port(), etcd::free_port()];
    let controller = |name: &str| {
        let socket = dir.path().join(format!("{name}.sock"));
        let port = ports[usize::from(name == "b")];
        let child = Command::new(env!("CARGO_BIN_EXE_teamster"))
            .args(["controller", "--etcd", &url, "--lease-s", "2"])
            .args(["--etcd-ca", &e("ca.pem"), "--etcd-cert", &e("client-controller.pem")])
            .args([
                "--etcd-key",
                &e("client-controller.key"),
                "--token-file",
                token.to_str().unwrap(),
            ])
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--tls-cert",
                &f("server-controller.pem"),
            ])
            .args([
                "--tls-key",
                &f("server-controller.key"),
                "--client-ca",
                &f("ca.pem"),
                "--socket",
            ])
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        (etcd::Killed(child), socket)
    };
    let (mut a, a_sock) = controller("a");
    await_that("controller a leads", || ctl(&a_sock, &["cluster"]).0 == 0);
    let (_b, b_sock) = controller("b");
    // b follows: it answers, 503, with where a is (what a campaigned with: its --listen).
    await_that("controller b names the leader", || {
        ctl(&b_sock, &["cluster"])
            .2
            .contains(&format!("the leader is at https://127.0.0.1:{}", ports[0]))
    });
    let hdir = dir.path().join("host1");
    std::fs::create_dir(&hdir).unwrap();
    let endpoints = format!(
        "endpoints = [\"https://127.0.0.1:{}\", \"https://127.0.0.1:{}\"]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"",
        ports[0],
        ports[1],
        f("ca.pem"),
        f("host-host1.pem"),
        f("host-host1.key")
    );
    let config = host_toml(1, &a_sock).replace(&format!("socket = \"{}\"", a_sock.display()), &endpoints);
    let (_daemon, status) = start_with(&hdir, &config, &[]);
    await_that("host1 registered", || ctl(&a_sock, &["cluster"]).1.contains("host1"));
    power_on_c1(&a_sock);
    await_that("host1 attached c1", || attached(&status) == ["c1"]);

    // The leader dies. The host's reports must reach b: b's view of host1's last report moves
    // past the moment of the kill.
    let now_s = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let _ = a.0.kill();
    let _ = a.0.wait();
    let (killed, killed_s) = (Instant::now(), now_s());
    let deadline = killed + Duration::from_secs(15);
    let view = loop {
        assert_eq!(attached(&status), ["c1"], "c1 detached during the failover");
        let (code, out, _) = ctl(&b_sock, &["cluster", "--json"]);
        let v: Option<serde_json::Value> = (code == 0).then(|| serde_json::from_str(&out).ok()).flatten();
        let heard = v.as_ref().is_some_and(|v| {
            (v["hosts"].as_array().into_iter().flatten())
                .any(|h| h["name"] == "host1" && h["reported_s"].as_u64().is_some_and(|r| r > killed_s))
        });
        if heard {
            break v.unwrap();
        }
        assert!(Instant::now() < deadline, "host1 not heard by the new leader in 15 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let took = killed.elapsed();
    eprintln!("host1 reported to the new leader {took:?} after the leader was killed (lease 2 s; seconds are whole)");
    assert!(took <= Duration::from_secs(2 + 5), "took {took:?}");
    let vms: Vec<(String, String)> = (view["vms"].as_array().unwrap().iter())
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["host"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(vms, [("c1".to_string(), "host1".to_string())]);
    // The new leader is obeyed: c1 powered off there is detached.
    must_ctl(&b_sock, &["vm", "off", "c1"]);
    await_that("host1 detached c1", || attached(&status).is_empty());
}

/// The controller's TLS listener on a management address, its client on another machine (a
/// network namespace behind a veth): served, as an operator with the token and as a host with
/// its certificate (a client not in this host's TCP table is its address, not a closed socket).
#[test]
fn a_client_on_another_machine_reaches_the_tls_listener() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    struct Mgmt;
    impl Drop for Mgmt {
        fn drop(&mut self) {
            sh(&["ip", "link", "del", "tmt-mgmt0"]);
            sh(&["ip", "netns", "del", "tmt-cmgmt"]);
        }
    }
    drop(Mgmt);
    let _mgmt = Mgmt;
    must(&["ip", "netns", "add", "tmt-cmgmt"]);
    must(&[
        "ip",
        "link",
        "add",
        "tmt-mgmt0",
        "type",
        "veth",
        "peer",
        "name",
        "mgmt1",
        "netns",
        "tmt-cmgmt",
    ]);
    must(&["ip", "addr", "add", "10.251.7.1/24", "dev", "tmt-mgmt0"]);
    must(&["ip", "link", "set", "tmt-mgmt0", "up"]);
    must(&["ip", "-n", "tmt-cmgmt", "addr", "add", "10.251.7.2/24", "dev", "mgmt1"]);
    must(&["ip", "-n", "tmt-cmgmt", "link", "set", "mgmt1", "up"]);
    must(&["ip", "-n", "tmt-cmgmt", "link", "set", "lo", "up"]);
    let dir = tempfile::tempdir().unwrap();
    let cadir = dir.path().join("ca");
    let bin = env!("CARGO_BIN_EXE_teamster");
    ca_in(&cadir, &["init"]);
    ca_in(&cadir, &["issue-server", "ctl", "--address", "10.251.7.1"]);
    ca_in(&cadir, &["issue-host", "host1"]);
    let f = |n: &str| cadir.join(n).to_str().unwrap().to_string();
    let token = dir.path().join("token");
    std::fs::write(&token, "operator-token\n").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let port = etcd::free_port();
    let socket = dir.path().join("c.sock");
    let _controller = etcd::Killed(
        Command::new(bin)
            .args(["controller", "--state", dir.path().join("s.redb").to_str().unwrap()])
            .args([
                "--listen",
                &format!("10.251.7.1:{port}"),
                "--token-file",
                token.to_str().unwrap(),
            ])
            .args(["--tls-cert", &f("server-ctl.pem"), "--tls-key", &f("server-ctl.key")])
            .args(["--client-ca", &f("ca.pem"), "--socket", socket.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    await_that("the controller listens", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    let url = format!("https://10.251.7.1:{port}");
    let remote = |args: &[&str]| {
        let out = Command::new("timeout")
            .args([
                "20",
                "ip",
                "netns",
                "exec",
                "tmt-cmgmt",
                bin,
                "ctl",
                "--url",
                &url,
                "--ca",
                &f("ca.pem"),
            ])
            .args(args)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, out, err) = remote(&["--token-file", token.to_str().unwrap(), "cluster"]);
    assert_eq!(code, Some(0), "the operator from another machine: {out} {err}");
    // As host1, with its certificate: its request reaches the host check (and is refused
    // there, 403: `ctl cluster` is an operator's request), so the connection was served.
    let (code, _, err) = remote(&["--cert", &f("host-host1.pem"), "--key", &f("host-host1.key"), "cluster"]);
    assert!(code != Some(0) && err.contains("403"), "{err}");
}
