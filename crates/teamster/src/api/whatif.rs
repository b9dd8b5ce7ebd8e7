//! `POST /api/v1/whatif`: what a change would do, answered by the simulator from the switch's
//! own recent past, without touching the switch.
//!
//! The past is the running configuration (its uplinks at the capacities they run at, its port
//! groups, NetIOC tree and ports; the uplinks that were down, down) as a fluid scenario whose
//! ports offer, second by second, the send and receive rates of each second that
//! [`super::history`] kept for them over the window, each at its own time (a port missing from
//! a second's point, past the busiest 64, offered nothing then). The simulator applies the
//! changes to it, runs the past and the changed past, and compares them (`teamster_sim::whatif`
//! has the model and what it leaves out). A change out of form is a 422; one that does not fit
//! this switch (an unknown name, a reservation admission control refuses) is a 409 naming it,
//! as is a window longer than the history kept, saying how much is kept.
//!
//! The daemon does not link the simulator: it runs `teamster-sim --whatif` from beside its own
//! binary (only if root alone can change it), the request on its standard input and the answer
//! on its output, as a process of its own: user nobody, nice 10, at most [`CPU_S`] seconds of
//! CPU, [`MEMORY`] bytes of address space and [`WALL_S`] seconds, no core dump; one at a time
//! (a second request meanwhile is a 429), killed if its request is dropped. A window is at most
//! the hour the history keeps. Nothing of it runs on the data plane's threads, nor the past's
//! making on the API's; a simulator that fails or is killed fails the request, never the switch.

use super::changes::{bandwidth_schema, limit_schema, policy_schema, present, shares_schema, some};
use super::history::{Point, Queue};
use super::{ApiError, ApiState};
use crate::http::body::Body;
use crate::live::config::SwitchFile;
use crate::live::snapshot::Snapshot;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value as JsonValue};
use std::process::Stdio;
use teamster_core::ioc::Shares;
use teamster_core::teaming::Policy;
use teamster_core::units::Bandwidth;
use toml::{Table, Value};

/// The window when the request names none: ten minutes.
pub const DEFAULT_WINDOW_S: u64 = 600;
/// CPU seconds a what-if's simulator may use (an hour's window over a few hundred ports takes
/// a few).
pub const CPU_S: u64 = 60;
/// Address space a what-if's simulator may map, in bytes.
pub const MEMORY: u64 = 2 << 30;

/// A what-if: the changes, each kind in a list of its own (applied in this order: ports'
/// controls, classes' and pools' controls, uplinks down, uplinks' capacities, policies,
/// failover orders, ports added, ports removed), and the window of the past they are applied
/// to. No change at all asks how well the model fits the past.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WhatIf {
    /// Seconds of the switch's past, a whole number up to 3600 (default 600). (Read as a number:
    /// JSON's 600.0 is the integer 600.)
    #[serde(default, deserialize_with = "some")]
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 3600, required = false, nullable = false)]
    pub window_s: Option<f64>,
    /// Ports' NetIOC controls; those left out keep their value.
    #[serde(default)]
    pub ports: Vec<PortWhatIf>,
    /// Traffic classes' (by class name: vm, nfs, ...) or pools' NetIOC controls; those left
    /// out keep their value.
    #[serde(default)]
    pub nodes: Vec<NodeWhatIf>,
    /// Uplinks down for the whole window.
    #[serde(default)]
    pub uplinks_down: Vec<String>,
    /// Uplinks at another capacity.
    #[serde(default)]
    pub uplink_capacities: Vec<UplinkCapacity>,
    /// Port groups' teaming policies.
    #[serde(default)]
    pub policies: Vec<GroupPolicy>,
    /// Port groups' failover orders.
    #[serde(default)]
    pub failover_orders: Vec<FailoverOrder>,
    /// Ports added, each sending `tx` all along.
    #[serde(default)]
    pub add_ports: Vec<PortAdded>,
    /// Ports removed.
    #[serde(default)]
    pub remove_ports: Vec<String>,
    /// The model: "fluid" (the default: rates a second, the whole window) or "packet" (queues
    /// and TCP's windows, each port at its mean demand, at most 10 s of simulated time).
    #[serde(default)]
    #[schema(required = false)]
    pub fidelity: Fidelity,
}

