//! TLS for the controller's API, its hosts and its etcd: rustls with ring's cryptography (no
//! OpenSSL, nothing but Rust and a C compiler to build).
//!
//! The model. One certificate authority, the cluster's, signs three kinds of certificate:
//! - a *server* certificate (extended key usage serverAuth) for each controller's listener and
//!   for etcd, naming the addresses clients reach them at;
//! - a *host* certificate (clientAuth) for each host, whose one DNS subject-alternative name is
//!   `NAME.host.teamster`: it proves the host is `NAME`, and nothing else;
//! - a *client* certificate (clientAuth, no host name) for other clients of the CA's servers,
//!   such as a controller connecting to etcd: it proves no host's identity.
//!
//! A host's identity is therefore checked as rustls checks a server's name, with webpki, against
//! `NAME.host.teamster` ([`certifies_host`]). So that the check is exact, a host that speaks
//! TLS has a name that is one lowercase DNS label ([`host_label`]: DNS names compare without
//! case), and a certificate that would also be valid for a name no host may have (a wildcard,
//! `*.host.teamster`) proves nothing. Operators do not hold certificates: they present the
//! bearer token, a separate credential with its own role.

use crate::identity::NO_HOST;
pub use crate::identity::{host_label, HOST_DOMAIN};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;

/// Sessions a TLS listener remembers for resumption without tickets (a cluster's hosts).
const SESSIONS_KEPT: usize = 4096;
/// The largest certificate file read (a chain of a few certificates is a few KiB).
const PEM_MAX: u64 = 256 * 1024;

/// ring's cryptography, for every configuration made here (so that no process-wide default
/// need be installed, and nothing else can be picked up).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads the PEM certificates of file `path` (public: any mode), `what` naming it in errors.
pub fn read_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    use std::io::Read;
    let shown = path.display();
    let f = std::fs::File::open(path).map_err(|e| format!("{what} {shown}: {e}"))?;
    let mut text = String::new();
    f.take(PEM_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{what} {shown}: {e}"))?;
    if text.len() as u64 > PEM_MAX {
        return Err(format!("{what} {shown}: longer than {PEM_MAX} bytes"));
    }
    certificates(&text).map_err(|e| format!("{what} {shown}: {e}"))
}

/// Reads the PEM private key of file `path`, which must be its owner's alone (see
/// [`crate::live::safe_file::read_private`]); `what` names it in errors, which never echo it.
pub fn read_private_key(path: &Path, what: &str) -> Result<PrivateKeyDer<'static>, String> {
    let text = crate::live::safe_file::read_private(path, what)?;
    private_key(&text).map_err(|e| format!("{what} {}: {e}", path.display()))
}

/// The certificates of PEM text, in order; at least one.
pub fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate: {e}"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(certs)
}

/// The private key of PEM text (PKCS#8, SEC1 or PKCS#1). The text is never echoed in errors.
pub fn private_key(pem: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|_| "holds no PEM private key".to_string())
}

/// A store of the CA certificates `cas` as trust roots.
fn roots(cas: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>, String> {
    let mut store = RootCertStore::empty();
    for c in cas {
        store
            .add(c.clone())
            .map_err(|e| format!("not a usable CA certificate: {e}"))?;
    }
    Ok(Arc::new(store))
}

/// TLS handshakes the listeners did not complete (refused, failed or too slow), since start.
pub static HANDSHAKES_FAILED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The certificate a TLS client presented, verified in the handshake (its chain signed by a
/// client CA, valid now, for clients), or none; in every request of a TLS connection.
#[derive(Debug, Clone)]
pub struct Presented(pub Option<Arc<CertificateDer<'static>>>);

impl Presented {
    /// What `connection` presented.
    pub fn of(connection: &rustls::ServerConnection) -> Presented {
        let first = connection.peer_certificates().and_then(|c| c.first());
        Presented(first.map(|c| Arc::new(c.clone().into_owned())))
    }
}

/// A listener's configuration: it presents `chain` (its certificate first) with `key`; a
/// client may present a certificate signed by one of `client_cas` (then checked, and refused in
/// the handshake if it is not valid: expired, foreign, not for clients) or none (then it must
/// prove itself otherwise, with the token).
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_cas: &[CertificateDer<'static>],
) -> Result<Arc<ServerConfig>, String> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(client_cas)?, provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| format!("client CA: {e}"))?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Hosts connect anew for each report: resumed sessions spare both sides the full
    // handshake's signatures and certificate checks (the client certificate verified in the
    // full handshake is carried in the ticket). Tickets are sealed with keys rotated every
    // few hours and kept in memory only.
    config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| format!("TLS tickets: {e}"))?;
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSIONS_KEPT);
    Ok(Arc::new(config))
}

