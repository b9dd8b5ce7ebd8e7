//! Host liveness, as vSphere HA does for hosts and DRS for reservations.
//!
//! Model. A host is heard when it registers or reports. Its silence is the time since it was
//! last heard, or since this controller began to listen ([`ClusterState::listening_since_s`]:
//! its start or its taking the lead), whichever is later: a controller that was away does not
//! hold its own absence against the hosts. If an earlier controller of this state told hosts a
//! longer host timeout ([`ClusterState::host_timeout_given_s`]), that much longer: a host cut
//! off detaches its VMs by the timeout it was last told. A host silent for longer than the host timeout
//! ([`super::state::HostTimeout`]) is *unavailable*: placement, migrations and remediation send
//! it nothing. The controller's watch ([`ClusterState::fail_silent`], every second) then marks
//! it *down*, once, with an event naming the silence, and restarts its VMs elsewhere where
//! admission allows: each moves as a migration from the down host (largest reservation first,
//! each where initial placement puts it), and one that fits nowhere stays assigned to the down
//! host with a fault naming each host's reason, and is tried again every [`RESTART_RETRY_S`]
//! (it moves once room appears). When the host is heard again it is up (an
//! event), takes VMs again, and is answered with its assignments without the VMs that left:
//! its agent detaches them. A host registered with `isolation = "keep"` (it goes on forwarding
//! for its VMs when cut off) is marked down all the same, but its VMs stay assigned to it,
//! with a fault: restarting them elsewhere would make them active twice.
//!
//! A host heard again after being down is *held down* for a host timeout
//! ([`ClusterState::held_down`]): unavailable as a silent one is, so a host whose link to the
//! controller flaps (down, up, down again) attracts no new VMs that the next flap would have to
//! restart elsewhere; it takes VMs once it has reported steadily for that long.

use super::state::{vm_of, ClusterState, HostRecord, Isolation, MigrationRecord, Outcome, Refusal, VmRecord};
use teamster_core::placement::Cluster;

/// A host's marks in the placement view ([`Cluster::set_unavailable`], [`Cluster::set_closed`]),
/// and when they next change by time alone (None: only a change of its record changes them).
#[derive(Debug, Clone, PartialEq)]
pub struct Marks {
    pub unavailable: Option<String>,
    pub closed: Option<String>,
    pub due: Option<u64>,
}

/// How often the VMs of a down host that fitted nowhere are tried again (seconds).
pub const RESTART_RETRY_S: u64 = 30;

impl ClusterState {
    /// Why host `name` takes no new VMs at `now_s`, if it does not: it has been silent for
    /// longer than the host timeout.
    pub fn silent(&self, name: &str, now_s: u64) -> Option<String> {
        let quiet = now_s.saturating_sub(self.heard_s(self.hosts.get(name)?));
        (quiet > self.host_timeout.0).then(|| {
            format!(
                "not responding: no report for {quiet} s (host timeout {} s)",
                self.host_timeout.0
            )
        })
    }

    /// Why host `name` takes no new VMs at `now_s` though it reports, if it does not: it was
    /// heard again after being down less than a host timeout ago.
    pub fn held_down(&self, name: &str, now_s: u64) -> Option<String> {
        let h = self.hosts.get(name)?;
        let (back, hold) = (h.up_again_s?, self.host_timeout.0);
        (now_s < self.open_from_s(h)?).then(|| {
            format!(
                "held down: up again {} s ago after being down; takes new VMs after {hold} s of reports",
                now_s.saturating_sub(back)
            )
        })
    }

    /// The marks host `name` carries in the placement view at `now_s` (see [`Marks`]); None if
    /// there is no such host. The same rule as [`Self::silent`] and [`Self::held_down`], in
    /// words that do not change from second to second, so the view changes only when a mark
    /// does.
    pub(super) fn marks(&self, name: &str, now_s: u64) -> Option<Marks> {
        let h = self.hosts.get(name)?;
        let timeout = self.host_timeout.0;
        // Silent once the quiet passes the timeout: from `heard + timeout + 1` on.
        let silent_from = self.heard_s(h).saturating_add(timeout).saturating_add(1);
        let open_from = self.open_from_s(h);
        let unavailable = (now_s >= silent_from)
            .then(|| format!("not responding: no report for longer than the host timeout ({timeout} s)"));
        let closed = open_from
            .filter(|t| now_s < *t)
            .map(|_| format!("held down: up again after being down; takes new VMs after {timeout} s of reports"));
        let due = [
            (now_s < silent_from).then_some(silent_from),
            open_from.filter(|t| now_s < *t),
        ];
        Some(Marks {
            unavailable,
            closed,
            due: due.into_iter().flatten().min(),
        })
    }

    /// When host `h` counts as last heard: its last report, or when this controller began to
    /// listen if later (after a start, hosts answered with a longer timeout by an earlier
    /// controller are given that long: they detach their VMs only that late).
    fn heard_s(&self, h: &HostRecord) -> u64 {
        let longer = self.host_timeout_given_s.saturating_sub(self.host_timeout.0);
        h.reported_s.max(self.listening_since_s + longer)
    }

    /// When host `h`, heard again after being down, takes new VMs again (None: it was not down).
    fn open_from_s(&self, h: &HostRecord) -> Option<u64> {
        Some(h.up_again_s?.saturating_add(self.host_timeout.0))
    }

