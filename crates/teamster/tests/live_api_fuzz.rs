//! Schemathesis (from PyPI) against the live API's own OpenAPI document: property-based
//! requests, valid and invalid, to every operation, with all of its checks — above all, never
//! a 5xx and never a crash. The daemon must still answer afterwards.
//!
//! Skipped when `schemathesis` is not installed, unless `TEAMSTER_REQUIRE_SCHEMATHESIS=1` (as CI
//! sets), when that is a failure. `TEAMSTER_SCHEMATHESIS_SECONDS` sets the time budget
//! (default 90) and `TEAMSTER_SCHEMATHESIS_SEED` fixes the seed (CI does, so a run repeats).
//!
//! The daemon and schemathesis run in a network namespace of their own, holding only loopback
//! and the switch's two uplinks (a veth pair): the fuzzer adds uplinks and ports on whatever
//! interface names it makes up, and on the host one of them could be a real NIC.

mod netns;
use netns::*;

use std::process::Command;

const TOKEN: &str = "fuzz-token-0123456789abcdef";

#[test]
fn schemathesis_finds_no_server_error() {
    let _one_at_a_time = netns::lock();
    if !sh(&["schemathesis", "--version"]) {
        let required = std::env::var("TEAMSTER_REQUIRE_SCHEMATHESIS").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "TEAMSTER_REQUIRE_SCHEMATHESIS=1 but schemathesis is not installed"
        );
        eprintln!("skipped: needs schemathesis (pip install schemathesis)");
        return;
    }
    if !ready() {
        return;
    }
    let _fuzz = FuzzNamespace::up();
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, _status) = start_with_api_in(Some(FUZZ_NS), dir.path(), &api_switch(), 0, TOKEN);
    let port = api_port(dir.path());
    let seconds = std::env::var("TEAMSTER_SCHEMATHESIS_SECONDS").unwrap_or_else(|_| "90".into());
    let out = Command::new("timeout")
        .arg((seconds.parse::<u64>().unwrap_or(90) + 120).to_string())
        .args(["ip", "netns", "exec", FUZZ_NS, "schemathesis", "run"])
        .arg(format!("http://127.0.0.1:{port}/openapi.json"))
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--checks", "all", "--max-time", &seconds, "--workers", "1"])
        .args(["--report-dir", dir.path().join("report").to_str().unwrap()])
        .args(
            std::env::var("TEAMSTER_SCHEMATHESIS_SEED")
                .map(|s| vec!["--seed".to_string(), s])
                .unwrap_or_default(),
        )
        .env("NO_COLOR", "1")
        .current_dir(dir.path()) // its cache goes there, not into the source tree
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: String = text
        .lines()
        .rev()
        .take(40)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("{summary}");
    assert!(
        daemon.0.try_wait().unwrap().is_none(),
        "the daemon died under the API fuzzing"
    );
    assert!(
        out.status.success(),
        "schemathesis failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const FUZZ_NS: &str = "tmt-fuzz";

/// The fuzzing namespace: loopback up, and tmt-u1/tmt-u2 (a veth pair, both up) for the
/// switch's uplinks; removed by name when dropped.
struct FuzzNamespace;

impl FuzzNamespace {
    fn up() -> FuzzNamespace {
        sh(&["ip", "netns", "del", FUZZ_NS]);
        must(&["ip", "netns", "add", FUZZ_NS]);
        let guard = FuzzNamespace;
        must(&["ip", "-n", FUZZ_NS, "link", "set", "lo", "up"]);
        must(&[
            "ip", "-n", FUZZ_NS, "link", "add", "tmt-u1", "type", "veth", "peer", "name", "tmt-u2",
        ]);
        for l in ["tmt-u1", "tmt-u2"] {
            must(&["ip", "-n", FUZZ_NS, "link", "set", l, "up"]);
        }
        guard
    }
}

impl Drop for FuzzNamespace {
    fn drop(&mut self) {
        sh(&["ip", "netns", "del", FUZZ_NS]);
    }
}
