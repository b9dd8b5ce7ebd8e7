//! `teamster controller`: keeps a cluster's state and places VMs by their network
//! reservations, as DRS does for NetIOC.
//!
//! Hosts register their shape (`PUT /api/v1/hosts/{name}`) and report their uplinks' link
//! states and the VMs they have attached (`POST /api/v1/hosts/{name}/report`), and are answered
//! with what they should have attached. Operators power VMs on (`teamster ctl vm power-on`),
//! change their reservations (`ctl vm set`) and see the cluster (`ctl cluster`). Placement and
//! remediation are `core::placement`'s; the rules of a change are in [`state`], the store
//! behind it in [`store`], the API in [`api`].

pub mod access;
pub mod adoption;
pub mod api;
pub mod ca;
pub mod etcd;
pub mod etcd_gateway;
pub mod follower;
pub mod handover;
pub mod inventory;
pub mod kept;
pub mod liveness;
pub mod load;
pub mod records;
pub mod state;
pub mod store;
pub mod view;

use crate::live::safe_file::{self, TrustedDir};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Where the controller puts its API socket unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/teamster/controller.sock";
/// Where it keeps its state unless told otherwise.
pub const DEFAULT_STATE: &str = "/var/lib/teamster/controller.redb";

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ControllerArgs {
    #[command(subcommand)]
    command: Option<ControllerCommand>,
    /// The embedded store's file (created if missing; its directory must be writable by no one
    /// but root and the controller's user).
    #[arg(long, default_value = DEFAULT_STATE)]
    state: PathBuf,
    /// Keep the state in etcd instead, shared by several controllers of which one leads:
    /// its client URLs, comma-separated (e.g. http://127.0.0.1:2379, or https://10.0.0.5:2379
    /// with --etcd-ca; spoken through etcd's JSON gateway).
    #[arg(long, value_delimiter = ',', conflicts_with = "state")]
    etcd: Vec<String>,
    /// For https:// etcd endpoints: the CA certificate (PEM) that signed etcd's.
    #[arg(long, requires = "etcd")]
    etcd_ca: Option<PathBuf>,
    /// A client certificate (PEM) to present to etcd (its --client-cert-auth), with
    /// --etcd-key (`teamster controller ca issue-client`).
    #[arg(long, requires_all = ["etcd_key", "etcd_ca"])]
    etcd_cert: Option<PathBuf>,
    /// The private key of --etcd-cert (PEM; readable by its owner only).
    #[arg(long, requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// The cluster's keys in etcd: `<prefix>/state` and the election `<prefix>/leader`.
    #[arg(long, default_value = "teamster")]
    etcd_prefix: String,
    /// Seconds a host may go without reporting before it takes no new VMs and is then marked
    /// down, its VMs restarted elsewhere where they fit (2-3600; hosts report every second by
    /// default, and detach their VMs a little before this when cut off).
    #[arg(long, default_value_t = state::DEFAULT_HOST_TIMEOUT_S, value_parser = clap::value_parser!(u64).range(2..=3600))]
    host_timeout_s: u64,
    /// With --etcd: the URL hosts reach this controller at (e.g. https://10.0.0.11:9443), which
    /// the other controllers name to hosts while this one leads (default: the --listen
    /// address, unless that is every address).
    #[arg(long, requires = "etcd")]
    advertise: Option<String>,
    /// The leader's etcd lease, in seconds (1-60): a leader gone for this long is replaced.
    #[arg(long, default_value_t = 5)]
    lease_s: i64,
    /// The API's unix socket (mode 0600; its directory is created 0755 if missing).
    #[arg(long, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Also serve the API on this TCP address (port 0: a free port, printed at start): on
    /// loopback, every request carries the bearer token; on any other address, TLS is needed
    /// (--tls-cert, --tls-key, --client-ca), hosts prove their names with their certificates
    /// and operators present the token.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// A file holding the bearer token for --listen (or set TEAMSTER_API_TOKEN); readable by
    /// its owner only. With TLS it is the operators' credential alone.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Serve --listen over TLS with this certificate (PEM, its chain after it; `teamster
    /// controller ca issue-server`).
    #[arg(long, requires_all = ["tls_key", "client_ca", "listen"])]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM; readable by its owner only).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The CA certificate (PEM) that signs the hosts' certificates.
    #[arg(long, requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    /// Hosts refused over TLS whatever certificate they present: a file of host names, one
    /// per line (`#` comments), read at start. For a host whose key is lost or whose machine
    /// is compromised; restart the controller (or its followers in turn) after changing it.
    #[arg(long, requires = "tls_cert")]
    deny_hosts: Option<PathBuf>,
}

