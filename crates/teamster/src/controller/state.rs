//! The cluster as the controller keeps it, and every change it accepts.
//!
//! Model. The state is hosts (the shape each registered: uplinks with link state, traffic
//! classes, pools, derived nodes, reservation cap), VMs (one vNIC each: pool, reservation,
//! shares, limit, and the one host it is assigned to), pools' cluster-wide quotas, and the
//! recent migrations and faults (the last [`RECENT`] of each). A VM has exactly one host in the
//! state, always: a migration reassigns it at once and marks it `moving_from` its source until
//! the destination reports the port attached, so a state saved at any instant (a controller
//! killed mid-plan) holds every VM once.
//!
//! Every change is made on a copy, through `core::placement` (admission on every host, the
//! quotas, remediation by the fewest migrations), and replaces the state only if it holds whole:
//! a reservation no host can hold, an unknown host or VM, a bad shape is refused and changes
//! nothing. Time is passed in (`now_s`, seconds since the epoch); nothing here does I/O.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use teamster_core::host::{self, ClassEntry, HostSpec, LbtSection, PoolEntry, UplinkDesc};
use teamster_core::ioc::Shares;
use teamster_core::placement::{Cluster, Migration, Vm, Vnic};
use teamster_core::units::Bandwidth;

pub use crate::live::controller_config::Isolation;

/// How many migrations and faults the state keeps.
pub const RECENT: usize = 100;
/// How long a host may go without reporting before it takes no new VMs, by default (seconds):
/// fifteen of the agent's default one-second reports.
pub const DEFAULT_HOST_TIMEOUT_S: u64 = 15;

/// How long a host may go without reporting before it takes no new VMs (seconds); the
/// controller's `--host-timeout-s`, not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostTimeout(pub u64);

impl Default for HostTimeout {
    fn default() -> HostTimeout {
        HostTimeout(DEFAULT_HOST_TIMEOUT_S)
    }
}

/// The most hosts and VMs a controller keeps.
pub const MAX_HOSTS: usize = 1024;
pub const MAX_VMS: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UplinkRecord {
    pub name: String,
    #[schema(value_type = String, example = "10G")]
    pub capacity: Bandwidth,
    #[serde(default = "yes")]
    pub up: bool,
}

fn yes() -> bool {
    true
}

