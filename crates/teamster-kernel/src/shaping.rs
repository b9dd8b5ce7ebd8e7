//! NetIOC on the kernel path: each uplink's HTB hierarchy, kept to the engine's tree.
//!
//! Model. While the NetIOC tree asks anything of the switch's ports
//! ([`htb::needs_shaping`]: a reservation, a limit, uneven shares), every uplink carries the
//! HTB qdisc [`htb::plan`] gives for its capacity, every port a leaf class on every uplink (so a
//! failover or an LBT move stays one map write: the port's priority is the same everywhere),
//! and each port's frames to an uplink carry its class's priority, which the tcx program sets.
//! The plan is made again when the tree, the ports, an uplink or a capacity changes, and only
//! the classes that differ are written ([`htb::diff`]). With nothing asked, the uplinks keep the
//! kernel's default qdisc and the bridge's speed.
//!
//! Ownership. Teamster replaces only the kernel's default root (handle 0). Its own `7473:`, left
//! by an earlier run (killed, or upgraded), is taken over as it stands: its classes are read,
//! those the plan keeps are written again in place and the others deleted, so nothing queued
//! is lost. Any other root qdisc is an operator's, and the uplink is refused by name rather
//! than half-used. The qdisc is deleted when the uplink is
//! detached or shaping is no longer asked for, if it is still Teamster's.

use crate::tc::{self, Tc};
use std::collections::BTreeMap;
use teamster_core::ioc::htb::{self, ClassIds, Op, UplinkPlan};
use teamster_core::ioc::{NodeId, Tree};
use teamster_core::teaming::{Policy, PortId};
use teamster_core::units::Bandwidth;
use teamster_core::Instant;

/// An uplink's interface and capacity, as the shaping sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapedUplink {
    pub interface: String,
    pub ifindex: u32,
    pub capacity: Bandwidth,
}

/// What the plans are made from: compared each turn, cloned only when it changed.
#[derive(Debug, Clone, PartialEq)]
struct Inputs {
    tree: Option<Tree>,
    leaves: Vec<(PortId, NodeId)>,
    /// Per port leaf: the part of its limit one uplink carries.
    spread: BTreeMap<NodeId, f64>,
    uplinks: Vec<ShapedUplink>,
}

/// The uplinks' HTB hierarchies; see the module documentation.
#[derive(Default)]
pub struct Shaping {
    tc: Option<Tc>,
    ids: ClassIds,
    /// By ifindex: the plan the kernel holds.
    held: BTreeMap<u32, (String, UplinkPlan)>,
    last: Option<Inputs>,
    /// After a failure, not tried again before this.
    retry_at: Option<Instant>,
    priorities: BTreeMap<PortId, u32>,
    /// Each port queue's drops when last read, by uplink ifindex and class minor.
    drops_seen: BTreeMap<(u32, u16), u32>,
}

/// What [`Shaping::check`] found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Drops of each port's queues since the last check.
    pub drops: Vec<(PortId, u64)>,
    /// For the event log.
    pub lost: Vec<String>,
}

/// How long a failed plan waits before it is tried again.
const RETRY_NS: u64 = 1_000_000_000;

impl Shaping {
    /// The priority each port's frames carry to an uplink (none while nothing is shaped).
    pub fn priority(&self, p: PortId) -> u32 {
        self.priorities.get(&p).copied().unwrap_or(0)
    }

