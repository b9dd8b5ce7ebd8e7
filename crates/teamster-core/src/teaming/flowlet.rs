//! Flowlet buckets: the sending half of the Dynamic policies.
//!
//! Model. A group's frames are hashed (Address Hash over the group's fields) into
//! [`BUCKETS`] buckets. Each bucket has a *target* member and a *current* member that its frames
//! take. A bucket's first frame sets its target to the least loaded live active member (by the
//! buckets targeting each, as [`Balance`] measures load), so that flows starting together spread
//! at once: a flow that never pauses could not be moved by a later rebalance. A bucket's frames follow its current member until the
//! bucket has been idle for at least the flowlet gap; the first frame after such a gap starts a
//! new flowlet, which takes the target. So a flow changes member only between bursts, never
//! mid-burst: with the gap longer than the longest wait in an uplink's queue, the last frame
//! sent on the old member has left before the first one on the new member, and TCP sees no
//! reordering. A single long flow that never pauses stays on one member. A bucket whose current
//! member fails, or leaves the group's order, moves at once (its queued frames are lost anyway)
//! to its failover choice; it keeps its target, and returns there at a flowlet boundary once
//! the member is back.
//!
//! Every rebalance interval the buckets' loads decay by half and take in the bytes sent since
//! (so a bucket's load is about twice its bytes per interval in steady state), and targets are
//! moved from the most to the least loaded live active member, one bucket at a time, each move
//! the one that best evens out that pair, while it evens it out (Open vSwitch's rebalancing
//! rule). Only buckets that pause are moved: one that started a flowlet within the last two
//! intervals, or is idle; a flow that never pauses would not follow its new target, so moving
//! it would only mislead the balance. [`Balance`] says what "loaded" means: bytes (Windows' Dynamic, blind to link speed),
//! or utilisation of capacity with a threshold, an improvement margin and a dwell time (the
//! load-based Dynamic). Moving a target costs nothing until the bucket's next flowlet.
//!
//! State is fixed: one small entry per bucket, whatever the number of flows (a VM opening
//! millions of flows grows nothing).

use super::address_hash::{address_hash, hashed_uplink, HashFields};
use super::hash::spread;
pub use super::policy::BucketState;
use super::policy::{FlowletCounters, MemberShare, PortView, TeamView};
use super::tuning::PolicyTuning;
use super::UplinkId;
use crate::wire::FlowKey;
use crate::Instant;
use core::time::Duration;

/// Buckets per group: enough that a few dozen flows rarely share one, few enough that a
/// rebalance scans them in microseconds.
pub const BUCKETS: usize = 256;

/// The bucket of a flow whose Address Hash is `h` (flowlets and the flow census alike).
pub(super) fn bucket_of(h: u32) -> usize {
    (spread(u64::from(h)) % BUCKETS as u64) as usize
}

/// What the rebalance evens out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Balance {
    /// Bytes per member, whatever its speed; any imbalance a move reduces is corrected.
    Bytes,
    /// Utilisation (rate / capacity), only while a member is over `threshold`; a round's moves
    /// must together cut the busiest member's utilisation by a tenth, and a bucket moved stays
    /// two intervals.
    Utilisation { threshold: f64 },
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    target: Option<UplinkId>,
    current: Option<UplinkId>,
    last_seen: Option<Instant>,
    bytes: u64,
    load: f64,
    retargeted: Option<Instant>,
    /// When its last flowlet started (a frame after an idle gap).
    flowlet_at: Option<Instant>,
    /// When a data plane that sends on its own last told what it saw of the bucket: its
    /// `last_seen` is complete up to then only.
    told_at: Option<Instant>,
}

/// A group's flowlet buckets (see the [module documentation](self)).
#[derive(Debug, Clone)]
pub(super) struct Flowlets {
    buckets: Vec<Bucket>,
    fields: HashFields,
    gap: Duration,
    interval: Duration,
    next: Instant,
    pub(super) counters: FlowletCounters,
}

impl Flowlets {
    pub(super) fn new(tuning: &PolicyTuning) -> Flowlets {
        Flowlets {
            buckets: vec![Bucket::default(); BUCKETS],
            fields: tuning.hash_fields,
            gap: tuning.flowlet_gap,
            interval: tuning.rebalance,
            next: Instant::ZERO + tuning.rebalance,
            counters: FlowletCounters::default(),
        }
    }

