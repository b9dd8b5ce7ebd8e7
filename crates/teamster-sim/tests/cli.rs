//! The `teamster-sim` binary (which `teamster simulate` runs): output, `--json` shape and exit
//! statuses.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn teamster_sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_teamster-sim"))
        .args(args)
        .output()
        .unwrap()
}

fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn simulate_json_has_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = teamster_sim(&[&scenario("lbt-specweb.toml"), "--json", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["scenario"], "lbt-specweb");
    let exps = v["expectations"].as_array().unwrap();
    assert_eq!(exps.len(), 7);
    for e in exps {
        assert!(e["name"].is_string() && e["detail"].is_string());
        assert_eq!(e["held"], true, "{e}");
    }
    let moves = v["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 2);
    for m in moves {
        assert!(m["t_s"].is_number());
        assert_eq!(
            (m["from"].as_str(), m["to"].as_str()),
            (Some("uplink1"), Some("uplink2"))
        );
        assert!(m["port"].as_str().unwrap().starts_with("vm"));
    }
    let csv = PathBuf::from(v["series_csv"].as_str().unwrap());
    assert_eq!(csv, out.join("series.csv"));
    let header = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert!(header.starts_with("t_s,uplink1_tx_bps,uplink1_rx_bps,uplink2_tx_bps,uplink2_rx_bps,vm1_offered_tx_bps"));
    assert!(out.join("throughput.svg").is_file() && out.join("moves.csv").is_file());
    // report.html: self-contained (chart code and data inline, nothing fetched), with the run's
    // uplinks and both moves in its data.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("const TeamsterCharts")
            && !html.contains("/*DATA*/")
            && !html.contains("/*CHARTS*/")
            && !html.contains("/*STYLE*/")
    );
    assert!(!html.contains("src=\"http") && !html.contains("fetch("));
    let data = html
        .split("const D = ")
        .nth(1)
        .and_then(|d| d.split(";\nconst C").next())
        .unwrap();
    let data: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(data["uplinks"], serde_json::json!(["uplink1", "uplink2"]));
    assert_eq!(data["moves"].as_array().unwrap().len(), 2);
    assert!(data["history"].as_array().unwrap().len() > 100);
}

#[test]
fn simulate_text_prints_each_expectation() {
    let dir = tempfile::tempdir().unwrap();
    let o = teamster_sim(&[
        &scenario("lbt-static.toml"),
        "--out",
        dir.path().join("s").to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("[held] the static policy delivers at most one uplink's capacity"),
        "{text}"
    );
    assert!(text.contains("3 of 3 expectations held"), "{text}");
}

#[test]
fn a_failed_expectation_exits_1_and_bad_input_exits_2_writing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The static scenario, expected to move ports: it will not.
    let text = std::fs::read_to_string(scenario("lbt-static.toml"))
        .unwrap()
        .replace("max = 0", "max = 9")
        .replace("min = 0", "min = 1");
    let failing = dir.path().join("failing.toml");
    std::fs::write(&failing, text).unwrap();
    let o = teamster_sim(&[
        failing.to_str().unwrap(),
        "--out",
        dir.path().join("f").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("[FAILED] between 1 and 9 moves"));

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\nduration_s = -1\n").unwrap();
    let out = dir.path().join("never");
    let o = teamster_sim(&[bad.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.toml") && err.contains("uplinks"), "{err}");
    assert!(!out.exists());

    let o = teamster_sim(&["/nonexistent/scenario.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/scenario.toml: cannot read"));

    let o = teamster_sim(&[]);
    assert_eq!(o.status.code(), Some(2), "clap: missing argument");
    let o = teamster_sim(&["x.toml", "--frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `teamster-sim | head` ends quietly when `head` closes the pipe: no panic, no exit 101.
#[test]
fn simulate_into_a_closed_pipe_ends_quietly() {
    use std::io::Read;
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/lbt-baseline.toml");
    let out = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_teamster-sim"))
        .args([scenario, "--out"])
        .arg(out.path().join("o"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Close the pipe before the summary is written, as `head` does once it has its lines.
    drop(child.stdout.take());
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(status.code(), Some(101), "{err}");
}

/// `--whatif` as the switch runs it: the request on standard input, the answer on standard
/// output; a change that does not fit is exit status 2 with the error naming it, a request out
/// of form 3, and nothing on the output.
#[test]
fn whatif_answers_on_stdout_and_refuses_by_name() {
    use std::io::Write;
    let past = std::fs::read_to_string(scenario("lbt-baseline.toml")).unwrap();
    let ask = |changes: serde_json::Value| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_teamster-sim"))
            .arg("--whatif")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let req = serde_json::json!({ "scenario": past, "changes": changes });
        child
            .stdin
            .take()
            .unwrap()
            .write_all(req.to_string().as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let o = ask(serde_json::json!([{ "kind": "uplink-down", "uplink": "uplink2" }]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for p in a["ports"].as_array().unwrap() {
        assert_eq!(p["uplink_after"], "uplink1", "{p}");
    }
    assert!(a["scenario"].as_str().unwrap().contains("link-down"));
    let o = ask(serde_json::json!([{ "kind": "uplink-down", "uplink": "uplink9" }]));
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no uplink named `uplink9`"), "{err}");
    // A request out of form is not the changes not fitting: 3.
    let o = ask(serde_json::json!([{ "kind": "uplink-gone", "uplink": "uplink1" }]));
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("uplink-gone"));
    // A scenario and --whatif do not go together.
    assert_eq!(
        teamster_sim(&["--whatif", &scenario("lbt-baseline.toml")])
            .status
            .code(),
        Some(2)
    );
}
