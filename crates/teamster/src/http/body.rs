//! Request bodies: a JSON object of at most [`BODY_LIMIT`] bytes (or what an endpoint sets, as
//! the libvirt hook's, which lists every port of a domain), received within [`BODY_TIMEOUT`] of
//! the request head.
//!
//! Each refusal is `{"error": ...}` with its own status: 415 when the content type is not JSON
//! (`application/json` or a `+json` type); 413 when the body is over the cap, by its
//! Content-Length or as it arrives; 408 when it does not arrive in time; 400 when it is not JSON
//! at all; 422 when it is JSON but not an object (an array, a string, a number, null: serde
//! would otherwise take an array as a struct's fields in order) or an object with a bad field,
//! named by its path.

use super::error::ApiError;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use std::time::Duration;

/// The largest body accepted, in bytes (a change is a few dozen).
pub const BODY_LIMIT: usize = 64 * 1024;
/// Time allowed for a body to arrive once its request head has.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// A JSON object body of at most `LIMIT` bytes, parsed into `T` under the rules of the module
/// documentation.
pub struct Body<T, const LIMIT: usize = BODY_LIMIT>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned, const LIMIT: usize> FromRequest<S> for Body<T, LIMIT> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, ApiError> {
        json_content_type(&req)?;
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > LIMIT as u64) {
            return Err(too_large(LIMIT));
        }
        let read = Limited::new(req.into_body(), LIMIT).collect();
        let bytes = match tokio::time::timeout(BODY_TIMEOUT, read).await {
            Err(_) => {
                return Err(ApiError(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("the body did not arrive within {} s", BODY_TIMEOUT.as_secs()),
                ))
            }
            Ok(Err(e)) if e.is::<LengthLimitError>() => return Err(too_large(LIMIT)),
            Ok(Err(e)) => return Err(ApiError(StatusCode::BAD_REQUEST, format!("reading the body: {e}"))),
            Ok(Ok(collected)) => collected.to_bytes(),
        };
        parse(&bytes).map(Body)
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is over {limit} bytes"))
}

/// Refuses (415) a request whose Content-Type is not JSON.
fn json_content_type(req: &Request) -> Result<(), ApiError> {
    let essence = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    let json = essence
        .as_deref()
        .is_some_and(|m| m == "application/json" || (m.starts_with("application/") && m.ends_with("+json")));
    if json {
        Ok(())
    } else {
        Err(ApiError(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected a body with `Content-Type: application/json`".into(),
        ))
    }
}

/// What kind of JSON value `v` is, for the refusal of a body that is not an object.
fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Null => "null",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Parses a body that must be one JSON object into `T`, or says why not (400 or 422).
pub fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bad = |m: String| ApiError(StatusCode::BAD_REQUEST, m);
    match bytes.iter().find(|b| !b" \t\r\n".contains(b)) {
        None => return Err(bad("the body is empty: expected a JSON object".into())),
        Some(b'{') => {}
        Some(_) => {
            return match serde_json::from_slice::<serde_json::Value>(bytes) {
                Ok(v) => Err(ApiError(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("the body must be a JSON object, not {}", kind(&v)),
                )),
                Err(e) => Err(bad(format!("the body is not valid JSON: {e}"))),
            }
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize::<_, T>(&mut de).map_err(|e| {
        let status = match e.inner().classify() {
            serde_json::error::Category::Data => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::BAD_REQUEST,
        };
        let path = e.path().to_string();
        let message = if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        };
        ApiError(status, message)
    })?;
    de.end()
        .map_err(|e| bad(format!("the body is not one JSON object: {e}")))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body as HttpBody;

    /// A change body as the APIs take them: known fields only, each checked by its type.
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // read through Debug
    struct PortChange {
        #[serde(default)]
        reservation: Option<teamster_core::units::Bandwidth>,
        #[serde(default)]
        shares: Option<teamster_core::ioc::Shares>,
    }

    fn status_of(r: Result<PortChange, ApiError>) -> (u16, String) {
        match r {
            Ok(c) => (200, format!("{c:?}")),
            Err(ApiError(s, m)) => (s.as_u16(), m),
        }
    }

    #[test]
    fn only_an_object_is_a_body() {
        for (body, status, says) in [
            (r#"["500M"]"#, 422, "not an array"),
            (r#"  [ "500M", 50 ] "#, 422, "not an array"),
            (r#""500M""#, 422, "not a string"),
            ("12", 422, "not a number"),
            ("null", 422, "not null"),
            ("true", 422, "not a boolean"),
            ("", 400, "empty"),
            ("  \n", 400, "empty"),
            ("[1,", 400, "not valid JSON"),
            ("{\"reservation\": ", 400, "EOF"),
            ("{\"shares\": 10} {}", 400, "not one JSON object"),
            ("{\"reserve\": \"1M\"}", 422, "reserve"),
            ("{\"shares\": 500}", 422, "shares"),
            ("{\"shares\": 10}", 200, "shares: Some"),
        ] {
            let (got, message) = status_of(parse(body.as_bytes()));
            assert_eq!(got, status, "{body}: {message}");
            assert!(message.contains(says), "{body}: `{says}` not in {message}");
        }
    }

    async fn extract(content_type: Option<&str>, length: Option<&str>, body: Vec<u8>) -> (u16, String) {
        let mut req = Request::builder().method("PATCH").uri("/api/v1/ports/vm1");
        if let Some(t) = content_type {
            req = req.header(header::CONTENT_TYPE, t);
        }
        if let Some(l) = length {
            req = req.header(header::CONTENT_LENGTH, l);
        }
        let req = req.body(HttpBody::from(body)).unwrap();
        status_of(Body::<PortChange>::from_request(req, &()).await.map(|Body(c)| c))
    }

    #[tokio::test]
    async fn an_oversize_body_is_a_413_and_a_wrong_type_a_415() {
        let big = format!("{{\"shares\": 10, \"pad\": \"{}\"}}", "x".repeat(BODY_LIMIT));
        assert_eq!(
            extract(Some("application/json"), None, big.clone().into_bytes())
                .await
                .0,
            413
        );
        let declared = (BODY_LIMIT + 1).to_string();
        assert_eq!(
            extract(Some("application/json"), Some(&declared), b"{}".to_vec())
                .await
                .0,
            413
        );
        let (status, says) = extract(Some("text/plain"), None, b"{\"shares\": 10}".to_vec()).await;
        assert!(status == 415 && says.contains("application/json"), "{status} {says}");
        assert_eq!(extract(None, None, b"{\"shares\": 10}".to_vec()).await.0, 415);
        let ok = b"{\"shares\": 10}".to_vec();
        assert_eq!(
            extract(Some("application/json; charset=utf-8"), None, ok.clone())
                .await
                .0,
            200
        );
        assert_eq!(extract(Some("application/merge-patch+json"), None, ok).await.0, 200);
        // Just under the cap is parsed (and refused for its unknown field, not its size).
        let pad = BODY_LIMIT - "{\"shares\": 10, \"pad\": \"\"}".len();
        let fits = format!("{{\"shares\": 10, \"pad\": \"{}\"}}", "x".repeat(pad));
        assert_eq!(fits.len(), BODY_LIMIT);
        assert_eq!(extract(Some("application/json"), None, fits.into_bytes()).await.0, 422);
    }
}
