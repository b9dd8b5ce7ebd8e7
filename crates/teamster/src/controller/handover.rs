//! A VM's handover between hosts: break before make, so its MAC is never forwarded by two
//! hosts at once.
//!
//! Model. A migration (remediation's, a down host's restart, an operator's change) reassigns
//! the VM at once ([`super::state`]: the state holds every VM once), but the destination is
//! not told to attach it until the source has let go of it. The source keeps the VM in its
//! [`HostRecord::departing`] set from the move until it reports without the VM among its
//! attached ports: it is answered without the VM from the move on, so a report that lacks it
//! is one made after it detached it (a host's reports and their answers alternate). Only then
//! does the VM appear in the destination's assignments ([`ClusterState::may_attach`]), and the
//! destination's report of it attached ends the migration (`moving_from` cleared).
//!
//! A source that is down has let go by its own timer (a host cut off detaches its VMs before
//! the controller fails it), unless it keeps forwarding when cut off (`isolation = "keep"`:
//! then only its report lets go); and one that no longer exists was deleted by the operator,
//! which is refused while it runs VMs and is heard: the destination is told at once. A VM
//! moved again before its destination was told still comes from its first source; once the
//! destination was told, it comes from there.
//!
//! A VM powered off stays in its host's departing set until that host reports it detached, so
//! a VM of the same name powered on again on another host meanwhile comes from there as a
//! migration does, and is attached only once the first host let go; and another VM asking for
//! its MAC meanwhile is refused ([`HostRecord::departing_macs`]).
//!
//! A source that reports on but does not let go (its agent cannot detach the port, say) keeps
//! the VM from running anywhere, which the controller does not override: attaching it at the
//! destination would make its MAC active twice. So a wait longer than twice the host timeout
//! is reported once, by the controller's watch ([`ClusterState::overdue_handovers`]), as an
//! event and a fault naming the VM, its source and how long it has waited; the operator then
//! sees to the source (or deletes it, once it no longer reports).
//!
//! The cost of a report stays in proportion to the host's own VMs: only the departing set of
//! the reporting host is read.
//!
//! [`HostRecord::departing`]: super::state::HostRecord::departing
//! [`HostRecord::departing_macs`]: super::state::HostRecord::departing_macs

use super::inventory::Waiting;
use super::state::{ClusterState, VmRecord};

impl ClusterState {
    /// The departing VMs whose hosts, heard and holding them, have not let go for longer than
    /// twice the host timeout and were not yet reported so: (host, VM, seconds waited). A VM
    /// without a time (the controller started since) counts from the controller's start.
    pub fn overdue_handovers(&self, now_s: u64) -> Vec<(String, String, u64)> {
        let limit = self.host_timeout.0.saturating_mul(2);
        (self.hosts.iter())
            .filter(|(_, h)| !h.departing.is_empty() && !h.gone_quiet())
            .flat_map(|(name, h)| {
                (h.departing.iter()).filter_map(move |vm| {
                    let w = (h.waiting.get(vm).copied()).unwrap_or(Waiting::since(self.listening_since_s));
                    let waited = now_s.saturating_sub(w.since_s);
                    (!w.told && waited > limit).then(|| (name.clone(), vm.clone(), waited))
                })
            })
            .collect()
    }

    /// Reports each overdue handover (see the module documentation) as an event and a fault,
    /// once; and forgets the times of VMs no longer departing.
    pub(super) fn tell_overdue(&mut self, now_s: u64, events: &mut Vec<String>) {
        for (host, vm, waited) in self.overdue_handovers(now_s) {
            let to = (self.vms.get(&vm)).map_or("nowhere (powered off)".to_string(), |v| format!("host {}", v.host));
            let why = format!(
                "VM {vm} has waited {waited} s for this host to detach it (it still reports it attached); it runs on {to} only once it is detached"
            );
            events.push(format!("{host}: {why}"));
            self.note_fault(&host, why, now_s);
            let since_start = Waiting::since(self.listening_since_s);
            let h = self.hosts.get_mut(&host).expect("listed");
            h.waiting.entry(vm).or_insert(since_start).told = true;
        }
    }

