//! The OpenAPI document, generated from the handlers' annotations and the view types.

use super::changes::{GroupChange, PortChange, UplinkChange};
use super::routes;
use super::ErrorBody;
use crate::live::config::AdminState;
use crate::live::snapshot::{
    CountersView, EventView, GroupView, LbtView, MoveView, NodeView, PortView, Snapshot, UplinkView,
};
use axum::Json;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(title = "Teamster", description = "The control plane of a running Teamster switch."),
    paths(
        routes::status,
        routes::uplinks,
        routes::uplink,
        routes::patch_uplink,
        routes::ports,
        routes::port,
        routes::patch_port,
        routes::groups,
        routes::group,
        routes::patch_group,
        routes::lbt,
        routes::netioc,
        routes::events,
    ),
    components(schemas(
        Snapshot,
        UplinkView,
        PortView,
        GroupView,
        LbtView,
        MoveView,
        NodeView,
        EventView,
        CountersView,
        PortChange,
        GroupChange,
        UplinkChange,
        AdminState,
        ErrorBody
    ))
)]
pub struct ApiDoc;

/// `GET /openapi.json`.
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