/// What a host registers: its shape, from its switch.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HostShape {
    pub uplinks: Vec<UplinkRecord>,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub traffic_classes: Vec<ClassEntry>,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub pools: Vec<PoolEntry>,
    /// Classes and pools whose reservation on the host is what its VMs there reserve.
    #[serde(default)]
    pub derived: Vec<String>,
    pub reservation_cap: Option<f64>,
    /// What the host does when cut off from the controller: with "keep" it goes on forwarding
    /// for its VMs, so they are never restarted elsewhere when it goes down.
    #[serde(default, skip_serializing_if = "Isolation::is_default")]
    pub isolation: Isolation,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostRecord {
    pub shape: HostShape,
    pub registered_s: u64,
    pub reported_s: u64,
    /// Each uplink's measured send rate at the last report, bits/s (kept in memory only: a
    /// measure, not a decision).
    #[serde(skip)]
    pub loads: BTreeMap<String, f64>,
    /// Since when the host is down (it stopped reporting: [`ClusterState::fail_silent`]);
    /// cleared by its next report or registration.
    #[serde(default)]
    pub down_since_s: Option<u64>,
    /// When it was last heard again after being down: it takes no new VMs for a host timeout
    /// after that ([`ClusterState::held_down`]).
    #[serde(default)]
    pub up_again_s: Option<u64>,
    /// When its VMs were last tried elsewhere, while it is down (in memory only).
    #[serde(skip)]
    pub restart_tried_s: u64,
    /// VMs that left it and that it has not yet reported detached: their destinations are not
    /// told to attach them until it has ([`super::handover`]).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub departing: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmRecord {
    /// The VM's MAC on its vNIC and its port group, for the host that attaches its port.
    #[serde(default)]
    pub mac: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    pub pool: String,
    pub reservation: Bandwidth,
    pub shares: Shares,
    pub limit: Option<Bandwidth>,
    pub host: String,
    /// The source of a migration its destination has not confirmed yet.
    pub moving_from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MigrationRecord {
    pub at_s: u64,
    pub vm: String,
    pub from: String,
    pub to: String,
    #[schema(value_type = String)]
    pub reservation: Bandwidth,
    /// Why it was chosen.
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FaultRecord {
    pub at_s: u64,
    pub host: String,
    pub why: String,
}

/// The whole state, as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterState {
    pub hosts: BTreeMap<String, HostRecord>,
    pub vms: BTreeMap<String, VmRecord>,
    pub quotas: BTreeMap<String, Bandwidth>,
    pub migrations: VecDeque<MigrationRecord>,
    pub faults: VecDeque<FaultRecord>,
    /// Counts accepted changes.
    pub generation: u64,
    /// This cluster's identity, drawn when its state is made: a host that sees it change is
    /// talking to a controller with another (say, a lost and recreated) state.
    #[serde(default)]
    pub cluster_id: u64,
    /// Until when hosts may offer VMs for adoption (seconds since the epoch; 0: never): set
    /// when the state is made anew ([`super::adoption`]).
    #[serde(default)]
    pub adoption_until_s: u64,
    /// Set by the controller from its arguments; not part of the stored state.
    #[serde(skip)]
    pub host_timeout: HostTimeout,
    /// The longest host timeout a controller of this state has told hosts (seconds): a
    /// controller started with a shorter one waits that much longer before it fails a host.
    #[serde(default)]
    pub host_timeout_given_s: u64,
    /// When this controller began to hear hosts (its start, or its taking the lead): a host's
    /// silence counts from its last report or from this, whichever is later, so a controller
    /// that was away does not fail every host at once. Not stored.
    #[serde(skip)]
    pub listening_since_s: u64,
    /// The hosts that did not admit their VMs after the last change, as of its generation (in
    /// memory only): the next change's "before", without building this state's placement view
    /// again.
    #[serde(skip)]
    pub violated: Cached<(u64, Vec<String>)>,
}

/// A value computed from the state and kept with it in memory: two states are equal whatever
/// their caches hold.
#[derive(Debug, Clone, Default)]
pub struct Cached<T>(pub Option<T>);

impl<T> PartialEq for Cached<T> {
    fn eq(&self, _: &Cached<T>) -> bool {
        true
    }
}

/// A refused change: the HTTP status it maps to, and why.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Malformed or out of range (400).
    Bad(String),
    /// No such host or VM (404).
    Unknown(String),
    /// Does not fit, or clashes with what is there (409).
    Conflict(String),
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Refusal::Bad(m) | Refusal::Unknown(m) | Refusal::Conflict(m) => m,
        }
    }
}

/// A VM to power on.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerOn {
    pub name: String,
    /// A host's name, or "auto" (default): placement chooses.
    #[serde(default)]
    pub host: Option<String>,
    /// Its pool (default the `vm` class).
    #[serde(default)]
    pub pool: Option<String>,
    /// The VM's MAC (unicast), which its host's port uses.
    #[serde(default)]
    pub mac: Option<String>,
    /// Its port group on the host (default: the host's own choice).
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "500M")]
    pub reservation: Option<Bandwidth>,
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "normal")]
    pub shares: Option<Shares>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub limit: Option<Bandwidth>,
}

/// Changes to a VM's controls; absent fields stay.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VmChange {
    #[schema(value_type = Option<String>, example = "4.5G")]
    pub reservation: Option<Bandwidth>,
    #[schema(value_type = Option<String>)]
    pub shares: Option<Shares>,
    /// A bandwidth, or null for none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub limit: Option<Option<Bandwidth>>,
}

/// A field given (its value, null included) as `Some`; absent fields default to `None`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<Bandwidth>>, D::Error> {
    Option::<Bandwidth>::deserialize(d).map(Some)
}

/// A host's report.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HostReport {
    /// Uplinks' link states: name -> up.
    #[serde(default)]
    pub links: BTreeMap<String, bool>,
    /// Uplinks' measured send rates: name -> bits/s.
    #[serde(default)]
    pub loads: BTreeMap<String, f64>,
    /// The VMs whose ports the host has attached.
    #[serde(default)]
    pub attached: Vec<String>,
}

