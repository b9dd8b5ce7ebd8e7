//! The `teamster` binary: `run --check`, and `simulate` running the simulator beside it.

use std::path::Path;
use std::process::{Command, Output};

fn teamster(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_teamster"))
        .args(args)
        .output()
        .unwrap()
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

/// `teamster simulate ARGS...` runs `teamster-sim` from beside the `teamster` binary, with the
/// arguments as given and its exit status as teamster's; without it, the error names the path
/// it looked for.
#[test]
fn simulate_runs_the_simulator_beside_the_binary() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let exe = dir.path().join("teamster");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_teamster"), &exe).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_teamster"), &exe).unwrap();
    }
    let run = |args: &[&str]| {
        // A file just written may be held open by a process another test forked in between
        // (until that one's exec closes it): "Text file busy" then, for a moment.
        for _ in 0..100 {
            let o = Command::new(&exe).args(args).output().unwrap();
            if !String::from_utf8_lossy(&o.stderr).contains("Text file busy") {
                return o;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("teamster-sim stayed busy");
    };
    let sim = dir.path().join("teamster-sim");
    let o = run(&["simulate", "x.toml"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(127), "{err}");
    assert!(err.contains(&format!("{}: No such file", sim.display())), "{err}");
    // A stand-in simulator that prints its arguments and exits 3.
    std::fs::write(&sim, "#!/bin/sh\nprintf '%s|' \"$@\"\nexit 3\n").unwrap();
    chmod(&sim, 0o755);
    let o = run(&["simulate", "s.toml", "--json", "--out", "a b"]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "s.toml|--json|--out|a b|");
    // Its help is the simulator's own.
    let o = run(&["simulate", "--help"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "--help|");
}
