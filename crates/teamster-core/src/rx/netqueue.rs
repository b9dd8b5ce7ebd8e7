//! NetQueue: an uplink's receive queues with destination-MAC filters, placed evenly or packed
//! by load (Dynamic NetQueue).
//!
//! Model. An uplink has `queues` receive queues, each served by one core; queue 0 is the default
//! queue and takes every frame no filter claims. A filter matches a VM port's MAC as a frame's
//! destination: the outer destination MAC, or for a VXLAN frame the inner one with its VNI (all
//! VXLAN frames to a host carry the VTEP's MAC outside, so outer filters cannot tell its VMs
//! apart). Filters live on queues 1 to `queues - 1`.
//! - [`Placement::Even`] (NetQueue before Dynamic NetQueue): each filter gets a queue of its own
//!   while queues last, in the order filters are added; the rest share the default queue.
//! - [`Placement::Packed`] (Dynamic NetQueue): filters share as few queues as their load allows.
//!   Every `interval` each filter's load is its packet rate over that interval as a fraction of
//!   what one queue's core receives (`queue_pps`), smoothed by half. Then, in this order:
//!   *spread*: a queue over `spread_above` moves its filters, the largest that fits first, to
//!   the least loaded queue in use where it stays at or under `pack_target` (else to an unused
//!   queue), until it is back under `spread_above`; *pack*: the least loaded queue in use, if
//!   under `pack_below`, is emptied into the others when all of its filters fit under
//!   `pack_target` (one queue a round). `pack_target` sits under `spread_above` and a filter
//!   moved stays two intervals, so a pack never causes the next spread: no flapping. A new
//!   filter joins the fullest queue in use that is at or under `pack_target` (it has no load
//!   yet), else an unused queue.
//!
//! Each move is a [`QueueEvent`] with its reason and every queue's load; at most
//! [`MAX_EVENTS`] wait to be taken. Filters are at most [`MAX_FILTERS`] per uplink.

use crate::teaming::PortId;
use crate::wire::{FlowKey, MacAddr};
use crate::Instant;
use core::time::Duration;
use std::collections::{HashMap, VecDeque};

/// The most filters an uplink holds (one per VM port on it).
pub const MAX_FILTERS: usize = 4096;
/// The most events kept until taken; older ones are dropped (and counted).
pub const MAX_EVENTS: usize = 1024;

/// How filters are placed on queues.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Placement {
    Even,
    Packed(Packing),
}

/// Dynamic NetQueue's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Packing {
    /// Packets per second one queue's core receives: load 1.0.
    pub queue_pps: f64,
    pub interval: Duration,
    pub spread_above: f64,
    pub pack_below: f64,
    pub pack_target: f64,
}

impl Default for Packing {
    /// 1 Mpps per core, every second, spread above 80 %, pack a queue under 40 % into others
    /// up to 70 %.
    fn default() -> Packing {
        Packing {
            queue_pps: 1e6,
            interval: Duration::from_secs(1),
            spread_above: 0.8,
            pack_below: 0.4,
            pack_target: 0.7,
        }
    }
}

impl Packing {
    /// Refuses knobs that would flap or divide by zero; the error names the knob.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.queue_pps.is_finite() && self.queue_pps >= 1.0) {
            return Err(format!("queue_pps = {}: expected at least 1", self.queue_pps));
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&self.interval) {
            return Err(format!("interval = {:?}: expected 10 ms to an hour", self.interval));
        }
        let (b, t, a) = (self.pack_below, self.pack_target, self.spread_above);
        if !(0.0 < b && b < t && t < a && a <= 1.0) {
            return Err(format!(
                "pack_below = {b}, pack_target = {t}, spread_above = {a}: expected 0 < pack_below < pack_target < spread_above <= 1"
            ));
        }
        Ok(())
    }
}

