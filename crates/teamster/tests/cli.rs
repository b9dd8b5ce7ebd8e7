//! The `teamster` binary: `simulate` output, `--json` shape and exit statuses.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn teamster(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(args)
        .output()
        .unwrap()
}

fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn simulate_json_has_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = teamster(&[
        "simulate",
        &scenario("lbt-specweb.toml"),
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["scenario"], "lbt-specweb");
    let exps = v["expectations"].as_array().unwrap();
    assert_eq!(exps.len(), 7);
    for e in exps {
        assert!(e["name"].is_string() && e["detail"].is_string());
        assert_eq!(e["held"], true, "{e}");
    }
    let moves = v["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 2);
    for m in moves {
        assert!(m["t_s"].is_number());
        assert_eq!(
            (m["from"].as_str(), m["to"].as_str()),
            (Some("uplink1"), Some("uplink2"))
        );
        assert!(m["port"].as_str().unwrap().starts_with("vm"));
    }
    let csv = PathBuf::from(v["series_csv"].as_str().unwrap());
    assert_eq!(csv, out.join("series.csv"));
    let header = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert!(header.starts_with("t_s,uplink1_tx_bps,uplink1_rx_bps,uplink2_tx_bps,uplink2_rx_bps,vm1_offered_tx_bps"));
    assert!(out.join("throughput.svg").is_file() && out.join("moves.csv").is_file());
    // report.html: self-contained (chart code and data inline, nothing fetched), with the run's
    // uplinks and both moves in its data.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("const TeamsterCharts")
            && !html.contains("/*DATA*/")
            && !html.contains("/*CHARTS*/")
            && !html.contains("/*STYLE*/")
    );
    assert!(!html.contains("src=\"http") && !html.contains("fetch("));
    let data = html
        .split("const D = ")
        .nth(1)
        .and_then(|d| d.split(";\nconst C").next())
        .unwrap();
    let data: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(data["uplinks"], serde_json::json!(["uplink1", "uplink2"]));
    assert_eq!(data["moves"].as_array().unwrap().len(), 2);
    assert!(data["history"].as_array().unwrap().len() > 100);
}

