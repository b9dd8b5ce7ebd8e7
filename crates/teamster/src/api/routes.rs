//! The API's handlers; [`super::router`] mounts them and [`super::openapi`] documents them.

use super::changes::{
    add_group, add_port, change_group, change_port, remove_group, remove_port, ChangeError, GroupAdd, GroupChange,
    PortAdd, PortChange,
};
use super::domain_changes::{check_domain, remove_domain_ports, set_domain_ports, DomainPorts, DOMAIN_BODY_LIMIT};
use super::uplink_changes::{add_uplink, change_uplink, remove_uplink, UplinkAdd, UplinkChange};
use super::{ApiError, ApiState, ErrorBody};
use crate::http::body::Body;
use crate::live::claims::{interfaces, names};
use crate::live::config::{check_with, render, saved_text, PortOrigin, SwitchFile, SwitchPlan, Sysfs};
use crate::live::daemon::Apply;
use crate::live::snapshot::{EventView, GroupView, LbtView, NodeView, PortView, Snapshot, UplinkView};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;
use teamster_core::units::Bandwidth;

fn latest(state: &ApiState) -> Arc<Snapshot> {
    state.snapshots.borrow().clone()
}

fn find<T: Clone>(items: &[T], name: &str, of: impl Fn(&T) -> &str, what: &str) -> Result<Json<T>, ApiError> {
    items
        .iter()
        .find(|i| of(i) == name)
        .cloned()
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no {what} named `{name}`")))
}

/// Makes a change: edit a copy of the configuration, check it whole, save it, apply it, and
/// answer with the snapshot the loop took right after applying it.
async fn change(
    state: &ApiState,
    edit: impl FnOnce(&SwitchFile) -> Result<SwitchFile, ChangeError>,
) -> Result<Arc<Snapshot>, ApiError> {
    change_some(state, |f| edit(f).map(|new| (new, true))).await
}

/// As [`change`], for an edit that may change nothing (the second of two identical calls):
/// then nothing is checked, saved or applied, and the answer is the latest snapshot.
pub(super) async fn change_some(
    state: &ApiState,
    edit: impl FnOnce(&SwitchFile) -> Result<(SwitchFile, bool), ChangeError>,
) -> Result<Arc<Snapshot>, ApiError> {
    let mut config = state.config.lock().await;
    let (new, changed) = edit(&config).map_err(|e| match e {
        ChangeError::NotFound(m) => ApiError::not_found(m),
        ChangeError::Invalid(m) => ApiError(StatusCode::UNPROCESSABLE_ENTITY, m),
        ChangeError::Conflict(m) => ApiError(StatusCode::CONFLICT, m),
    })?;
    if !changed {
        return Ok(latest(state));
    }
    // The body was well formed; the configuration it leads to is not (a limit below the
    // reservation, an unknown uplink, admission control): a conflict with the current state.
    let plan = check_running(state, &new).map_err(|e| ApiError(StatusCode::CONFLICT, e))?;
    if let Err(e) = save(state, &config, &new).await {
        settle_claims(state);
        if e.0 == StatusCode::CONFLICT {
            apply(state, None, vec![format!("change refused: {}", e.1)]).await;
        }
        return Err(e);
    }
    let snapshot = apply(state, Some(plan), Vec::new()).await;
    if new.ports.len() < config.ports.len() {
        give_back_soon();
    }
    *config = new;
    snapshot.ok_or_else(|| ApiError(StatusCode::SERVICE_UNAVAILABLE, "the switch is stopping".into()))
}

/// Gives the heap's freed memory back (see [`crate::live::heap`]) once what removed ports held
/// is free: the snapshot and status file that still show them are replaced within a second, so
/// two seconds after the change, off this thread; at most one pending.
fn give_back_soon() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static PENDING: AtomicBool = AtomicBool::new(false);
    if PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    tokio::spawn(async {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        PENDING.store(false, Ordering::Release);
        let _ = tokio::task::spawn_blocking(crate::live::heap::give_back).await;
    });
}

