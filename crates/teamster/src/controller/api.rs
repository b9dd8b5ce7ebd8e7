//! The controller's API, under the switch's rules: a unix socket (0600) and, if asked, a
//! loopback TCP address with a bearer token; bodies are one JSON object of at most 64 KiB;
//! a change is checked whole and refused with a 4xx naming the problem; OpenAPI at
//! `/openapi.json`, metrics at `/metrics`.
//!
//! Changes are made one at a time (the store's lock, held for the whole change): each is made
//! on a copy of the state, saved to the store, and only then in force. A store that cannot be
//! written refuses the change (503) and changes nothing. The state in force has a lock of its
//! own, held only to read it or to take a report in place, never while the store writes: a
//! slow store (etcd electing a new leader) delays changes, not the answers to hosts' reports,
//! so no host isolates its VMs for it. A report that needs a change the store cannot keep
//! is still answered (the host is heard, its assignments as they stand); its next report
//! asks again.

use super::access::{self, Access};
use super::state::{
    ClusterState, FaultRecord, HostReport, HostShape, MigrationRecord, Outcome, PowerOn, Refusal, VmChange,
};
use super::store::{SaveError, Store};
use super::view::{self, ClusterView};
use crate::http::body::Body;
use crate::http::error::{ApiError, ErrorBody};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{delete, get, patch, post, put};
use axum::{middleware, Json, Router};
use serde::Deserialize;
use std::sync::Arc;
use tokio::sync::Mutex;
use utoipa::OpenApi;

/// The state in force, behind its own lock.
pub struct Shared {
    pub state: ClusterState,
    /// Each host's VMs, for the answers to reports.
    pub index: view::AssignmentIndex,
}

/// The state in force, and the store whose lock makes changes one at a time.
#[derive(Clone)]
pub struct ControllerState {
    shared: Arc<Mutex<Shared>>,
    store: Arc<Mutex<Box<dyn Store>>>,
}

impl ControllerState {
    pub fn new(state: ClusterState, store: Box<dyn Store>) -> ControllerState {
        ControllerState {
            shared: Arc::new(Mutex::new(Shared {
                state,
                index: Default::default(),
            })),
            store: Arc::new(Mutex::new(store)),
        }
    }

    /// The state in force, locked briefly.
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, Shared> {
        self.shared.lock().await
    }
}

/// Seconds since the epoch: the controller's clock for what it records and for its hosts'
/// silence. It is the wall clock read once, at the first call, advanced by the monotonic
/// clock: a wall clock stepped while the controller runs (NTP) neither makes every host silent
/// at once nor hides a silent one.
pub fn now_s() -> u64 {
    static START: std::sync::OnceLock<(u64, std::time::Instant)> = std::sync::OnceLock::new();
    let (wall, at) = *START.get_or_init(|| {
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        (wall.map_or(0, |d| d.as_secs()), std::time::Instant::now())
    });
    wall + at.elapsed().as_secs()
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        let status = match r {
            Refusal::Bad(_) => StatusCode::BAD_REQUEST,
            Refusal::Unknown(_) => StatusCode::NOT_FOUND,
            Refusal::Conflict(_) => StatusCode::CONFLICT,
        };
        ApiError(status, r.message().to_string())
    }
}

/// The controller's watch over its hosts: every second, marks down the hosts silent past the
/// host timeout and restarts their VMs elsewhere (`ClusterState::fail_silent`), each event
/// printed. A store that cannot be written leaves the state as it was; the next second tries
/// again. Never returns.
pub async fn watch_hosts(s: ControllerState) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Looked at in place: the state is copied only when a host newly fails.
        let quiet = s.lock().await.state.watch_idle(now_s());
        if quiet {
            continue;
        }
        match change(&s, |c, now| c.fail_silent(now)).await {
            Ok(Json(out)) => {
                for e in &out.events {
                    println!("teamster controller: {e}");
                }
                for m in &out.migrations {
                    println!("teamster controller: {} -> {}: {}", m.vm, m.to, m.why);
                }
            }
            Err(e) => eprintln!("teamster controller: the host watch: {}", e.1),
        }
    }
}