/// What an accepted change did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Outcome {
    /// Where a powered-on VM went, and each host's headroom or reason.
    pub placed: Option<String>,
    pub considered: Vec<(String, String)>,
    /// Migrations the change set off.
    pub migrations: Vec<MigrationRecord>,
    /// Nothing to save: only the time of a host's report moved.
    #[serde(skip)]
    pub unchanged: bool,
    /// What happened to hosts (down, VMs that could not restart), for the controller's log.
    #[serde(skip)]
    pub events: Vec<String>,
}

impl ClusterState {
    /// The placement view of the state at `now_s`: hosts with their trees and admission
    /// capacity (the smallest uplink up; none: zero), those that stopped reporting marked
    /// unavailable, VMs where they are assigned, quotas.
    pub fn cluster(&self, now_s: u64) -> Result<Cluster, String> {
        let mut c = Cluster::default();
        for (name, h) in &self.hosts {
            let (tree, cap) = build_host(&h.shape).map_err(|e| format!("host {name}: {e}"))?;
            let capacity = (h.shape.uplinks.iter().filter(|u| u.up))
                .map(|u| u.capacity)
                .min()
                .unwrap_or(Bandwidth::ZERO);
            c.add_host(name, tree, capacity, cap)?;
            for d in &h.shape.derived {
                c.derive(name, d).map_err(|e| format!("host {name}: derived: {e}"))?;
            }
            c.set_unavailable(name, self.silent(name, now_s))?;
            c.set_closed(name, self.held_down(name, now_s))?;
        }
        for (pool, q) in &self.quotas {
            c.set_quota(pool, *q);
        }
        for (name, v) in &self.vms {
            c.assume(vm_of(name, v), &v.host)?;
        }
        Ok(c)
    }

    /// Registers host `name` (or updates its shape), then mends what no longer fits.
    pub fn register(&mut self, name: &str, shape: HostShape, now_s: u64) -> Result<Outcome, Refusal> {
        host::check_name("name", name).map_err(Refusal::Bad)?;
        build_host(&shape).map_err(Refusal::Bad)?;
        if !self.hosts.contains_key(name) && self.hosts.len() >= MAX_HOSTS {
            return Err(Refusal::Conflict(format!(
                "the cluster has {MAX_HOSTS} hosts, the most it keeps"
            )));
        }
        let mut next = self.clone();
        let registered_s = self.hosts.get(name).map_or(now_s, |h| h.registered_s);
        let was = self.hosts.get(name);
        let up_again_s = match was.and_then(|h| h.down_since_s) {
            Some(_) => Some(now_s),
            None => was.and_then(|h| h.up_again_s),
        };
        next.hosts.insert(
            name.to_string(),
            HostRecord {
                shape,
                registered_s,
                reported_s: now_s,
                loads: BTreeMap::new(),
                down_since_s: None,
                up_again_s,
                restart_tried_s: 0,
                departing: was.map(|h| h.departing.clone()).unwrap_or_default(),
            },
        );
        next.commit(now_s, Outcome::default(), self, true)
    }

