//! The cluster as separate machines: three hosts, each a network namespace with its own
//! Teamster switch, two uplinks of its own to an emulated physical switch (a bridge in a
//! namespace of its own, whose MAC table the test reads) and an address on a management
//! network (another bridge between namespaces, no loopback); three etcd members and two
//! controllers, each in a namespace of its own on the management network, everything over TLS
//! with certificates from `teamster controller ca` (etcd with a CA of its own).
//!
//! Each VM is a namespace with an interface towards every host (all up, all with the VM's
//! MAC, each sending a gratuitous ARP every 50 ms): a copy of the VM runs on every host, as a
//! VM left running on a host cut off would, so only the hosts' switches decide which copy the
//! physical network hears. A watch samples the physical switch's MAC table and every host's
//! attached ports all along: a VM's MAC must never come back from a host it left (two hosts
//! forwarding for it make it flap between their ports), and no VM may be attached on two
//! hosts in one sample.
//!
//! The steps, each followed by where every VM is (the controller's view, each host's attached
//! ports and the physical switch's MAC table, all three agreeing):
//! 1. four VMs powered on;
//! 2. a reservation raised until DRS migrates a VM;
//! 3. a host's management link cut (it isolates its VMs, the controller fails it and restarts
//!    them elsewhere), then its process killed, then it comes back (held down, it attaches
//!    nothing);
//! 4. the etcd leader killed (changes are served again, a VM powered on);
//! 5. the controller leader killed (the hosts follow the other, no VM lost or duplicated, the
//!    new leader obeyed).

mod controllers;
mod etcd;
mod netns;
use controllers::{ca_in, ctl};
use etcd::Killed;
use netns::raw::{in_netns, packet_socket};
use netns::*;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MGMT: &str = "tmt-mmgmt";
const PHYS: &str = "tmt-mphys";
const HOSTS: [u32; 3] = [1, 2, 3];
const ETCDS: [u32; 3] = [1, 2, 3];
const CONTROLLERS: [&str; 2] = ["a", "b"];
const VMS: [u32; 5] = [1, 2, 3, 4, 5];
/// The controllers' host timeout (s) and etcd lease (s).
/// The lease outlasts an etcd election (up to two of etcd's one-second election timeouts):
/// a shorter one lapses whenever etcd's leader dies.
const HOST_TIMEOUT_S: u64 = 13;
const LEASE_S: u64 = 5;

fn host_ns(h: u32) -> String {
    format!("tmt-mh{h}")
}
fn etcd_ns(e: u32) -> String {
    format!("tmt-me{e}")
}
fn controller_ns(c: &str) -> String {
    format!("tmt-mc{c}")
}
fn vm_ns(i: u32) -> String {
    format!("tmt-mv{i}")
}
fn vm_name(i: u32) -> String {
    format!("v{i}")
}
fn vm_mac(i: u32) -> String {
    format!("02:00:00:00:07:0{i}")
}
fn etcd_addr(e: u32) -> String {
    format!("10.79.0.1{e}")
}
fn controller_addr(c: &str) -> String {
    format!("10.79.0.2{}", if c == "a" { 1 } else { 2 })
}
fn host_addr(h: u32) -> String {
    format!("10.79.0.3{h}")
}

fn namespaces() -> Vec<String> {
    let mut all = vec![MGMT.to_string(), PHYS.to_string()];
    all.extend(HOSTS.map(host_ns));
    all.extend(ETCDS.map(etcd_ns));
    all.extend(CONTROLLERS.map(controller_ns));
    all.extend(VMS.map(vm_ns));
    all
}

/// The namespaces (and with them every link between them), removed by name when dropped.
struct Machines;