/// A filter: a port's MAC (and VNI, for VXLAN's inner MAC) steered to a queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    pub port: PortId,
    pub mac: MacAddr,
    pub vni: Option<u32>,
    pub queue: u16,
    /// Its smoothed load, as a fraction of a queue.
    pub load: f64,
    packets: u64,
    moved: Option<Instant>,
}

/// Why a filter changed queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Its queue was over `spread_above`.
    Spread,
    /// Its queue was under `pack_below` and everything on it fitted elsewhere.
    Pack,
}

/// A filter's move, with every queue's load when it was decided.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueEvent {
    pub at: Instant,
    pub port: PortId,
    /// The filter's MAC (and VNI).
    pub mac: MacAddr,
    pub vni: Option<u32>,
    pub from: u16,
    pub to: u16,
    pub reason: Reason,
    /// Each queue's load before the round's moves.
    pub loads: Vec<f64>,
}

/// One uplink's receive queues and filters.
#[derive(Debug, Clone)]
pub struct NetQueue {
    queues: u16,
    placement: Placement,
    filters: Vec<Filter>,
    index: HashMap<(MacAddr, Option<u32>), usize>,
    /// Frames the default queue took since the last round.
    default_packets: u64,
    next: Option<Instant>,
    events: VecDeque<QueueEvent>,
    pub events_dropped: u64,
}

impl NetQueue {
    /// `queues` receive queues (1-4096; queue 0 the default), filters placed as `placement` says.
    pub fn new(queues: u16, placement: Placement) -> Result<NetQueue, String> {
        if !(1..=4096).contains(&queues) {
            return Err(format!("{queues} queues: expected 1 to 4096"));
        }
        if let Placement::Packed(p) = placement {
            p.validate()?;
        }
        Ok(NetQueue {
            queues,
            placement,
            filters: Vec::new(),
            index: HashMap::new(),
            default_packets: 0,
            next: None,
            events: VecDeque::new(),
            events_dropped: 0,
        })
    }

    /// Adds `port`'s filter (its MAC, with `vni` for VXLAN's inner MAC) at `now`; the queue it
    /// got. A MAC already filtered, or the filter table full, is an error.
    pub fn add_filter(&mut self, port: PortId, mac: MacAddr, vni: Option<u32>, now: Instant) -> Result<u16, String> {
        if self.index.contains_key(&(mac, vni)) {
            return Err(format!("{mac} already has a filter"));
        }
        if self.filters.len() >= MAX_FILTERS {
            return Err(format!("the uplink holds {MAX_FILTERS} filters already"));
        }
        let queue = self.place_new();
        self.index.insert((mac, vni), self.filters.len());
        self.filters.push(Filter {
            port,
            mac,
            vni,
            queue,
            load: 0.0,
            packets: 0,
            moved: None,
        });
        if let (Placement::Packed(p), None) = (self.placement, self.next) {
            self.next = Some(now + p.interval);
        }
        Ok(queue)
    }

    /// Whether a filter on `mac` (with `vni`) exists.
    pub fn has_filter(&self, mac: MacAddr, vni: Option<u32>) -> bool {
        self.index.contains_key(&(mac, vni))
    }

    /// Removes the filter on `mac` (with `vni`), if any: one MAC of a port that has several.
    pub fn remove_filter(&mut self, mac: MacAddr, vni: Option<u32>) {
        let Some(i) = self.index.remove(&(mac, vni)) else {
            return;
        };
        self.filters.remove(i);
        for (j, f) in self.filters.iter().enumerate().skip(i) {
            self.index.insert((f.mac, f.vni), j);
        }
        self.fill_freed_queues();
    }

    /// Removes every filter of `port`.
    pub fn remove_port(&mut self, port: PortId) {
        self.filters.retain(|f| f.port != port);
        self.index = self
            .filters
            .iter()
            .enumerate()
            .map(|(i, f)| ((f.mac, f.vni), i))
            .collect();
        self.fill_freed_queues();
    }

