//! The engine's decisions as the fast path's tables: [`Tables::build`] reads a
//! [`Switch`] (its ports' security and claims, its team's uplink choices and receive uplinks,
//! its MAC table's configured entries) and the interfaces that carry its ports and uplinks, and
//! gives what `bpf/switch.h`'s maps must hold for the program to switch as the engine does.
//! Pure: no kernel here, so every rule is unit-tested.
//!
//! What the program cannot do is refused here, by name ([`Unsupported`]), before anything is
//! attached: overlay groups, uplink IDs past 63, more than [`abi::MAX_DOMAIN_PORTS`] ports in one
//! VLAN, and so on. (A flowlet group's buckets are kept in step by [`crate::flowlet_sync`].)

use crate::abi::{self, Config, Domain, FdbKey, Group, GroupUplink, Iface, Member, SlotInfo};
use std::collections::{BTreeMap, BTreeSet};
use teamster_core::switch::{Switch, REFLECTION_WINDOW};
use teamster_core::teaming::{uplink_salt, GroupId, HashFields, Policy, PortId, UplinkId};
use teamster_core::wire::MacAddr;
use teamster_core::Instant;

/// How the engine's port or uplink is reached: its interface, and for a port whether it is a
/// veth whose peer lives in another namespace (frames for it can skip its host side) and the
/// priority its frames carry to an uplink (its NetIOC class there, [`crate::shaping`]; 0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Binding {
    pub ifindex: u32,
    pub peer: bool,
    pub priority: u32,
}

/// The interfaces of the switch's ports and uplinks. A port without one (its tap is not there
/// yet) is left out of the tables: nothing can be sent to it.
#[derive(Debug, Clone, Default)]
pub struct Interfaces {
    pub ports: BTreeMap<PortId, Binding>,
    pub uplinks: BTreeMap<UplinkId, Binding>,
}

/// Slots, by ifindex: stable while an interface stays (the MAC table's entries name slots), the
/// lowest free one for a new interface, but never one freed by the build before (its MAC-table
/// entries and counters are cleared by that build's write first).
#[derive(Debug, Clone, Default)]
pub struct Slots {
    by_ifindex: BTreeMap<u32, u32>,
    cooling: BTreeSet<u32>,
}

impl Slots {
    /// The slot of `ifindex`, given one if it has none.
    fn slot(&mut self, ifindex: u32) -> Result<u32, Unsupported> {
        if let Some(s) = self.by_ifindex.get(&ifindex) {
            return Ok(*s);
        }
        let used: BTreeSet<u32> = self.by_ifindex.values().copied().collect();
        let free = (0..abi::MAX_SLOTS as u32)
            .find(|s| !used.contains(s) && !self.cooling.contains(s))
            .ok_or(Unsupported::Interfaces(abi::MAX_SLOTS))?;
        self.by_ifindex.insert(ifindex, free);
        Ok(free)
    }

    /// Frees the slots of interfaces not in `present`, returning them (their MAC-table entries
    /// must go too).
    fn keep_only(&mut self, present: &BTreeSet<u32>) -> Vec<u32> {
        let gone: Vec<u32> = self
            .by_ifindex
            .iter()
            .filter(|(i, _)| !present.contains(i))
            .map(|(_, s)| *s)
            .collect();
        self.by_ifindex.retain(|i, _| present.contains(i));
        self.cooling = gone.iter().copied().collect();
        gone
    }

    /// The slot `ifindex` has, if any.
    pub fn of(&self, ifindex: u32) -> Option<u32> {
        self.by_ifindex.get(&ifindex).copied()
    }
}

