//! An operator's change, or a name, that breaks others (SECURITY.md): each attack sent as an
//! attacker or a careless neighbour would, against a running switch, with its effect measured.
//!
//! - An edit to `switch.toml` left for a reload, then a VM starting (the libvirt hook) and a
//!   change through the API; and the reverse, a reload of an edit made on a copy older than a
//!   change the API saved.
//! - The libvirt hook for a domain named like an operator's port, for a domain named like
//!   another domain's hashed port name, for a NIC hot-plugged while the VM ran, and across a
//!   restart of the switch.
//! - A macvlan device on an uplink, named as a port rule's taps are.
//! - Hostile domain XML: nesting fourteen thousand deep, and two thousand interfaces.
//!
//! Each test collects its figures (what the attack did) and checks them at the end, so a run on
//! a switch without the defences prints every figure before it fails.
//! Topology: [`netns`], plus a third VM (tmt-vm3 on tmt-v3) where a test needs one.

mod netns;
use netns::*;

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The figures a test measured, each with whether it is what the defence should give.
#[derive(Default)]
struct Figures(Vec<(String, bool)>);

impl Figures {
    fn note(&mut self, what: impl Into<String>, ok: bool) {
        let what = what.into();
        eprintln!("figure: {what} [{}]", if ok { "ok" } else { "WRONG" });
        self.0.push((what, ok));
    }

    /// Fails, listing every figure, if any is wrong.
    fn check(self) {
        let wrong: Vec<&str> = self.0.iter().filter(|(_, ok)| !ok).map(|(w, _)| w.as_str()).collect();
        assert!(wrong.is_empty(), "wrong: {wrong:#?}");
    }
}

/// Links this file makes beyond the shared topology, removed by name whatever happens.
struct Extra;

impl Drop for Extra {
    fn drop(&mut self) {
        for l in ["tmt-v3", "tmt-r9"] {
            sh(&["ip", "link", "del", l]);
        }
        sh(&["ip", "netns", "del", "tmt-vm3"]);
    }
}

/// A third VM: tmt-vm3 with eth0 (02:00:00:00:00:03, 10.77.0.3/24) behind tmt-v3.
fn third_vm() -> Extra {
    let extra = Extra;
    sh(&["ip", "link", "del", "tmt-v3"]);
    sh(&["ip", "netns", "del", "tmt-vm3"]);
    must(&["ip", "netns", "add", "tmt-vm3"]);
    must(&["ip", "-n", "tmt-vm3", "link", "set", "lo", "up"]);
    vm_link(3);
    extra
}