    /// Powers a VM on where placement puts it (or on the host named, if it admits it).
    pub fn power_on(&mut self, req: PowerOn, now_s: u64) -> Result<Outcome, Refusal> {
        host::check_name("name", &req.name).map_err(Refusal::Bad)?;
        if self.vms.contains_key(&req.name) {
            return Err(Refusal::Conflict(format!("VM {} is already on", req.name)));
        }
        if self.vms.len() >= MAX_VMS {
            return Err(Refusal::Conflict(format!(
                "the cluster has {MAX_VMS} VMs, the most it keeps"
            )));
        }
        if let Some(m) = &req.mac {
            let mac: teamster_core::wire::MacAddr = m.parse().map_err(|e| Refusal::Bad(format!("mac: {e}")))?;
            if mac.is_multicast() || mac == teamster_core::wire::MacAddr([0; 6]) {
                return Err(Refusal::Bad(format!("mac: {mac} is not a unicast address")));
            }
            if let Some((other, _)) = self
                .vms
                .iter()
                .find(|(_, v)| v.mac.as_deref().and_then(|o| o.parse().ok()) == Some(mac))
            {
                return Err(Refusal::Conflict(format!("mac: {mac} is VM {other}'s")));
            }
        }
        if let Some(g) = &req.group {
            host::check_name("group", g).map_err(Refusal::Bad)?;
        }
        let record = VmRecord {
            mac: req.mac.clone(),
            group: req.group.clone(),
            pool: req.pool.unwrap_or_else(|| "vm".into()),
            reservation: req.reservation.unwrap_or(Bandwidth::ZERO),
            shares: req.shares.unwrap_or(Shares::NORMAL),
            limit: req.limit,
            host: String::new(),
            moving_from: None,
        };
        let spec = teamster_core::ioc::NodeSpec {
            name: req.name.clone(),
            reservation: record.reservation,
            shares: record.shares,
            limit: record.limit,
        };
        teamster_core::ioc::admission::check_controls("vm", &spec).map_err(Refusal::Bad)?;
        let mut c = self.cluster(now_s).map_err(Refusal::Conflict)?;
        let vm = vm_of(&req.name, &record);
        let mut out = Outcome::default();
        let host = match req.host.as_deref() {
            None | Some("auto") => {
                let placed = c.place(vm).map_err(|e| Refusal::Conflict(e.to_string()))?;
                out.considered = (placed.considered.iter())
                    .map(|(h, r)| {
                        (
                            h.clone(),
                            r.as_ref().map_or_else(Clone::clone, |b| format!("{b} headroom left")),
                        )
                    })
                    .collect();
                placed.host
            }
            Some(h) => {
                if !self.hosts.contains_key(h) {
                    return Err(Refusal::Unknown(format!("no host {h}")));
                }
                c.place_on(vm, h).map_err(Refusal::Conflict)?;
                h.to_string()
            }
        };
        out.placed = Some(host.clone());
        let mut next = self.clone();
        next.vms.insert(req.name, VmRecord { host, ..record });
        // The view placement made holds the VM where it went: the state's, as it now is.
        next.commit_on(c, now_s, out, self, false)
    }

    /// Changes VM `name`'s controls; if its host can no longer hold them, VMs migrate.
    pub fn set_vm(&mut self, name: &str, change: VmChange, now_s: u64) -> Result<Outcome, Refusal> {
        let Some(v) = self.vms.get(name) else {
            return Err(Refusal::Unknown(format!("no VM {name}")));
        };
        let mut next = self.clone();
        let rec = next.vms.get_mut(name).expect("found");
        rec.reservation = change.reservation.unwrap_or(v.reservation);
        rec.shares = change.shares.unwrap_or(v.shares);
        if let Some(limit) = change.limit {
            rec.limit = limit;
        }
        let spec = teamster_core::ioc::NodeSpec {
            name: name.to_string(),
            reservation: rec.reservation,
            shares: rec.shares,
            limit: rec.limit,
        };
        teamster_core::ioc::admission::check_controls("vm", &spec).map_err(Refusal::Bad)?;
        // The pools' quotas, as placement checks them: the VM's other reservations plus the new.
        let reservation = rec.reservation;
        let mut c = next.cluster(now_s).map_err(Refusal::Conflict)?;
        c.set_reservation(name, 0, reservation).map_err(Refusal::Conflict)?;
        next.commit_on(c, now_s, Outcome::default(), self, false)
    }