/// Which model answers a what-if (as `teamster_sim::whatif::Fidelity`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Fidelity {
    #[default]
    Fluid,
    Packet,
}

impl Fidelity {
    fn name(self) -> &'static str {
        match self {
            Fidelity::Fluid => "fluid",
            Fidelity::Packet => "packet",
        }
    }
}

/// A port's controls in a what-if (as `PATCH /api/v1/ports/{name}` takes them).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PortWhatIf {
    pub port: String,
    /// Minimum guaranteed send rate, e.g. "500M".
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = bandwidth_schema, required = false)]
    pub reservation: Option<Bandwidth>,
    /// 1-100, or "low", "normal", "high".
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = shares_schema, required = false)]
    pub shares: Option<Shares>,
    /// Cap on the send rate; null removes the limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(schema_with = limit_schema, required = false)]
    pub limit: Option<Option<Bandwidth>>,
}

/// A traffic class's or pool's controls in a what-if (as `PATCH /api/v1/netioc/{node}` takes
/// them).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeWhatIf {
    /// A traffic class (vm, nfs, ...) or a pool's name.
    pub node: String,
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = bandwidth_schema, required = false)]
    pub reservation: Option<Bandwidth>,
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = shares_schema, required = false)]
    pub shares: Option<Shares>,
    /// Null removes the limit.
    #[serde(default, deserialize_with = "present")]
    #[schema(schema_with = limit_schema, required = false)]
    pub limit: Option<Option<Bandwidth>>,
}

/// A port group's failover order.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailoverOrder {
    pub group: String,
    /// Active uplinks, in order.
    pub active: Vec<String>,
    /// Standby uplinks, in order (left as they are if absent).
    #[serde(default, deserialize_with = "some")]
    #[schema(required = false, nullable = false)]
    pub standby: Option<Vec<String>>,
}

/// An uplink at another capacity.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UplinkCapacity {
    pub uplink: String,
    #[schema(schema_with = bandwidth_schema)]
    pub capacity: Bandwidth,
}

/// A port group's teaming policy.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupPolicy {
    pub group: String,
    #[schema(schema_with = policy_schema)]
    pub policy: Policy,
}

/// A port added.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PortAdded {
    pub name: String,
    pub group: String,
    /// What it sends: a rate all along ("2G"), or a profile over the window.
    #[schema(schema_with = sends_schema)]
    pub tx: Sends,
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = bandwidth_schema, required = false)]
    pub reservation: Option<Bandwidth>,
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = bandwidth_schema, required = false)]
    pub limit: Option<Bandwidth>,
}

/// What a port added sends: a rate all along, or a profile over the window.
#[derive(Debug, Clone)]
pub enum Sends {
    Rate(Bandwidth),
    Profile(Profile),
}

impl<'de> Deserialize<'de> for Sends {
    /// An object is a profile (its own errors kept), anything else a rate.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = JsonValue::deserialize(d)?;
        if v.is_object() {
            Profile::deserialize(v)
                .map(Sends::Profile)
                .map_err(serde::de::Error::custom)
        } else {
            Bandwidth::deserialize(v)
                .map(Sends::Rate)
                .map_err(serde::de::Error::custom)
        }
    }
}

/// [`Sends`] in the OpenAPI document: a bandwidth or a [`Profile`], whose kinds take no field
/// they do not name (as its `deny_unknown_fields` says; utoipa does not carry that to an enum's
/// variants).
fn sends_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{AdditionalProperties, Schema};
    use utoipa::openapi::RefOr;
    let mut profile = <Profile as utoipa::PartialSchema>::schema();
    if let RefOr::T(Schema::OneOf(kinds)) = &mut profile {
        for kind in &mut kinds.items {
            if let RefOr::T(Schema::Object(o)) = kind {
                o.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
            }
        }
    }
    utoipa::openapi::schema::OneOfBuilder::new()
        .item(bandwidth_schema())
        .item(profile)
        .description(Some("a rate all along, or a profile over the window"))
        .into()
}