/// The switch's ports, from `ctl --json ports`.
fn ports(dir: &Path) -> Vec<serde_json::Value> {
    let (code, out, err) = ctl(dir, &["--json", "ports"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<serde_json::Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// The port named `name`, if the switch has it.
fn port(dir: &Path, name: &str) -> Option<serde_json::Value> {
    ports(dir).into_iter().find(|p| p["name"] == name)
}

/// The event log's text.
fn events(dir: &Path) -> String {
    ctl(dir, &["events"]).1
}

/// The API switch with vm1 only (vm2's interface exists but is not a port).
fn vm1_only() -> String {
    let all = api_switch();
    let cut = all.rfind("[[ports]]").unwrap();
    all[..cut].to_string()
}

/// A domain's XML as libvirt hands its hooks: Teamster's metadata (group `vms`) and an
/// `ethernet` interface per (tap, MAC), plus `extra` inside the metadata.
fn domain(name: &str, nics: &[(&str, &str)], extra: &str) -> String {
    let nics: String = nics
        .iter()
        .map(|(dev, mac)| {
            format!("    <interface type='ethernet'>\n      <mac address='{mac}'/>\n      <target dev='{dev}' managed='no'/>\n      <model type='virtio'/>\n    </interface>\n")
        })
        .collect();
    format!(
        "<domain type='kvm'>\n  <name>{name}</name>\n  <metadata>\n    <teamster:switch xmlns:teamster=\"https://teamster.dev/libvirt/1\" group=\"vms\"/>\n{extra}\n  </metadata>\n  <devices>\n{nics}  </devices>\n</domain>"
    )
}

/// Runs the shipped hook script as libvirt does (`qemu DOMAIN OP SUB -`, the XML on standard
/// input, a bare environment), bounded to `limit`; (exit code, or -1 if killed at the limit,
/// standard error, how long it took).
fn hook_within(socket: &Path, name: &str, xml: &str, op: &str, sub: &str, limit: Duration) -> (i32, String, Duration) {
    use std::io::Write;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../packaging/libvirt/qemu");
    let t0 = Instant::now();
    let mut child = Command::new("timeout")
        .arg(limit.as_secs().to_string())
        .arg(script)
        .args([name, op, sub, "-"])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("TEAMSTER", env!("CARGO_BIN_EXE_teamster"))
        .env("TEAMSTER_SOCKET", socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let xml = xml.to_string();
    // Written from a thread: a hook that dies early must not leave this one blocked on a pipe.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(xml.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    // Killed at the limit: -1; killed by a signal (`timeout` dies of it too): 128 + the signal,
    // as a shell reports it (134: SIGABRT, a stack overflow).
    let code = match (
        out.status.code(),
        std::os::unix::process::ExitStatusExt::signal(&out.status),
    ) {
        (Some(124), _) => -1,
        (Some(c), _) => c,
        (None, Some(signal)) => 128 + signal,
        (None, None) => -1,
    };
    (code, String::from_utf8_lossy(&out.stderr).to_string(), t0.elapsed())
}

fn hook(socket: &Path, name: &str, xml: &str, op: &str, sub: &str) -> (i32, String) {
    let (code, err, _) = hook_within(socket, name, xml, op, sub, Duration::from_secs(30));
    (code, err)
}

/// Pings from `ns` to the remote host that were answered, of ten.
fn answered(ns: &str) -> usize {
    received(&ping(ns, "10.77.0.100", "10", "0.2"))
}

/// Sends SIGHUP and waits for the reload's outcome in the event log (one more `reloaded` or
/// `reload refused` than before); returns that event's line.
fn reload(daemon: &Daemon, dir: &Path) -> String {
    let outcomes = |e: &str| {
        e.lines()
            .filter(|l| l.contains("switch.toml reloaded") || l.contains("reload refused"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let before = outcomes(&events(dir)).len();
    signal(&daemon.0, libc::SIGHUP);
    let mut last = String::new();
    await_that("the reload's outcome is in the event log", || {
        let now = outcomes(&events(dir));
        last = now.last().cloned().unwrap_or_default();
        now.len() > before
    });
    last
}

/// An operator's edit waiting for a reload is never overwritten: a VM starting (the hook) does
/// not touch `switch.toml`, a change through the API is refused (409, naming the file, in the
/// event log), and the reload then applies the edit. The reverse: a reload of a copy edited
/// from before a change the API saved is refused, naming both revisions.
#[test]
fn an_operators_edit_is_never_lost_to_the_hook_or_the_api() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let _vm3 = third_vm();
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, _status) = start(dir.path(), &vm1_only());
    let socket = dir.path().join("api.sock");
    let saved = dir.path().join("switch.toml");
    let mut fig = Figures::default();

    // The operator adds vm2 to the file, to reload later.
    let vm2 = "\n[[ports]]\nname = \"vm2\"\ninterface = \"tmt-v2\"\nmac = \"02:00:00:00:00:02\"\ngroup = \"vms\"\n";
    let edited = format!("{}{vm2}", std::fs::read_to_string(&saved).unwrap());
    std::fs::write(&saved, &edited).unwrap();
    // A VM starts meanwhile.
    let web1 = domain("web1", &[("tmt-v3", "02:00:00:00:00:03")], "");
    let (code, err) = hook(&socket, "web1", &web1, "started", "begin");
    assert_eq!(code, 0, "{err}");
    let kept = std::fs::read_to_string(&saved).unwrap() == edited;
    fig.note(
        format!("the edit is still in switch.toml after the hook started a VM: {kept}"),
        kept,
    );
    // A change through the API while the edit waits.
    let (code, _, err) = ctl(dir.path(), &["port", "vm1", "--limit", "900M"]);
    let refused = code != 0 && err.contains("changed on disk") && err.contains(saved.to_str().unwrap());
    fig.note(
        format!("an API change over the unreloaded edit: exit {code}, {}", err.trim()),
        refused,
    );
    let kept = std::fs::read_to_string(&saved).unwrap() == edited;
    fig.note(
        format!("the edit is still in switch.toml after the API change: {kept}"),
        kept,
    );
    let logged = events(dir.path()).contains("change refused:");
    fig.note(format!("the refusal is in the event log: {logged}"), logged);
    let outcome = reload(&daemon, dir.path());
    let added = outcome.contains("1 ports added");
    fig.note(format!("the reload: {}", outcome.trim()), added);
    fig.note(
        format!(
            "vm2 is a port and carries traffic: {}",
            port(dir.path(), "vm2").is_some()
        ),
        port(dir.path(), "vm2").is_some() && answered("tmt-vm2") > 0,
    );
    // Reloaded, the API changes the file again, and marks its revision.
    let (code, _, err) = ctl(dir.path(), &["port", "vm1", "--limit", "900M"]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&saved).unwrap();
    fig.note(
        format!("the saved file's first line: {}", text.lines().next().unwrap_or("")),
        text.starts_with("# Teamster switch configuration, revision "),
    );

    // The reverse order: the operator copies the file, an API change is saved, the copy is
    // edited and written back, and reloaded.
    let copy = std::fs::read_to_string(&saved).unwrap();
    let add = [
        "port",
        "add",
        "vm9",
        "--interface",
        "tmt-x9",
        "--group",
        "vms",
        "--mac",
        "02:00:00:00:00:09",
    ];
    let (code, _, err) = ctl(dir.path(), &add);
    assert_eq!(code, 0, "{err}");
    std::fs::write(&saved, copy.replace("policy = \"port-id\"", "policy = \"source-mac\"")).unwrap();
    let outcome = reload(&daemon, dir.path());
    let vm9 = port(dir.path(), "vm9").is_some();
    fig.note(
        format!(
            "after a reload of a copy older than the API's change, vm9 is a port: {vm9} ({})",
            outcome.trim()
        ),
        vm9 && outcome.contains("reload refused") && outcome.contains("is an edit of revision"),
    );
    let (_, groups, _) = ctl(dir.path(), &["--json", "groups"]);
    fig.note(
        "the refused reload changed no teaming".to_string(),
        groups.contains("port-id") && !groups.contains("source-mac"),
    );
    let (code, _) = hook(&socket, "web1", &web1, "stopped", "end");
    assert_eq!(code, 0);
    stop_cleanly(&mut daemon);
    fig.check();
}

/// The 64-bit FNV-1a hash the switch names a domain's ports by when their plain name will not
/// do, as `vm-HASH-N`.
fn hashed_name(domain: &str, n: usize) -> String {
    let hash = domain.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("vm-{hash:016x}-{n}")
}

/// The ports of domain `name`.
fn owned(dir: &Path, name: &str) -> Vec<String> {
    ports(dir)
        .into_iter()
        .filter(|p| p["owner"] == name)
        .map(|p| p["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The hook only ever touches its own domain's ports: a domain named `db` leaves the operator's
/// `db-0` alone at start and at stop, a domain named like another's hashed port name does not
/// take that port over, a NIC hot-plugged while the VM ran (seen at `reconnect`) goes at
/// `stopped` though the XML there no longer lists it, and a restart keeps each port's owner.
#[test]
fn the_hook_touches_only_its_own_domains_ports() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let _vm3 = third_vm();
    let dir = tempfile::tempdir().unwrap();
    let config = vm1_only().replace("name = \"vm1\"", "name = \"db-0\"");
    let (mut daemon, _status) = start(dir.path(), &config);
    let socket = dir.path().join("api.sock");
    let saved = dir.path().join("switch.toml");
    let mut fig = Figures::default();

    // A tenant's domain named `db` starts, on tmt-v2.
    let db = domain("db", &[("tmt-v2", "02:00:00:00:00:02")], "");
    let (code, err) = hook(&socket, "db", &db, "started", "begin");
    assert_eq!(code, 0, "{err}");
    let op = answered("tmt-vm1");
    fig.note(
        format!("the operator's db-0 (vm1) answered pings after domain db started: {op}/10"),
        op >= 8,
    );
    let listed = std::fs::read_to_string(&saved).unwrap().contains("name = \"db-0\"");
    fig.note(format!("db-0 is still in switch.toml: {listed}"), listed);
    fig.note(
        format!("domain db's ports: {:?}", owned(dir.path(), "db")),
        owned(dir.path(), "db") == [hashed_name("db", 0)] && answered("tmt-vm2") > 0,
    );
    let (code, err) = hook(&socket, "db", &db, "stopped", "end");
    assert_eq!(code, 0, "{err}");
    let op = if port(dir.path(), "db-0").is_some() {
        answered("tmt-vm1")
    } else {
        0
    };
    fig.note(format!("db-0 answered pings after domain db stopped: {op}/10"), op >= 8);

    // A domain with a name too long for a port name gets `vm-HASH-0`; another domain is named
    // `vm-HASH`, so its plain name for its first port is the first domain's port's.
    let long = format!("tenant-a-{}", "x".repeat(70));
    let victim = domain(&long, &[("tmt-v2", "02:00:00:00:00:02")], "");
    let (code, err) = hook(&socket, &long, &victim, "started", "begin");
    assert_eq!(code, 0, "{err}");
    let squatter = hashed_name(&long, 0).trim_end_matches("-0").to_string();
    let attack = domain(&squatter, &[("tmt-v3", "02:00:00:00:00:03")], "");
    let (code, err) = hook(&socket, &squatter, &attack, "started", "begin");
    eprintln!("the squatter's start: exit {code} {err}");
    let victim_pings = answered("tmt-vm2");
    fig.note(
        format!("the long-named domain's VM answered pings after `{squatter}` started: {victim_pings}/10"),
        victim_pings >= 8,
    );
    fig.note(
        format!(
            "ports: {:?} and {:?}",
            owned(dir.path(), &long),
            owned(dir.path(), &squatter)
        ),
        owned(dir.path(), &long) == [hashed_name(&long, 0)]
            && owned(dir.path(), &squatter) == [hashed_name(&squatter, 0)],
    );
    for (name, xml) in [(&long, &victim), (&squatter, &attack)] {
        assert_eq!(hook(&socket, name, xml, "stopped", "end").0, 0);
    }

    // A NIC hot-plugged into a running VM: libvirt runs no hook, so the switch learns of it at
    // the next reconnect; then it is unplugged, and the VM stops with the XML of one NIC.
    let one = domain("web1", &[("tmt-v2", "02:00:00:00:00:02")], "");
    let two = domain(
        "web1",
        &[("tmt-v2", "02:00:00:00:00:02"), ("tmt-v3", "02:00:00:00:00:03")],
        "",
    );
    assert_eq!(hook(&socket, "web1", &one, "started", "begin").0, 0);
    assert_eq!(hook(&socket, "web1", &two, "reconnect", "begin").0, 0);
    let plugged = ports(dir.path()).iter().filter(|p| p["interface"] == "tmt-v3").count();
    assert_eq!(plugged, 1, "the hot-plugged NIC's port, at reconnect");
    assert_eq!(hook(&socket, "web1", &one, "stopped", "end").0, 0);
    let left: Vec<String> = ports(dir.path())
        .iter()
        .filter(|p| p["name"] != "db-0")
        .map(|p| p["name"].to_string())
        .collect();
    fig.note(format!("ports left after web1 stopped: {left:?}"), left.is_empty());

    // A restart keeps the hook's ports with their owner, out of switch.toml; but not a port
    // whose interface name now belongs to another interface (while the switch was down, the
    // VM's NIC went and another VM's took the name: here, its MAC changed).
    assert_eq!(hook(&socket, "web1", &two, "started", "begin").0, 0);
    stop_cleanly(&mut daemon);
    must(&["ip", "link", "set", "tmt-v3", "address", "02:00:00:00:0a:03"]);
    let text = std::fs::read_to_string(&saved).unwrap();
    let (mut daemon, _status) = start(dir.path(), &text);
    let p = port(dir.path(), "web1-0").unwrap_or_default();
    fig.note(
        format!(
            "after a restart web1-0 has origin {} and owner {}",
            p["origin"], p["owner"]
        ),
        p["origin"] == "libvirt" && p["owner"] == "web1",
    );
    let other = port(dir.path(), "web1-1").is_some();
    fig.note(
        format!("after a restart web1-1, whose tmt-v3 is now another interface, is restored: {other}"),
        !other,
    );
    let in_file = std::fs::read_to_string(&saved).unwrap().contains("web1-0");
    fig.note(format!("web1-0 is in switch.toml: {in_file}"), !in_file);
    assert_eq!(hook(&socket, "web1", &one, "stopped", "end").0, 0);
    fig.note(
        format!("ports after web1 stopped: {}", ports(dir.path()).len()),
        ports(dir.path()).len() == 1,
    );
    stop_cleanly(&mut daemon);
    fig.check();
}

/// A raw packet socket on eth0 of the calling thread's namespace (every protocol), with the
/// kernel's VLAN auxiliary data on, and its address to send to.
fn packet_socket() -> (OwnedFd, libc::sockaddr_ll) {
    let (fd, addr) = raw::packet_socket("eth0");
    let on: libc::c_int = 1;
    // SAFETY: setsockopt with an int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_AUXDATA,
            (&on as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as u32,
        )
    };
    assert_eq!(rc, 0, "PACKET_AUXDATA: {}", std::io::Error::last_os_error());
    (fd, addr)
}

/// The test's own EtherType (IEEE local experimental), so nothing else is counted.
const MARKER: [u8; 2] = [0x88, 0xb5];

/// `n` broadcast frames of the test's EtherType from `src`, carrying `label`.
fn broadcasts(src: [u8; 6], label: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut f = vec![0xff; 6];
            f.extend_from_slice(&src);
            f.extend_from_slice(&MARKER);
            f.extend_from_slice(format!("{label} {i}").as_bytes());
            f.resize(60, 0);
            f
        })
        .collect()
}

/// Sends `frames` out of eth0 in namespace `ns`, 10 ms apart.
fn send_from(ns: &str, frames: Vec<Vec<u8>>) {
    raw::send_on(ns, "eth0", frames, Duration::from_millis(10));
}

/// Counts the frames carrying `label` that arrive at eth0 in namespace `ns`, until `stop`:
/// (untagged, tagged). A tag the kernel took off on the way in is in the auxiliary data.
fn watch(ns: &str, label: &'static str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(usize, usize)> {
    let (ready_tx, ready) = mpsc::channel();
    let watcher = raw::in_netns(ns, move || {
        let (fd, _) = packet_socket();
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        // SAFETY: setsockopt with a timeval of the size passed.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&timeout as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as u32,
            )
        };
        ready_tx.send(()).unwrap();
        let (mut untagged, mut tagged) = (0, 0);
        let mut buf = [0u8; 2048];
        // Aligned for the cmsghdr the kernel writes at its start.
        let mut control = [0u64; 32];
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: sockaddr_ll and msghdr are plain old data; zeroed is valid.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // SAFETY: as above.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
            msg.msg_namelen = size_of::<libc::sockaddr_ll>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = size_of_val(&control);
            // SAFETY: recvmsg into buffers we own, described by `msg`.
            let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, 0) };
            if n < 14 || from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let frame = &buf[..n as usize];
            let inner = if frame[12..14] == [0x81, 0x00] { 18 } else { 14 };
            let ours = frame.len() >= inner
                && frame[inner - 2..inner] == MARKER
                && frame[inner..].starts_with(label.as_bytes());
            if !ours {
                continue;
            }
            let mut tag_aside = false;
            // SAFETY: walking the control messages recvmsg wrote, within msg_controllen.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA {
                        let aux = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::tpacket_auxdata);
                        tag_aside = aux.tp_status & libc::TP_STATUS_VLAN_VALID != 0;
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
            if tag_aside || inner == 18 {
                tagged += 1;
            } else {
                untagged += 1;
            }
        }
        (untagged, tagged)
    });
    ready.recv_timeout(Duration::from_secs(5)).expect("watcher listening");
    watcher
}

