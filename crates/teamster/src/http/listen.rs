//! How the API's listeners take and keep connections: the accept loop, and each connection's
//! timeouts; which connections are kept is [`super::admission`]'s.
//!
//! A connection must deliver a whole request head within [`HEAD_TIMEOUT`] of opening or of its
//! previous answer (hyper's header read timeout, which is also the keep-alive idle timeout) and
//! its body within [`super::body::BODY_TIMEOUT`]; otherwise it is closed. On TCP, each newcomer's
//! peer is looked up ([`super::peer`]) before it is admitted; a client that has already closed
//! its socket is not. A request with a missing or wrong token is answered 401 and its
//! connection closed ([`super::auth`]). A peer held at its share, or evicting its own
//! connections, is said once a minute on standard error, naming its uid.

use super::admission::{admit, Admission, Eviction, Refusal, Rules, Standing, MAX_UNPROVEN_PER_PEER, TCP_TALLY};
use super::peer::{Found, Peer, PeerFinder};
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

/// Time allowed for a request head, from the connection's opening or its previous answer.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest read buffer a connection holds (so a request head is at most this long).
const MAX_BUFFER: usize = 16 * 1024;
/// How often a peer held at its share is named on standard error.
const NOTE_EVERY: Duration = Duration::from_secs(60);
/// Peers remembered for those notes; past it, all are forgotten (and may be named again).
const NOTES_KEPT: usize = 1024;

/// The connections one listener keeps, oldest first.
type Table = Arc<Mutex<Vec<Arc<Standing>>>>;

/// Something that hands out connections: a unix or TCP listener.
pub trait Accept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&self) -> impl std::future::Future<Output = std::io::Result<Self::Io>> + Send;
    /// The connection's (local, remote) addresses, for a TCP one.
    fn addresses(io: &Self::Io) -> Option<(SocketAddr, SocketAddr)>;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        tokio::net::TcpListener::accept(self).await.map(|(s, _)| s)
    }
    fn addresses(io: &Self::Io) -> Option<(SocketAddr, SocketAddr)> {
        Some((io.local_addr().ok()?, io.peer_addr().ok()?))
    }
}

/// A listener shared: served by one server after another (a controller's follower, then its
/// leader's API) without closing it in between.
impl<L: Accept + Sync> Accept for Arc<L> {
    type Io = L::Io;
    fn accept(&self) -> impl std::future::Future<Output = std::io::Result<Self::Io>> + Send {
        L::accept(self)
    }
    fn addresses(io: &Self::Io) -> Option<(SocketAddr, SocketAddr)> {
        L::addresses(io)
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        tokio::net::UnixListener::accept(self).await.map(|(s, _)| s)
    }
    fn addresses(_: &Self::Io) -> Option<(SocketAddr, SocketAddr)> {
        None
    }
}

/// Serves `router` on `listener` for ever, under `rules` (see [`super::admission`]).
pub async fn serve<L: Accept>(listener: L, router: Router, rules: Rules) {
    serve_with(listener, router, rules, None).await
}

/// Serves `router` over TLS on `listener` for ever, under the network rules (see
/// [`super::admission`]). The handshake must end within [`HEAD_TIMEOUT`]; the certificate a
/// client presented goes with each of its requests ([`super::tls::Presented`]), and a request
/// that passes its role's check proves the connection.
pub async fn serve_tls<L: Accept>(listener: L, router: Router, tls: Arc<rustls::ServerConfig>) {
    serve_with(
        listener,
        router,
        Rules::Network,
        Some(tokio_rustls::TlsAcceptor::from(tls)),
    )
    .await
}