/// A port's demand over a what-if's window (seconds from its start), as the simulator's
/// demand curves take it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Profile {
    /// `rate` all along.
    Constant {
        #[schema(schema_with = bandwidth_schema)]
        rate: Bandwidth,
    },
    /// `from` until `start_s`, linear to `to` at `end_s`, `to` afterwards.
    Ramp {
        #[schema(schema_with = bandwidth_schema)]
        from: Bandwidth,
        #[schema(schema_with = bandwidth_schema)]
        to: Bandwidth,
        start_s: f64,
        end_s: f64,
    },
    /// `before` until `at_s`, `after` from then on.
    Step {
        #[schema(schema_with = bandwidth_schema)]
        before: Bandwidth,
        #[schema(schema_with = bandwidth_schema)]
        after: Bandwidth,
        at_s: f64,
    },
    /// `rate` for `on_s`, nothing for `off_s`, repeating, shifted by `offset_s`.
    OnOff {
        #[schema(schema_with = bandwidth_schema)]
        rate: Bandwidth,
        on_s: f64,
        off_s: f64,
        #[serde(default)]
        offset_s: f64,
    },
}

impl Profile {
    /// As the simulator's `DemandSpec` reads it (rates as bits/s).
    fn json(&self) -> JsonValue {
        let r = |b: &Bandwidth| json!(b.bps().to_string());
        match self {
            Profile::Constant { rate } => json!({ "kind": "constant", "rate": r(rate) }),
            Profile::Ramp {
                from,
                to,
                start_s,
                end_s,
            } => json!({ "kind": "ramp", "from": r(from), "to": r(to), "start_s": start_s, "end_s": end_s }),
            Profile::Step { before, after, at_s } => {
                json!({ "kind": "step", "before": r(before), "after": r(after), "at_s": at_s })
            }
            Profile::OnOff {
                rate,
                on_s,
                off_s,
                offset_s,
            } => json!({ "kind": "on-off", "rate": r(rate), "on_s": on_s, "off_s": off_s, "offset_s": offset_s }),
        }
    }
}

impl WhatIf {
    /// The changes as the simulator's `--whatif` reads them (`teamster_sim::whatif::Change`),
    /// in order, each with where the request has it (`ports[0]`), for its errors.
    fn changes(&self) -> (Vec<JsonValue>, Vec<String>) {
        let rate = |b: &Bandwidth| json!(b.bps().to_string());
        let controls = |mut c: JsonValue, r: &Option<Bandwidth>, s: &Option<Shares>, l: &Option<Option<Bandwidth>>| {
            if let Some(r) = r {
                c["reservation"] = rate(r);
            }
            if let Some(s) = s {
                c["shares"] = json!(s.get());
            }
            match l {
                Some(Some(l)) => c["limit"] = rate(l),
                Some(None) => c["limit"] = json!("none"),
                None => {}
            }
            c
        };
        let mut out = Vec::new();
        let mut at = Vec::new();
        let mut push = |c: JsonValue, list: &str, i: usize| {
            out.push(c);
            at.push(format!("{list}[{i}]"));
        };
        for (i, p) in self.ports.iter().enumerate() {
            let c = json!({ "kind": "port", "port": p.port });
            push(controls(c, &p.reservation, &p.shares, &p.limit), "ports", i);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let c = json!({ "kind": "node", "node": n.node });
            push(controls(c, &n.reservation, &n.shares, &n.limit), "nodes", i);
        }
        for (i, u) in self.uplinks_down.iter().enumerate() {
            push(json!({ "kind": "uplink-down", "uplink": u }), "uplinks_down", i);
        }
        for (i, u) in self.uplink_capacities.iter().enumerate() {
            let c = json!({ "kind": "uplink-capacity", "uplink": u.uplink, "capacity": rate(&u.capacity) });
            push(c, "uplink_capacities", i);
        }
        for (i, g) in self.policies.iter().enumerate() {
            push(
                json!({ "kind": "policy", "group": g.group, "policy": g.policy.name() }),
                "policies",
                i,
            );
        }
        for (i, o) in self.failover_orders.iter().enumerate() {
            let mut c = json!({ "kind": "order", "group": o.group, "active": o.active });
            if let Some(s) = &o.standby {
                c["standby"] = json!(s);
            }
            push(c, "failover_orders", i);
        }
        for (i, p) in self.add_ports.iter().enumerate() {
            let mut c = json!({ "kind": "add-port", "name": p.name, "group": p.group });
            match &p.tx {
                Sends::Rate(tx) => c["tx"] = rate(tx),
                Sends::Profile(profile) => c["profile"] = profile.json(),
            }
            if let Some(r) = &p.reservation {
                c["reservation"] = rate(r);
            }
            if let Some(l) = &p.limit {
                c["limit"] = rate(l);
            }
            push(c, "add_ports", i);
        }
        for (i, p) in self.remove_ports.iter().enumerate() {
            push(json!({ "kind": "remove-port", "port": p }), "remove_ports", i);
        }
        (out, at)
    }
}