impl Machines {
    fn up() -> Machines {
        Machines::clean();
        let machines = Machines;
        for n in namespaces() {
            must(&["ip", "netns", "add", &n]);
            must(&["ip", "-n", &n, "link", "set", "lo", "up"]);
            sh(&[
                "ip",
                "netns",
                "exec",
                &n,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
            ]);
        }
        for ns in [MGMT, PHYS] {
            must(&["ip", "-n", ns, "link", "add", "br0", "type", "bridge", "stp_state", "0"]);
            must(&["ip", "-n", ns, "link", "set", "br0", "up"]);
        }
        // The management network: one port per machine, its address on `mgmt` inside.
        let members = (HOSTS.map(|h| (host_ns(h), host_addr(h))).into_iter())
            .chain(ETCDS.map(|e| (etcd_ns(e), etcd_addr(e))))
            .chain(CONTROLLERS.map(|c| (controller_ns(c), controller_addr(c))));
        for (ns, addr) in members {
            let port = mgmt_port(&ns);
            veth(MGMT, &port, &ns, "mgmt");
            must(&["ip", "-n", MGMT, "link", "set", &port, "master", "br0"]);
            must(&["ip", "-n", MGMT, "link", "set", &port, "up"]);
            must(&["ip", "-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "mgmt"]);
            must(&["ip", "-n", &ns, "link", "set", "mgmt", "up"]);
        }
        // Each host's two uplinks to the physical switch: `up1`, `up2` inside, `hHuU` on it.
        for h in HOSTS {
            for u in [1, 2] {
                let port = format!("h{h}u{u}");
                veth(PHYS, &port, &host_ns(h), &format!("up{u}"));
                must(&["ip", "-n", PHYS, "link", "set", &port, "master", "br0"]);
                must(&["ip", "-n", PHYS, "link", "set", &port, "up"]);
                must(&["ip", "-n", &host_ns(h), "link", "set", &format!("up{u}"), "up"]);
            }
        }
        // VM i's port on host h: `vI` on the host, `eH` in the VM, with the VM's MAC.
        for i in VMS {
            for h in HOSTS {
                let (port, inside) = (vm_name(i), format!("e{h}"));
                veth(&host_ns(h), &port, &vm_ns(i), &inside);
                must(&["ip", "-n", &vm_ns(i), "link", "set", &inside, "address", &vm_mac(i)]);
                must(&["ip", "-n", &vm_ns(i), "link", "set", &inside, "up"]);
                must(&["ip", "-n", &host_ns(h), "link", "set", &port, "up"]);
            }
        }
        machines
    }

    fn clean() {
        for n in namespaces() {
            sh(&["ip", "netns", "del", &n]);
        }
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        Machines::clean();
    }
}

/// A veth pair: `name` in namespace `ns`, its peer `peer` in `peer_ns`.
fn veth(ns: &str, name: &str, peer_ns: &str, peer: &str) {
    must(&[
        "ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name", peer, "netns", peer_ns,
    ]);
}

/// The management bridge's port towards namespace `ns`.
fn mgmt_port(ns: &str) -> String {
    format!("m-{}", ns.trim_start_matches("tmt-m"))
}

fn in_ns(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]);
    c
}

fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

/// etcd member `e` of three, in its namespace: clients over TLS on the management address
/// (certificates of etcd's own CA, client certificates required), peers over plain HTTP on
/// the management network, metrics on the namespace's loopback.
fn etcd_member(dir: &Path, cadir: &Path, e: u32) -> Killed {
    let client = format!("https://{}:2379", etcd_addr(e));
    let peer = |m: u32| format!("http://{}:2380", etcd_addr(m));
    let cluster: Vec<String> = ETCDS.iter().map(|m| format!("e{m}={}", peer(*m))).collect();
    let child = in_ns(&etcd_ns(e))
        .arg("etcd")
        .args(["--name", &format!("e{e}"), "--data-dir"])
        .arg(dir.join(format!("etcd{e}")))
        .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
        .args([
            "--listen-peer-urls",
            &peer(e),
            "--initial-advertise-peer-urls",
            &peer(e),
        ])
        .args(["--initial-cluster", &cluster.join(",")])
        .args([
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            "tmt-multihost",
        ])
        .args(["--listen-metrics-urls", "http://127.0.0.1:2381"])
        .arg("--cert-file")
        .arg(cadir.join(format!("server-etcd{e}.pem")))
        .arg("--key-file")
        .arg(cadir.join(format!("server-etcd{e}.key")))
        .arg("--trusted-ca-file")
        .arg(cadir.join("ca.pem"))
        .arg("--client-cert-auth")
        .stdout(Stdio::null())
        .stderr(log_file(&dir.join(format!("etcd{e}.log"))))
        .spawn()
        .unwrap();
    Killed(child)
}

