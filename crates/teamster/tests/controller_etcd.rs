//! Two controllers sharing one cluster through Debian's etcd: exactly one leads (serves its
//! API), the other waits, answering 503 with where the leader is; the leader killed with
//! SIGKILL is replaced within its lease, and the new leader goes on from the stored state; a
//! follower whose lease lapses stops. A controller that cannot reach etcd says so and exits.

#[path = "../../teamster-dp/tests/live/mod.rs"]
#[allow(dead_code)] // this test uses only the skip rule
mod live;

mod etcd;
mod http1;
use etcd::{etcd, free_port, Killed};

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The leader's lease in the test, seconds.
const LEASE_S: u64 = 2;

fn controller(dir: &Path, name: &str, etcd: &str) -> (Killed, PathBuf) {
    let socket = dir.join(format!("{name}.sock"));
    let child = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args([
            "controller",
            "--etcd",
            etcd,
            "--lease-s",
            &LEASE_S.to_string(),
            // Its hosts here are API calls that never report: none is to be failed.
            "--host-timeout-s",
            "3600",
            "--socket",
        ])
        .arg(&socket)
        .args(["--advertise", &format!("https://{name}.example:9443")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Killed(child), socket)
}

/// Whether Debian's etcd is here to test with (a skip, said, where it may be missing; a
/// failure where the live tests are required).
fn have_etcd() -> bool {
    let have = Command::new("etcd")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    live::skip_unless(have, "etcd (Debian's etcd-server)")
}

/// Waits (up to `secs`) until the controller at `socket` serves as the leader; how long that
/// took.
fn serving(socket: &Path, secs: u64) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        if UnixStream::connect(socket).is_ok() && http(socket, "GET", "/api/v1/cluster", None).0 == 200 {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn http(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    http1::request(socket, method, path, body)
}

#[test]
fn one_controller_leads_and_the_other_takes_over_within_the_lease() {
    if !have_etcd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(dir.path());
    let (mut a, a_sock) = controller(dir.path(), "a", &url);
    serving(&a_sock, 20).expect("the first controller leads");
    let (_b, b_sock) = controller(dir.path(), "b", &url);
    // The second waits in the campaign: it does not serve, but names the leader.
    assert_eq!(serving(&b_sock, 2), None, "two controllers lead at once");
    let (status, body) = http(&b_sock, "POST", "/api/v1/hosts/h1/report", Some("{}"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, v["leader"].as_str()),
        (503, Some("https://a.example:9443")),
        "{body}"
    );
    let shape = r#"{"uplinks": [{"name": "u1", "capacity": "10G"}], "traffic_classes": [{"class": "vm", "reservation": "7.5G"}]}"#;
    assert_eq!(http(&a_sock, "PUT", "/api/v1/hosts/h1", Some(shape)).0, 200);
    let vm = r#"{"name": "vm1", "host": "h1", "reservation": "1G", "mac": "02:00:00:00:00:01"}"#;
    assert_eq!(http(&a_sock, "POST", "/api/v1/vms", Some(vm)).0, 201);

    // The leader dies: the other leads within the lease (and a little for a busy machine).
    let _ = a.0.kill();
    let _ = a.0.wait();
    let took = serving(&b_sock, LEASE_S + 10).expect("the second controller took over");
    eprintln!("the second controller served {took:?} after the leader was killed (lease {LEASE_S} s)");
    assert!(
        took <= Duration::from_secs(LEASE_S + 3),
        "took {took:?} with a lease of {LEASE_S} s"
    );
    let (status, body) = http(&b_sock, "GET", "/api/v1/cluster", None);
    assert_eq!(status, 200);
    let c: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(c["vms"][0]["name"], "vm1", "{body}");
    assert_eq!(c["vms"][0]["host"], "h1");
    // And it acts: a change is saved through it.
    let vm2 = r#"{"name": "vm2", "reservation": "1G"}"#;
    assert_eq!(http(&b_sock, "POST", "/api/v1/vms", Some(vm2)).0, 201);
}

/// One call to etcd's JSON gateway at `url` (http://HOST:PORT): its answer.
fn etcd_call(url: &str, path: &str, body: &str) -> serde_json::Value {
    let s = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (status, answer) = http1::exchange(s, "POST", path, None, Some(body));
    assert_eq!(status, 200, "{path}: {answer}");
    serde_json::from_str(&answer).unwrap()
}

/// A follower whose lease lapses while it waits to lead (revoked here, as when it is cut off
/// from etcd for longer than the lease) stops, saying why, rather than wait in a campaign it
/// can no longer win while answering hosts as a follower.
#[test]
fn a_follower_whose_lease_lapses_stops() {
    if !have_etcd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(dir.path());
    let (_a, a_sock) = controller(dir.path(), "a", &url);
    serving(&a_sock, 20).expect("the first controller leads");
    let (mut b, b_sock) = controller(dir.path(), "b", &url);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(UnixStream::connect(&b_sock).is_ok() && http(&b_sock, "GET", "/api/v1/cluster", None).0 == 503) {
        assert!(Instant::now() < deadline, "b does not follow");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The leader's lease is the one its election key holds; every other is b's.
    let name = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "teamster/leader");
    let leader = etcd_call(&url, "/v3/election/leader", &format!(r#"{{"name": "{name}"}}"#));
    let leading = leader["kv"]["lease"].as_str().unwrap().to_string();
    let leases = etcd_call(&url, "/v3/lease/leases", "{}");
    for l in leases["leases"].as_array().unwrap() {
        let id = l["ID"].as_str().unwrap();
        if id != leading {
            etcd_call(&url, "/v3/lease/revoke", &format!(r#"{{"ID": "{id}"}}"#));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(LEASE_S + 10);
    let status = loop {
        if let Some(status) = b.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "b waits on with its lease gone");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "{status}");
    // a still leads.
    assert_eq!(http(&a_sock, "GET", "/api/v1/cluster", None).0, 200);
}

#[test]
fn a_controller_that_cannot_reach_etcd_says_so_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let closed = format!("http://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "--etcd", &closed, "--socket"])
        .arg(dir.path().join("c.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("etcd") && err.contains(&closed[7..]), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(!dir.path().join("c.sock").exists(), "it served nothing");
}

/// A host timeout too short for the lease would have every host detach its VMs while the next
/// controller takes the lead: refused at start, naming both and the least that works.
#[test]
fn a_host_timeout_shorter_than_a_failover_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "--etcd", "http://127.0.0.1:9", "--lease-s", "5"])
        .args(["--host-timeout-s", "6", "--socket"])
        .arg(dir.path().join("c.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--host-timeout-s 6 is too short for --lease-s 5") && err.contains("at least 13"),
        "{err}"
    );
    assert!(!dir.path().join("c.sock").exists(), "it served nothing");
}

/// The keys under `prefix` in etcd at `url`, decoded.
fn etcd_keys(url: &str, prefix: &str) -> Vec<String> {
    let b64 = |s: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().unwrap() += 1;
    let body = format!(
        r#"{{"key": "{}", "range_end": "{}", "keys_only": true}}"#,
        b64(prefix.as_bytes()),
        b64(&end)
    );
    let a = etcd_call(url, "/v3/kv/range", &body);
    (a["kvs"].as_array().into_iter().flatten())
        .map(|kv| {
            let k = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, kv["key"].as_str().unwrap())
                .unwrap();
            String::from_utf8(k).unwrap()
        })
        .collect()
}

/// A cluster kept in etcd by an earlier controller (the whole state as one value under
/// `teamster/state`) is served as it was, and written as records at the first change, the old
/// value removed; a change then writes its own records alone.
#[test]
fn a_state_of_the_earlier_layout_in_etcd_is_served_and_moved_to_records() {
    if !have_etcd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(dir.path());
    let old = r#"{"hosts": {"h1": {"shape": {"uplinks": [{"name": "u1", "capacity": "10G"}], "traffic_classes": [{"class": "vm", "reservation": "7.5G"}]}, "registered_s": 1, "reported_s": 1}},
        "vms": {"vm1": {"pool": "vm", "reservation": "1G", "shares": "normal", "limit": null, "host": "h1", "moving_from": null}},
        "quotas": {}, "migrations": [], "faults": [], "generation": 4, "cluster_id": 77, "host_timeout_given_s": 3600}"#;
    let b64 = |s: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
    let put = format!(
        r#"{{"key": "{}", "value": "{}"}}"#,
        b64(b"teamster/state"),
        b64(old.as_bytes())
    );
    etcd_call(&url, "/v3/kv/put", &put);
    let (_a, a_sock) = controller(dir.path(), "a", &url);
    serving(&a_sock, 20).expect("the controller leads");
    let (_, body) = http(&a_sock, "GET", "/api/v1/cluster", None);
    let c: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (c["cluster_id"].as_u64(), c["vms"][0]["name"].as_str()),
        (Some(77), Some("vm1")),
        "{body}"
    );
    assert_eq!(
        etcd_keys(&url, "teamster/state"),
        ["teamster/state"],
        "untouched until a change"
    );
    let vm2 = r#"{"name": "vm2", "host": "h1", "reservation": "1G"}"#;
    assert_eq!(http(&a_sock, "POST", "/api/v1/vms", Some(vm2)).0, 201);
    assert!(etcd_keys(&url, "teamster/state").is_empty(), "the old value is gone");
    assert_eq!(
        etcd_keys(&url, "teamster/records/"),
        [
            "teamster/records/cluster",
            "teamster/records/host/h1",
            "teamster/records/vm/vm1",
            "teamster/records/vm/vm2"
        ]
    );
    // A restarted controller reads the records.
    drop(_a);
    let (_b, b_sock) = controller(dir.path(), "b", &url);
    serving(&b_sock, 20).expect("the next controller leads");
    let (_, body) = http(&b_sock, "GET", "/api/v1/cluster", None);
    let c: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = (c["vms"].as_array().unwrap().iter())
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        (c["cluster_id"].as_u64(), names),
        (Some(77), vec!["vm1", "vm2"]),
        "{body}"
    );
}