/// One what-if at a time: each holds a simulator's memory for its length. Held by the request
/// (with its child, killed if the request is dropped), never waited for: a second request while
/// one runs is told to ask again.
static RUNNING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a what-if may take, in wall-clock time, before its simulator is killed.
pub const WALL_S: u64 = 120;

#[utoipa::path(post, path = "/api/v1/whatif", request_body = WhatIf,
    responses((status = 200, description = "per port its measured, modelled and predicted rate, whether its reservation holds and its uplink; per uplink its utilisation; the moves; the notes; the changed scenario"),
        (status = 400, body = super::ErrorBody), (status = 408, body = super::ErrorBody),
        (status = 409, body = super::ErrorBody,
        description = "an unknown port, uplink or group, a change admission control refuses, a window past the history kept, a question the packet model cannot take on this switch"),
        (status = 413, body = super::ErrorBody), (status = 415, body = super::ErrorBody),
        (status = 422, body = super::ErrorBody, description = "a change or window out of form"),
        (status = 429, body = super::ErrorBody, description = "another what-if is running"),
        (status = 500, body = super::ErrorBody, description = "the simulator failed or ran out of time"),
        (status = 503, body = super::ErrorBody, description = "the simulator is not installed beside teamster, or not safe to run")))]
pub async fn whatif(State(s): State<ApiState>, Body(w): Body<WhatIf>) -> Result<Json<JsonValue>, ApiError> {
    let asked = w.window_s.unwrap_or(DEFAULT_WINDOW_S as f64);
    let window = asked as u64;
    if asked.fract() != 0.0 || !(1.0..=super::history::POINTS as f64).contains(&asked) {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "window_s: {asked}: expected a whole number of seconds, 1 to {}",
                super::history::POINTS
            ),
        ));
    }
    let Ok(_one) = RUNNING.try_lock() else {
        return Err(ApiError(
            StatusCode::TOO_MANY_REQUESTS,
            "another what-if is running; ask again when it has answered".into(),
        ));
    };
    let snapshot = s.snapshots.borrow().clone();
    let points = {
        let h = s
            .history
            .lock()
            .map_err(|_| ApiError(StatusCode::INTERNAL_SERVER_ERROR, "history".into()))?;
        h.since(snapshot.unix_ms.saturating_sub(window * 1000))
    };
    // What the points span (they are a second or a little more apart).
    let kept_s = match (points.first(), points.last()) {
        (Some(a), Some(b)) => (b.unix_ms - a.unix_ms) / 1000 + 1,
        _ => 0,
    };
    if kept_s + 2 < window {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("window_s: {window}: the switch has kept {kept_s} s of its past so far"),
        ));
    }
    let config = s.config.lock().await.clone();
    // Built off the API's thread: an hour of points over many ports is some work.
    let (scenario, evidence) = tokio::task::spawn_blocking(move || {
        let scenario = past(&config, &snapshot, &points)?;
        Ok::<_, String>((scenario, evidence(&config, &points)))
    })
    .await
    .map_err(|_| ApiError(StatusCode::INTERNAL_SERVER_ERROR, "the what-if's thread failed".into()))?
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    let (changes, at) = w.changes();
    simulate(&json!({
        "scenario": scenario,
        "changes": changes,
        "evidence": evidence,
        "fidelity": w.fidelity.name(),
    }))
    .await
    .map(Json)
    .map_err(|ApiError(status, message)| ApiError(status, in_request_terms(&message, &at)))
}

