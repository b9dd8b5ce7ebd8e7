//! How the API's listeners take and keep connections, so that idle, slow or many clients cannot
//! starve it.
//!
//! Each listener (the unix socket, the TCP address) keeps at most [`MAX_CONNECTIONS`] at once,
//! counted separately, so a flood on one never touches the other: the unix socket, root's alone,
//! stays usable while the TCP one is full, and the two caps together stay far below the usual
//! limit of 1024 open files (a daemon out of descriptors can accept nothing, on any listener).
//! A connection must deliver a whole request head within [`HEAD_TIMEOUT`] of opening or of its
//! previous answer (hyper's header read timeout, which is also the keep-alive idle timeout) and
//! its body within [`super::body::BODY_TIMEOUT`]; otherwise it is closed.
//!
//! On TCP, a connection is *unproven* until one of its requests has carried the right token.
//! When the listener is full, a new connection evicts the oldest unproven one that has had
//! [`GRACE`] to present its token, instead of being turned away; so connections held open by
//! someone without the token cannot lock out a client with it for longer than the grace (a
//! refused client retries), while a burst of new connections cannot evict a client whose
//! request is still on its way. With no such connection the newcomer is closed at once. A
//! request with a missing or wrong token is answered 401 and its connection closed.

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;

/// Connections kept at once per listener.
pub const MAX_CONNECTIONS: usize = 64;
/// Time allowed for a request head, from the connection's opening or its previous answer.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a TCP connection may take to present its token before it may be evicted.
pub const GRACE: Duration = Duration::from_secs(1);
/// The largest read buffer a connection holds (so a request head is at most this long).
const MAX_BUFFER: usize = 16 * 1024;

/// A connection's standing, shared by its task, its listener and the token check (which finds
/// it in the request's extensions).
#[derive(Debug)]
pub struct Standing {
    opened: Instant,
    proven: AtomicBool,
    evict: Notify,
}

impl Standing {
    fn new(opened: Instant) -> Standing {
        Standing {
            opened,
            proven: AtomicBool::new(false),
            evict: Notify::new(),
        }
    }

    /// Marks the connection as having presented the right token: it is not evicted.
    pub fn prove(&self) {
        self.proven.store(true, Ordering::Relaxed);
    }
}

/// The connections one listener keeps, oldest first.
type Table = Arc<Mutex<Vec<Arc<Standing>>>>;

/// Something that hands out connections: a unix or TCP listener.
pub trait Accept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&self) -> impl std::future::Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        tokio::net::TcpListener::accept(self).await.map(|(s, _)| s)
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        tokio::net::UnixListener::accept(self).await.map(|(s, _)| s)
    }
}

/// Decides where a new connection goes at `now` when `table` is full: the index of the one to
/// evict (the oldest unproven, if `evict_unproven` and it is past its grace), or None to refuse
/// the newcomer.
fn victim(table: &[Arc<Standing>], evict_unproven: bool, now: Instant) -> Option<usize> {
    if !evict_unproven {
        return None;
    }
    let oldest = table.iter().position(|c| !c.proven.load(Ordering::Relaxed))?;
    (now.duration_since(table[oldest].opened) >= GRACE).then_some(oldest)
}

/// Serves `router` on `listener` for ever, under the rules of the module documentation.
pub async fn serve<L: Accept>(listener: L, router: Router, evict_unproven: bool) {
    let table: Table = Arc::default();
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
        let now = Instant::now();
        let standing = Arc::new(Standing::new(now));
        {
            let mut live = table.lock().unwrap_or_else(|e| e.into_inner());
            if live.len() >= MAX_CONNECTIONS {
                match victim(&live, evict_unproven, now) {
                    Some(i) => live.remove(i).evict.notify_one(),
                    None => continue, // the newcomer is dropped, so closed
                }
            }
            live.push(standing.clone());
        }
        tokio::spawn(connection(io, router.clone(), standing, table.clone()));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_listener_evicts_the_oldest_unproven_connection_past_its_grace_or_refuses() {
        let t0 = Instant::now();
        let table: Vec<Arc<Standing>> = (0..4)
            .map(|i| Arc::new(Standing::new(t0 + Duration::from_millis(400) * i)))
            .collect();
        table[0].prove();
        table[2].prove();
        let later = t0 + Duration::from_secs(3);
        assert_eq!(victim(&table, true, later), Some(1));
        assert_eq!(victim(&table, false, later), None);
        // Connection 1 opened at 0.4 s: within its grace until 1.4 s.
        assert_eq!(victim(&table, true, t0 + Duration::from_millis(1300)), None);
        assert_eq!(victim(&table, true, t0 + Duration::from_millis(1400)), Some(1));
        table[1].prove();
        table[3].prove();
        assert_eq!(victim(&table, true, later), None);
    }
}
