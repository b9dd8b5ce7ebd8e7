//! Ports that come and go while the switch runs: a VM started, stopped or migrated, a port
//! added or removed through the API, a tap matched by a port rule.
//!
//! Model. The control plane hands [`Datapath::reconfigure`] the ports it wants, each a
//! [`PortPlan`] with its leaf in the new NetIOC tree; the data plane compares them by name with
//! the ports it has.
//! A port that is gone (or whose interface, MAC, group or backend changed) is removed: its
//! socket closed, its receive queue emptied, the core switch forgets it (MAC-table entries,
//! flooding, counters), and the frames it had queued on the uplinks are dropped. A new port is
//! given the smallest free [`PortId`] and a slot, added to the core switch (the team places it
//! on its uplink; it owns no MAC yet) and attached if its interface exists (else when it
//! appears): only then does it claim its MAC and announce it. The NetIOC tree
//! is then replaced: controls only when its shape is unchanged, otherwise rebuilt with every
//! waiting frame of the other ports kept, in order ([`Ioc::reshape`]). None of this touches
//! another port's socket, receive queue or MAC entries, and it runs between two turns of the
//! loop, so other ports' traffic does not pause beyond the time the change takes.
//!
//! Slots. A port's index is its slot: its receive queue, its poll entry and, with port
//! workers, its lock-free counters and the index frames carry between threads. A removed
//! port's slot stays empty for [`SLOT_QUARANTINE`], so a frame it handed to the switching
//! worker just before it went is never taken for the next port's; slots are then reused, so
//! the number of slots is bounded by the most ports present at once (and by [`MAX_PORTS`]).

use super::{ingress, Datapath, ExtraDrops, Port, PortIo, PortPlan, MAX_PORTS};
use crate::backend::BackendChoice;
use crate::platform::Platform;
use crate::Device;
use std::collections::{HashMap, HashSet};
use teamster_core::ioc::{NodeId, Tree};
use teamster_core::switch::SecurityPolicy;
use teamster_core::teaming::{GroupId, PortGroupSpec, PortId, PortSpec};
use teamster_core::wire::MacAddr;
use teamster_core::Instant;

/// How long a removed port's slot stays empty: frames handed between threads are taken every
/// turn of the loop (10 ms at most), so none of the old port's is left after this.
pub const SLOT_QUARANTINE: core::time::Duration = core::time::Duration::from_millis(200);

impl<P: Platform> Datapath<P> {
    /// Adds the ports of `want` the switch does not have, gives the others their plans in `want`
    /// (their leaves in `tree` among them), and switches NetIOC to `tree` (rebuilt if ports came or went, `retired` saying
    /// whether [`Datapath::retire_ports`] removed some). A port the core switch still refuses
    /// (which a checked configuration never asks for) is left out, with an event saying why.
    pub(super) fn admit_ports(&mut self, tree: Tree, want: &[PortPlan], retired: bool, now: Instant) {
        // By name, so a change costs time linear in the ports (thousands of them included).
        let wanted: HashMap<&str, &PortPlan> = want.iter().map(|w| (w.name.as_str(), w)).collect();
        let mut old_leaves: HashMap<String, NodeId> = HashMap::new();
        let mut reshaped = retired;
        for port in self.ports.iter_mut().filter(|p| p.present()) {
            if let Some(w) = wanted.get(port.plan.name.as_str()) {
                reshaped |= port.plan.leaf != w.leaf;
                old_leaves.insert(port.plan.name.clone(), port.plan.leaf);
                // The new plan, under the port's own ID (its group's index, say, moves when a
                // group before it goes).
                port.plan = PortPlan {
                    id: port.plan.id,
                    ..PortPlan::clone(w)
                };
                self.switch.set_mac_takeover(port.plan.id, w.mac_takeover, now);
            }
        }
        let present: HashSet<String> = self.present_ports().map(|p| p.plan.name.clone()).collect();
        for w in want {
            if !present.contains(&w.name) {
                self.add_port(w, now);
                reshaped = true;
            }
        }
        if reshaped || !same_shape(self.ioc.tree(), &tree) {
            let leaves: Vec<NodeId> = self.present_ports().map(|p| p.plan.leaf).collect();
            // A port removed (or replaced under its name) has no old leaf here: its queued
            // frames go with it.
            let map: HashMap<NodeId, NodeId> = self
                .present_ports()
                .filter_map(|p| Some((*old_leaves.get(&p.plan.name)?, p.plan.leaf)))
                .collect();
            let gone = self.ioc.reshape(tree, &leaves, |old| map.get(&old).copied(), now);
            for frame in gone {
                self.pool.give(frame.into_bytes());
            }
        } else {
            self.ioc.replace_tree(tree, now);
        }
    }

