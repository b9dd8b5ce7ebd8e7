//! A census of the flows a per-flow policy (IP hash, Address Hash) sends, for operators: which
//! member each flow bucket used last and how much it sent, in [`BUCKETS`] buckets of the
//! Address Hash over the group's fields (so a bucket holds what the policy cannot tell apart). Fixed state, whatever the number of flows; the flowlet policies keep their own
//! (richer) buckets instead.

use super::address_hash::{address_hash, HashFields};
use super::flowlet::{bucket_of, BUCKETS};
use super::policy::MemberShare;
use super::UplinkId;
use crate::wire::FlowKey;
use crate::Instant;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    uplink: Option<UplinkId>,
    /// The whole second its `current` bytes belong to.
    second: u64,
    current: u64,
    previous: u64,
}

/// The census of one group (see the [module documentation](self)).
#[derive(Debug, Clone)]
pub(super) struct Census {
    slots: Vec<Slot>,
    fields: HashFields,
}

impl Census {
    pub(super) fn new(fields: HashFields) -> Census {
        Census {
            slots: vec![Slot::default(); BUCKETS],
            fields,
        }
    }

    /// Records a frame of `len` bytes of `flow` sent on `uplink` at `now`.
    pub(super) fn record(&mut self, flow: &FlowKey, uplink: UplinkId, len: usize, now: Instant) {
        if let Some(h) = address_hash(flow, self.fields) {
            self.seen(bucket_of(h), uplink, len as u64, now);
        }
    }

    /// Records `bytes` of bucket `b` sent on `uplink`, counted at `now`: a frame
    /// ([`Census::record`]), or what a data plane that sends on its own (the kernel fast path)
    /// sent in the bucket since it last told. Ignored for a bucket out of range.
    pub(super) fn seen(&mut self, b: usize, uplink: UplinkId, bytes: u64, now: Instant) {
        let Some(s) = self.slots.get_mut(b) else { return };
        let second = now.as_nanos() / 1_000_000_000;
        if second != s.second {
            s.previous = if second == s.second + 1 { s.current } else { 0 };
            s.current = 0;
            s.second = second;
        }
        s.current += bytes;
        s.uplink = Some(uplink);
    }

    /// Each member's buckets that sent in the last whole second before `now`, and their rate.
    pub(super) fn shares(&self, now: Instant) -> Vec<MemberShare> {
        let second = now.as_nanos() / 1_000_000_000;
        let mut out: Vec<MemberShare> = Vec::new();
        for s in &self.slots {
            let bytes = if s.second == second {
                s.previous
            } else if s.second + 1 == second {
                s.current
            } else {
                0
            };
            let Some(u) = s.uplink.filter(|_| bytes > 0) else {
                continue;
            };
            match out.iter_mut().find(|m| m.uplink == u) {
                Some(m) => {
                    m.active_buckets += 1;
                    m.bps += bytes as f64 * 8.0;
                }
                None => out.push(MemberShare {
                    uplink: u,
                    active_buckets: 1,
                    bps: bytes as f64 * 8.0,
                }),
            }
        }
        out.sort_by_key(|m| m.uplink);
        out
    }

    /// Uplink `removed` left the team: IDs above it move down one; buckets on it forget it.
    pub(super) fn uplink_removed(&mut self, removed: UplinkId) {
        for s in &mut self.slots {
            s.uplink = s.uplink.and_then(|u| u.after_removal(removed));
        }
    }
}