    /// Under even placement, moves filters waiting on the default queue, in the order they
    /// came, into queues a removal left empty.
    fn fill_freed_queues(&mut self) {
        if let Placement::Even = self.placement {
            // Filters past the queues move up into the freed queue, in the order they came.
            for q in 1..self.queues {
                if !self.filters.iter().any(|f| f.queue == q) {
                    if let Some(f) = self.filters.iter_mut().find(|f| f.queue == 0) {
                        f.queue = q;
                    }
                }
            }
        }
    }

    /// The queue a new filter goes to.
    fn place_new(&self) -> u16 {
        if self.queues == 1 {
            return 0;
        }
        match self.placement {
            Placement::Even => (1..self.queues)
                .find(|q| !self.filters.iter().any(|f| f.queue == *q))
                .unwrap_or(0),
            Placement::Packed(p) => {
                let loads = self.queue_loads();
                let used = self.used_queues();
                used.iter()
                    .copied()
                    .filter(|q| loads[usize::from(*q)] <= p.pack_target)
                    .max_by(|a, b| loads[usize::from(*a)].total_cmp(&loads[usize::from(*b)]).then(b.cmp(a)))
                    .or_else(|| (1..self.queues).find(|q| !used.contains(q)))
                    .unwrap_or(1)
            }
        }
    }

    /// The queue a frame goes to, counting it: the queue of the filter on its destination MAC
    /// (VXLAN: the inner MAC and VNI), else the default queue.
    pub fn receive(&mut self, flow: &FlowKey) -> u16 {
        match &flow.vxlan {
            Some(v) => self.count(v.inner.dst_mac, Some(v.vni)),
            None => self.count(flow.dst_mac, None),
        }
    }

    /// The queue of a frame to `mac` (with `vni`, inside VXLAN), counting it: what
    /// [`NetQueue::receive`] does for a frame whose key was not parsed.
    pub fn count(&mut self, mac: MacAddr, vni: Option<u32>) -> u16 {
        match self.index.get(&(mac, vni)) {
            Some(&i) => {
                self.filters[i].packets += 1;
                self.filters[i].queue
            }
            None => {
                self.default_packets += 1;
                0
            }
        }
    }

    /// Each queue's load (the sum of its filters'), indexed by queue.
    pub fn queue_loads(&self) -> Vec<f64> {
        let mut l = vec![0.0; usize::from(self.queues)];
        for f in &self.filters {
            l[usize::from(f.queue)] += f.load;
        }
        l
    }

    /// The non-default queues holding a filter, in order.
    pub fn used_queues(&self) -> Vec<u16> {
        let mut q: Vec<u16> = self.filters.iter().map(|f| f.queue).filter(|q| *q != 0).collect();
        q.sort_unstable();
        q.dedup();
        q
    }

    pub fn filters(&self) -> &[Filter] {
        &self.filters
    }

    pub fn queues(&self) -> u16 {
        self.queues
    }

    /// When the next packing round is due (Dynamic NetQueue with filters only).
    pub fn poll_at(&self) -> Option<Instant> {
        self.next
    }

    /// The next move made, if any.
    pub fn poll_event(&mut self) -> Option<QueueEvent> {
        self.events.pop_front()
    }