    /// Records that VM `name` leaves host `from` for where it is now assigned: its source is
    /// `from` unless it was already on its way from a host that has not let go of it (its
    /// destination then was never told, and the first source is still the one to wait for).
    pub(super) fn begin_move(&mut self, name: &str, from: &str, now_s: u64) {
        let Some(v) = self.vms.get(name) else { return };
        let waiting = (v.moving_from.as_deref()).is_some_and(|src| !self.released(name, src));
        if waiting {
            return;
        }
        // A source that has let go by its own timer (down, detaching) holds nothing to wait for.
        if let Some(h) = self.hosts.get_mut(from).filter(|h| !h.gone_quiet()) {
            h.depart(name, None, now_s);
        }
        self.vms.get_mut(name).expect("looked up").moving_from = Some(from.to_string());
    }

    /// Whether host `src` has let go of VM `name`: it reported without it since it left, or it
    /// is down (and detaches when cut off: a host with `isolation = "keep"` forwards on), or
    /// gone (deleted: refused while it runs VMs and is heard).
    pub(super) fn released(&self, name: &str, src: &str) -> bool {
        self.hosts
            .get(src)
            .is_none_or(|h| h.gone_quiet() || !h.departing.contains(name))
    }

    /// The host other than `to` that still holds VM `name`, powered off there and not yet
    /// reported detached, if one does (from the kept view's index of departing sets).
    pub(super) fn still_held(&mut self, name: &str, to: &str) -> Result<Option<String>, String> {
        let holders: Vec<String> = self.stepped()?.holding(name).cloned().collect();
        Ok(holders
            .into_iter()
            .find(|h| h != to && self.hosts.get(h).is_some_and(|rec| !rec.gone_quiet())))
    }

    /// The host, and the VM powered off there, still holding MAC `mac` for a VM other than
    /// `name`, if one does (from the kept view's index of departing MACs).
    pub(super) fn mac_departing(
        &mut self,
        mac: teamster_core::wire::MacAddr,
        name: &str,
    ) -> Result<Option<(String, String)>, String> {
        let holders: Vec<(String, String)> = self.stepped()?.holding_mac(mac).cloned().collect();
        Ok(holders
            .into_iter()
            .find(|(h, vm)| vm != name && self.hosts.get(h).is_some_and(|rec| !rec.gone_quiet())))
    }

    /// Whether VM `name` (record `v`) may be attached by the host it is assigned to: it is not
    /// on its way from a host that still holds it.
    pub fn may_attach(&self, name: &str, v: &VmRecord) -> bool {
        (v.moving_from.as_deref()).is_none_or(|src| self.released(name, src))
    }

    /// Whether host `host`'s report with `attached` lets go of a departing VM (or names one the
    /// host no longer needs to keep in its set): a change to record.
    pub(super) fn releases(&self, host: &str, attached: &[String]) -> bool {
        let Some(h) = self.hosts.get(host).filter(|h| !h.departing.is_empty()) else {
            return false;
        };
        let attached: std::collections::HashSet<&str> = attached.iter().map(String::as_str).collect();
        (h.departing.iter()).any(|n| !attached.contains(n.as_str()))
    }

    /// Takes host `host`'s report of `attached`: the departing VMs it no longer has are let go
    /// (the destination may attach them), and entries of VMs no longer moving from it dropped.
    pub(super) fn release(&mut self, host: &str, attached: &[String]) {
        let Some(h) = self.hosts.get(host).filter(|h| !h.departing.is_empty()) else {
            return;
        };
        let attached: std::collections::HashSet<&str> = attached.iter().map(String::as_str).collect();
        // Kept: what it still has of the VMs moving from it, or powered off and not yet gone.
        let keep: std::collections::BTreeSet<String> = (h.departing.iter())
            .filter(|n| attached.contains(n.as_str()))
            .filter(|n| (self.vms.get(*n)).is_none_or(|v| v.moving_from.as_deref() == Some(host)))
            .cloned()
            .collect();
        self.hosts.get_mut(host).expect("looked up").keep_departing(keep);
    }
}
