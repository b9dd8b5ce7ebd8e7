//! Who may do what on the controller's API.
//!
//! The model. There are two roles:
//! - a *host* registers its shape, reports, and offers its VMs for adoption, each only as
//!   itself: `PUT /api/v1/hosts/{name}`, `POST /api/v1/hosts/{name}/report` and
//!   `.../adopt`;
//! - an *operator* (a person or automation) does everything else: powers VMs on and off,
//!   changes them, sets quotas, deletes hosts, reads the cluster, its metrics and its OpenAPI.
//!
//! Which listener a request came in on decides how its role is proven ([`Access`]):
//! - the unix socket (0600): its owner is root or the controller's user, and may do anything;
//! - loopback TCP with the bearer token (the single machine's default): the token grants both
//!   roles, as it always has;
//! - TLS on any address: a host proves its name with its certificate
//!   ([`crate::http::tls::certifies_host`]), and an operator with the bearer token. A request
//!   for a host's resource with no certificate is a 401; with another host's, or a client
//!   certificate that names no host, a 403 that changes nothing. A certificate grants no
//!   operator's request (403), and the token no host's: a stolen host's key cannot power a VM
//!   on, and the operator's token cannot report a host's links down.
//!
//! A host on the deny list (`--deny-hosts`, names one per line: a host whose key is lost or
//! whose machine is compromised) is refused as if its certificate were foreign: 403, until
//! the operator takes it off the list.

use crate::http::admission::Standing;
use crate::http::auth;
use crate::http::error::ApiError;
use crate::http::tls::{certifies_host, Presented};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::BTreeSet;
use std::sync::Arc;

/// How the requests of one listener prove their role (see the module documentation).
#[derive(Clone)]
pub enum Access {
    /// The unix socket: any request.
    Owner,
    /// Loopback TCP: the token grants any request.
    Token(Arc<String>),
    /// TLS: hosts by certificate, operators by token.
    Tls { token: Arc<String>, denied: Denied },
}

/// Hosts refused whatever they present, by name.
#[derive(Clone, Debug, Default)]
pub struct Denied(pub Arc<BTreeSet<String>>);

impl Denied {
    /// Reads a deny list: a host name per line; blank lines and `#` comments are skipped.
    pub fn parse(text: &str) -> Result<Denied, String> {
        let mut names = BTreeSet::new();
        for (i, line) in text.lines().enumerate() {
            let name = line.split('#').next().unwrap_or("").trim();
            if name.is_empty() {
                continue;
            }
            crate::identity::host_label(name).map_err(|e| format!("line {}: {e}", i + 1))?;
            names.insert(name.to_string());
        }
        Ok(Denied(Arc::new(names)))
    }
}

/// Lets a host's request through only with a certificate that proves the host is the one the
/// path names, and is not denied.
pub async fn require_host(
    State(denied): State<Denied>,
    Path(name): Path<String>,
    req: Request,
    next: Next,
) -> Response {
    let presented = req.extensions().get::<Presented>().and_then(|p| p.0.clone());
    let Some(cert) = presented else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            format!("host `{name}`: a host's request needs its certificate (teamster controller ca issue-host)"),
        );
    };
    if !certifies_host(&cert, &name) {
        return refuse(
            StatusCode::FORBIDDEN,
            format!("host `{name}`: the certificate presented is not this host's; nothing changed"),
        );
    }
    if denied.0.contains(&name) {
        return refuse(
            StatusCode::FORBIDDEN,
            format!("host `{name}`: on the controller's deny list; nothing changed"),
        );
    }
    if let Some(standing) = req.extensions().get::<Arc<Standing>>() {
        standing.prove();
    }
    next.run(req).await
}

/// A refusal that also closes its connection: a client refused holds no slot of the
/// listener's (see [`crate::http::admission`]).
fn refuse(status: StatusCode, message: String) -> Response {
    let mut r = ApiError(status, message).into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Lets an operator's request through only with the bearer token; a host's certificate alone
/// is a 403, anything else a 401.
pub async fn require_operator(State(token): State<Arc<String>>, req: Request, next: Next) -> Response {
    let certified = req.extensions().get::<Presented>().is_some_and(|p| p.0.is_some());
    if certified && !auth::presents(&req, &token) {
        return refuse(
            StatusCode::FORBIDDEN,
            "a host's certificate grants no operator's request: present the operator's bearer token".into(),
        );
    }
    auth::require_token(State(token), req, next).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deny_list_is_names_with_comments() {
        let d = Denied::parse("# lost keys\nhost3\n\n  host7  # stolen 2026-11-27\n").unwrap();
        assert_eq!(d.0.iter().collect::<Vec<_>>(), ["host3", "host7"]);
        assert!(Denied::parse("ok\nbad/name\n").unwrap_err().contains("line 2"));
        assert!(
            Denied::parse("Host1\n").is_err(),
            "a name no certificate can prove never matches"
        );
    }
}