    /// The bucket of a frame; None for address resolution, which takes the port's own member.
    fn bucket(&self, flow: &FlowKey) -> Option<usize> {
        address_hash(flow, self.fields).map(bucket_of)
    }

    /// Where bucket `b`'s next flowlet goes: its target while that is a live active member,
    /// else `active[b mod n]` (or its failover choice).
    fn wanted(&self, team: &TeamView<'_>, b: usize) -> Option<UplinkId> {
        match self.buckets[b].target {
            Some(t) if team.is_up(t) && team.order().active.contains(&t) => Some(t),
            _ => hashed_uplink(team, b as u32),
        }
    }

    /// True if `u` is live and in the group's order: a bucket on it may stay there.
    fn usable(team: &TeamView<'_>, u: UplinkId) -> bool {
        let order = team.order();
        team.is_up(u) && (order.active.contains(&u) || order.standby.contains(&u))
    }

    /// The live active member whose buckets carry the least load (the bytes since the last
    /// rebalance and the decayed load; per bit of capacity under [`Balance::Utilisation`]),
    /// lowest in order on a tie: where a bucket's first flowlet goes.
    fn least_loaded(&self, team: &TeamView<'_>, balance: Balance) -> Option<UplinkId> {
        let members: Vec<UplinkId> = team.order().active.iter().copied().filter(|u| team.is_up(*u)).collect();
        // Counted as the rebalance counts them (a bucket without a live target where its next
        // flowlet would go). Runs on a bucket's first frame only, so the two small vectors cost
        // little.
        let mut load = vec![0.0f64; members.len()];
        for (b, bk) in self.buckets.iter().enumerate() {
            let l = bk.load + bk.bytes as f64;
            if l > 0.0 {
                if let Some(i) = self.wanted(team, b).and_then(|t| members.iter().position(|m| *m == t)) {
                    load[i] += l;
                }
            }
        }
        let metric = |i: usize| match balance {
            Balance::Bytes => load[i],
            Balance::Utilisation { .. } => load[i] / team.capacity_bps(members[i]),
        };
        (0..members.len())
            .min_by(|a, b| metric(*a).total_cmp(&metric(*b)).then(a.cmp(b)))
            .map(|i| members[i])
    }

    /// Where bucket `b`'s next flowlet goes, counting a bucket never seen as new (its first
    /// flowlet takes the least loaded member).
    fn next_member(&self, team: &TeamView<'_>, b: usize, balance: Balance) -> Option<UplinkId> {
        match self.buckets[b].target {
            None => self.least_loaded(team, balance).or_else(|| self.wanted(team, b)),
            Some(_) => self.wanted(team, b),
        }
    }

    /// The member for a frame of `flow`, as a pure query (what the next frame would take now if
    /// it came without a gap).
    pub(super) fn peek(
        &self,
        team: &TeamView<'_>,
        port: &PortView<'_>,
        flow: &FlowKey,
        balance: Balance,
    ) -> Option<UplinkId> {
        let Some(b) = self.bucket(flow) else {
            return port.current();
        };
        match self.buckets[b].current {
            Some(c) if Self::usable(team, c) => Some(c),
            _ => self.next_member(team, b, balance),
        }
    }

