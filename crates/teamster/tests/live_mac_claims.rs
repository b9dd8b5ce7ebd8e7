//! A port given the gateway's MAC, tried as the issue found it: through the API (`teamster
//! ctl port add`, as the libvirt hook, the controller and port rules end in the same place)
//! with its tap absent, with its tap present and a hostile VM sending from the address, and in
//! `switch.toml` so that it attaches before the gateway is heard at all. Each time the other
//! VMs ping the gateway (the remote host, 10.77.0.100, behind the uplinks): none may be lost to
//! the port. Then the operator's word (`--mac-takeover`) does give the port the address.
//! Topology and helpers: [`netns`].

mod netns;
use netns::raw::{mac_of, send_on};
use netns::*;

use std::path::Path;
use std::time::Duration;

const PINGS: usize = 10;

fn text(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

/// The hostile VM's tap: tmt-t1 on the switch, eth1 in tmt-vm2 with the gateway's MAC (and no
/// IPv6, so that it sends only what the test makes it send).
fn hostile_tap(gateway: [u8; 6]) {
    must(&[
        "ip", "link", "add", "tmt-t1", "type", "veth", "peer", "name", "eth1", "netns", "tmt-vm2",
    ]);
    must(&["ip", "-n", "tmt-vm2", "link", "set", "eth1", "address", &text(gateway)]);
    must(&[
        "ip",
        "netns",
        "exec",
        "tmt-vm2",
        "sysctl",
        "-qw",
        "net.ipv6.conf.eth1.disable_ipv6=1",
    ]);
    must(&["ip", "-n", "tmt-vm2", "link", "set", "eth1", "up"]);
    must(&["ip", "link", "set", "tmt-t1", "up"]);
}

/// Pings from VM1 and VM2 to the gateway answered, of `2 * PINGS`, while the hostile VM (if
/// its tap is there) keeps announcing the gateway's address as its own.
fn pings_answered(gateway: [u8; 6], hostile: bool) -> usize {
    let attacker = hostile.then(|| {
        std::thread::spawn(move || {
            send_on(
                "tmt-vm2",
                "eth1",
                vec![raw::arp_reply_from(gateway); HOSTILE_FRAMES],
                Duration::from_millis(50),
            );
        })
    });
    let vm1 = std::thread::spawn(|| received(&ping("tmt-vm1", "10.77.0.100", &PINGS.to_string(), "0.2")));
    let vm2 = received(&ping("tmt-vm2", "10.77.0.100", &PINGS.to_string(), "0.2"));
    let answered = vm1.join().unwrap() + vm2;
    if let Some(a) = attacker {
        a.join().unwrap();
    }
    answered
}

/// The port `thief` with the gateway's MAC, added through the API, `extra` arguments after.
fn add_thief(dir: &Path, gateway: [u8; 6], extra: &[&str]) {
    let mac = text(gateway);
    let mut args = vec![
        "port",
        "add",
        "thief",
        "--interface",
        "tmt-t1",
        "--group",
        "vms",
        "--mac",
        &mac,
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = ctl(dir, &args);
    assert_eq!(code, 0, "{out}{err}");
}

fn group() -> String {
    "policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]".to_string()
}

/// The daemon's log (its events among it).
fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default()
}

/// Frames dropped as `mac_conflict` on the port or uplink named `name`, once at least `want`
/// (the status file is written every second), or the last seen after 5 s.
fn conflicts(status_path: &Path, name: &str, want: u64) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let s = status(status_path);
        let n = ["ports", "uplinks"]
            .iter()
            .flat_map(|k| s[k].as_array().cloned().unwrap_or_default())
            .find(|x| x["name"] == name)
            .and_then(|x| x["counters"]["drops"]["mac_conflict"].as_u64())
            .unwrap_or(0);
        if n >= want || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Frames the hostile VM sends while the others ping.
const HOSTILE_FRAMES: usize = 60;

#[test]
fn a_port_given_the_gateways_mac_does_not_black_hole_it() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let mut figures = Vec::new();

    // 1. Through the API, its tap absent: a port with the gateway's MAC and nothing behind it.
    let _topology = Topology::up();
    let gateway = mac_of("tmt-remote", "eth0");
    let dir = tempfile::tempdir().unwrap();
    let (daemon, status_path) = start(dir.path(), &switch_toml("", "1G", &group(), "", "", ""));
    assert!(reaches_remote("tmt-vm1") && reaches_remote("tmt-vm2"));
    add_thief(dir.path(), gateway, &[]);
    let absent = pings_answered(gateway, false);
    figures.push(format!("tap absent (API): {absent} of {} pings answered", 2 * PINGS));

    // 2. Its tap appears, and the hostile VM behind it announces the gateway's address as its
    // own: the gateway was heard, so the port waits, its frames dropped.
    hostile_tap(gateway);
    await_that("the thief attached", || {
        log(dir.path()).contains("port thief: attached to tmt-t1")
    });
    let present = pings_answered(gateway, true);
    let dropped = conflicts(&status_path, "thief", HOSTILE_FRAMES as u64);
    figures.push(format!(
        "tap present, hostile VM announcing: {present} of {} pings answered, {dropped} of its {HOSTILE_FRAMES} \
         frames dropped as mac_conflict",
        2 * PINGS
    ));
    let waited = log(dir.path()).contains("port thief: MAC") && log(dir.path()).contains("in use by a host outside");
    drop(daemon);

    // 3. In switch.toml, attached at start, before the gateway is heard at all (the table is
    // empty): the port owns the address until the gateway answers a VM, then yields.
    let _topology = Topology::up();
    let gateway = mac_of("tmt-remote", "eth0");
    hostile_tap(gateway);
    let dir = tempfile::tempdir().unwrap();
    let thief = format!(
        "{}\n[[ports]]\nname = \"thief\"\ninterface = \"tmt-t1\"\nmac = \"{}\"\ngroup = \"vms\"\n",
        switch_toml("", "1G", &group(), "", "", ""),
        text(gateway)
    );
    let (daemon, status_path) = start(dir.path(), &thief);
    std::thread::sleep(Duration::from_millis(1200));
    let first = pings_answered(gateway, true);
    figures.push(format!(
        "thief attached first (switch.toml): {first} of {} pings answered",
        2 * PINGS
    ));
    let yielded = log(dir.path()).contains("uses MAC") && log(dir.path()).contains("gave it up");
    let claim = status(&status_path)["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "thief")
        .map(|p| p["mac_claim"].clone())
        .unwrap_or_default();
    figures.push(format!(
        "  then the port's claim: {claim}; {}",
        counters_line(&status(&status_path))
    ));
    drop(daemon);
    eprintln!("{}", figures.join("\n"));

    assert_eq!(absent, 2 * PINGS, "a port with no tap black-holed the gateway");
    assert_eq!(present, 2 * PINGS, "the hostile VM took pings for the gateway");
    assert_eq!(
        dropped, HOSTILE_FRAMES as u64,
        "each of the hostile VM's frames from the gateway's MAC dropped and counted"
    );
    assert!(waited, "no event says the port waits:\n{}", log(dir.path()));
    // The first ping of each VM may go before the gateway is heard (the port still owns the
    // address then).
    assert!(first >= 2 * PINGS - 2, "{first} of {} answered", 2 * PINGS);
    assert!(yielded, "no event says the port gave the address up");

    // 4. The operator's word, given to the running port that waits: it takes the address over
    // at once (and the gateway is lost to the VMs here, as asked), said in the event log.
    let _topology = Topology::up();
    let gateway = mac_of("tmt-remote", "eth0");
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, status_path) = start(dir.path(), &switch_toml("", "1G", &group(), "", "", ""));
    assert!(reaches_remote("tmt-vm1"));
    hostile_tap(gateway);
    add_thief(dir.path(), gateway, &[]);
    await_that("the port waits", || {
        log(dir.path()).contains("in use by a host outside")
    });
    let (code, out, err) = ctl(dir.path(), &["port", "thief", "--mac-takeover", "true"]);
    assert_eq!(code, 0, "{out}{err}");
    await_that("the takeover is logged", || log(dir.path()).contains("taken over"));
    let taken = received(&ping("tmt-vm1", "10.77.0.100", "5", "0.2"));
    eprintln!(
        "with --mac-takeover: {taken} of 5 pings answered, {} of the gateway's frames refused",
        conflicts(&status_path, "uplink1", 0) + conflicts(&status_path, "uplink2", 0)
    );
    assert_eq!(taken, 0, "the operator gave the port the address");
}