#[test]
fn simulate_text_prints_each_expectation() {
    let dir = tempfile::tempdir().unwrap();
    let o = teamster(&[
        "simulate",
        &scenario("lbt-static.toml"),
        "--out",
        dir.path().join("s").to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("[held] the static policy delivers at most one uplink's capacity"),
        "{text}"
    );
    assert!(text.contains("3 of 3 expectations held"), "{text}");
}

#[test]
fn a_failed_expectation_exits_1_and_bad_input_exits_2_writing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The static scenario, expected to move ports: it will not.
    let text = std::fs::read_to_string(scenario("lbt-static.toml"))
        .unwrap()
        .replace("max = 0", "max = 9")
        .replace("min = 0", "min = 1");
    let failing = dir.path().join("failing.toml");
    std::fs::write(&failing, text).unwrap();
    let o = teamster(&[
        "simulate",
        failing.to_str().unwrap(),
        "--out",
        dir.path().join("f").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("[FAILED] between 1 and 9 moves"));

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\nduration_s = -1\n").unwrap();
    let out = dir.path().join("never");
    let o = teamster(&["simulate", bad.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.toml") && err.contains("uplinks"), "{err}");
    assert!(!out.exists());

    let o = teamster(&["simulate", "/nonexistent/scenario.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/scenario.toml: cannot read"));

    let o = teamster(&["simulate"]);
    assert_eq!(o.status.code(), Some(2), "clap: missing argument");
    let o = teamster(&["simulate", "x.toml", "--frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `teamster run CONFIG --check ARGS`: checks only, attaches nothing, needs no root.
fn run_check(config: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["run", config.to_str().unwrap(), "--check"];
    all.extend_from_slice(args);
    let o = teamster(&all);
    (o.status.code(), String::from_utf8_lossy(&o.stderr).to_string())
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory where others could plant or swap names, and a token file others could read,
/// are refused at start, naming the path and its mode or owner; the checks come before the
/// configuration is loaded, so a file naming interfaces this host lacks shows them all.
#[test]
fn directories_others_may_write_and_token_files_others_may_read_are_refused() {
    let top = tempfile::tempdir().unwrap();
    let etc = top.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    let config = etc.join("switch.toml");
    let text = "[[uplinks]]\nname = \"u\"\ninterface = \"tmt-none0\"\ncapacity = \"1G\"\n\
                [[port_groups]]\nname = \"g\"\npolicy = \"port-id\"\nactive = [\"u\"]\n\
                [[ports]]\nname = \"p\"\ninterface = \"tmt-none1\"\nmac = \"02:00:00:00:00:01\"\ngroup = \"g\"\n";
    std::fs::write(&config, text).unwrap();
    let open = top.path().join("open");
    std::fs::create_dir(&open).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();

    for (mode, args, says) in [
        (
            0o777,
            vec![
                "--no-api".to_string(),
                "--status-file".into(),
                s(&open.join("status.json")),
            ],
            "--status-file directory",
        ),
        (
            0o770,
            vec![
                "--no-api".to_string(),
                "--status-file".into(),
                s(&open.join("status.json")),
            ],
            "--status-file directory",
        ),
        (
            0o777,
            vec!["--api-socket".to_string(), s(&open.join("api.sock"))],
            "--api-socket directory",
        ),
        // Not there yet: the directory it would be made in is checked.
        (
            0o777,
            vec!["--api-socket".to_string(), s(&open.join("run/teamster/api.sock"))],
            "--api-socket directory",
        ),
    ] {
        chmod(&open, mode);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, err) = run_check(&config, &args);
        let shown = format!("{:04o}", mode);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains(says) && err.contains(open.to_str().unwrap()) && err.contains(&shown),
            "{args:?}: {err}"
        );
        assert!(!open.join("run").exists(), "nothing is created by a refused start");
    }
    // Once only its owner may write, the next check is the configuration's.
    chmod(&open, 0o755);
    let (code, err) = run_check(&config, &["--no-api", "--status-file", &s(&open.join("status.json"))]);
    assert!(code == Some(2) && err.contains("tmt-none0"), "{err}");

    // The configuration's directory (saved changes and the lock go there).
    chmod(&etc, 0o777);
    let (code, err) = run_check(&config, &["--no-api"]);
    assert!(
        code == Some(2) && err.contains("configuration directory") && err.contains("0777"),
        "{err}"
    );
    chmod(&etc, 0o755);

    // A token file others may read, like an ssh key, is refused; its owner's alone is taken.
    let token = top.path().join("token");
    std::fs::write(&token, "a-token-of-at-least-16-characters\n").unwrap();
    let tcp = [
        "--api-socket",
        &s(&top.path().join("api.sock")),
        "--api-listen",
        "127.0.0.1:0",
        "--api-token-file",
        &s(&token),
    ];
    chmod(&token, 0o644);
    let (code, err) = run_check(&config, &tcp);
    assert!(
        code == Some(2) && err.contains("--api-token-file") && err.contains("0644") && err.contains(&s(&token)),
        "{err}"
    );
    chmod(&token, 0o600);
    let (code, err) = run_check(&config, &tcp);
    assert!(
        code == Some(2) && err.contains("tmt-none0") && !err.contains("token"),
        "{err}"
    );

    // As root: a root-owned sticky directory (like /tmp) is fine; one owned by someone else is not.
    if nix_is_root() {
        chmod(&open, 0o1777);
        let (code, err) = run_check(&config, &["--no-api", "--status-file", &s(&open.join("status.json"))]);
        assert!(code == Some(2) && err.contains("tmt-none0"), "{err}");
        chmod(&open, 0o755);
        std::os::unix::fs::chown(&open, Some(65534), None).unwrap();
        let (code, err) = run_check(&config, &["--no-api", "--status-file", &s(&open.join("status.json"))]);
        assert!(code == Some(2) && err.contains("owned by uid 65534"), "{err}");
        std::fs::write(&token, "a-token-of-at-least-16-characters\n").unwrap();
        std::os::unix::fs::chown(&token, Some(65534), None).unwrap();
        let (code, err) = run_check(&config, &tcp);
        assert!(code == Some(2) && err.contains("owned by uid 65534"), "{err}");
    }
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// `teamster simulate | head` ends quietly when `head` closes the pipe: no panic, no exit 101.
#[test]
fn simulate_into_a_closed_pipe_ends_quietly() {
    use std::io::Read;
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/lbt-baseline.toml");
    let out = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(["simulate", scenario, "--out"])
        .arg(out.path().join("o"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Close the pipe before the summary is written, as `head` does once it has its lines.
    drop(child.stdout.take());
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(status.code(), Some(101), "{err}");
}

/// `teamster run --controller` fills the endpoint of the file's `[controller]` section; a file
/// without one is refused, naming the file.
#[test]
fn run_controller_needs_a_controller_section() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("switch.toml");
    let head = "[[uplinks]]\nname = \"u1\"\ninterface = \"lo\"\ncapacity = \"1G\"\n\n[[port_groups]]\nname = \"vms\"\npolicy = \"port-id\"\nactive = [\"u1\"]\n";
    std::fs::write(&file, head).unwrap();
    let socket = dir.path().join("api.sock");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            file.to_str().unwrap(),
            "--check",
            "--api-socket",
            socket.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        teamster(&args)
    };
    let o = run(&["--controller", "/run/teamster/controller.sock"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(2) && err.contains("no [controller] section"),
        "{err}"
    );
    std::fs::write(&file, format!("{head}\n[controller]\nhost = \"h1\"\ngroup = \"vms\"\n")).unwrap();
    let o = run(&["--controller", "http://127.0.0.1:9190"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    // A remote controller is refused: loopback or a unix socket only.
    let o = run(&["--controller", "http://10.0.0.1:9190"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains("controller.url"), "{err}");
}