/// Something the engine does that the fast path does not: the switch stays on the user-space
/// data plane, and this says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error("port group `{0}` is an overlay (VXLAN) segment, which the kernel path does not carry")]
    Overlay(String),
    #[error("port group `{group}` uses teaming policy `{policy}`, which the kernel path does not run")]
    Policy { group: String, policy: String },
    #[error("more than {0} interfaces")]
    Interfaces(usize),
    #[error("uplink {0} has an ID past {max}: the kernel path's flood lists name uplinks 0..{max}", max = abi::MAX_UPLINK_ID - 1)]
    UplinkId(usize),
    #[error("port group `{0}` has more than {max} active (or standby) uplinks", max = abi::MAX_GROUP_UPLINKS)]
    GroupUplinks(String),
    #[error("more than {0} port groups")]
    Groups(usize),
    #[error("VLAN {0} has more than {max} ports", max = abi::MAX_DOMAIN_PORTS)]
    DomainFull(String),
}

/// What the fast path's maps hold; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tables {
    pub config: Config,
    /// By ifindex.
    pub ifaces: BTreeMap<u32, Iface>,
    /// By slot.
    pub slots: BTreeMap<u32, SlotInfo>,
    /// By domain (VLAN, or [`abi::DOMAIN_UNTAGGED`]).
    pub domains: BTreeMap<u16, Box<Domain>>,
    /// By group index.
    pub groups: Vec<Group>,
    /// The uplinks' own MACs.
    pub own_macs: BTreeSet<[u8; 6]>,
    /// The configured port MACs: static MAC-table entries, to a slot.
    pub statics: BTreeMap<FdbKey, u32>,
    /// Slots freed since the last build (their learned entries must be flushed).
    pub freed: Vec<u32>,
}

/// Frames (and notes) each interface may hand to the engine per second, past a burst of 256
/// (`bpf/switch.h` PUNT_BURST): what a port waiting for its MAC, a guest changing its MAC, or an
/// uplink's LACPDUs and ARP notes need, with room to spare; a VM or a host outside that sends
/// more of what the kernel hands up has the rest dropped in the kernel (counted as `ring_full`
/// on that interface), so it cannot keep the engine busy nor crowd the uplinks' LACPDUs out of
/// the shared per-CPU rings.
pub const PUNT_RATE: u32 = 2000;

/// The fast path's domain for a VLAN (or none).
pub fn domain(vlan: Option<u16>) -> u16 {
    vlan.unwrap_or(abi::DOMAIN_UNTAGGED)
}

fn fdb_key(vlan: Option<u16>, mac: MacAddr) -> FdbKey {
    FdbKey {
        domain: domain(vlan),
        mac: mac.0,
    }
}

/// The program's policy for a group's teaming policy, if it can run it (every policy the engine
/// has today).
fn policy_code(p: Policy) -> Option<u8> {
    if p == Policy::IP_HASH {
        Some(abi::POLICY_IP_L3)
    } else if p == Policy::IP_HASH_L4 {
        Some(abi::POLICY_IP_L3L4)
    } else if p == Policy::ADDRESS_HASH {
        Some(abi::POLICY_ADDRESS)
    } else if p == Policy::DYNAMIC || p == Policy::LBT_DYNAMIC {
        Some(abi::POLICY_FLOWLET)
    } else if [
        Policy::PORT_ID,
        Policy::SOURCE_MAC,
        Policy::HYPERV_PORT,
        Policy::LOAD_BASED,
    ]
    .contains(&p)
    {
        Some(abi::POLICY_PORT)
    } else {
        None
    }
}

