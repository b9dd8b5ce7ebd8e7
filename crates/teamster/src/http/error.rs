//! The error answer of both APIs (the switch's and the cluster controller's): a status and
//! `{"error": "..."}`, the message naming the field or object at fault.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answer: a status and `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError(pub(crate) StatusCode, pub(crate) String);

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What was wrong, naming the field or object.
    pub error: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(ErrorBody { error: self.1 })).into_response()
    }
}

impl ApiError {
    pub fn not_found(what: impl Into<String>) -> ApiError {
        ApiError(StatusCode::NOT_FOUND, what.into())
    }
}