async fn serve_with<L: Accept>(listener: L, router: Router, rules: Rules, tls: Option<tokio_rustls::TlsAcceptor>) {
    let table: Table = Arc::default();
    let mut finder = (rules != Rules::Owner).then(PeerFinder::new);
    let mut noted: HashMap<Peer, Instant> = HashMap::new();
    loop {
        let io = match listener.accept().await {
            Ok(io) => io,
            // Out of descriptors or a connection reset before it was taken: wait a moment
            // rather than spin, and go on.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let peer = match (&mut finder, L::addresses(&io)) {
            (Some(f), Some((local, remote))) => match f.find(local, remote) {
                Found::Peer(p) => p,
                Found::Gone => {
                    TCP_TALLY.refused(Refusal::Gone);
                    continue;
                }
            },
            _ => Peer::SocketOwner,
        };
        let now = Instant::now();
        let standing = Arc::new(Standing::new(now, peer));
        let admission = {
            let mut live = table.lock().unwrap_or_else(|e| e.into_inner());
            let admission = admit(&live, peer, rules, now);
            if let Admission::Evict(i, _) = admission {
                live.remove(i).evict.notify_one();
            }
            if !matches!(admission, Admission::Refuse(_)) {
                live.push(standing.clone());
            }
            admission
        };
        if rules != Rules::Owner {
            account(admission, peer, &mut noted, now);
        }
        if let Admission::Refuse(_) = admission {
            continue; // the newcomer is dropped, so closed
        }
        match &tls {
            None => tokio::spawn(connection(io, router.clone(), standing, table.clone())),
            Some(acceptor) => tokio::spawn(tls_connection(
                acceptor.clone(),
                io,
                router.clone(),
                standing,
                table.clone(),
            )),
        };
    }
}

/// Makes the TLS handshake of a newcomer, then serves it as [`connection`] does, each request
/// carrying the certificate it presented; a handshake that fails or takes longer than
/// [`HEAD_TIMEOUT`] closes it.
async fn tls_connection<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    acceptor: tokio_rustls::TlsAcceptor,
    io: I,
    router: Router,
    standing: Arc<Standing>,
    table: Table,
) {
    let handshake = tokio::select! {
        h = tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(io)) => h.ok().and_then(Result::ok),
        _ = standing.evict.notified() => None,
    };
    let Some(stream) = handshake else {
        super::tls::HANDSHAKES_FAILED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut live = table.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|c| !Arc::ptr_eq(c, &standing));
        return;
    };
    // A verified certificate does not prove the connection yet: a request must pass its
    // role's check first (a host's own name, not denied; or the token), which proves it.
    let presented = super::tls::Presented::of(stream.get_ref().1);
    connection(stream, router.layer(axum::Extension(presented)), standing, table).await
}

/// Counts a TCP newcomer's admission, and says on standard error that `peer` is held at its
/// share, unless that was said within [`NOTE_EVERY`].
fn account(admission: Admission, peer: Peer, noted: &mut HashMap<Peer, Instant>, now: Instant) {
    match admission {
        Admission::Take => return,
        Admission::Evict(_, why) => TCP_TALLY.evicted(why),
        Admission::Refuse(why) => TCP_TALLY.refused(why),
    }
    let at_share = matches!(
        admission,
        Admission::Refuse(Refusal::PeerLimit) | Admission::Evict(_, Eviction::OwnPeer)
    );
    if !at_share || noted.get(&peer).is_some_and(|t| now.duration_since(*t) < NOTE_EVERY) {
        return;
    }
    if noted.len() >= NOTES_KEPT {
        noted.clear();
    }
    noted.insert(peer, now);
    eprintln!(
        "teamster: API (TCP): {peer} holds {MAX_UNPROVEN_PER_PEER} connections that have not presented the token; its next ones replace its oldest or are refused (teamster_api_tcp_connections_refused_total{{reason=\"peer_limit\"}})"
    );
}

/// Serves one connection until it ends, times out or is evicted; then forgets it.
async fn connection<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: I,
    router: Router,
    standing: Arc<Standing>,
    table: Table,
) {
    let service = TowerToHyperService::new(router.layer(axum::Extension(standing.clone())));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_BUFFER)
        .serve_connection(TokioIo::new(io), service);
    tokio::select! {
        _ = conn => {}
        _ = standing.evict.notified() => {}
    }
    let mut live = table.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|c| !Arc::ptr_eq(c, &standing));
}

/// Binds the unix socket with mode 0600, replacing a stale socket file (never another file).
/// Its directory is trusted and its lock held, so no one else can be listening there.
pub fn bind_unix(path: &std::path::Path) -> Result<tokio::net::UnixListener, String> {
    use std::os::unix::fs::FileTypeExt;
    let shown = path.display();
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!(
                "API socket {shown}: exists and is not a socket; not replacing it"
            ));
        }
        std::fs::remove_file(path).map_err(|e| format!("API socket {shown}: cannot remove the old one: {e}"))?;
    }
    // Created under a tight umask so there is no moment when others may connect.
    // SAFETY: umask only changes this process's file-creation mask; restored right after.
    let old = unsafe { libc::umask(0o177) };
    let bound = tokio::net::UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    bound.map_err(|e| format!("API socket {shown}: {e}"))
}
