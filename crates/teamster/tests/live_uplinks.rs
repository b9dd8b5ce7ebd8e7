//! Uplinks that come and go while the switch runs: `teamster ctl uplink add/del` (the API's
//! `POST /api/v1/uplinks` and `DELETE /api/v1/uplinks/{name}`), the rule that an uplink a
//! failover order lists cannot go, refusals that change nothing, what is saved, a port's
//! traffic moved onto a new uplink by its group's order, and a port's traffic untouched while
//! another uplink is added and removed a hundred times. Topology: [`netns`].

mod netns;
use netns::*;

use std::path::Path;
use std::time::{Duration, Instant};

/// The API switch with uplink1 only (tmt-u2 exists, into the same physical switch, but is no
/// uplink yet).
fn one_uplink() -> String {
    let all = api_switch();
    let second = "[[uplinks]]\nname = \"uplink2\"\ninterface = \"tmt-u2\"\ncapacity = \"1G\"\n";
    assert!(all.contains(second));
    all.replace(second, "")
        .replace("active = [\"uplink1\", \"uplink2\"]", "active = [\"uplink1\"]")
}

/// `ctl --json NOUN` as JSON.
fn listed(dir: &Path, noun: &str) -> Vec<serde_json::Value> {
    let (code, out, err) = ctl(dir, &["--json", noun]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<serde_json::Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn uplink_names(dir: &Path) -> Vec<String> {
    listed(dir, "uplinks")
        .iter()
        .map(|u| u["name"].as_str().unwrap().to_string())
        .collect()
}

/// The uplink port `name` is on now.
fn port_uplink(dir: &Path, name: &str) -> Option<String> {
    listed(dir, "ports")
        .into_iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["uplink"].as_str().map(str::to_string))
}

/// Runs `ctl` and expects a refusal (exit 1) whose message holds `says`, with nothing changed:
/// the same uplinks, the same saved file.
fn refused(dir: &Path, args: &[&str], says: &str) {
    let saved = std::fs::read_to_string(dir.join("switch.toml")).unwrap();
    let before = uplink_names(dir);
    let (code, out, err) = ctl(dir, args);
    assert_eq!(code, 1, "{args:?} was not refused: {out}{err}");
    assert!(err.contains(says), "{args:?}: `{says}` not in: {err}");
    assert_eq!(uplink_names(dir), before, "{args:?} changed the uplinks");
    assert_eq!(
        std::fs::read_to_string(dir.join("switch.toml")).unwrap(),
        saved,
        "{args:?} changed the saved file"
    );
}

fn ok(dir: &Path, args: &[&str]) {
    let (code, out, err) = ctl(dir, args);
    assert_eq!(code, 0, "{args:?}: {out}{err}");
}

#[test]
fn uplinks_are_added_and_removed_while_the_switch_runs() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut daemon, status) = start(d, &one_uplink());
    assert!(reaches_remote("tmt-vm1"));

    // Bad input names the object and changes nothing.
    let add =
        |name: &'static str, iface: &'static str| ["uplink", "add", name, "--interface", iface, "--capacity", "1G"];
    refused(
        d,
        &add("uplink3", "tmt-v1"),
        "`tmt-v1` is already used by uplinks[1] (uplink `uplink3`)",
    );
    refused(d, &add("uplink3", "tmt-nope"), "no interface named `tmt-nope`");
    refused(d, &add("uplink1", "tmt-u2"), "an uplink named `uplink1` exists");
    refused(d, &add("up/3", "tmt-u2"), "uplinks[1].name");
    refused(
        d,
        &["uplink", "add", "uplink3", "--interface", "tmt-u2", "--capacity", "0"],
        "uplinks[1].capacity: 0bps is under 1Mbps",
    );
    refused(d, &["uplink", "del", "uplink1"], "failover order of port group `vms`");
    refused(d, &["uplink", "del", "uplink9"], "no uplink named `uplink9`");

    // Added: attached, saved, unused until an order names it.
    ok(d, &add("uplink2", "tmt-u2"));
    assert_eq!(uplink_names(d), ["uplink1", "uplink2"]);
    let saved = std::fs::read_to_string(d.join("switch.toml")).unwrap();
    assert!(
        saved.contains("name = \"uplink2\"") && saved.contains("interface = \"tmt-u2\""),
        "{saved}"
    );
    let u2 = listed(d, "uplinks")
        .into_iter()
        .find(|u| u["name"] == "uplink2")
        .unwrap();
    assert_eq!(u2["attached"], true, "{u2}");
    assert_eq!(port_uplink(d, "vm1").as_deref(), Some("uplink1"));

    // The group's order moves the ports onto it, and traffic flows there.
    ok(d, &["group", "vms", "--active", "uplink2", "--standby", "uplink1"]);
    assert_eq!(port_uplink(d, "vm1").as_deref(), Some("uplink2"));
    assert!(reaches_remote("tmt-vm1"), "through uplink2");
    let tx = |s: &serde_json::Value, name: &str| {
        s["uplinks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .unwrap()["counters"]["tx_packets"]
            .as_u64()
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        tx(&netns::status(&status), "uplink2") > 0,
        "uplink2 carried vm1's pings"
    );

    // In an order: refused, naming the group; out of it: removed, and the file says so.
    refused(d, &["uplink", "del", "uplink2"], "failover order of port group `vms`");
    ok(d, &["group", "vms", "--active", "uplink1", "--standby", ""]);
    assert_eq!(port_uplink(d, "vm1").as_deref(), Some("uplink1"));
    ok(d, &["uplink", "del", "uplink2"]);
    assert_eq!(uplink_names(d), ["uplink1"]);
    let saved = std::fs::read_to_string(d.join("switch.toml")).unwrap();
    assert!(!saved.contains("uplink2"), "{saved}");
    assert!(reaches_remote("tmt-vm1"), "back through uplink1");
    let (_, events, _) = ctl(d, &["events"]);
    for what in [
        "uplink uplink2: added on interface tmt-u2",
        "uplink uplink2: removed (interface tmt-u2)",
    ] {
        assert!(events.contains(what), "`{what}` not in the events:\n{events}");
    }
    stop_cleanly(&mut daemon);
}