/// The TLS listener's configuration and deny list, from the arguments (`None` without
/// --tls-cert).
fn tls_of(args: &ControllerArgs) -> Result<Option<(Arc<rustls::ServerConfig>, access::Denied)>, String> {
    let (Some(cert), Some(key), Some(ca)) = (&args.tls_cert, &args.tls_key, &args.client_ca) else {
        return Ok(None);
    };
    let chain = crate::http::tls::read_certificates(cert, "--tls-cert")?;
    let key = crate::http::tls::read_private_key(key, "--tls-key")?;
    let cas = crate::http::tls::read_certificates(ca, "--client-ca")?;
    let config = crate::http::tls::server_config(chain, key, &cas)?;
    let denied = match &args.deny_hosts {
        Some(f) => {
            let text = std::fs::read_to_string(f).map_err(|e| format!("--deny-hosts {}: {e}", f.display()))?;
            access::Denied::parse(&text).map_err(|e| format!("--deny-hosts {}: {e}", f.display()))?
        }
        None => access::Denied::default(),
    };
    Ok(Some((config, denied)))
}

#[derive(clap::Subcommand, Debug)]
enum ControllerCommand {
    /// The cluster's certificate authority: make it, and issue certificates for controllers,
    /// hosts and etcd (see docs/cluster.md).
    Ca(ca::CaArgs),
    /// Simulated hosts against a running controller over its TLS API: reports per second
    /// held, latencies, the controller's CPU, memory and store writes (see docs/cluster.md).
    Load(load::LoadArgs),
}

/// Runs the controller until SIGTERM or SIGINT (or `ca`'s command, at once).
pub fn run(args: ControllerArgs) -> ExitCode {
    let done = match args.command {
        Some(ControllerCommand::Ca(c)) => ca::run(c).map_err(|e| format!("ca: {e}")),
        Some(ControllerCommand::Load(l)) => load::run(l).map_err(|e| format!("load: {e}")),
        None => serve(args),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("teamster controller: {e}");
            ExitCode::from(2)
        }
    }
}

