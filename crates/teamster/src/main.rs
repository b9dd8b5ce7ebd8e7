//! `teamster`: the command-line entry point.
//!
//! `teamster simulate ARGS...` runs the simulator, the `teamster-sim` binary installed beside
//! this one, with the same arguments and exit status (the daemon does not link the simulator).
//! `teamster ioc allocate FILE` and `teamster ioc admit FILE` script Network I/O Control
//! (see [`ioc_cmd`]).

use teamster::{api, bench_cmd, controller, ctl, ioc_cmd, libvirt_hook, live, rss_cmd};

use clap::{Parser, Subcommand};
use live::safe_file::TrustedDir;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "teamster",
    version,
    about = "Teamster: NIC teaming, load-based teaming and bandwidth control for Linux/KVM hosts"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario in the simulator and check its expectations (runs `teamster-sim`).
    #[command(
        long_about = "Run a scenario in the simulator and check its expectations: print each \
expectation and whether it held, and write the run's folder (CSV series, moves, SVG plot, \
report.html, summary.json).\n\n\
This runs the simulator's own binary, `teamster-sim`, installed beside `teamster` (the switch does \
not link the simulator), with the same arguments: SCENARIO (a TOML file, e.g. \
scenarios/lbt-specweb.toml), --out DIR (the run's folder; default out/<scenario name>) and --json \
(the summary as JSON). `teamster simulate --help` prints the simulator's own help.\n\n\
Exit status: 0 if every expectation held, 1 if one did not, 2 on bad input; 127 if \
`teamster-sim` is not beside `teamster` (126 if it cannot be run).",
        disable_help_flag = true
    )]
    Simulate {
        /// The simulator's arguments: SCENARIO [--out DIR] [--json].
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
        args: Vec<OsString>,
    },
    /// Run the switch on real interfaces (needs CAP_NET_RAW and CAP_NET_ADMIN).
    Run {
        /// The switch configuration (TOML): uplinks, port groups, ports, NetIOC (see docs/configuration.md).
        config: PathBuf,
        /// Rewrite this JSON file every second with counters, link states and moves (its
        /// directory must be writable by no one but root and the daemon's user).
        #[arg(long)]
        status_file: Option<PathBuf>,
        /// Check the configuration, the token file and the directories, and exit without
        /// attaching.
        #[arg(long)]
        check: bool,
        /// How events are logged on standard error: `text`, or `json` (one object per line:
        /// t_s, seq, kind, message, as the API's event log; for journald and log shippers).
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        log_format: String,
        /// The cluster controller this host belongs to: http://127.0.0.1:PORT or its unix
        /// socket, for a `[controller]` section that names neither (it gives the host's name
        /// and the VMs' interfaces; see docs/cluster.md).
        #[arg(long)]
        controller: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Show and change a running switch through its API (see `teamster ctl --help`).
    Ctl(ctl::CtlArgs),
    /// Run the cluster controller: placement of VMs by their network reservations, for the
    /// hosts that register with it.
    Controller(controller::ControllerArgs),
    /// Write the man pages (DIR/man) and shell completions (DIR/completions) for packaging.
    #[command(hide = true)]
    Generate { dir: PathBuf },
    /// libvirt's qemu hook: attach a VM's taps to the switch when it starts (or arrives by
    /// migration) and detach them when it stops; the domain XML on standard input.
    LibvirtHook(libvirt_hook::HookArgs),
    /// Benchmarks of the engine.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Network I/O Control: allocate bandwidth over a tree, or check admission.
    Ioc {
        #[command(subcommand)]
        command: IocCommand,
    },
    /// Receive-side scaling: compute the RSS hash (and queue) of a flow.
    Rss {
        #[command(subcommand)]
        command: RssCommand,
    },
}

#[derive(Subcommand)]
enum RssCommand {
    /// Print the Toeplitz hash of a flow's addresses and ports (or of raw bytes), and the queue
    /// an indirection table gives it.
    Hash(rss_cmd::HashArgs),
}