    /// Takes host `name` out of the cluster: its VMs restart where placement puts them;
    /// refused, changing nothing, if one fits nowhere.
    pub fn remove_host(&mut self, name: &str, now_s: u64) -> Result<Outcome, Refusal> {
        let Some(h) = self.hosts.get(name) else {
            return Err(Refusal::Unknown(format!("no host {name}")));
        };
        // A host that is heard forwards for its VMs: moving them now would make them active
        // twice, and it would register again at its next report.
        let runs = self.vms.values().any(|v| v.host == name);
        if runs && h.shape.isolation == Isolation::Keep {
            return Err(Refusal::Conflict(format!(
                "host {name} goes on forwarding for its VMs when cut off (isolation = keep), down or not: power them off before deleting it"
            )));
        }
        if runs && h.down_since_s.is_none() && self.silent(name, now_s).is_none() {
            return Err(Refusal::Conflict(format!(
                "host {name} is heard (it reported {} s ago) and runs VMs: stop its switch or wait until it is down before deleting it",
                now_s.saturating_sub(h.reported_s)
            )));
        }
        let mut next = self.clone();
        next.hosts.remove(name);
        let mut leaving: Vec<(String, VmRecord)> = Vec::new();
        next.vms.retain(|n, v| {
            let stays = v.host != name;
            if !stays {
                leaving.push((n.clone(), v.clone()));
            }
            stays
        });
        leaving.sort_by(|a, b| b.1.reservation.cmp(&a.1.reservation).then(a.0.cmp(&b.0)));
        let mut c = next.cluster(now_s).map_err(Refusal::Conflict)?;
        for (n, v) in leaving {
            let placed = c
                .place(vm_of(&n, &v))
                .map_err(|e| Refusal::Conflict(format!("host {name} cannot go: {e}")))?;
            // One still on its way here from a host that holds it waits for that host still.
            let from = (v.moving_from.clone()).filter(|src| src != name && !self.released(&n, src));
            next.vms.insert(
                n,
                VmRecord {
                    host: placed.host,
                    moving_from: from,
                    ..v
                },
            );
        }
        next.commit(now_s, Outcome::default(), self, false)
    }

    /// Powers VM `name` off: its host detaches its port.
    pub fn power_off(&mut self, name: &str, now_s: u64) -> Result<Outcome, Refusal> {
        if !self.vms.contains_key(name) {
            return Err(Refusal::Unknown(format!("no VM {name}")));
        }
        let mut next = self.clone();
        next.vms.remove(name);
        next.commit(now_s, Outcome::default(), self, false)
    }

    /// Sets pool `pool`'s cluster-wide quota; refused if what is reserved already exceeds it.
    pub fn set_quota(&mut self, pool: &str, quota: Bandwidth, now_s: u64) -> Result<Outcome, Refusal> {
        host::check_name("pool", pool).map_err(Refusal::Bad)?;
        let known = (self.hosts.values()).any(|h| {
            h.shape.pools.iter().any(|p| p.name == pool) || h.shape.traffic_classes.iter().any(|c| c.class == pool)
        });
        if !known {
            return Err(Refusal::Unknown(format!("no host has a class or pool named `{pool}`")));
        }
        let used: u64 = (self.vms.values())
            .filter(|v| v.pool == pool)
            .map(|v| v.reservation.bps())
            .sum();
        if used > quota.bps() {
            let used = Bandwidth::from_bps(used);
            return Err(Refusal::Conflict(format!(
                "pool `{pool}` reserves {used} already, above {quota}"
            )));
        }
        let mut next = self.clone();
        next.quotas.insert(pool.to_string(), quota);
        next.commit(now_s, Outcome::default(), self, false)
    }

    /// Takes host `host`'s report in place if it changes nothing but the host's time and
    /// measured rates (true), without a copy of the state; false if it needs [`Self::report`].
    /// A report that is bad or from an unknown host is refused, changing nothing.
    pub fn touch(&mut self, host: &str, r: &HostReport, now_s: u64) -> Result<bool, Refusal> {
        let (links, attached) = (&r.links, &r.attached);
        let Some(h) = self.hosts.get(host) else {
            return Err(Refusal::Unknown(format!("no host {host}: register it first")));
        };
        for (key, name) in (links.keys().map(|n| ("links", n))).chain(r.loads.keys().map(|n| ("loads", n))) {
            if !h.shape.uplinks.iter().any(|u| &u.name == name) {
                return Err(Refusal::Bad(format!("{key}: host {host} has no uplink `{name}`")));
            }
        }
        if let Some((name, bps)) = r.loads.iter().find(|(_, b)| !(b.is_finite() && **b >= 0.0)) {
            return Err(Refusal::Bad(format!("loads.{name}: {bps} is not a rate in bits/s")));
        }
        let links_same = (h.shape.uplinks.iter()).all(|u| links.get(&u.name).is_none_or(|up| *up == u.up));
        let confirms = (attached.iter()).any(|n| {
            self.vms
                .get(n)
                .is_some_and(|v| v.host == host && v.moving_from.is_some())
        });
        // A host heard again after its timeout (or down) takes VMs again: remediation may now
        // use it.
        // And one whose hold-down is over: the full path clears it, and remediation may use
        // the host again (faults waiting for room are tried).
        let held_over = h.up_again_s.is_some() && self.held_down(host, now_s).is_none();
        let back = self.silent(host, now_s).is_some() || h.down_since_s.is_some() || held_over;
        if !links_same || confirms || back || self.releases(host, attached) {
            return Ok(false);
        }
        self.heard(host, r, now_s);
        Ok(true)
    }

