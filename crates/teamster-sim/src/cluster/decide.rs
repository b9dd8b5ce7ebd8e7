//! The cluster's decisions over the run, made by `core::placement` as DRS makes them.
//!
//! Placement acts on reservations and admission only, never on measured rates, so its
//! decisions are made in one pass over the timeline before any host runs, and the hosts then
//! run them: each host gets the stays of its VMs (a VM on a host from one instant to another)
//! and the controls in force at each instant. In time order:
//! - a VM powers on where placement puts it (or by hand where its entry says, if admitted);
//! - a reservation change that its host admits applies at once; one it does not is a fault:
//!   the host keeps the old reservation in force (as its live switch would refuse it) until
//!   remediation, `drs.delay_s` later, moves VMs so that every host admits again;
//! - an uplink going down lowers the host's admission capacity (the smallest uplink still up;
//!   none: zero), a fault if reservations no longer fit; a host going down stops its VMs, and
//!   remediation restarts them where placement admits them;
//! - a migration reserves at its destination at once; the VM runs at its source for
//!   `drs.traffic_s` more (the pre-copy, a greedy stream in the source's `live-migration`
//!   class), then sends nowhere for `drs.switchover_s`, then from its destination with its new
//!   reservation there. A source that fails during the pre-copy takes the VM down with it.
//!
//! After each instant the reservations that cannot be kept are counted: VMs with a reservation
//! on a host that does not admit its VMs, and VMs of a failed host not yet restarted.

use super::plan::{Action, ClusterPlan};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use teamster_core::placement::{Cluster, Vm};
use teamster_core::units::Bandwidth;

/// A VM on a host from `from_s` until `to_s` (None: the end of the run).
#[derive(Debug, Clone, PartialEq)]
pub struct Stay {
    pub vm: usize,
    pub host: usize,
    pub from_s: f64,
    pub to_s: Option<f64>,
}

/// The reservation in force of each stay present on a host: (stay, reservation).
pub type Controls = Vec<(usize, Bandwidth)>;

/// A migration's own traffic: from `host`, over [`from_s`, `to_s`).
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    pub host: usize,
    pub from_s: f64,
    pub to_s: f64,
}

/// A migration as the run made it.
#[derive(Debug, Clone, PartialEq)]
pub struct Moved {
    pub t_s: f64,
    pub vm: usize,
    /// None: a restart after its host failed.
    pub from: Option<usize>,
    pub to: usize,
    pub reservation: Bandwidth,
}

/// Everything the pass decided.
#[derive(Debug, Clone, Default)]
pub struct Decisions {
    pub stays: Vec<Stay>,
    /// Per host, each instant its stays' reservations in force changed: (time, [(stay, reservation)]).
    pub controls: Vec<Vec<(f64, Controls)>>,
    /// Per host: (time, uplink, up).
    pub links: Vec<Vec<(f64, usize, bool)>>,
    pub migrations: Vec<Moved>,
    /// The migrations' own traffic.
    pub transfers: Vec<Transfer>,
    /// Faults: (time, host, what is short).
    pub faults: Vec<(f64, String, String)>,
    /// Refusals of power-ons, reservation changes and migrations by hand: (time, VM, why).
    pub refusals: Vec<(f64, String, String)>,
    /// What happened besides migrations, for the plot and the summary: (time, text).
    pub log: Vec<(f64, String)>,
    /// Reservations that cannot be kept, each time the count changed: (time, count).
    pub violated: Vec<(f64, usize)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    PowerOn(usize),
    Event(usize),
    /// VM, host, and the migration's number: a later migration of the VM voids it.
    Arrive(usize, usize, u64),
    /// The end of a migration's pre-copy: the VM leaves its source (VM, destination, number).
    Depart(usize, usize, u64),
    Remediate,
}

