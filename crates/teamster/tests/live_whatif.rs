//! What-if on a running switch: two VMs send UDP at known rates; `teamster ctl whatif` then
//! asks what a limit on one, or an uplink down, would do over the last seconds. The answer
//! comes from the simulator (`teamster-sim`, beside `teamster`: `cargo test --workspace`
//! builds it) run on the switch's own past, and changes nothing on the switch. Topology:
//! [`netns`].

mod netns;
use netns::*;

use serde_json::Value;
use std::time::Duration;

fn rate(p: &Value, key: &str) -> f64 {
    p[key].as_f64().unwrap_or_else(|| panic!("{key} in {p}")) / 1e6
}

fn port<'a>(a: &'a Value, name: &str) -> &'a Value {
    a["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()
}

#[test]
fn a_what_if_answers_from_the_switchs_past_and_changes_nothing() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    beside::simulator();
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = switch_toml(
        "",
        "100M",
        "policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"50M\"",
        "",
        "",
    );
    let (_daemon, _status) = start(d, &config);
    let file_before = std::fs::read_to_string(d.join("switch.toml")).unwrap();
    let a = udp_stream("tmt-vm1", 5201, 30, 14);
    let b = udp_stream("tmt-vm2", 5202, 20, 14);
    // Ten seconds of the past with both sending (the first two ramp up).
    std::thread::sleep(Duration::from_secs(12));
    let (code, out, err) = ctl(
        d,
        &[
            "--json", "whatif", "--window", "8", "--port", "vm1", "--shares", "80", "--limit", "10M",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let ans: Value = serde_json::from_str(&out).unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&ans["ports"]).unwrap());
    let (vm1, vm2) = (port(&ans, "vm1"), port(&ans, "vm2"));
    // Measured as sent (UDP at a fixed rate, on uplinks with room), the model of the past
    // agrees, and the prediction caps vm1 at its new limit and leaves vm2 as it was.
    assert!((rate(vm1, "measured_bps") - 30.0).abs() < 4.0, "{vm1}");
    assert!((rate(vm2, "measured_bps") - 20.0).abs() < 4.0, "{vm2}");
    assert!(
        (rate(vm1, "baseline_bps") - rate(vm1, "measured_bps")).abs() < 1.0,
        "{vm1}"
    );
    assert!((rate(vm1, "predicted_bps") - 10.0).abs() < 0.5, "{vm1}");
    assert!(
        (rate(vm2, "predicted_bps") - rate(vm2, "measured_bps")).abs() < 1.0,
        "{vm2}"
    );
    // An uplink down: both on the other, in the table and in a saved scenario.
    let saved = d.join("uplink2-down.toml");
    let (code, out, err) = ctl(
        d,
        &[
            "whatif",
            "--window",
            "8",
            "--uplink-down",
            "uplink2",
            "--save",
            saved.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    eprintln!("{out}");
    assert!(out.contains("PREDICTED") && out.contains("-> uplink1"), "{out}");
    assert!(!out.contains("-> uplink2"), "{out}");
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("link-down") && text.contains("points"), "{text}");
    // Refused by name, and nothing overwritten.
    let (code, _, err) = ctl(d, &["whatif", "--window", "8", "--port", "vm7", "--limit", "1M"]);
    assert_eq!(code, 1);
    assert!(err.contains("no port named `vm7`"), "{err}");
    let (code, _, err) = ctl(d, &["whatif", "--window", "3600", "--uplink-down", "uplink1"]);
    assert_eq!(code, 1);
    assert!(err.contains("kept"), "{err}");
    let (code, _, err) = ctl(
        d,
        &["whatif", "--uplink-down", "uplink2", "--save", saved.to_str().unwrap()],
    );
    assert_eq!(code, 2);
    assert!(err.contains("exists"), "{err}");
    // The switch changed nothing: its file, and vm1 still without a limit.
    assert_eq!(std::fs::read_to_string(d.join("switch.toml")).unwrap(), file_before);
    let (_, out, _) = ctl(d, &["--json", "port", "vm1"]);
    let vm1: Value = serde_json::from_str(&out).unwrap();
    assert!(vm1["limit_bps"].is_null(), "{vm1}");
    let _ = (a.join(), b.join());
}