/// Where the control-plane API listens.
#[derive(clap::Args)]
struct ApiArgs {
    /// The API's unix socket (mode 0600; its directory is created 0755 if missing, and must be
    /// writable by no one but root and the daemon's user).
    #[arg(long, default_value = ctl::DEFAULT_SOCKET)]
    api_socket: PathBuf,
    /// Do not serve the API at all.
    #[arg(long, conflicts_with_all = ["api_listen"])]
    no_api: bool,
    /// Also serve the API (and the dashboard) on this loopback TCP address, e.g. 127.0.0.1:9180
    /// (port 0: a free port, printed at start); every request must then carry the bearer token.
    #[arg(long)]
    api_listen: Option<std::net::SocketAddr>,
    /// A file holding the bearer token for --api-listen (or set TEAMSTER_API_TOKEN); it must be
    /// readable by its owner only (chmod 600), owned by root or the daemon's user.
    #[arg(long)]
    api_token_file: Option<PathBuf>,
}

impl ApiArgs {
    /// The API's listeners, or why they cannot be had.
    fn config(&self) -> Result<Option<api::ApiConfig>, String> {
        if self.no_api {
            return Ok(None);
        }
        let tcp = match self.api_listen {
            None => None,
            Some(addr) if !addr.ip().is_loopback() => {
                return Err(format!(
                    "--api-listen {addr}: only a loopback address (127.0.0.1, ::1) is allowed; use the unix socket or a proxy"
                ))
            }
            Some(addr) => {
                let token = match &self.api_token_file {
                    Some(f) => live::safe_file::read_private(f, "--api-token-file")?,
                    None => std::env::var("TEAMSTER_API_TOKEN").unwrap_or_default(),
                };
                if token.len() < 16 {
                    return Err("--api-listen needs a bearer token of at least 16 characters: --api-token-file FILE or TEAMSTER_API_TOKEN".into());
                }
                Some((addr, token))
            }
        };
        Ok(Some(api::ApiConfig {
            socket: Some(self.api_socket.clone()),
            tcp,
        }))
    }
}

#[derive(Subcommand)]
enum BenchCommand {
    /// NetIOC scheduler: enqueue + dequeue Mpps on one core (closed loop, bursts of 32).
    Sched {
        /// Tree kinds to run (fifo: no scheduler, the baseline).
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["limits", "reservations"])]
        tree: Vec<bench_cmd::TreeKind>,
        /// Leaf port counts.
        #[arg(long, value_delimiter = ',', default_values_t = [16, 256, 1024, 4096])]
        leaves: Vec<usize>,
        /// Packet sizes in bytes.
        #[arg(long = "pkt-len", value_delimiter = ',', default_values_t = [64, 1500])]
        pkt_len: Vec<u32>,
        /// How each packet's leaf is drawn: uniform, or Zipf (s = 1) over a random permutation
        /// of the leaves (the rte_sched peer's `--dist`).
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["uniform"])]
        dist: Vec<bench_cmd::Dist>,
        /// Packets to time per configuration.
        #[arg(long, default_value_t = 10_000_000)]
        packets: u64,
        /// Packets pre-loaded per leaf before timing (a standing backlog).
        #[arg(long, default_value_t = 0)]
        backlog: u64,
        /// One JSON line per configuration.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum IocCommand {
    /// Print each node's allocation: reservations first, then the excess by shares, under limits and demands.
    Allocate {
        /// The tree: a .json or .toml file with capacity and nodes.
        file: PathBuf,
        /// Print {"allocations": {"<node>": bits/s, ...}}.
        #[arg(long)]
        json: bool,
    },
    /// Check the tree against admission control; exit 1 if it is rejected.
    Admit {
        /// The tree: a .json or .toml file with capacity, nodes and optionally reservation_cap.
        file: PathBuf,
        /// Print {"admitted": true} or {"admitted": false, "error": "..."}.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run { .. } | Command::Controller(_)) {
        // A command's output piped into `head` ends it quietly, as for any Unix tool, rather
        // than a panic on the closed pipe. The daemons (the switch, the controller, and the
        // controller's load generator) keep SIGPIPE ignored (Rust's default): a client gone
        // from its socket must not stop them.
        // SAFETY: restoring a signal's default disposition at start, before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.command {
        Command::Simulate { args } => simulate(args),
        Command::Run {
            config,
            status_file,
            check,
            log_format,
            controller,
            api,
        } => {
            if let Some(c) = &controller {
                live::controller_config::set_endpoint(c);
            }
            let events = live::event_log::stderr(log_format == "json");
            run_switch(config, status_file, check, controller.is_some(), api, events)
        }
        Command::Ctl(args) => ctl::run(args),
        Command::Controller(args) => controller::run(args),
        Command::LibvirtHook(args) => libvirt_hook::run(args),
        Command::Generate { dir } => generate(&dir),
        Command::Bench {
            command:
                BenchCommand::Sched {
                    tree,
                    leaves,
                    pkt_len,
                    dist,
                    packets,
                    backlog,
                    json,
                },
        } => bench_cmd::sched_cmd(&tree, &leaves, &pkt_len, &dist, packets, backlog, json),
        Command::Ioc {
            command: IocCommand::Allocate { file, json },
        } => ioc_cmd::allocate_cmd(&file, json),
        Command::Ioc {
            command: IocCommand::Admit { file, json },
        } => ioc_cmd::admit_cmd(&file, json),
        Command::Rss {
            command: RssCommand::Hash(args),
        } => rss_cmd::hash_cmd(&args),
    }
}

