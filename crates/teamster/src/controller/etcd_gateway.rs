//! etcd's v3 API through its JSON gateway (`POST /v3/...` on the client URL, which etcd serves
//! beside gRPC on the same port): the handful of calls the controllers' store makes, each a
//! JSON request and answer over HTTP/1.1.
//!
//! Why not the gRPC client crate: it compiles etcd's protobufs at build time with `protoc`, a
//! system package, so a fresh machine with only Rust could not build Teamster; the gateway
//! needs only the HTTP client the rest of the project already uses. The gateway's mapping is
//! protobuf's JSON: `bytes` fields are base64, 64-bit integers are decimal strings (taken as
//! numbers too), and fields at their zero value are left out of answers.
//!
//! `https://` endpoints are spoken to over TLS (etcd's `--cert-file`, with
//! `--client-cert-auth` a client certificate too: `teamster controller ca issue-client`); every
//! endpoint of a cluster has the same scheme.
//!
//! Each call opens its own connection (to the first endpoint that accepts one, in order), so a
//! campaign that waits for the leadership never holds up a lease keep-alive.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::time::Duration;

/// How long connecting to one endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a call other than a campaign may take, connecting included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes an answer may have (the cluster state is one value: far below this).
const ANSWER_LIMIT: usize = 64 << 20;

/// A client of the gateway of one etcd cluster (`http://host:port` endpoints, or
/// `https://host:port` with a TLS configuration).
#[derive(Debug, Clone)]
pub struct Gateway {
    endpoints: Vec<String>,
    shown: String,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// The endpoint tried first; moved on by a call that fails, so that retries go to another
    /// member (one that takes connections but has lost its quorum answers nothing in time).
    first: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// The leadership a campaign won: the election key, its creation revision, and the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    pub key: Vec<u8>,
    pub rev: i64,
    pub lease: i64,
}

impl Gateway {
    /// A client of `endpoints` (`http://host:port` or `host:port`; or `https://host:port`,
    /// spoken to with `tls`); refused if there are none, one names another scheme, or the
    /// schemes are mixed or do not match `tls`.
    pub fn new(endpoints: &[String], tls: Option<std::sync::Arc<rustls::ClientConfig>>) -> Result<Gateway, String> {
        let shown = endpoints.join(",");
        if endpoints.is_empty() {
            return Err("etcd: no endpoints".into());
        }
        let mut hosts = Vec::new();
        for e in endpoints {
            let (secure, host) = match e.split_once("://") {
                None => (false, e.as_str()),
                Some(("http", rest)) => (false, rest),
                Some(("https", rest)) => (true, rest),
                Some((scheme, _)) => {
                    return Err(format!(
                        "etcd {e}: `{scheme}://` is not supported (http:// or https://)"
                    ));
                }
            };
            match (secure, &tls) {
                (true, None) => {
                    return Err(format!("etcd {e}: https:// needs the CA certificate (--etcd-ca)"));
                }
                (false, Some(_)) => {
                    return Err(format!(
                        "etcd {e}: not https://, but TLS is configured (every endpoint takes the same scheme)"
                    ));
                }
                _ => {}
            }
            let host = host.trim_end_matches('/');
            if host.is_empty() || host.contains('/') {
                return Err(format!("etcd {e}: expected http://HOST:PORT or https://HOST:PORT"));
            }
            hosts.push(host.to_string());
        }
        Ok(Gateway {
            endpoints: hosts,
            shown,
            tls,
            first: Default::default(),
        })
    }

    /// The endpoints as given, for messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Grants a lease of `ttl_s` seconds: its ID.
    pub async fn lease_grant(&self, ttl_s: i64) -> Result<i64, String> {
        let a = self
            .call("/v3/lease/grant", json!({ "TTL": ttl_s.to_string() }))
            .await?;
        int(&a, "ID").ok_or_else(|| self.odd("lease/grant", &a))
    }

    /// Renews lease `id`: the seconds it has left (0: it expired).
    pub async fn lease_keep_alive(&self, id: i64) -> Result<i64, String> {
        let a = self
            .call("/v3/lease/keepalive", json!({ "ID": id.to_string() }))
            .await?;
        // One answer of the keep-alive stream, wrapped by the gateway in `result`.
        let r = a.get("result").unwrap_or(&a);
        Ok(int(r, "TTL").unwrap_or(0))
    }

