//! The tables' layout, as `bpf/switch.h` declares it: every struct here is that file's, field
//! for field (`#[repr(C)]`, padding explicit), and the size checks below hold them together.
//! Only this module knows the byte layout; [`crate::tables`] speaks in the engine's terms.

pub const MAX_SLOTS: usize = 1024;
pub const MAX_DOMAIN_PORTS: usize = 256;
pub const MAX_GROUPS: usize = 256;
pub const MAX_GROUP_UPLINKS: usize = 8;
pub const MAX_OUTPUTS: usize = MAX_DOMAIN_PORTS * 2 + 2;
pub const DOMAIN_UNTAGGED: u16 = 0xffff;
/// Entries of the `domains` array: VLANs 0-4095, then [`DOMAIN_UNTAGGED`].
pub const DOMAIN_INDEXES: u32 = 4097;

/// Where domain `d` (a VLAN or [`DOMAIN_UNTAGGED`]) sits in the `domains` array.
pub fn domain_index(d: u16) -> u32 {
    if d == DOMAIN_UNTAGGED {
        DOMAIN_INDEXES - 1
    } else {
        u32::from(d)
    }
}
pub const NO_SLOT: u32 = u32::MAX;
/// Uplink IDs a flood list's bitmask can name.
pub const MAX_UPLINK_ID: usize = 64;

pub const KIND_PORT: u8 = 1;
pub const KIND_UPLINK: u8 = 2;

pub const PORT_PEER: u16 = 1 << 0;
pub const PORT_FORGED_OK: u16 = 1 << 1;
pub const PORT_MAC_CHANGES_OK: u16 = 1 << 2;
pub const PORT_PROMISCUOUS: u16 = 1 << 3;
pub const PORT_PUNT: u16 = 1 << 4;
pub const PORT_REWRITES: u16 = 1 << 5;
pub const PORT_CHANGED: u16 = 1 << 6;
pub const PORT_SETTLED: u16 = 1 << 7;
/// The port's domain has promiscuous ports (the program reads the domain for every frame).
pub const PORT_PROMISCUOUS_PEERS: u16 = 1 << 8;
pub const UPLINK_HAS_MAC: u16 = 1 << 0;
pub const UPLINK_DISCARDS: u16 = 1 << 1;

pub const POLICY_PORT: u8 = 0;
pub const POLICY_IP_L3: u8 = 1;
pub const POLICY_IP_L3L4: u8 = 2;
/// Address Hash over [`Group::fields`].
pub const POLICY_ADDRESS: u8 = 3;
/// Dynamic's flowlet buckets (`flowlets`, `flowlet_targets`).
pub const POLICY_FLOWLET: u8 = 4;

pub const FIELDS_TRANSPORT_PORTS: u8 = 0;
pub const FIELDS_IP_ADDRESSES: u8 = 1;
pub const FIELDS_MAC_ADDRESSES: u8 = 2;

/// A flowlet group's buckets in `flowlets` and `flowlet_targets`, from group * this.
pub const FLOWLET_BUCKETS: usize = 256;
/// In `flowlet_targets`: placed, with no target the program can use (its flowlets take
/// active[bucket mod n]); 0 is "not placed", [`FLOWLET_OPEN`] "placed, its next flowlet the
/// engine's", anything else a slot + 1.
pub const FLOWLET_HASHED: u32 = u32::MAX;
/// In `flowlet_targets`: placed without a target while an active member is live; its burst
/// goes on in the kernel, its next flowlet goes to the engine.
pub const FLOWLET_OPEN: u32 = u32::MAX - 1;

pub const EDIT_KEEP: u8 = 0;
pub const EDIT_PUSH: u8 = 1;
pub const EDIT_POP: u8 = 2;