/// `message` with the simulator's `changes[i]` named as the request has it (`ports[0]`): the
/// simulator sees one list, the request has one a kind.
fn in_request_terms(message: &str, at: &[String]) -> String {
    let Some(rest) = message.strip_prefix("changes[") else {
        return message.to_string();
    };
    let Some((i, tail)) = rest.split_once(']') else {
        return message.to_string();
    };
    match i.parse::<usize>().ok().and_then(|i| at.get(i)) {
        Some(name) => format!("{name}{tail}"),
        None => message.to_string(),
    }
}

/// The simulator beside this binary, if root alone can change it (the daemon runs it as root,
/// then drops to nobody): a plain file owned by root in a directory owned by root, neither
/// writable by group or others. Else 503, naming what is wrong.
fn simulator() -> Result<std::path::PathBuf, ApiError> {
    use std::os::unix::fs::MetadataExt;
    let unavailable = |m: String| ApiError(StatusCode::SERVICE_UNAVAILABLE, m);
    let exe = std::env::current_exe().map_err(|e| unavailable(format!("cannot tell where teamster is: {e}")))?;
    let sim = exe.with_file_name("teamster-sim");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(sim);
    }
    let dir = sim.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    for (p, file) in [(&sim, true), (&dir, false)] {
        let m = std::fs::symlink_metadata(p).map_err(|e| {
            unavailable(format!(
                "the what-if runs the simulator, {}: {e} (it is installed beside teamster)",
                sim.display()
            ))
        })?;
        let kind_ok = if file {
            m.file_type().is_file()
        } else {
            m.file_type().is_dir()
        };
        if !kind_ok || m.uid() != 0 || m.mode() & 0o022 != 0 {
            return Err(unavailable(format!(
                "not running the simulator: {} must be a {} owned by root and writable by root alone",
                p.display(),
                if file { "plain file" } else { "directory" }
            )));
        }
    }
    Ok(sim)
}

