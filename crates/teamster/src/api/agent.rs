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
//! again; each distinct failure is noted in the event log once.

use super::routes::{apply, check_running};
use super::ApiState;
use crate::controller::view::Assignment;
use crate::ctl::{request, Target};
use crate::live::config::{PortFile, PortOrigin, SwitchFile};
use crate::live::controller_config::ControllerSection;
use serde_json::json;
use std::collections::BTreeMap;

/// Runs the agent until the process ends.
pub async fn run(state: ApiState, section: ControllerSection) {
    let target = Target {
        socket: (section.socket.clone()).unwrap_or_else(|| crate::controller::DEFAULT_SOCKET.into()),
        url: section.url.clone(),
        token_file: section.token_file.clone(),
    };
    let mut registered = false;
    let mut failing: Option<String> = None;
    let mut tick = tokio::time::interval(section.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match turn(&state, &section, &target, &mut registered).await {
            Ok(notes) => {
                let mut notes = notes;
                if failing.take().is_some() {
                    notes.insert(0, format!("controller: reached again as host {}", section.host));
                }
                if !notes.is_empty() {
                    apply(&state, None, notes).await;
                }
            }
            Err(e) => {
                if failing.as_ref() != Some(&e) {
                    apply(
                        &state,
                        None,
                        vec![format!("controller: {e}; the VMs here stay as they are")],
                    )
                    .await;
                    failing = Some(e);
                }
            }
        }
    }
}

/// One report and what follows from it; the notes for the event log.
async fn turn(
    state: &ApiState,
    section: &ControllerSection,
    target: &Target,
    registered: &mut bool,
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    let host = &section.host;
    let snapshot = state.snapshots.borrow().clone();
    if !*registered {
        let shape = shape(&state.config.lock().await.clone(), &snapshot, section);
        let a = request(
            target,
            "PUT",
            &format!("/api/v1/hosts/{}", crate::ctl::segment(host)),
            Some(shape),
        )
        .await?;
        if a.status != 200 {
            return Err(format!(
                "registering as {host} refused ({}): {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            ));
        }
        *registered = true;
        notes.push(format!("controller: registered as host {host}"));
    }
    let links: BTreeMap<&str, bool> = snapshot.uplinks.iter().map(|u| (u.name.as_str(), u.in_use)).collect();
    let attached: Vec<&str> = (snapshot.ports.iter())
        .filter(|p| p.origin == PortOrigin::Assigned && p.attached)
        .map(|p| p.name.as_str())
        .collect();
    let body = json!({ "links": links, "attached": attached });
    let path = format!("/api/v1/hosts/{}/report", crate::ctl::segment(host));
    let a = request(target, "POST", &path, Some(body)).await?;
    if a.status == 404 {
        *registered = false;
        return Err(format!("the controller does not know host {host}; registering again"));
    }
    if a.status != 200 {
        return Err(format!(
            "report refused ({}): {}",
            a.status,
            String::from_utf8_lossy(&a.body)
        ));
    }
    let assigned: Vec<Assignment> =
        serde_json::from_slice(&a.body).map_err(|e| format!("unexpected answer to the report: {e}"))?;
    notes.extend(attach(state, section, &assigned).await);
    Ok(notes)
}

/// The host's shape as the controller takes it: uplinks at their running capacities with their
/// link states, traffic classes, pools, derived nodes, the reservation cap.
fn shape(f: &SwitchFile, s: &crate::live::snapshot::Snapshot, section: &ControllerSection) -> serde_json::Value {
    let uplinks: Vec<serde_json::Value> = (s.uplinks.iter())
        .map(|u| json!({ "name": u.name, "capacity": u.capacity_bps.to_string(), "up": u.in_use }))
        .collect();
    json!({
        "uplinks": uplinks,
        "traffic_classes": f.traffic_classes,
        "pools": f.pools,
        "derived": section.derived,
        "reservation_cap": f.reservation_cap,
    })
}

/// The port of assignment `a`, as this host attaches it.
fn port_of(f: &SwitchFile, section: &ControllerSection, a: &Assignment) -> Result<PortFile, String> {
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

/// Brings the assigned ports in line with `assigned`; the notes of what changed or was refused.
async fn attach(state: &ApiState, section: &ControllerSection, assigned: &[Assignment]) -> Vec<String> {
    let mut config = state.config.lock().await;
    let mut new = config.clone();
    let mut notes = Vec::new();
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
    for a in assigned {
        let want = match port_of(&new, section, a) {
            Ok(p) => p,
            Err(e) => {
                notes.push(format!("controller: {e}; not attached"));
                continue;
            }
        };
        match new.ports.iter().position(|p| p.name == a.vm) {
            Some(i) if new.ports[i].origin != PortOrigin::Assigned => {
                notes.push(format!(
                    "controller: VM {} has the name of a port of this switch; not attached",
                    a.vm
                ));
            }
            Some(i) if key(&new.ports[i]) != key(&want) => {
                notes.push(format!("port {}: the controller changed its controls", a.vm));
                new.ports[i] = want;
            }
            Some(_) => {}
            None => {
                notes.push(format!(
                    "port {}: VM {} is assigned here; attached on {}",
                    a.vm, a.vm, want.interface
                ));
                new.ports.push(want);
            }
        }
    }
    if new.ports.iter().map(key).eq(config.ports.iter().map(key)) {
        return notes;
    }
    match check_running(state, &new) {
        Ok(plan) => {
            if apply(state, Some(plan), std::mem::take(&mut notes)).await.is_some() {
                *config = new;
            }
        }
        Err(e) => notes.push(format!(
            "controller: the assigned ports are refused here, nothing changed: {e}"
        )),
    }
    notes
}