/// Why a change was not kept.
enum NotKept {
    /// Refused, or failed before it reached the store.
    Refused(ApiError),
    /// The store could not keep it; the controller goes on.
    Unsaved(ApiError),
    /// The store could not keep it, and this controller stops: it no longer leads.
    Stopping(ApiError),
}

impl From<NotKept> for ApiError {
    fn from(n: NotKept) -> ApiError {
        match n {
            NotKept::Refused(e) | NotKept::Unsaved(e) | NotKept::Stopping(e) => e,
        }
    }
}

/// Makes a change on a copy and saves it; the state in force changes only once it is saved
/// (or at once, for a change that is only a report's time).
async fn change(
    s: &ControllerState,
    f: impl FnOnce(&mut ClusterState, u64) -> Result<Outcome, Refusal>,
) -> Result<Json<Outcome>, ApiError> {
    attempt(s, f).await.map_err(ApiError::from)
}

/// [`change`], saying why a change was not kept.
async fn attempt(
    s: &ControllerState,
    f: impl FnOnce(&mut ClusterState, u64) -> Result<Outcome, Refusal>,
) -> Result<Json<Outcome>, NotKept> {
    // One change at a time: the store's lock is held until the change is in force.
    let store = s.store.clone().lock_owned().await;
    let mut next = s.lock().await.state.clone();
    let out = f(&mut next, now_s()).map_err(|r| NotKept::Refused(r.into()))?;
    // A report that changed nothing but its time writes nothing: the time is kept in memory
    // (a controller that takes over reads the last saved one, and the host's next report
    // brings it up to date within an interval).
    if out.unchanged {
        put_in_force(s, next).await;
        return Ok(Json(out));
    }
    let saving = std::time::Instant::now();
    // What it writes: the records that differ from the state in force (the last saved, but for
    // what reports move in memory alone, which no record compares).
    let delta = next
        .delta(&s.lock().await.state)
        .map_err(|e| NotKept::Refused(ApiError(StatusCode::INTERNAL_SERVER_ERROR, e)))?;
    let records = (delta.puts.len() + delta.deletes.len()) as u64;
    // The write blocks (a file's fsync, etcd's answer): on a thread of its own, so that the
    // answers to reports go on meanwhile. Saved and put in force by a task of its own too: a
    // request given up by its client (its handler dropped) cannot leave a change saved that
    // is not in force, for the next change to overwrite.
    let shared = s.clone();
    let landing = tokio::spawn(async move {
        let written = tokio::task::spawn_blocking(move || {
            let saved = store.save(&next, &delta);
            (store, next, saved)
        })
        .await;
        let (store, next, saved) = written.map_err(|e| SaveError::Failed(format!("the store's write: {e}")))?;
        if saved.is_ok() {
            put_in_force(&shared, next).await;
        }
        drop(store);
        saved.inspect_err(|e| eprintln!("teamster controller: {e}"))
    });
    let landed = landing.await.map_err(|e| {
        NotKept::Refused(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the store's write: {e}"),
        ))
    })?;
    landed.map_err(|e| {
        let said = ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot save to the store, nothing changed: {e}"),
        );
        match e {
            SaveError::Failed(_) => NotKept::Unsaved(said),
            SaveError::Stopping(_) => NotKept::Stopping(said),
        }
    })?;
    STORE_SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    STORE_RECORDS.fetch_add(records, std::sync::atomic::Ordering::Relaxed);
    STORE_SAVE_MICROS.fetch_add(
        saving.elapsed().as_micros() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    Ok(Json(out))
}

/// Puts `next` in force, keeping what reports taken in place said while it was made.
async fn put_in_force(s: &ControllerState, mut next: ClusterState) {
    let mut shared = s.lock().await;
    next.keep_heard(&shared.state);
    shared.state = next;
}

