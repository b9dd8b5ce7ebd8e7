//! Uplinks that come and go while the switch runs: a NIC added to the team, or one taken out
//! for maintenance, through the API or a reload.
//!
//! Model. An uplink's index is its [`UplinkId`] in the team, its scheduler in NetIOC and its
//! receive queue (after the ports' slots), so the data plane's uplinks are always the team's,
//! in the same order. A change comes as the uplinks wanted, in order, with the port groups'
//! failover orders indexed by that list; the uplinks kept must keep their order and new ones
//! come after them (the checks before a change or reload refuse anything else). It is applied
//! in three steps, so the team is valid after each: new uplinks are appended (down until their
//! interface is attached and has carrier, and used by no group yet), the groups take their new
//! orders (translated to the indices of that moment, by name), and then the uplinks no longer
//! wanted, which no order lists any more, are removed, the ones after them moving down an
//! index ([`Team::remove_uplink`](teamster_core::teaming::Team::remove_uplink)). A removed
//! uplink's socket is closed off this thread and the frames queued for it are dropped; the
//! other uplinks' queues, pacers and sockets are untouched. A kept uplink keeps its interface,
//! capacity and backend whatever the list says (changing those is a removal and an addition).

use super::{ingress, Datapath, ExtraDrops, Uplink, UplinkPlan, MAX_UPLINKS};
use crate::pacer::Pacer;
use crate::platform::Platform;
use teamster_core::switch::SecurityPolicy;
use teamster_core::teaming::{FailoverOrder, LinkState, PortGroupSpec, UplinkId, UplinkSpec};
use teamster_core::Instant;

impl<P: Platform> Datapath<P> {
    /// Appends the uplinks of `want` the switch does not have (by name), each down, unused and
    /// detached (see [`Datapath::attach_added`]); returns their names. Refused past
    /// [`MAX_UPLINKS`] (the checks refuse such a file first).
    pub(super) fn add_uplinks(&mut self, want: &[UplinkPlan], now: Instant) -> Vec<String> {
        let mut added = Vec::new();
        for w in want {
            if self.uplinks.iter().any(|u| u.plan.name == w.name) {
                continue;
            }
            if self.uplinks.len() >= MAX_UPLINKS {
                let what = format!("uplink {}: not added: the switch has {MAX_UPLINKS} uplinks", w.name);
                self.event(now, "config", what);
                continue;
            }
            let spec = UplinkSpec {
                name: w.name.clone(),
                capacity: w.capacity,
            };
            let u = match self.switch.add_uplink(spec) {
                Ok(u) => u,
                Err(e) => {
                    self.event(now, "config", format!("uplink {}: not added: {e}", w.name));
                    continue;
                }
            };
            let _ = self.switch.team_mut().set_link(u, LinkState::Down, now);
            self.ioc.add_uplink(w.capacity);
            self.uplinks.push(Uplink {
                plan: w.clone(),
                backend: None,
                mtu: 0,
                pacer: Pacer::new(w.capacity.bps_f64(), now),
                extra: ExtraDrops::default(),
                carrier: false,
                ecn_marked: 0,
                attach_error: None,
                rx: super::rx_queues::UplinkRx::keyed(self.free_rx_key()),
                fanout: None,
            });
            self.ingress.push(ingress::queue());
            let what = format!("uplink {}: added on interface {}", w.name, w.interface);
            self.event(now, "config", what);
            added.push(w.name.clone());
        }
        added
    }

    /// Attaches the uplinks `added` names, once the uplinks removed by the same change have
    /// closed their sockets (an uplink replaced by another on the same interface: AF_XDP takes
    /// one socket per queue). One that cannot be opened now is retried as a missing one is.
    pub(super) fn attach_added(&mut self, added: &[String], now: Instant) {
        for u in 0..self.uplinks.len() {
            if self.uplinks[u].backend.is_none() && added.contains(&self.uplinks[u].plan.name) {
                self.attach_uplink(u, now);
            }
        }
    }

