//! Interfaces that come and go under the live switch: a VM's interface deleted while the switch
//! runs (as a tap is when its VM stops) is detached without the loop spinning, and re-attached
//! when an interface of that name returns; a port whose interface is missing at start starts
//! detached and attaches when it appears. (Before this was handled, the loop used about a core
//! from the moment a port's interface was deleted, and the port stayed dead after it returned.)
//! Topology and helpers: [`netns`].

mod netns;
use netns::*;
use std::path::Path;
use std::time::{Duration, Instant};

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

/// The port on `interface` in a status snapshot.
fn port<'a>(s: &'a serde_json::Value, interface: &str) -> &'a serde_json::Value {
    s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["interface"] == interface)
        .unwrap()
}

/// Waits (up to `secs`) for the status file to show `interface`'s port attached or not.
fn await_attached(status_path: &Path, interface: &str, attached: bool, secs: u64, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = status(status_path);
        if port(&s, interface)["attached"] == attached {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{interface} not {} within {secs} s: {}\ndaemon log:\n{}",
            if attached { "attached" } else { "detached" },
            port(&s, interface),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// CPU time (user + system) `pid` has used, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// Pings the remote host from `ns` until one reply comes back, for at most `secs`.
fn reaches_remote(ns: &str, secs: u64) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        if received(&ping(ns, "10.77.0.100", "1", "0.2")) == 1 {
            return Some(start.elapsed());
        }
    }
    None
}

#[test]
fn a_deleted_port_detaches_without_spinning_and_returns() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let (daemon, status_path) = start(dir.path(), &switch());
    assert_eq!(received(&ping("tmt-vm1", "10.77.0.100", "2", "0.2")), 2);

    // The VM's interface disappears (its VM stopped): the port detaches, and the loop sleeps.
    must(&["ip", "link", "del", "tmt-v1"]);
    await_attached(&status_path, "tmt-v1", false, 5, &log);
    let pid = daemon.0.id();
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let share = (cpu_seconds(pid) - cpu0) / t0.elapsed().as_secs_f64();
    eprintln!("daemon CPU with a deleted port: {:.1}% of one core", share * 100.0);
    assert!(share < 0.2, "the loop spins: {:.0}% of a core", share * 100.0);
    // The other VM is not affected.
    assert_eq!(received(&ping("tmt-vm2", "10.77.0.100", "2", "0.2")), 2);

    // It comes back (with a new interface index): attached again, and the VM reaches the remote.
    vm_link(1);
    await_attached(&status_path, "tmt-v1", true, 5, &log);
    let took = reaches_remote("tmt-vm1", 10).expect("vm1 does not reach the remote after its interface returned");
    eprintln!(
        "vm1 reached the remote {:.1} s after being re-attached",
        took.as_secs_f64()
    );

    // An uplink set administratively down and up again leaves its socket with an error too
    // (ENETDOWN): the loop reads it and sleeps, and the uplink carries traffic afterwards.
    must(&["ip", "link", "set", "tmt-u1", "down"]);
    must(&["ip", "link", "set", "tmt-u1", "up"]);
    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let share = (cpu_seconds(pid) - cpu0) / t0.elapsed().as_secs_f64();
    eprintln!(
        "daemon CPU after an uplink went down and up: {:.1}% of one core",
        share * 100.0
    );
    assert!(share < 0.2, "the loop spins: {:.0}% of a core", share * 100.0);

    let s = status(&status_path);
    let events: Vec<&str> = s["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "attach")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(
        events
            .iter()
            .any(|m| m.contains("vm1") && m.contains("detached from tmt-v1"))
            && events
                .iter()
                .any(|m| m.contains("vm1") && m.contains("attached to tmt-v1")),
        "{events:?}"
    );
}

#[test]
fn a_port_missing_at_start_attaches_when_it_appears() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    must(&["ip", "link", "del", "tmt-v2"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    // The switch starts anyway, with vm2 detached and a warning.
    let (_daemon, status_path) = start(dir.path(), &switch());
    let s = status(&status_path);
    assert_eq!(port(&s, "tmt-v2")["attached"], false, "{}", port(&s, "tmt-v2"));
    assert_eq!(port(&s, "tmt-v1")["attached"], true);
    let warned = std::fs::read_to_string(&log).unwrap();
    assert!(
        warned.contains("warning: port vm2: interface tmt-v2 is missing"),
        "{warned}"
    );
    assert_eq!(received(&ping("tmt-vm1", "10.77.0.100", "2", "0.2")), 2);

    vm_link(2);
    await_attached(&status_path, "tmt-v2", true, 5, &log);
    let took = reaches_remote("tmt-vm2", 10).expect("vm2 does not reach the remote after its interface appeared");
    eprintln!(
        "vm2 reached the remote {:.1} s after being attached",
        took.as_secs_f64()
    );
}