/// A plain HTTP GET of `path` on `port` of namespace `ns`'s loopback; its body, if any.
fn get_in(ns: &str, port: u16, path: &str) -> Option<String> {
    let path = path.to_string();
    in_netns(ns, move || {
        use std::io::{Read, Write};
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        Some(text)
    })
    .join()
    .unwrap()
}

/// The etcd member that leads, of those in `alive`, from their metrics.
fn etcd_leader(alive: &[u32]) -> Option<u32> {
    (alive.iter().copied()).find(|e| {
        get_in(&etcd_ns(*e), 2381, "/metrics").is_some_and(|m| m.lines().any(|l| l == "etcd_server_is_leader 1"))
    })
}

/// The cluster as controller `socket` shows it, if it answers (it leads).
fn view(socket: &Path) -> Option<serde_json::Value> {
    let (code, out, _) = ctl(socket, &["cluster", "--json"]);
    (code == 0).then(|| serde_json::from_str(&out).ok()).flatten()
}

/// Each VM's host and whether it is still moving, in `view`.
fn placement(view: &serde_json::Value) -> BTreeMap<String, (String, bool)> {
    (view["vms"].as_array().into_iter().flatten())
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                (v["host"].as_str().unwrap().to_string(), !v["moving_from"].is_null()),
            )
        })
        .collect()
}

/// The VMs whose ports a host's switch has attached now, from its API (its unix socket `api`:
/// the snapshot it publishes at once after each change); none if it does not answer (killed).
fn attached(api: &Path) -> Vec<String> {
    use std::io::{Read, Write};
    let ask = || -> Option<Vec<String>> {
        let mut s = std::os::unix::net::UnixStream::connect(api).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(b"GET /api/v1/ports HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let body = text.split_once("\r\n\r\n")?.1;
        let ports: serde_json::Value = serde_json::from_str(body).ok()?;
        Some(
            (ports.as_array()?.iter())
                .filter(|p| p["attached"] == true)
                .filter_map(|p| Some(p["name"].as_str()?.to_string()))
                .collect(),
        )
    };
    ask().unwrap_or_default()
}

/// The physical switch's MAC table: each VM MAC's host (by the port it was learned on).
fn mac_table() -> BTreeMap<u32, u32> {
    let out = Command::new("timeout")
        .args(["5", "bridge", "-n", PHYS, "fdb", "show", "br", "br0"])
        .output()
        .unwrap();
    let mut table = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(mac), Some(dev)) = (
            words.first(),
            words.iter().position(|w| *w == "dev").and_then(|i| words.get(i + 1)),
        ) else {
            continue;
        };
        let vm = VMS.into_iter().find(|i| vm_mac(*i) == *mac);
        let host = dev
            .strip_prefix('h')
            .and_then(|d| d.split('u').next())
            .and_then(|h| h.parse().ok());
        if let (Some(vm), Some(host)) = (vm, host) {
            table.insert(vm, host);
        }
    }
    table
}

/// What the watch saw: each VM's hosts in the MAC table, in order (consecutive repeats
/// folded), and every sample in which a VM was attached on two hosts.
#[derive(Default, Debug)]
struct Seen {
    macs: BTreeMap<u32, Vec<u32>>,
    doubles: Vec<String>,
    samples: u64,
}