    /// Campaigns for election `name` as `value` with lease `lease`: returns once this
    /// campaigner leads (etcd holds the request until then).
    pub async fn campaign(&self, name: &str, value: &str, lease: i64) -> Result<Leadership, String> {
        let body = json!({
            "name": BASE64.encode(name),
            "value": BASE64.encode(value),
            "lease": lease.to_string(),
        });
        let a = (self.call_waiting("/v3/election/campaign", body).await).inspect_err(|_| self.move_on())?;
        let l = a.get("leader").ok_or_else(|| self.odd("election/campaign", &a))?;
        let key = (l.get("key").and_then(Value::as_str))
            .and_then(|k| BASE64.decode(k).ok())
            .ok_or_else(|| self.odd("election/campaign", &a))?;
        Ok(Leadership {
            key,
            rev: int(l, "rev").unwrap_or(0),
            lease: int(l, "lease").unwrap_or(lease),
        })
    }

    /// The value the leader of election `name` campaigned with, if it has a leader.
    pub async fn leader(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        match self
            .call("/v3/election/leader", json!({ "name": BASE64.encode(name) }))
            .await
        {
            Ok(a) => {
                let value = a.get("kv").and_then(|kv| kv.get("value")).and_then(Value::as_str);
                Ok(value.and_then(|v| BASE64.decode(v).ok()))
            }
            Err(e) if e.contains("no leader") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The value of `key`, if it exists.
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let a = self.call("/v3/kv/range", json!({ "key": BASE64.encode(key) })).await?;
        let Some(kv) = a.get("kvs").and_then(Value::as_array).and_then(|k| k.first()) else {
            return Ok(None);
        };
        match kv.get("value").and_then(Value::as_str) {
            None => Ok(Some(Vec::new())),
            Some(v) => BASE64.decode(v).map(Some).map_err(|_| self.odd("kv/range", &a)),
        }
    }

    /// Every key under `prefix` with its value, in key order, read a page at a time (an
    /// answer stays well under the gateway's size limits however many records there are).
    pub async fn range_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
        let end = prefix_end(prefix.as_bytes());
        let mut from = prefix.as_bytes().to_vec();
        let mut all = Vec::new();
        loop {
            let body = json!({
                "key": BASE64.encode(&from),
                "range_end": BASE64.encode(&end),
                "limit": RANGE_PAGE.to_string(),
            });
            let a = self.call("/v3/kv/range", body).await?;
            let kvs = a.get("kvs").and_then(Value::as_array).cloned().unwrap_or_default();
            for kv in &kvs {
                let key = (kv.get("key").and_then(Value::as_str))
                    .and_then(|k| BASE64.decode(k).ok())
                    .and_then(|k| String::from_utf8(k).ok())
                    .ok_or_else(|| self.odd("kv/range", &a))?;
                let value = match kv.get("value").and_then(Value::as_str) {
                    None => Vec::new(),
                    Some(v) => BASE64.decode(v).map_err(|_| self.odd("kv/range", &a))?,
                };
                all.push((key, value));
            }
            let more = a.get("more").and_then(Value::as_bool).unwrap_or(false);
            match all.last() {
                Some((last, _)) if more && !kvs.is_empty() => {
                    from = last.as_bytes().to_vec();
                    from.push(0);
                }
                _ => return Ok(all),
            }
        }
    }

    /// Puts `puts` and deletes `deletes` (a key, or with `prefix` true every key under it) in
    /// one transaction, if `leader` still leads: whether it did.
    pub async fn txn_if_leading(
        &self,
        leader: &Leadership,
        puts: &[(String, Vec<u8>)],
        deletes: &[(String, bool)],
    ) -> Result<bool, String> {
        let mut ops: Vec<Value> = Vec::with_capacity(puts.len() + deletes.len());
        for (key, prefix) in deletes {
            let mut d = json!({ "key": BASE64.encode(key) });
            if *prefix {
                d["range_end"] = json!(BASE64.encode(prefix_end(key.as_bytes())));
            }
            ops.push(json!({ "request_delete_range": d }));
        }
        for (key, value) in puts {
            ops.push(json!({ "request_put": { "key": BASE64.encode(key), "value": BASE64.encode(value) } }));
        }
        let body = json!({
            "compare": [{
                "target": "CREATE",
                "result": "EQUAL",
                "key": BASE64.encode(&leader.key),
                "create_revision": leader.rev.to_string(),
            }],
            "success": ops,
        });
        let a = self.call("/v3/kv/txn", body).await?;
        Ok(a.get("succeeded").and_then(Value::as_bool).unwrap_or(false))
    }

    /// Explains an answer without what a call needs from it.
    fn odd(&self, what: &str, a: &Value) -> String {
        let mut text = a.to_string();
        text.truncate(200);
        format!("etcd {}: {what}: an unexpected answer: {text}", self.shown)
    }

