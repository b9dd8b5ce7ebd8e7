//! The live switch against a hostile local user or client, each attack as it was reproduced on
//! the daemon before it was hardened, now doing no harm: symlinks planted at the names root
//! writes; a second daemon started on the same switch or socket; hundreds of idle, trickling and
//! slow connections; another user churning connections without the token; oversize and
//! non-object bodies; a token full of URL metacharacters.
//! (Directory and token-file modes are checked before any interface is, so `tests/cli.rs`
//! covers them without root.) Topology and helpers: [`netns`].

mod http1;
mod local_user;
mod netns;
use netns::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Sends `request` (raw bytes) to 127.0.0.1:`port` and reads the answer until the server closes
/// (a reset after the answer is not an error: the server may close with our body unread);
/// returns (status, the whole answer).
fn exchange(port: u16, request: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(request);
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer).to_string();
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, answer)
}

/// A request with `Connection: close`; `auth` is the raw Authorization value, if any.
fn request(method: &str, path: &str, auth: Option<&str>, body: Option<&str>) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: teamster\r\nConnection: close\r\n");
    if let Some(a) = auth {
        r += &format!("Authorization: {a}\r\n");
    }
    if let Some(b) = body {
        r += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len());
    }
    r += "\r\n";
    r += body.unwrap_or("");
    r.into_bytes()
}

/// Waits up to `limit` for `ok`, polling; returns how long it took, or None.
fn within(limit: Duration, mut ok: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    loop {
        if ok() {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The status file's clock, once it parses.
fn status_t(path: &Path) -> f64 {
    status(path)["t_s"].as_f64().unwrap_or(-1.0)
}

#[test]
fn root_never_writes_through_a_name_someone_planted() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let top = tempfile::tempdir().unwrap();
    // A shared directory like /tmp: root's and sticky, so anyone may plant names in it.
    let shared = top.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = top.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let victim2 = top.path().join("victim2");
    std::fs::write(&victim2, "precious too").unwrap();
    // The status file's temporary as the old daemon named it: it was overwritten within 1 s.
    std::os::unix::fs::symlink(&victim, shared.join("status.tmp")).unwrap();

    let (daemon, status_path) = start_with(&shared, &api_switch(), &[]);
    // The configuration's temporary as the old daemon named it (from its pid).
    let old_config_tmp = shared.join(format!(".switch.toml.tmp-{}", daemon.0.id()));
    std::os::unix::fs::symlink(&victim, &old_config_tmp).unwrap();
    // The status file itself, swapped for a symlink: the next write must replace the link.
    std::fs::remove_file(&status_path).unwrap();
    std::os::unix::fs::symlink(&victim2, &status_path).unwrap();
    let replaced = within(Duration::from_secs(10), || {
        std::fs::symlink_metadata(&status_path).is_ok_and(|m| m.is_file())
    });
    assert!(replaced.is_some(), "the status file was not rewritten");
    // Two more writes, for good measure.
    let t = status_t(&status_path);
    assert!(
        within(Duration::from_secs(10), || status_t(&status_path) >= t + 1.5).is_some(),
        "the status file stopped being written"
    );
    // A change, saved through the configuration's temporary.
    let (code, _, err) = ctl(&shared, &["port", "vm1", "--reservation", "150M"]);
    assert_eq!(code, 0, "{err}");

    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(std::fs::read_to_string(&victim2).unwrap(), "precious too");
    assert!(std::fs::read_to_string(shared.join("switch.toml"))
        .unwrap()
        .contains("150Mbps"));
    let status_meta = std::fs::symlink_metadata(&status_path).unwrap();
    assert!(status_meta.is_file() && status_meta.mode() & 0o777 == 0o644);
    for planted in [shared.join("status.tmp"), old_config_tmp] {
        assert_eq!(std::fs::read_link(&planted).unwrap(), victim, "{}", planted.display());
    }
    drop(daemon);
}

#[test]
fn a_second_daemon_on_the_same_switch_or_socket_is_refused_and_the_first_keeps_its_api() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let (mut first, status_path) = start_with(dir.path(), &api_switch(), &[]);
    let socket = dir.path().join("api.sock");
    let inode = std::fs::metadata(&socket).unwrap().ino();
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("switch.toml"), api_switch()).unwrap();

    // The same switch.toml (any socket), then another file on the same socket.
    for (config, sock, names) in [
        (
            dir.path().join("switch.toml"),
            other.path().join("api.sock"),
            "switch.toml.lock",
        ),
        (other.path().join("switch.toml"), socket.clone(), "api.sock.lock"),
    ] {
        let t0 = Instant::now();
        let second = Command::new("timeout")
            .arg("20")
            .arg(env!("CARGO_BIN_EXE_teamster"))
            .args(["run", config.to_str().unwrap(), "--api-socket", sock.to_str().unwrap()])
            .args(["--status-file", other.path().join("status.json").to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&second.stderr);
        eprintln!("second daemon ({:.2} s): {err}", t0.elapsed().as_secs_f64());
        assert_eq!(second.status.code(), Some(1), "{err}");
        assert!(err.contains(names) && err.contains("held by another teamster"), "{err}");
        assert!(err.contains(&format!("pid {}", first.0.id())), "{err}");
        // The first one is untouched: its socket is the same file and answers.
        assert_eq!(std::fs::metadata(&socket).unwrap().ino(), inode);
        let (code, out, err) = ctl(dir.path(), &["status", "--json"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("\"uplinks\""), "{out}");
        assert!(!other.path().join("status.json").exists());
    }
    assert!(first.0.try_wait().unwrap().is_none(), "the first daemon died");
    let t = status_t(&status_path);
    assert!(within(Duration::from_secs(10), || status_t(&status_path) > t).is_some());
}

/// Writes a request head to `s` a byte every 200 ms (never finishing it) until the server
/// closes the connection; returns how long that took (at most 40 s).
fn trickle<S: Write + Send + 'static>(mut s: S) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        for b in b"GET /api/v1/status HTTP/1.1\r\nHost: teamster\r\nX-Pad: "
            .iter()
            .cycle()
        {
            if s.write_all(&[*b]).is_err() || t0.elapsed() > Duration::from_secs(40) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        t0.elapsed()
    })
}