/// Sends 50 broadcasts labelled `label` from `from`'s eth0 and counts them at `to`'s eth0:
/// (untagged, tagged).
fn broadcast_across(from: &str, src: [u8; 6], to: &str, label: &'static str) -> (usize, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(to, label, stop.clone());
    send_from(from, broadcasts(src, label, 50));
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    watcher.join().unwrap()
}

/// A port rule takes taps and veths only: a macvlan device made on an uplink with a name the
/// rule matches (and a MAC of libvirt's shape) is not attached, so the untagged physical
/// network and VLAN 100 stay apart: broadcasts sent on each are counted on the other. The group
/// accepts forged transmits (as one for nested VMs does), so nothing but the rule stands
/// between the two.
#[test]
fn a_port_rule_never_takes_a_macvlan_on_an_uplink() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let _extra = Extra;
    let config = r#"workers = 1
[[uplinks]]
name = "uplink1"
interface = "tmt-u1"
capacity = "1G"
[[port_groups]]
name = "v100"
policy = "port-id"
active = ["uplink1"]
vlan = 100
security = { forged_transmits = "accept" }
[[ports]]
name = "vm1"
interface = "tmt-v1"
mac = "02:00:00:00:00:01"
group = "v100"
[[port_rules]]
match = "tmt-r*"
group = "v100"
"#;
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, _status) = start(dir.path(), config);
    let mut fig = Figures::default();
    // Before the attack: nothing crosses between the untagged network and VLAN 100.
    let remote_mac = [2, 0, 0, 0, 0, 0x64];
    let vm1_mac = [2, 0, 0, 0, 0, 1];
    let (inward, _) = broadcast_across("tmt-remote", remote_mac, "tmt-vm1", "tmt-in-before");
    assert_eq!(inward, 0, "untagged broadcasts reach VLAN 100 before any attack");

    must(&[
        "ip",
        "link",
        "add",
        "tmt-r9",
        "link",
        "tmt-u1",
        "address",
        "fe:00:00:00:00:99",
        "type",
        "macvlan",
    ]);
    must(&["ip", "link", "set", "tmt-r9", "up"]);
    await_that("the port rules have looked at tmt-r9", || {
        port(dir.path(), "tmt-r9").is_some() || events(dir.path()).contains("interface tmt-r9 matches port_rules[0]")
    });
    let matched = port(dir.path(), "tmt-r9").is_some();
    fig.note(
        format!("the macvlan tmt-r9 on uplink tmt-u1 is a port of VLAN 100: {matched}"),
        !matched,
    );
    let said = events(dir.path())
        .lines()
        .find(|l| l.contains("interface tmt-r9"))
        .unwrap_or("")
        .to_string();
    fig.note(
        format!("the event log: {}", said.trim()),
        said.contains("a macvlan device") && said.contains("taps and veths only"),
    );
    let (inward, _) = broadcast_across("tmt-remote", remote_mac, "tmt-vm1", "tmt-in");
    fig.note(
        format!("untagged broadcasts from the physical network that reached vm1 in VLAN 100: {inward}/50"),
        inward == 0,
    );
    let (untagged, tagged) = broadcast_across("tmt-vm1", vm1_mac, "tmt-remote", "tmt-out");
    fig.note(
        format!(
            "vm1's VLAN 100 broadcasts at the remote host: {untagged}/50 untagged (native VLAN), {tagged}/50 tagged"
        ),
        untagged == 0 && tagged >= 45,
    );
    stop_cleanly(&mut daemon);
    fig.check();
}