/// vm1 pings the remote host every 10 ms through uplink2 while uplink1 is removed (so uplink2,
/// carrying the traffic, becomes index 0 under it: queues, pacer, counters, MAC entries and
/// team renumbered), added back after it, made the group's standby and taken out of the order
/// again, 25 times (100 changes): the switch drops none of vm1's frames, and the data plane
/// stops for each change no longer than the event log says (reported).
#[test]
fn an_uplink_comes_and_goes_beside_a_busy_port() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let on_uplink2 = api_switch().replace("active = [\"uplink1\", \"uplink2\"]", "active = [\"uplink2\"]");
    let (mut daemon, status) = start(d, &on_uplink2);
    assert!(reaches_remote("tmt-vm1"));
    assert_eq!(port_uplink(d, "vm1").as_deref(), Some("uplink2"));
    let (_, before, _) = ctl(d, &["--json", "events"]);
    let seen = serde_json::from_str::<serde_json::Value>(&before)
        .unwrap()
        .as_array()
        .unwrap()
        .len();
    let pinger = std::thread::spawn(|| ping("tmt-vm1", "10.77.0.100", "1000", "0.01"));
    let started = Instant::now();
    for _ in 0..25 {
        ok(d, &["uplink", "del", "uplink1"]);
        ok(
            d,
            &["uplink", "add", "uplink1", "--interface", "tmt-u1", "--capacity", "1G"],
        );
        ok(d, &["group", "vms", "--standby", "uplink1"]);
        ok(d, &["group", "vms", "--standby", ""]);
    }
    assert_eq!(uplink_names(d), ["uplink2", "uplink1"]);
    let churn = started.elapsed();
    let out = pinger.join().unwrap();
    let (sent, got) = (1000, received(&out));
    let rtt = out
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .unwrap_or_default()
        .to_string();
    let (_, events, _) = ctl(d, &["--json", "events", "--since", &seen.to_string()]);
    let stops: Vec<u64> = serde_json::from_str::<serde_json::Value>(&events)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let m = e["message"].as_str()?;
            m.strip_prefix("configuration changed (applied in ")?
                .strip_suffix(" us)")?
                .parse()
                .ok()
        })
        .collect();
    let max = stops.iter().max().copied().unwrap_or(0);
    println!(
        "100 uplink and group changes in {churn:?}; data plane stopped {} times, at most {max} us; pings {got}/{sent}; {rtt}",
        stops.len()
    );
    assert!(churn < Duration::from_secs(60), "100 changes took {churn:?}");
    std::thread::sleep(Duration::from_millis(1200));
    let s = netns::status(&status);
    assert_eq!(port_drops(&s, "vm1"), 0, "{}", counters_line(&s));
    assert_eq!(port_uplink(d, "vm1").as_deref(), Some("uplink2"));
    // A ping lost to the machine's timers (seen once in ~900 on a busy VM) is not the switch's.
    assert!(got + 2 >= sent, "{got} of {sent} pings answered: {rtt}");
    stop_cleanly(&mut daemon);
}

/// A reload (SIGHUP) that removes an uplink and takes it out of the order in one step, then
/// one that adds it back after the others and makes it the group's active uplink: the data
/// plane follows both (the order is translated between the two lists), and vm1 is reached
/// through each. A reload that puts a new uplink before a kept one is refused, changing
/// nothing.
#[test]
fn a_reload_adds_and_removes_uplinks() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let two = api_switch().replace(
        "active = [\"uplink1\", \"uplink2\"]",
        "active = [\"uplink2\"]\nstandby = [\"uplink1\"]",
    );
    let (mut daemon, _status) = start(d, &two);
    assert_eq!(port_uplink(d, "vm1").as_deref(), Some("uplink2"));
    let saved = d.join("switch.toml");
    let reload = |text: &str| {
        std::fs::write(&saved, text).unwrap();
        signal(&daemon.0, libc::SIGHUP);
    };
    reload(&one_uplink());
    await_that("uplink2 is gone", || uplink_names(d) == ["uplink1"]);
    assert_eq!(port_uplink(d, "vm1").as_deref(), Some("uplink1"));
    assert!(reaches_remote("tmt-vm1"), "through uplink1");
    reload(&two);
    await_that("uplink2 is back", || uplink_names(d) == ["uplink1", "uplink2"]);
    await_that("vm1 is on uplink2", || {
        port_uplink(d, "vm1").as_deref() == Some("uplink2")
    });
    assert!(reaches_remote("tmt-vm1"), "through uplink2");
    // uplink2 first, uplink1 after: uplink1 would change index.
    let at = two.find("[[uplinks]]").unwrap();
    let second = "[[uplinks]]\nname = \"uplink2\"\ninterface = \"tmt-u2\"\ncapacity = \"1G\"\n";
    let reordered = format!("{}{second}\n{}", &two[..at], two[at..].replace(second, ""));
    reload(&reordered);
    await_that("the reload is refused", || {
        ctl(d, &["events"])
            .1
            .contains("reload refused: a reload cannot change uplinks kept")
    });
    assert_eq!(uplink_names(d), ["uplink1", "uplink2"]);
    assert!(reaches_remote("tmt-vm1"));
    stop_cleanly(&mut daemon);
}
