//! The control plane of a live switch: `teamster ctl` over the unix socket, the TCP listener's
//! bearer token, live changes (refused ones change nothing), persistence across a restart,
//! metrics and the OpenAPI document. Topology and helpers: [`netns`].

mod http1;
mod netns;
use netns::*;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The TCP port the daemon under test bound (it is started on port 0).
static PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
const TOKEN: &str = "test-token-0123456789abcdef";

fn ctl_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out, err) = ctl(dir, &all);
    assert_eq!(code, 0, "ctl {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ctl {args:?}: {e}: {out}"))
}

/// One HTTP/1.1 request over TCP to the API; returns (status, body).
fn http(method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, String) {
    let port = PORT.load(std::sync::atomic::Ordering::Relaxed);
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    http1::exchange(s, method, path, token, body)
}

/// The body of a chunked or plain HTTP answer, as JSON.
fn json_body(body: &str) -> serde_json::Value {
    let start = body.find(['{', '[']).unwrap_or(0);
    let end = body.rfind(['}', ']']).map_or(body.len(), |e| e + 1);
    serde_json::from_str(&body[start..end]).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn the_api_shows_and_changes_the_switch_and_changes_persist() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let (daemon, _status) = start_with_api(dir.path(), &api_switch(), 0, TOKEN);
    PORT.store(api_port(dir.path()), std::sync::atomic::Ordering::Relaxed);
    let config_path = dir.path().join("switch.toml");

    // The unix socket is its owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("api.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");

    // Tables and JSON.
    let (code, table, _) = ctl(dir.path(), &["uplinks"]);
    assert_eq!(code, 0);
    assert!(
        table.contains("UPLINK") && table.contains("uplink1") && table.contains("tmt-u2"),
        "{table}"
    );
    let ports = ctl_json(dir.path(), &["ports"]);
    assert_eq!(ports.as_array().unwrap().len(), 2);
    assert_eq!(ports[0]["reservation_bps"], 100_000_000);
    let (code, tree, _) = ctl(dir.path(), &["netioc"]);
    assert!(
        code == 0 && tree.contains("vm1") && tree.contains("RESERVATION"),
        "{tree}"
    );
    let (code, watched, err) = ctl(dir.path(), &["watch", "--count", "2"]);
    assert!(
        code == 0 && watched.matches("uplink1 tx").count() == 2,
        "{watched}{err}"
    );
    assert!(watched.contains("start: switching 2 ports"), "{watched}");
    let (code, lbt, _) = ctl(dir.path(), &["lbt"]);
    assert!(code == 0 && lbt.contains("threshold 75.0%"), "{lbt}");

    // TCP: no token or a wrong one is a 401; the right one works.
    assert_eq!(http("GET", "/api/v1/uplinks", None, None).0, 401);
    assert_eq!(
        http("GET", "/api/v1/uplinks", Some("wrong-token-0123456789"), None).0,
        401
    );
    let (status, body) = http("GET", "/api/v1/uplinks", Some(TOKEN), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_body(&body)[0]["name"], "uplink1");

    // A change admission control refuses is a 409 and changes nothing, file included.
    let before = std::fs::read_to_string(&config_path).unwrap();
    let (code, _, err) = ctl(dir.path(), &["port", "vm2", "--reservation", "600M"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("409") && err.contains("vm2"), "{err}");
    assert_eq!(std::fs::read_to_string(&config_path).unwrap(), before);
    assert_eq!(ctl_json(dir.path(), &["port", "vm2"])["reservation_bps"], 0);

    // Bad bodies: a 4xx naming the field, and nothing changes.
    for (body, status, names) in [
        ("{\"reservation\": ", 400, "EOF"),
        ("{\"reserve\": \"1M\"}", 422, "reserve"),
        ("{\"shares\": 500}", 422, "shares"),
        ("{\"limit\": \"5GB\"}", 422, "limit"),
        ("{\"reservation\": -1}", 422, "reservation"),
        // serde would take an array as the struct's fields in order: refused.
        ("[\"200M\"]", 422, "must be a JSON object, not an array"),
    ] {
        let (got, answer) = http("PATCH", "/api/v1/ports/vm1", Some(TOKEN), Some(body));
        assert_eq!(got, status, "{body}: {answer}");
        assert!(answer.contains(names), "{body}: `{names}` not in {answer}");
    }
    assert_eq!(
        http("PATCH", "/api/v1/ports/vm9", Some(TOKEN), Some("{\"shares\": 10}")).0,
        404
    );
    for (path, body, status, names) in [
        ("/api/v1/port-groups/vms", "{\"active\": [\"uplink9\"]}", 409, "uplink9"),
        ("/api/v1/port-groups/vms", "{\"policy\": \"fastest\"}", 422, "policy"),
        ("/api/v1/port-groups/vms", "{\"standby\": null}", 422, "standby"),
        ("/api/v1/uplinks/uplink1", "{\"admin\": \"sideways\"}", 422, "admin"),
    ] {
        let (got, answer) = http("PATCH", path, Some(TOKEN), Some(body));
        assert!(got == status && answer.contains(names), "{path} {body}: {got} {answer}");
    }
    assert_eq!(std::fs::read_to_string(&config_path).unwrap(), before);

    // Live changes: a port's controls, a group's policy, an uplink's admin state.
    let vm1 = ctl_json(
        dir.path(),
        &[
            "port",
            "vm1",
            "--reservation",
            "200M",
            "--limit",
            "500M",
            "--shares",
            "high",
        ],
    );
    assert_eq!(vm1["reservation_bps"], 200_000_000);
    assert_eq!(vm1["limit_bps"], 500_000_000);
    assert_eq!(vm1["shares"], 100);
    let g = ctl_json(dir.path(), &["group", "vms", "--policy", "source-mac"]);
    assert_eq!(g["policy"], "source-mac");
    let u = ctl_json(dir.path(), &["uplink", "uplink1", "down"]);
    assert_eq!(u["admin"], "down");
    assert_eq!(u["in_use"], false);
    let ports = ctl_json(dir.path(), &["ports"]);
    for p in ports.as_array().unwrap() {
        assert_eq!(p["uplink"], "uplink2", "{p}");
    }
    assert_eq!(received(&ping("tmt-vm1", "10.77.0.100", "2", "0.2")), 2);
    let saved = std::fs::read_to_string(&config_path).unwrap();
    assert!(
        saved.contains("admin = \"down\"") && saved.contains("200Mbps"),
        "{saved}"
    );

    // Metrics and the OpenAPI document.
    let (code, metrics, _) = ctl(dir.path(), &["metrics"]);
    assert_eq!(code, 0);
    for name in [
        "teamster_uplink_tx_bytes_total",
        "teamster_port_drops_total",
        "teamster_uplink_utilisation",
        "teamster_netioc_allocation_bits_per_second",
        "teamster_netioc_reservation_bits_per_second",
        "teamster_lbt_moves_total",
        "teamster_failovers_total 1\n",
        "teamster_scheduler_queue_depth",
    ] {
        assert!(metrics.contains(name), "{name} not in metrics:\n{metrics}");
    }
    let (status, doc) = http("GET", "/openapi.json", Some(TOKEN), None);
    assert_eq!(status, 200);
    let doc = json_body(&doc);
    assert!(doc["paths"]["/api/v1/ports/{name}"]["patch"].is_object(), "{doc}");

    // A restart keeps every change.
    drop(daemon);
    let (_daemon, _status) = start_with(dir.path(), &saved, &[]);
    let vm1 = ctl_json(dir.path(), &["port", "vm1"]);
    assert_eq!(vm1["reservation_bps"], 200_000_000);
    let u = ctl_json(dir.path(), &["uplink", "uplink1"]);
    assert_eq!(u["admin"], "down");
    assert_eq!(ctl_json(dir.path(), &["group", "vms"])["policy"], "source-mac");
}

#[test]
fn a_saved_configuration_naming_a_missing_interface_is_refused() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switch.toml");
    std::fs::write(&path, api_switch().replace("tmt-u2", "tmt-gone")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["run", path.to_str().unwrap(), "--no-api"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("uplinks[1].interface") && err.contains("tmt-gone"),
        "{err}"
    );
}

/// Kills the daemon with SIGKILL at random moments while changes are being saved: each time the
/// file must still load, and hold either the last change the API acknowledged or the one in
/// flight, never anything else.
#[test]
fn a_crash_while_saving_leaves_a_whole_configuration() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switch.toml");
    let mut text = api_switch();
    let mut kills_mid_stream = 0;
    for round in 0..8u64 {
        let (daemon, _status) = start_with(dir.path(), &text, &[]);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (stop2, dir2) = (stop.clone(), dir.path().to_path_buf());
        // Writer: reservations from 1M to 400M in turn (within vm's 600M, so each is admitted);
        // remembers the last acknowledged and the one in flight.
        let writer = std::thread::spawn(move || {
            let (mut acked, mut sent) = (None, None);
            let mut m = 1 + round * 37;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                sent = Some(m);
                let (code, _, _) = ctl(&dir2, &["port", "vm2", "--reservation", &format!("{m}M")]);
                if code != 0 {
                    break; // the daemon is gone
                }
                acked = Some(m);
                m = m % 400 + 1;
            }
            (acked, sent)
        });
        // Kill somewhere between 50 and 400 ms into the writes.
        std::thread::sleep(Duration::from_millis(50 + (round * 53) % 350));
        signal(&daemon.0, libc::SIGKILL);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (acked, sent) = writer.join().unwrap();
        drop(daemon);
        text = std::fs::read_to_string(&path).unwrap();
        let check = Command::new(env!("CARGO_BIN_EXE_teamster"))
            .args(["run", path.to_str().unwrap(), "--check", "--no-api"])
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "round {round}: the saved file does not load: {}\n{text}",
            String::from_utf8_lossy(&check.stderr)
        );
        let saved = text
            .split("name = \"vm2\"")
            .nth(1)
            .and_then(|rest| rest.split("reservation = \"").nth(1))
            .and_then(|r| r.split("Mbps").next())
            .and_then(|m| m.parse::<u64>().ok());
        eprintln!("round {round}: acknowledged {acked:?}, in flight {sent:?}, saved {saved:?}");
        if acked.is_some() {
            kills_mid_stream += 1;
            assert!(
                saved == acked || saved == sent,
                "round {round}: saved {saved:?}, acknowledged {acked:?}, in flight {sent:?}"
            );
        }
    }
    assert!(
        kills_mid_stream >= 6,
        "only {kills_mid_stream} of 8 kills landed during writes"
    );
}
