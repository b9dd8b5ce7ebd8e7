//! The controller's command line as the cluster tests drive it: its CA (`teamster controller
//! ca`) and `teamster ctl` on a controller's socket, each bounded in time.

#![allow(dead_code)] // each test binary uses its own part of these helpers

use std::path::Path;
use std::process::Command;

/// Runs `teamster controller ca ARGS --dir DIR`, which must succeed.
pub fn ca_in(dir: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "ca"])
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `teamster ctl --socket SOCKET ARGS` (at most 20 s): its exit code, standard output and error.
pub fn ctl(socket: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("timeout")
        .arg("20")
        .arg(env!("CARGO_BIN_EXE_teamster"))
        .args(["ctl", "--socket"])
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}
