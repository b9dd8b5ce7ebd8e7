//! The router: every endpoint mounted on its handler, and the token check for the TCP listener.
//! Kept apart from the handlers so the OpenAPI document can list them without a loop.

use super::{routes, ApiError, ApiState};
use axum::middleware;
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// The router; with `token`, every request must present it (the TCP listener).
pub fn router(state: ApiState, token: Option<Arc<String>>) -> Router {
    let app = Router::new()
        .route("/", get(super::dashboard::page))
        .route("/openapi.json", get(super::openapi::document))
        .route("/metrics", get(super::metrics::metrics))
        .route("/api/v1/status", get(routes::status))
        .route("/api/v1/uplinks", get(routes::uplinks).post(routes::post_uplink))
        .route(
            "/api/v1/uplinks/{name}",
            get(routes::uplink)
                .patch(routes::patch_uplink)
                .delete(routes::delete_uplink),
        )
        .route("/api/v1/ports", get(routes::ports).post(routes::post_port))
        .route(
            "/api/v1/ports/{name}",
            get(routes::port).patch(routes::patch_port).delete(routes::delete_port),
        )
        .route(
            "/api/v1/domains/{domain}/ports",
            get(routes::domain_ports)
                .put(routes::put_domain_ports)
                .delete(routes::delete_domain_ports),
        )
        .route("/api/v1/port-groups", get(routes::groups).post(routes::post_group))
        .route(
            "/api/v1/port-groups/{name}",
            get(routes::group)
                .patch(routes::patch_group)
                .delete(routes::delete_group),
        )
        .route("/api/v1/lbt", get(routes::lbt))
        .route("/api/v1/lacp", get(routes::lacp))
        .route("/api/v1/rx", get(routes::rx))
        .route("/api/v1/netioc", get(routes::netioc))
        .route("/api/v1/events", get(routes::events))
        .route("/api/v1/history", get(super::history::history))
        .route("/api/v1/whatif", axum::routing::post(super::whatif::whatif))
        .route("/api/v1/stream", get(super::dashboard::stream))
        .fallback(|| async { ApiError::not_found("no such endpoint: see /openapi.json") })
        .with_state(state);
    match token {
        Some(t) => app.layer(middleware::from_fn_with_state(t, crate::http::auth::require_token)),
        None => app,
    }
}
