//! The asking side of the APIs: one HTTP/1.1 request to a Teamster API (the switch's or the
//! cluster controller's) over its unix socket, or over TCP with the bearer token, or over TLS
//! (`https://`, the controller's listener on the network; see [`super::tls`]) with the token
//! or a host's certificate. `teamster ctl`, the libvirt hook and the switch's agent of the
//! controller ask through it.

use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// Where `teamster run` puts its API socket unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/teamster/teamster.sock";

/// Which switch to talk to.
#[derive(Args, Clone, Debug)]
pub struct Target {
    /// The daemon's API socket.
    #[arg(long, default_value = DEFAULT_SOCKET, global = true)]
    pub socket: PathBuf,
    /// Talk to the API over TCP instead, e.g. http://127.0.0.1:9180, or over TLS to a
    /// controller on the network, e.g. https://10.0.0.1:9443 (with --ca).
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// A file holding the bearer token for --url (or set TEAMSTER_API_TOKEN).
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    /// For an https:// --url: the CA certificate (PEM) the controller's certificate must be
    /// signed by.
    #[arg(long, global = true)]
    pub ca: Option<PathBuf>,
    /// For an https:// --url: a client certificate (PEM) to present, with --key.
    #[arg(long, global = true, requires = "key")]
    pub cert: Option<PathBuf>,
    /// The private key of --cert (PEM; readable by its owner only).
    #[arg(long, global = true, requires = "cert")]
    pub key: Option<PathBuf>,
    /// The TLS configuration made of --ca, --cert and --key, once made (made at each request
    /// otherwise).
    #[arg(skip)]
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The local address TCP connections are made from (the system's choice if none): a load
    /// generator's simulated hosts each have their own.
    #[arg(skip)]
    pub source: Option<std::net::IpAddr>,
}

/// The TLS configuration of `args` for an https:// URL: trusting `ca`, presenting `cert` and
/// `key` if given. `None` for any other URL.
pub fn tls_config(args: &Target) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    if !args.url.as_deref().is_some_and(|u| u.starts_with("https://")) {
        return Ok(None);
    }
    let ca = args
        .ca
        .as_ref()
        .ok_or("an https:// URL needs the CA certificate (--ca, or `ca` in [controller])")?;
    tls_from_files(ca, args.cert.as_deref(), args.key.as_deref()).map(Some)
}

/// A client's TLS configuration trusting the CA certificate in file `ca`, presenting the
/// certificate in `cert` with the key in `key` (its owner's alone) if given.
pub fn tls_from_files(
    ca: &std::path::Path,
    cert: Option<&std::path::Path>,
    key: Option<&std::path::Path>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let cas = super::tls::read_certificates(ca, "CA certificate")?;
    let identity = match (cert, key) {
        (Some(c), Some(k)) => Some((
            super::tls::read_certificates(c, "certificate")?,
            super::tls::read_private_key(k, "key")?,
        )),
        (None, None) => None,
        _ => return Err("a client certificate needs both the certificate and its key".into()),
    };
    super::tls::client_config(&cas, identity)
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

/// `HOST:PORT` of an `http://HOST:PORT` or `https://HOST:PORT` URL.
pub fn host_port(url: &str) -> Result<String, String> {
    (url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")))
        .map(|h| h.trim_end_matches('/').to_string())
        .filter(|h| !h.is_empty() && !h.contains('/'))
        .ok_or_else(|| format!("--url {url}: expected http://HOST:PORT or https://HOST:PORT"))
}

/// A TCP connection to `address` (HOST:PORT, HOST an IP address) from local address `ip`.
async fn connect_from(ip: std::net::IpAddr, address: &str) -> std::io::Result<tokio::net::TcpStream> {
    let to: std::net::SocketAddr = (address.parse()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a source address needs an IP to connect to",
        )
    })?;
    let socket = match to {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.bind(std::net::SocketAddr::new(ip, 0))?;
    socket.connect(to).await
}

/// A connection to an API, whichever its transport.
pub trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static {}
impl<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> Stream for S {}

/// Connects to the API `args` names: its unix socket, its TCP address, or its TLS listener
/// (the handshake done, the controller's certificate checked against the CA for the URL's
/// host).
pub async fn connect(args: &Target) -> Result<Box<dyn Stream>, String> {
    let Some(url) = &args.url else {
        let stream = tokio::net::UnixStream::connect(&args.socket).await.map_err(|e| {
            format!(
                "cannot reach the API at {}: {e} (is `teamster run` or `teamster controller` running? --socket PATH)",
                args.socket.display()
            )
        })?;
        return Ok(Box::new(stream));
    };
    let address = host_port(url)?;
    let tls = match &args.tls {
        Some(t) => Some(t.clone()),
        None => tls_config(args)?,
    };
    let stream = match args.source {
        None => tokio::net::TcpStream::connect(&address).await,
        Some(ip) => connect_from(ip, &address).await,
    }
    .map_err(|e| format!("cannot reach {url}: {e}"))?;
    let Some(config) = tls else {
        return Ok(Box::new(stream));
    };
    let name = super::tls::server_name(&address)?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
        .map_err(|e| format!("{url}: TLS: {e}"))?;
    Ok(Box::new(stream))
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
    send(connect(args).await?, req).await
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