/// The files and directories a running switch writes, checked before anything is touched
/// (see `live::safe_file`): the configuration's directory (saved changes, its lock), the status
/// file's, and the API socket's.
struct Places {
    config_dir: TrustedDir,
    config_name: std::ffi::OsString,
    status: Option<live::status_writer::StatusFile>,
    /// The socket's path, with its directory (None: not there yet; checked again once made).
    socket: Option<(PathBuf, Option<TrustedDir>)>,
}

impl Places {
    /// Checks every directory the daemon will write in; an error names the path, its mode and
    /// owner.
    fn check(config: &Path, status_file: Option<&Path>, socket: Option<&Path>) -> Result<Places, String> {
        let (dir, config_name) = live::safe_file::split(config)?;
        let config_dir = TrustedDir::open(&dir, "configuration directory")?;
        let status = match status_file {
            Some(path) => {
                let (dir, name) = live::safe_file::split(path).map_err(|e| format!("--status-file {e}"))?;
                let dir = TrustedDir::open(&dir, "--status-file directory")?;
                Some(live::status_writer::StatusFile::new(dir, name))
            }
            None => None,
        };
        let socket = match socket {
            Some(path) => {
                let (dir, _) = live::safe_file::split(path).map_err(|e| format!("--api-socket {e}"))?;
                let opened = if dir.is_dir() {
                    Some(TrustedDir::open(&dir, "--api-socket directory")?)
                } else {
                    // It will be made, inside the nearest directory that exists: check that.
                    TrustedDir::open(live::safe_file::existing_ancestor(&dir), "--api-socket directory")?;
                    None
                };
                Some((path.to_path_buf(), opened))
            }
            None => None,
        };
        Ok(Places {
            config_dir,
            config_name,
            status,
            socket,
        })
    }
}

/// The locks held while the switch runs: one daemon per configuration file, and per socket.
struct Locks {
    _config: nix::fcntl::Flock<std::fs::File>,
    _socket: Option<nix::fcntl::Flock<std::fs::File>>,
}

/// Takes the locks (see docs/live-switch.md): `<config>.lock` beside the configuration, and
/// `<socket>.lock` beside the API socket (whose directory is made here, 0755, if missing).
fn lock(places: &mut Places, config: &Path) -> Result<Locks, String> {
    let mut name = places.config_name.clone();
    name.push(".lock");
    let config_lock = places
        .config_dir
        .lock(&name, &format!("a teamster is already running on {}", config.display()))?;
    let socket_lock = match &mut places.socket {
        Some((path, dir)) => {
            let (parent, socket_name) = live::safe_file::split(path)?;
            if dir.is_none() {
                *dir = Some(TrustedDir::open_or_make(&parent, "--api-socket directory", 0o755)?);
            }
            let mut name = socket_name;
            name.push(".lock");
            let held = dir.as_ref().map(|d| {
                d.lock(
                    &name,
                    &format!("a teamster is already serving its API on {}", path.display()),
                )
            });
            held.transpose()?
        }
        None => None,
    };
    Ok(Locks {
        _config: config_lock,
        _socket: socket_lock,
    })
}