/// The pass's state.
struct Pass<'a> {
    plan: &'a ClusterPlan,
    cluster: Cluster,
    out: Decisions,
    agenda: BinaryHeap<Reverse<(u64, u64, Due)>>,
    seq: u64,
    /// Per VM: its open stay.
    open: Vec<Option<usize>>,
    /// Per VM: its reservation in force where it runs.
    applied: Vec<Bandwidth>,
    /// VMs of failed hosts, waiting for a restart.
    down: Vec<(usize, Vm)>,
    host_up: Vec<bool>,
    link_up: Vec<Vec<bool>>,
    remediation_due: Option<u64>,
    /// Per VM: the number of the migration bringing it to a host, while it is in transit.
    transit: Vec<Option<u64>>,
    /// Hosts whose fault is recorded and not mended: not reported or remediated again until
    /// a timeline event changes something.
    faulted: std::collections::BTreeSet<String>,
    /// Whether a timeline event applied since the last instant settled.
    changed: bool,
    index: std::collections::HashMap<&'a str, usize>,
}

/// Makes every decision of the run.
pub fn decide(plan: &ClusterPlan) -> Decisions {
    let nh = plan.hosts.len();
    let mut p = Pass {
        plan,
        cluster: plan.cluster.clone(),
        out: Decisions {
            controls: vec![Vec::new(); nh],
            links: vec![Vec::new(); nh],
            ..Decisions::default()
        },
        agenda: BinaryHeap::new(),
        seq: 0,
        open: vec![None; plan.vms.len()],
        applied: plan.vms.iter().map(|v| v.vm.reservation()).collect(),
        down: Vec::new(),
        host_up: vec![true; nh],
        link_up: vec![vec![true; plan.uplinks.len()]; nh],
        remediation_due: None,
        transit: vec![None; plan.vms.len()],
        faulted: Default::default(),
        changed: false,
        index: (plan.vms.iter().enumerate())
            .map(|(i, v)| (v.vm.name.as_str(), i))
            .collect(),
    };
    for (i, v) in plan.vms.iter().enumerate() {
        p.push(v.power_on_s, Due::PowerOn(i));
    }
    for (k, (at, _)) in plan.events.iter().enumerate() {
        p.push(*at, Due::Event(k));
    }
    while let Some(Reverse((t_ns, _, due))) = p.agenda.pop() {
        let t = t_ns as f64 / 1e9;
        if t >= plan.file.duration_s {
            break;
        }
        p.apply(t, due);
        // Everything due at this instant first, then the instant's outcome.
        if p.agenda.peek().is_none_or(|Reverse((n, _, _))| *n != t_ns) {
            p.settle(t);
        }
    }
    p.out
}