/// Samples the hosts' attached ports and the MAC table every 50 ms until stopped.
struct Watch {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    fn start(apis: Vec<PathBuf>) -> Watch {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let table = mac_table();
                // The hosts read in one order, then in the other: a VM that left one host for
                // another (break before make) shows on both in one of the orders only if the
                // reads straddle its handover, never in both; an overlap shows in both.
                let forward: Vec<Vec<String>> = apis.iter().map(|p| attached(p)).collect();
                let mut backward: Vec<Vec<String>> = apis.iter().rev().map(|p| attached(p)).collect();
                backward.reverse();
                let mut seen = s.lock().unwrap();
                seen.samples += 1;
                for (vm, host) in table {
                    let hosts = seen.macs.entry(vm).or_default();
                    if hosts.last() != Some(&host) {
                        hosts.push(host);
                    }
                }
                for i in VMS {
                    let on = |ports: &[Vec<String>]| -> Vec<usize> {
                        (0..ports.len()).filter(|h| ports[*h].contains(&vm_name(i))).collect()
                    };
                    let (on, again) = (on(&forward), on(&backward));
                    if on.len() > 1 && on == again {
                        let at = started.elapsed();
                        seen.doubles
                            .push(format!("{} attached on hosts {on:?} (0-based) at {at:?}", vm_name(i)));
                    }
                }
                drop(seen);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Watch {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// The last host VM `i`'s MAC was seen on in the MAC table.
    fn last(&self, i: u32) -> Option<u32> {
        self.seen.lock().unwrap().macs.get(&i).and_then(|h| h.last().copied())
    }

    /// Fails if any VM was attached on two hosts at once, or its MAC came back from a host it
    /// had left (two hosts forwarding for it).
    fn assert_never_twice(&self) {
        let seen = self.seen.lock().unwrap();
        assert!(seen.doubles.is_empty(), "VMs attached twice: {:?}", seen.doubles);
        for (vm, hosts) in &seen.macs {
            let mut sorted = hosts.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                hosts.len(),
                "v{vm}'s MAC came back from a host it had left: hosts {hosts:?}"
            );
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A gratuitous ARP from VM `i` (for 10.80.0.`i`), broadcast.
fn announcement(i: u32) -> Vec<u8> {
    let mac: Vec<u8> = (vm_mac(i).split(':'))
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    let ip = [10, 80, 0, i as u8];
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ip);
    f.resize(60, 0);
    f
}

/// Every copy of every VM (its interface towards each host) announces itself every 50 ms
/// until stopped.
fn announce(stop: Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    (VMS.iter().copied())
        .map(|i| {
            let stop = stop.clone();
            in_netns(&vm_ns(i), move || {
                let sockets: Vec<_> = HOSTS.iter().map(|h| packet_socket(&format!("e{h}"))).collect();
                let frame = announcement(i);
                while !stop.load(Ordering::Relaxed) {
                    for (fd, addr) in &sockets {
                        // SAFETY: sendto with a buffer and address we own, of the lengths passed.
                        unsafe {
                            libc::sendto(
                                fd.as_raw_fd(),
                                frame.as_ptr().cast(),
                                frame.len(),
                                0,
                                (addr as *const libc::sockaddr_ll).cast(),
                                size_of::<libc::sockaddr_ll>() as u32,
                            )
                        };
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect()
}

/// Host `h`'s switch.toml: two uplinks to the physical switch, every controller named.
fn host_toml(h: u32, ca: &Path) -> String {
    let f = |n: &str| ca.join(n).display().to_string();
    let endpoints: Vec<String> = CONTROLLERS
        .iter()
        .map(|c| format!("\"https://{}:7443\"", controller_addr(c)))
        .collect();
    format!(
        r#"workers = 1

[[uplinks]]
name = "uplink1"
interface = "up1"
capacity = "100M"

[[uplinks]]
name = "uplink2"
interface = "up2"
capacity = "100M"

[[port_groups]]
name = "vms"
policy = "port-id"
active = ["uplink1", "uplink2"]

[[traffic_classes]]
class = "vm"
reservation = "75M"

[controller]
endpoints = [{endpoints}]
ca = "{ca}"
cert = "{cert}"
key = "{key}"
host = "host{h}"
interface = "{{vm}}"
group = "vms"
interval_ms = 200
"#,
        endpoints = endpoints.join(", "),
        ca = f("ca.pem"),
        cert = f(&format!("host-host{h}.pem")),
        key = f(&format!("host-host{h}.key")),
    )
}

/// The test's machines and processes.
struct Rack {
    dir: tempfile::TempDir,
    hosts: BTreeMap<u32, Daemon>,
    controllers: BTreeMap<&'static str, Killed>,
}

impl Rack {
    fn socket(&self, c: &str) -> PathBuf {
        self.dir.path().join(format!("controller-{c}.sock"))
    }

    fn api(&self, h: u32) -> PathBuf {
        self.dir.path().join(format!("host{h}")).join("api.sock")
    }

    fn start_controller(&mut self, c: &'static str) {
        let (ca, eca) = (self.dir.path().join("ca"), self.dir.path().join("etcd-ca"));
        let f = |d: &Path, n: &str| d.join(n).display().to_string();
        let etcd: Vec<String> = ETCDS
            .iter()
            .map(|e| format!("https://{}:2379", etcd_addr(*e)))
            .collect();
        let child = in_ns(&controller_ns(c))
            .arg(env!("CARGO_BIN_EXE_teamster"))
            .args(["controller", "--etcd", &etcd.join(",")])
            .args([
                "--lease-s",
                &LEASE_S.to_string(),
                "--host-timeout-s",
                &HOST_TIMEOUT_S.to_string(),
            ])
            .args([
                "--etcd-ca",
                &f(&eca, "ca.pem"),
                "--etcd-cert",
                &f(&eca, "client-controller.pem"),
            ])
            .args(["--etcd-key", &f(&eca, "client-controller.key")])
            .args(["--token-file", &f(self.dir.path(), "token")])
            .args(["--listen", &format!("{}:7443", controller_addr(c))])
            .args(["--tls-cert", &f(&ca, &format!("server-controller-{c}.pem"))])
            .args(["--tls-key", &f(&ca, &format!("server-controller-{c}.key"))])
            .args(["--client-ca", &f(&ca, "ca.pem"), "--socket"])
            .arg(self.socket(c))
            .stdout(log_file(&self.dir.path().join(format!("controller-{c}.log"))))
            .stderr(log_file(&self.dir.path().join(format!("controller-{c}.log"))))
            .spawn()
            .unwrap();
        self.controllers.insert(c, Killed(child));
    }

    fn start_host(&mut self, h: u32) {
        let hdir = self.dir.path().join(format!("host{h}"));
        std::fs::create_dir_all(&hdir).unwrap();
        let config = host_toml(h, &self.dir.path().join("ca"));
        let (daemon, _) = start_in(Some(&host_ns(h)), &hdir, &config, &[], &[]);
        self.hosts.insert(h, daemon);
    }

    /// The controller that leads now (it answers its socket), waiting up to 20 s for one.
    fn leader(&self) -> &'static str {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            for c in self.controllers.keys() {
                if view(&self.socket(c)).is_some() {
                    return c;
                }
            }
            assert!(Instant::now() < deadline, "no controller leads\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn must_ctl(&self, args: &[&str]) -> String {
        let (code, out, err) = ctl(&self.socket(self.leader()), args);
        assert_eq!(code, 0, "ctl {args:?}: {err}");
        out
    }

    /// Waits (up to `secs`) until `what` holds; fails naming it, with the logs.
    fn wait(&self, what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "not within {secs} s: {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How many times the hosts isolated their VMs (no report answered for nearly the host
    /// timeout), by their logs.
    fn isolations(&self) -> usize {
        (HOSTS.iter())
            .map(|h| {
                let log = self.dir.path().join(format!("host{h}/daemon.log"));
                let text = std::fs::read_to_string(log).unwrap_or_default();
                text.matches("no report answered for").count()
            })
            .sum()
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for name in [
            "controller-a.log",
            "controller-b.log",
            "host1/daemon.log",
            "host2/daemon.log",
            "host3/daemon.log",
            "etcd1.log",
            "etcd2.log",
            "etcd3.log",
        ] {
            let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            out += &format!(
                "--- {name}\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        out
    }

    /// Waits (up to `secs`) until every VM is where `want` says (VM number -> host number), by
    /// the leading controller's view (no migration left open), every host's attached ports
    /// and the physical switch's MAC table; fails naming what disagrees.
    fn settled(&self, watch: &Watch, want: &[(u32, u32)], secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let wanted: BTreeMap<String, (String, bool)> = (want.iter())
            .map(|(i, h)| (vm_name(*i), (format!("host{h}"), false)))
            .collect();
        loop {
            let leader = self.leader();
            let by_controller = view(&self.socket(leader)).map(|v| placement(&v));
            let by_hosts: BTreeMap<u32, Vec<String>> = HOSTS.iter().map(|h| (*h, attached(&self.api(*h)))).collect();
            let by_switch: Vec<(u32, Option<u32>)> = want.iter().map(|(i, _)| (*i, watch.last(*i))).collect();
            let hosts_agree = HOSTS.iter().all(|h| {
                let mut here: Vec<String> = (want.iter())
                    .filter(|(_, w)| w == h)
                    .map(|(i, _)| vm_name(*i))
                    .collect();
                here.sort();
                let mut have = by_hosts[h].clone();
                have.sort();
                here == have
            });
            let switch_agrees = (want.iter().zip(&by_switch)).all(|((_, h), (_, seen))| *seen == Some(*h));
            if by_controller.as_ref() == Some(&wanted) && hosts_agree && switch_agrees {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not settled in {secs} s to {want:?}:\ncontroller {leader}: {by_controller:?}\nhosts: {by_hosts:?}\nMAC table: {by_switch:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn three_hosts_two_controllers_and_three_etcd_members_on_a_management_network() {
    let _one_at_a_time = netns::lock();
    let have_etcd = Command::new("etcd")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let have_bridge = sh(&["sh", "-c", "command -v bridge"]);
    if !ready()
        || !skip_unless(
            have_etcd && have_bridge,
            "etcd (Debian's etcd-server) and bridge (iproute2)",
        )
    {
        return;
    }
    let _machines = Machines::up();
    let dir = tempfile::tempdir().unwrap();
    let (cadir, etcd_ca) = (dir.path().join("ca"), dir.path().join("etcd-ca"));
    ca_in(&cadir, &["init"]);
    for c in CONTROLLERS {
        let name = format!("controller-{c}");
        ca_in(&cadir, &["issue-server", &name, "--address", &controller_addr(c)]);
    }
    for h in HOSTS {
        ca_in(&cadir, &["issue-host", &format!("host{h}")]);
    }
    ca_in(&etcd_ca, &["init"]);
    for e in ETCDS {
        ca_in(
            &etcd_ca,
            &["issue-server", &format!("etcd{e}"), "--address", &etcd_addr(e)],
        );
    }
    ca_in(&etcd_ca, &["issue-client", "controller"]);
    let token = dir.path().join("token");
    std::fs::write(&token, "operator-token\n").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();

    let mut etcd: BTreeMap<u32, Killed> = ETCDS
        .iter()
        .map(|e| (*e, etcd_member(dir.path(), &etcd_ca, *e)))
        .collect();
    let mut rack = Rack {
        dir,
        hosts: BTreeMap::new(),
        controllers: BTreeMap::new(),
    };
    await_that("etcd's members elect a leader", || etcd_leader(&ETCDS).is_some());
    rack.start_controller("a");
    let first = rack.leader();
    assert_eq!(first, "a");
    rack.start_controller("b");
    await_that("controller b follows, naming a", || {
        ctl(&rack.socket("b"), &["cluster"])
            .2
            .contains(&format!("the leader is at https://{}:7443", controller_addr("a")))
    });
    for h in HOSTS {
        rack.start_host(h);
    }
    await_that("the three hosts registered", || {
        view(&rack.socket("a")).is_some_and(|v| v["hosts"].as_array().is_some_and(|h| h.len() == 3))
    });
    let stop = Arc::new(AtomicBool::new(false));
    let _announcers = announce(stop.clone());
    let watch = Watch::start(HOSTS.iter().map(|h| rack.api(*h)).collect());

    // 1. Four VMs: host1 65M of its 75M, host2 25M, host3 15M.
    for (i, h, r) in [(1, 1, "35M"), (2, 1, "30M"), (3, 2, "25M"), (4, 3, "15M")] {
        let (name, mac, host) = (vm_name(i), vm_mac(i), format!("host{h}"));
        rack.must_ctl(&[
            "vm",
            "power-on",
            &name,
            "--host",
            &host,
            "--mac",
            &mac,
            "--group",
            "vms",
            "--reservation",
            r,
        ]);
    }
    rack.settled(&watch, &[(1, 1), (2, 1), (3, 2), (4, 3)], 20);
    eprintln!("1. powered on: v1, v2 on host1, v3 on host2, v4 on host3");

    // 2. v1 to 65M: host1 holds 95M of 75M. v1 fits on no other host; v2 moves, to the host
    // with the most headroom (host3: 60M).
    let out = rack.must_ctl(&["vm", "set", "v1", "--reservation", "65M", "--json"]);
    let moved: serde_json::Value = serde_json::from_str(&out).unwrap();
    let moves: Vec<(String, String)> = (moved["migrations"].as_array().into_iter().flatten())
        .map(|m| (m["vm"].as_str().unwrap().into(), m["to"].as_str().unwrap().into()))
        .collect();
    assert_eq!(moves, [("v2".to_string(), "host3".to_string())], "{out}");
    let at = Instant::now();
    rack.settled(&watch, &[(1, 1), (2, 3), (3, 2), (4, 3)], 20);
    eprintln!("2. DRS moved v2 to host3; settled in {:?}", at.elapsed());

    // 3. host3's management link is cut: it detaches its VMs by its own timer, the controller
    // fails it and restarts them where they fit (both on host2: host1 has 10M left).
    must(&["ip", "-n", MGMT, "link", "set", &mgmt_port(&host_ns(3)), "down"]);
    let cut = Instant::now();
    rack.wait("host3 isolates its VMs", HOST_TIMEOUT_S + 5, || {
        attached(&rack.api(3)).is_empty()
    });
    let isolated_after = cut.elapsed();
    // By its own timer, two report intervals and a second before the host timeout counted
    // from its last answered report (sent before the cut): before the controller may fail it.
    assert!(
        isolated_after < Duration::from_secs(HOST_TIMEOUT_S - 1),
        "host3 detached its VMs {isolated_after:?} after the cut: not before the controller may restart them (host timeout {HOST_TIMEOUT_S} s)"
    );
    rack.settled(&watch, &[(1, 1), (2, 2), (3, 2), (4, 2)], 30);
    eprintln!(
        "3. host3 cut off: it detached its VMs {isolated_after:?} after the cut; v2 and v4 restarted on host2 and heard there {:?} after it (host timeout {HOST_TIMEOUT_S} s)",
        cut.elapsed()
    );
    // Its process killed while cut off, then the link restored and the host started again:
    // held down, it is assigned nothing, and attaches nothing.
    let mut host3 = rack.hosts.remove(&3).unwrap();
    let _ = host3.0.kill();
    let _ = host3.0.wait();
    std::mem::forget(host3);
    must(&["ip", "-n", MGMT, "link", "set", &mgmt_port(&host_ns(3)), "up"]);
    rack.start_host(3);
    await_that("host3 reports again", || {
        view(&rack.socket(rack.leader())).is_some_and(|v| {
            (v["hosts"].as_array().into_iter().flatten()).any(|h| h["name"] == "host3" && h["down_since_s"].is_null())
        })
    });
    rack.wait("host3's hold-down ends", HOST_TIMEOUT_S + 5, || {
        view(&rack.socket(rack.leader())).is_some_and(|v| {
            (v["hosts"].as_array().into_iter().flatten()).any(|h| h["name"] == "host3" && h["unavailable"].is_null())
        })
    });
    rack.settled(&watch, &[(1, 1), (2, 2), (3, 2), (4, 2)], 5);
    eprintln!("3. host3 killed and back: it attached nothing");

    // 4. The etcd leader is killed: changes are served again once etcd elects another (a VM
    // powered on, to host3: the most headroom), and no host isolates its VMs meanwhile (the
    // controller answers reports while etcd elects).
    let isolated = rack.isolations();
    let alive: Vec<u32> = ETCDS.to_vec();
    let mut leader = None;
    await_that("etcd has a leader", || {
        leader = etcd_leader(&alive);
        leader.is_some()
    });
    let leader = leader.unwrap();
    drop(etcd.remove(&leader));
    let killed = Instant::now();
    let (mac5, deadline) = (vm_mac(5), killed + Duration::from_secs(20));
    loop {
        let socket = rack.socket(rack.leader());
        let (code, _, err) = ctl(
            &socket,
            &[
                "vm",
                "power-on",
                "v5",
                "--mac",
                &mac5,
                "--group",
                "vms",
                "--reservation",
                "5M",
            ],
        );
        if code == 0 || err.contains("already on") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no change served 20 s after the etcd leader died: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "4. etcd leader e{leader} killed: a power-on was served {:?} later",
        killed.elapsed()
    );
    rack.settled(&watch, &[(1, 1), (2, 2), (3, 2), (4, 2), (5, 3)], 20);
    assert_eq!(rack.isolations(), isolated, "a host isolated its VMs\n{}", rack.logs());

    // 5. The controller leader is killed: the hosts report to the other within the lease and
    // a few seconds, and every VM stays where it was, attached all along.
    let was = rack.leader();
    let other = if was == "a" { "b" } else { "a" };
    let now_s = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    drop(rack.controllers.remove(was));
    let (killed, killed_s) = (Instant::now(), now_s());
    rack.wait(
        &format!("the hosts heard by controller {other} after {was} died"),
        20,
        || {
            view(&rack.socket(other)).is_some_and(|v| {
                (v["hosts"].as_array().into_iter().flatten())
                    .all(|h| h["reported_s"].as_u64().is_some_and(|r| r > killed_s))
            })
        },
    );
    let took = killed.elapsed();
    eprintln!("5. controller {was} killed: all three hosts reported to {other} {took:?} later (lease {LEASE_S} s; report times are whole seconds)");
    assert!(took <= Duration::from_secs(LEASE_S + 6), "took {took:?}");
    rack.settled(&watch, &[(1, 1), (2, 2), (3, 2), (4, 2), (5, 3)], 10);
    assert_eq!(rack.isolations(), isolated, "a host isolated its VMs\n{}", rack.logs());
    // The new leader is obeyed: v5 powered off is detached by host3.
    rack.must_ctl(&["vm", "off", "v5"]);
    await_that("host3 detached v5", || attached(&rack.api(3)).is_empty());

    stop.store(true, Ordering::Relaxed);
    let samples = watch.seen.lock().unwrap().samples;
    eprintln!(
        "the watch took {samples} samples; MAC table history: {:?}",
        watch.seen.lock().unwrap().macs
    );
    watch.assert_never_twice();
}