    /// Runs the packing round due at `now`: measures the filters' loads, then spreads and
    /// packs as the module documentation says.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Placement::Packed(p) = self.placement else { return };
        let Some(due) = self.next.filter(|t| *t <= now) else {
            return;
        };
        let elapsed = (now - due + p.interval).as_secs_f64();
        self.next = Some(now + p.interval);
        for f in &mut self.filters {
            let rate = f.packets as f64 / elapsed / p.queue_pps;
            f.load = (f.load + rate) / 2.0;
            f.packets = 0;
        }
        self.default_packets = 0;
        let before = self.queue_loads();
        let dwell = 2 * p.interval;
        let settled = |f: &Filter| f.moved.is_none_or(|t| now.saturating_duration_since(t) >= dwell);
        let mut moves: Vec<(usize, u16, Reason)> = Vec::new();
        let mut loads = before.clone();
        // Spread: over the line, move filters off, the largest that fits first.
        for q in self.used_queues() {
            while loads[usize::from(q)] > p.spread_above {
                let mut candidates: Vec<usize> = (0..self.filters.len())
                    .filter(|&i| self.filters[i].queue == q && settled(&self.filters[i]))
                    .filter(|i| !moves.iter().any(|m| m.0 == *i))
                    .collect();
                candidates.sort_by(|a, b| self.filters[*b].load.total_cmp(&self.filters[*a].load).then(a.cmp(b)));
                let target = candidates.iter().find_map(|&i| {
                    let l = self.filters[i].load;
                    self.spread_target(q, l, &loads, &moves, p).map(|to| (i, to))
                });
                let Some((i, to)) = target else { break };
                let l = self.filters[i].load;
                loads[usize::from(q)] -= l;
                loads[usize::from(to)] += l;
                moves.push((i, to, Reason::Spread));
                if moves.iter().filter(|m| m.2 == Reason::Spread).count() > self.filters.len() {
                    break;
                }
            }
        }
        // Pack: empty the least loaded queue in use into the others, if all of it fits.
        let used: Vec<u16> = (1..self.queues)
            .filter(|q| {
                self.filters
                    .iter()
                    .enumerate()
                    .any(|(i, f)| current(f, i, &moves) == *q)
            })
            .collect();
        if moves.is_empty() && used.len() > 1 {
            let lightest = used
                .iter()
                .copied()
                .min_by(|a, b| loads[usize::from(*a)].total_cmp(&loads[usize::from(*b)]).then(b.cmp(a)));
            if let Some(q) = lightest.filter(|q| loads[usize::from(*q)] < p.pack_below) {
                let mut trial = loads.clone();
                let mut plan = Vec::new();
                let mut members: Vec<usize> = (0..self.filters.len())
                    .filter(|&i| self.filters[i].queue == q)
                    .collect();
                members.sort_by(|a, b| self.filters[*b].load.total_cmp(&self.filters[*a].load).then(a.cmp(b)));
                let all_fit = members.iter().all(|&i| {
                    let l = self.filters[i].load;
                    // Best fit: the fullest other queue in use it still fits in.
                    let to = used
                        .iter()
                        .copied()
                        .filter(|o| *o != q && trial[usize::from(*o)] + l <= p.pack_target)
                        .max_by(|a, b| trial[usize::from(*a)].total_cmp(&trial[usize::from(*b)]).then(b.cmp(a)));
                    match to {
                        Some(to) if settled(&self.filters[i]) => {
                            trial[usize::from(to)] += l;
                            trial[usize::from(q)] -= l;
                            plan.push((i, to, Reason::Pack));
                            true
                        }
                        _ => false,
                    }
                });
                if all_fit {
                    moves = plan;
                }
            }
        }
        for (i, to, reason) in moves {
            let f = &mut self.filters[i];
            let event = QueueEvent {
                at: now,
                port: f.port,
                mac: f.mac,
                vni: f.vni,
                from: f.queue,
                to,
                reason,
                loads: before.clone(),
            };
            f.queue = to;
            f.moved = Some(now);
            if self.events.len() >= MAX_EVENTS {
                self.events.pop_front();
                self.events_dropped += 1;
            }
            self.events.push_back(event);
        }
    }

    /// Where a filter of load `l` leaving queue `from` goes: the least loaded queue in use it
    /// fits in under `pack_target`, else the first unused queue.
    fn spread_target(
        &self,
        from: u16,
        l: f64,
        loads: &[f64],
        moves: &[(usize, u16, Reason)],
        p: Packing,
    ) -> Option<u16> {
        let in_use = |q: u16| self.filters.iter().enumerate().any(|(i, f)| current(f, i, moves) == q);
        let used = (1..self.queues).filter(|q| *q != from && in_use(*q));
        let fits = used
            .filter(|q| loads[usize::from(*q)] + l <= p.pack_target)
            .min_by(|a, b| loads[usize::from(*a)].total_cmp(&loads[usize::from(*b)]).then(a.cmp(b)));
        fits.or_else(|| (1..self.queues).find(|q| *q != from && !in_use(*q)))
    }
}