fn serve(args: ControllerArgs) -> Result<(), String> {
    let tls = tls_of(&args)?;
    let token = match args.listen {
        Some(addr) if !addr.ip().is_loopback() && tls.is_none() => {
            return Err(format!(
                "--listen {addr}: an address other than loopback needs TLS (--tls-cert, --tls-key and --client-ca)"
            ));
        }
        Some(_) => {
            let t = match &args.token_file {
                Some(f) => safe_file::read_private(f, "--token-file")?,
                None => std::env::var("TEAMSTER_API_TOKEN").unwrap_or_default(),
            };
            if t.trim().is_empty() {
                return Err("--listen needs a token: --token-file or TEAMSTER_API_TOKEN".into());
            }
            Some(t.trim().to_string())
        }
        None => None,
    };
    let (socket_dir, socket_name) = safe_file::split(&args.socket).map_err(|e| format!("--socket {e}"))?;
    let dir = TrustedDir::open_or_make(&socket_dir, "--socket directory", 0o755)?;
    let mut lock_name = socket_name;
    lock_name.push(".lock");
    let shown = args.socket.display().to_string();
    let _lock = dir.lock(&lock_name, &format!("a controller is already serving on {shown}"))?;
    if tls.is_some() {
        raise_open_files(crate::http::admission::MAX_NETWORK_CONNECTIONS as u64 + 256);
    }
    let pending = open_store(&args, advertised(&args, tls.is_some()))?;
    let rt =
        (tokio::runtime::Builder::new_current_thread().enable_all().build()).map_err(|e| format!("runtime: {e}"))?;
    let socket = args.socket.clone();
    let served = rt.block_on(async move {
        let unix = Arc::new(crate::http::listen::bind_unix(&args.socket)?);
        let tcp = match args.listen {
            Some(addr) => {
                let tcp = (tokio::net::TcpListener::bind(addr).await).map_err(|e| format!("--listen {addr}: {e}"))?;
                let bound = tcp.local_addr().map_err(|e| e.to_string())?;
                let scheme = if tls.is_some() { "https" } else { "http" };
                println!("teamster controller: API on {scheme}://{bound}");
                Some(Arc::new(tcp))
            }
            None => None,
        };
        let store = match pending {
            Pending::Ready(store) => store,
            Pending::Campaign(campaign) => {
                // Until it leads, it answers where the leader is.
                let known = follower::Known::default();
                let mut following = tokio::task::JoinSet::new();
                following.spawn(follower::look_up(campaign.leader(), known.clone()));
                following.spawn(crate::http::listen::serve(
                    unix.clone(),
                    follower::router(known.clone()),
                    crate::http::admission::Rules::Owner,
                ));
                if let Some(tcp) = &tcp {
                    let app = follower::router(known.clone());
                    match &tls {
                        Some((config, _)) => {
                            following.spawn(crate::http::listen::serve_tls(tcp.clone(), app, config.clone()))
                        }
                        None => following.spawn(crate::http::listen::serve(
                            tcp.clone(),
                            app,
                            crate::http::admission::Rules::Token,
                        )),
                    };
                }
                let won = tokio::task::spawn_blocking(move || campaign.won()).await;
                following.abort_all();
                Box::new(won.map_err(|e| format!("etcd: {e}"))??)
            }
        };
        let state = prepare(&*store, args.host_timeout_s)?;
        println!(
            "teamster controller: {} hosts, {} VMs from the {}",
            state.hosts.len(),
            state.vms.len(),
            store.describe()
        );
        let shared = api::ControllerState::new(state, store);
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(crate::http::listen::serve(
            unix,
            api::router(shared.clone(), access::Access::Owner),
            crate::http::admission::Rules::Owner,
        ));
        if let (Some(tcp), Some(token)) = (tcp, token) {
            let token = Arc::new(token);
            match tls {
                Some((config, denied)) => {
                    let app = api::router(shared.clone(), access::Access::Tls { token, denied });
                    tasks.spawn(crate::http::listen::serve_tls(tcp, app, config));
                }
                None => {
                    let app = api::router(shared.clone(), access::Access::Token(token));
                    tasks.spawn(crate::http::listen::serve(
                        tcp,
                        app,
                        crate::http::admission::Rules::Token,
                    ));
                }
            }
        }
        tasks.spawn(api::watch_hosts(shared.clone()));
        println!("teamster controller: API on {shown}");
        let mut term = (tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()))
            .map_err(|e| format!("signals: {e}"))?;
        let ended = tokio::select! {
            _ = term.recv() => None,
            _ = tokio::signal::ctrl_c() => None,
            r = tasks.join_next() => Some(format!("a listener stopped: {r:?}")),
        };
        ended.map_or(Ok(()), Err)
    });
    let _ = std::fs::remove_file(&socket);
    served
}

/// The state to serve, from `store`: made anew if there is none (a fresh cluster identity, and
/// adoption open for a while), and told the host timeout (stored before any host is told it).
fn prepare(store: &dyn store::Store, host_timeout_s: u64) -> Result<state::ClusterState, String> {
    let was = store.load()?.unwrap_or_default();
    let mut state = was.clone();
    state.host_timeout = state::HostTimeout(host_timeout_s);
    state.listening_since_s = api::now_s();
    if state.host_timeout_given_s < host_timeout_s {
        state.host_timeout_given_s = host_timeout_s;
    }
    if state.cluster_id == 0 {
        state.cluster_id = fresh_id();
        state.adoption_until_s = api::now_s() + adoption::ADOPTION_WINDOW_S;
    }
    let delta = state.delta(&was)?;
    if !delta.is_empty() {
        store.save(&state, &delta).map_err(|e| e.to_string())?;
    }
    Ok(state)
}