/// States saved to the store since start, and the time those saves took (for `/metrics`).
static STORE_SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static STORE_SAVE_MICROS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Records written or removed by those saves.
static STORE_RECORDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The router of a listener whose requests prove their role by `access` (see
/// [`super::access`]).
pub fn router(state: ControllerState, access: Access) -> Router {
    let hosts = Router::new()
        .route("/api/v1/hosts/{name}", put(register))
        .route("/api/v1/hosts/{name}/report", post(report))
        .route("/api/v1/hosts/{name}/adopt", post(adopt));
    let operators = Router::new()
        .route("/openapi.json", get(document))
        .route("/metrics", get(metrics))
        .route("/api/v1/cluster", get(cluster))
        .route("/api/v1/hosts/{name}", delete(remove_host))
        .route("/api/v1/vms", post(power_on))
        .route("/api/v1/vms/{name}", patch(set_vm).delete(power_off))
        .route("/api/v1/quotas/{pool}", put(set_quota));
    let (hosts, operators) = match &access {
        Access::Tls { token, denied } => (
            hosts.route_layer(middleware::from_fn_with_state(denied.clone(), access::require_host)),
            operators.route_layer(middleware::from_fn_with_state(token.clone(), access::require_operator)),
        ),
        _ => (hosts, operators),
    };
    let app = hosts
        .merge(operators)
        .fallback(|| async { ApiError(StatusCode::NOT_FOUND, "no such endpoint: see /openapi.json".into()) })
        .with_state(state);
    match access {
        Access::Token(t) => app.layer(middleware::from_fn_with_state(t, crate::http::auth::require_token)),
        Access::Owner | Access::Tls { .. } => app,
    }
}

#[utoipa::path(get, path = "/api/v1/cluster", responses((status = 200, body = ClusterView)))]
async fn cluster(State(s): State<ControllerState>) -> Json<ClusterView> {
    Json(view::cluster(&s.lock().await.state, now_s()))
}

#[utoipa::path(put, path = "/api/v1/hosts/{name}", params(("name" = String, Path)), request_body = HostShape,
    responses((status = 200, body = Outcome), (status = 400, body = ErrorBody)))]
async fn register(
    State(s): State<ControllerState>,
    Path(name): Path<String>,
    Body(shape): Body<HostShape>,
) -> Result<Json<Outcome>, ApiError> {
    change(&s, |c, now| c.register(&name, shape, now)).await
}

#[utoipa::path(delete, path = "/api/v1/hosts/{name}", params(("name" = String, Path)),
    responses((status = 200, body = Outcome), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn remove_host(State(s): State<ControllerState>, Path(name): Path<String>) -> Result<Json<Outcome>, ApiError> {
    change(&s, |c, now| c.remove_host(&name, now)).await
}

/// What a host is told after its report: the cluster's identity and the VMs it should have.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Told {
    pub cluster_id: u64,
    pub assignments: Vec<view::Assignment>,
    /// The controller's host timeout: a host not heard for this long has its VMs restarted
    /// elsewhere, so a host cut off for nearly as long detaches them first (0: not said).
    #[serde(default)]
    pub host_timeout_s: u64,
}

#[utoipa::path(post, path = "/api/v1/hosts/{name}/report", params(("name" = String, Path)), request_body = HostReport,
    responses((status = 200, body = Told), (status = 404, body = ErrorBody)))]
async fn report(
    State(s): State<ControllerState>,
    Path(name): Path<String>,
    Body(r): Body<HostReport>,
) -> Result<Json<Told>, ApiError> {
    if r.attached.len() > super::state::MAX_VMS {
        return Err(ApiError(StatusCode::BAD_REQUEST, "attached: too many VMs".into()));
    }
    // Most reports change nothing but the host's time: taken in place, with no copy of the
    // state and nothing written. Others go through a change; their migrations are in the
    // cluster view, and the host needs its assignments.
    let mut shared = s.lock().await;
    if !shared.state.touch(&name, &r, now_s())? {
        drop(shared);
        let changed = attempt(&s, |c, now| c.report(&name, &r, now)).await;
        shared = s.lock().await;
        match changed {
            Ok(_migrations) => {}
            // Not kept (the store): the host is heard all the same and told what stands; but
            // not by a controller that stops (it no longer leads).
            Err(NotKept::Unsaved(_)) => shared.state.heard(&name, &r, now_s()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Json(Told {
        cluster_id: shared.state.cluster_id,
        assignments: {
            let Shared { state, index, .. } = &mut *shared;
            index.assignments(state, &name)
        },
        host_timeout_s: shared.state.host_timeout.0,
    }))
}

/// What a host is told after asking for adoption: what happened to each VM, and the VMs it
/// should now have.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Adopted {
    pub events: Vec<String>,
    pub assignments: Vec<view::Assignment>,
}

#[utoipa::path(post, path = "/api/v1/hosts/{name}/adopt", params(("name" = String, Path)), request_body = super::adoption::Adopt,
    responses((status = 200, body = Adopted), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn adopt(
    State(s): State<ControllerState>,
    Path(name): Path<String>,
    Body(req): Body<super::adoption::Adopt>,
) -> Result<Json<Adopted>, ApiError> {
    let Json(out) = change(&s, |c, now| c.adopt(&name, &req, now)).await?;
    for e in &out.events {
        println!("teamster controller: {e}");
    }
    let mut shared = s.lock().await;
    Ok(Json(Adopted {
        events: out.events,
        assignments: {
            let Shared { state, index, .. } = &mut *shared;
            index.assignments(state, &name)
        },
    }))
}

#[utoipa::path(post, path = "/api/v1/vms", request_body = PowerOn,
    responses((status = 201, body = Outcome), (status = 409, body = ErrorBody)))]