/// A filter's queue once this round's `moves` so far are made.
fn current(f: &Filter, i: usize, moves: &[(usize, u16, Reason)]) -> u16 {
    moves.iter().rev().find(|m| m.0 == i).map_or(f.queue, |m| m.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Vxlan;

    fn mac(i: u16) -> MacAddr {
        MacAddr([2, 0, 0, 0, (i >> 8) as u8, i as u8])
    }

    fn to(m: MacAddr) -> FlowKey {
        FlowKey {
            dst_mac: m,
            ..Default::default()
        }
    }

    /// Eight queues whose cores take 10,000 packets a second each (load 1.0), so that the
    /// test sends few packets.
    fn packed() -> NetQueue {
        let p = Packing {
            queue_pps: 10_000.0,
            ..Packing::default()
        };
        NetQueue::new(8, Placement::Packed(p)).unwrap()
    }

    /// Runs `rounds` packing rounds of one second each from `*t`, each filter `i` receiving
    /// `pps(i)` packets per second.
    fn rounds(nq: &mut NetQueue, t: &mut Instant, n: usize, pps: &dyn Fn(usize) -> u64) {
        for _ in 0..n {
            let filters: Vec<MacAddr> = nq.filters().iter().map(|f| f.mac).collect();
            for (i, m) in filters.iter().enumerate() {
                for _ in 0..pps(i) {
                    nq.receive(&to(*m));
                }
            }
            *t = *t + Duration::from_secs(1);
            nq.handle_timeout(*t);
        }
    }

    #[test]
    fn even_placement_gives_each_filter_a_queue_while_they_last() {
        let mut nq = NetQueue::new(8, Placement::Even).unwrap();
        let got: Vec<u16> = (0..10)
            .map(|i| {
                nq.add_filter(PortId(u32::from(i)), mac(i), None, Instant::ZERO)
                    .unwrap()
            })
            .collect();
        assert_eq!(got, [1, 2, 3, 4, 5, 6, 7, 0, 0, 0]);
        assert_eq!(nq.receive(&to(mac(3))), 4);
        assert_eq!(nq.receive(&to(mac(99))), 0, "no filter: the default queue");
        // A port leaves: the first filter on the default queue takes its queue.
        nq.remove_port(PortId(3));
        assert_eq!(nq.receive(&to(mac(7))), 4);
        assert_eq!(nq.receive(&to(mac(8))), 0);
        assert!(
            nq.add_filter(PortId(50), mac(8), None, Instant::ZERO).is_err(),
            "a MAC twice"
        );
        // One MAC of a port leaves: its queue goes to the next filter waiting, and every
        // other filter keeps its queue.
        nq.remove_filter(mac(1), None);
        assert!(!nq.has_filter(mac(1), None) && nq.has_filter(mac(2), None));
        assert_eq!(nq.receive(&to(mac(1))), 0);
        assert_eq!(nq.receive(&to(mac(8))), 2);
        assert_eq!(nq.receive(&to(mac(9))), 0);
        assert_eq!(nq.receive(&to(mac(6))), 7);
        nq.remove_filter(mac(77), None);
        assert_eq!(nq.filters().len(), 8);
    }

    #[test]
    fn vxlan_frames_are_steered_by_their_inner_mac_and_vni() {
        let mut nq = NetQueue::new(4, Placement::Even).unwrap();
        nq.add_filter(PortId(1), mac(1), Some(5001), Instant::ZERO).unwrap();
        nq.add_filter(PortId(2), mac(2), None, Instant::ZERO).unwrap();
        let vtep = MacAddr([2, 0xee, 0, 0, 0, 1]);
        let tunnelled = |m: MacAddr, vni: u32| FlowKey {
            dst_mac: vtep,
            vxlan: Some(Box::new(Vxlan { vni, inner: to(m) })),
            ..Default::default()
        };
        assert_eq!(nq.receive(&tunnelled(mac(1), 5001)), 1);
        assert_eq!(nq.receive(&tunnelled(mac(1), 5002)), 0, "another VNI");
        assert_eq!(
            nq.receive(&tunnelled(mac(2), 5001)),
            0,
            "an outer filter does not match inside"
        );
        assert_eq!(nq.receive(&to(mac(2))), 2);
    }

    #[test]
    fn dynamic_netqueue_packs_light_load_spreads_heavy_load_and_settles() {
        let mut nq = packed();
        let mut t = Instant::ZERO;
        for i in 0..16 {
            nq.add_filter(PortId(u32::from(i)), mac(i), None, t).unwrap();
        }
        assert_eq!(nq.used_queues(), [1], "new filters join the queue in use");
        // Light: 16 x 2 % of a core, one queue.
        rounds(&mut nq, &mut t, 5, &|_| 200);
        assert_eq!(nq.used_queues(), [1]);
        // Heavy: 16 x 20 % (3.2 cores' worth): spread until no queue is over 80 %.
        rounds(&mut nq, &mut t, 10, &|_| 2_000);
        let loads = nq.queue_loads();
        eprintln!("heavy: {} queues, loads {loads:.2?}", nq.used_queues().len());
        assert!(nq.used_queues().len() >= 4, "{loads:?}");
        assert!(loads.iter().all(|l| *l <= 0.8 + 1e-9), "{loads:?}");
        let spreads = std::iter::from_fn(|| nq.poll_event())
            .filter(|e| e.reason == Reason::Spread)
            .count();
        assert!(spreads >= 3, "{spreads}");
        // Settled, the same load for a minute moves nothing (no flapping).
        rounds(&mut nq, &mut t, 30, &|_| 2_000);
        while nq.poll_event().is_some() {}
        rounds(&mut nq, &mut t, 60, &|_| 2_000);
        assert_eq!(
            std::iter::from_fn(|| nq.poll_event()).count(),
            0,
            "{:?}",
            nq.queue_loads()
        );
        // Moderate: 16 x 5 % (0.8 of a core): packed back, one queue emptied a round.
        rounds(&mut nq, &mut t, 30, &|_| 500);
        let used = nq.used_queues().len();
        eprintln!("moderate: {used} queues, loads {:.2?}", nq.queue_loads());
        assert!((2..=3).contains(&used), "{:?}", nq.queue_loads());
        assert!(nq.queue_loads().iter().all(|l| *l <= 0.7 + 1e-9));
        let packs: Vec<QueueEvent> = std::iter::from_fn(|| nq.poll_event()).collect();
        assert!(
            packs.iter().all(|e| e.reason == Reason::Pack && e.loads.len() == 8),
            "{packs:?}"
        );
    }

    #[test]
    fn knobs_that_would_flap_are_refused() {
        let bad = Packing {
            pack_target: 0.9,
            ..Packing::default()
        };
        let e = NetQueue::new(8, Placement::Packed(bad)).unwrap_err();
        assert!(e.contains("pack_below < pack_target < spread_above"), "{e}");
        assert!(NetQueue::new(0, Placement::Even).is_err());
        let zero = Packing {
            queue_pps: 0.0,
            ..Packing::default()
        };
        assert!(NetQueue::new(8, Placement::Packed(zero))
            .unwrap_err()
            .contains("queue_pps"));
    }
}
