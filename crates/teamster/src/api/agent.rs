//! The host's side of the cluster controller (`[controller]`, see
//! [`crate::live::controller_config`]): every `interval_ms` it reports to the controller and
//! attaches the VMs it is told this host runs.
//!
//! A turn: register the host's shape if the controller does not know it (at start, and after
//! a 404, a controller that lost or never had it); report the uplinks' link states and the
//! assigned ports that are attached; take the answer (the VMs assigned here) and bring the
//! assigned ports in line under the API's configuration lock, as the port rules do: a port for
//! each VM (named after it, on its interface, with its MAC, group, pool and controls), removed
//! when the VM is no longer assigned here. Adding a port announces its MAC with a RARP on its
//! uplink, so the physical network learns the VM's new place after a migration. An unreachable
//! controller changes nothing here: the VMs keep running where they are, and the turn is tried
//! again; each distinct failure is noted in the event log once. The shape is sent again when
//! it changes (an uplink added, a pool changed).
//!
//! Each assigned VM's port is checked on its own: one the switch refuses (a group or pool it
//! lacks, an interface name Linux cannot have, a MAC another port has) is left out and noted
//! once, and the others attach and detach as they should. A controller whose cluster identity
//! changed (its state lost and made anew) is asked to adopt the VMs attached here, each with
//! what its port was given (`POST /api/v1/hosts/{host}/adopt`, see
//! [`crate::controller::adoption`]), and obeyed from then on; until it has adopted them, it is
//! not obeyed in detaching (the VMs here stay; noted once).
//!
//! Isolation. The controller restarts a host's VMs elsewhere once it has not heard the host
//! for its host timeout (which it says in every answer). A host that cannot report for nearly
//! that long (the timeout less [`isolation_margin`]) detaches every VM assigned to it, noted in
//! the event log, so that no VM's MAC is active here and on its new host at once; requests are
//! cut short so that a controller that does not answer cannot delay it. The next answered
//! report attaches what is assigned here then. A host that has never been answered (or by a
//! controller that does not say its timeout), or one whose `isolation` is "keep", does not
//! detach.

use super::routes::{apply, check_running, settle_claims};
use super::ApiState;
use crate::controller::view::Assignment;
use crate::http::client::{request, Target};
use crate::live::config::{PortFile, PortOrigin, SwitchFile};
use crate::live::controller_config::{is_url, ControllerSection, Isolation};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The longest a request to the controller may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the agent remembers between turns.
#[derive(Default)]
struct Memory {
    /// The shape last registered (None: register at the next turn).
    registered: Option<serde_json::Value>,
    /// The controller's cluster identity, once known.
    cluster_id: Option<u64>,
    /// Assigned VMs this switch refused, and why (each noted once).
    refused: HashMap<String, String>,
    /// When the last answered report was sent, and the controller's host timeout it told.
    answered: Option<(tokio::time::Instant, Duration)>,
    /// The assigned VMs are detached for isolation (until the next answered report).
    isolated: bool,
    /// The ports isolation detached: a controller whose state was lost meanwhile is offered
    /// them for adoption with the ones attached (they ran here until then).
    detached: Vec<PortFile>,
    /// VMs the last answer took from this host: reported detached at once, not an interval
    /// later, since their destination waits for that to attach them.
    letting_go: Vec<String>,
}

/// The longest host timeout a controller may give (its --host-timeout-s range).
const MAX_HOST_TIMEOUT_S: u64 = 3600;

/// How much sooner than the controller's host timeout a host that cannot report detaches its
/// VMs: two report intervals and a second (the controller acts on whole seconds), at most half
/// the timeout.
pub fn isolation_margin(timeout: Duration, interval: Duration) -> Duration {
    (interval * 2 + Duration::from_secs(1)).min(timeout / 2)
}

impl Memory {
    /// When this host is to detach its VMs if no report is answered before, if ever.
    fn isolation_at(&self, section: &ControllerSection) -> Option<tokio::time::Instant> {
        if section.isolation == Isolation::Keep {
            return None;
        }
        let (sent, timeout) = self.answered?;
        let interval = section.interval();
        let after = timeout.checked_sub(isolation_margin(timeout, interval))?;
        (!timeout.is_zero()).then(|| sent.checked_add(after)).flatten()
    }
}