    /// Brings the uplinks' qdiscs to `tree` for the ports `leaves` (each port's leaf) over
    /// `uplinks`, if anything changed since the last call. `policy_spread` gives, per port, how
    /// many uplinks its traffic is spread over (its limit is split between them). An error names
    /// the uplink and what the kernel refused; it is tried again a second later.
    pub fn sync(
        &mut self,
        tree: Option<&Tree>,
        leaves: &[(PortId, NodeId)],
        uplinks: &[ShapedUplink],
        policy_spread: &dyn Fn(PortId) -> usize,
        now: Instant,
    ) -> Result<(), String> {
        let spread: BTreeMap<NodeId, f64> = leaves
            .iter()
            .map(|(p, l)| (*l, 1.0 / policy_spread(*p).max(1) as f64))
            .collect();
        // Nothing changed (the usual turn, shaped or not): nothing to decide.
        let same = self.last.as_ref().is_some_and(|l| {
            l.tree.as_ref() == tree && l.leaves == leaves && l.spread == spread && l.uplinks == uplinks
        });
        if same || self.retry_at.is_some_and(|t| now < t) {
            return Ok(());
        }
        let inputs = Inputs {
            tree: tree.cloned(),
            leaves: leaves.to_vec(),
            spread,
            uplinks: uplinks.to_vec(),
        };
        let Some(tree) = tree.filter(|t| {
            let ls: Vec<NodeId> = leaves.iter().map(|(_, l)| *l).collect();
            htb::needs_shaping(t, &ls)
        }) else {
            self.priorities.clear();
            self.release_all();
            self.last = Some(inputs);
            return Ok(());
        };
        self.last = None;
        match self.apply(tree, leaves, &inputs.spread, uplinks) {
            Ok(()) => {
                self.retry_at = None;
                self.last = Some(inputs);
                Ok(())
            }
            Err(e) => {
                self.retry_at = Some(now + std::time::Duration::from_nanos(RETRY_NS));
                Err(e)
            }
        }
    }

    /// Plans every uplink and writes what differs; an uplink that fails is forgotten, so its
    /// next try starts from a fresh qdisc.
    fn apply(
        &mut self,
        tree: &Tree,
        leaves: &[(PortId, NodeId)],
        spread: &BTreeMap<NodeId, f64>,
        uplinks: &[ShapedUplink],
    ) -> Result<(), String> {
        let gone: Vec<u32> = self
            .held
            .keys()
            .filter(|i| !uplinks.iter().any(|u| u.ifindex == **i))
            .copied()
            .collect();
        for i in gone {
            self.release(i);
        }
        let nodes: Vec<NodeId> = leaves.iter().map(|(_, l)| *l).collect();
        let share = |l: NodeId| spread.get(&l).copied().unwrap_or(1.0);
        for u in uplinks {
            let plan = htb::plan(tree, &nodes, u.capacity.bps_f64(), &share, &mut self.ids)
                .ok_or_else(|| "NetIOC: more than 65,000 HTB classes".to_string())?;
            if let Err(e) = self.put(u, &plan) {
                self.held.remove(&u.ifindex);
                return Err(format!("NetIOC on uplink `{}`: {e}", u.interface));
            }
        }
        self.priorities = leaves
            .iter()
            .filter_map(|(p, l)| Some((*p, htb::priority(self.ids.get(&tree.node(*l).spec.name)?))))
            .collect();
        Ok(())
    }

    /// Writes `plan` to uplink `u`: a fresh root first if Teamster holds none there (refusing a
    /// root qdisc that is not its own), then the classes that differ from what it holds.
    fn put(&mut self, u: &ShapedUplink, plan: &UplinkPlan) -> Result<(), String> {
        let tc = open(&mut self.tc)?;
        let kept = match self.held.get(&u.ifindex) {
            Some((name, held)) if *name == u.interface => Some(held.clone()),
            _ => None,
        };
        let old = match kept {
            Some(held) => held,
            None => match check_root(tc, &u.interface, u.ifindex)? {
                // Teamster's own qdisc, left by an earlier run (killed, or upgraded): taken
                // over as it is, so nothing queued in it is lost; every class is written again.
                Some(qdiscs) => {
                    let found = held_by_kernel(tc, u.ifindex).map_err(|e| format!("cannot read its classes: {e}"))?;
                    // What its queues dropped before this run is not this run's to count.
                    for (minor, drops) in port_queues(&qdiscs) {
                        self.drops_seen.insert((u.ifindex, minor), drops);
                    }
                    self.held.insert(u.ifindex, (u.interface.clone(), found.clone()));
                    found
                }
                None => {
                    tc.replace_root(u.ifindex, htb::UNCLASSIFIED).map_err(|e| {
                        if matches!(tc::errno(&e), Some(libc::ENOENT) | Some(libc::EINVAL)) {
                            format!(
                                "the kernel refused an HTB qdisc ({e}); NetIOC on the kernel path needs CONFIG_NET_SCH_HTB"
                            )
                        } else {
                            format!("cannot set its HTB qdisc: {e}")
                        }
                    })?;
                    self.held
                        .insert(u.ifindex, (u.interface.clone(), UplinkPlan::default()));
                    UplinkPlan::default()
                }
            },
        };
        let tc = self.tc.as_mut().expect("opened above");
        for op in htb::diff(&old, plan) {
            let done = match &op {
                Op::Create(c) => tc.put_class(u.ifindex, c).and_then(|()| {
                    c.queue
                        .map_or(Ok(()), |q| tc.put_leaf_queue(u.ifindex, c.minor, q, true))
                }),
                Op::Change(c) => tc.put_class(u.ifindex, c).and_then(|()| {
                    let was = old.class(c.minor).and_then(|o| o.queue);
                    match c.queue {
                        Some(q) if was != Some(q) => tc.put_leaf_queue(u.ifindex, c.minor, q, was.is_none()),
                        _ => Ok(()),
                    }
                }),
                Op::Delete(m) => tc.delete_class(u.ifindex, *m),
            };
            done.map_err(|e| format!("{op:?}: {e}"))?;
        }
        self.held.insert(u.ifindex, (u.interface.clone(), plan.clone()));
        Ok(())
    }

