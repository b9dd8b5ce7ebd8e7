//! The dashboard in a real browser: headless Chromium (driven by playwright-core from
//! `tests/browser`) opens the page of a daemon in the namespace topology while iperf3 runs, and
//! checks that every uplink is rendered, that the figures change, and that the `dynamic` port
//! group's flowlets per member are shown. The screenshot goes to
//! `target/dashboard.png` (or `$TEAMSTER_SCREENSHOT`).
//!
//! Skipped when Chromium, node or `tests/browser/node_modules` are missing, unless
//! `TEAMSTER_REQUIRE_BROWSER=1` (as CI sets), when that is a failure.

mod netns;
use netns::*;

/// The what-if panel's test, in this binary (one link for both browser tests).
#[path = "live_dashboard/whatif_panel.rs"]
mod whatif_panel;

use std::path::PathBuf;
use std::process::Command;

/// A token with every character a URL gives a meaning to, and some no ASCII has: the page must
/// be given it URL-encoded, and it must work for the event stream too.
const TOKEN: &str = "dash+board %41 token&x=/y?z#ü 東京 0123456789";

fn switch() -> String {
    switch_toml(
        "[lbt]\nwindow_s = 3\nperiod_s = 3",
        "100M",
        "policy = \"dynamic\"\nrebalance_ms = 500\nactive = [\"uplink1\", \"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"40M\"",
        "reservation = \"20M\"",
        "limit = \"30M\"",
    )
}

#[test]
fn the_dashboard_renders_every_uplink_and_updates_live() {
    let _one_at_a_time = netns::lock();
    let Some((browser_dir, chromium)) = beside::browser() else {
        return;
    };
    if !ready() {
        return;
    }
    let _topology = Topology::shaped(100);
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, _status) = start_with_api(dir.path(), &switch(), 0, TOKEN);
    let port = api_port(dir.path());
    let token = percent_encoding::utf8_percent_encode(TOKEN, percent_encoding::NON_ALPHANUMERIC);
    ping("tmt-vm1", "10.77.0.100", "2", "0.2");
    ping("tmt-vm2", "10.77.0.100", "2", "0.2");
    // The server keeps a point a second: wait until it holds a few from before the page opens.
    let points = || {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return 0;
        };
        let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
        let req = format!(
            "GET /api/v1/history HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
        );
        let mut answer = String::new();
        let _ = s.write_all(req.as_bytes()).and_then(|_| s.read_to_string(&mut answer));
        answer.matches("\"unix_ms\"").count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while points() < 3 {
        assert!(std::time::Instant::now() < deadline, "the server keeps no history");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    let shot = std::env::var("TEAMSTER_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/dashboard.png"));
    if let Some(parent) = shot.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    // The browser opens the page while the switch is idle; the traffic starts a moment later.
    let browser = Command::new("timeout")
        .args(["60", "node", "dashboard.mjs"])
        .arg(format!("http://127.0.0.1:{port}/?token={token}"))
        .arg(&shot)
        .arg("uplink1,uplink2")
        .current_dir(&browser_dir)
        .env("CHROMIUM", &chromium)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let a = udp_stream("tmt-vm1", 5201, 60, 10);
    let b = udp_stream("tmt-vm2", 5202, 60, 10);
    let out = browser.wait_with_output().unwrap();
    let (vm1, vm2) = (a.join().unwrap().mean(), b.join().unwrap().mean());
    let seen = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "browser: {seen}\n{}; iperf3 vm1 {vm1:.1}, vm2 {vm2:.1} Mbit/s; screenshot {}",
        String::from_utf8_lossy(&out.stderr),
        shot.display()
    );
    assert!(out.status.success(), "dashboard check failed: {seen}");
    assert!(shot.exists(), "no screenshot");
}