impl Pass<'_> {
    fn push(&mut self, t: f64, due: Due) {
        self.seq += 1;
        self.agenda.push(Reverse(((t * 1e9).round() as u64, self.seq, due)));
    }

    fn name(&self, vm: usize) -> &str {
        &self.plan.vms[vm].vm.name
    }

    /// Applies what is due at `t`.
    fn apply(&mut self, t: f64, due: Due) {
        match due {
            Due::PowerOn(i) => self.power_on(t, i),
            Due::Event(k) => {
                self.changed = true;
                self.event(t, k)
            }
            Due::Arrive(vm, host, n) => {
                if self.transit[vm] == Some(n) && self.host_up[host] {
                    self.transit[vm] = None;
                    self.begin_stay(t, vm, host);
                }
            }
            Due::Depart(vm, host, n) => {
                if self.transit[vm] == Some(n) {
                    self.end_stay(t, vm);
                    self.push(t + self.plan.file.drs.switchover_s, Due::Arrive(vm, host, n));
                }
            }
            Due::Remediate => self.remediate(t),
        }
    }

    fn power_on(&mut self, t: f64, i: usize) {
        let v = &self.plan.vms[i];
        let placed = match v.host {
            Some(h) => (self.cluster.place_on(v.vm.clone(), &self.plan.hosts[h])).map(|()| self.plan.hosts[h].clone()),
            None => (self.cluster.place(v.vm.clone()))
                .map(|p| p.host)
                .map_err(|e| e.to_string()),
        };
        match placed {
            Ok(host) => {
                let h = self.host_index(&host);
                self.applied[i] = v.vm.reservation();
                self.begin_stay(t, i, h);
            }
            Err(why) => {
                let name = v.vm.name.clone();
                self.out.log.push((t, format!("{name} refused at power-on")));
                self.out.refusals.push((t, name, why));
            }
        }
    }

    fn host_index(&self, name: &str) -> usize {
        self.plan
            .hosts
            .iter()
            .position(|h| h == name)
            .expect("a host of the plan")
    }

    fn begin_stay(&mut self, t: f64, vm: usize, host: usize) {
        self.end_stay(t, vm);
        self.out.stays.push(Stay {
            vm,
            host,
            from_s: t,
            to_s: None,
        });
        self.open[vm] = Some(self.out.stays.len() - 1);
    }

    fn end_stay(&mut self, t: f64, vm: usize) {
        if let Some(s) = self.open[vm].take() {
            self.out.stays[s].to_s = Some(t);
        }
    }

    fn event(&mut self, t: f64, k: usize) {
        match &self.plan.events[k].1 {
            Action::SetReservation { vm, reservation } => {
                let (vm, r) = (*vm, *reservation);
                let name = self.name(vm).to_string();
                match self.cluster.set_reservation(&name, 0, r) {
                    Ok(()) => self.out.log.push((t, format!("{name} reserves {r}"))),
                    Err(why) => {
                        self.out.log.push((t, format!("{name}'s {r} refused")));
                        self.out.refusals.push((t, name, why));
                    }
                }
            }
            Action::Link { host, uplink, up } => {
                let (h, u, up) = (*host, *uplink, *up);
                self.link_up[h][u] = up;
                self.out.links[h].push((t, u, up));
                let capacity = (self.plan.uplinks.iter().enumerate())
                    .filter(|(i, _)| self.link_up[h][*i])
                    .map(|(_, u)| u.capacity)
                    .min()
                    .unwrap_or(Bandwidth::ZERO);
                let name = &self.plan.hosts[h];
                if self.host_up[h] {
                    self.cluster.set_capacity(name, capacity).expect("a host of the plan");
                }
                let what = if up { "up" } else { "down" };
                let line = format!("{name}/{} {what}", self.plan.uplinks[u].name);
                self.out.log.push((t, line));
            }
            Action::HostDown { host } => {
                let h = *host;
                if !self.host_up[h] {
                    return;
                }
                self.host_up[h] = false;
                let vms = self
                    .cluster
                    .remove_host(&self.plan.hosts[h])
                    .expect("a host of the plan");
                for v in vms {
                    let i = self.index[v.name.as_str()];
                    self.end_stay(t, i);
                    // One on its way here does not arrive.
                    self.transit[i] = None;
                    self.down.push((i, v));
                }
                // One still running here in its pre-copy goes down with the host.
                for i in 0..self.plan.vms.len() {
                    if self.open[i].is_some_and(|s| self.out.stays[s].host == h) {
                        self.end_stay(t, i);
                        self.transit[i] = None;
                        if let Some(v) = self.cluster.remove_vm(&self.plan.vms[i].vm.name) {
                            self.down.push((i, v));
                        }
                    }
                }
                for x in self.out.transfers.iter_mut().filter(|x| x.host == h && x.to_s > t) {
                    x.to_s = t.max(x.from_s);
                }
                self.out.log.push((t, format!("{} fails", self.plan.hosts[h])));
                self.schedule_remediation(t);
            }
            Action::Migrate { vm, to } => {
                let (vm, to) = (*vm, *to);
                let name = self.name(vm).to_string();
                match self.cluster.migrate(&name, &self.plan.hosts[to]) {
                    Ok(m) => {
                        let from = self.host_index(&m.from);
                        self.migrate(t, vm, Some(from), to, m.reservation);
                    }
                    Err(why) => self.out.refusals.push((t, name, why)),
                }
            }
        }
    }

    /// VM `vm` leaves `from` after its pre-copy (at once for a restart) and sends from `to`
    /// after the switch-over.
    fn migrate(&mut self, t: f64, vm: usize, from: Option<usize>, to: usize, reservation: Bandwidth) {
        self.seq += 1;
        self.transit[vm] = Some(self.seq);
        let copy = self.plan.file.drs.traffic_s;
        match from {
            Some(host) if copy > 0.0 && self.open[vm].is_some() => {
                let to_s = (t + copy).min(self.plan.file.duration_s);
                self.out.transfers.push(Transfer { host, from_s: t, to_s });
                self.push(t + copy, Due::Depart(vm, to, self.seq));
            }
            _ => {
                self.end_stay(t, vm);
                self.push(t + self.plan.file.drs.switchover_s, Due::Arrive(vm, to, self.seq));
            }
        }
        self.out.migrations.push(Moved {
            t_s: t,
            vm,
            from,
            to,
            reservation,
        });
    }

    fn schedule_remediation(&mut self, t: f64) {
        let at = ((t + self.plan.file.drs.delay_s) * 1e9).round() as u64;
        if self.remediation_due.is_none_or(|d| d > at) {
            self.remediation_due = Some(at);
            self.push(at as f64 / 1e9, Due::Remediate);
        }
    }

    /// DRS acts: migrations that mend violating hosts, then restarts of failed hosts' VMs.
    fn remediate(&mut self, t: f64) {
        self.remediation_due = None;
        let remedy = self.cluster.remediate();
        for m in remedy.migrations {
            let vm = self.index[m.vm.as_str()];
            let (from, to) = (self.host_index(&m.from), self.host_index(&m.to));
            self.migrate(t, vm, Some(from), to, m.reservation);
        }
        for f in remedy.faults {
            self.out.log.push((t, format!("{}: remediation falls short", f.host)));
            self.faulted.insert(f.host.clone());
            self.out.faults.push((t, f.host, f.why));
        }
        let mut down = std::mem::take(&mut self.down);
        down.sort_by_key(|(i, v)| (Reverse(v.reservation()), *i));
        for (i, vm) in down {
            let reservation = vm.reservation();
            match self.cluster.place(vm.clone()) {
                Ok(p) => {
                    let to = self.host_index(&p.host);
                    self.migrate(t, i, None, to, reservation);
                }
                Err(e) => {
                    self.out.refusals.push((t, self.name(i).to_string(), e.to_string()));
                    self.down.push((i, vm));
                }
            }
        }
    }

    /// The outcome of instant `t`: reservations in force where hosts admit them; a fault for
    /// each host newly over its admission, and remediation `delay_s` later (also for VMs of a
    /// failed host waiting for room, after any change); each host's controls and the count.
    fn settle(&mut self, t: f64) {
        if std::mem::take(&mut self.changed) {
            self.faulted.clear();
            if !self.down.is_empty() {
                self.schedule_remediation(t);
            }
        }
        let violating = self.cluster.violations();
        for host in self.cluster.hosts() {
            if violating.contains(&host.name) {
                continue;
            }
            let h = self.host_index(&host.name);
            for v in &host.vms {
                let i = self.index[v.name.as_str()];
                // Only where it runs: a VM still in its pre-copy keeps its source's reservation
                // (the destination's applies when it arrives there).
                if self.open[i].is_some_and(|s| self.out.stays[s].host == h) {
                    self.applied[i] = v.reservation();
                }
            }
        }
        self.faulted.retain(|h| violating.contains(h));
        for host in &violating {
            if self.faulted.insert(host.clone()) {
                let why = (self.cluster.host(host).expect("violating host"))
                    .headroom_with(&[])
                    .err()
                    .unwrap_or_default();
                self.out.log.push((t, format!("fault: {host}")));
                self.out.faults.push((t, host.clone(), why));
                self.schedule_remediation(t);
            }
        }
        let mut per_host: Vec<Controls> = vec![Vec::new(); self.plan.hosts.len()];
        for (vm, s) in self.open.iter().enumerate() {
            if let Some(s) = *s {
                per_host[self.out.stays[s].host].push((s, self.applied[vm]));
            }
        }
        for (h, now) in per_host.into_iter().enumerate() {
            let mut now = now;
            now.sort_unstable_by_key(|(s, _)| *s);
            if self.out.controls[h].last().map(|(_, c)| c) != Some(&now) {
                self.out.controls[h].push((t, now));
            }
        }
        let waiting = (self.down.iter()).filter(|(_, v)| v.reservation() > Bandwidth::ZERO);
        let count = self.cluster.violated_reservations() + waiting.count();
        if self.out.violated.last().is_none_or(|(_, c)| *c != count) {
            self.out.violated.push((t, count));
        }
    }
}
