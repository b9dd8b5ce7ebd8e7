//! `teamster controller ca`: the cluster's certificate authority, which makes the certificates
//! of [`crate::http::tls`]'s model: a server's for each controller (and etcd), a host's for each
//! host, a client's for other clients (a controller of etcd).
//!
//! The CA is a directory (made 0700 where missing, checked as the state's is): `ca.pem`, its
//! certificate, and `ca.key`, its key (0600). Each certificate issued is written beside it, or
//! to `--out`, as `KIND-NAME.pem` and `KIND-NAME.key` (0600). Nothing is ever overwritten: a
//! file that exists already is an error that names it, and nothing is written. Keys are ECDSA
//! P-256, made by ring; no key is ever printed.
//!
//! Why a CA in the binary: a cluster's operator should not need OpenSSL's command line to run
//! a TLS cluster, and the host certificates' form (one DNS name under `host.teamster`, client
//! usage only) is easy to get wrong by hand. A CA made elsewhere works as well (see
//! docs/cluster.md for the `openssl` commands); this one only issues from its own.
//!
//! rcgen writes certificates but does not read them (without a parser this crate does not
//! need): the CA's issuer is remade from its fixed name and its key, and every certificate
//! issued is checked with rustls's own verifier against `ca.pem` before it is written, so a
//! `ca.pem` that is not this key's refuses to issue rather than issue what nothing accepts.

use crate::http::tls;
use crate::live::safe_file::{self, TrustedDir};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, UnixTime};
use std::path::PathBuf;
use std::time::Duration;

/// The CA's subject name.
const CA_NAME: &str = "Teamster cluster CA";
/// The most days a certificate may be valid for.
const MAX_DAYS: u32 = 36500;

#[derive(clap::Args, Debug)]
pub struct CaArgs {
    #[command(subcommand)]
    command: CaCommand,
}

#[derive(clap::Subcommand, Debug)]
enum CaCommand {
    /// Make the CA: DIR/ca.pem and DIR/ca.key (0600).
    Init {
        #[command(flatten)]
        ca: CaDir,
        /// Days the CA is valid for.
        #[arg(long, default_value_t = 3650, value_parser = clap::value_parser!(u32).range(1..=MAX_DAYS as i64))]
        days: u32,
    },
    /// Issue host NAME's certificate: it proves the host is NAME, and nothing else (host-NAME.pem,
    /// host-NAME.key).
    IssueHost {
        /// The host's name: one lowercase DNS label, as its `[controller] host`.
        name: String,
        #[command(flatten)]
        out: Issue,
    },
    /// Issue a server certificate (a controller's listener, etcd) for the addresses and DNS
    /// names its clients reach it at (server-NAME.pem, server-NAME.key).
    IssueServer {
        /// A name for the files and the certificate's subject.
        name: String,
        /// An IP address or DNS name clients connect to (repeat for each).
        #[arg(long = "address", required = true)]
        addresses: Vec<String>,
        #[command(flatten)]
        out: Issue,
    },
    /// Issue a client certificate that proves no host (a controller's for etcd; client-NAME.pem,
    /// client-NAME.key).
    IssueClient {
        name: String,
        #[command(flatten)]
        out: Issue,
    },
}

#[derive(clap::Args, Debug)]
struct CaDir {
    /// The CA's directory.
    #[arg(long)]
    dir: PathBuf,
}

#[derive(clap::Args, Debug)]
struct Issue {
    #[command(flatten)]
    ca: CaDir,
    /// Where to write the certificate and key (default: the CA's directory).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Days the certificate is valid for.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=MAX_DAYS as i64))]
    days: u32,
}

/// What a certificate is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A host's: proves it is this host.
    Host,
    /// A server's, for these addresses and DNS names.
    Server(Vec<String>),
    /// A client's that proves no host.
    Client,
}

impl Kind {
    fn prefix(&self) -> &'static str {
        match self {
            Kind::Host => "host",
            Kind::Server(_) => "server",
            Kind::Client => "client",
        }
    }
}

/// A certificate and its key, in PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The CA: its certificate and its key.
pub struct Authority {
    cert: CertificateDer<'static>,
    key: KeyPair,
}