    /// Reads Teamster's qdiscs on the uplinks: what each port's queues dropped (full) since the
    /// last call, by port; and the uplinks whose qdisc someone else deleted or replaced, which
    /// are forgotten so that the next sync builds them again.
    pub fn check(&mut self) -> Checked {
        let by_minor: BTreeMap<u16, PortId> = self.priorities.iter().map(|(p, prio)| (*prio as u16, *p)).collect();
        let held: Vec<(u32, String)> = self.held.iter().map(|(i, (n, _))| (*i, n.clone())).collect();
        // By ifindex, with the uplink's interface for the event.
        let mut out: BTreeMap<PortId, u64> = BTreeMap::new();
        let mut lost = Vec::new();
        let Ok(tc) = open(&mut self.tc) else {
            return Checked::default();
        };
        let mut seen = BTreeMap::new();
        for (ifindex, name) in held {
            let Ok(qdiscs) = tc.qdiscs(ifindex) else { continue };
            if !qdiscs.iter().any(|q| q.parent == tc::TC_H_ROOT && q.is_ours()) {
                lost.push((ifindex, name));
                continue;
            }
            for (minor, drops) in port_queues(&qdiscs) {
                seen.insert((ifindex, minor), drops);
                let before = self.drops_seen.get(&(ifindex, minor)).copied().unwrap_or(0);
                if let Some(p) = by_minor.get(&minor) {
                    *out.entry(*p).or_default() += u64::from(drops.wrapping_sub(before));
                }
            }
        }
        for (ifindex, _) in &lost {
            self.held.remove(ifindex);
            self.last = None;
        }
        self.drops_seen = seen;
        Checked {
            drops: out.into_iter().filter(|(_, n)| *n > 0).collect(),
            lost: lost
                .into_iter()
                .map(|(_, n)| {
                    format!(
                        "NetIOC: the HTB qdisc on uplink `{n}` was deleted or replaced from outside; it is set again"
                    )
                })
                .collect(),
        }
    }

    /// Takes Teamster's qdisc off `ifindex` (the uplink was detached), if it holds one there.
    pub fn release(&mut self, ifindex: u32) {
        if self.held.remove(&ifindex).is_some() {
            self.last = None;
            if let Ok(tc) = open(&mut self.tc) {
                let _ = tc.delete_root(ifindex);
            }
        }
    }

    /// Takes Teamster's qdisc off every uplink.
    pub fn release_all(&mut self) {
        let held: Vec<u32> = self.held.keys().copied().collect();
        for i in held {
            self.release(i);
        }
    }
}