/// Claims every interface `plan` serves (see `live::claims`), or says which one another
/// Teamster serves. A libvirt hook's port restored from the last run whose interface another
/// Teamster serves now is left out with a note in `notes` (the VM's interface is that switch's
/// now; nothing of this one's should stop it starting); the plan is checked again without it.
fn claim_interfaces(
    mut plan: live::config::SwitchPlan,
    notes: &mut Vec<String>,
) -> Result<(live::claims::Claims, live::config::SwitchPlan), String> {
    let mut claims = live::claims::Claims::open(Path::new(live::claims::CLAIMS_DIR))?;
    let mut held = std::collections::HashSet::new();
    for p in (plan.file.ports.iter()).filter(|p| p.origin == live::config::PortOrigin::Libvirt) {
        if let Some(e) = claims.held_elsewhere(&p.interface, &format!("port {}", p.name)) {
            let owner = p.owner.as_deref().unwrap_or("?");
            notes.push(format!("port {} of domain {owner}: {e}; not restored", p.name));
            held.insert(p.name.clone());
        }
    }
    if !held.is_empty() {
        let mut file = plan.file.clone();
        file.ports.retain(|p| !held.contains(&p.name));
        plan = live::config::check(&file, &live::config::Sysfs)?;
    }
    claims.claim(live::claims::interfaces(&plan))?;
    claims.in_force(live::claims::names(&plan));
    Ok((claims, plan))
}

/// Checks the files, the configuration and capabilities, takes the locks, attaches, and runs
/// until SIGTERM or SIGINT.
fn run_switch(
    config: PathBuf,
    status_file: Option<PathBuf>,
    check_only: bool,
    controller: bool,
    api_args: ApiArgs,
    events: teamster_dp::datapath::EventSink,
) -> ExitCode {
    let api_config = match api_args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let socket = api_config.as_ref().and_then(|a| a.socket.clone());
    let mut places = match Places::check(&config, status_file.as_deref(), socket.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (plan, files, mut restored) = match load(&config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if controller && plan.file.controller.is_none() {
        eprintln!(
            "error: --controller: {} has no [controller] section (the host's name and the VMs' interfaces)",
            config.display()
        );
        return ExitCode::from(2);
    }
    if check_only {
        println!("{}: configuration is valid", config.display());
        return ExitCode::SUCCESS;
    }
    if let Err(e) = teamster_dp::caps::check() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    // Before the socket or any interface is touched: a second daemon stops here, on the same
    // configuration or socket, or on an interface another one serves.
    let _locks = match lock(&mut places, &config) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let (claims, plan) = match claim_interfaces(plan, &mut restored) {
        Ok((c, plan)) => (std::sync::Arc::new(std::sync::Mutex::new(c)), plan),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // SIGHUP reloads, through the API's runtime (which adds its own handler when it starts);
    // until then, and without an API, it must not stop the switch.
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGHUP, Default::default()) {
        eprintln!("error: cannot handle SIGHUP: {e}");
        return ExitCode::from(1);
    }
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("error: cannot handle signal {sig}: {e}");
            return ExitCode::from(1);
        }
    }
    places.config_dir.remove_temporaries(&places.config_name);
    if let Some(name) = files.domains.path().file_name() {
        places.config_dir.remove_temporaries(name);
    }
    if let Some(s) = &places.status {
        s.dir.remove_temporaries(&s.name);
    }
    let file = plan.file.clone();
    let (snap_tx, snap_rx) = tokio::sync::watch::channel(std::sync::Arc::new(live::snapshot::Snapshot::default()));
    let (change_tx, change_rx) = std::sync::mpsc::channel();
    // Port rules run in the API's runtime, behind its configuration lock.
    let (news_tx, news_rx) = match plan.file.port_rules.is_empty() {
        true => (None, None),
        false => {
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            (Some(tx), Some(rx))
        }
    };
    if plan.file.controller.is_some() && api_config.is_none() {
        eprintln!(
            "error: {}: [controller] needs the control plane: run without --no-api",
            config.display()
        );
        return ExitCode::from(2);
    }
    if news_tx.is_some() && api_config.is_none() {
        eprintln!(
            "error: {}: [[port_rules]] need the control plane: run without --no-api",
            config.display()
        );
        return ExitCode::from(2);
    }
    let link = live::daemon::ControlLink {
        news: news_tx,
        changes: change_rx,
        snapshots: snap_tx,
    };
    live::heap::keep_freed();
    for note in &restored {
        eprintln!("teamster: {note}");
    }
    // Recorded as events at the loop's first turn (no one waits for the answer).
    let _ = change_tx.send(live::daemon::Apply {
        plan: None,
        notes: restored,
        done: tokio::sync::oneshot::channel().0,
    });
    let mut daemon = match live::daemon::Daemon::attach(&config, plan, places.status.take(), Some(link), events) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(api) = &api_config {
        let bound = match api::start(api.clone(), file, files, snap_rx, change_tx, news_rx, claims.clone()) {
            Ok((_, bound)) => bound,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        };
        if let Some(sock) = &api.socket {
            eprintln!("teamster: API on {}", sock.display());
        }
        if let Some(addr) = bound {
            eprintln!("teamster: API and dashboard on http://{addr}/");
        }
    }
    eprintln!("teamster: switching; SIGTERM or Ctrl-C stops, SIGHUP reloads the configuration");
    live::service::ready("switching");
    daemon.run(&stop);
    live::service::stopping();
    // The API's thread (which shares the claims) is not waited for: release them here, so their
    // files go with them.
    claims.lock().unwrap_or_else(|e| e.into_inner()).in_force(Vec::new());
    if let Some(sock) = api_config.as_ref().and_then(|a| a.socket.as_ref()) {
        let _ = std::fs::remove_file(sock);
    }
    eprintln!("teamster: stopped");
    ExitCode::SUCCESS
}