    /// A call that answers at once: bounded to [`REQUEST_TIMEOUT`].
    async fn call(&self, path: &str, body: Value) -> Result<Value, String> {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.call_waiting(path, body)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => {
                self.move_on();
                Err(e)
            }
            Err(_) => {
                self.move_on();
                Err(format!(
                    "etcd {}{path}: no answer within {REQUEST_TIMEOUT:?}",
                    self.shown
                ))
            }
        }
    }

    /// The next call starts at the next endpoint.
    fn move_on(&self) {
        self.first.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether `leader`'s election key still exists as it was won (its creation revision):
    /// false once it was deleted, say by a campaign of this lease that etcd cancelled and
    /// resigned after a retry had found the key.
    pub async fn still_leads(&self, leader: &Leadership) -> Result<bool, String> {
        let a = self
            .call("/v3/kv/range", json!({ "key": BASE64.encode(&leader.key) }))
            .await?;
        let kv = a.get("kvs").and_then(Value::as_array).and_then(|k| k.first());
        Ok(kv.is_some_and(|kv| int(kv, "create_revision") == Some(leader.rev)))
    }

    /// Posts `body` to `path` at the first endpoint that takes a connection; the answer as JSON,
    /// or etcd's error (`{"error": ..., "code": ...}`) as text.
    async fn call_waiting(&self, path: &str, body: Value) -> Result<Value, String> {
        let mut why = Vec::new();
        let mut stream = None;
        let n = self.endpoints.len();
        let first = self.first.load(std::sync::atomic::Ordering::Relaxed);
        for host in (0..n).map(|k| &self.endpoints[(first + k) % n]) {
            match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(host.as_str())).await {
                Ok(Ok(s)) => {
                    stream = Some((host, s));
                    break;
                }
                Ok(Err(e)) => why.push(format!("{host}: {e}")),
                Err(_) => why.push(format!("{host}: no connection within {CONNECT_TIMEOUT:?}")),
            }
        }
        let Some((host, stream)) = stream else {
            return Err(format!("etcd {}: cannot connect ({})", self.shown, why.join("; ")));
        };
        let err = |e: &dyn std::fmt::Display| format!("etcd {host}{path}: {e}");
        let stream: Box<dyn crate::http::client::Stream> = match &self.tls {
            None => Box::new(stream),
            Some(config) => {
                let name = crate::http::tls::server_name(host)?;
                let connecting = tokio_rustls::TlsConnector::from(config.clone()).connect(name, stream);
                match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
                    Ok(Ok(s)) => Box::new(s),
                    Ok(Err(e)) => return Err(err(&format!("TLS: {e}"))),
                    Err(_) => return Err(err(&format!("no TLS handshake within {CONNECT_TIMEOUT:?}"))),
                }
            }
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| err(&e))?;
        tokio::spawn(conn);
        let req = hyper::Request::post(path)
            .header(hyper::header::HOST, host.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(hyper::body::Bytes::from(body.to_string())))
            .map_err(|e| err(&e))?;
        let answer = sender.send_request(req).await.map_err(|e| err(&e))?;
        let status = answer.status();
        let limited = http_body_util::Limited::new(answer.into_body(), ANSWER_LIMIT);
        let bytes = limited.collect().await.map_err(|e| err(&e))?.to_bytes();
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| err(&format!("not JSON ({e})")))?;
        // A streaming call's error comes inside `error`; a unary one's at the top.
        let failure = value
            .get("error")
            .filter(|e| !e.is_null())
            .map(|e| match e.get("message") {
                Some(m) => m.as_str().unwrap_or_default().to_string(),
                None => e.as_str().map_or_else(|| e.to_string(), str::to_string),
            });
        match failure {
            Some(m) => Err(err(&m)),
            None if !status.is_success() => Err(err(&format!("HTTP {status}"))),
            None => Ok(value),
        }
    }
}

/// Keys read per page of a range.
const RANGE_PAGE: usize = 1000;

/// The end of the range of keys that start with `prefix` (etcd's `range_end`): the prefix with
/// its last byte below 0xff incremented, the bytes after it dropped.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: to the end of the keys.
    vec![0]
}