    /// `groups` with failover orders indexed by `want` re-indexed by the uplinks the switch
    /// has now (which include every uplink of `want`, once [`Datapath::add_uplinks`] ran);
    /// None, with an event, if an order names an uplink the switch does not have (a bug of the
    /// caller, or an uplink refused past [`MAX_UPLINKS`]).
    pub(super) fn orders_as_running(
        &mut self,
        groups: &[(PortGroupSpec, SecurityPolicy)],
        want: &[UplinkPlan],
        now: Instant,
    ) -> Option<Vec<(PortGroupSpec, SecurityPolicy)>> {
        let running = |u: &UplinkId| {
            let name = want.get(u.0)?.name.as_str();
            self.uplinks.iter().position(|x| x.plan.name == name).map(UplinkId)
        };
        let translated: Option<Vec<_>> = groups
            .iter()
            .map(|(g, security)| {
                let order = FailoverOrder {
                    active: g.order.active.iter().map(running).collect::<Option<_>>()?,
                    standby: g.order.standby.iter().map(running).collect::<Option<_>>()?,
                };
                Some((PortGroupSpec { order, ..g.clone() }, *security))
            })
            .collect();
        if translated.is_none() {
            let what = "a failover order names an uplink the switch does not have: teaming not changed".to_string();
            self.event(now, "config", what);
        }
        translated
    }

    /// Removes the uplinks `want` does not name; then says whether the uplinks are `want`'s,
    /// in its order (false, with an event, means a bug: the checks refuse such a change).
    pub(super) fn remove_uplinks(&mut self, want: &[UplinkPlan], now: Instant) -> bool {
        for u in (0..self.uplinks.len()).rev() {
            if want.iter().any(|w| w.name == self.uplinks[u].plan.name) {
                continue;
            }
            let name = self.uplinks[u].plan.name.clone();
            if let Err(e) = self.switch.remove_uplink(UplinkId(u)) {
                self.event(now, "config", format!("uplink {name}: not removed: {e}"));
                continue;
            }
            self.detach_queues(u);
            let mut gone = self.uplinks.remove(u);
            // Its counters went with it (what it sent since the last turn is not counted).
            if let Some(backend) = gone.backend.take() {
                self.close(backend);
            }
            // What waited for it is dropped, counted as `detached` on the port that sent it
            // (found by leaf through one map, not a scan of the ports per frame).
            let waiting = self.ioc.remove_uplink(u);
            if !waiting.is_empty() {
                let by_leaf: std::collections::HashMap<_, _> = (0..self.ports.len())
                    .filter(|&i| self.ports[i].present())
                    .map(|i| (self.ports[i].plan.leaf, i))
                    .collect();
                for (leaf, frame) in waiting {
                    if let Some(&i) = by_leaf.get(&leaf) {
                        self.ports[i].extra.detached += 1;
                    }
                    self.pool.give(frame.into_bytes());
                }
            }
            // Received frames not yet switched go with it (their buffers are freed).
            self.ingress.remove(self.ports.len() + u);
            self.pollfds_stale = true;
            let what = format!("uplink {name}: removed (interface {})", gone.plan.interface);
            self.event(now, "config", what);
        }
        let aligned = self
            .uplinks
            .iter()
            .map(|u| &u.plan.name)
            .eq(want.iter().map(|w| &w.name));
        if !aligned {
            let what = "uplinks out of order after a change: restart the switch".to_string();
            self.event(now, "config", what);
        }
        aligned
    }

    /// Gives each uplink the administrative state `want` gives it (by name).
    pub(super) fn set_admin(&mut self, want: &[UplinkPlan], now: Instant) {
        for u in 0..self.uplinks.len() {
            let Some(w) = want.iter().find(|w| w.name == self.uplinks[u].plan.name) else {
                continue;
            };
            if self.uplinks[u].plan.admin_up != w.admin_up {
                self.uplinks[u].plan.admin_up = w.admin_up;
                let what = format!("{} administratively {}", w.name, if w.admin_up { "up" } else { "down" });
                self.event(now, "link", what);
                self.refresh_link(u, now);
            }
        }
    }
}