/// Where hosts reach this controller, as it campaigns with it: `--advertise`, or its
/// `--listen` address unless that is every address (0.0.0.0, ::).
fn advertised(args: &ControllerArgs, tls: bool) -> Option<String> {
    if let Some(a) = &args.advertise {
        return Some(a.clone());
    }
    let addr = args.listen.filter(|a| !a.ip().is_unspecified())?;
    Some(format!("{}://{addr}", if tls { "https" } else { "http" }))
}

/// Raises this process's limit of open files to `wanted` if it is lower, as far as the hard
/// limit allows (the usual soft limit, 1024, is below what a TLS listener for a cluster's hosts
/// keeps); says so on standard error if it cannot.
fn raise_open_files(wanted: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit on this process, with a valid rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 || l.rlim_cur >= wanted {
            return;
        }
        l.rlim_cur = wanted.min(l.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
    }
    if l.rlim_cur < wanted {
        eprintln!(
            "teamster controller: open files limited to {} (hard limit): the TLS listener may refuse hosts before {} connections",
            l.rlim_cur,
            crate::http::admission::MAX_NETWORK_CONNECTIONS
        );
    }
}

/// A store ready to serve, or a campaign for one.
enum Pending {
    Ready(Box<dyn store::Store>),
    Campaign(etcd::Campaign),
}

/// How much longer than the etcd lease the host timeout must be (seconds): the hosts'
/// isolation margin (two one-second report intervals and a second: 3 s), a second for the new
/// leader to load the state, the share of a report's 5 s that a host spends on a dead leader
/// before it asks the next controller (2.5 s with two), and a report interval (1 s).
pub const MIN_FAILOVER_MARGIN_S: u64 = 8;

/// The store the arguments name: a campaign for etcd's (once this controller leads; its lease
/// granted already, so etcd is reachable), or the embedded file.
fn open_store(args: &ControllerArgs, advertise: Option<String>) -> Result<Pending, String> {
    if !args.etcd.is_empty() {
        if !(1..=60).contains(&args.lease_s) {
            return Err(format!("--lease-s {}: expected 1 to 60 seconds", args.lease_s));
        }
        // A host cut off for nearly its timeout detaches its VMs; a new leader is reached
        // within the lease and MIN_FAILOVER_MARGIN_S less that margin. Shorter, a failover
        // could detach every VM.
        let least = args.lease_s as u64 + MIN_FAILOVER_MARGIN_S;
        if args.host_timeout_s < least {
            return Err(format!(
                "--host-timeout-s {} is too short for --lease-s {}: hosts would detach their VMs while the next controller takes the lead; give at least {least}",
                args.host_timeout_s, args.lease_s
            ));
        }
        teamster_core::host::check_name("prefix", &args.etcd_prefix).map_err(|e| format!("--etcd-prefix: {e}"))?;
        let tls = match &args.etcd_ca {
            Some(ca) => Some(
                crate::http::client::tls_from_files(ca, args.etcd_cert.as_deref(), args.etcd_key.as_deref())
                    .map_err(|e| format!("etcd: {e}"))?,
            ),
            None => None,
        };
        let gateway = etcd_gateway::Gateway::new(&args.etcd, tls)?;
        let campaign = etcd::EtcdStore::lead(gateway, args.etcd_prefix.clone(), args.lease_s, advertise, |why| {
            // Another controller leads from now on: this one must not act a moment longer.
            eprintln!("teamster controller: {why}: no longer the leader; stopping");
            std::process::exit(3);
        })?;
        return Ok(Pending::Campaign(campaign));
    }
    // Opened once (made 0700 where missing, its own only), checked, and from then on named by
    // its descriptor alone: the store file is opened relative to it.
    let (state_dir, name) = safe_file::split(&args.state).map_err(|e| format!("--state {e}"))?;
    let dir = TrustedDir::open_or_make(&state_dir, "--state directory", 0o700)?;
    Ok(Pending::Ready(Box::new(store::EmbeddedStore::open(&dir, &name)?)))
}

/// A cluster's identity: the clock's nanoseconds mixed with the process ID (an identity, not
/// a secret: it tells a host that the controller's state is another one).
fn fresh_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    (nanos ^ (u64::from(std::process::id()) << 32)).max(1)
}

#[cfg(test)]
mod tests;
