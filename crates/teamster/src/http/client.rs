//! The asking side of the APIs: one HTTP/1.1 request to a Teamster API (the switch's or the
//! cluster controller's) over its unix socket, or over TCP with the bearer token. `teamster
//! ctl`, the libvirt hook and the switch's agent of the controller ask through it.

use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;
use std::path::PathBuf;

/// Where `teamster run` puts its API socket unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/teamster/teamster.sock";

/// Which switch to talk to.
#[derive(Args, Clone, Debug)]
pub struct Target {
    /// The daemon's API socket.
    #[arg(long, default_value = DEFAULT_SOCKET, global = true)]
    pub socket: PathBuf,
    /// Talk to the API over TCP instead, e.g. http://127.0.0.1:9180.
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// A file holding the bearer token for --url (or set TEAMSTER_API_TOKEN).
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
}

/// A name as one path segment of a URL: every byte but letters, digits and `-._~` escaped, so a
/// name holding `?`, `#`, `/` or `%` names that object and no other.
pub fn segment(name: &str) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const KEEP: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    utf8_percent_encode(name, KEEP).to_string()
}

/// An HTTP answer: status and body.
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// The bearer token for `--url`, from `--token-file` or `TEAMSTER_API_TOKEN`.
pub fn token(args: &Target) -> Result<Option<String>, String> {
    match (&args.url, &args.token_file) {
        (Some(_), Some(f)) => Ok(Some(
            std::fs::read_to_string(f)
                .map_err(|e| format!("--token-file {}: {e}", f.display()))?
                .trim()
                .to_string(),
        )),
        (Some(_), None) => Ok(std::env::var("TEAMSTER_API_TOKEN").ok()),
        _ => Ok(None),
    }
}

/// Adds the bearer token to a request, when talking TCP.
pub fn authorise(args: &Target, mut req: hyper::Request<Full<Bytes>>) -> Result<hyper::Request<Full<Bytes>>, String> {
    if let Some(t) = token(args)? {
        let value = format!("Bearer {t}")
            .parse()
            .map_err(|_| "the token is not a valid header value".to_string())?;
        req.headers_mut().insert("authorization", value);
    }
    Ok(req)
}

/// `HOST:PORT` of an `http://HOST:PORT` URL.
pub fn host_port(url: &str) -> Result<String, String> {
    url.strip_prefix("http://")
        .map(|h| h.trim_end_matches('/').to_string())
        .ok_or_else(|| format!("--url {url}: expected http://HOST:PORT"))
}

/// Sends one request to the API over the unix socket or TCP.
pub async fn request(args: &Target, method: &str, path: &str, body: Option<Value>) -> Result<Answer, String> {
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "teamster");
    let payload = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Bytes::from(v.to_string())
        }
        None => Bytes::new(),
    };
    let req = authorise(args, req.body(Full::new(payload)).map_err(|e| e.to_string())?)?;
    match &args.url {
        Some(url) => {
            let stream = tokio::net::TcpStream::connect(host_port(url)?)
                .await
                .map_err(|e| format!("cannot reach {url}: {e}"))?;
            send(stream, req).await
        }
        None => {
            let stream = tokio::net::UnixStream::connect(&args.socket).await.map_err(|e| {
                format!(
                    "cannot reach the API at {}: {e} (is `teamster run` or `teamster controller` running? --socket PATH)",
                    args.socket.display()
                )
            })?;
            send(stream, req).await
        }
    }
}

/// One HTTP/1.1 exchange over `stream`.
pub async fn send<S>(stream: S, req: hyper::Request<Full<Bytes>>) -> Result<Answer, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| format!("API handshake: {e}"))?;
    tokio::spawn(conn);
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| format!("API request: {e}"))?;
    let status = res.status().as_u16();
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("API answer: {e}"))?
        .to_bytes();
    Ok(Answer { status, body })
}
