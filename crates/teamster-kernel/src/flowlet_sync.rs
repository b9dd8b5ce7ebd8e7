//! Dynamic's flowlet buckets kept in step between the engine and the program.
//!
//! Model (core's is `teamster_core::teaming::flowlet`). A flowlet group's frames fall into 256
//! buckets by Address Hash; each bucket has a *target* member and a *current* one. The split
//! follows the MAC table's ([`crate::mac_sync`]): the engine owns what it decides, the program
//! what it sees.
//! - The engine owns the placement and the targets: a bucket's first flowlet goes to the least
//!   loaded member (a sum over every bucket, which the program does not do per frame), and the
//!   rebalance moves targets. [`FlowletSync::push`] marks every bucket the engine has placed
//!   with its target's slot; as *open* where it has no target but an active member is live
//!   (core places its next flowlet on the least loaded one, which the engine does); or as
//!   *hashed* where no target can be used (no active member is live, or the target's uplink
//!   has no interface here): the program then takes the bucket's hashed member, as core does.
//!   A bucket not placed (or an open one's next flowlet) makes the program hand its frame to
//!   the engine (PUNT_FLOWLET), which places it and whose next push writes the bucket's state
//!   (current member, times) and then its mark. From then on the program alone
//!   writes the bucket's state. While the engine is gone (no write for a second: killed, or not
//!   started again) the program sends an unplaced bucket's frames on its hashed member instead.
//! - The program owns the rest: per frame, the current member within a burst, the target's (or
//!   its failover choice) after an idle gap, the times and the bytes. [`FlowletSync::pull`]
//!   tells the engine what it saw since the last pull (`Team::flowlet_seen`), so the rebalance
//!   counts the bytes the kernel sent and knows which buckets pause, as on the user-space path.
//!
//! A bucket the engine forgets (its group reconfigured, so its policy starts afresh) is
//! unplaced again, and its next frame goes to the engine.
//!
//! The hash policies (IP hash, Address Hash) place nothing, but the program counts their flows
//! in the same map, by the same buckets (the engine's flow census, which `ctl group` shows): a
//! pull feeds the engine's census (`Team::census_seen`) as it feeds Dynamic's buckets.
//!
//! Cost: a push compares each flowlet group's 256 buckets with what was written, each turn, and
//! writes what changed; a pull reads one map entry per placed bucket, and all 256 of each
//! hash-policy group, every [`FlowletSync::PULL_EVERY`].

use crate::abi::{self, Flowlet};
use crate::mac_sync::{engine_time, kernel_time, Places};
use crate::program::{Error, SwitchProgram, Target};
use std::collections::BTreeMap;
use teamster_core::switch::Switch;
use teamster_core::teaming::flowlet::{BucketState, BUCKETS};
use teamster_core::teaming::GroupId;

const _: () = assert!(BUCKETS == abi::FLOWLET_BUCKETS);

/// The map index of group `g`'s bucket `b`.
fn index(g: GroupId, b: usize) -> u32 {
    (g.0 * abi::FLOWLET_BUCKETS + b) as u32
}

/// What was last written of one bucket, and read of it.
#[derive(Debug, Clone, Copy)]
struct Written {
    target: Target,
    /// The kernel's byte count at the last pull (or 0, written with the state).
    bytes: u64,
    /// The kernel's last_seen at the last pull.
    last_seen: u64,
}

/// The buckets' targets as written, by map index; see the module documentation.
#[derive(Debug, Default)]
pub struct FlowletSync {
    written: BTreeMap<u32, Written>,
    /// The hash policies' census buckets: each one's byte count at the last pull, by map
    /// index.
    census: BTreeMap<u32, u64>,
}

impl FlowletSync {
    /// How often [`FlowletSync::pull`] is worth its map reads (the daemon's; the rebalance runs
    /// every second by default, and judges idleness as of the pull).
    pub const PULL_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