/// Saves what `new` changes of the files the daemon keeps: `switch.toml` if its settings differ
/// from `old`'s, the libvirt hook's file if its ports do (a hook's change never rewrites the
/// operator's file). `switch.toml` holding an edit the daemon has not read refuses the whole
/// save (a 409: see [`crate::live::persist::KeptFile`]), before anything is written; the hook's
/// file is the daemon's alone, and rewritten whatever it holds.
async fn save(state: &ApiState, old: &SwitchFile, new: &SwitchFile) -> Result<(), ApiError> {
    let body = render(new);
    let config = (render(old) != body).then_some(body);
    // The hook's ports, if they changed: saved with the interfaces they are on as the kernel
    // shows them at the save (what tells a restart the same tap from a new one of its name).
    let hook = |f: &SwitchFile| -> Vec<crate::live::config::PortFile> {
        (f.ports.iter())
            .filter(|p| p.origin == PortOrigin::Libvirt)
            .cloned()
            .collect()
    };
    let unseen = std::collections::HashMap::new();
    let (was, now) = (hook(old), hook(new));
    let render_hook = crate::live::domain_ports::render;
    let domains = (render_hook(&was, &unseen) != render_hook(&now, &unseen)).then_some(now);
    if config.is_none() && domains.is_none() {
        return Ok(());
    }
    let files = state.files.clone();
    let saved = tokio::task::spawn_blocking(move || {
        let domains = domains.map(|ports| {
            let links = crate::live::domain_ports::links_now();
            crate::live::domain_ports::render(&ports, &links)
        });
        let mut files = files.lock().unwrap_or_else(|e| e.into_inner());
        if config.is_some() {
            (files.config.unchanged()).map_err(|e| ApiError(StatusCode::CONFLICT, e))?;
        }
        let failed = |file: &crate::live::persist::KeptFile, e: String| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "saving the configuration to {}: {e}; nothing changed",
                    file.path().display()
                ),
            )
        };
        if let Some(text) = domains {
            let file = &mut files.domains;
            file.overwrite(text).map_err(|e| failed(file, e))?;
        }
        if let Some(body) = config {
            let file = &mut files.config;
            file.save(|revision| saved_text(&body, revision))
                .map_err(|e| failed(file, e))?;
        }
        Ok(())
    })
    .await;
    saved.map_err(|e| {
        ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("saving the configuration: {e}"),
        )
    })?
}

/// Checks a changed configuration as at start-up, except that uplinks keep the capacity they
/// run at unless the file sets one: a speed sysfs cannot read while a carrier is down never
/// refuses a change.
///
/// A configuration that passes also claims the interfaces it adds ([`crate::live::claims`]): one
/// another Teamster serves refuses it, naming that process. The claims of a check whose change
/// is not applied are released by [`settle_claims`], or by the next change applied.
pub(super) fn check_running(state: &ApiState, new: &SwitchFile) -> Result<SwitchPlan, String> {
    let running: Vec<(String, Bandwidth)> = latest(state)
        .uplinks
        .iter()
        .map(|u| (u.name.clone(), Bandwidth::from_bps(u.capacity_bps)))
        .collect();
    let plan = check_with(new, &Sysfs, &running).map_err(|e| with_port_name(new, e))?;
    if latest(state).data_plane == "kernel" {
        crate::live::data_plane::can_shape(&plan.datapath)?;
    }
    claims(state).claim(interfaces(&plan))?;
    Ok(plan)
}

/// The switch's claims.
pub(super) fn claims(state: &ApiState) -> std::sync::MutexGuard<'_, crate::live::claims::Claims> {
    state.claims.lock().unwrap_or_else(|e| e.into_inner())
}

/// Releases the claims taken by checks whose change was not applied.
pub(super) fn settle_claims(state: &ApiState) {
    claims(state).settle();
}

/// A refusal whose key is `ports[N]...` also names that port (`ports[1].group (port
/// `web1-0`): ...`): the index is the running configuration's, which a client (the libvirt
/// hook, say) does not see.
fn with_port_name(f: &SwitchFile, e: String) -> String {
    let Some((key, rest)) = e.split_once(':') else {
        return e;
    };
    let index = key
        .strip_prefix("ports[")
        .and_then(|k| k.split_once(']')?.0.parse::<usize>().ok());
    match index.and_then(|n| f.ports.get(n)) {
        Some(p) if !key.contains("(port") => format!("{key} (port `{}`):{rest}", p.name),
        _ => e,
    }
}

