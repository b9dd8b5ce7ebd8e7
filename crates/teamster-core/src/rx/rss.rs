//! Receive-side scaling: which bytes of a frame are hashed, and which queue a hash goes to.
//!
//! Model (Microsoft's RSS specification). The hash input is the source address, then the
//! destination address, then the source port and the destination port, each in network byte
//! order: 12 bytes for TCP over IPv4, 8 for IPv4 alone, 36 and 32 for IPv6. The enabled hash
//! types decide: a TCP segment takes the 4-tuple if TCP hashing is on for its IP version (UDP
//! likewise, an option that is off by default), else the 2-tuple if IP hashing is on; a fragment
//! (the first one included) takes the 2-tuple; other IP protocols the 2-tuple; a frame that is
//! not IP, or whose type is off, gets no hash and goes to the default queue. For a VXLAN frame,
//! [`RssConfig::inner`] hashes the encapsulated frame's headers instead of the outer UDP tunnel
//! (whose addresses are the same two VTEPs for every VM). The queue is
//! `table[hash mod table length]`.

use super::toeplitz::RssKey;
use crate::wire::FlowKey;
use core::net::IpAddr;

/// Which hash types are enabled (`NDIS_HASH_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashTypes {
    pub ipv4: bool,
    pub tcp_ipv4: bool,
    pub udp_ipv4: bool,
    pub ipv6: bool,
    pub tcp_ipv6: bool,
    pub udp_ipv6: bool,
}

impl Default for HashTypes {
    /// IP and TCP for both versions; UDP off (the specification's optional types, off on most
    /// NICs by default because fragmented UDP would hash two ways).
    fn default() -> HashTypes {
        HashTypes {
            ipv4: true,
            tcp_ipv4: true,
            udp_ipv4: false,
            ipv6: true,
            tcp_ipv6: true,
            udp_ipv6: false,
        }
    }
}

/// The bytes RSS hashes, at most 36.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashInput {
    bytes: [u8; 36],
    len: usize,
}

impl HashInput {
    /// The input for these addresses (and ports, for the 4-tuple); None if the two addresses
    /// are of different versions.
    pub fn tuple(src: IpAddr, dst: IpAddr, ports: Option<(u16, u16)>) -> Option<HashInput> {
        let mut h = HashInput { bytes: [0; 36], len: 0 };
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                h.push(&s.octets());
                h.push(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                h.push(&s.octets());
                h.push(&d.octets());
            }
            _ => return None,
        }
        if let Some((sp, dp)) = ports {
            h.push(&sp.to_be_bytes());
            h.push(&dp.to_be_bytes());
        }
        Some(h)
    }

    fn push(&mut self, b: &[u8]) {
        self.bytes[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The hash input for `flow` under `types`: the 4-tuple, the 2-tuple or none, by the
/// specification's rules (see the module documentation).
pub fn hash_input(flow: &FlowKey, types: HashTypes) -> Option<HashInput> {
    let (src, dst) = (flow.src_ip?, flow.dst_ip?);
    // ARP's addresses are in the key too; only IP frames are hashed.
    if flow.arp_op.is_some() {
        return None;
    }
    let v4 = src.is_ipv4();
    let (ip, tcp, udp) = if v4 {
        (types.ipv4, types.tcp_ipv4, types.udp_ipv4)
    } else {
        (types.ipv6, types.tcp_ipv6, types.udp_ipv6)
    };
    let l4 = match (flow.ip_proto, flow.src_port, flow.dst_port) {
        _ if flow.fragment => None,
        (Some(6), Some(s), Some(d)) if tcp => Some((s, d)),
        (Some(17), Some(s), Some(d)) if udp => Some((s, d)),
        _ => None,
    };
    match l4 {
        Some(ports) => HashInput::tuple(src, dst, Some(ports)),
        None if ip => HashInput::tuple(src, dst, None),
        None => None,
    }
}

/// The indirection table: hash to queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indirection {
    entries: Vec<u16>,
}

/// The default table size (Windows' and most NICs').
pub const DEFAULT_TABLE: usize = 128;
/// The largest table accepted.
pub const MAX_TABLE: usize = 4096;
/// The most receive queues a table may name.
pub const MAX_QUEUES: usize = 4096;

impl Indirection {
    /// `size` entries spreading `queues` queues round robin (entry `i` is queue `i mod queues`).
    pub fn round_robin(size: usize, queues: usize) -> Result<Indirection, String> {
        check_queues(queues)?;
        if !(1..=MAX_TABLE).contains(&size) {
            return Err(format!("table size {size} is out of range 1-{MAX_TABLE}"));
        }
        Indirection::new((0..size).map(|i| (i % queues) as u16).collect(), queues)
    }

    /// A table of these entries over `queues` queues; an entry past the queue count is an error
    /// naming its index.
    pub fn new(entries: Vec<u16>, queues: usize) -> Result<Indirection, String> {
        check_queues(queues)?;
        if entries.is_empty() || entries.len() > MAX_TABLE {
            return Err(format!("{} entries: a table has 1 to {MAX_TABLE}", entries.len()));
        }
        if let Some((i, q)) = entries.iter().enumerate().find(|(_, q)| usize::from(**q) >= queues) {
            return Err(format!(
                "entry {i}: queue {q} is past the queue count {queues} (queues 0-{})",
                queues - 1
            ));
        }
        Ok(Indirection { entries })
    }

    /// The queue a hash goes to.
    pub fn queue(&self, hash: u32) -> u16 {
        self.entries[hash as usize % self.entries.len()]
    }

    pub fn entries(&self) -> &[u16] {
        &self.entries
    }
}

fn check_queues(queues: usize) -> Result<(), String> {
    if (1..=MAX_QUEUES).contains(&queues) {
        Ok(())
    } else {
        Err(format!("{queues} queues: expected 1 to {MAX_QUEUES}"))
    }
}

/// A receive side's RSS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssConfig {
    pub key: RssKey,
    pub types: HashTypes,
    pub table: Indirection,
    /// Hash a VXLAN frame's inner headers (where the VMs' flows are) rather than the outer
    /// ones.
    pub inner: bool,
}

impl RssConfig {
    /// The defaults over `queues` queues: Microsoft's key, IP and TCP types, a 128-entry
    /// round-robin table, inner headers hashed.
    pub fn new(queues: usize) -> Result<RssConfig, String> {
        Ok(RssConfig {
            key: RssKey::default(),
            types: HashTypes::default(),
            table: Indirection::round_robin(DEFAULT_TABLE, queues)?,
            inner: true,
        })
    }

    /// The hash of a frame, if RSS hashes it.
    pub fn hash(&self, flow: &FlowKey) -> Option<u32> {
        let key = match (&flow.vxlan, self.inner) {
            (Some(v), true) => &v.inner,
            _ => flow,
        };
        hash_input(key, self.types).map(|i| self.key.hash(i.as_bytes()))
    }

    /// The queue of a frame: by its hash, or the default queue (0) if it has none.
    pub fn queue(&self, flow: &FlowKey) -> u16 {
        self.hash(flow).map_or(0, |h| self.table.queue(h))
    }
}