/// Runs the agent until the process ends.
pub async fn run(state: ApiState, section: ControllerSection) {
    let mut controllers = Controllers {
        targets: targets(&section),
        current: 0,
    };
    let mut memory = Memory::default();
    let mut failing: Option<String> = None;
    let mut tick = tokio::time::interval(section.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // The isolation time has a timer of its own: a long interval between reports cannot
        // delay it. (A turn's requests end by then too.)
        let isolation = memory.isolation_at(&section).filter(|_| !memory.isolated);
        let isolate_now = async {
            match isolation {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        // Isolation first: when its time has come and a report is due too, a turn started
        // instead would run its requests past it (its bound is the isolation time, then gone).
        tokio::select! {
            biased;
            _ = isolate_now => {
                isolate(&state, &section, &mut memory).await;
                continue;
            }
            _ = tick.tick() => {}
        }
        match turn(&state, &section, &mut controllers, &mut memory).await {
            Ok(notes) => {
                let mut notes = notes;
                if failing.take().is_some() {
                    notes.insert(0, format!("controller: reached again as host {}", section.host));
                }
                if !notes.is_empty() {
                    apply(&state, None, notes).await;
                }
                let gone = std::mem::take(&mut memory.letting_go);
                if !gone.is_empty() {
                    // Once the switch shows them detached (within an interval), report again.
                    let mut shown = state.snapshots.clone();
                    let detached = shown.wait_for(|s| !(s.ports.iter()).any(|p| p.attached && gone.contains(&p.name)));
                    let _ = tokio::time::timeout(section.interval(), detached).await;
                    tick.reset_immediately();
                }
            }
            Err(e) => {
                if failing.as_ref() != Some(&e) {
                    let stay = match memory.isolation_at(&section) {
                        Some(_) if memory.isolated => "the VMs assigned here stay detached",
                        Some(_) => "the VMs here stay as they are until the isolation time",
                        None => "the VMs here stay as they are",
                    };
                    apply(&state, None, vec![format!("controller: {e}; {stay}")]).await;
                    failing = Some(e);
                }
            }
        }
    }
}

/// The controllers to report to, in the order to try them: `endpoints`, or the one `url` or
/// `socket` names (the default socket if neither).
fn targets(section: &ControllerSection) -> Vec<Target> {
    let target = |socket: Option<std::path::PathBuf>, url: Option<String>| {
        let mut t = Target {
            socket: socket.unwrap_or_else(|| crate::controller::DEFAULT_SOCKET.into()),
            url,
            token_file: section.token_file.clone(),
            ca: section.ca.clone(),
            cert: section.cert.clone(),
            key: section.key.clone(),
            tls: None,
            source: None,
        };
        // Made once here; if the files cannot be read now, each request tries again and says why.
        t.tls = crate::http::client::tls_config(&t).ok().flatten();
        t
    };
    if section.endpoints.is_empty() {
        return vec![target(section.socket.clone(), section.url.clone())];
    }
    (section.endpoints.iter())
        .map(|e| match is_url(e) {
            true => target(None, Some(e.clone())),
            false => target(Some(e.into()), None),
        })
        .collect()
}

/// The controllers this host may report to, and the one that answered last.
struct Controllers {
    targets: Vec<Target>,
    current: usize,
}

impl Controllers {
    /// Which of the targets a follower's 503 names as the leader, if any.
    fn leader_named(&self, body: &[u8]) -> Option<usize> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let url = v.get("leader")?.as_str()?.trim_end_matches('/');
        (self.targets.iter()).position(|t| t.url.as_deref().is_some_and(|u| u.trim_end_matches('/') == url))
    }

    /// One request to the controllers, bounded in time: REQUEST_TIMEOUT, or until `until`
    /// (the time to isolate) if sooner, so that controllers that do not answer cannot delay it.
    /// The one that answered last is asked first; one that cannot be reached, or answers 503
    /// (not the leader, or its store unwritable), makes way for the next, each given an equal
    /// share of the time left, so the host follows the leader by itself; a follower that names
    /// the leader (one of the targets) sends the host there next.
    async fn ask(
        &mut self,
        method: &str,
        path: &str,
        body: serde_json::Value,
        until: Option<tokio::time::Instant>,
    ) -> Result<crate::http::client::Answer, String> {
        let mut deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        if let Some(u) = until.filter(|u| *u > tokio::time::Instant::now()) {
            deadline = deadline.min(u);
        }
        let n = self.targets.len().max(1);
        let mut order: Vec<usize> = (0..n).map(|k| (self.current + k) % n).collect();
        let mut errors = Vec::new();
        for k in 0..n {
            let i = order[k];
            let Some(target) = self.targets.get(i) else { break };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let share = left / (n - k) as u32;
            let attempt = tokio::time::timeout(share, request(target, method, path, Some(body.clone()))).await;
            let name = target
                .url
                .clone()
                .unwrap_or_else(|| target.socket.display().to_string());
            match attempt {
                Ok(Ok(a)) if a.status == 503 && k + 1 < n => {
                    // A follower names the leader: ask it next, if this host was given it.
                    if let Some(j) = self.leader_named(&a.body) {
                        if let Some(at) = order[k + 1..].iter().position(|&x| x == j) {
                            order[k + 1..].swap(0, at);
                        }
                    }
                    errors.push(format!("{name}: 503"));
                }
                Ok(Ok(a)) => {
                    self.current = i;
                    return Ok(a);
                }
                Ok(Err(e)) => errors.push(format!("{name}: {e}")),
                Err(_) => errors.push(format!("{name}: no answer in time")),
            }
        }
        Err(errors.join("; "))
    }
}

/// Detaches every VM assigned here: the controller is about to restart them elsewhere.
async fn isolate(state: &ApiState, section: &ControllerSection, memory: &mut Memory) {
    let Some((sent, timeout)) = memory.answered else { return };
    memory.isolated = true;
    let assigned: Vec<PortFile> = (state.config.lock().await.ports.iter())
        .filter(|p| p.origin == PortOrigin::Assigned)
        .cloned()
        .collect();
    memory.detached.extend(assigned);
    let mut notes = vec![format!(
        "controller: no report answered for {} s, nearly its host timeout of {} s: the VMs assigned here are detached, so that none is active here and where the controller restarts it",
        sent.elapsed().as_secs(),
        timeout.as_secs()
    )];
    notes.extend(attach(state, section, &[], true, &mut memory.refused).await);
    apply(state, None, notes).await;
}

/// One report and what follows from it; the notes for the event log.
async fn turn(
    state: &ApiState,
    section: &ControllerSection,
    controllers: &mut Controllers,
    memory: &mut Memory,
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    let host = &section.host;
    let snapshot = state.snapshots.borrow().clone();
    // Link states travel in reports: the shape is registered (again) only when it changes.
    let shape = shape(&*state.config.lock().await, &snapshot, section);
    if memory.registered.as_ref() != Some(&shape) {
        let until = memory.isolation_at(section);
        let a = controllers
            .ask(
                "PUT",
                &format!("/api/v1/hosts/{}", crate::http::client::segment(host)),
                shape.clone(),
                until,
            )
            .await?;
        if a.status != 200 {
            return Err(format!(
                "registering as {host} refused ({}): {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            ));
        }
        memory.registered = Some(shape);
        notes.push(format!("controller: registered as host {host}"));
    }
    let links: BTreeMap<&str, bool> = snapshot.uplinks.iter().map(|u| (u.name.as_str(), u.in_use)).collect();
    let attached: Vec<&str> = (snapshot.ports.iter())
        .filter(|p| p.origin == PortOrigin::Assigned && p.attached)
        .map(|p| p.name.as_str())
        .collect();
    let loads: BTreeMap<&str, f64> = (snapshot.uplinks.iter())
        .map(|u| (u.name.as_str(), u.tx_utilisation * u.capacity_bps as f64))
        .collect();
    let body = json!({ "links": links, "loads": loads, "attached": attached });
    let path = format!("/api/v1/hosts/{}/report", crate::http::client::segment(host));
    let sent = tokio::time::Instant::now();
    let a = controllers
        .ask("POST", &path, body, memory.isolation_at(section))
        .await?;
    if a.status == 404 {
        memory.registered = None;
        return Err(format!("the controller does not know host {host}; registering again"));
    }
    if a.status != 200 {
        // A shape it does not take as it is (an uplink it does not know): send it again; a
        // controller that cannot save now (503) knows the host still.
        if a.status != 503 {
            memory.registered = None;
        }
        return Err(format!(
            "report refused ({}): {}",
            a.status,
            String::from_utf8_lossy(&a.body)
        ));
    }
    let told: crate::controller::api::Told =
        serde_json::from_slice(&a.body).map_err(|e| format!("unexpected answer to the report: {e}"))?;
    // The controller's own range (2-3600 s): a larger figure is not to be trusted whole.
    let timeout = Duration::from_secs(told.host_timeout_s.min(MAX_HOST_TIMEOUT_S));
    if 2 * section.interval() + Duration::from_secs(1) > timeout / 2 && !timeout.is_zero() {
        let e = format!(
            "reports every {} ms are too rare for the controller's host timeout of {} s: this host detaches its VMs {} ms after its last answer when cut off (interval_ms at most a quarter of the timeout less a second keeps a margin of two reports)",
            section.interval().as_millis(),
            timeout.as_secs(),
            (timeout - isolation_margin(timeout, section.interval())).as_millis()
        );
        if memory.refused.insert("\u{0}interval".into(), e.clone()).as_ref() != Some(&e) {
            notes.push(format!("controller: {e}"));
        }
    }
    memory.answered = Some((sent, timeout));
    if std::mem::take(&mut memory.isolated) {
        notes.push("controller: answered again: the VMs assigned here are attached".to_string());
    }
    let known = *memory.cluster_id.get_or_insert(told.cluster_id);
    if known == told.cluster_id {
        // The controller that assigned them answers: what isolation detached is its to give.
        memory.detached.clear();
        memory.letting_go = (attached.iter())
            .filter(|n| !told.assignments.iter().any(|a| a.vm == **n))
            .map(|n| n.to_string())
            .collect();
        notes.extend(attach(state, section, &told.assignments, true, &mut memory.refused).await);
        return Ok(notes);
    }
    // The controller's state was made anew: it is asked to adopt the VMs running here, and
    // obeyed once it has; until then nothing here is detached.
    let adopted = match adopt(state, section, controllers, memory, told.cluster_id).await {
        Ok(a) => a,
        Err(e) => {
            let e = format!(
                "the controller's cluster is another one ({:x}, was {known:x}): its state was made anew, and adopting the VMs here failed ({e}); they stay until they are placed again",
                told.cluster_id
            );
            if memory.refused.insert(String::new(), e.clone()).as_ref() != Some(&e) {
                notes.push(format!("controller: {e}"));
            }
            notes.extend(attach(state, section, &told.assignments, false, &mut memory.refused).await);
            return Ok(notes);
        }
    };
    notes.push(format!(
        "controller: its state was made anew ({:x}, was {known:x}); it was asked to adopt the VMs running here",
        told.cluster_id
    ));
    notes.extend(adopted.events.iter().map(|e| format!("controller: {e}")));
    memory.cluster_id = Some(told.cluster_id);
    memory.refused.remove("");
    memory.detached.clear();
    notes.extend(attach(state, section, &adopted.assignments, true, &mut memory.refused).await);
    Ok(notes)
}

/// Asks the controller (cluster `cluster_id`) to adopt the VMs attached here, each with what
/// its port was given.
async fn adopt(
    state: &ApiState,
    section: &ControllerSection,
    controllers: &mut Controllers,
    memory: &Memory,
    cluster_id: u64,
) -> Result<crate::controller::api::Adopted, String> {
    let config = state.config.lock().await;
    let attached = (config.ports.iter()).filter(|p| p.origin == PortOrigin::Assigned);
    let detached = (memory.detached.iter()).filter(|d| !config.ports.iter().any(|p| p.name == d.name));
    let running: Vec<Assignment> = (attached.chain(detached))
        .map(|p| Assignment {
            vm: p.name.clone(),
            mac: p.mac.clone(),
            group: Some(p.group.clone()),
            pool: (p.pool.clone().or_else(|| p.class.clone())).unwrap_or_else(|| "vm".into()),
            reservation: p.reservation,
            shares: p.shares.unwrap_or(teamster_core::ioc::Shares::NORMAL),
            limit: p.limit,
            moving_from: None,
        })
        .collect();
    drop(config);
    let body = json!({ "cluster_id": cluster_id, "vms": running });
    let path = format!("/api/v1/hosts/{}/adopt", crate::http::client::segment(&section.host));
    let a = controllers
        .ask("POST", &path, body, memory.isolation_at(section))
        .await?;
    if a.status != 200 {
        return Err(format!("{}: {}", a.status, String::from_utf8_lossy(&a.body)));
    }
    serde_json::from_slice(&a.body).map_err(|e| format!("unexpected answer: {e}"))
}

/// The host's shape as the controller takes it: uplinks at their running capacities, traffic
/// classes, pools, derived nodes, the reservation cap (link states come with each report).
fn shape(f: &SwitchFile, s: &crate::live::snapshot::Snapshot, section: &ControllerSection) -> serde_json::Value {
    let uplinks: Vec<serde_json::Value> = (s.uplinks.iter())
        .map(|u| json!({ "name": u.name, "capacity": u.capacity_bps.to_string() }))
        .collect();
    let mut shape = json!({
        "uplinks": uplinks,
        "traffic_classes": f.traffic_classes,
        "pools": f.pools,
        "derived": section.derived,
        "reservation_cap": f.reservation_cap,
    });
    if section.isolation == Isolation::Keep {
        shape["isolation"] = json!(section.isolation);
    }
    shape
}

/// The port of assignment `a`, as this host attaches it.
pub(super) fn port_of(f: &SwitchFile, section: &ControllerSection, a: &Assignment) -> Result<PortFile, String> {
    let mac = a
        .mac
        .clone()
        .ok_or_else(|| format!("VM {} has no MAC at the controller", a.vm))?;
    let (pool, class) = if a.pool == "vm" {
        (None, None)
    } else if f.traffic_classes.iter().any(|c| c.class == a.pool) {
        (None, Some(a.pool.clone()))
    } else {
        (Some(a.pool.clone()), None)
    };
    Ok(PortFile {
        name: a.vm.clone(),
        id: None,
        mac: Some(mac),
        group: a.group.clone().unwrap_or_else(|| section.group.clone()),
        pool,
        class,
        reservation: a.reservation,
        shares: Some(a.shares),
        limit: a.limit,
        interface: section.interface_of(&a.vm),
        backend: Default::default(),
        origin: PortOrigin::Assigned,
        owner: None,
        mac_takeover: false,
    })
}

/// What makes two ports the same port here.
fn key(p: &PortFile) -> impl PartialEq + '_ {
    let controls = (p.reservation, p.shares, p.limit);
    (
        &p.name,
        &p.interface,
        &p.mac,
        &p.group,
        &p.pool,
        &p.class,
        controls,
        &p.origin,
    )
}

/// Notes that VM `vm` is not attached for `e`, once per reason.
fn refuse(refused: &mut HashMap<String, String>, vm: &str, e: String, notes: &mut Vec<String>) {
    if refused.get(vm) != Some(&e) {
        notes.push(format!("controller: VM {vm} is assigned here but not attached: {e}"));
        // Bounded, whatever the controller sends: forgetting only notes a refusal again.
        if refused.len() >= 1024 {
            refused.clear();
        }
        refused.insert(vm.to_string(), e);
    }
}

/// Brings the assigned ports in line with `assigned` (detaching only when `detach`), each
/// port checked on its own; the notes of what changed or was refused (a refusal once).
async fn attach(
    state: &ApiState,
    section: &ControllerSection,
    assigned: &[Assignment],
    detach: bool,
    refused: &mut HashMap<String, String>,
) -> Vec<String> {
    let mut config = state.config.lock().await;
    let mut new = config.clone();
    let mut notes = Vec::new();
    if detach {
        new.ports.retain(|p| {
            let stays = p.origin != PortOrigin::Assigned || assigned.iter().any(|a| a.vm == p.name);
            if !stays {
                notes.push(format!(
                    "port {}: VM {} is no longer assigned here; detached",
                    p.name, p.name
                ));
            }
            stays
        });
    }
    for a in assigned.iter().take(crate::controller::state::MAX_VMS) {
        let want = match port_of(&new, section, a) {
            Ok(p) => p,
            Err(e) => {
                refuse(refused, &a.vm, e, &mut notes);
                continue;
            }
        };
        let mut trial = new.clone();
        match trial.ports.iter().position(|p| p.name == a.vm) {
            Some(i) if trial.ports[i].origin != PortOrigin::Assigned => {
                refuse(refused, &a.vm, "a port of this switch has its name".into(), &mut notes);
                continue;
            }
            Some(i) if key(&trial.ports[i]) == key(&want) => continue,
            Some(i) => trial.ports[i] = want,
            None => trial.ports.push(want),
        }
        match check_running(state, &trial) {
            Ok(_) => {
                let what = if new.ports.iter().any(|p| p.name == a.vm) {
                    "its controls changed"
                } else {
                    "attached"
                };
                notes.push(format!("port {}: VM {} is assigned here; {what}", a.vm, a.vm));
                refused.remove(&a.vm);
                new = trial;
            }
            Err(e) => refuse(refused, &a.vm, e, &mut notes),
        }
    }
    if new.ports.iter().map(key).eq(config.ports.iter().map(key)) {
        settle_claims(state);
        return notes;
    }
    match check_running(state, &new) {
        Ok(plan) => {
            if apply(state, Some(plan), std::mem::take(&mut notes)).await.is_some() {
                *config = new;
            }
        }
        Err(e) => {
            settle_claims(state);
            notes.push(format!(
                "controller: the assigned ports are refused here, nothing changed: {e}"
            ))
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::{isolation_margin, targets};
    use std::time::Duration;

    /// Several controllers are tried in the order given, each a socket or a URL.
    #[test]
    fn every_endpoint_is_a_target_in_order() {
        let text = "host = \"h1\"\ngroup = \"vms\"\nendpoints = [\"/run/c1.sock\", \"http://127.0.0.1:9191\"]";
        let section: crate::live::controller_config::ControllerSection = toml::from_str(text).unwrap();
        let t = targets(&section);
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[0].socket.to_str(), t[0].url.as_deref()),
            (Some("/run/c1.sock"), None)
        );
        assert_eq!(t[1].url.as_deref(), Some("http://127.0.0.1:9191"));
        let one: crate::live::controller_config::ControllerSection =
            toml::from_str("host = \"h1\"\ngroup = \"vms\"").unwrap();
        assert_eq!(
            targets(&one)[0].socket,
            std::path::PathBuf::from(crate::controller::DEFAULT_SOCKET)
        );
    }

    /// A follower's 503 that names one of the host's controllers sends it there next.
    #[test]
    fn a_follower_naming_the_leader_points_to_that_target() {
        let text = "host = \"h1\"\ngroup = \"vms\"\nendpoints = [\"/run/c1.sock\", \"http://127.0.0.1:9191\", \"http://127.0.0.1:9192\"]";
        let section: crate::live::controller_config::ControllerSection = toml::from_str(text).unwrap();
        let c = super::Controllers {
            targets: targets(&section),
            current: 0,
        };
        let said = |leader: &str| format!("{{\"error\": \"x\", \"leader\": {leader}}}").into_bytes();
        assert_eq!(c.leader_named(&said("\"http://127.0.0.1:9192/\"")), Some(2));
        assert_eq!(
            c.leader_named(&said("\"https://10.9.9.9:1\"")),
            None,
            "not one of the host's"
        );
        assert_eq!(c.leader_named(&said("null")), None);
        assert_eq!(c.leader_named(b"not json"), None);
    }

    /// A host detaches two intervals and a second before the controller's timeout, and never
    /// sooner than half of it.
    #[test]
    fn the_isolation_margin_leaves_the_controller_its_second() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(isolation_margin(s(15), s(1)), s(3));
        assert_eq!(isolation_margin(s(4), ms(200)), ms(1400));
        assert_eq!(isolation_margin(s(2), s(1)), s(1));
        assert_eq!(isolation_margin(s(15), s(60)), ms(7500));
    }
}