/// Runs `teamster-sim --whatif` on `request`, bounded as the module documentation says; a
/// dropped request kills it.
async fn simulate(request: &JsonValue) -> Result<JsonValue, ApiError> {
    let sim = simulator()?;
    let mut cmd = tokio::process::Command::new(&sim);
    cmd.arg("--whatif")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: between fork and exec, only async-signal-safe calls (setrlimit, setpriority,
    // setgroups, setgid, setuid) on the child's own limits and identity.
    unsafe {
        cmd.pre_exec(|| {
            let limit = |what, n: u64| {
                let l = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(what, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            };
            limit(libc::RLIMIT_CPU, CPU_S)?;
            limit(libc::RLIMIT_AS, MEMORY)?;
            limit(libc::RLIMIT_CORE, 0)?;
            libc::setpriority(libc::PRIO_PROCESS, 0, 10);
            // It reads its input and writes its answer: it needs no privilege (nobody).
            if libc::geteuid() == 0
                && (libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| {
        let status = if e.kind() == std::io::ErrorKind::NotFound {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        ApiError(
            status,
            format!("the what-if runs the simulator, {}: {e}", sim.display()),
        )
    })?;
    let input = serde_json::to_vec(request).map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let mut stdin = child.stdin.take();
    let run = async move {
        if let Some(s) = stdin.as_mut() {
            // The simulator reads all of it before it answers; a write that fails shows in its
            // exit.
            let _ = tokio::io::AsyncWriteExt::write_all(s, &input).await;
        }
        drop(stdin);
        child.wait_with_output().await
    };
    let out = tokio::time::timeout(std::time::Duration::from_secs(WALL_S), run)
        .await
        .map_err(|_| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the what-if took longer than {WALL_S} s; its simulator was stopped (try a shorter window)"),
            )
        })?
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, format!("the simulator: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let msg = err.trim().trim_start_matches("error: ").to_string();
        // Exit 2: the changes do not fit this switch (a name it does not have, a reservation
        // admission control refuses): a conflict with its state, as the other changes' are.
        return Err(match out.status.code() {
            Some(2) => ApiError(StatusCode::CONFLICT, msg),
            // Exit 4: the model asked for cannot take this question on this switch (a host too
            // fast for the packet model's bound, a group with every uplink down): a conflict
            // with its state, as exit 2's.
            Some(4) => ApiError(StatusCode::CONFLICT, msg),
            _ => ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the simulator stopped ({}): {msg}", out.status),
            ),
        });
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the simulator's answer: {e}"),
        )
    })
}

/// The switch's past over `points` as a fluid scenario's text (see the module documentation):
/// the configuration's host tables, its uplinks at the capacities `snapshot` shows, and its
/// ports offering what the points measured.
pub(crate) fn past(config: &SwitchFile, snapshot: &Snapshot, points: &[Point]) -> Result<String, String> {
    let mut doc = Table::new();
    doc.insert("name".into(), Value::String("the switch's past".into()));
    doc.insert(
        "description".into(),
        Value::String(format!("{} s of the running switch, a point a second", points.len())),
    );
    // Each point at its own time since the first (they are a second or a little more apart).
    let first = points.first().map_or(0, |p| p.unix_ms);
    let at = |p: &Point| (p.unix_ms - first) as f64 / 1000.0;
    let span = points.last().map_or(0.0, at);
    doc.insert("duration_s".into(), Value::Float((span + 1.0).floor()));
    // A second a step, or finer where Load-Based Teaming's window asks it (its rule reads the
    // window's last tenth).
    doc.insert("step_s".into(), Value::Float((config.lbt.window_s / 10.0).min(1.0)));
    doc.insert("lbt".into(), value(&config.lbt)?);
    if let Some(cap) = config.reservation_cap {
        doc.insert("reservation_cap".into(), Value::Float(cap));
    }
    let uplinks = config
        .uplinks
        .iter()
        .map(|u| {
            let bps = snapshot
                .uplinks
                .iter()
                .find(|v| v.name == u.name)
                .map(|v| v.capacity_bps)
                .filter(|b| *b > 0)
                .or(u.capacity.map(|c| c.bps()))
                .ok_or_else(|| format!("uplink `{}`: no capacity known", u.name))?;
            let mut t = Table::new();
            t.insert("name".into(), Value::String(u.name.clone()));
            t.insert("capacity".into(), Value::String(bps.to_string()));
            Ok(Value::Table(t))
        })
        .collect::<Result<Vec<_>, String>>()?;
    doc.insert("uplinks".into(), Value::Array(uplinks));
    // Uplinks that carried nothing (down, administratively or by their carrier) are down all
    // along.
    let down: Vec<Value> = config
        .uplinks
        .iter()
        .filter(|u| {
            snapshot
                .uplinks
                .iter()
                .find(|v| v.name == u.name)
                .is_some_and(|v| v.link != "up" || v.admin == "down")
        })
        .map(|u| {
            let mut e = Table::new();
            e.insert("kind".into(), Value::String("link-down".into()));
            e.insert("at_s".into(), Value::Float(0.0));
            e.insert("uplink".into(), Value::String(u.name.clone()));
            Value::Table(e)
        })
        .collect();
    if !down.is_empty() {
        doc.insert("events".into(), Value::Array(down));
    }
    let list = |items: Vec<Value>| Value::Array(items);
    let groups = config.port_groups.iter().map(value).collect::<Result<Vec<_>, _>>()?;
    doc.insert("port_groups".into(), list(groups));
    let classes = config
        .traffic_classes
        .iter()
        .map(value)
        .collect::<Result<Vec<_>, _>>()?;
    doc.insert("traffic_classes".into(), list(classes));
    let pools = config.pools.iter().map(value).collect::<Result<Vec<_>, _>>()?;
    doc.insert("pools".into(), list(pools));
    // Each point's samples by port name, once.
    let by_name: Vec<std::collections::HashMap<&str, [f64; 2]>> = points
        .iter()
        .map(|pt| {
            pt.ports
                .iter()
                .map(|s| (s.name.as_str(), s.last.unwrap_or([s.tx, s.rx])))
                .collect()
        })
        .collect();
    let mut ports = Vec::new();
    for p in &config.ports {
        let Value::Table(mut t) = value(p)? else {
            return Err(format!("port `{}`: not a table", p.name));
        };
        // What the host model has of a port, no more (its interface is the switch's business).
        for key in ["interface", "backend", "mac_takeover"] {
            t.remove(key);
        }
        let series = |tx: bool| {
            // A port missing from a point (past the busiest 64) offered nothing then; a rate
            // that is not a number, nothing either.
            let pts: Vec<Value> = points
                .iter()
                .zip(&by_name)
                .map(|(pt, names)| {
                    let [t, r] = names.get(p.name.as_str()).copied().unwrap_or([0.0, 0.0]);
                    let rate = if tx { t } else { r };
                    let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
                    Value::Array(vec![Value::Float(at(pt)), Value::Float(rate)])
                })
                .collect();
            let mut d = Table::new();
            d.insert("kind".into(), Value::String("points".into()));
            d.insert(
                "points".into(),
                Value::Array(if pts.is_empty() {
                    vec![Value::Array(vec![Value::Float(0.0), Value::Float(0.0)])]
                } else {
                    pts
                }),
            );
            Value::Table(d)
        };
        t.insert("tx".into(), series(true));
        t.insert("rx".into(), series(false));
        ports.push(Value::Table(t));
    }
    doc.insert("ports".into(), list(ports));
    toml::to_string(&doc).map_err(|e| format!("writing the past: {e}"))
}

/// What the points say of each configured port's NetIOC queues, as `teamster_sim::whatif::
/// Evidence` by port name, each value at its point's time since the first (as [`past`] puts
/// them): turned away, marked, and waited where the data plane counts it. A port no point has
/// queue counts for has none (it is taken to want what it was measured at).
pub(crate) fn evidence(config: &SwitchFile, points: &[Point]) -> serde_json::Map<String, JsonValue> {
    let first = points.first().map_or(0, |p| p.unix_ms);
    // Each point's queue counts by port name, once.
    let by_name: Vec<std::collections::HashMap<&str, Queue>> = points
        .iter()
        .map(|pt| {
            pt.ports
                .iter()
                .filter_map(|s| Some((s.name.as_str(), s.queue?)))
                .collect()
        })
        .collect();
    let mut out = serde_json::Map::new();
    for p in &config.ports {
        let (mut away, mut marked, mut waited, mut tcp) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (pt, names) in points.iter().zip(&by_name) {
            let t = (pt.unix_ms - first) as f64 / 1000.0;
            let Some(q) = names.get(p.name.as_str()).copied() else {
                continue;
            };
            let finite = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
            away.push(json!([t, finite(q.turned_away)]));
            marked.push(json!([t, finite(q.marked)]));
            if let Some(w) = q.waited {
                waited.push(json!([t, finite(w).min(1.0)]));
            }
            if let Some(x) = q.tcp {
                tcp.push(json!([t, finite(x).min(1.0)]));
            }
        }
        if away.is_empty() {
            continue;
        }
        let mut e = json!({ "turned_away": away, "marked": marked });
        if !waited.is_empty() {
            e["waited"] = JsonValue::Array(waited);
        }
        if !tcp.is_empty() {
            e["tcp"] = JsonValue::Array(tcp);
        }
        out.insert(p.name.clone(), e);
    }
    out
}

/// A configuration entry as TOML.
fn value<T: serde::Serialize>(v: &T) -> Result<Value, String> {
    Value::try_from(v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
