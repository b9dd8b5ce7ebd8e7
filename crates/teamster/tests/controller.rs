//! `teamster controller` as a process: hosts register over its API, `teamster ctl vm` and
//! `ctl cluster` drive Figure 2's sequence, refusals change nothing, and a controller killed
//! with SIGKILL mid-plan comes back with every VM on exactly one host and its migration still
//! under way. As root, a local user attacks it: churning connections without the token.

mod http1;
#[path = "../../teamster-dp/tests/live/mod.rs"]
#[allow(dead_code)] // as_root: this binary needs root only for its attacker
mod live;
mod local_user;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SHAPE: &str = r#"{"uplinks": [{"name": "uplink1", "capacity": "10G"}],
    "traffic_classes": [{"class": "vm"}], "pools": [{"name": "vm-pool"}], "derived": ["vm", "vm-pool"]}"#;

struct Controller {
    child: Child,
    socket: PathBuf,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, extra: &[&str]) -> Controller {
    let socket = dir.join("controller.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "--state"])
        .arg(dir.join("state.redb"))
        .arg("--socket")
        .arg(&socket)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the controller did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Controller { child, socket }
}

/// The loopback address the controller's TCP listener took, from its standard output (read on
/// to its end by a thread of its own, so the controller never writes into a closed pipe).
fn tcp_address(c: &mut Controller) -> String {
    let mut line = String::new();
    let mut out = c.child.stdout.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !line.contains("http://") && Instant::now() < deadline {
        let mut b = [0u8; 256];
        let n = out.read(&mut b).unwrap();
        assert!(n > 0, "the controller's output ended: {line}");
        line.push_str(&String::from_utf8_lossy(&b[..n]));
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    line.split("http://")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// One HTTP/1.1 request over the unix socket: (status, body).
fn http(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    http1::request(socket, method, path, body)
}

fn ctl(socket: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["ctl", "--socket"])
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn cluster(socket: &Path) -> serde_json::Value {
    let (code, out, err) = ctl(socket, &["cluster", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// Each VM's (host, moving_from).
fn where_vms_are(c: &serde_json::Value) -> Vec<(String, String, Option<String>)> {
    (c["vms"].as_array().unwrap().iter())
        .map(|v| {
            let s = |k: &str| v[k].as_str().map(str::to_string);
            (s("name").unwrap(), s("host").unwrap(), s("moving_from"))
        })
        .collect()
}

#[test]
fn figure_2_through_ctl_and_a_kill_9_mid_plan() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), &[]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&c.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // A second controller on the same state and socket is refused.
    let second = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "--state"])
        .arg(dir.path().join("state.redb"))
        .arg("--socket")
        .arg(dir.path().join("other.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        second.status.code() == Some(2) && err.contains("another controller"),
        "{err}"
    );

    for h in ["host1", "host2"] {
        let (status, body) = http(&c.socket, "PUT", &format!("/api/v1/hosts/{h}"), Some(SHAPE));
        assert_eq!(status, 200, "{body}");
    }
    for v in ["vm1", "vm2", "vm3"] {
        let (code, out, err) = ctl(
            &c.socket,
            &["vm", "power-on", v, "--host", "host1", "--pool", "vm-pool"],
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("placed on host1"), "{out}");
    }
    // A reservation no host can hold (75% of 10G is 7.5G) is refused.
    let (code, _, err) = ctl(&c.socket, &["vm", "set", "vm3", "--reservation", "9G"]);
    assert!(
        code == 1 && err.contains("409") && err.contains("75% of uplink"),
        "{err}"
    );
    let (status, body) = http(&c.socket, "PUT", "/api/v1/quotas/vm-pool", Some(r#"{"quota": "15G"}"#));
    assert_eq!(status, 200, "{body}");
    let (code, out, _) = ctl(&c.socket, &["vm", "set", "vm1", "--reservation", "7.5G"]);
    assert_eq!((code, out.as_str()), (0, "done\n"));
    let (code, out, err) = ctl(&c.socket, &["vm", "set", "vm2", "--reservation", "4.5G"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("migrating vm2 host1 -> host2"), "{out}");

    // Refusals name the problem and change nothing.
    let before = cluster(&c.socket);
    let (code, _, err) = ctl(&c.socket, &["vm", "set", "vm3", "--reservation", "9G"]);
    assert!(
        code == 1 && err.contains("409") && err.contains("cluster quota"),
        "{err}"
    );
    let (code, _, err) = ctl(&c.socket, &["vm", "power-on", "vm4", "--host", "host9"]);
    assert!(
        code == 1 && err.contains("404") && err.contains("no host host9"),
        "{err}"
    );
    let (status, body) = http(
        &c.socket,
        "POST",
        "/api/v1/vms",
        Some(r#"{"name": "vm5", "colour": "red"}"#),
    );
    assert!(status == 422 && body.contains("colour"), "{status} {body}");
    let (status, _) = http(&c.socket, "PUT", "/api/v1/hosts/bad", Some(r#"{"uplinks": []}"#));
    assert_eq!(status, 400);
    assert_eq!(cluster(&c.socket), before);

    // Killed mid-plan (vm2's destination has not confirmed): back with every VM once.
    let mut c = c;
    unsafe { libc::kill(c.child.id() as i32, libc::SIGKILL) };
    let _ = c.child.wait();
    drop(c);
    let c = start(dir.path(), &[]);
    let after = cluster(&c.socket);
    assert_eq!(after, before, "the state is what was last accepted");
    let vms = where_vms_are(&after);
    assert_eq!(
        vms,
        [
            ("vm1".into(), "host1".into(), None),
            ("vm2".into(), "host2".into(), Some("host1".into())),
            ("vm3".into(), "host1".into(), None),
        ]
    );
    // host2 reports vm2 attached: the migration is done; it is told what to run.
    let (status, body) = http(
        &c.socket,
        "POST",
        "/api/v1/hosts/host2/report",
        Some(r#"{"attached": ["vm2"]}"#),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"vm\":\"vm2\"") && body.contains("4.5Gbps"), "{body}");
    assert_eq!(where_vms_are(&cluster(&c.socket))[1].2, None);
    let (code, out, _) = ctl(&c.socket, &["vm", "set", "vm3", "--reservation", "3G"]);
    assert!(code == 0 && out.contains("migrating vm3 host1 -> host2"), "{out}");
    let (code, table, _) = ctl(&c.socket, &["cluster"]);
    assert!(
        code == 0 && table.contains("host2") && table.contains("reservations that cannot be kept: 0"),
        "{table}"
    );
    let (_, metrics) = http(&c.socket, "GET", "/metrics", None);
    assert!(metrics.contains("teamster_controller_vms 3"), "{metrics}");
    let (_, doc) = http(&c.socket, "GET", "/openapi.json", None);
    assert!(
        doc.contains("/api/v1/vms/{name}") && doc.contains("/api/v1/hosts/{name}/report"),
        "{doc}"
    );
}

#[test]
fn tcp_needs_the_token_and_a_bad_state_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "secret-token-123\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut c = start(
        dir.path(),
        &["--listen", "127.0.0.1:0", "--token-file", token.to_str().unwrap()],
    );
    let addr = tcp_address(&mut c);
    let get = |token: Option<&str>| {
        let s = std::net::TcpStream::connect(&addr).unwrap();
        http1::exchange(s, "GET", "/api/v1/cluster", token, None).0
    };
    assert_eq!(get(None), 401);
    assert_eq!(get(Some("wrong")), 401);
    assert_eq!(get(Some("secret-token-123")), 200);
    drop(c);
    // A state path that is a directory, or a non-loopback listener: a clear error, exit 2.
    for args in [
        vec!["--state", dir.path().to_str().unwrap()],
        vec!["--listen", "0.0.0.0:0"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
            .arg("controller")
            .args(&args)
            .args(["--socket", dir.path().join("x.sock").to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code() == Some(2) && err.contains("teamster controller:"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_user_churning_connections_without_the_token_does_not_lock_out_the_controller() {
    if !live::skip_unless(live::running_as_root(), "root, to run the attacker as another user") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let token = "churn-token-0123456789abcdef";
    let socket = dir.path().join("controller.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "--state"])
        .arg(dir.path().join("state.redb"))
        .arg("--socket")
        .arg(&socket)
        .args(["--listen", "127.0.0.1:0"])
        .env("TEAMSTER_API_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut c = Controller { child, socket };
    let addr = tcp_address(&mut c);
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    let mut failed = Vec::new();
    for n in [70, 130, 1000] {
        let attacker = local_user::churn(port, n);
        let r = attacker.report();
        let ordering = std::sync::atomic::Ordering::Relaxed;
        assert!(
            attacker.await_done(2 * n as u64, Duration::from_secs(20)),
            "the attacker did not open {} connections: {} opened, errno {}",
            2 * n,
            r.done.load(ordering),
            r.errno.load(ordering)
        );
        let (opened0, cpu0, t0) = (
            r.done.load(ordering),
            local_user::cpu_time(c.child.id()),
            Instant::now(),
        );
        let b = http1::burst(port, token, "/api/v1/cluster", 16);
        let cpu = (local_user::cpu_time(c.child.id()) - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
        let opened = r.done.load(ordering) - opened0;
        drop(attacker);
        eprintln!(
            "controller, {n} churning connections (uid {}, no token): {} of {} authorised requests failed, slowest answer {:.3} s, median {:.3} s; {opened} attacker connections opened meanwhile; controller CPU {:.0}%",
            local_user::NOBODY,
            b.failed,
            b.sent,
            b.slowest.as_secs_f64(),
            b.median.as_secs_f64(),
            cpu * 100.0
        );
        if b.failed > 0 || b.slowest >= Duration::from_secs(2) {
            failed.push((n, b));
        }
    }
    // The unix socket still answers.
    assert_eq!(http(&c.socket, "GET", "/api/v1/cluster", None).0, 200);
    assert!(failed.is_empty(), "{failed:?}");
}
