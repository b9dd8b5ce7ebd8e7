//! Stale pins are collected (root; fails, not skips, where TEAMSTER_REQUIRE_LIVE is set): a
//! run's pinned attachments outlive it, and once an interface is deleted its link switches
//! nothing; the next start of any switch removes that pin, and keeps the one whose interface is
//! still there.

use std::path::{Path, PathBuf};
use std::process::Command;
use teamster_dp::fast_path::FastPath;
use teamster_kernel::pins::{collect_defunct, Pins};
use teamster_kernel::KernelPath;

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Removes the test's directory tree on the BPF file system (unpinning what is left).
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pins_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_pin_whose_interface_is_gone_is_collected_and_a_live_one_kept() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("TEAMSTER_REQUIRE_LIVE").is_none(),
            "the pin tests need root (TEAMSTER_REQUIRE_LIVE is set)"
        );
        eprintln!("skipped: the pin tests need root");
        return;
    }
    std::thread::spawn(|| {
        // SAFETY: acts on the calling thread (and the commands it starts) only.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare(CLONE_NEWNET)");
        // Pins::for_config mounts a BPF file system where there is none; so does this test.
        let mounted = Command::new("findmnt")
            .args(["-n", "-t", "bpf", "/sys/fs/bpf"])
            .output();
        if !mounted.is_ok_and(|o| o.status.success()) {
            sh(&["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"]);
        }
        let base = PathBuf::from(format!("/sys/fs/bpf/tmgc-{}", std::process::id()));
        std::fs::create_dir(&base).unwrap();
        let _cleanup = Cleanup(base.clone());
        let (dead, live) = (base.join("dead"), base.join("live"));
        for (a, b) in [("tga", "tgax"), ("tgb", "tgbx")] {
            sh(&["ip", "link", "add", a, "type", "veth", "peer", "name", b]);
            sh(&["ip", "link", "set", a, "up"]);
        }
        // Two switches' runs, each pinning its attachment and ending without detaching (as a
        // kill -9 does).
        for (dir, iface) in [(&dead, "tga"), (&live, "tgb")] {
            let path = KernelPath::load(1024, Some(Pins::at(dir).unwrap())).unwrap();
            path.attach(iface).unwrap();
            drop(path);
            assert_eq!(pins_in(dir).len(), 1, "{iface}'s attachment stays pinned");
        }
        // Nothing is stale yet.
        assert!(collect_defunct(&base).is_empty());
        sh(&["ip", "link", "del", "tga"]);
        let removed = collect_defunct(&base);
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert!(removed[0].starts_with(&dead), "{removed:?}");
        assert!(!dead.exists(), "the directory it emptied goes too");
        assert_eq!(pins_in(&live).len(), 1, "a link whose interface is there stays");
        // What is not a pin is not touched, even where it is named like one.
        std::fs::create_dir(base.join("other")).unwrap();
        std::fs::create_dir(base.join("other").join("if1_1")).unwrap();
        assert!(collect_defunct(&base).is_empty());
        assert!(base.join("other").join("if1_1").exists());
        sh(&["ip", "link", "del", "tgb"]);
    })
    .join()
    .unwrap();
}
