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
//!   Every `interval` each filter's packet rate over that interval is measured and smoothed by
//!   half; its load is that rate as a fraction of what its queue's core receives at most, the
//!   queue's *capacity*: `queue_pps` for every queue, unless the driver measures each queue's
//!   and says so ([`NetQueue::set_capacity`]; the live data plane measures the thread reading
//!   the queue, see its `rx_queues`). A filter moved to another queue is counted there at that
//!   queue's capacity. Then, in this order:
//!   *spread*: a queue over `spread_above` with more than one filter moves its filters, the
//!   largest that fits first, to the least loaded queue in use where it stays at or under
//!   `pack_target` (else to an unused queue where it stays at or under `spread_above`), until
//!   it is back under `spread_above`; a filter that would be over `spread_above` wherever it
//!   went stays, and the others move away from it (moving it would only move the hot spot), and
//!   a queue's last filter never moves for a spread; *pack*: the least loaded queue in use, if
//!   under `pack_below`, is emptied into the others when all of its filters fit under
//!   `pack_target` (one queue a round). A queue takes a filter packed or new only if its
//!   *peak* load, the highest of the last [`HOT_ROUNDS`] rounds, leaves room under
//!   `pack_target`, and not for [`HOT_ROUNDS`] intervals after it took a spread filter (whose
//!   load there is a prediction until measured); a filter moved stays two intervals; and
//!   `pack_target` sits under `spread_above`. So a pack never causes the next spread, and a
//!   measure that swings with a busy host does not flap filters back and forth. A new filter
//!   joins the fullest queue in use with room under `pack_target` (it has no load yet), else an
//!   unused queue.
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
/// Rounds a queue's peak load looks back over, and intervals a queue that took a spread
/// filter takes no other.
pub const HOT_ROUNDS: u32 = 10;

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
    /// Its smoothed load, as a fraction of its queue's capacity.
    pub load: f64,
    /// Its smoothed packet rate, per second.
    pub rate: f64,
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
    /// Each queue's capacity, packets per second at load 1.0.
    capacity: Vec<f64>,
    /// Until when each queue takes no filter packed or new (it took a spread filter).
    hot_until: Vec<Option<Instant>>,
    /// Each queue's loads at the last [`HOT_ROUNDS`] rounds, most recent last.
    recent: Vec<VecDeque<f64>>,
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
        let mut pps = f64::INFINITY;
        if let Placement::Packed(p) = placement {
            p.validate()?;
            pps = p.queue_pps;
        }
        Ok(NetQueue {
            queues,
            placement,
            filters: Vec::new(),
            index: HashMap::new(),
            default_packets: 0,
            capacity: vec![pps; usize::from(queues)],
            hot_until: vec![None; usize::from(queues)],
            recent: vec![VecDeque::new(); usize::from(queues)],
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
        let queue = self.place_new(now);
        self.index.insert((mac, vni), self.filters.len());
        self.filters.push(Filter {
            port,
            mac,
            vni,
            queue,
            load: 0.0,
            rate: 0.0,
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
    fn place_new(&self, now: Instant) -> u16 {
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
                    .filter(|q| self.peak(*q).max(loads[usize::from(*q)]) <= p.pack_target && !self.hot(*q, now))
                    .max_by(|a, b| loads[usize::from(*a)].total_cmp(&loads[usize::from(*b)]).then(b.cmp(a)))
                    .or_else(|| (1..self.queues).find(|q| !used.contains(q)))
                    .or_else(|| {
                        (1..self.queues).min_by(|a, b| loads[usize::from(*a)].total_cmp(&loads[usize::from(*b)]))
                    })
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

    /// Sets queue `queue`'s capacity, packets per second at load 1.0 (at least 1; an unknown
    /// queue is ignored), as measured by the driver: from the next round on, loads on it are
    /// fractions of this.
    pub fn set_capacity(&mut self, queue: u16, pps: f64) {
        if let Some(c) = self.capacity.get_mut(usize::from(queue)) {
            if pps.is_finite() {
                *c = pps.max(1.0);
            }
        }
    }

    /// Queue `queue`'s capacity, packets per second at load 1.0.
    pub fn capacity(&self, queue: u16) -> f64 {
        self.capacity.get(usize::from(queue)).copied().unwrap_or(f64::INFINITY)
    }

    /// Whether queue `q` takes no filter packed or new at `now` (it took a spread filter).
    fn hot(&self, q: u16, now: Instant) -> bool {
        self.hot_until
            .get(usize::from(q))
            .copied()
            .flatten()
            .is_some_and(|t| now < t)
    }

    /// Queue `q`'s highest load at the last [`HOT_ROUNDS`] rounds.
    fn peak(&self, q: u16) -> f64 {
        self.recent
            .get(usize::from(q))
            .map_or(0.0, |r| r.iter().copied().fold(0.0, f64::max))
    }

    /// The load a filter of `rate` packets per second puts on queue `q`.
    fn load_on(&self, rate: f64, q: u16) -> f64 {
        rate / self.capacity(q)
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
            f.rate = (f.rate + f.packets as f64 / elapsed) / 2.0;
            f.packets = 0;
        }
        for i in 0..self.filters.len() {
            self.filters[i].load = self.load_on(self.filters[i].rate, self.filters[i].queue);
        }
        self.default_packets = 0;
        let before = self.queue_loads();
        for (r, l) in self.recent.iter_mut().zip(&before) {
            if r.len() >= HOT_ROUNDS as usize {
                r.pop_front();
            }
            r.push_back(*l);
        }
        let dwell = 2 * p.interval;
        let settled = |f: &Filter| f.moved.is_none_or(|t| now.saturating_duration_since(t) >= dwell);
        let mut moves: Vec<(usize, u16, Reason)> = Vec::new();
        let mut loads = before.clone();
        // Spread: over the line, move filters off, the largest that fits first.
        for q in self.used_queues() {
            while loads[usize::from(q)] > p.spread_above {
                // A queue with one filter is as spread as it gets: moving it would only move
                // the load (and back again when the other queue is over the line).
                let members = (0..self.filters.len())
                    .filter(|&i| current(&self.filters[i], i, &moves) == q)
                    .count();
                if members <= 1 {
                    break;
                }
                let mut candidates: Vec<usize> = (0..self.filters.len())
                    .filter(|&i| self.filters[i].queue == q && settled(&self.filters[i]))
                    .filter(|i| !moves.iter().any(|m| m.0 == *i))
                    .collect();
                candidates.sort_by(|a, b| self.filters[*b].load.total_cmp(&self.filters[*a].load).then(a.cmp(b)));
                let target = candidates.iter().find_map(|&i| {
                    let r = self.filters[i].rate;
                    self.spread_target(q, r, &loads, &moves, p).map(|to| (i, to))
                });
                let Some((i, to)) = target else { break };
                let r = self.filters[i].rate;
                loads[usize::from(q)] -= self.load_on(r, q);
                loads[usize::from(to)] += self.load_on(r, to);
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
                    let r = self.filters[i].rate;
                    // Best fit: the fullest other queue in use it still fits in.
                    let to = used
                        .iter()
                        .copied()
                        .filter(|o| *o != q && !self.hot(*o, now))
                        .filter(|o| {
                            let o = usize::from(*o);
                            let added = trial[o] - before[o];
                            self.peak(o as u16) + added + self.load_on(r, o as u16) <= p.pack_target
                        })
                        .max_by(|a, b| trial[usize::from(*a)].total_cmp(&trial[usize::from(*b)]).then(b.cmp(a)));
                    match to {
                        Some(to) if settled(&self.filters[i]) => {
                            trial[usize::from(to)] += self.load_on(r, to);
                            trial[usize::from(q)] -= self.load_on(r, q);
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
            if reason == Reason::Spread {
                // Its load there is a prediction until measured: nothing packs onto it meanwhile.
                self.hot_until[usize::from(to)] = Some(now + p.interval * HOT_ROUNDS);
            }
            f.load = f.rate / self.capacity.get(usize::from(to)).copied().unwrap_or(f64::INFINITY);
            if self.events.len() >= MAX_EVENTS {
                self.events.pop_front();
                self.events_dropped += 1;
            }
            self.events.push_back(event);
        }
    }

    /// Where a filter of `rate` packets per second leaving queue `from` goes: the least loaded
    /// queue in use it fits in under `pack_target` (at that queue's capacity), else the first
    /// unused queue if it is under `spread_above` there; else nowhere.
    fn spread_target(
        &self,
        from: u16,
        rate: f64,
        loads: &[f64],
        moves: &[(usize, u16, Reason)],
        p: Packing,
    ) -> Option<u16> {
        let in_use = |q: u16| self.filters.iter().enumerate().any(|(i, f)| current(f, i, moves) == q);
        let used = (1..self.queues).filter(|q| *q != from && in_use(*q));
        let fits = used
            .filter(|q| loads[usize::from(*q)] + self.load_on(rate, *q) <= p.pack_target)
            .min_by(|a, b| loads[usize::from(*a)].total_cmp(&loads[usize::from(*b)]).then(a.cmp(b)));
        let unused = (1..self.queues).find(|q| *q != from && !in_use(*q));
        fits.or_else(|| unused.filter(|q| self.load_on(rate, *q) <= p.spread_above))
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
    fn a_queue_measured_slower_than_configured_spreads_at_its_own_capacity() {
        // Configured at 250,000 packets/s a queue, as the live default was; the thread reading
        // queue 1 (which also switches) is measured at 60,000, queue 2's at 200,000.
        let p = Packing {
            queue_pps: 250_000.0,
            ..Packing::default()
        };
        let mut nq = NetQueue::new(4, Placement::Packed(p)).unwrap();
        let mut t = Instant::ZERO;
        for i in 0..2 {
            nq.add_filter(PortId(u32::from(i)), mac(i), None, t).unwrap();
        }
        assert_eq!(nq.used_queues(), [1]);
        // A flood of 55,000 packets/s to filter 0, a trickle to filter 1: 22% of the configured
        // figure, so nothing moves...
        rounds(&mut nq, &mut t, 4, &|i| if i == 0 { 55_000 } else { 10 });
        assert_eq!(nq.used_queues(), [1], "{:?}", nq.queue_loads());
        // ...until the queues' capacities are measured: queue 1 is then at 92% and spreads; the
        // flood moves to queue 2, where it is 28% of that thread.
        nq.set_capacity(1, 60_000.0);
        nq.set_capacity(2, 200_000.0);
        nq.set_capacity(3, 60_000.0);
        rounds(&mut nq, &mut t, 1, &|i| if i == 0 { 55_000 } else { 10 });
        let e = nq.poll_event().expect("a spread");
        assert_eq!((e.reason, e.from, e.to, e.mac), (Reason::Spread, 1, 2, mac(0)));
        assert!(e.loads[1] > 0.8, "{:?}", e.loads);
        let f = &nq.filters()[0];
        assert!((f.load - f.rate / 200_000.0).abs() < 1e-12 && f.load < 0.3, "{f:?}");
        // It stays there: a minute of the same load spreads nothing again (no flapping back
        // onto a slower queue, where it would be over spread_above). The trickle may pack onto
        // the flood's queue, whose thread is three quarters idle.
        rounds(&mut nq, &mut t, 60, &|i| if i == 0 { 55_000 } else { 10 });
        let later: Vec<QueueEvent> = std::iter::from_fn(|| nq.poll_event()).collect();
        assert!(
            later.iter().all(|e| e.reason == Reason::Pack && e.mac == mac(1)),
            "{later:?}"
        );
        assert_eq!(nq.filters()[0].queue, 2);
        // When the flood stops, the two pack back onto one queue.
        rounds(&mut nq, &mut t, 10, &|_| 10);
        assert_eq!(nq.used_queues().len(), 1, "{:?}", nq.filters());
    }

    #[test]
    fn a_flood_that_fills_any_queue_stays_and_the_others_move_away_without_flapping() {
        // Every queue's thread takes 60,000 packets/s; a flood swings between 40,000 and
        // 58,000 a round (smoothed, 77% and 87%) as a busy host's measure does, a trickle
        // beside it.
        let p = Packing {
            queue_pps: 60_000.0,
            ..Packing::default()
        };
        let mut nq = NetQueue::new(3, Placement::Packed(p)).unwrap();
        let mut t = Instant::ZERO;
        for i in 0..2 {
            nq.add_filter(PortId(u32::from(i)), mac(i), None, t).unwrap();
        }
        let mut round = 0u64;
        let mut events = Vec::new();
        for _ in 0..60 {
            round += 1;
            let flood = if round % 2 == 0 { 40_000 } else { 58_000 };
            rounds(&mut nq, &mut t, 1, &|i| if i == 0 { flood } else { 20 });
            events.extend(std::iter::from_fn(|| nq.poll_event()));
        }
        // The flood would be over the line on any queue: it stays; the trickle moves away from
        // it once, and never packs back while the flood's queue keeps going over the line.
        assert!(!events.is_empty(), "the trickle moved away");
        assert!(
            events.iter().all(|e| e.mac == mac(1)),
            "only the trickle moves: {events:?}"
        );
        assert_eq!(events.len(), 1, "no flapping: {events:?}");
        assert_ne!(nq.filters()[0].queue, nq.filters()[1].queue);
        // When the flood ends, the queue cools down and the two pack again.
        rounds(&mut nq, &mut t, 2 * HOT_ROUNDS as usize, &|_| 20);
        assert_eq!(nq.used_queues().len(), 1, "{:?}", nq.filters());
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
