//! One HTTP/1.1 exchange with a daemon's API, over its unix socket or TCP, and runs of them as a
//! monitoring client makes, for the tests.

#![allow(dead_code)] // each test binary uses its own part

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Sends `method path` (with the bearer `token` and a JSON `body`, if any) on `stream` and
/// reads the whole answer: (status, body).
pub fn exchange<S: Read + Write>(
    stream: S,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, String) {
    try_exchange(stream, method, path, token, body).unwrap_or_else(|| panic!("{method} {path}: no HTTP answer"))
}

/// [`exchange`] over the unix socket at `socket`, without a token.
pub fn request(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    exchange(s, method, path, None, body)
}

/// How a run of authorised requests fared.
#[derive(Debug, Clone)]
pub struct Burst {
    pub sent: usize,
    /// Requests not answered 200 within [`BURST_WAIT`] (refused, reset, timed out).
    pub failed: usize,
    /// The slowest and the median answer of those that came.
    pub slowest: Duration,
    pub median: Duration,
}

/// What one request of a [`burst`] is given: to connect, send and be answered.
pub const BURST_WAIT: Duration = Duration::from_secs(5);

/// `count` GETs of `path` on 127.0.0.1:`port` with the bearer `token`, one every 250 ms, each
/// on a connection of its own and tried once (as a monitoring client does): how many failed,
/// and how long the others took.
pub fn burst(port: u16, token: &str, path: &str, count: usize) -> Burst {
    let mut took = Vec::new();
    let mut failed = 0;
    for i in 0..count {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(250));
        }
        let t0 = std::time::Instant::now();
        let answered = (|| {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let s = std::net::TcpStream::connect_timeout(&addr, BURST_WAIT).ok()?;
            s.set_read_timeout(Some(BURST_WAIT)).ok()?;
            s.set_write_timeout(Some(BURST_WAIT)).ok()?;
            let (status, _) = try_exchange(s, "GET", path, Some(token), None)?;
            (status == 200).then_some(())
        })();
        match answered {
            Some(()) if t0.elapsed() <= BURST_WAIT => took.push(t0.elapsed()),
            _ => failed += 1,
        }
    }
    took.sort();
    Burst {
        sent: count,
        failed,
        slowest: took.last().copied().unwrap_or_default(),
        median: took.get(took.len() / 2).copied().unwrap_or_default(),
    }
}

/// [`exchange`], with None for an answer that does not come or does not parse.
pub fn try_exchange<S: Read + Write>(
    mut stream: S,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Option<(u16, String)> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: teamster\r\nConnection: close\r\n");
    if let Some(t) = token {
        req += &format!("Authorization: Bearer {t}\r\n");
    }
    if let Some(b) = body {
        req += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len());
    }
    req += "\r\n";
    req += body.unwrap_or("");
    stream.write_all(req.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.get(9..12)?.parse().ok()?;
    Some((
        status,
        answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    ))
}