/// Hands the loop a checked plan to switch to (if any) and notes for its event log; returns
/// the snapshot it took right after (None: the switch is stopping).
/// Once the loop has applied a plan, only its interfaces stay claimed.
pub(super) async fn apply(state: &ApiState, plan: Option<SwitchPlan>, notes: Vec<String>) -> Option<Arc<Snapshot>> {
    let (done, answer) = tokio::sync::oneshot::channel();
    let in_force = plan.as_ref().map(names);
    let sent = state.changes.send(Apply {
        plan: plan.map(Box::new),
        notes,
        done,
    });
    let snapshot = match sent {
        Ok(()) => answer.await.ok(),
        Err(_) => None,
    };
    if let (Some(interfaces), Some(_)) = (in_force, &snapshot) {
        claims(state).in_force(interfaces);
    }
    snapshot
}

#[utoipa::path(get, path = "/api/v1/status", responses((status = 200, body = Snapshot)))]
pub async fn status(State(s): State<ApiState>) -> Json<Snapshot> {
    Json((*latest(&s)).clone())
}

#[utoipa::path(get, path = "/api/v1/uplinks", responses((status = 200, body = Vec<UplinkView>)))]
pub async fn uplinks(State(s): State<ApiState>) -> Json<Vec<UplinkView>> {
    Json(latest(&s).uplinks.clone())
}

#[utoipa::path(get, path = "/api/v1/uplinks/{name}", params(("name" = String, Path)),
    responses((status = 200, body = UplinkView), (status = 404, body = ErrorBody)))]
pub async fn uplink(State(s): State<ApiState>, Path(name): Path<String>) -> Result<Json<UplinkView>, ApiError> {
    find(&latest(&s).uplinks, &name, |u| &u.name, "uplink")
}

#[utoipa::path(patch, path = "/api/v1/uplinks/{name}", params(("name" = String, Path)), request_body = UplinkChange,
    responses((status = 200, body = UplinkView), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 408, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn patch_uplink(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Body(c): Body<UplinkChange>,
) -> Result<Json<UplinkView>, ApiError> {
    let snap = change(&s, |f| change_uplink(f, &name, &c)).await?;
    find(&snap.uplinks, &name, |u| &u.name, "uplink")
}

#[utoipa::path(post, path = "/api/v1/uplinks", request_body = UplinkAdd,
    responses((status = 201, body = UplinkView), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "refused: the name or interface is taken, no such interface, a port rule matches it, no speed to take the capacity from, admission control"),
        (status = 408, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn post_uplink(
    State(s): State<ApiState>,
    Body(u): Body<UplinkAdd>,
) -> Result<(StatusCode, Json<UplinkView>), ApiError> {
    let snap = change(&s, |f| add_uplink(f, &u)).await?;
    let view = find(&snap.uplinks, &u.name, |v| &v.name, "uplink")?;
    Ok((StatusCode::CREATED, view))
}

#[utoipa::path(delete, path = "/api/v1/uplinks/{name}", params(("name" = String, Path)),
    responses((status = 204, description = "removed"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "a port group's failover order lists it, or it is the last uplink")))]
