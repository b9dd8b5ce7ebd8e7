//! What-ifs checked against the switch: each test lets VMs send through a running switch,
//! asks `teamster ctl whatif` about a change, then makes that change for real (through the
//! switch's API, or by failing an uplink), measures what each VM then gets at the receiver
//! (iperf3), and compares port by port, within 10% of the link's capacity (10 Mbit/s on these
//! 100 Mbit/s uplinks). The cases: a reservation raised under contention between a TCP and a
//! UDP sender (both held down, so the answer must also say its demands are uncertain); an
//! uplink failing; a VM added; and port ID changed to Load-Based Teaming, with the move it
//! predicts. The uplink-failure case also checks what `ctl whatif` does besides answering: its
//! table, `--save`, questions refused by name, and that no question changes the switch.
//! Topology: [`netns`], uplinks shaped to 100 Mbit/s.

mod netns;
use netns::*;

use serde_json::Value;
use std::time::{Duration, Instant};

/// Within 10% of the links' 100 Mbit/s.
const TOLERANCE_MBIT: f64 = 10.0;
/// Seconds of the past a question is asked about.
const WINDOW: &str = "5";
/// Seconds each case's first streams run: the window (and 3 s for the streams to start), the
/// question and the change, and 8 s or more to measure after it.
const STREAM_S: u32 = 22;

/// The answer's port `name`.
fn port<'a>(a: &'a Value, name: &str) -> &'a Value {
    a["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {a}"))
}

/// A port's predicted rate, Mbit/s.
fn predicted(a: &Value, name: &str) -> f64 {
    port(a, name)["predicted_bps"].as_f64().unwrap() / 1e6
}

/// Asks the switch in `d` what `args` would do, over the last [`WINDOW`] seconds.
fn ask(d: &std::path::Path, args: &[&str]) -> Value {
    let mut all = vec!["--json", "whatif", "--window", WINDOW];
    all.extend(args);
    let (code, out, err) = ctl(d, &all);
    assert_eq!(code, 0, "whatif {args:?}: {err}");
    let a: Value = serde_json::from_str(&out).unwrap();
    eprintln!(
        "what if {args:?}:\n{}\nnotes: {}",
        serde_json::to_string_pretty(&a["ports"]).unwrap(),
        a["notes"]
    );
    a
}

