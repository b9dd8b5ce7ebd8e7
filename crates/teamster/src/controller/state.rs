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
//!
//! A change costs in proportion to what it changes: hosts and VMs are persistent maps, so the
//! copy shares all but what the change touches; placement asks the view kept in step with the
//! state ([`super::kept`]), and what a store writes is the difference of the maps
//! ([`ClusterState::delta`]).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use teamster_core::host;
use teamster_core::ioc::Shares;
use teamster_core::placement::{Cluster, Migration};
use teamster_core::units::Bandwidth;

pub(super) use super::inventory::vm_of;
pub use super::inventory::{build_host, HostRecord, HostShape, UplinkRecord, VmRecord};
use super::kept::{Kept, Source};
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
    pub hosts: imbl::OrdMap<String, HostRecord>,
    pub vms: imbl::OrdMap<String, VmRecord>,
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
    /// The placement view last asked for, kept in step with the state (in memory only).
    #[serde(skip)]
    pub(super) kept: Cached<super::kept::Kept>,
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
    /// Where a powered-on VM went; `considered`: the hosts placement looked at, each with the
    /// headroom the VM leaves there or why it does not take it (the chosen one, and those
    /// ranked above it that refused: see `teamster_core::placement::Placed::considered`).
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
                departing_macs: was.map(|h| h.departing_macs.clone()).unwrap_or_default(),
                waiting: was.map(|h| h.waiting.clone()).unwrap_or_default(),
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
            if let Some(other) = self.mac_owner(mac).map_err(Refusal::Conflict)? {
                return Err(Refusal::Conflict(format!("mac: {mac} is VM {other}'s")));
            }
            if let Some((host, other)) = self.mac_departing(mac, &req.name).map_err(Refusal::Conflict)? {
                return Err(Refusal::Conflict(format!(
                    "mac: {mac} was VM {other}'s, powered off on host {host}, which has not yet reported it detached: try again after its next report"
                )));
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
        let mut c = self.placement(now_s).map_err(Refusal::Conflict)?;
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
        // A VM of this name powered off on another host that has not yet reported it detached
        // comes from there, as a migration does: its new host is told once that one let go.
        let moving_from = self.still_held(&req.name, &host).map_err(Refusal::Conflict)?;
        let mut next = self.clone();
        // Back on the host it was powered off on: that host keeps its port, nothing to wait for.
        let back = (next.hosts.get(&host)).is_some_and(|h| h.departing.contains(&req.name));
        if let Some(h) = next.hosts.get_mut(&host).filter(|_| back) {
            let mut keep = h.departing.clone();
            keep.remove(&req.name);
            h.keep_departing(keep);
        }
        next.vms.insert(
            req.name,
            VmRecord {
                host,
                moving_from,
                ..record
            },
        );
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
        let mut c = next.placement(now_s).map_err(Refusal::Conflict)?;
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
        let on = self.vms_on(name);
        let runs = !on.is_empty();
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
        let mut leaving: Vec<(String, VmRecord)> = (on.into_iter())
            .filter_map(|n| Some((n.clone(), next.vms.remove(&n)?)))
            .collect();
        leaving.sort_by(|a, b| b.1.reservation.cmp(&a.1.reservation).then(a.0.cmp(&b.0)));
        let mut c = next.placement(now_s).map_err(Refusal::Conflict)?;
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
        let gone = next.vms.remove(name).expect("looked up");
        // Its host detaches it at its next answer: until it reports so, a VM of the same name
        // powered on again elsewhere waits for it, and no other VM takes its MAC
        // ([`super::handover`]). A host never told to attach it (it was on its way from a
        // source that still holds it: that one keeps it in its own set) has nothing to let go.
        let told = self.may_attach(name, &gone);
        if let Some(h) = (next.hosts.get_mut(&gone.host)).filter(|h| told && !h.gone_quiet()) {
            h.depart(name, gone.mac.as_ref(), now_s);
        }
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
    /// Walks the difference of the two states' hosts: the hosts the change touched and those
    /// heard meanwhile, not every host.
    pub fn keep_heard(&mut self, current: &ClusterState) {
        let heard: Vec<(String, u64, BTreeMap<String, f64>)> = (self.hosts.diff(&current.hosts))
            .filter_map(|d| match d {
                imbl::ordmap::DiffItem::Update {
                    old: (name, rec),
                    new: (_, now),
                } if now.reported_s > rec.reported_s => Some((name.clone(), now.reported_s, now.loads.clone())),
                _ => None,
            })
            .collect();
        for (name, reported_s, loads) in heard {
            if let Some(rec) = self.hosts.get_mut(&name) {
                rec.reported_s = reported_s;
                rec.loads = loads;
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
        mut self,
        now_s: u64,
        out: Outcome,
        was: &mut ClusterState,
        fact: bool,
    ) -> Result<Outcome, Refusal> {
        let c = self.placement(now_s).map_err(Refusal::Conflict)?;
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
            _ => was.placement(now_s).map(|c| c.violations()).unwrap_or_default(),
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
            self.begin_move(&m.vm, &m.from, now_s);
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

/// Placement's view of the state, from the view kept in step with it ([`super::kept`]).
impl ClusterState {
    /// What the state's view is built from.
    fn source(&self) -> Source<'_> {
        Source {
            hosts: &self.hosts,
            vms: &self.vms,
            quotas: &self.quotas,
        }
    }

    /// The kept view in step with this state, built anew if it cannot be brought in step.
    fn in_step(&self) -> Result<Kept, String> {
        if let Some(mut k) = self.kept.0.clone() {
            if k.follow(self.source()).is_ok() {
                return Ok(k);
            }
        }
        Kept::build(self.source())
    }

    /// The placement view of the state at `now_s`: hosts with their trees and admission
    /// capacity (the smallest uplink up; none: zero), those that stopped reporting marked
    /// unavailable and those held down closed, VMs where they are assigned, quotas.
    pub fn cluster(&self, now_s: u64) -> Result<Cluster, String> {
        let mut k = self.in_step()?;
        self.mark(&mut k, now_s)?;
        Ok(k.cluster().clone())
    }

    /// [`Self::cluster`], keeping the view in step for the next question.
    pub fn placement(&mut self, now_s: u64) -> Result<Cluster, String> {
        let mut k = self.in_step()?;
        self.mark(&mut k, now_s)?;
        let c = k.cluster().clone();
        self.kept = Cached(Some(k));
        Ok(c)
    }

    /// The kept view, brought in step with the state and kept so.
    pub(super) fn stepped(&mut self) -> Result<&Kept, String> {
        let k = self.in_step()?;
        Ok(self.kept.0.insert(k))
    }

    /// The VM whose MAC is `mac`, if any (from the kept view, brought in step).
    pub fn mac_owner(&mut self, mac: teamster_core::wire::MacAddr) -> Result<Option<String>, String> {
        Ok(self.stepped()?.owner_of(mac).cloned())
    }

    /// The VMs assigned to host `host`, by name (from the view, brought in step: in proportion
    /// to the host's VMs and what changed since the view was kept).
    pub fn vms_on(&self, host: &str) -> Vec<String> {
        match self.in_step() {
            Ok(k) => (k.cluster().host(host)).map_or_else(Vec::new, |h| h.vms.iter().map(|v| v.name.clone()).collect()),
            Err(_) => (self.vms.iter())
                .filter(|(_, v)| v.host == host)
                .map(|(n, _)| n.clone())
                .collect(),
        }
    }

    /// Sets the hosts' time-dependent marks in view `k` at `now_s`, on the hosts that need it
    /// ([`Kept::to_mark`]), and ranks the hosts changed since it was last ranked.
    pub(super) fn mark(&self, k: &mut Kept, now_s: u64) -> Result<(), String> {
        let with = (self.host_timeout.0, self.host_timeout_given_s, self.listening_since_s);
        for name in k.to_mark(with, now_s) {
            let Some(m) = self.marks(&name, now_s) else { continue };
            k.cluster_mut().set_unavailable(&name, m.unavailable)?;
            k.cluster_mut().set_closed(&name, m.closed)?;
            k.set_due(&name, m.due);
        }
        k.cluster_mut().settle();
        Ok(())
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