    /// Host `host` was heard at `now_s` with report `r`: its time and measured rates, in place
    /// (what [`Self::touch`] takes; also a report whose change the store could not keep).
    pub fn heard(&mut self, host: &str, r: &HostReport, now_s: u64) {
        if let Some(rec) = self.hosts.get_mut(host) {
            rec.reported_s = rec.reported_s.max(now_s);
            rec.loads = r.loads.clone();
        }
    }

    /// Keeps in this state (a change about to be in force) what reports taken in place said
    /// in `current` while the change was made: each host's latest report time and rates.
    pub fn keep_heard(&mut self, current: &ClusterState) {
        for (name, rec) in &mut self.hosts {
            if let Some(now) = current.hosts.get(name).filter(|h| h.reported_s > rec.reported_s) {
                rec.reported_s = now.reported_s;
                rec.loads = now.loads.clone();
            }
        }
    }

    /// A host's report: its uplinks' link states and measured send rates, and the VMs whose
    /// ports it has attached (the destination's confirmation ends a migration). Mends what a
    /// lost uplink breaks.
    pub fn report(&mut self, host: &str, r: &HostReport, now_s: u64) -> Result<Outcome, Refusal> {
        if self.touch(host, r, now_s)? {
            return Ok(Outcome {
                unchanged: true,
                ..Outcome::default()
            });
        }
        let (links, attached) = (&r.links, &r.attached);
        let mut next = self.clone();
        let rec = next.hosts.get_mut(host).expect("found");
        rec.reported_s = now_s;
        rec.loads = r.loads.clone();
        let was_down = rec.down_since_s.take();
        if was_down.is_some() {
            rec.up_again_s = Some(now_s);
        } else if rec
            .up_again_s
            .is_some_and(|t| now_s >= t.saturating_add(self.host_timeout.0))
        {
            rec.up_again_s = None;
        }
        for u in &mut rec.shape.uplinks {
            if let Some(up) = links.get(&u.name) {
                u.up = *up;
            }
        }
        for name in attached {
            if let Some(v) = next.vms.get_mut(name).filter(|v| v.host == host) {
                v.moving_from = None;
            }
        }
        next.release(host, attached);
        if let Some(since) = was_down {
            let why = format!(
                "host up again: reporting after {} s down; takes no new VMs for {} s",
                now_s.saturating_sub(since),
                self.host_timeout.0
            );
            next.note_fault(host, why, now_s);
        }
        next.commit(now_s, Outcome::default(), self, true)
    }

    /// Finishes change `self` (made from `was`): mends violations by migrations, and replaces
    /// `was` only if no host is left over its admission that was not before, else refuses with
    /// the fault; except for a
    /// `fact` (a host's registration or report: a lost uplink happened whether or not it
    /// fits), which stands with its fault recorded.
    pub(super) fn commit(
        self,
        now_s: u64,
        out: Outcome,
        was: &mut ClusterState,
        fact: bool,
    ) -> Result<Outcome, Refusal> {
        let c = self.cluster(now_s).map_err(Refusal::Conflict)?;
        self.commit_on(c, now_s, out, was, fact)
    }