    /// Whether the watch has nothing to do at `now_s`: no host newly silent, no restart due and
    /// no handover overdue ([`Self::fail_silent`] would change nothing). Read in place, without
    /// a copy of the state.
    pub fn watch_idle(&self, now_s: u64) -> bool {
        self.failing(now_s).is_empty()
            && self.restarts_due(now_s).is_empty()
            && self.overdue_handovers(now_s).is_empty()
    }

    /// The hosts silent past the host timeout and not down yet, with why.
    pub fn failing(&self, now_s: u64) -> Vec<(String, String)> {
        (self.hosts.iter())
            .filter(|(_, h)| h.down_since_s.is_none())
            .filter_map(|(n, _)| Some((n.clone(), self.silent(n, now_s)?)))
            .collect()
    }

    /// The down hosts whose VMs are due another try at restarting elsewhere: hosts that let
    /// them be restarted, still holding some, whose last try is [`RESTART_RETRY_S`] old.
    pub fn restarts_due(&self, now_s: u64) -> Vec<String> {
        (self.hosts.iter())
            .filter(|(_, h)| h.gone_quiet())
            .filter(|(_, h)| now_s >= h.restart_tried_s.saturating_add(RESTART_RETRY_S))
            .filter(|(n, _)| !self.vms_on(n).is_empty())
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Marks down every host silent past the host timeout that is not down yet, and restarts
    /// its VMs where admission allows (see the module documentation); tries again, every
    /// [`RESTART_RETRY_S`], for the VMs of down hosts that fitted nowhere before; reports the
    /// handovers overdue ([`super::handover`]). Unchanged (nothing to save) if no host newly
    /// failed, no VM moved and nothing was reported.
    pub fn fail_silent(&mut self, now_s: u64) -> Result<Outcome, Refusal> {
        if self.watch_idle(now_s) {
            return Ok(Outcome {
                unchanged: true,
                ..Outcome::default()
            });
        }
        let (failing, due) = (self.failing(now_s), self.restarts_due(now_s));
        let mut next = self.clone();
        let mut out = Outcome::default();
        let mut c = next.placement(now_s).map_err(Refusal::Conflict)?;
        for (host, why) in failing {
            let rec = next.hosts.get_mut(&host).expect("listed");
            rec.down_since_s = Some(now_s);
            // It has detached what was leaving it (unless it keeps forwarding when cut off).
            if rec.gone_quiet() {
                rec.keep_departing(Default::default());
            }
            out.events.push(format!("{host}: host down: {why}"));
            next.note_fault(&host, format!("host down: {why}"), now_s);
            if next.hosts[&host].shape.isolation == Isolation::Keep {
                let why = "its VMs stay assigned to it: it keeps forwarding for them when cut off (isolation = keep)";
                out.events.push(format!("{host}: {why}"));
                next.note_fault(&host, why.to_string(), now_s);
                continue;
            }
            next.restart(&mut c, &host, &why, now_s, &mut out, true)?;
        }
        for host in due {
            let why = "down".to_string();
            next.restart(&mut c, &host, &why, now_s, &mut out, false)?;
        }
        next.tell_overdue(now_s, &mut out.events);
        if out.migrations.is_empty() && out.events.is_empty() {
            // Retries that moved nothing: only their times change (kept in memory).
            *self = next;
            return Ok(Outcome {
                unchanged: true,
                ..Outcome::default()
            });
        }
        next.commit(now_s, out, self, true)
    }

    /// Restarts the VMs of down host `host` where placement puts them, largest first, as
    /// migrations; one that fits nowhere stays, with a fault if `tell` (the first try).
    fn restart(
        &mut self,
        c: &mut Cluster,
        host: &str,
        why: &str,
        now_s: u64,
        out: &mut Outcome,
        tell: bool,
    ) -> Result<(), Refusal> {
        self.hosts.get_mut(host).expect("listed").restart_tried_s = now_s;
        let mut leaving: Vec<(String, VmRecord)> = (c.host(host).into_iter())
            .flat_map(|h| &h.vms)
            .filter_map(|vm| Some((vm.name.clone(), self.vms.get(&vm.name)?.clone())))
            .collect();
        leaving.sort_by(|a, b| b.1.reservation.cmp(&a.1.reservation).then(a.0.cmp(&b.0)));
        for (name, v) in leaving {
            let vm = c.remove_vm(&name).unwrap_or_else(|| vm_of(&name, &v));
            match c.choose(&vm) {
                Ok(placed) => {
                    c.assume(vm, &placed.host).map_err(Refusal::Conflict)?;
                    let record = MigrationRecord {
                        at_s: now_s,
                        vm: name.clone(),
                        from: host.to_string(),
                        to: placed.host.clone(),
                        reservation: v.reservation,
                        why: format!(
                            "{host} is down ({why}); {} has the most headroom for {name}",
                            placed.host
                        ),
                    };
                    let rec = self.vms.get_mut(&name).expect("listed");
                    rec.host = placed.host;
                    self.begin_move(&name, host, now_s);
                    out.migrations.push(record.clone());
                    super::state::push(&mut self.migrations, record);
                }
                Err(refused) => {
                    c.assume(vm, host).map_err(Refusal::Conflict)?;
                    if tell {
                        let why = format!("VM {name} cannot restart elsewhere: {refused}");
                        out.events.push(format!("{host}: {why}"));
                        self.note_fault(host, why, now_s);
                    }
                }
            }
        }
        Ok(())
    }
}