async fn power_on(State(s): State<ControllerState>, Body(req): Body<PowerOn>) -> Result<impl IntoResponse, ApiError> {
    let out = change(&s, |c, now| c.power_on(req, now)).await?;
    Ok((StatusCode::CREATED, out))
}

#[utoipa::path(patch, path = "/api/v1/vms/{name}", params(("name" = String, Path)), request_body = VmChange,
    responses((status = 200, body = Outcome), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn set_vm(
    State(s): State<ControllerState>,
    Path(name): Path<String>,
    Body(ch): Body<VmChange>,
) -> Result<Json<Outcome>, ApiError> {
    change(&s, |c, now| c.set_vm(&name, ch, now)).await
}

#[utoipa::path(delete, path = "/api/v1/vms/{name}", params(("name" = String, Path)),
    responses((status = 200, body = Outcome), (status = 404, body = ErrorBody)))]
async fn power_off(State(s): State<ControllerState>, Path(name): Path<String>) -> Result<Json<Outcome>, ApiError> {
    change(&s, |c, now| c.power_off(&name, now)).await
}

/// A pool's quota over the cluster.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    #[schema(value_type = String, example = "15G")]
    pub quota: teamster_core::units::Bandwidth,
}

#[utoipa::path(put, path = "/api/v1/quotas/{pool}", params(("pool" = String, Path)), request_body = Quota,
    responses((status = 200, body = Outcome), (status = 409, body = ErrorBody)))]
async fn set_quota(
    State(s): State<ControllerState>,
    Path(pool): Path<String>,
    Body(q): Body<Quota>,
) -> Result<Json<Outcome>, ApiError> {
    change(&s, |c, now| c.set_quota(&pool, q.quota, now)).await
}