/// Reads and checks `switch.toml` with the libvirt hook's ports saved beside it (those that
/// still fit, see [`live::domain_ports::restore`]): the plan, the files as read, and a note for
/// each hook port left out.
fn load(config: &std::path::Path) -> Result<(live::config::SwitchPlan, api::KeptFiles, Vec<String>), String> {
    let shown = config.display();
    let text = std::fs::read_to_string(config).map_err(|e| format!("{shown}: cannot read: {e}"))?;
    let mut file = live::config::parse_file(&text).map_err(|e| format!("{shown}: {e}"))?;
    let ifs = live::config::Sysfs;
    live::config::check(&file, &ifs).map_err(|e| format!("{shown}: {e}"))?;
    let domains_path = live::domain_ports::path_for(config);
    let domains_text = match std::fs::read_to_string(&domains_path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: cannot read: {e}", domains_path.display())),
    };
    let saved = match &domains_text {
        Some(t) => live::domain_ports::parse(t).map_err(|e| format!("{}: {e}", domains_path.display()))?,
        None => Vec::new(),
    };
    let links = live::domain_ports::links_now();
    let notes = live::domain_ports::restore(
        &mut file,
        saved,
        |s| live::domain_ports::same_interface(s, &links),
        |f| live::config::check(f, &ifs).map(|_| ()),
    );
    let plan = live::config::check(&file, &ifs).map_err(|e| format!("{shown}: {e}"))?;
    let files = api::KeptFiles {
        config: live::persist::KeptFile::new(config, Some(&text), live::config::revision_of(&text)),
        domains: live::persist::KeptFile::new(&domains_path, domains_text.as_deref(), None),
    };
    Ok((plan, files, notes))
}

/// Writes a man page per command (`teamster.1`, `teamster-run.1`, ...) from the command-line
/// definitions, and bash, zsh and fish completions.
fn generate(dir: &std::path::Path) -> ExitCode {
    use clap::CommandFactory;
    let write = || -> std::io::Result<()> {
        let man = dir.join("man");
        let completions = dir.join("completions");
        std::fs::create_dir_all(&man)?;
        std::fs::create_dir_all(&completions)?;
        let cmd = Cli::command().name("teamster");
        clap_mangen::generate_to(cmd.clone(), &man)?;
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            clap_complete::generate_to(shell, &mut cmd.clone(), "teamster", &completions)?;
        }
        Ok(())
    };
    match write() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}: {e}", dir.display());
            ExitCode::from(1)
        }
    }
}

/// Runs the simulator, `teamster-sim` beside this binary, with `args`: this process becomes it
/// (its output, its exit status). Returns only if it cannot be run, naming its path.
fn simulate(args: Vec<OsString>) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let sim = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name("teamster-sim"),
        Err(e) => {
            eprintln!("error: teamster simulate: cannot tell where this binary is: {e}");
            return ExitCode::from(126);
        }
    };
    let e = std::process::Command::new(&sim).args(args).exec();
    eprintln!(
        "error: teamster simulate runs the simulator, {}: {e} (it is installed beside teamster; from the source tree: cargo run -p teamster-sim -- SCENARIO)",
        sim.display()
    );
    let missing = e.kind() == std::io::ErrorKind::NotFound;
    ExitCode::from(if missing { 127 } else { 126 })
}
