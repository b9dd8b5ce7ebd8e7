//! The dashboard's what-if panel in a real browser: two VMs send UDP at known rates through a
//! daemon in the namespace topology ([`netns`]); headless Chromium (playwright-core, from
//! `tests/browser`, script `whatif.mjs`) opens the page, asks what a reservation and a limit on
//! vm1 would do over the last seconds, and checks the table and charts against the daemon's
//! answer to that request, then that a window longer than the history kept (409) and one out of
//! form (422) show the daemon's error. The answer comes from `teamster-sim` beside `teamster`
//! (`cargo build -p teamster-sim --bins`). The screenshot goes to `target/dashboard-whatif.png`
//! (or `$TEAMSTER_WHATIF_SCREENSHOT`).
//!
//! Skipped when Chromium, node or `tests/browser/node_modules` are missing, unless
//! `TEAMSTER_REQUIRE_BROWSER=1` (as CI sets), when that is a failure.

use super::netns::{self, *};

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// A token with characters a URL gives a meaning to, and some no ASCII has: the page's POST
/// must carry it as its other requests do.
const TOKEN: &str = "what+if %41 token&x=/y?z#ü 東京 0123456789";

/// Seconds of the past the panel asks about.
const WINDOW_S: u64 = 5;

/// How many seconds of history the daemon on TCP `port` has kept.
fn history_points(port: u16) -> usize {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let req = format!(
        "GET /api/v1/history HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    let mut answer = String::new();
    let _ = s.write_all(req.as_bytes()).and_then(|_| s.read_to_string(&mut answer));
    answer.matches("\"unix_ms\"").count()
}

#[test]
fn the_what_if_panel_draws_the_daemons_answer_and_shows_its_errors() {
    let _one_at_a_time = netns::lock();
    let Some((browser_dir, chromium)) = beside::browser() else {
        return;
    };
    if !ready() {
        return;
    }
    beside::simulator();
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let config = switch_toml(
        "",
        "100M",
        "policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"50M\"",
        "",
        "reservation = \"10M\"",
    );
    let (_daemon, _status) = start_with_api(dir.path(), &config, 0, TOKEN);
    let port = api_port(dir.path());
    // Steady senders for the whole test; the window asked about starts once both have run a
    // few seconds.
    let a = udp_stream("tmt-vm1", 5201, 30, 50);
    let b = udp_stream("tmt-vm2", 5202, 20, 50);
    std::thread::sleep(Duration::from_secs(3));
    let deadline = Instant::now() + Duration::from_secs(30);
    while history_points(port) < WINDOW_S as usize + 3 {
        assert!(Instant::now() < deadline, "the server keeps no history");
        std::thread::sleep(Duration::from_millis(500));
    }

    let shot = std::env::var("TEAMSTER_WHATIF_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/dashboard-whatif.png"));
    if let Some(parent) = shot.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let token = percent_encoding::utf8_percent_encode(TOKEN, percent_encoding::NON_ALPHANUMERIC);
    let out = Command::new("timeout")
        .args(["150", "node", "whatif.mjs"])
        .arg(format!("http://127.0.0.1:{port}/?token={token}"))
        .arg(&shot)
        .args(["vm1", "15M", "20M", &WINDOW_S.to_string()])
        .current_dir(&browser_dir)
        .env("CHROMIUM", &chromium)
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "browser: {seen}\n{}screenshot {}",
        String::from_utf8_lossy(&out.stderr),
        shot.display()
    );
    assert!(out.status.success(), "what-if panel check failed: {seen}");
    // The answer the page drew is about the change asked: vm1 at its new reservation, and held
    // to its new limit below the 30 Mbit/s it sent.
    let result: serde_json::Value = serde_json::from_str(seen.trim()).unwrap();
    let vm1 = &result["asked"];
    assert_eq!(vm1["reservation_bps"].as_f64(), Some(15e6), "{vm1}");
    let predicted = vm1["predicted_bps"].as_f64().unwrap();
    assert!(predicted <= 20.5e6, "vm1 predicted above its limit: {vm1}");
    assert!(shot.exists(), "no screenshot");
    let _ = (a.join(), b.join());
}
