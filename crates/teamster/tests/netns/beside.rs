//! What the live what-if and dashboard tests need beside the switch: the simulator installed
//! next to `teamster`, and a browser to drive.

use std::path::{Path, PathBuf};

/// Asserts `teamster-sim` is beside the `teamster` under test (`cargo test --workspace` builds
/// it; the daemon runs it for a what-if).
pub fn simulator() {
    let sim = Path::new(env!("CARGO_BIN_EXE_teamster")).with_file_name("teamster-sim");
    assert!(
        sim.exists(),
        "{} is missing: cargo build -p teamster-sim --bins",
        sim.display()
    );
}

/// The browser test harness's directory (`tests/browser`) and the Chromium binary, if they,
/// node and playwright-core are all there; a failure if not and CI requires them
/// (`TEAMSTER_REQUIRE_BROWSER=1`), else None with a message.
pub fn browser() -> Option<(PathBuf, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/browser");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let have = Path::new(&chromium).exists()
        && dir.join("node_modules/playwright-core").exists()
        && super::sh(&["node", "--version"]);
    if have {
        return Some((dir, chromium));
    }
    let required = std::env::var("TEAMSTER_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "TEAMSTER_REQUIRE_BROWSER=1 but Chromium, node or playwright-core is missing"
    );
    eprintln!("skipped: needs {chromium}, node and `npm ci` in tests/browser");
    None
}
