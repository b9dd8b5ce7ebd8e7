//! `teamster controller` as a process: hosts register over its API, `teamster ctl vm` and
//! `ctl cluster` drive Figure 2's sequence, refusals change nothing, and a controller killed
//! with SIGKILL mid-plan comes back with every VM on exactly one host and its migration still
//! under way. As root, a local user attacks it: churning connections without the token, and
//! swapping a symlink for its state directory while it starts.

mod controllers;
mod http1;
#[path = "../../teamster-dp/tests/live/mod.rs"]
#[allow(dead_code)] // as_root: this binary needs root only for its attacker
mod live;
mod local_user;

use controllers::ctl;
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

/// A controller on `dir`'s state and socket. Its hosts here are API calls that report only
/// when a test says so: unless `extra` sets it, none is failed for its silence.
fn start(dir: &Path, extra: &[&str]) -> Controller {
    let socket = dir.join("controller.sock");
    let timeout: &[&str] = if extra.contains(&"--host-timeout-s") {
        &[]
    } else {
        &["--host-timeout-s", "3600"]
    };
    let child = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "--state"])
        .arg(dir.join("state.redb"))
        .arg("--socket")
        .arg(&socket)
        .args(timeout)
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
    while !line.contains("API on http") && Instant::now() < deadline {
        let mut b = [0u8; 256];
        let n = out.read(&mut b).unwrap();
        assert!(n > 0, "the controller's output ended: {line}");
        line.push_str(&String::from_utf8_lossy(&b[..n]));
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    line.split("API on http")
        .nth(1)
        .unwrap()
        .split("://")
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

fn cluster(socket: &Path) -> serde_json::Value {
    let (code, out, err) = ctl(socket, &["cluster", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// Host `name` in a cluster view.
fn host_view(c: &serde_json::Value, name: &str) -> serde_json::Value {
    let hosts = c["hosts"].as_array().unwrap();
    hosts.iter().find(|h| h["name"] == name).unwrap().clone()
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

/// The controller's watch, as a process: a host that stops reporting is failed after the host
/// timeout (an event on the controller's output), its VM restarts on the host that reports,
/// and a power-on naming the silent host is refused with the reason; heard again, the host is
/// up and assigned nothing, held down for the host timeout (no new VMs), and then takes VMs.
#[test]
fn a_host_that_stops_reporting_is_failed_and_its_vm_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = start(dir.path(), &["--host-timeout-s", "2"]);
    // The controller's output, read on by a thread of its own.
    let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut out = c.child.stdout.take().unwrap();
    let sink = said.clone();
    std::thread::spawn(move || {
        let mut b = [0u8; 1024];
        while let Ok(n @ 1..) = out.read(&mut b) {
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&b[..n]));
        }
    });
    let report = |host: &str, attached: &str| {
        let body = format!(r#"{{"attached": [{attached}]}}"#);
        http(&c.socket, "POST", &format!("/api/v1/hosts/{host}/report"), Some(&body))
    };
    for h in ["quiet", "alive"] {
        let (code, body) = http(&c.socket, "PUT", &format!("/api/v1/hosts/{h}"), Some(SHAPE));
        assert_eq!(code, 200, "{body}");
    }
    let (code, _, err) = ctl(
        &c.socket,
        &[
            "vm",
            "power-on",
            "vm1",
            "--host",
            "quiet",
            "--pool",
            "vm-pool",
            "--reservation",
            "1G",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // alive reports every 200 ms; quiet never again. Within 15 s quiet is down and vm1 on alive.
    let deadline = Instant::now() + Duration::from_secs(15);
    let view = loop {
        assert_eq!(report("alive", "").0, 200);
        let v = cluster(&c.socket);
        let quiet = host_view(&v, "quiet");
        if quiet["down_since_s"].is_u64() && where_vms_are(&v)[0].1 == "alive" {
            break v;
        }
        assert!(Instant::now() < deadline, "quiet not failed in 15 s: {v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        where_vms_are(&view),
        [("vm1".into(), "alive".into(), Some("quiet".into()))]
    );
    let quiet = &host_view(&view, "quiet");
    assert!(
        quiet["unavailable"].as_str().unwrap().contains("not responding"),
        "{quiet}"
    );
    let (code, _, err) = ctl(
        &c.socket,
        &["vm", "power-on", "vm2", "--host", "quiet", "--pool", "vm-pool"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("not responding"), "{err}");
    // The event, on the controller's output (awaited: the pipe is read by another thread).
    let deadline = Instant::now() + Duration::from_secs(5);
    while !said.lock().unwrap().contains("quiet: host down: not responding") {
        assert!(Instant::now() < deadline, "no event: {}", said.lock().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    // quiet reports again: it is up, and told to run nothing.
    let (code, body) = report("quiet", r#""vm1""#);
    assert_eq!(code, 200, "{body}");
    let told: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(told["assignments"].as_array().map(Vec::len), Some(0), "{told}");
    let v = cluster(&c.socket);
    let quiet = host_view(&v, "quiet");
    let held = quiet["unavailable"].as_str().unwrap_or_default();
    assert!(quiet["down_since_s"].is_null() && held.contains("held down"), "{quiet}");
    // Held down for the host timeout (2 s): reporting steadily, it takes VMs again.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert_eq!(report("quiet", "").0, 200);
        if host_view(&cluster(&c.socket), "quiet")["unavailable"].is_null() {
            break;
        }
        assert!(Instant::now() < deadline, "quiet still held down after 15 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The controller ignores SIGPIPE, as the switch does: a client that resets its connection
/// while the controller writes to it (a TLS close meeting a client killed mid-exchange, found
/// by the load generator: the vectored writes that hyper and rustls make raise SIGPIPE, which
/// kills a process that does not ignore it) gets EPIPE on that connection, and nothing more.
#[test]
fn the_controller_ignores_sigpipe() {
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), &[]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", c.child.id())).unwrap();
    let ignored = (status.lines())
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .unwrap();
    assert_ne!(
        ignored & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE is not ignored: {ignored:x}"
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

/// How one start of a controller on `state` ended: Ok(the hosts it loaded), or Err(its error).
fn one_start(state: &Path, socket: &Path) -> Result<Vec<String>, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "--state"])
        .arg(state)
        .arg("--socket")
        .arg(socket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(_status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return Err(err);
        }
        if UnixStream::connect(socket).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the controller neither served nor stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = Controller {
        child,
        socket: socket.to_path_buf(),
    };
    let hosts = cluster(&c.socket)["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap().to_string())
        .collect();
    drop(c);
    Ok(hosts)
}

/// A store holding one registered host, `host`, made by a controller at `state`.
fn state_with_host(state: &Path, host: &str) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("c.sock");
    let c = {
        let child = Command::new(env!("CARGO_BIN_EXE_teamster"))
            .args(["controller", "--state"])
            .arg(state)
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "the controller did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Controller { child, socket }
    };
    let (status, body) = http(&c.socket, "PUT", &format!("/api/v1/hosts/{host}"), Some(SHAPE));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_state_directory_swapped_by_another_user_during_start_is_never_loaded() {
    if !live::skip_unless(live::running_as_root(), "root, to run the attacker as another user") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The operator's state (host "legit"), in a directory of root's.
    let good = top.path().join("good");
    std::fs::create_dir(&good).unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o700)).unwrap();
    state_with_host(&good.join("controller.redb"), "legit");
    // The attacker's (host "planted"), in a directory of nobody's.
    let evil = top.path().join("evil");
    std::fs::create_dir(&evil).unwrap();
    state_with_host(&evil.join("controller.redb"), "planted");
    for p in [&evil, &evil.join("controller.redb")] {
        std::os::unix::fs::chown(p, Some(local_user::NOBODY), Some(local_user::NOBODY)).unwrap();
    }
    // A shared directory like /tmp, where the controller is told its state lives.
    let shared = top.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let state = shared.join("state").join("controller.redb");
    let socket = top.path().join("c.sock");

    // The way to the operator's directory is long: twenty links of the attacker's, each going
    // `a/../` 600 times through a directory of theirs, so resolving it takes a while. The swapped
    // link points at the first of them or at the attacker's directory.
    let detour = shared.join("a");
    std::fs::create_dir(&detour).unwrap();
    std::os::unix::fs::chown(&detour, Some(local_user::NOBODY), Some(local_user::NOBODY)).unwrap();
    for i in 1..=20 {
        let next = if i < 20 {
            format!("l{}", i + 1)
        } else {
            "../good".into()
        };
        let link = shared.join(format!("l{i}"));
        std::os::unix::fs::symlink(format!("{}{next}", "a/../".repeat(600)), &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(local_user::NOBODY), Some(local_user::NOBODY)).unwrap();
    }
    let swapper = local_user::swap_symlink(&shared, "state", Path::new("l1"), &evil, Duration::from_micros(500));
    assert!(
        swapper.await_done(100, Duration::from_secs(10)),
        "the swapper did not get going: errno {}",
        local_user::outcome(&swapper)
    );
    let starts = 60;

    let (mut planted, mut legit, mut refused) = (0, 0, Vec::new());
    for _ in 0..starts {
        match one_start(&state, &socket) {
            Ok(hosts) if hosts.iter().any(|h| h == "planted") => planted += 1,
            Ok(_) => legit += 1,
            Err(e) => refused.push(e),
        }
    }
    let swaps = swapper.report().done.load(std::sync::atomic::Ordering::Relaxed);
    drop(swapper);
    eprintln!(
        "{starts} starts with the state directory swapped {swaps} times by uid {}: the attacker's state loaded {planted} times, the operator's {legit}, refused {}",
        local_user::NOBODY,
        refused.len()
    );
    let mut reasons: Vec<&String> = refused.iter().collect();
    reasons.dedup();
    for e in reasons {
        eprintln!("refused: {}", e.trim());
    }
    assert_eq!(planted, 0);
    for e in &refused {
        assert!(e.contains("--state directory") && e.contains("uid 65534"), "{e}");
    }
    // A symlink root made is followed as before: the operator's state.
    std::fs::remove_file(shared.join("state")).unwrap();
    std::os::unix::fs::symlink(&good, shared.join("state")).unwrap();
    assert_eq!(one_start(&state, &socket), Ok(vec!["legit".to_string()]));
}

/// A TLS controller's arguments: listening on `listen` with the token in `token`, presenting
/// `cadir`'s `cert` and `key`, taking hosts' certificates signed by its `ca.pem`.
fn tls_args(listen: &str, token: &Path, cadir: &Path, cert: &str, key: &str) -> Vec<String> {
    let f = |n: &str| cadir.join(n).to_str().unwrap().to_string();
    let token = token.to_str().unwrap().to_string();
    [
        "--listen".to_string(),
        listen.to_string(),
        "--token-file".to_string(),
        token,
        "--tls-cert".to_string(),
        f(cert),
        "--tls-key".to_string(),
        f(key),
        "--client-ca".to_string(),
        f("ca.pem"),
    ]
    .to_vec()
}

/// Runs `teamster controller ca ARGS`: (exit code, standard error).
fn ca(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["controller", "ca"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// A request over TLS as `teamster ctl` and the hosts' agents make it: (status, body), or the
/// connection's error.
fn tls_request(
    url: &str,
    ca: &Path,
    identity: Option<(&Path, &Path)>,
    token: Option<&Path>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), String> {
    let target = teamster::http::client::Target {
        socket: PathBuf::new(),
        url: Some(url.to_string()),
        token_file: token.map(Path::to_path_buf),
        ca: Some(ca.to_path_buf()),
        cert: identity.map(|i| i.0.to_path_buf()),
        key: identity.map(|i| i.1.to_path_buf()),
        tls: None,
        source: None,
    };
    let body = body.map(|b| serde_json::from_str(b).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = rt.block_on(teamster::http::client::request(&target, method, path, body))?;
    Ok((a.status, String::from_utf8_lossy(&a.body).to_string()))
}

/// The controller on the network: its CA made and its certificates issued by `teamster
/// controller ca` (keys 0600, nothing overwritten); a TLS listener on every address; each host
/// may register and report only as itself (another host's certificate, a client certificate, a
/// foreign CA's, an expired one or a denied host's: refused, nothing changed); operators'
/// requests need the token and a host's certificate grants none of them.
#[test]
fn over_tls_a_host_acts_only_as_itself_and_operators_need_the_token() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cadir = dir.path().join("ca");
    let cad = cadir.to_str().unwrap();
    assert_eq!(ca(&["init", "--dir", cad]).0, 0);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&cadir.join("ca.key")), 0o600);
    assert_eq!(mode(&cadir.join("ca.pem")), 0o644);
    let before = std::fs::read(cadir.join("ca.key")).unwrap();
    let (code, err) = ca(&["init", "--dir", cad]);
    assert!(code == 2 && err.contains("ca.pem exists already"), "{err}");
    assert_eq!(
        std::fs::read(cadir.join("ca.key")).unwrap(),
        before,
        "init overwrote the CA's key"
    );
    assert_eq!(
        ca(&["issue-server", "ctl", "--dir", cad, "--address", "127.0.0.1"]).0,
        0
    );
    for h in ["host1", "host2", "host3"] {
        assert_eq!(ca(&["issue-host", h, "--dir", cad]).0, 0);
    }
    assert_eq!(mode(&cadir.join("host-host1.key")), 0o600);
    assert_eq!(ca(&["issue-client", "etcd-client", "--dir", cad]).0, 0);
    let (code, err) = ca(&["issue-host", "Host_1", "--dir", cad]);
    assert!(code == 2 && err.contains("lowercase"), "{err}");
    let (code, err) = ca(&["issue-host", "host1", "--dir", cad]);
    assert!(code == 2 && err.contains("exists already"), "{err}");
    // A foreign CA's certificate for host1, and an expired one of ours.
    let foreign = dir.path().join("foreign");
    let fd = foreign.to_str().unwrap();
    assert_eq!(ca(&["init", "--dir", fd]).0, 0);
    assert_eq!(ca(&["issue-host", "host1", "--dir", fd]).0, 0);
    let ours = teamster::controller::ca::Authority::load(
        &std::fs::read_to_string(cadir.join("ca.pem")).unwrap(),
        &std::fs::read_to_string(cadir.join("ca.key")).unwrap(),
    )
    .unwrap();
    let now = time::OffsetDateTime::now_utc();
    let old = (now - time::Duration::days(10), now - time::Duration::days(1));
    let expired = ours.issue(&teamster::controller::ca::Kind::Host, "host1", old).unwrap();
    let (exp_pem, exp_key) = (dir.path().join("expired.pem"), dir.path().join("expired.key"));
    std::fs::write(&exp_pem, expired.cert_pem).unwrap();
    std::fs::write(&exp_key, expired.key_pem).unwrap();
    std::fs::set_permissions(&exp_key, std::fs::Permissions::from_mode(0o600)).unwrap();

    let token = dir.path().join("token");
    std::fs::write(&token, "operator-token-42\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let deny = dir.path().join("deny");
    std::fs::write(&deny, "# compromised\nhost3\n").unwrap();
    let mut args = tls_args("0.0.0.0:0", &token, &cadir, "server-ctl.pem", "server-ctl.key");
    args.extend(["--deny-hosts".to_string(), deny.to_str().unwrap().to_string()]);
    let mut c = start(dir.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    let port = tcp_address(&mut c).rsplit(':').next().unwrap().to_string();
    let url = format!("https://127.0.0.1:{port}");
    let ca_pem = cadir.join("ca.pem");
    let id = |h: &str| (cadir.join(format!("host-{h}.pem")), cadir.join(format!("host-{h}.key")));
    let (h1, h2, h3) = (id("host1"), id("host2"), id("host3"));
    let as_host = |who: &(PathBuf, PathBuf), method: &str, path: &str, body: Option<&str>| {
        tls_request(&url, &ca_pem, Some((&who.0, &who.1)), None, method, path, body)
    };
    let report = r#"{"links": {"uplink1": true}}"#;

    // Each host as itself.
    assert_eq!(as_host(&h1, "PUT", "/api/v1/hosts/host1", Some(SHAPE)).unwrap().0, 200);
    assert_eq!(as_host(&h2, "PUT", "/api/v1/hosts/host2", Some(SHAPE)).unwrap().0, 200);
    assert_eq!(
        as_host(&h1, "POST", "/api/v1/hosts/host1/report", Some(report))
            .unwrap()
            .0,
        200
    );
    let before = cluster(&c.socket);
    // Hostile reports from a host with a valid certificate: too large, wrongly typed, naming
    // an uplink it lacks. Each refused, nothing changed (checked with the rest below).
    let huge = format!(
        r#"{{"links": {{"uplink1": true}}, "attached": ["{}"]}}"#,
        "v".repeat(70 * 1024)
    );
    let at_report = "/api/v1/hosts/host1/report";
    // (413, or the connection cut while the rest of the body was still being sent.)
    let r = as_host(&h1, "POST", at_report, Some(&huge));
    assert!(matches!(r, Ok((413, _)) | Err(_)), "{r:?}");
    assert_eq!(as_host(&h1, "POST", at_report, Some(r#"{"links": 5}"#)).unwrap().0, 422);
    let (status, body) = as_host(&h1, "POST", at_report, Some(r#"{"links": {"eth9": false}}"#)).unwrap();
    assert!(status == 400 && body.contains("no uplink `eth9`"), "{status} {body}");
    // host1's certificate for host2: refused, nothing changed.
    let down = r#"{"links": {"uplink1": false}}"#;
    let (status, body) = as_host(&h1, "POST", "/api/v1/hosts/host2/report", Some(down)).unwrap();
    assert!(status == 403 && body.contains("not this host's"), "{status} {body}");
    assert_eq!(as_host(&h1, "PUT", "/api/v1/hosts/host2", Some(SHAPE)).unwrap().0, 403);
    assert_eq!(as_host(&h1, "PUT", "/api/v1/hosts/host9", Some(SHAPE)).unwrap().0, 403);
    // A client certificate proves no host; nor does the operator's token.
    let client = (
        cadir.join("client-etcd-client.pem"),
        cadir.join("client-etcd-client.key"),
    );
    assert_eq!(
        as_host(&client, "PUT", "/api/v1/hosts/host1", Some(SHAPE)).unwrap().0,
        403
    );
    let (status, _) = tls_request(
        &url,
        &ca_pem,
        None,
        Some(&token),
        "POST",
        "/api/v1/hosts/host2/report",
        Some(down),
    )
    .unwrap();
    assert_eq!(status, 401);
    // host3 holds a valid certificate but is denied.
    let (status, body) = as_host(&h3, "PUT", "/api/v1/hosts/host3", Some(SHAPE)).unwrap();
    assert!(status == 403 && body.contains("deny list"), "{status} {body}");
    // A foreign CA's certificate and an expired one fail in the handshake.
    let fh = (foreign.join("host-host1.pem"), foreign.join("host-host1.key"));
    let e = as_host(&fh, "POST", "/api/v1/hosts/host1/report", Some(down)).unwrap_err();
    assert!(e.contains("TLS") || e.contains("API"), "{e}");
    let e = as_host(
        &(exp_pem.clone(), exp_key.clone()),
        "POST",
        "/api/v1/hosts/host1/report",
        Some(down),
    );
    assert!(e.is_err(), "an expired certificate was taken: {e:?}");
    let (_, metrics) = http(&c.socket, "GET", "/metrics", None);
    let failed: u64 = (metrics.lines())
        .find_map(|l| l.strip_prefix("teamster_api_tls_handshakes_failed_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        failed >= 2,
        "the foreign and expired certificates' handshakes are counted: {failed}"
    );
    let mut after = cluster(&c.socket);
    for v in [&mut after] {
        for h in v["hosts"].as_array_mut().unwrap() {
            h["reported_s"] = before["hosts"][0]["reported_s"].clone();
        }
    }
    let mut before = before;
    for h in before["hosts"].as_array_mut().unwrap() {
        h["reported_s"] = after["hosts"][0]["reported_s"].clone();
    }
    assert_eq!(after["hosts"], before["hosts"], "a refused request changed the cluster");

    // Operators: the token, over TLS, through `teamster ctl`; a host's certificate grants none.
    let vm = r#"{"name": "c1", "mac": "02:00:00:00:00:01"}"#;
    let (status, body) = as_host(&h1, "POST", "/api/v1/vms", Some(vm)).unwrap();
    assert!(status == 403 && body.contains("operator"), "{status} {body}");
    assert_eq!(as_host(&h1, "GET", "/api/v1/cluster", None).unwrap().0, 403);
    assert_eq!(as_host(&h1, "DELETE", "/api/v1/hosts/host2", None).unwrap().0, 403);
    let (status, _) = tls_request(&url, &ca_pem, None, None, "POST", "/api/v1/vms", Some(vm)).unwrap();
    assert_eq!(status, 401);
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args([
            "ctl",
            "--url",
            &url,
            "--ca",
            ca_pem.to_str().unwrap(),
            "--token-file",
            token.to_str().unwrap(),
        ])
        .args([
            "vm",
            "power-on",
            "c1",
            "--mac",
            "02:00:00:00:00:01",
            "--reservation",
            "1G",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(where_vms_are(&cluster(&c.socket)).len(), 1);
    // Without --ca, https:// is refused before anything is sent.
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["ctl", "--url", &url, "--token-file", token.to_str().unwrap(), "cluster"])
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--ca"));
    // Plain HTTP to the TLS port gets no answer.
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    use std::io::Write;
    let _ = s.write_all(b"GET /api/v1/cluster HTTP/1.1\r\nhost: x\r\nauthorization: Bearer operator-token-42\r\n\r\n");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "plain HTTP was answered on the TLS port");
    drop(c);

    // Bad TLS arguments: a clear error naming them, exit 2.
    let plain = ["--listen", "0.0.0.0:0", "--token-file", token.to_str().unwrap()].map(str::to_string);
    for (args, says) in [
        (plain.to_vec(), "needs TLS"),
        (
            tls_args("127.0.0.1:0", &token, &cadir, "ca.pem", "host-host1.key"),
            "certificate and key",
        ),
        (
            tls_args("127.0.0.1:0", &token, &cadir, "server-ctl.pem", "missing.key"),
            "--tls-key",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
            .arg("controller")
            .args(&args)
            .args(["--state", dir.path().join("s2.redb").to_str().unwrap()])
            .args(["--socket", dir.path().join("x.sock").to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code() == Some(2) && err.contains(says), "{args:?}: {err}");
    }
}

/// `teamster controller load` at a small scale against a TLS controller: its simulated hosts
/// register and report with certificates of their own, the operator's power-ons are timed, and
/// it reports what the controller held (the figures at scale are in docs/cluster.md).
#[test]
fn the_load_generator_drives_a_tls_controller() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cadir = dir.path().join("ca");
    let cad = cadir.to_str().unwrap();
    assert_eq!(ca(&["init", "--dir", cad]).0, 0);
    assert_eq!(
        ca(&["issue-server", "ctl", "--dir", cad, "--address", "127.0.0.1"]).0,
        0
    );
    let token = dir.path().join("token");
    std::fs::write(&token, "operator\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let args = tls_args("127.0.0.1:0", &token, &cadir, "server-ctl.pem", "server-ctl.key");
    let mut c = start(dir.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    let port = tcp_address(&mut c).rsplit(':').next().unwrap().to_string();
    let pid = c.child.id().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args([
            "controller",
            "load",
            "--url",
            &format!("https://127.0.0.1:{port}"),
            "--ca-dir",
            cad,
        ])
        .args(["--token-file", token.to_str().unwrap(), "--hosts", "5", "--vms", "4"])
        .args(["--seconds", "2", "--interval-ms", "200", "--pid", &pid])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let answered: f64 = (text.lines())
        .find_map(|l| l.split("answered 200 ").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!(answered > 0.0, "{text}");
    assert!(
        text.contains("controller CPU:") && text.contains("store writes/s:"),
        "{text}"
    );
    // The hosts are in the cluster, with the VMs placed among them.
    let view = cluster(&c.socket);
    assert_eq!(view["hosts"].as_array().unwrap().len(), 5);
    assert!(view["vms"].as_array().unwrap().len() >= 4, "{view}");
}
