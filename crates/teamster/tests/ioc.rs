//! `teamster ioc allocate` and `teamster ioc admit`: output, exit statuses and bad input.

use std::process::{Command, Output};

fn teamster(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(args)
        .output()
        .unwrap()
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const ISSUE_EXAMPLE: &str = r#"{"capacity": "9.4G", "nodes": [{"name": "vm", "reservation": "4.8G", "shares": 100, "children": [{"name": "vm1", "shares": 50, "demand": "10G"}]}, {"name": "nfs", "shares": "normal", "limit": "2G", "demand": "10G"}]}"#;

#[test]
fn allocate_json_gives_every_node_in_bits_per_second() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(&dir, "t.json", ISSUE_EXAMPLE);
    let o = teamster(&["ioc", "allocate", &f, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let a = v["allocations"].as_object().unwrap();
    assert_eq!(a.len(), 3);
    assert_eq!(a["nfs"], 1_533_333_333u64);
    assert_eq!(a["vm"], 7_866_666_667u64);
    assert_eq!(a["vm1"], 7_866_666_667u64);
}

#[test]
fn allocate_reads_toml_and_reproduces_the_white_paper() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "fig2.toml",
        r#"capacity = "9.4G"
[[nodes]]
name = "vm1"
reservation = "7.5G"
[[nodes]]
name = "vm2"
[[nodes]]
name = "vm3"
"#,
    );
    let v: serde_json::Value = serde_json::from_slice(&teamster(&["ioc", "allocate", &f, "--json"]).stdout).unwrap();
    let g = |n: &str| v["allocations"][n].as_f64().unwrap() / 1e9;
    assert!((g("vm1") - 8.1333).abs() < 1e-3 && (g("vm2") - 0.6333).abs() < 1e-3 && (g("vm3") - 0.6333).abs() < 1e-3);
    let text = String::from_utf8(teamster(&["ioc", "allocate", &f]).stdout).unwrap();
    assert!(
        text.contains("8.133 Gbps") && text.contains("capacity 9.4Gbps"),
        "{text}"
    );
}

#[test]
fn admit_accepts_rejects_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let ok = write(&dir, "ok.json", ISSUE_EXAMPLE);
    let o = teamster(&["ioc", "admit", &ok, "--json"]);
    assert!(o.status.success());
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["admitted"],
        true
    );
    // 7.5G + 4.5G on one 10 GbE uplink, the NetIOC paper's step b.
    let over = write(
        &dir,
        "over.json",
        r#"{"capacity": "10G", "nodes": [{"name": "vm1", "reservation": "7.5G"}, {"name": "vm2", "reservation": "4.5G"}]}"#,
    );
    let o = teamster(&["ioc", "admit", &over]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`vm2`: reservation 4.5Gbps does not fit: 0bps is free of 7.5Gbps"),
        "{err}"
    );
    let o = teamster(&["ioc", "admit", &over, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["admitted"], false);
    assert!(v["error"].as_str().unwrap().contains("vm2"));
    // The cap is configurable up to 100%.
    let full = write(
        &dir,
        "full.json",
        r#"{"capacity": "10G", "reservation_cap": 1.0, "nodes": [{"name": "a", "reservation": "7.5G"}, {"name": "b", "reservation": "2.5G"}]}"#,
    );
    assert!(teamster(&["ioc", "admit", &full]).status.success());
}

#[test]
fn bad_trees_exit_2_naming_the_node_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            r#"{"capacity": "1G", "nodes": [{"name": "a", "shares": 0}]}"#,
            "nodes[0].shares (in node `a`): shares `0` is not valid",
        ),
        (
            r#"{"capacity": "1G", "nodes": [{"name": "a", "children": [{"name": "b", "shares": "urgent"}]}]}"#,
            "nodes[0].children[0].shares (in node `b`)",
        ),
        (
            r#"{"capacity": "1G", "nodes": [{"name": "a", "limit": "-5M"}]}"#,
            "nodes[0].limit (in node `a`): `-5M` is not a bandwidth",
        ),
        (
            r#"{"capacity": "1G", "nodes": [{"name": "a", "reservation": "1GB"}]}"#,
            "is in bytes",
        ),
        (
            r#"{"capacity": "1G", "nodes": [{"name": "a", "reservation": "2M", "limit": "1M"}]}"#,
            "nodes[0] (`a`).limit: 1Mbps is below the reservation 2Mbps",
        ),
        (
            r#"{"capacity": "1G", "nodes": [{"name": "a"}, {"name": "a"}]}"#,
            "nodes[1] (`a`).name: `a` is used by another node",
        ),
        (
            r#"{"capacity": "1G", "nodes": [{"name": "a", "weight": 3}]}"#,
            "unknown field `weight`",
        ),
        (r#"{"capacity": "1G", "reservation_cap": 1.5}"#, "reservation_cap"),
        (
            r#"{"capacity": "1G", "nodes": [ }"#,
            "t.json: expected value at line 1 column 31",
        ),
    ];
    for (text, want) in cases {
        let f = write(&dir, "t.json", text);
        for cmd in ["allocate", "admit"] {
            let o = teamster(&["ioc", cmd, &f]);
            assert_eq!(o.status.code(), Some(2), "{cmd} {text}");
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains(want) && err.contains("t.json"),
                "{cmd}: `{want}` not in: {err}"
            );
            assert!(o.stdout.is_empty(), "no partial output");
        }
    }
    let f = write(&dir, "t.yaml", "capacity: 1G");
    let err = String::from_utf8(teamster(&["ioc", "allocate", &f]).stderr).unwrap();
    assert!(err.contains("expected a .json or .toml file"), "{err}");
}

/// Every form of output ends with a newline, so a shell prompt never lands on its last line.
#[test]
fn every_output_ends_with_a_newline() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(&dir, "t.json", ISSUE_EXAMPLE);
    for args in [
        vec!["ioc", "allocate", &f],
        vec!["ioc", "allocate", &f, "--json"],
        vec!["ioc", "admit", &f],
        vec!["ioc", "admit", &f, "--json"],
    ] {
        let o = teamster(&args);
        assert!(
            o.stdout.ends_with(b"\n"),
            "{args:?}: {:?}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}
