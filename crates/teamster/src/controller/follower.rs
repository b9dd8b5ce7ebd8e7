//! A controller that does not lead: while it campaigns, it listens on its API's sockets and
//! answers every request with 503 and where the leader is, so that a host given every
//! controller goes straight to the leader instead of trying each in turn.
//!
//! The leader is found in etcd: each controller campaigns with the URL it is reached at
//! (`--advertise`, or its `--listen` address when that is one), and a follower looks the
//! leader up every second. The answer is `{"error": "...", "leader": "https://..."}`, with
//! `leader` null when there is none yet or it did not say. A follower holds no state and
//! changes nothing, so it asks for no credential; the leader's URL is what every host is
//! given anyway.

use super::etcd::Leader;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a follower looks up the leader.
const LOOKUP_EVERY: Duration = Duration::from_secs(1);

/// A follower's answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NotLeader {
    pub error: String,
    /// The leader's URL, if known.
    pub leader: Option<String>,
}

/// Where the leader is, as last looked up.
#[derive(Clone, Default)]
pub struct Known(Arc<Mutex<Option<String>>>);

/// Looks the leader up every [`LOOKUP_EVERY`] into `known`, for ever.
pub async fn look_up(leader: Leader, known: Known) {
    let mut tick = tokio::time::interval(LOOKUP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let found = leader.find().await;
        *known.0.lock().unwrap_or_else(|e| e.into_inner()) = found;
    }
}

/// The follower's router: every request is answered 503 with where the leader is.
pub fn router(known: Known) -> Router {
    Router::new().fallback(move || {
        let known = known.clone();
        async move { answer(&known) }
    })
}

/// The 503 naming the leader.
fn answer(known: &Known) -> Response {
    let leader = known.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let error = match &leader {
        Some(url) => format!("this controller does not lead; the leader is at {url}"),
        None => "this controller does not lead, and no leader is known yet".to_string(),
    };
    // Closed after the answer: a client that keeps its connection would otherwise go on being
    // told by this follower's connection task after this controller leads.
    let mut r = (StatusCode::SERVICE_UNAVAILABLE, Json(NotLeader { error, leader })).into_response();
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_follower_names_the_leader_or_says_none_is_known() {
        use http_body_util::BodyExt;
        let known = Known::default();
        let body = |r: Response| async move {
            let b = r.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<serde_json::Value>(&b).unwrap()
        };
        let r = answer(&known);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::CONNECTION], "close");
        assert_eq!(body(r).await["leader"], serde_json::Value::Null);
        *known.0.lock().unwrap() = Some("https://10.0.0.11:9443".into());
        let v = body(answer(&known)).await;
        assert_eq!(v["leader"], "https://10.0.0.11:9443");
        assert!(v["error"].as_str().unwrap().contains("10.0.0.11"));
    }
}