/// A 64-bit integer field of a gateway answer: a decimal string, or a number.
fn int(v: &Value, field: &str) -> Option<i64> {
    match v.get(field)? {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_plain_http_host_ports() {
        let g = Gateway::new(&["http://127.0.0.1:2379".into(), "10.0.0.2:2379/".into()], None).unwrap();
        assert_eq!(g.endpoints, ["127.0.0.1:2379", "10.0.0.2:2379"]);
        assert!(Gateway::new(&[], None).unwrap_err().contains("no endpoints"));
        let e = Gateway::new(&["https://etcd:2379".into()], None).unwrap_err();
        assert!(e.contains("https://") && e.contains("--etcd-ca"), "{e}");
        let e = Gateway::new(&["unix://etcd".into()], None).unwrap_err();
        assert!(e.contains("not supported"), "{e}");
        assert!(Gateway::new(&["http://etcd:2379/v3".into()], None).is_err());
    }

    /// Debian's etcd on free loopback ports with its data in `dir` (None, where there is no
    /// etcd and the live tests are not required).
    fn etcd(dir: &std::path::Path) -> Option<(std::process::Child, String)> {
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (client, peer) = (free(), free());
        let (c, p) = (format!("http://127.0.0.1:{client}"), format!("http://127.0.0.1:{peer}"));
        let child = std::process::Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
            .args(["--listen-peer-urls", &p, "--initial-advertise-peer-urls", &p])
            .args(["--initial-cluster", &format!("t={p}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if std::env::var_os("TEAMSTER_REQUIRE_LIVE").is_none() => {
                eprintln!("skipped: no etcd ({e})");
                return None;
            }
            Err(e) => panic!("etcd: {e}"),
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            assert!(std::time::Instant::now() < deadline, "etcd did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some((child, c))
    }

    /// Against a real etcd: a lease is granted and kept alive, the first campaigner leads, a
    /// leader writes and reads back, and one whose election key is gone (deposed) cannot write,
    /// while the campaigner that waited then leads and can.
    #[tokio::test]
    async fn a_deposed_leader_cannot_write_and_the_next_one_leads() {
        let dir = tempfile::tempdir().unwrap();
        let Some((mut child, url)) = etcd(dir.path()) else {
            return;
        };
        let g = Gateway::new(&[url], None).unwrap();
        let (a, b) = (g.lease_grant(10).await.unwrap(), g.lease_grant(10).await.unwrap());
        assert!(g.lease_keep_alive(a).await.unwrap() > 0);
        let first = g.campaign("t/leader", "a", a).await.unwrap();
        assert_eq!(first.lease, a);
        assert_eq!(g.get("t/state").await.unwrap(), None);
        assert!(g
            .txn_if_leading(&first, &[("t/state".into(), b"one".to_vec())], &[])
            .await
            .unwrap());
        assert_eq!(g.get("t/state").await.unwrap().as_deref(), Some(&b"one"[..]));
        let waiting = tokio::spawn({
            let g = g.clone();
            async move { g.campaign("t/leader", "b", b).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "b leads while a does");
        // a is deposed: its election key is gone (as when its lease lapses).
        g.call("/v3/kv/deleterange", json!({ "key": BASE64.encode(&first.key) }))
            .await
            .unwrap();
        let second = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_ne!(second.key, first.key);
        assert!(!g
            .txn_if_leading(&first, &[("t/state".into(), b"stale".to_vec())], &[])
            .await
            .unwrap());
        assert!(g
            .txn_if_leading(&second, &[("t/state".into(), b"two".to_vec())], &[])
            .await
            .unwrap());
        assert_eq!(g.get("t/state").await.unwrap().as_deref(), Some(&b"two"[..]));
        // Records: many puts and deletes in one transaction, read back a page at a time.
        let puts: Vec<(String, Vec<u8>)> = (0..2500).map(|i| (format!("t/r/k{i:05}"), vec![b'x'; 3])).collect();
        for chunk in puts.chunks(100) {
            assert!(g.txn_if_leading(&second, chunk, &[]).await.unwrap());
        }
        assert!(!g.txn_if_leading(&first, &puts[..1], &[]).await.unwrap(), "deposed");
        let read = g.range_prefix("t/r/").await.unwrap();
        assert_eq!(read, puts, "every record, in key order, across pages");
        let gone = [("t/r/k00000".to_string(), false), ("t/r/k01".to_string(), true)];
        assert!(g.txn_if_leading(&second, &[], &gone).await.unwrap());
        assert_eq!(g.range_prefix("t/r/").await.unwrap().len(), 2500 - 1 - 1000);
        assert!(g.range_prefix("t/none/").await.unwrap().is_empty());
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b");
        let _ = child.kill();
        let _ = child.wait();
        let e = g.get("t/state").await.unwrap_err();
        assert!(e.contains("cannot connect"), "{e}");
    }

    #[test]
    fn integers_come_as_strings_or_numbers() {
        let v = json!({ "a": "42", "b": 7, "c": "x" });
        assert_eq!(
            (int(&v, "a"), int(&v, "b"), int(&v, "c"), int(&v, "d")),
            (Some(42), Some(7), None, None)
        );
    }
}