/// The median of what a stream received from `from` seconds after `started` to 1 s before its
/// end (intervals are a second each from about when its server started, just after
/// `started`).
fn after(r: &Received, from: f64) -> f64 {
    let first = from.ceil() as usize;
    let end = (r.secs as usize).saturating_sub(1).min(r.per_second.len());
    let mut v: Vec<f64> = r.per_second.get(first..end).unwrap_or_default().to_vec();
    assert!(v.len() >= 4, "too few seconds after the change: {r:?} from {from}");
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds since `t`.
fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// [`compare_with`] the answer's predicted mean over the window.
fn compare(a: &Value, measured: &[(&str, f64)]) {
    compare_with(a, measured, |n| predicted(a, n));
}

/// A port's predicted rate once the prediction's last move is done: the mean of its series
/// from the second after it, Mbit/s.
fn predicted_after_moves(a: &Value, name: &str) -> f64 {
    let last = a["moves"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["t_s"].as_f64())
        .fold(0.0, f64::max);
    let t = a["series"]["t_s"].as_array().unwrap();
    let p = a["series"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap();
    let after: Vec<f64> = t
        .iter()
        .zip(p["predicted"].as_array().unwrap())
        .filter(|(t, _)| t.as_f64().unwrap() >= last + 1.0)
        .filter_map(|(_, v)| v.as_f64())
        .collect();
    assert!(!after.is_empty(), "no second after the last move in {}", a["series"]);
    after.iter().sum::<f64>() / after.len() as f64 / 1e6
}

/// Compares each `(port, measured Mbit/s)` with the prediction (`predicted(port)`, Mbit/s),
/// within the tolerance;
/// and, so that the comparison could fail, requires the change to have moved each port the
/// past measured by more than the tolerance (an answer that ignored the change would miss).
fn compare_with(a: &Value, measured: &[(&str, f64)], predicted: impl Fn(&str) -> f64) {
    let predicted = |n: &str| predicted(n);
    let before = |n: &str| port(a, n)["measured_bps"].as_f64().map(|b| b / 1e6);
    let lines: Vec<String> = measured
        .iter()
        .map(|(n, m)| {
            let was = before(n).map_or("-".into(), |b| format!("{b:.1}"));
            format!(
                "{n}: measured before {was}, predicted {:.1}, measured after {m:.1} Mbit/s",
                predicted(n)
            )
        })
        .collect();
    eprintln!("{}", lines.join("\n"));
    for (n, m) in measured {
        assert!(
            (predicted(n) - m).abs() <= TOLERANCE_MBIT,
            "{n}: predicted and measured differ by more than {TOLERANCE_MBIT} Mbit/s:\n{}",
            lines.join("\n")
        );
        if let Some(b) = before(n) {
            assert!(
                (b - m).abs() > TOLERANCE_MBIT,
                "{n}: the change moved it by no more than the tolerance, so this case proves nothing:\n{}",
                lines.join("\n")
            );
        }
    }
}

/// One case's switch: the topology with `vms` VMs and uplinks shaped to 100 Mbit/s, and a
/// daemon running the switch file of [`switch_toml`] with these lines, in a directory of its own.
struct Case {
    // Dropped in this order: the daemon stopped, then its directory, then the topology, then
    // the lock on it.
    _daemon: (Daemon, std::path::PathBuf),
    dir: tempfile::TempDir,
    _topology: Topology,
    _one_at_a_time: netns::TopologyLock,
}

impl Case {
    /// The case, once the topology is free; None where live tests cannot run (see [`ready`]).
    fn start(vms: u8, head: &str, group: &str, classes: &str, vm1: &str, vm2: &str) -> Option<Case> {
        let lock = netns::lock();
        if !ready() {
            return None;
        }
        beside::simulator();
        let topology = Topology::shaped_vms(100, vms);
        let dir = tempfile::tempdir().unwrap();
        let daemon = start(dir.path(), &switch_toml(head, "100M", group, classes, vm1, vm2));
        Some(Case {
            _daemon: daemon,
            dir,
            _topology: topology,
            _one_at_a_time: lock,
        })
    }

    fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// Lets the streams fill the window the question is about (and a little more for their start).
fn fill_the_window() {
    let window: u64 = WINDOW.parse().unwrap();
    std::thread::sleep(Duration::from_secs(window + 3));
}

#[test]
fn a_reservation_raised_under_contention_gets_what_was_predicted() {
    // Both on uplink1, equal shares: a TCP sender (vm1) and a UDP sender offering 80M (vm2).
    let Some(case) = Case::start(
        2,
        "",
        "policy = \"port-id\"\nactive = [\"uplink1\"]\nstandby = [\"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"75M\"",
        "shares = 50",
        "shares = 50",
    ) else {
        return;
    };
    let d = case.dir();
    let started = Instant::now();
    let tcp = tcp_stream("tmt-vm1", 5201, STREAM_S, 1.0);
    let udp = udp_stream("tmt-vm2", 5202, 80, STREAM_S);
    fill_the_window();
    let a = ask(d, &["--port", "vm1", "--reservation", "70M"]);
    // Both were held down: vm1 backing off (TCP), vm2 with what it sent turned away. The
    // answer says how it took their demands, and that it cannot see what they wanted.
    assert_eq!(port(&a, "vm1")["demand"]["how"], "greedy", "{a}");
    assert_eq!(port(&a, "vm2")["demand"]["how"], "offered", "{a}");
    let notes = a["notes"].to_string();
    assert!(notes.contains("every port that sent was held down"), "{notes}");
    let (code, _, err) = ctl(d, &["port", "vm1", "--reservation", "70M"]);
    assert_eq!(code, 0, "{err}");
    let changed = since(started);
    let (tcp, udp) = (tcp.join().unwrap(), udp.join().unwrap());
    compare(
        &a,
        &[("vm1", after(&tcp, changed + 2.0)), ("vm2", after(&udp, changed + 2.0))],
    );
}

#[test]
fn an_uplink_failure_puts_both_vms_where_predicted() {
    let Some(case) = Case::start(
        2,
        "",
        "policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"50M\"",
        "id = 1",
        "id = 2",
    ) else {
        return;
    };
    let d = case.dir();
    let file_before = std::fs::read_to_string(d.join("switch.toml")).unwrap();
    let started = Instant::now();
    // 80M each, one on each uplink; both on uplink1 once uplink2 fails: 50M each.
    let a1 = udp_stream("tmt-vm1", 5201, 80, STREAM_S);
    let a2 = udp_stream("tmt-vm2", 5202, 80, STREAM_S);
    fill_the_window();
    let a = ask(d, &["--uplink-down", "uplink2"]);
    for p in ["vm1", "vm2"] {
        assert_eq!(port(&a, p)["uplink_after"], "uplink1", "{a}");
    }
    // The uplink fails: its carrier goes.
    must(&["ip", "link", "set", "tmt-u2", "down"]);
    let changed = since(started);
    let (r1, r2) = (a1.join().unwrap(), a2.join().unwrap());
    compare(
        &a,
        &[("vm1", after(&r1, changed + 2.0)), ("vm2", after(&r2, changed + 2.0))],
    );
    the_table_the_saved_scenario_and_refusals(d, &file_before);
}

/// What `ctl whatif` does besides answering, on the switch in `d` (whose file was
/// `file_before`): a table for people, `--save` writing the scenario it ran (never over a file),
/// questions refused by name, and nothing changed on the switch by any question.
fn the_table_the_saved_scenario_and_refusals(d: &std::path::Path, file_before: &str) {
    let saved = d.join("whatif.toml");
    let save = saved.to_str().unwrap();
    let (code, out, err) = ctl(
        d,
        &["whatif", "--window", WINDOW, "--uplink-down", "uplink1", "--save", save],
    );
    assert_eq!(code, 0, "{err}");
    eprintln!("{out}");
    assert!(out.contains("PREDICTED"), "{out}");
    // Both uplinks down then (uplink2 failed for real): each port's row ends on none.
    let rows = out
        .lines()
        .filter(|l| l.starts_with("vm") && l.trim_end().ends_with("-> -"));
    assert_eq!(rows.count(), 2, "{out}");
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("link-down") && text.contains("points"), "{text}");
    let (code, _, err) = ctl(d, &["whatif", "--uplink-down", "uplink2", "--save", save]);
    assert_eq!(code, 2);
    assert!(err.contains("exists"), "{err}");
    let (code, _, err) = ctl(d, &["whatif", "--window", WINDOW, "--port", "vm7", "--limit", "1M"]);
    assert_eq!(code, 1);
    assert!(err.contains("ports[0]: no port named `vm7`"), "{err}");
    let (code, _, err) = ctl(d, &["whatif", "--window", "3600", "--uplink-down", "uplink1"]);
    assert_eq!(code, 1);
    assert!(err.contains("kept"), "{err}");
    let (code, _, err) = ctl(d, &["whatif", "--window", WINDOW, "--port", "vm1", "--limit", "10M"]);
    assert_eq!(code, 0, "{err}");
    // The switch changed nothing: its file, and vm1 still without a limit.
    assert_eq!(std::fs::read_to_string(d.join("switch.toml")).unwrap(), file_before);
    let (_, out, _) = ctl(d, &["--json", "port", "vm1"]);
    let vm1: Value = serde_json::from_str(&out).unwrap();
    assert!(vm1["limit_bps"].is_null(), "{vm1}");
}

#[test]
fn a_vm_added_gets_its_share_as_predicted() {
    let Some(case) = Case::start(
        3,
        "",
        "policy = \"port-id\"\nactive = [\"uplink1\"]\nstandby = [\"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"75M\"",
        "",
        "",
    ) else {
        return;
    };
    let d = case.dir();
    let started = Instant::now();
    // 50M each, filling uplink1; vm3 added sending 80M with 50M reserved: it has its 50M and
    // a third of the rest, 66.7M, and vm1 and vm2 16.7M each.
    let a1 = udp_stream("tmt-vm1", 5201, 50, STREAM_S);
    let a2 = udp_stream("tmt-vm2", 5202, 50, STREAM_S);
    fill_the_window();
    let a = ask(d, &["--add-port", "vm3,vms,80M,50M"]);
    assert!(port(&a, "vm3")["measured_bps"].is_null(), "{a}");
    let (code, _, err) = ctl(
        d,
        &[
            "port",
            "add",
            "vm3",
            "--interface",
            "tmt-v3",
            "--group",
            "vms",
            "--mac",
            "02:00:00:00:00:03",
            "--reservation",
            "50M",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let added = since(started);
    // Until the others end.
    let a3 = udp_stream("tmt-vm3", 5203, 80, STREAM_S - added.ceil() as u32);
    let (r1, r2, r3) = (a1.join().unwrap(), a2.join().unwrap(), a3.join().unwrap());
    // vm3's stream started with it: its seconds count from then.
    compare(
        &a,
        &[
            ("vm1", after(&r1, added + 3.0)),
            ("vm2", after(&r2, added + 3.0)),
            ("vm3", after(&r3, 2.0)),
        ],
    );
}

#[test]
fn port_id_to_load_based_moves_a_port_as_predicted() {
    // Port IDs 1 and 3: port ID puts both on the same uplink, full.
    let Some(case) = Case::start(
        2,
        "[lbt]\nwindow_s = 3\nperiod_s = 3",
        "policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"50M\"",
        "id = 1",
        "id = 3",
    ) else {
        return;
    };
    let d = case.dir();
    let started = Instant::now();
    // 70M each on one uplink: 50M each; once load-based teaming moves one, 70M each.
    let a1 = udp_stream("tmt-vm1", 5201, 70, STREAM_S);
    let a2 = udp_stream("tmt-vm2", 5202, 70, STREAM_S);
    fill_the_window();
    let a = ask(d, &["--policy", "vms=load-based"]);
    let before: Vec<String> = ["vm1", "vm2"]
        .iter()
        .map(|p| port(&a, p)["uplink_before"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(before[0], before[1], "both on one uplink before: {a}");
    let moves = a["moves"].as_array().unwrap();
    assert!(
        moves
            .iter()
            .any(|m| m["reason"].as_str().is_some_and(|r| r.contains("load"))),
        "a Load-Based Teaming move predicted: {moves:?}"
    );
    let after_uplinks: Vec<&str> = ["vm1", "vm2"]
        .iter()
        .map(|p| port(&a, p)["uplink_after"].as_str().unwrap())
        .collect();
    assert_ne!(after_uplinks[0], after_uplinks[1], "{a}");
    let (code, _, err) = ctl(d, &["group", "vms", "--policy", "load-based"]);
    assert_eq!(code, 0, "{err}");
    let changed = since(started);
    // The switch moves one of them, as predicted.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, out, _) = ctl(d, &["--json", "ports"]);
        let ports: Value = serde_json::from_str(&out).unwrap();
        let on: Vec<String> = ["vm1", "vm2"]
            .iter()
            .map(|n| {
                ports
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|p| p["name"] == *n)
                    .map(|p| p["uplink"].as_str().unwrap_or("").to_string())
                    .unwrap_or_default()
            })
            .collect();
        if on[0] != on[1] && !on[0].is_empty() && !on[1].is_empty() {
            eprintln!("moved: vm1 on {}, vm2 on {}", on[0], on[1]);
            break;
        }
        assert!(Instant::now() < deadline, "no Load-Based Teaming move: {on:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let (r1, r2) = (a1.join().unwrap(), a2.join().unwrap());
    // Once moved, against what the prediction gives each after its move (the answer's mean
    // over the window holds the seconds before the move too).
    let measured = [("vm1", after(&r1, changed + 5.0)), ("vm2", after(&r2, changed + 5.0))];
    compare_with(&a, &measured, |n| predicted_after_moves(&a, n));
    // The uplinks' predicted load at the end of the window is each what one VM sends.
    for u in a["series"]["uplinks"].as_array().unwrap() {
        let end = u["predicted"].as_array().unwrap().last().unwrap().as_f64().unwrap() / 1e6;
        assert!(
            (end - 70.0).abs() <= TOLERANCE_MBIT,
            "{}: {end:.1} Mbit/s predicted at the end",
            u["name"]
        );
    }
}