/// Starts the daemon on the API switch under a limit of 256 open files (a common soft limit,
/// at which about 240 idle connections used to exhaust it), with the TCP API on a free port.
fn start_limited(dir: &Path, token: &str) -> (Daemon, u16) {
    use std::os::unix::fs::OpenOptionsExt;
    let config = dir.join("switch.toml");
    std::fs::write(&config, api_switch()).unwrap();
    let token_file = dir.join("token");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&token_file)
        .unwrap();
    f.write_all(token.as_bytes()).unwrap();
    let child = Command::new("sh")
        .args(["-c", "ulimit -n 256 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_teamster"))
        .args(["run", config.to_str().unwrap()])
        .args(["--status-file", dir.join("status.json").to_str().unwrap()])
        .args(["--api-socket", dir.join("api.sock").to_str().unwrap()])
        .args(["--api-listen", "127.0.0.1:0"])
        .args(["--api-token-file", token_file.to_str().unwrap()])
        .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let daemon = Daemon(child);
    status(&dir.join("status.json"));
    (daemon, api_port(dir))
}

#[test]
fn idle_trickling_and_slow_clients_lock_out_neither_api() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let token = "flood-token-0123456789abcdef";
    let (mut daemon, port) = start_limited(dir.path(), token);
    let bearer = format!("Bearer {token}");

    // A slow body from a client with the token: its head, then 10 of 50 bytes, then nothing.
    let slow_body = {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let head = format!(
            "PATCH /api/v1/ports/vm1 HTTP/1.1\r\nHost: t\r\nAuthorization: {bearer}\r\n\
             Content-Type: application/json\r\nContent-Length: 50\r\n\r\n{{\"shares\":"
        );
        s.write_all(head.as_bytes()).unwrap();
        s
    };
    let slow_since = Instant::now();
    // 300 idle connections: never a byte.
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(5)).unwrap())
        .collect();
    let flood_at = Instant::now();

    // Both APIs answer, flood or not: the unix socket at once (it has its own cap); TCP within
    // the grace of the idle connections (a client with the token evicts one that has had a
    // second to present it, and retries if it was turned away before that).
    for round in 0..3 {
        let t0 = Instant::now();
        let (code, out, err) = ctl(dir.path(), &["status", "--json"]);
        let unix = t0.elapsed();
        assert!(code == 0 && out.contains("\"uplinks\""), "round {round}: unix: {err}");
        let mut last = (0, String::new());
        let tcp = within(Duration::from_secs(5), || {
            last = exchange(port, &request("GET", "/api/v1/status", Some(&bearer), None));
            last.0 == 200
        })
        .unwrap_or_else(|| panic!("round {round}: tcp: {}", last.1));
        eprintln!(
            "round {round}: with 300 idle connections open, unix answered in {:.3} s, tcp in {:.3} s",
            unix.as_secs_f64(),
            tcp.as_secs_f64()
        );
        assert!(unix < Duration::from_secs(5) && tcp < Duration::from_secs(5));
    }

    // Every idle connection is closed by the server within the head timeout (10 s) and a margin.
    let deadline = flood_at + Duration::from_secs(25);
    let mut closed = 0;
    let mut last = Duration::ZERO;
    for mut s in idle {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        s.set_read_timeout(Some(left)).unwrap();
        let mut b = [0u8; 64];
        match s.read(&mut b) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
        last = last.max(flood_at.elapsed());
    }
    eprintln!(
        "{closed} of 300 idle connections closed by the server, the last within {:.1} s",
        last.as_secs_f64()
    );
    assert_eq!(closed, 300);

    // The slow body: a 408 once the body timeout (10 s) has passed.
    let mut s = slow_body;
    s.set_read_timeout(Some(Duration::from_secs(25))).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    eprintln!(
        "slow body answered after {:.1} s: {}",
        slow_since.elapsed().as_secs_f64(),
        answer.lines().next().unwrap_or("")
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");

    // Connections trickling a request head, a byte every 200 ms, on both listeners: closed when
    // the head timeout (10 s) runs out, however steadily the bytes come.
    let tcp = trickle(TcpStream::connect(("127.0.0.1", port)).unwrap());
    let unix = trickle(std::os::unix::net::UnixStream::connect(dir.path().join("api.sock")).unwrap());
    for (listener, t) in [("tcp", tcp), ("unix", unix)] {
        let trickled = t.join().unwrap();
        eprintln!(
            "the trickling {listener} connection was closed after {:.1} s",
            trickled.as_secs_f64()
        );
        assert!(
            trickled < Duration::from_secs(25),
            "{listener}: trickled for {trickled:?}"
        );
    }

    // And afterwards, all is as before.
    assert_eq!(
        exchange(port, &request("GET", "/api/v1/uplinks", Some(&bearer), None)).0,
        200
    );
    assert_eq!(ctl(dir.path(), &["uplinks"]).0, 0);
    assert!(daemon.0.try_wait().unwrap().is_none(), "the daemon died");
}