impl Tables {
    /// The tables for `switch` over `ifs`, with MAC-table limits and ageing from the switch; see
    /// the module documentation. `slots` carries slot numbers from one build to the next.
    pub fn build(switch: &Switch, ifs: &Interfaces, slots: &mut Slots, now: Instant) -> Result<Tables, Unsupported> {
        let team = switch.team();
        let mut t = Tables::default();
        let present: BTreeSet<u32> = ifs
            .ports
            .values()
            .chain(ifs.uplinks.values())
            .map(|b| b.ifindex)
            .collect();
        t.freed = slots.keep_only(&present);
        let limits = switch.mac_table().limits();
        t.config = Config {
            ageing_ns: u64::try_from(switch.mac_table().ageing().as_nanos()).unwrap_or(u64::MAX),
            limit_total: limits.total as u64,
            limit_per_port: limits.per_port as u64,
            reflection_ns: REFLECTION_WINDOW.as_nanos() as u64,
            link_local: u32::from(switch.asks_link_local()),
            punt_rate: PUNT_RATE,
            // Stamped by the write (SwitchProgram::write), not part of what a build decides.
            engine_ns: 0,
        };

        let mut uplink_slot = BTreeMap::new();
        for u in (0..team.uplink_count()).map(UplinkId) {
            if let Some(mac) = switch.uplink_mac(u) {
                t.own_macs.insert(mac.0);
            }
            let Some(b) = ifs.uplinks.get(&u) else { continue };
            if u.0 >= abi::MAX_UPLINK_ID {
                return Err(Unsupported::UplinkId(u.0));
            }
            let slot = slots.slot(b.ifindex)?;
            uplink_slot.insert(u, slot);
            let outside = team.lacp().member(u).is_some_and(|m| !m.attached()) && !team.uplink_usable(u);
            let mac = switch.uplink_mac(u);
            let mut flags = 0;
            if mac.is_some() {
                flags |= abi::UPLINK_HAS_MAC;
            }
            if outside {
                flags |= abi::UPLINK_DISCARDS;
            }
            t.ifaces.insert(
                b.ifindex,
                Iface {
                    slot,
                    id: u.0 as u32,
                    kind: abi::KIND_UPLINK,
                    flags,
                    domain: abi::DOMAIN_UNTAGGED,
                    mac: mac.map_or([0; 6], |m| m.0),
                    uplink: abi::NO_SLOT,
                    ..Iface::default()
                },
            );
        }
        let slot_of = |u: Option<UplinkId>| u.and_then(|u| uplink_slot.get(&u).copied()).unwrap_or(abi::NO_SLOT);

        if team.group_count() > abi::MAX_GROUPS {
            return Err(Unsupported::Groups(abi::MAX_GROUPS));
        }
        for g in (0..team.group_count()).map(GroupId) {
            let spec = team.group(g).expect("counted");
            let policy = policy_code(spec.policy).ok_or_else(|| Unsupported::Policy {
                group: spec.name.clone(),
                policy: spec.policy.name().into(),
            })?;
            let (active, standby) = (&spec.order.active, &spec.order.standby);
            if active.len() > abi::MAX_GROUP_UPLINKS || standby.len() > abi::MAX_GROUP_UPLINKS {
                return Err(Unsupported::GroupUplinks(spec.name.clone()));
            }
            let entry = |u: &UplinkId| GroupUplink {
                salt: team.uplink(*u).map_or(0, |s| uplink_salt(&s.name)),
                slot: slot_of(Some(*u)),
                id: u.0 as u32,
                // An uplink without an interface cannot carry anything: as if it were down.
                up: u8::from(team.uplink_usable(*u) && uplink_slot.contains_key(u)),
                pad: [0; 7],
            };
            let mut group = Group {
                policy,
                active_count: active.len() as u8,
                standby_count: standby.len() as u8,
                fields: match spec.tuning.hash_fields {
                    HashFields::TransportPorts => abi::FIELDS_TRANSPORT_PORTS,
                    HashFields::IpAddresses => abi::FIELDS_IP_ADDRESSES,
                    HashFields::MacAddresses => abi::FIELDS_MAC_ADDRESSES,
                },
                gap_ns: u64::try_from(spec.tuning.flowlet_gap.as_nanos()).unwrap_or(u64::MAX),
                ..Group::default()
            };
            for (i, u) in active.iter().enumerate() {
                group.active[i] = entry(u);
            }
            for (i, u) in standby.iter().enumerate() {
                group.standby[i] = entry(u);
            }
            t.groups.push(group);
        }

        for spec in team.ports() {
            let p = spec.id;
            let sw = switch.port_switching(p).expect("a port of the team is the switch's");
            // Whether its interface is there or not: a switch is refused whole, before anything
            // is attached.
            if sw.overlay {
                let g = team.group(spec.group).map_or_else(String::new, |g| g.name.clone());
                return Err(Unsupported::Overlay(g));
            }
            let Some(b) = ifs.ports.get(&p) else { continue };
            let slot = slots.slot(b.ifindex)?;
            let mut flags = 0;
            let set = |on: bool, bit: u16| if on { bit } else { 0 };
            flags |= set(b.peer, abi::PORT_PEER);
            flags |= set(sw.policy.forged_transmits.accepts(), abi::PORT_FORGED_OK);
            flags |= set(sw.policy.mac_changes.accepts(), abi::PORT_MAC_CHANGES_OK);
            flags |= set(sw.policy.promiscuous.accepts(), abi::PORT_PROMISCUOUS);
            flags |= set(!sw.owned, abi::PORT_PUNT);
            flags |= set(team.rewrites_source(p), abi::PORT_REWRITES);
            flags |= set(sw.changed.is_some(), abi::PORT_CHANGED);
            flags |= set(sw.owned && now - sw.attached_at >= REFLECTION_WINDOW, abi::PORT_SETTLED);
            let dom = domain(sw.vlan);
            t.ifaces.insert(
                b.ifindex,
                Iface {
                    slot,
                    id: p.0,
                    kind: abi::KIND_PORT,
                    flags,
                    domain: dom,
                    mac: sw.mac.0,
                    changed: sw.changed.map_or([0; 6], |m| m.0),
                    group: spec.group.0 as u32,
                    policy: t.groups.get(spec.group.0).map_or(abi::POLICY_PORT, |g| g.policy),
                    uplink: slot_of(team.port_uplink(p)),
                    priority: b.priority,
                    ..Iface::default()
                },
            );
            let d = t.domains.entry(dom).or_default();
            let n = d.count as usize;
            if n >= abi::MAX_DOMAIN_PORTS {
                return Err(Unsupported::DomainFull(
                    sw.vlan.map_or("(untagged)".into(), |v| v.to_string()),
                ));
            }
            let rx_uplinks = uplink_slot
                .keys()
                .filter(|u| team.takes_flood(p, **u))
                .fold(0u64, |bits, u| bits | 1 << u.0);
            d.members[n] = Member {
                ifindex: b.ifindex,
                slot,
                rx_uplinks,
                flags,
                ..Member::default()
            };
            d.count += 1;
            d.promiscuous += u32::from(flags & abi::PORT_PROMISCUOUS != 0);
        }

        // A known unicast skips its domain unless the domain has promiscuous ports to copy to.
        for i in t.ifaces.values_mut().filter(|i| i.kind == abi::KIND_PORT) {
            if t.domains.get(&i.domain).is_some_and(|d| d.promiscuous > 0) {
                i.flags |= abi::PORT_PROMISCUOUS_PEERS;
            }
        }
        t.slots = t
            .ifaces
            .iter()
            .map(|(ifindex, i)| {
                let info = SlotInfo {
                    ifindex: *ifindex,
                    kind: i.kind,
                    flags: i.flags,
                    mac: i.mac,
                    ..SlotInfo::default()
                };
                (i.slot, info)
            })
            .collect();

        // The configured MACs are the engine's static entries: one per port that owns its MAC
        // (read from the ports, not from the whole table, which may hold thousands learned).
        for spec in team.ports() {
            let (Some(b), Some(sw)) = (ifs.ports.get(&spec.id), switch.port_switching(spec.id)) else {
                continue;
            };
            if let (true, Some(slot)) = (sw.owned, slots.of(b.ifindex)) {
                t.statics.insert(fdb_key(sw.vlan, sw.mac), slot);
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests;