    /// [`Self::commit`], with `c` this state's placement view already built (by the change).
    pub(super) fn commit_on(
        mut self,
        mut c: Cluster,
        now_s: u64,
        mut out: Outcome,
        was: &mut ClusterState,
        fact: bool,
    ) -> Result<Outcome, Refusal> {
        let before = match &was.violated.0 {
            Some((generation, hosts)) if *generation == was.generation => hosts.clone(),
            _ => was.cluster(now_s).map(|c| c.violations()).unwrap_or_default(),
        };
        let remedy = c.remediate();
        // A host that could not be mended before (a lost uplink) does not block other changes.
        let new_fault = remedy.faults.iter().find(|f| !before.contains(&f.host));
        if let (Some(f), false) = (new_fault, fact) {
            return Err(Refusal::Conflict(format!("{}: {}", f.host, f.why)));
        }
        for f in &remedy.faults {
            push(
                &mut self.faults,
                FaultRecord {
                    at_s: now_s,
                    host: f.host.clone(),
                    why: f.why.clone(),
                },
            );
        }
        for m in remedy.migrations {
            let record = migration_record(&m, now_s);
            let v = self.vms.get_mut(&m.vm).expect("placement moves VMs of the state");
            v.host = m.to.clone();
            self.begin_move(&m.vm, &m.from);
            out.migrations.push(record.clone());
            push(&mut self.migrations, record);
        }
        self.generation += 1;
        self.violated = Cached(Some((self.generation, c.violations())));
        *was = self;
        Ok(out)
    }

    /// Records an event of host `host` in the faults' log.
    pub(super) fn note_fault(&mut self, host: &str, why: String, now_s: u64) {
        let record = FaultRecord {
            at_s: now_s,
            host: host.to_string(),
            why,
        };
        push(&mut self.faults, record);
    }

    /// The assignments of host `host`: the VMs whose ports it should have attached (those on
    /// their way to it once their source has let go of them).
    pub fn assigned<'a>(&'a self, host: &'a str) -> impl Iterator<Item = (&'a String, &'a VmRecord)> + 'a {
        (self.vms.iter()).filter(move |(n, v)| v.host == host && self.may_attach(n, v))
    }
}

pub(super) fn push<T>(q: &mut VecDeque<T>, item: T) {
    if q.len() >= RECENT {
        q.pop_front();
    }
    q.push_back(item);
}

fn migration_record(m: &Migration, now_s: u64) -> MigrationRecord {
    MigrationRecord {
        at_s: now_s,
        vm: m.vm.clone(),
        from: m.from.clone(),
        to: m.to.clone(),
        reservation: m.reservation,
        why: format!(
            "{} no longer admits its VMs; moving {} ({}) is among the fewest moves, then the least reservation moved, and {} has the most headroom for it",
            m.from, m.vm, m.reservation, m.to
        ),
    }
}

/// A host's NetIOC tree and reservation cap from its shape, checked as `switch.toml` is.
pub fn build_host(shape: &HostShape) -> Result<(teamster_core::ioc::Tree, teamster_core::ioc::ReservationCap), String> {
    let no_ports: &[crate::live::config::PortFile] = &[];
    let built = host::build(
        HostSpec {
            lbt: &LbtSection::default(),
            reservation_cap: shape.reservation_cap,
            uplinks: (shape.uplinks.iter())
                .map(|u| UplinkDesc {
                    name: u.name.clone(),
                    capacity: u.capacity,
                })
                .collect(),
            port_groups: &[],
            traffic_classes: &shape.traffic_classes,
            pools: &shape.pools,
            ports: no_ports,
        },
        &mut |_, _| None,
    )?;
    for (i, d) in shape.derived.iter().enumerate() {
        if built
            .tree
            .find(d)
            .is_none_or(|id| id == teamster_core::ioc::NodeId::ROOT)
        {
            return Err(format!("derived[{i}]: no traffic class or pool named `{d}`"));
        }
    }
    Ok((built.tree, built.reservation_cap))
}

pub(super) fn vm_of(name: &str, v: &VmRecord) -> Vm {
    Vm {
        name: name.to_string(),
        vnics: vec![Vnic {
            pool: v.pool.clone(),
            reservation: v.reservation,
            shares: v.shares,
            limit: v.limit,
        }],
    }
}