    /// Removes the ports `want` no longer has, or has on another interface, MAC, backend or
    /// port group (by name: `groups` are the wanted groups' names, which `want` indexes), so
    /// that every port left is one `want` keeps. Returns whether it removed any.
    pub(super) fn retire_ports(&mut self, want: &[PortPlan], groups: &[&str], now: Instant) -> bool {
        let wanted: HashMap<&str, &PortPlan> = want.iter().map(|w| (w.name.as_str(), w)).collect();
        let mut retired = false;
        for i in 0..self.ports.len() {
            if !self.ports[i].present() {
                continue;
            }
            let p = &self.ports[i].plan;
            let team = self.switch.team();
            let group_name = team
                .port_group(p.id)
                .and_then(|g| team.group(g))
                .map(|g| g.name.as_str());
            let keep = wanted.get(p.name.as_str()).is_some_and(|w| {
                p.interface == w.interface
                    && p.backend == w.backend
                    && team.port_mac(p.id) == Some(w.mac)
                    && group_name.is_some()
                    && groups.get(w.group.0).copied() == group_name
            });
            if !keep {
                self.remove_port(i, now);
                retired = true;
            }
        }
        retired
    }

    /// Makes the port groups `groups`: removes those no longer there (they have no ports left),
    /// adds the new ones after the others, and changes the teaming of the rest. False, with an
    /// event, if the groups kept are not in `groups`' order (IDs would not line up; the checks
    /// before a change or reload refuse that, so it means a bug), and then nothing else changes.
    pub(super) fn regroup(&mut self, groups: &[(PortGroupSpec, SecurityPolicy)], now: Instant) -> bool {
        let wanted: HashSet<&str> = groups.iter().map(|(g, _)| g.name.as_str()).collect();
        for (g, name) in self.group_names().into_iter().enumerate().rev() {
            if wanted.contains(name.as_str()) {
                continue;
            }
            match self.switch.remove_group(GroupId(g)) {
                Ok(_) => self.event(now, "config", format!("port group {name}: removed")),
                Err(e) => self.event(now, "config", format!("port group {name}: not removed: {e}")),
            }
        }
        let have = self.group_names();
        for (spec, security) in groups {
            if !have.contains(&spec.name) {
                match self.switch.add_group(spec.clone(), *security) {
                    Ok(_) => self.event(now, "config", format!("port group {}: added", spec.name)),
                    Err(e) => self.event(now, "config", format!("port group {}: not added: {e}", spec.name)),
                }
            }
        }
        let aligned = self.group_names().iter().eq(groups.iter().map(|(g, _)| &g.name));
        if !aligned {
            let what = "port groups out of order after a change: ports not changed; restart the switch".to_string();
            self.event(now, "config", what);
            return false;
        }
        for (g, (new, _)) in groups.iter().enumerate() {
            let team = self.switch.team_mut();
            if team.group(GroupId(g)).is_some_and(|old| old != new) {
                if let Err(e) = team.reconfigure(GroupId(g), new, now) {
                    self.event(now, "config", format!("port group {}: not changed: {e}", new.name));
                }
            }
        }
        true
    }

    /// The ports present (not the empty slots of removed ones).
    pub(super) fn present_ports(&self) -> impl Iterator<Item = &Port<P::Device>> {
        self.ports.iter().filter(|p| p.present())
    }