impl Drop for Shaping {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// The netlink socket in `slot`, opened on first use.
fn open(slot: &mut Option<Tc>) -> Result<&mut Tc, String> {
    if slot.is_none() {
        *slot = Some(Tc::open().map_err(|e| format!("cannot open a netlink socket: {e}"))?);
    }
    Ok(slot.as_mut().expect("just opened"))
}

/// Refuses `interface` if its root qdisc is someone else's (see the module documentation);
/// if it is Teamster's own, the interface's qdiscs.
fn check_root(tc: &mut Tc, interface: &str, ifindex: u32) -> Result<Option<Vec<tc::Qdisc>>, String> {
    let qdiscs = tc
        .qdiscs(ifindex)
        .map_err(|e| format!("cannot read the qdiscs of `{interface}`: {e}"))?;
    match tc::root_of(&qdiscs) {
        Some(q) if !q.is_ours() => Err(format!(
            "`{interface}` has a root qdisc `{}` that Teamster did not set; remove it (`tc qdisc del dev {interface} root`) or use datapath = \"userspace\"",
            q.describe()
        )),
        Some(_) => Ok(Some(qdiscs)),
        None => Ok(None),
    }
}

/// Each port's queue in a dump of an uplink's qdiscs (the bfifo under one of Teamster's
/// classes): its class's minor and its drops.
fn port_queues(qdiscs: &[tc::Qdisc]) -> impl Iterator<Item = (u16, u32)> + '_ {
    qdiscs
        .iter()
        .filter(|q| q.kind == "bfifo" && q.parent >> 16 == u32::from(htb::MAJOR))
        .map(|q| (q.parent as u16, q.drops))
}

/// The classes Teamster's qdisc on `ifindex` holds, parents first, as a plan whose figures are
/// unknown (so that every class the new plan keeps is written again, and every other deleted).
fn held_by_kernel(tc: &mut Tc, ifindex: u32) -> std::io::Result<UplinkPlan> {
    let major = u32::from(htb::MAJOR);
    let mut found: Vec<htb::HtbClass> = tc
        .classes(ifindex)?
        .into_iter()
        .filter(|c| c.kind == "htb" && c.handle >> 16 == major)
        .map(|c| htb::HtbClass {
            name: String::new(),
            minor: c.handle as u16,
            parent: if c.parent == tc::TC_H_ROOT || c.parent >> 16 != major {
                0
            } else {
                c.parent as u16
            },
            rate: 0,
            ceil: 0,
            quantum: 0,
            burst: 0,
            cburst: 0,
            queue: None,
        })
        .collect();
    // Parents first: by depth.
    let depth = |minor: u16| {
        let mut d = 0;
        let mut at = minor;
        while let Some(c) = found.iter().find(|c| c.minor == at).filter(|c| c.parent != 0 && d < 16) {
            at = c.parent;
            d += 1;
        }
        d
    };
    let mut keyed: Vec<(usize, htb::HtbClass)> = found.iter().map(|c| (depth(c.minor), c.clone())).collect();
    keyed.sort_by_key(|(d, c)| (*d, c.minor));
    found = keyed.into_iter().map(|(_, c)| c).collect();
    Ok(UplinkPlan { classes: found })
}

/// Checks before the switch starts that Teamster may shape `interface` (by name, with what is in
/// the way): its root qdisc is the kernel's default or Teamster's own. An interface not there
/// yet passes (it is checked when it comes).
pub fn check_uplink(interface: &str) -> Result<(), String> {
    let Ok(ifindex) = teamster_dp::iface::index(interface) else {
        return Ok(());
    };
    let ifindex = ifindex as u32;
    let mut tc = Tc::open().map_err(|e| format!("cannot open a netlink socket: {e}"))?;
    check_root(&mut tc, interface, ifindex).map(|_| ())
}

/// How many uplinks a port of a group with `policy` and `active` uplinks spreads over: all of
/// them for the per-flow policies, one otherwise.
pub fn spread(policy: Policy, active: usize) -> usize {
    let per_flow = [
        Policy::IP_HASH,
        Policy::IP_HASH_L4,
        Policy::ADDRESS_HASH,
        Policy::DYNAMIC,
        Policy::LBT_DYNAMIC,
    ];
    if per_flow.contains(&policy) {
        active.max(1)
    } else {
        1
    }
}
