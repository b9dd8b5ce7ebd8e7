//! The MAC table kept in step between the engine and the program (the model is
//! `teamster_core::switch::mac_mirror`'s): [`push_changes`] writes what the engine changed into
//! the kernel's table, [`pull_learned`] copies the kernel's learned entries into the engine's.
//! Times cross between the two clocks by `offset_ns`: the kernel's clock (CLOCK_MONOTONIC, in
//! ns) minus the engine's.

use crate::abi::{self, FdbKey};
use crate::program::{Error, SwitchProgram};
use crate::tables::{domain, Interfaces, Slots};
use std::collections::HashMap;
use teamster_core::switch::{Location, Switch};
use teamster_core::teaming::UplinkId;
use teamster_core::Instant;

/// Where each slot is, in the engine's terms, and back.
#[derive(Debug, Default)]
pub struct Places {
    by_slot: HashMap<u32, Location>,
    of: HashMap<Location, u32>,
}

impl Places {
    /// The places of the interfaces `ifs` that have a slot.
    pub fn new(ifs: &Interfaces, slots: &Slots) -> Places {
        let mut p = Places::default();
        let ports = ifs.ports.iter().map(|(id, b)| (Location::Port(*id), b.ifindex));
        let uplinks = ifs.uplinks.iter().map(|(id, b)| (Location::Remote(*id), b.ifindex));
        for (at, ifindex) in ports.chain(uplinks) {
            if let Some(slot) = slots.of(ifindex) {
                p.by_slot.insert(slot, at);
                p.of.insert(at, slot);
            }
        }
        p
    }

    /// The slot of uplink `u`'s interface, if it has one.
    pub fn uplink_slot(&self, u: UplinkId) -> Option<u32> {
        self.of.get(&Location::Remote(u)).copied()
    }

    /// The uplink in `slot`, if an uplink is there.
    pub fn uplink_at(&self, slot: u32) -> Option<UplinkId> {
        match self.by_slot.get(&slot) {
            Some(Location::Remote(u)) => Some(*u),
            _ => None,
        }
    }
}

pub(crate) fn engine_time(kernel_ns: u64, offset_ns: i128) -> Instant {
    Instant::from_nanos((i128::from(kernel_ns) - offset_ns).max(0) as u64)
}

pub(crate) fn kernel_time(at: Instant, offset_ns: i128) -> u64 {
    (at.as_nanos() as i128 + offset_ns).max(1) as u64
}

/// Writes the engine's changes since the last call into the kernel's table (an entry whose
/// place has no interface is forgotten there). True if the engine's journal overflowed: the
/// caller then copies the kernel's table back whole ([`pull_learned`]).
pub fn push_changes(
    fast: &mut SwitchProgram,
    switch: &mut Switch,
    places: &Places,
    offset_ns: i128,
) -> Result<bool, Error> {
    switch.keep_mac_changes();
    let (changes, overflowed) = switch.take_mac_changes();
    for c in changes {
        let key = FdbKey {
            domain: domain(c.vlan),
            mac: c.mac.0,
        };
        match c.learned.and_then(|(at, seen)| Some((*places.of.get(&at)?, at, seen))) {
            Some((slot, at, seen)) => {
                let port = matches!(at, Location::Port(_));
                fast.put_learned(key, slot, kernel_time(seen, offset_ns), port)?
            }
            None => fast.forget(key)?,
        }
    }
    Ok(overflowed)
}

/// Makes the engine's learned entries the kernel's (entries at a slot no interface has are
/// left out), and the kernel's counts what its table holds. Returns how many it copied.
pub fn pull_learned(
    fast: &mut SwitchProgram,
    switch: &mut Switch,
    places: &Places,
    offset_ns: i128,
) -> Result<usize, Error> {
    let entries = fast.fdb()?;
    fast.recount(&entries)?;
    let learned: Vec<_> = entries
        .iter()
        .filter(|(_, e)| e.flags & abi::FDB_STATIC == 0)
        .filter_map(|(k, e)| {
            let at = *places.by_slot.get(&e.slot)?;
            let vlan = (k.domain != abi::DOMAIN_UNTAGGED).then_some(k.domain);
            Some((
                vlan,
                teamster_core::wire::MacAddr(k.mac),
                at,
                engine_time(e.seen, offset_ns),
            ))
        })
        .collect();
    let n = learned.len();
    switch.mirror_learned(learned);
    Ok(n)
}