pub const FDB_STATIC: u32 = 1;
pub const DROP_REASONS: usize = 16;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Iface {
    pub slot: u32,
    pub id: u32,
    pub kind: u8,
    /// A port's group's policy (a `POLICY_` code), so that its own uplink needs no group read.
    pub policy: u8,
    pub flags: u16,
    pub domain: u16,
    pub mac: [u8; 6],
    pub changed: [u8; 6],
    pub pad2: u16,
    pub group: u32,
    pub uplink: u32,
    pub priority: u32,
    pub pad1: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotInfo {
    pub ifindex: u32,
    /// The interface's [`Iface`] kind, flags and MAC, copied: what a frame needs of an output.
    pub kind: u8,
    pub pad0: u8,
    pub flags: u16,
    pub mac: [u8; 6],
    pub pad1: u16,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Member {
    pub ifindex: u32,
    pub slot: u32,
    pub rx_uplinks: u64,
    pub flags: u16,
    pub pad0: u16,
    pub pad1: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Domain {
    pub count: u32,
    /// How many of the members are promiscuous: without any, a frame skips that walk.
    pub promiscuous: u32,
    pub members: [Member; MAX_DOMAIN_PORTS],
}

impl Default for Domain {
    fn default() -> Domain {
        Domain {
            count: 0,
            promiscuous: 0,
            members: [Member::default(); MAX_DOMAIN_PORTS],
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupUplink {
    pub salt: u64,
    pub slot: u32,
    pub id: u32,
    pub up: u8,
    pub pad: [u8; 7],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Group {
    pub policy: u8,
    pub active_count: u8,
    pub standby_count: u8,
    /// What Address Hash and the flowlets hash (a `FIELDS_` code).
    pub fields: u8,
    pub pad: [u8; 4],
    pub active: [GroupUplink; MAX_GROUP_UPLINKS],
    pub standby: [GroupUplink; MAX_GROUP_UPLINKS],
    /// The flowlets' idle gap, in ns.
    pub gap_ns: u64,
}

/// A flowlet bucket as the program keeps it (its target is the engine's, in
/// `flowlet_targets` as its slot + 1, 0 for none).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flowlet {
    /// CLOCK_MONOTONIC ns of its last frame; 0: never.
    pub last_seen: u64,
    pub flowlet_at: u64,
    /// Bytes sent through it, ever.
    pub bytes: u64,
    /// The slot its frames take until its next flowlet, or [`NO_SLOT`].
    pub current: u32,
    pub pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Config {
    pub ageing_ns: u64,
    pub limit_total: u64,
    pub limit_per_port: u64,
    pub reflection_ns: u64,
    pub link_local: u32,
    /// Frames and notes each interface may hand up per second (0: no bound).
    pub punt_rate: u32,
    /// CLOCK_MONOTONIC ns when the engine last wrote the tables (stamped by the write).
    pub engine_ns: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FdbKey {
    pub domain: u16,
    pub mac: [u8; 6],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FdbEntry {
    pub seen: u64,
    pub slot: u32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Out {
    pub slot: u32,
    pub edit: u8,
    pub rewrite: u8,
    pub vid: u16,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Verdict {
    pub seq: u64,
    pub drop: u16,
    pub punt: u8,
    pub learned: u8,
    pub count: u32,
    pub segs: u32,
    pub hdr: u32,
    pub outs: [Out; MAX_OUTPUTS],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub mac_limit: u64,
    pub punted: u64,
    pub to_uplinks: u64,
    pub from_uplinks: u64,
    pub oversize: u64,
    pub tx_error: u64,
    pub punt_limited: u64,
    pub drops: [u64; DROP_REASONS],
}

impl Stats {
    /// Adds `o`'s counts (another CPU's) to these, field by field.
    pub fn add(&mut self, o: &Stats) {
        let Stats {
            rx_packets,
            rx_bytes,
            tx_packets,
            tx_bytes,
            mac_limit,
            punted,
            to_uplinks,
            from_uplinks,
            oversize,
            tx_error,
            punt_limited,
            drops,
        } = o;
        self.rx_packets += rx_packets;
        self.rx_bytes += rx_bytes;
        self.tx_packets += tx_packets;
        self.tx_bytes += tx_bytes;
        self.mac_limit += mac_limit;
        self.punted += punted;
        self.to_uplinks += to_uplinks;
        self.from_uplinks += from_uplinks;
        self.oversize += oversize;
        self.tx_error += tx_error;
        self.punt_limited += punt_limited;
        for (a, b) in self.drops.iter_mut().zip(drops) {
            *a += b;
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PuntMeta {
    pub ifindex: u32,
    pub len: u32,
    pub reason: u16,
    pub vlan_tci: u16,
    pub vlan_proto: u16,
    pub vlan_present: u16,
}

// SAFETY: each is plain old data: #[repr(C)], integers and arrays of them, padding explicit (no
// uninitialised bytes), valid for any bit pattern.
unsafe impl aya::Pod for Iface {}
unsafe impl aya::Pod for SlotInfo {}
unsafe impl aya::Pod for Domain {}
unsafe impl aya::Pod for Group {}
unsafe impl aya::Pod for Flowlet {}
unsafe impl aya::Pod for Config {}
unsafe impl aya::Pod for FdbKey {}
unsafe impl aya::Pod for FdbEntry {}
unsafe impl aya::Pod for Verdict {}
unsafe impl aya::Pod for Stats {}

// The sizes clang gives switch.h's structs (x86-64 and BPF agree: natural alignment only).
const _: () = {
    use core::mem::size_of;
    assert!(size_of::<Iface>() == 44);
    assert!(size_of::<SlotInfo>() == 16);
    assert!(size_of::<Member>() == 24);
    assert!(size_of::<Domain>() == 6152);
    assert!(size_of::<GroupUplink>() == 24);
    assert!(size_of::<Group>() == 400);
    assert!(size_of::<Flowlet>() == 32);
    assert!(size_of::<Config>() == 48);
    assert!(size_of::<FdbKey>() == 8);
    assert!(size_of::<FdbEntry>() == 16);
    assert!(size_of::<Out>() == 8);
    assert!(size_of::<Verdict>() == 4136);
    assert!(size_of::<Stats>() == 216);
    assert!(size_of::<PuntMeta>() == 16);
};
