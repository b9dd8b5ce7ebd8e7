//! The TCP listener's bearer token: every request must present it, in the `Authorization:
//! Bearer <token>` header or, for a browser's page and event stream, as a `token` query
//! parameter.
//!
//! The header's value is compared byte for byte, so a token with any UTF-8 characters works.
//! The query parameter is decoded as a browser encodes it (`application/x-www-form-urlencoded`,
//! what `URLSearchParams` reads and `encodeURIComponent` writes): `%XX` is a byte, `+` a space;
//! so a token containing `+`, `%`, `&`, `=`, `/`, spaces or non-ASCII letters is given
//! percent-encoded. The comparison takes the same time wherever the first difference is. A
//! missing or wrong token is a 401, and its connection is closed; the right one marks the
//! connection proven (see [`super::admission`]).

use super::admission::Standing;
use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode;
use std::sync::Arc;

/// The token a request presents: the Authorization header's, else the first `token` query
/// parameter's, decoded (see the module documentation).
fn presented(req: &Request) -> Option<Vec<u8>> {
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    if let Some(h) = header {
        return Some(h.to_vec());
    }
    req.uri().query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (form_decode(key) == b"token").then(|| form_decode(value))
    })
}

/// Decodes one `application/x-www-form-urlencoded` component: `+` is a space, `%XX` a byte.
fn form_decode(s: &str) -> Vec<u8> {
    let spaced = s.replace('+', " ");
    percent_decode(spaced.as_bytes()).collect()
}

/// Whether `given` is `token`, in time independent of where they first differ.
fn same(given: &[u8], token: &[u8]) -> bool {
    given.len() == token.len() && given.iter().zip(token).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Whether `req` presents `token` (a token of none is never presented).
pub fn presents(req: &Request, token: &str) -> bool {
    !token.is_empty() && same(&presented(req).unwrap_or_default(), token.as_bytes())
}

/// Refuses a request that does not present the token (see the module documentation).
pub async fn require_token(State(token): State<Arc<String>>, req: Request, next: Next) -> Response {
    if presents(&req, &token) {
        if let Some(standing) = req.extensions().get::<Arc<Standing>>() {
            standing.prove();
        }
        next.run(req).await
    } else {
        let mut r = ApiError(StatusCode::UNAUTHORIZED, "missing or wrong bearer token".into()).into_response();
        let headers = r.headers_mut();
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

    const TOKEN: &str = "a+b%20c&d=e/f g ü 東京 0123456789";

    fn request(uri: &str, auth: Option<&[u8]>) -> Request {
        let mut r = Request::builder().uri(uri);
        if let Some(a) = auth {
            r = r.header(header::AUTHORIZATION, HeaderValue::from_bytes(a).unwrap());
        }
        r.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn a_token_with_any_characters_is_read_back_from_the_query_and_the_header() {
        // As the dashboard sends it: encodeURIComponent, which leaves fewer characters alone
        // than NON_ALPHANUMERIC; both decode the same.
        let encoded = utf8_percent_encode(TOKEN, NON_ALPHANUMERIC).to_string();
        let got = presented(&request(&format!("/api/v1/stream?x=1&token={encoded}&y=2"), None));
        assert_eq!(got.as_deref(), Some(TOKEN.as_bytes()));
        // A space may also come as `+` (a form's encoding, and what URLSearchParams writes).
        let got = presented(&request("/?token=one+two%2Bthree", None));
        assert_eq!(got.as_deref(), Some(&b"one two+three"[..]));
        // Unencoded, `&` ends the parameter and `+` is a space: not the token.
        let raw = presented(&request("/?token=a+b%20c&d=e/f", None)).unwrap();
        assert!(!same(&raw, TOKEN.as_bytes()));
        // The header carries it verbatim, UTF-8 included, and wins over the query.
        let bearer = format!("Bearer {TOKEN}");
        let got = presented(&request("/?token=other", Some(bearer.as_bytes())));
        assert_eq!(got.as_deref(), Some(TOKEN.as_bytes()));
        assert_eq!(presented(&request("/?tokens=x&token", None)), None);
        assert_eq!(presented(&request("/", None)), None);
    }

    #[test]
    fn the_comparison_is_exact() {
        assert!(same(b"0123456789abcdef", b"0123456789abcdef"));
        assert!(!same(b"0123456789abcdeF", b"0123456789abcdef"));
        assert!(!same(b"0123456789abcde", b"0123456789abcdef"));
        assert!(!same(b"", b"x"));
    }
}