    /// Marks every bucket the engine has placed with its target (see the module
    /// documentation), writing what changed since the last push (a bucket placed since gets its
    /// state first), and unplaces those the engine forgot or whose group is gone or no longer
    /// uses flowlets. `places` gives the uplinks' slots; `offset_ns` is the kernel's clock less
    /// the engine's.
    pub fn push(
        &mut self,
        fast: &mut SwitchProgram,
        switch: &Switch,
        places: &Places,
        offset_ns: i128,
    ) -> Result<(), Error> {
        let team = switch.team();
        let mut wanted: BTreeMap<u32, (Target, BucketState)> = BTreeMap::new();
        for g in (0..team.group_count().min(abi::MAX_GROUPS)).map(GroupId) {
            let Some(buckets) = team.flowlet_buckets(g) else {
                continue;
            };
            // Core places a bucket without a target on the least loaded live active member at
            // its next flowlet, and on its hashed member while no active member is live.
            let active_live = team
                .group(g)
                .is_some_and(|spec| spec.order.active.iter().any(|u| team.uplink_usable(*u)));
            for (b, state) in buckets.into_iter().enumerate() {
                if state.last_seen.is_none() {
                    continue; // not placed
                }
                let target = match (state.target, state.target.and_then(|t| places.uplink_slot(t))) {
                    (Some(_), Some(slot)) => Target::Slot(slot),
                    (Some(_), None) => Target::Hashed,
                    (None, _) if active_live => Target::Open,
                    (None, _) => Target::Hashed,
                };
                wanted.insert(index(g, b), (target, state));
            }
        }
        let gone: Vec<u32> = self
            .written
            .keys()
            .filter(|i| !wanted.contains_key(i))
            .copied()
            .collect();
        for i in gone {
            fast.put_flowlet_target(i, Target::Unplaced)?;
            self.written.remove(&i);
        }
        for (i, (target, state)) in wanted {
            match self.written.get_mut(&i) {
                Some(w) if w.target == target => {}
                Some(w) => {
                    fast.put_flowlet_target(i, target)?;
                    w.target = target;
                }
                None => {
                    // A bucket the engine just placed: the program leaves it alone until it is
                    // marked, so its state goes first.
                    let at = |t: Option<teamster_core::Instant>| t.map_or(0, |t| kernel_time(t, offset_ns));
                    let f = Flowlet {
                        last_seen: at(state.last_seen),
                        flowlet_at: at(state.flowlet_at),
                        bytes: 0,
                        current: state
                            .current
                            .and_then(|c| places.uplink_slot(c))
                            .unwrap_or(abi::NO_SLOT),
                        pad: 0,
                    };
                    fast.put_flowlet(i, f)?;
                    fast.put_flowlet_target(i, target)?;
                    self.written.insert(
                        i,
                        Written {
                            target,
                            bytes: 0,
                            last_seen: f.last_seen,
                        },
                    );
                }
            }
        }
        Ok(())
    }

    /// Tells the engine's census of each hash-policy group (IP hash, Address Hash) what the
    /// program sent in its buckets since the last pull: the member and the bytes. A group seen
    /// for the first time (or again after another policy) only sets where its counts start.
    /// Returns how many buckets had sent.
    fn pull_census(
        &mut self,
        fast: &SwitchProgram,
        switch: &mut Switch,
        places: &Places,
        now: teamster_core::Instant,
    ) -> Result<usize, Error> {
        let team = switch.team();
        let groups: Vec<GroupId> = (0..team.group_count().min(abi::MAX_GROUPS))
            .map(GroupId)
            .filter(|g| team.has_census(*g))
            .collect();
        let counted: BTreeMap<u32, u64> = std::mem::take(&mut self.census);
        let mut n = 0;
        for g in groups {
            for b in 0..abi::FLOWLET_BUCKETS {
                let i = index(g, b);
                let f = fast.flowlet(i)?;
                if let Some(before) = counted.get(&i) {
                    let bytes = f.bytes.saturating_sub(*before);
                    if let (true, Some(u)) = (bytes > 0, places.uplink_at(f.current)) {
                        switch.team_mut().census_seen(g, b, u, bytes, now);
                        n += 1;
                    }
                }
                self.census.insert(i, f.bytes);
            }
        }
        Ok(n)
    }

    /// Tells the engine what the program saw, as of `now` (the engine's clock), of every
    /// bucket it switches (those placed) since the last pull: the member its frames take, when
    /// it last sent and started a flowlet, and the bytes. Returns how many buckets had sent.
    pub fn pull(
        &mut self,
        fast: &SwitchProgram,
        switch: &mut Switch,
        places: &Places,
        offset_ns: i128,
        now: teamster_core::Instant,
    ) -> Result<usize, Error> {
        let mut n = self.pull_census(fast, switch, places, now)?;
        for (i, w) in self.written.iter_mut() {
            let f = fast.flowlet(*i)?;
            if f.last_seen <= w.last_seen && f.bytes == w.bytes {
                continue;
            }
            let seen = BucketState {
                target: None,
                current: places.uplink_at(f.current),
                last_seen: (f.last_seen != 0).then(|| engine_time(f.last_seen, offset_ns)),
                flowlet_at: (f.flowlet_at != 0).then(|| engine_time(f.flowlet_at, offset_ns)),
            };
            let bytes = f.bytes.saturating_sub(w.bytes);
            let per = abi::FLOWLET_BUCKETS as u32;
            switch
                .team_mut()
                .flowlet_seen(GroupId((*i / per) as usize), (*i % per) as usize, seen, bytes, now);
            w.bytes = f.bytes;
            w.last_seen = f.last_seen;
            n += 1;
        }
        Ok(n)
    }
}