/// A process's resident memory that is its own (not the binary's pages), in MiB.
fn anon_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Hostile domain XML: nesting 14,000 deep (about 100 KB) is refused with an error, never a
/// crash, and at `reconnect` and `attach` the hook still exits 0 (libvirt would kill the running
/// VM); a domain with 2,000 interfaces is added and removed in one change each, in seconds, and
/// the switch gives back the memory they took.
#[test]
fn hostile_domain_xml_neither_crashes_the_hook_nor_swamps_the_switch() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, _status) = start(dir.path(), &vm1_only());
    let socket = dir.path().join("api.sock");
    let mut fig = Figures::default();

    let deep = domain(
        "deep",
        &[("tmt-v2", "02:00:00:00:00:02")],
        &format!("{}{}", "<a>".repeat(14_000), "</a>".repeat(14_000)),
    );
    eprintln!("the deep domain's XML: {} bytes", deep.len());
    for (op, sub, want) in [
        ("reconnect", "begin", 0),
        ("attach", "begin", 0),
        ("started", "begin", 2),
        ("stopped", "end", 0),
    ] {
        let (code, err) = hook(&socket, "deep", &deep, op, sub);
        let clear = want == 0 && op == "stopped" || err.contains("more than 256 deep");
        fig.note(
            format!(
                "{op} {sub} with 14,000 levels of nesting: exit {code} ({})",
                err.lines().next().unwrap_or("")
            ),
            code == want && clear,
        );
    }
    fig.note(
        format!("ports after the deep domain: {}", ports(dir.path()).len()),
        ports(dir.path()).len() == 1,
    );

    let pid = daemon.0.id();
    let taps: Vec<(String, String)> = (0..2000)
        .map(|i| {
            (
                format!("tmt-b{i}"),
                format!("52:54:00:77:{:02x}:{:02x}", i >> 8, i & 0xff),
            )
        })
        .collect();
    let nics: Vec<(&str, &str)> = taps.iter().map(|(d, m)| (d.as_str(), m.as_str())).collect();
    let big = domain("big", &nics, "");
    let before = anon_mib(pid);
    let limit = Duration::from_secs(60);
    let (code, err, took) = hook_within(&socket, "big", &big, "started", "begin", limit);
    let added = ports(dir.path()).len();
    fig.note(
        format!(
            "2,000 interfaces: `started` exit {code} in {:.2} s, {added} ports",
            took.as_secs_f64()
        ),
        code == 0 && added == 2001 && took < Duration::from_secs(20),
    );
    if code != 0 {
        eprintln!("{err}");
    }
    let peak = anon_mib(pid);
    let (code, _, took) = hook_within(&socket, "big", &big, "stopped", "end", limit);
    let left = ports(dir.path()).len();
    fig.note(
        format!(
            "2,000 interfaces: `stopped` exit {code} in {:.2} s, {left} ports left",
            took.as_secs_f64()
        ),
        code == 0 && left == 1 && took < Duration::from_secs(20),
    );
    // The memory is given back once the snapshots showing the ports are replaced.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = anon_mib(pid);
    while after > before + 32.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = anon_mib(pid);
    }
    fig.note(
        format!("the switch's own memory: {before:.1} MiB before, {peak:.1} MiB with the ports, {after:.1} MiB after"),
        after <= before + 32.0,
    );
    assert!(reaches_remote("tmt-vm1"), "vm1 still switches");
    stop_cleanly(&mut daemon);
    fig.check();
}
