//! One HTTP/1.1 exchange with a daemon's API, over its unix socket or TCP, for the tests.

#![allow(dead_code)] // each test binary uses its own part

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Sends `method path` (with the bearer `token` and a JSON `body`, if any) on `stream` and
/// reads the whole answer: (status, body).
pub fn exchange<S: Read + Write>(
    mut stream: S,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, String) {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: teamster\r\nConnection: close\r\n");
    if let Some(t) = token {
        req += &format!("Authorization: Bearer {t}\r\n");
    }
    if let Some(b) = body {
        req += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len());
    }
    req += "\r\n";
    req += body.unwrap_or("");
    stream.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    (
        status,
        answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    )
}

/// [`exchange`] over the unix socket at `socket`, without a token.
pub fn request(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    exchange(s, method, path, None, body)
}
