//! `teamster rss hash`: the specification's vectors through the command line, queues, and bad
//! input refused with the flag named.

use std::process::{Command, Output};

fn teamster(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(args)
        .output()
        .unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn the_first_specification_vector_and_its_queue() {
    let tuple = ["rss", "hash", "--src", "66.9.149.187", "--dst", "161.142.100.80"];
    let ports = ["--sport", "2794", "--dport", "1766"];
    let v = json(&teamster(&[&tuple[..], &ports[..], &["--json"]].concat()));
    assert_eq!(v, serde_json::json!({"hash": "0x51ccc178"}));
    // 0x51ccc178 mod 128 = 120; a round-robin table over 16 queues puts entry 120 on queue 8.
    let v = json(&teamster(
        &[&tuple[..], &ports[..], &["--queues", "16", "--json"]].concat(),
    ));
    assert_eq!(v, serde_json::json!({"hash": "0x51ccc178", "queue": 8}));
    let two = teamster(&tuple);
    assert_eq!(String::from_utf8_lossy(&two.stdout), "hash 0x323e8fc2\n");
    // The same bytes given raw; IPv6 too.
    let raw = json(&teamster(&[
        "rss",
        "hash",
        "--input",
        "42:09:95:bb:a1:8e:64:50:0a:ea:06:e6",
        "--json",
    ]));
    assert_eq!(raw["hash"], "0x51ccc178");
    let v6 = [
        "rss",
        "hash",
        "--src",
        "3ffe:2501:200:1fff::7",
        "--dst",
        "3ffe:2501:200:3::1",
    ];
    let v = json(&teamster(
        &[&v6[..], &["--sport", "2794", "--dport", "1766", "--json"]].concat(),
    ));
    assert_eq!(v["hash"], "0x40207d3d");
}

#[test]
fn the_symmetric_key_hashes_the_reverse_direction_alike() {
    let there = json(&teamster(&[
        "rss",
        "hash",
        "--symmetric",
        "--src",
        "10.0.0.1",
        "--dst",
        "10.0.0.2",
        "--sport",
        "40000",
        "--dport",
        "443",
        "--json",
    ]));
    let back = json(&teamster(&[
        "rss",
        "hash",
        "--symmetric",
        "--src",
        "10.0.0.2",
        "--dst",
        "10.0.0.1",
        "--sport",
        "443",
        "--dport",
        "40000",
        "--json",
    ]));
    assert_eq!(there, back);
}

#[test]
fn bad_input_names_the_flag_and_exits_2() {
    let long = "00".repeat(37);
    let cases: [(&[&str], &str); 5] = [
        (
            &["--key", "6d5a", "--src", "1.2.3.4", "--dst", "1.2.3.5"],
            "--key: 2 bytes",
        ),
        (
            &["--key", "zz", "--src", "1.2.3.4", "--dst", "1.2.3.5"],
            "--key: `zz` is not hexadecimal",
        ),
        (&["--src", "1.2.3.4", "--dst", "::1"], "one is IPv4, the other IPv6"),
        (
            &[
                "--src", "1.2.3.4", "--dst", "1.2.3.5", "--table", "0,1,9", "--queues", "4",
            ],
            "--table: entry 2: queue 9 is past the queue count 4",
        ),
        (
            &["--input", long.as_str()],
            "--input: 37 bytes is more than a 40-byte key covers",
        ),
    ];
    for (args, want) in cases {
        let o = teamster(&[&["rss", "hash"][..], args].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: wanted `{want}` in {err}");
        assert!(o.stdout.is_empty());
    }
}
