//! The OpenAPI document, generated from the handlers' annotations and the view types.

use super::changes::{GroupAdd, GroupChange, PortAdd, PortChange};
use super::domain_changes::{DomainPort, DomainPorts};
use super::routes;
use super::uplink_changes::{UplinkAdd, UplinkChange};
use super::ErrorBody;
use crate::live::config::{AdminState, BackendSetting, PortOrigin};
use crate::live::snapshot::{
    CountersView, EventView, FlowletShareView, GroupView, LbtView, MoveView, NodeView, PortView, Snapshot, UplinkView,
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
        routes::post_uplink,
        routes::delete_uplink,
        routes::ports,
        routes::port,
        routes::patch_port,
        routes::post_port,
        routes::delete_port,
        routes::domain_ports,
        routes::put_domain_ports,
        routes::delete_domain_ports,
        routes::groups,
        routes::group,
        routes::patch_group,
        routes::post_group,
        routes::delete_group,
        routes::lbt,
        routes::lacp,
        routes::rx,
        routes::netioc,
        routes::events,
        super::history::history,
        super::whatif::whatif,
    ),
    components(schemas(
        Snapshot,
        UplinkView,
        PortView,
        GroupView,
        FlowletShareView,
        crate::live::lacp_view::LacpMemberView,
        crate::live::rx_view::RxView,
        crate::live::rx_view::RxUplinkView,
        crate::live::rx_view::RxQueueView,
        crate::live::rx_view::RxFilterView,
        crate::live::rx_view::RxEventView,
        crate::live::lacp_view::LacpSideView,
        crate::live::lacp_view::LacpCountersView,
        crate::live::snapshot::VtepView,
        crate::live::snapshot::RemoteVtepView,
        LbtView,
        MoveView,
        NodeView,
        EventView,
        CountersView,
        super::history::Point,
        super::history::Sample,
        PortChange,
        PortAdd,
        GroupChange,
        GroupAdd,
        UplinkChange,
        UplinkAdd,
        DomainPorts,
        DomainPort,
        AdminState,
        PortOrigin,
        BackendSetting,
        ErrorBody
    )),
    modifiers(&AtLeastOneField)
)]
pub struct ApiDoc;

/// A change body must name at least one field (`{}` is refused). Set here because utoipa's
/// `min_properties` attribute comes out as `maxProperties`.
struct AtLeastOneField;

impl utoipa::Modify for AtLeastOneField {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let Some(components) = doc.components.as_mut() else {
            return;
        };
        for name in ["PortChange", "GroupChange"] {
            if let Some(utoipa::openapi::RefOr::T(utoipa::openapi::schema::Schema::Object(o))) =
                components.schemas.get_mut(name)
            {
                o.min_properties = Some(1);
                o.max_properties = None;
            }
        }
    }
}

/// `GET /openapi.json`.
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_bodies_say_what_they_accept() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        if let Ok(path) = std::env::var("TEAMSTER_DUMP_OPENAPI") {
            std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
        }
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["PortChange"]["minProperties"], 1, "{}", schemas["PortChange"]);
        assert_eq!(schemas["GroupChange"]["minProperties"], 1);
        assert!(schemas["PortChange"]["maxProperties"].is_null());
        let since = &doc["paths"]["/api/v1/events"]["get"]["parameters"][0];
        assert_eq!(since["in"], "query");
        assert_eq!(since["required"], false);
        assert!(schemas["PortChange"]["properties"]["reservation"]["oneOf"].is_array());
        assert!(doc["paths"]["/api/v1/ports/{name}"]["patch"]["responses"]["409"].is_object());
    }
}
