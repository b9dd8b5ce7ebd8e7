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
//! The cost of a report stays in proportion to the host's own VMs: only the departing set of
//! the reporting host is read.
//!
//! [`HostRecord::departing`]: super::state::HostRecord::departing
//! [`HostRecord::departing_macs`]: super::state::HostRecord::departing_macs

use super::state::{ClusterState, VmRecord};

impl ClusterState {
    /// Records that VM `name` leaves host `from` for where it is now assigned: its source is
    /// `from` unless it was already on its way from a host that has not let go of it (its
    /// destination then was never told, and the first source is still the one to wait for).
    pub(super) fn begin_move(&mut self, name: &str, from: &str) {
        let Some(v) = self.vms.get(name) else { return };
        let waiting = (v.moving_from.as_deref()).is_some_and(|src| !self.released(name, src));
        if waiting {
            return;
        }
        // A source that has let go by its own timer (down, detaching) holds nothing to wait for.
        if let Some(h) = self.hosts.get_mut(from).filter(|h| !h.gone_quiet()) {
            h.departing.insert(name.to_string());
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
    /// reported detached, if one does (a look at each host's departing set).
    pub(super) fn still_held(&self, name: &str, to: &str) -> Option<String> {
        (self.hosts.iter())
            .find(|(h, rec)| h.as_str() != to && !rec.gone_quiet() && rec.departing.contains(name))
            .map(|(h, _)| h.clone())
    }

    /// The host, and the VM powered off there, still holding MAC `mac` for a VM other than
    /// `name`, if one does (a look at each host's departing MACs).
    pub(super) fn mac_departing(&self, mac: teamster_core::wire::MacAddr, name: &str) -> Option<(String, String)> {
        (self.hosts.iter())
            .filter(|(_, rec)| !rec.gone_quiet())
            .find_map(|(h, rec)| {
                let (vm, _) =
                    (rec.departing_macs.iter()).find(|(n, m)| n.as_str() != name && m.parse().ok() == Some(mac))?;
                Some((h.clone(), vm.clone()))
            })
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
        let h = self.hosts.get_mut(host).expect("looked up");
        h.departing_macs.retain(|n, _| keep.contains(n));
        h.departing = keep;
    }
}