    /// The port groups' names, in ID order.
    fn group_names(&self) -> Vec<String> {
        let team = self.switch.team();
        (0..team.group_count())
            .filter_map(|g| team.group(GroupId(g)).map(|s| s.name.clone()))
            .collect()
    }

    /// Removes port `i`: see the module documentation.
    fn remove_port(&mut self, i: usize, now: Instant) {
        self.detach_port(i, "port removed", now);
        let id = self.ports[i].plan.id;
        self.index.remove(&id);
        let _ = self.switch.remove_port(id);
        // Its receive queue's frames go with it.
        self.ingress[i] = ingress::queue();
        let p = &mut self.ports[i];
        p.vacant_since = Some(now);
        p.extra = ExtraDrops::default();
        p.ecn_marked = 0;
        p.queue = super::QueueTally::default();
        let what = format!("port {}: removed (interface {})", p.plan.name, p.plan.interface);
        self.pollfds_stale = true;
        self.event(now, "port", what);
    }

    /// Adds port `w` in a free slot with the smallest free ID, and attaches it if its interface
    /// is there.
    fn add_port(&mut self, w: &PortPlan, now: Instant) {
        let id = (1..)
            .map(PortId)
            .find(|id| !self.index.contains_key(id))
            .expect("IDs remain");
        let spec = PortSpec {
            id,
            mac: w.mac,
            group: w.group,
        };
        // Detached until its interface is opened (see `attach_port`): it owns no MAC before.
        if let Err(e) = self.switch.add_detached_port(spec) {
            self.event(now, "port", format!("port {}: not added: {e}", w.name));
            return;
        }
        self.switch.set_mac_takeover(id, w.mac_takeover, now);
        let reusable = self.ports.iter().position(|p| {
            p.vacant_since
                .is_some_and(|t| now.saturating_duration_since(t) >= SLOT_QUARANTINE)
        });
        let i = match reusable {
            Some(i) => i,
            None if self.ports.len() < MAX_PORTS => {
                let i = self.ports.len();
                self.ports.push(Port::empty());
                // Receive queues are ports' then uplinks': the new port's goes before the
                // uplinks', whose indices are counted from the number of ports.
                self.ingress.insert(i, ingress::queue());
                i
            }
            None => {
                let _ = self.switch.remove_port(id);
                let what = format!("port {}: not added: the switch has {MAX_PORTS} ports", w.name);
                self.event(now, "port", what);
                return;
            }
        };
        // Counts a port worker kept for the slot's last port are not the new one's.
        if let Some(k) = self.ports[i].home {
            self.workers[k].lane.tallies[i].take();
        }
        self.ports[i] = Port {
            plan: PortPlan { id, ..w.clone() },
            vacant_since: None,
            ..Port::empty()
        };
        self.index.insert(id, i);
        let what = format!("port {}: added on interface {}", w.name, w.interface);
        self.event(now, "port", what);
        self.attach_port(i, now);
    }
}

impl<D: Device> Port<D> {
    /// An empty slot.
    fn empty() -> Self {
        Port {
            plan: PortPlan {
                id: PortId(0),
                name: String::new(),
                interface: String::new(),
                mac: MacAddr([0; 6]),
                group: GroupId(0),
                leaf: NodeId(0),
                backend: BackendChoice::AfPacket,
                mac_takeover: false,
            },
            io: PortIo::Detached,
            mtu: 0,
            extra: ExtraDrops::default(),
            ecn_marked: 0,
            queue: super::QueueTally::default(),
            attach_error: None,
            vacant_since: Some(Instant::ZERO),
            home: None,
            held: std::collections::VecDeque::new(),
        }
    }
}

/// Whether two trees have the same nodes under the same parents (controls may differ).
fn same_shape(a: &Tree, b: &Tree) -> bool {
    a.len() == b.len()
        && a.ids().all(|id| {
            let (x, y) = (a.node(id), b.node(id));
            x.parent == y.parent && x.spec.name == y.spec.name
        })
}