pub async fn delete_uplink(State(s): State<ApiState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    change(&s, |f| remove_uplink(f, &name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/ports", responses((status = 200, body = Vec<PortView>)))]
pub async fn ports(State(s): State<ApiState>) -> Json<Vec<PortView>> {
    Json(latest(&s).ports.clone())
}

#[utoipa::path(get, path = "/api/v1/ports/{name}", params(("name" = String, Path)),
    responses((status = 200, body = PortView), (status = 404, body = ErrorBody)))]
pub async fn port(State(s): State<ApiState>, Path(name): Path<String>) -> Result<Json<PortView>, ApiError> {
    find(&latest(&s).ports, &name, |p| &p.name, "port")
}

#[utoipa::path(patch, path = "/api/v1/ports/{name}", params(("name" = String, Path)), request_body = PortChange,
    responses((status = 200, body = PortView), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the resulting configuration is refused (admission control, limit below reservation)"),
        (status = 408, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn patch_port(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Body(c): Body<PortChange>,
) -> Result<Json<PortView>, ApiError> {
    let snap = change(&s, |f| change_port(f, &name, &c)).await?;
    find(&snap.ports, &name, |p| &p.name, "port")
}

#[utoipa::path(post, path = "/api/v1/ports", request_body = PortAdd,
    responses((status = 201, body = PortView), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "refused: the name, interface or MAC is taken, an unknown group, pool or class, admission control"),
        (status = 408, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn post_port(
    State(s): State<ApiState>,
    Body(p): Body<PortAdd>,
) -> Result<(StatusCode, Json<PortView>), ApiError> {
    let snap = change(&s, |f| add_port(f, &p)).await?;
    let view = find(&snap.ports, &p.name, |v| &v.name, "port")?;
    Ok((StatusCode::CREATED, view))
}

#[utoipa::path(delete, path = "/api/v1/ports/{name}", params(("name" = String, Path)),
    responses((status = 204, description = "removed"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "a port matched by a port rule goes with its interface")))]
pub async fn delete_port(State(s): State<ApiState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    change(&s, |f| remove_port(f, &name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Domain `domain`'s ports in `snapshot`.
fn owned(snapshot: &Snapshot, domain: &str) -> Vec<PortView> {
    (snapshot.ports.iter())
        .filter(|p| p.origin == PortOrigin::Libvirt && p.owner.as_deref() == Some(domain))
        .cloned()
        .collect()
}

#[utoipa::path(get, path = "/api/v1/domains/{domain}/ports", params(("domain" = String, Path, description = "the libvirt domain's name: 1 to 1024 characters, no control characters", min_length = 1, max_length = 1024, pattern = r"^[^\x00-\x1f\x7f-\x9f]{1,1024}$")),
    responses((status = 200, body = Vec<PortView>, description = "the ports the libvirt hook made for the domain (none: an empty list)"),
        (status = 422, body = ErrorBody, description = "not a domain name")))]
pub async fn domain_ports(
    State(s): State<ApiState>,
    Path(domain): Path<String>,
) -> Result<Json<Vec<PortView>>, ApiError> {
    check_domain(&domain).map_err(|e| ApiError(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    Ok(Json(owned(&latest(&s), &domain)))
}

#[utoipa::path(put, path = "/api/v1/domains/{domain}/ports", params(("domain" = String, Path, description = "the libvirt domain's name: 1 to 1024 characters, no control characters", min_length = 1, max_length = 1024, pattern = r"^[^\x00-\x1f\x7f-\x9f]{1,1024}$")), request_body = DomainPorts,
    responses((status = 200, body = Vec<PortView>, description = "the domain's ports now: one per entry, matched by MAC; its others removed"),
        (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "refused, nothing changed: a MAC twice in the list, a MAC, interface or both candidate names another port's, an unknown group, pool or class, admission control, switch.toml holding an edit not yet reloaded"),
        (status = 408, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn put_domain_ports(
    State(s): State<ApiState>,
    Path(domain): Path<String>,
    Body(d): Body<DomainPorts, DOMAIN_BODY_LIMIT>,
) -> Result<Json<Vec<PortView>>, ApiError> {
    let snap = change_some(&s, |f| set_domain_ports(f, &domain, &d.ports)).await?;
    Ok(Json(owned(&snap, &domain)))
}

#[utoipa::path(delete, path = "/api/v1/domains/{domain}/ports", params(("domain" = String, Path, description = "the libvirt domain's name: 1 to 1024 characters, no control characters", min_length = 1, max_length = 1024, pattern = r"^[^\x00-\x1f\x7f-\x9f]{1,1024}$")),
    responses((status = 204, description = "the domain has no port (any it had are removed)"), (status = 422, body = ErrorBody)))]
pub async fn delete_domain_ports(
    State(s): State<ApiState>,
    Path(domain): Path<String>,
) -> Result<StatusCode, ApiError> {
    change_some(&s, |f| remove_domain_ports(f, &domain)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/port-groups", responses((status = 200, body = Vec<GroupView>)))]
pub async fn groups(State(s): State<ApiState>) -> Json<Vec<GroupView>> {
    Json(latest(&s).port_groups.clone())
}

#[utoipa::path(get, path = "/api/v1/port-groups/{name}", params(("name" = String, Path)),
    responses((status = 200, body = GroupView), (status = 404, body = ErrorBody)))]
pub async fn group(State(s): State<ApiState>, Path(name): Path<String>) -> Result<Json<GroupView>, ApiError> {
    find(&latest(&s).port_groups, &name, |g| &g.name, "port group")
}

#[utoipa::path(patch, path = "/api/v1/port-groups/{name}", params(("name" = String, Path)), request_body = GroupChange,
    responses((status = 200, body = GroupView), (status = 404, body = ErrorBody), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "the resulting configuration is refused (unknown or repeated uplink, no active uplink)"),
        (status = 408, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn patch_group(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Body(c): Body<GroupChange>,
) -> Result<Json<GroupView>, ApiError> {
    let snap = change(&s, |f| change_group(f, &name, &c)).await?;
    find(&snap.port_groups, &name, |g| &g.name, "port group")
}

#[utoipa::path(post, path = "/api/v1/port-groups", request_body = GroupAdd,
    responses((status = 201, body = GroupView), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "refused: the name is taken, an unknown or repeated uplink, no active uplink, a VLAN out of range"),
        (status = 408, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn post_group(
    State(s): State<ApiState>,
    Body(g): Body<GroupAdd>,
) -> Result<(StatusCode, Json<GroupView>), ApiError> {
    let snap = change(&s, |f| add_group(f, &g)).await?;
    let view = find(&snap.port_groups, &g.name, |v| &v.name, "port group")?;
    Ok((StatusCode::CREATED, view))
}

#[utoipa::path(delete, path = "/api/v1/port-groups/{name}", params(("name" = String, Path)),
    responses((status = 204, description = "removed"), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "a port or a port rule still uses it")))]
pub async fn delete_group(State(s): State<ApiState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    change(&s, |f| remove_group(f, &name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/lbt", responses((status = 200, body = LbtView)))]
pub async fn lbt(State(s): State<ApiState>) -> Json<LbtView> {
    Json(latest(&s).lbt.clone())
}

#[utoipa::path(get, path = "/api/v1/rx", responses((status = 200, body = crate::live::rx_view::RxView)))]
pub async fn rx(State(s): State<ApiState>) -> Json<crate::live::rx_view::RxView> {
    Json(latest(&s).rx.clone())
}

#[utoipa::path(get, path = "/api/v1/lacp", responses((status = 200, body = Vec<crate::live::lacp_view::LacpMemberView>)))]
pub async fn lacp(State(s): State<ApiState>) -> Json<Vec<crate::live::lacp_view::LacpMemberView>> {
    Json(latest(&s).lacp.clone())
}

#[utoipa::path(get, path = "/api/v1/netioc", responses((status = 200, body = Vec<NodeView>)))]
pub async fn netioc(State(s): State<ApiState>) -> Json<Vec<NodeView>> {
    Json(latest(&s).netioc.clone())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a sequence number at or above this.
    #[param(maximum = 9_223_372_036_854_775_807_i64, nullable = false)]
    pub since: Option<u64>,
}

/// A `since` query parameter (0 if absent). The document says int64, as JSON tools expect;
/// hold the server to it.
pub(super) fn since_param(since: Option<u64>) -> Result<u64, ApiError> {
    let since = since.unwrap_or(0);
    if since > i64::MAX as u64 {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!("since: {since} is above {}", i64::MAX),
        ));
    }
    Ok(since)
}

#[utoipa::path(get, path = "/api/v1/events", params(EventsQuery),
    responses((status = 200, body = Vec<EventView>), (status = 400, body = ErrorBody)))]
pub async fn events(
    State(s): State<ApiState>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<EventView>>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let since = since_param(q.since)?;
    Ok(Json(
        latest(&s).events.iter().filter(|e| e.seq >= since).cloned().collect(),
    ))
}