/// The CA's parameters: the same at `init` and at every issue (the issuer is remade from them).
fn ca_params(validity: (time::OffsetDateTime, time::OffsetDateTime)) -> Result<CertificateParams, String> {
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, CA_NAME);
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    (p.not_before, p.not_after) = validity;
    Ok(p)
}

/// From now, less an hour (clocks differ a little), to `days` from now.
pub fn validity(days: u32) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (
        now - time::Duration::hours(1),
        now + time::Duration::days(i64::from(days)),
    )
}

/// A fresh random serial number (20 bytes of which the first is positive, as X.509 wants).
fn serial() -> Result<SerialNumber, String> {
    let mut bytes = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| "no randomness for a serial number".to_string())?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

impl Authority {
    /// A new CA valid over `validity`.
    pub fn new(validity: (time::OffsetDateTime, time::OffsetDateTime)) -> Result<(Authority, Issued), String> {
        let key = KeyPair::generate().map_err(|e| format!("a key: {e}"))?;
        let mut params = ca_params(validity)?;
        params.serial_number = Some(serial()?);
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("the CA's certificate: {e}"))?;
        let issued = Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        Ok((
            Authority {
                cert: cert.der().clone(),
                key,
            },
            issued,
        ))
    }

    /// The CA of `cert_pem` and `key_pem`.
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Authority, String> {
        let cert = tls::certificates(cert_pem)?.remove(0);
        let key = KeyPair::from_pem(key_pem).map_err(|_| "ca.key: not a usable PEM private key".to_string())?;
        Ok(Authority { cert, key })
    }

    /// The CA kept in directory `dir`: `ca.pem` (its first certificate) and `ca.key` (its
    /// owner's alone).
    pub fn open(dir: &std::path::Path) -> Result<Authority, String> {
        let cert = tls::read_certificates(&dir.join("ca.pem"), "CA certificate")?.remove(0);
        let key = safe_file::read_private(&dir.join("ca.key"), "CA key")?;
        let key = KeyPair::from_pem(&key).map_err(|_| "ca.key: not a usable PEM private key".to_string())?;
        Ok(Authority { cert, key })
    }

    /// The CA's certificate.
    pub fn certificate(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// Issues `kind`'s certificate for `name`, valid over `validity`, checked against the CA's
    /// certificate before it is returned (see the module documentation).
    pub fn issue(
        &self,
        kind: &Kind,
        name: &str,
        validity: (time::OffsetDateTime, time::OffsetDateTime),
    ) -> Result<Issued, String> {
        let sans = match kind {
            Kind::Host => vec![tls::host_label(name)?],
            Kind::Server(a) if a.is_empty() => return Err("a server certificate needs an --address".into()),
            Kind::Server(a) => {
                if let Some(h) = a
                    .iter()
                    .find(|n| n.to_ascii_lowercase().trim_end_matches('.').ends_with(tls::HOST_DOMAIN))
                {
                    return Err(format!(
                        "--address {h}: names under {} are hosts' identities",
                        tls::HOST_DOMAIN
                    ));
                }
                a.clone()
            }
            Kind::Client => Vec::new(),
        };
        teamster_core::host::check_name("name", name)?;
        let mut params = CertificateParams::new(sans.clone())
            .map_err(|e| format!("{}: not an address or DNS name: {e}", sans.join(", ")))?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.serial_number = Some(serial()?);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // A server's may act as a client too: etcd's JSON gateway presents etcd's own
        // certificate when it calls etcd's gRPC server with client certificates required. It
        // still proves no host (no name under host.teamster: refused above).
        params.extended_key_usages = match kind {
            Kind::Server(_) => vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
            _ => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        (params.not_before, params.not_after) = validity;
        let key = KeyPair::generate().map_err(|e| format!("a key: {e}"))?;
        let issuer = Issuer::new(ca_params(validity)?, &self.key);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| format!("the certificate: {e}"))?;
        let now = UnixTime::now();
        // Checked at a moment inside the validity asked for (an expired one, for tests, too).
        let at = match validity.1 <= time::OffsetDateTime::now_utc() {
            true => UnixTime::since_unix_epoch(Duration::from_secs((validity.1.unix_timestamp() - 60).max(0) as u64)),
            false => now,
        };
        self.check(kind, cert.der(), &sans, at)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Checks `cert` with rustls's verifiers against this CA's certificate, as its peers will.
    fn check(&self, kind: &Kind, cert: &CertificateDer<'_>, sans: &[String], at: UnixTime) -> Result<(), String> {
        let refused = |e: rustls::Error| {
            format!("the certificate issued does not verify against ca.pem ({e}): is ca.key the key of ca.pem?")
        };
        let cas = [self.cert.clone()];
        match kind {
            Kind::Server(_) => {
                let name = tls::server_name(&format!("{}:1", bracket(&sans[0])))?;
                let v = tls::server_verifier(&cas)?;
                v.verify_server_cert(cert, &[], &name, &[], at).map_err(refused)?;
            }
            _ => {
                let v = tls::client_verifier(&cas)?;
                v.verify_client_cert(cert, &[], at).map_err(refused)?;
            }
        }
        Ok(())
    }
}

/// An IPv6 address in brackets, as it is written before a port.
fn bracket(address: &str) -> String {
    match address.contains(':') {
        true => format!("[{address}]"),
        false => address.to_string(),
    }
}

/// Runs `teamster controller ca ...`.
pub fn run(args: CaArgs) -> Result<(), String> {
    match args.command {
        CaCommand::Init { ca, days } => {
            let dir = TrustedDir::open_or_make(&ca.dir, "--dir", 0o700)?;
            refuse_existing(&dir, &["ca.pem", "ca.key"])?;
            let (_, issued) = Authority::new(validity(days))?;
            write(&dir, "ca", &issued)?;
            println!(
                "teamster controller ca: {}/ca.pem and ca.key (0600)",
                dir.path().display()
            );
            Ok(())
        }
        CaCommand::IssueHost { name, out } => issue(out, Kind::Host, &name),
        CaCommand::IssueServer { name, addresses, out } => issue(out, Kind::Server(addresses), &name),
        CaCommand::IssueClient { name, out } => issue(out, Kind::Client, &name),
    }
}

/// Issues `kind`'s certificate for `name` from the CA in `out.ca.dir`, written to `out.out`.
fn issue(out: Issue, kind: Kind, name: &str) -> Result<(), String> {
    let ca_dir = TrustedDir::open(&out.ca.dir, "--dir")?;
    let authority = Authority::open(ca_dir.path())?;
    let dir = match &out.out {
        Some(o) => TrustedDir::open_or_make(o, "--out", 0o700)?,
        None => ca_dir,
    };
    let base = format!("{}-{name}", kind.prefix());
    refuse_existing(&dir, &[&format!("{base}.pem"), &format!("{base}.key")])?;
    let issued = authority.issue(&kind, name, validity(out.days))?;
    write(&dir, &base, &issued)?;
    println!(
        "teamster controller ca: {}/{base}.pem and {base}.key (0600)",
        dir.path().display()
    );
    Ok(())
}

/// Refuses to go on if any of `names` exists in `dir` (nothing is overwritten).
fn refuse_existing(dir: &TrustedDir, names: &[&str]) -> Result<(), String> {
    for n in names {
        if dir.exists(std::ffi::OsStr::new(n)) {
            return Err(format!(
                "{}/{n} exists already; not overwriting it (remove it first to make a new one)",
                dir.path().display()
            ));
        }
    }
    Ok(())
}

/// Writes `base.key` (0600) and then `base.pem` (0644) into `dir`, each only where nothing of
/// its name is (even one made since [`refuse_existing`] looked); if the certificate cannot be
/// written, the key written for it is removed, so that nothing half-issued is left.
fn write(dir: &TrustedDir, base: &str, issued: &Issued) -> Result<(), String> {
    let (key, pem) = (format!("{base}.key"), format!("{base}.pem"));
    let shown = |name: &str, e: std::io::Error| format!("{}/{name}: {e}; nothing written", dir.path().display());
    let os = std::ffi::OsStr::new;
    dir.create_new(os(&key), issued.key_pem.as_bytes(), 0o600)
        .map_err(|e| shown(&key, e))?;
    if let Err(e) = dir.create_new(os(&pem), issued.cert_pem.as_bytes(), 0o644) {
        let _ = dir.remove(os(&key));
        return Err(shown(&pem, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca() -> Authority {
        Authority::new(validity(30)).unwrap().0
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        tls::certificates(pem).unwrap().remove(0)
    }

    #[test]
    fn a_host_certificate_proves_its_host_and_no_other() {
        let ca = ca();
        let h1 = ca.issue(&Kind::Host, "host1", validity(1)).unwrap();
        assert!(tls::certifies_host(&der(&h1.cert_pem), "host1"));
        for other in ["host2", "host", "host1x", "Host1", "xhost1"] {
            assert!(!tls::certifies_host(&der(&h1.cert_pem), other), "{other}");
        }
        // A client certificate, and a server certificate, prove no host.
        let c = ca.issue(&Kind::Client, "host1", validity(1)).unwrap();
        assert!(!tls::certifies_host(&der(&c.cert_pem), "host1"));
        let s = ca
            .issue(&Kind::Server(vec!["10.0.0.1".into()]), "s", validity(1))
            .unwrap();
        assert!(!tls::certifies_host(&der(&s.cert_pem), "host1"));
        let e = ca
            .issue(&Kind::Server(vec!["host1.Host.Teamster.".into()]), "s", validity(1))
            .err()
            .unwrap();
        assert!(e.contains("hosts' identities"), "{e}");
        // Host names that cannot be proven are refused at issue.
        assert!(ca.issue(&Kind::Host, "Host_1", validity(1)).is_err());
    }

    #[test]
    fn a_wildcard_certificate_proves_no_host() {
        // Made by hand, as an operator's own tools could: a client certificate for every host.
        let ca = ca();
        let mut p = CertificateParams::new(vec!["*.host.teamster".to_string()]).unwrap();
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let w = p
            .signed_by(&key, &Issuer::new(ca_params(validity(30)).unwrap(), &ca.key))
            .unwrap();
        let v = tls::client_verifier(&[ca.certificate().clone()]).unwrap();
        assert!(
            v.verify_client_cert(w.der(), &[], UnixTime::now()).is_ok(),
            "the CA signed it"
        );
        let ee = webpki::EndEntityCert::try_from(w.der()).unwrap();
        let name = rustls::pki_types::ServerName::try_from("host1.host.teamster").unwrap();
        assert!(
            ee.verify_is_valid_for_subject_name(&name).is_ok(),
            "webpki takes the wildcard"
        );
        assert!(!tls::certifies_host(w.der(), "host1"), "the probe refuses it");
    }

    #[test]
    fn a_ca_whose_key_is_not_its_certificates_refuses_to_issue() {
        let (_, a) = Authority::new(validity(30)).unwrap();
        let (_, b) = Authority::new(validity(30)).unwrap();
        let mixed = Authority::load(&a.cert_pem, &b.key_pem).unwrap();
        let e = mixed.issue(&Kind::Host, "host1", validity(1)).err().unwrap();
        assert!(e.contains("is ca.key the key of ca.pem"), "{e}");
        assert!(Authority::load(&a.cert_pem, "junk").is_err());
    }

    #[test]
    fn a_foreign_or_expired_certificate_does_not_verify() {
        let ours = ca();
        let theirs = ca();
        let foreign = theirs.issue(&Kind::Host, "host1", validity(1)).unwrap();
        let v = tls::client_verifier(&[ours.certificate().clone()]).unwrap();
        assert!(v
            .verify_client_cert(&der(&foreign.cert_pem), &[], UnixTime::now())
            .is_err());
        let now = time::OffsetDateTime::now_utc();
        let old = (now - time::Duration::days(10), now - time::Duration::days(1));
        let expired = ours.issue(&Kind::Host, "host1", old).unwrap();
        let e = v
            .verify_client_cert(&der(&expired.cert_pem), &[], UnixTime::now())
            .unwrap_err();
        assert!(e.to_string().to_lowercase().contains("expired"), "{e}");
    }
}