/// What a user without the token churning `n` connections did to an authorised client.
#[derive(Debug)]
struct UnderChurn {
    n: usize,
    burst: http1::Burst,
    /// The attacker's connections opened while the client's requests ran.
    opened: u64,
    /// The server's CPU over the same time, as a share of one core.
    cpu: f64,
}

/// Runs `local_user::churn` with `n` connections against 127.0.0.1:`port` while an authorised
/// client sends 16 requests for `path`; `server` is the listening process's pid.
fn under_churn(port: u16, token: &str, path: &str, server: u32, n: usize) -> UnderChurn {
    let attacker = local_user::churn(port, n);
    let started = attacker.await_done(2 * n as u64, Duration::from_secs(20));
    let r = attacker.report();
    assert!(
        started,
        "the attacker did not open {} connections: {} opened, {} failed, errno {}",
        2 * n,
        r.done.load(std::sync::atomic::Ordering::Relaxed),
        r.failed.load(std::sync::atomic::Ordering::Relaxed),
        r.errno.load(std::sync::atomic::Ordering::Relaxed)
    );
    let (opened0, cpu0, t0) = (
        r.done.load(std::sync::atomic::Ordering::Relaxed),
        local_user::cpu_time(server),
        Instant::now(),
    );
    let burst = http1::burst(port, token, path, 16);
    let cpu = (local_user::cpu_time(server) - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    let opened = r.done.load(std::sync::atomic::Ordering::Relaxed) - opened0;
    drop(attacker);
    let u = UnderChurn { n, burst, opened, cpu };
    eprintln!(
        "{} churning connections (uid {}, no token): {} of {} authorised requests failed, slowest answer {:.3} s, median {:.3} s; {} attacker connections opened meanwhile; server CPU {:.0}%",
        u.n,
        local_user::NOBODY,
        u.burst.failed,
        u.burst.sent,
        u.burst.slowest.as_secs_f64(),
        u.burst.median.as_secs_f64(),
        u.opened,
        u.cpu * 100.0
    );
    u
}

#[test]
fn a_user_churning_connections_without_the_token_locks_out_neither_api() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let token = "churn-token-0123456789abcdef";
    let (daemon, _status) = start_with_api(dir.path(), &api_switch(), 0, token);
    let port = api_port(dir.path());
    let runs: Vec<UnderChurn> = [70, 130, 1000]
        .into_iter()
        .map(|n| under_churn(port, token, "/api/v1/status", daemon.0.id(), n))
        .collect();
    // The unix socket was never in question, and still answers.
    let (code, out, err) = ctl(dir.path(), &["status", "--json"]);
    assert!(code == 0 && out.contains("\"uplinks\""), "{err}");
    for u in &runs {
        assert_eq!(u.burst.failed, 0, "{u:?}");
        assert!(u.burst.slowest < Duration::from_secs(2), "{u:?}");
    }
}