/// Prometheus text: hosts, VMs, reservations that cannot be kept, migrations and faults kept.
async fn metrics(State(s): State<ControllerState>) -> impl IntoResponse {
    let v = view::cluster(&s.lock().await.state, now_s());
    let lines = [
        ("teamster_controller_hosts", "Hosts registered.", v.hosts.len()),
        ("teamster_controller_vms", "VMs powered on.", v.vms.len()),
        (
            "teamster_controller_violated_reservations",
            "Reservations that cannot be kept now.",
            v.violated,
        ),
        (
            "teamster_controller_migrations_pending",
            "Migrations their destination has not confirmed.",
            v.vms.iter().filter(|m| m.moving_from.is_some()).count(),
        ),
        (
            "teamster_controller_recent_migrations",
            "Migrations kept in the recent list.",
            v.migrations.len(),
        ),
        (
            "teamster_controller_recent_faults",
            "Faults kept in the recent list.",
            v.faults.len(),
        ),
    ];
    let mut text = String::new();
    for (name, help, value) in lines {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"));
    }
    text.push_str(&crate::http::admission::TCP_TALLY.text());
    let saves = STORE_SAVES.load(std::sync::atomic::Ordering::Relaxed);
    let save_s = STORE_SAVE_MICROS.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6;
    let records = STORE_RECORDS.load(std::sync::atomic::Ordering::Relaxed);
    text.push_str(&format!(
        "# HELP teamster_controller_store_records Records written or removed by those saves (a change writes only what it changed).\n# TYPE teamster_controller_store_records counter\nteamster_controller_store_records_total {records}\n"
    ));
    text.push_str(&format!(
        "# HELP teamster_controller_store_saves States saved to the store (each accepted change).\n# TYPE teamster_controller_store_saves counter\nteamster_controller_store_saves_total {saves}\n# HELP teamster_controller_store_save_seconds Time spent saving states to the store.\n# TYPE teamster_controller_store_save_seconds counter\nteamster_controller_store_save_seconds_total {save_s}\n"
    ));
    let failed = crate::http::tls::HANDSHAKES_FAILED.load(std::sync::atomic::Ordering::Relaxed);
    text.push_str(&format!(
        "# HELP teamster_api_tls_handshakes_failed TLS handshakes not completed: a certificate refused, not TLS, or too slow.\n# TYPE teamster_api_tls_handshakes_failed counter\nteamster_api_tls_handshakes_failed_total {failed}\n"
    ));
    text.push_str("# EOF\n");
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Teamster controller",
        description = "Cluster placement of VMs by their network reservations."
    ),
    paths(
        cluster,
        register,
        remove_host,
        report,
        adopt,
        power_on,
        set_vm,
        power_off,
        set_quota
    ),
    components(schemas(
        ClusterView,
        view::HostView,
        view::UplinkHeadroom,
        view::VmView,
        view::Assignment,
        HostShape,
        super::state::UplinkRecord,
        HostReport,
        PowerOn,
        VmChange,
        Quota,
        Outcome,
        MigrationRecord,
        FaultRecord,
        ErrorBody
    ))
)]
struct Document;

async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(Document::openapi())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store that cannot be written (a full disk), or (`true`) whose controller no longer
    /// leads.
    struct Unwritable(bool);

    impl Store for Unwritable {
        fn load(&self) -> Result<Option<ClusterState>, String> {
            Ok(None)
        }
        fn save(&self, _: &ClusterState, _: &super::super::records::Delta) -> Result<(), SaveError> {
            Err(match self.0 {
                false => SaveError::Failed("the disk is full".into()),
                true => SaveError::Stopping("this controller no longer leads".into()),
            })
        }
        fn describe(&self) -> String {
            "unwritable".into()
        }
    }

    /// A report whose change the store cannot keep is answered all the same, the host heard,
    /// by a controller that goes on; a controller that stops (it no longer leads) refuses it
    /// and hears nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_report_not_kept_is_heard_unless_the_controller_stops() {
        for stops in [false, true] {
            let shape: HostShape = serde_json::from_str(r#"{"uplinks": [{"name": "u", "capacity": "1G"}]}"#).unwrap();
            let mut state = ClusterState::default();
            state.register("h", shape, 1).unwrap();
            let s = ControllerState::new(state, Box::new(Unwritable(stops)));
            // The uplink down: a change, which the store does not keep.
            let r: HostReport = serde_json::from_str(r#"{"links": {"u": false}}"#).unwrap();
            let answered = report(State(s.clone()), Path("h".to_string()), Body(r)).await;
            let heard_s = s.lock().await.state.hosts["h"].reported_s;
            match stops {
                false => {
                    assert!(answered.is_ok(), "answered with what stands");
                    assert!(heard_s > 1, "heard");
                }
                true => {
                    let e = answered.err().unwrap();
                    assert_eq!(e.0, StatusCode::SERVICE_UNAVAILABLE);
                    assert!(e.1.contains("no longer leads"), "{}", e.1);
                    assert_eq!(heard_s, 1, "not heard by a controller that stops");
                }
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_change_the_store_cannot_keep_is_refused_and_changes_nothing() {
        let s = ControllerState::new(ClusterState::default(), Box::new(Unwritable(false)));
        let shape: HostShape = serde_json::from_str(r#"{"uplinks": [{"name": "u", "capacity": "1G"}]}"#).unwrap();
        let e = change(&s, |c, now| c.register("h", shape, now)).await.err().unwrap();
        assert_eq!(e.0, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            e.1.contains("the disk is full") && e.1.contains("nothing changed"),
            "{}",
            e.1
        );
        assert_eq!(s.lock().await.state, ClusterState::default());
    }
}