    /// The member for a frame of `len` bytes of `flow` sent at `now`, recording it: a new
    /// flowlet (after the gap) takes the bucket's target (the least loaded member for a bucket's
    /// first), a frame within a burst its current member.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send(
        &mut self,
        team: &TeamView<'_>,
        port: &PortView<'_>,
        flow: &FlowKey,
        len: usize,
        balance: Balance,
        now: Instant,
    ) -> Option<UplinkId> {
        let Some(b) = self.bucket(flow) else {
            return port.current();
        };
        let wanted = self.next_member(team, b, balance);
        let bk = &mut self.buckets[b];
        if bk.target.is_none() {
            bk.target = wanted.filter(|w| team.order().active.contains(w));
        }
        let idle = bk
            .last_seen
            .is_none_or(|t| now.saturating_duration_since(t) >= self.gap);
        if idle {
            bk.flowlet_at = Some(now);
        }
        match bk.current {
            Some(c) if Self::usable(team, c) && !idle => {}
            Some(c) if Self::usable(team, c) => {
                if wanted != Some(c) {
                    self.counters.flowlet_moves += 1;
                }
                bk.current = wanted;
            }
            Some(_) => {
                self.counters.forced_moves += 1;
                bk.current = wanted;
            }
            None => bk.current = wanted,
        }
        bk.last_seen = Some(now);
        bk.bytes += len as u64;
        bk.current
    }

    /// Every bucket's state, by bucket: what a data plane that sends on its own starts from.
    pub(super) fn buckets(&self) -> Vec<BucketState> {
        self.buckets
            .iter()
            .map(|b| BucketState {
                target: b.target,
                current: b.current,
                last_seen: b.last_seen,
                flowlet_at: b.flowlet_at,
            })
            .collect()
    }

    /// What a data plane that sends on its own saw of bucket `b` since it last told, as of `at`:
    /// the member its frames take, when it last sent, when its last flowlet started, and
    /// `bytes` sent since. The engine's rebalance then counts those bytes and knows which
    /// buckets pause, as if it had sent them itself; a bucket counts as idle only if it was
    /// idle at `at` (a `last_seen` read up to an interval ago says nothing of the frames since).
    /// A member change is counted a flowlet move if the old member could still carry it, else a
    /// forced one (moves in between are not seen). The member and times are not taken if the
    /// engine has a later send of its own; the bytes always are.
    pub(super) fn seen(&mut self, team: &TeamView<'_>, b: usize, seen: BucketState, bytes: u64, at: Instant) {
        let Some(bk) = self.buckets.get_mut(b) else { return };
        bk.bytes += bytes;
        if seen.last_seen.is_none() || seen.last_seen < bk.last_seen {
            return;
        }
        bk.told_at = Some(at);
        if seen.current != bk.current {
            match bk.current {
                Some(c) if Self::usable(team, c) => self.counters.flowlet_moves += 1,
                Some(_) => self.counters.forced_moves += 1,
                None => {}
            }
        }
        bk.current = seen.current;
        bk.last_seen = seen.last_seen;
        bk.flowlet_at = seen.flowlet_at.max(bk.flowlet_at);
    }

    /// When the next rebalance is due.
    pub(super) fn poll_at(&self) -> Instant {
        self.next
    }

    /// Decays and takes in the buckets' loads and moves targets as [`Balance`] says, if the
    /// rebalance is due at `now`.
    pub(super) fn rebalance(&mut self, team: &TeamView<'_>, balance: Balance, now: Instant) {
        if now < self.next {
            return;
        }
        self.next = if now - self.next >= self.interval {
            now + self.interval
        } else {
            self.next + self.interval
        };
        for bk in &mut self.buckets {
            bk.load = bk.load / 2.0 + bk.bytes as f64;
            bk.bytes = 0;
        }
        let members: Vec<UplinkId> = team.order().active.iter().copied().filter(|u| team.is_up(*u)).collect();
        if members.len() < 2 {
            return;
        }
        let owner: Vec<Option<usize>> = (0..BUCKETS)
            .map(|b| {
                let t = self.wanted(team, b);
                members.iter().position(|m| Some(*m) == t)
            })
            .collect();
        let mut load = vec![0.0f64; members.len()];
        for (b, o) in owner.iter().enumerate() {
            if let Some(o) = o {
                load[*o] += self.buckets[b].load;
            }
        }
        // Bytes per interval to bits/s: a steady load is twice the bytes of one interval.
        let to_bps = 8.0 / (2.0 * self.interval.as_secs_f64());
        let scale: Vec<f64> = members
            .iter()
            .map(|m| match balance {
                Balance::Bytes => 1.0,
                Balance::Utilisation { .. } => to_bps / team.capacity_bps(*m),
            })
            .collect();
        let mut owner = owner;
        let busiest = |load: &[f64]| (0..members.len()).map(|i| load[i] * scale[i]).fold(0.0, f64::max);
        let busiest_before = busiest(&load);
        // The round's moves, with what each bucket had before, to undo a round that gains too little.
        let mut moved: Vec<(usize, Option<UplinkId>, Option<Instant>)> = Vec::new();
        for _ in 0..BUCKETS {
            let metric = |i: usize| load[i] * scale[i];
            let hi = (0..members.len()).max_by(|a, b| metric(*a).total_cmp(&metric(*b)).then(b.cmp(a)));
            let lo = (0..members.len()).min_by(|a, b| metric(*a).total_cmp(&metric(*b)).then(a.cmp(b)));
            let (Some(hi), Some(lo)) = (hi, lo) else { break };
            let before = metric(hi);
            if hi == lo || before <= 0.0 {
                break;
            }
            if let Balance::Utilisation { threshold } = balance {
                if before <= threshold {
                    break;
                }
            }
            let after = |x: f64| ((load[hi] - x) * scale[hi]).max((load[lo] + x) * scale[lo]);
            let dwell = 2 * self.interval;
            let best = (0..BUCKETS)
                .filter(|&b| owner[b] == Some(hi) && self.buckets[b].load > 0.0 && self.pauses(b, now))
                .filter(|&b| match balance {
                    Balance::Bytes => true,
                    Balance::Utilisation { .. } => self.buckets[b]
                        .retargeted
                        .is_none_or(|t| now.saturating_duration_since(t) >= dwell),
                })
                .min_by(|a, b| {
                    after(self.buckets[*a].load)
                        .total_cmp(&after(self.buckets[*b].load))
                        .then(a.cmp(b))
                });
            let Some(b) = best else { break };
            let x = self.buckets[b].load;
            // Each move must even out its pair.
            if after(x) >= before {
                break;
            }
            load[hi] -= x;
            load[lo] += x;
            owner[b] = Some(lo);
            moved.push((b, self.buckets[b].target, self.buckets[b].retargeted));
            self.buckets[b].target = Some(members[lo]);
            self.buckets[b].retargeted = Some(now);
        }
        // Load-based damping: the round stands only if its moves together cut the busiest
        // member's utilisation by a tenth; a smaller gain is not worth the churn.
        if matches!(balance, Balance::Utilisation { .. }) && busiest(&load) > 0.9 * busiest_before {
            for (b, target, retargeted) in moved.drain(..).rev() {
                self.buckets[b].target = target;
                self.buckets[b].retargeted = retargeted;
            }
        }
        self.counters.retargets += moved.len() as u64;
    }

    /// True if bucket `b` starts flowlets: it started one within the last two intervals, or is
    /// idle now. A bucket that never pauses is not moved: its flows would not follow until they
    /// pause, and the balance would count them where they are not.
    fn pauses(&self, b: usize, now: Instant) -> bool {
        let bk = &self.buckets[b];
        let recent = bk
            .flowlet_at
            .is_some_and(|t| now.saturating_duration_since(t) <= 2 * self.interval);
        // As of when a data plane that sends on its own last told (if it told the last send).
        let known = match bk.told_at {
            Some(t) if bk.last_seen <= Some(t) => t.min(now),
            _ => now,
        };
        let idle = bk
            .last_seen
            .is_none_or(|t| known.saturating_duration_since(t) >= self.gap);
        recent || idle
    }

    /// Each member's share of the buckets that sent within the last interval before `now`.
    pub(super) fn shares(&self, team: &TeamView<'_>, now: Instant) -> Vec<MemberShare> {
        let to_bps = 8.0 / (2.0 * self.interval.as_secs_f64());
        let mut out: Vec<MemberShare> = Vec::new();
        for bk in &self.buckets {
            let (Some(c), Some(seen)) = (bk.current, bk.last_seen) else {
                continue;
            };
            if !team.is_up(c) || now.saturating_duration_since(seen) > self.interval {
                continue;
            }
            let i = match out.iter().position(|s| s.uplink == c) {
                Some(i) => i,
                None => {
                    out.push(MemberShare {
                        uplink: c,
                        active_buckets: 0,
                        bps: 0.0,
                    });
                    out.len() - 1
                }
            };
            out[i].active_buckets += 1;
            out[i].bps += bk.load * to_bps;
        }
        out.sort_by_key(|s| s.uplink);
        out
    }

    /// Uplink `removed` left the team: IDs above it move down one; buckets on it forget it.
    pub(super) fn uplink_removed(&mut self, removed: UplinkId) {
        for bk in &mut self.buckets {
            bk.target = bk.target.and_then(|u| u.after_removal(removed));
            bk.current = bk.current.and_then(|u| u.after_removal(removed));
        }
    }
}
