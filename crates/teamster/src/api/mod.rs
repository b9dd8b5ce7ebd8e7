//! The control plane: a REST API over the running switch, served by axum on its own thread.
//!
//! The data plane never waits for it. Reads are served from the latest [`Snapshot`] the poll
//! loop published (twice a second, and at once after a change). A change is serialised behind
//! one lock, applied to a copy of the configuration, checked whole as at start-up (a refusal is
//! a 4xx and changes nothing), saved atomically, and then handed to the loop, which applies it
//! between packets and answers with a fresh snapshot.
//!
//! It listens on a unix socket (mode 0600: only its owner may connect) and, if asked, on a
//! loopback TCP address where every request must carry the bearer token ([`auth`]); without it
//! the answer is 401. Each listener caps its connections and times out idle and slow ones; on
//! TCP, connections that have not presented the token are shared fairly between the local
//! users holding them; a body is one JSON object of at most 64 KiB: the HTTP plumbing it shares
//! with the cluster controller's API, [`crate::http`].

mod agent;
pub mod changes;
mod dashboard;
mod domain_changes;
mod history;
mod metrics;
mod openapi;
mod reload;
mod router;
mod routes;
mod rules;
pub mod uplink_changes;
mod whatif;

use crate::http::admission;
pub use crate::http::error::{ApiError, ErrorBody};
use crate::http::listen::{self, bind_unix};
use crate::live::claims::Claims;
use crate::live::config::SwitchFile;
use crate::live::daemon::Apply;
use crate::live::persist::KeptFile;
use crate::live::snapshot::Snapshot;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{watch, Mutex};

/// Where and how the API listens.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The unix socket (created with mode 0600; an old socket file there is replaced). Its
    /// directory must already be checked and its lock held (see `main`).
    pub socket: Option<PathBuf>,
    /// A loopback TCP address (port 0: any free port), and the bearer token it demands.
    pub tcp: Option<(SocketAddr, String)>,
}

/// What every handler shares.
#[derive(Clone)]
pub struct ApiState {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    /// The running configuration; held for the whole of a change, so changes are serialised.
    config: Arc<Mutex<SwitchFile>>,
    config_path: PathBuf,
    /// The files the daemon rewrites, with what it last read or wrote there; locked only while
    /// `config` is held.
    files: Arc<std::sync::Mutex<KeptFiles>>,
    changes: std::sync::mpsc::Sender<Apply>,
    /// The last hour, a point a second (see [`history`]).
    history: Arc<std::sync::Mutex<history::History>>,
    /// The interfaces this switch has claimed ([`crate::live::claims`]).
    claims: Arc<std::sync::Mutex<Claims>>,
}

/// The files a change may rewrite.
pub struct KeptFiles {
    /// `switch.toml`.
    pub config: KeptFile,
    /// The libvirt hook's ports (see [`crate::live::domain_ports`]).
    pub domains: KeptFile,
}

/// Starts the API on a thread of its own. Returns once every listener is bound (or with the
/// error that stopped one), so a bad address fails the start-up, not some later request; with
/// the TCP address bound, if there is one.
pub fn start(
    api: ApiConfig,
    config: SwitchFile,
    files: KeptFiles,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    changes: std::sync::mpsc::Sender<Apply>,
    news: Option<tokio::sync::mpsc::Receiver<teamster_dp::datapath::LinkNews>>,
    claims: Arc<std::sync::Mutex<Claims>>,
) -> Result<(std::thread::JoinHandle<()>, Option<SocketAddr>), String> {
    let state = ApiState {
        snapshots,
        config: Arc::new(Mutex::new(config)),
        config_path: files.config.path().to_path_buf(),
        files: Arc::new(std::sync::Mutex::new(files)),
        changes,
        history: history::shared(),
        claims,
    };
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<Option<SocketAddr>, String>>();
    let handle = std::thread::Builder::new()
        .name("teamster-api".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("API runtime: {e}")));
                    return;
                }
            };
            if let Some(news) = news {
                rt.spawn(rules::run(state.clone(), news));
            }
            rt.spawn(reload::run(state.clone()));
            if let Some(section) = state.config.blocking_lock().controller.clone() {
                rt.spawn(agent::run(state.clone(), section));
            }
            rt.spawn(history::keep(state.clone()));
            rt.block_on(serve(api, state, ready_tx));
        })
        .map_err(|e| format!("API thread: {e}"))?;
    match ready_rx.recv() {
        Ok(Ok(bound)) => Ok((handle, bound)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("the API thread ended before it listened".into()),
    }
}

/// Binds the listeners, reports on `ready`, then serves until the process ends.
async fn serve(api: ApiConfig, state: ApiState, ready: std::sync::mpsc::Sender<Result<Option<SocketAddr>, String>>) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut bound = None;
    if let Some(path) = &api.socket {
        match bind_unix(path) {
            Ok(listener) => {
                let app = router::router(state.clone(), None);
                tasks.spawn(listen::serve(listener, app, admission::Rules::Owner));
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        }
    }
    if let Some((addr, token)) = &api.tcp {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                bound = listener.local_addr().ok();
                let app = router::router(state.clone(), Some(Arc::new(token.clone())));
                tasks.spawn(listen::serve(listener, app, admission::Rules::Token));
            }
            Err(e) => {
                let _ = ready.send(Err(format!("API listen on {addr}: {e}")));
                return;
            }
        }
    }
    let _ = ready.send(Ok(bound));
    while tasks.join_next().await.is_some() {}
}