/// A verifier of clients' certificates signed by one of `cas` (one must be presented).
pub fn client_verifier(cas: &[CertificateDer<'static>]) -> Result<Arc<dyn ClientCertVerifier>, String> {
    WebPkiClientVerifier::builder_with_provider(roots(cas)?, provider())
        .build()
        .map_err(|e| format!("client CA: {e}"))
}

/// A verifier of servers' certificates signed by one of `cas`.
pub fn server_verifier(cas: &[CertificateDer<'static>]) -> Result<Arc<WebPkiServerVerifier>, String> {
    WebPkiServerVerifier::builder_with_provider(roots(cas)?, provider())
        .build()
        .map_err(|e| format!("CA: {e}"))
}

/// A client's configuration: it trusts servers whose certificates `cas` signed, and presents
/// `identity` (a chain and its key) when given.
pub fn client_config(
    cas: &[CertificateDer<'static>],
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<Arc<ClientConfig>, String> {
    let verifier = server_verifier(cas)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_webpki_verifier(verifier);
    let mut config = match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("the client certificate and key: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The name a client checks a server's certificate against: the host of `HOST:PORT` (an IP
/// address, possibly in brackets, or a DNS name).
pub fn server_name(host_port: &str) -> Result<ServerName<'static>, String> {
    let host = match host_port.rsplit_once(':') {
        Some((h, port)) if port.parse::<u16>().is_ok() => h,
        _ => return Err(format!("{host_port}: expected HOST:PORT")),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|_| format!("{host_port}: `{host}` is not a DNS name or IP address"))
}

/// Whether `cert` (already verified as signed by the cluster's CA for clients) proves that
/// its holder is host `name`: valid for `name`'s DNS name under [`HOST_DOMAIN`], and not for a
/// name no host may have (so not a wildcard).
pub fn certifies_host(cert: &CertificateDer<'_>, name: &str) -> bool {
    let Ok(wanted) = host_label(name) else { return false };
    let probe = format!("{NO_HOST}.{HOST_DOMAIN}");
    let Ok(ee) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    let valid =
        |n: &str| ServerName::try_from(n.to_string()).is_ok_and(|sn| ee.verify_is_valid_for_subject_name(&sn).is_ok());
    valid(&wanted) && !valid(&probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_host_and_port() {
        assert!(matches!(server_name("10.0.0.1:7443"), Ok(ServerName::IpAddress(_))));
        assert!(matches!(server_name("[::1]:7443"), Ok(ServerName::IpAddress(_))));
        assert!(matches!(server_name("ctl.example:7443"), Ok(ServerName::DnsName(_))));
        assert!(server_name("ctl.example").is_err());
        assert!(server_name("bad name:1").is_err());
    }

    #[test]
    fn pem_errors_name_the_problem_and_never_the_key() {
        assert!(certificates("").unwrap_err().contains("no PEM certificate"));
        let e = private_key("SECRET-NOT-A-KEY").unwrap_err();
        assert!(!e.contains("SECRET"), "{e}");
    }
}