#[test]
fn any_token_works_encoded_and_bodies_must_be_small_json_objects() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let token = "t+k%25 & x=/y?z#ü 東京 0123456789";
    let (_daemon, _status) = start_with_api(dir.path(), &api_switch(), 0, token);
    let port = api_port(dir.path());
    let config = dir.path().join("switch.toml");
    let before = std::fs::read_to_string(&config).unwrap();

    // As the dashboard sends it (encodeURIComponent), and with a space written as `+`.
    let encoded = percent_encoding::utf8_percent_encode(token, percent_encoding::NON_ALPHANUMERIC).to_string();
    let plus = encoded.replace("%20", "+");
    for q in [&encoded, &plus] {
        let (status, answer) = exchange(port, &request("GET", &format!("/api/v1/status?token={q}"), None, None));
        assert_eq!(status, 200, "{q}: {answer}");
    }
    // The header carries it as it is, UTF-8 included.
    let bearer = format!("Bearer {token}");
    assert_eq!(
        exchange(port, &request("GET", "/api/v1/lbt", Some(&bearer), None)).0,
        200
    );
    // Unencoded in a URL it is not the token (`&` ends it, `+` is a space, `#` a fragment);
    // the refusal closes the connection.
    let raw = "t+k%25%20&%20x=/y";
    let (status, answer) = exchange(
        port,
        &request("GET", &format!("/api/v1/status?token={raw}"), None, None),
    );
    assert_eq!(status, 401, "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    let (status, _) = exchange(port, &request("GET", "/api/v1/status", Some("Bearer t+k%25"), None));
    assert_eq!(status, 401);

    // Bodies: over 64 KiB is a 413, by its length or as it arrives; a JSON array or any other
    // non-object is a 422; nothing changes.
    let huge = format!("{{\"shares\": 10, \"pad\": \"{}\"}}", "x".repeat(70_000));
    let (status, answer) = exchange(port, &request("PATCH", "/api/v1/ports/vm1", Some(&bearer), Some(&huge)));
    assert_eq!(status, 413, "{}", &answer[..answer.len().min(300)]);
    let mut chunked = format!(
        "PATCH /api/v1/ports/vm1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: {bearer}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..10 {
        chunked.extend_from_slice(format!("2000\r\n{}\r\n", " ".repeat(0x2000)).as_bytes());
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let (status, answer) = exchange(port, &chunked);
    assert_eq!(status, 413, "{answer}");
    for (body, says) in [
        ("[\"500M\", 100, \"1G\"]", "not an array"),
        ("null", "not null"),
        ("\"500M\"", "not a string"),
    ] {
        let (status, answer) = exchange(port, &request("PATCH", "/api/v1/ports/vm1", Some(&bearer), Some(body)));
        assert!(status == 422 && answer.contains(says), "{body}: {answer}");
    }
    assert_eq!(std::fs::read_to_string(&config).unwrap(), before);
}

/// The replies and the duplicates in a ping's output.
fn replies_and_duplicates(out: &str) -> (usize, usize) {
    let dups = out.matches("(DUP!)").count();
    (received(out) - dups, dups)
}

#[test]
fn a_second_daemon_on_the_same_interfaces_is_refused_and_pings_through_the_first_are_not_doubled() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = start(dir.path(), &api_switch());
    assert!(reaches_remote("tmt-vm1"));
    // Another configuration file and socket, the same interfaces.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("switch.toml"), api_switch()).unwrap();
    let t0 = Instant::now();
    let mut second = Daemon(
        Command::new("timeout")
            .arg("60")
            .arg(env!("CARGO_BIN_EXE_teamster"))
            .arg("run")
            .arg(other.path().join("switch.toml"))
            .arg("--api-socket")
            .arg(other.path().join("api.sock"))
            .arg("--status-file")
            .arg(other.path().join("status.json"))
            .stderr(std::fs::File::create(other.path().join("daemon.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let settled = within(Duration::from_secs(15), || {
        second.0.try_wait().unwrap().is_some() || other.path().join("status.json").exists()
    });
    let ended = second.0.try_wait().unwrap();
    let log = std::fs::read_to_string(other.path().join("daemon.log")).unwrap();
    let out = ping("tmt-vm1", "10.77.0.100", "10", "0.2");
    let (replies, dups) = replies_and_duplicates(&out);
    eprintln!(
        "second daemon on the same interfaces: {} after {:.2} s ({}); 10 pings through the first: {replies} answered, {dups} duplicates",
        match ended {
            Some(s) => format!("exited {s}"),
            None => "switching".into(),
        },
        settled.unwrap_or_default().as_secs_f64(),
        log.trim().replace('\n', " | ")
    );
    assert_eq!(ended.and_then(|s| s.code()), Some(1), "{log}");
    assert!(
        log.contains("interface tmt-u1")
            && log.contains("served by another teamster")
            && log.contains(&format!("pid {}", first.0.id())),
        "{log}"
    );
    assert!(t0.elapsed() < Duration::from_secs(15));
    assert_eq!(dups, 0, "{out}");
    assert!(replies >= 9, "{out}");
}

/// A switch of one uplink on `uplink` and one port `vm2` on tmt-v2, with `extra` after.
fn one_uplink_switch(uplink: &str, port: &str, extra: &str) -> String {
    format!(
        r#"workers = 1

[[uplinks]]
name = "uplink1"
interface = "{uplink}"
capacity = "1G"

[[port_groups]]
name = "vms"
policy = "port-id"
active = ["uplink1"]

[[ports]]
{port}
group = "vms"

{extra}
"#
    )
}

#[test]
fn an_interface_another_daemon_serves_is_refused_at_every_later_attach_until_that_daemon_dies() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    // The first switch serves tmt-u1 and tmt-v1; the second tmt-u2 and tmt-v2, with a port
    // rule that would take tmt-v1 too.
    let a = tempfile::tempdir().unwrap();
    let (mut first, _) = start(
        a.path(),
        &one_uplink_switch(
            "tmt-u1",
            "name = \"vm1\"\ninterface = \"tmt-v1\"\nmac = \"02:00:00:00:00:01\"",
            "",
        ),
    );
    let pid = format!("pid {}", first.0.id());
    let b = tempfile::tempdir().unwrap();
    let rule = "[[port_rules]]\nmatch = \"tmt-v1\"\ngroup = \"vms\"\nvm_mac = \"interface\"";
    let b_file = one_uplink_switch(
        "tmt-u2",
        "name = \"vm2\"\ninterface = \"tmt-v2\"\nmac = \"02:00:00:00:00:02\"",
        rule,
    );
    let (second, _) = start(b.path(), &b_file);
    // The file as the daemon read it (the harness names the data plane in it).
    let b_file = std::fs::read_to_string(b.path().join("switch.toml")).unwrap();
    let b_ports = || -> Vec<String> {
        let (_, out, _) = ctl(b.path(), &["--json", "ports"]);
        serde_json::from_str::<serde_json::Value>(&out)
            .unwrap_or_default()
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p["interface"].as_str().unwrap_or("").to_string())
            .collect()
    };

    // The port rule: tmt-v1 is noted and left alone.
    let mut events = String::new();
    let noted = within(Duration::from_secs(15), || {
        events = ctl(b.path(), &["events"]).1;
        events.contains("tmt-v1") && (events.contains("another teamster") || events.contains("added to group"))
    });
    eprintln!(
        "port rule on tmt-v1: {:?}; the second switch's ports: {:?}",
        events.lines().filter(|l| l.contains("tmt-v1")).collect::<Vec<_>>(),
        b_ports()
    );
    assert!(
        noted.is_some() && events.contains("served by another teamster") && events.contains(&pid),
        "{events}"
    );
    assert!(!b_ports().contains(&"tmt-v1".to_string()));

    // The API: an uplink on tmt-u1, a port on tmt-v1.
    for (what, args) in [
        ("tmt-u1", vec!["uplink", "add", "uplink9", "--interface", "tmt-u1"]),
        (
            "tmt-v1",
            vec![
                "port",
                "add",
                "vm9",
                "--interface",
                "tmt-v1",
                "--group",
                "vms",
                "--mac",
                "02:00:00:00:00:09",
            ],
        ),
    ] {
        let (code, out, err) = ctl(b.path(), &args);
        eprintln!("ctl {}: exit {code}: {}{}", args.join(" "), out.trim(), err.trim());
        assert!(
            code != 0
                && err.contains("409")
                && err.contains(what)
                && err.contains("another teamster")
                && err.contains(&pid),
            "{err}"
        );
    }

    // A reload naming tmt-u1.
    let with_uplink = b_file.replace(
        "[[port_groups]]",
        "[[uplinks]]\nname = \"uplink9\"\ninterface = \"tmt-u1\"\ncapacity = \"1G\"\n\n[[port_groups]]",
    );
    std::fs::write(b.path().join("switch.toml"), &with_uplink).unwrap();
    signal(&second.0, libc::SIGHUP);
    let mut log = String::new();
    let reloaded = within(Duration::from_secs(10), || {
        log = std::fs::read_to_string(b.path().join("daemon.log")).unwrap_or_default();
        log.contains("reload of") || log.contains("reloaded ")
    });
    eprintln!(
        "reload naming tmt-u1: {:?}",
        log.lines()
            .filter(|l| l.contains("reload of") || l.contains("reloaded "))
            .collect::<Vec<_>>()
    );
    assert!(
        reloaded.is_some() && log.contains("refused") && log.contains("tmt-u1") && log.contains(&pid),
        "{log}"
    );
    std::fs::write(b.path().join("switch.toml"), &b_file).unwrap();

    // The first switch dies without a word: the kernel drops its claims, and the second's port
    // rule takes tmt-v1 at its next look (every 10 s), as does the API tmt-u1.
    signal(&first.0, libc::SIGKILL);
    let _ = first.0.wait();
    let taken = within(Duration::from_secs(20), || b_ports().contains(&"tmt-v1".to_string()));
    eprintln!(
        "after the first switch was killed: tmt-v1 attached by the second's rule after {:?}",
        taken
    );
    assert!(taken.is_some(), "{:?}", b_ports());
    let (code, _, err) = ctl(b.path(), &["uplink", "add", "uplink9", "--interface", "tmt-u1"]);
    assert_eq!(code, 0, "{err}");
    drop(second);
}

#[test]
fn a_user_cannot_hold_a_lock_that_keeps_the_switch_from_starting() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A run leaves its lock files behind, as every stop or crash does.
    drop(start(dir.path(), &api_switch()));
    let locks = [dir.path().join("switch.toml.lock"), dir.path().join("api.sock.lock")];
    // Another user takes each of them, and holds it.
    let squatters: Vec<_> = locks.iter().map(|l| local_user::squat_lock(l)).collect();
    let taken: Vec<i64> = squatters.iter().map(local_user::outcome).collect();
    let _ = std::fs::remove_file(dir.path().join("status.json"));
    let mut daemon = Daemon(
        Command::new("timeout")
            .arg("60")
            .arg(env!("CARGO_BIN_EXE_teamster"))
            .arg("run")
            .arg(dir.path().join("switch.toml"))
            .arg("--api-socket")
            .arg(dir.path().join("api.sock"))
            .arg("--status-file")
            .arg(dir.path().join("status.json"))
            .stderr(std::fs::File::create(dir.path().join("daemon.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    within(Duration::from_secs(15), || {
        daemon.0.try_wait().unwrap().is_some() || dir.path().join("status.json").exists()
    });
    let ended = daemon.0.try_wait().unwrap();
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).unwrap();
    eprintln!(
        "uid {} tried to flock the lock files: errno {taken:?} (0: held); the daemon then: {}",
        local_user::NOBODY,
        match ended {
            Some(s) => format!("exited {s}: {}", log.trim()),
            None => "started".into(),
        }
    );
    assert_eq!(ended, None, "{log}");
    assert!(taken.iter().all(|e| *e == libc::EACCES as i64), "{taken:?}");
    // Nor may it touch the interfaces' claims.
    let claims: Vec<_> = std::fs::read_dir("/run/teamster/interfaces")
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(claims.len() >= 4, "{claims:?}");
    for c in &claims {
        assert_eq!(
            local_user::outcome(&local_user::squat_lock(c)),
            libc::EACCES as i64,
            "{}",
            c.display()
        );
    }
    drop(squatters);
}
