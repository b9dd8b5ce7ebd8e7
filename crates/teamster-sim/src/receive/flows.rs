//! The streams of a receive run as real frames: each stream's TCP segment template (and its
//! VXLAN encapsulation), the flow key the NIC steers it by, and its window state.

use super::scenario::{Setup, Steering};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use teamster_core::offload::{encapsulate, fill_l4_checksum, TunnelEnds, Vni};
use teamster_core::rx::RssConfig;
use teamster_core::teaming::PortId;
use teamster_core::wire::{parse, FlowKey, MacAddr};

/// Ethernet, IPv4 and TCP headers of a stream's segment.
pub const HEADERS: usize = 54;
/// The overlay's VNI.
const VNI: u32 = 5000;
/// Where a segment's TCP source port and sequence number lie.
const SPORT_AT: usize = 34;
const SEQ_AT: usize = 38;

/// One TCP stream's state.
#[derive(Debug, Clone)]
pub struct Stream {
    pub vm: u32,
    /// Segments sent and not yet consumed (receive) or on the wire (send).
    pub in_flight: u32,
    /// When pacing lets it send next, ns.
    pub next_allowed: u64,
    pub gap_ns: u64,
    pub next_seq: u32,
    /// Its receive queue, where the NIC's choice does not change (single queue, RSS).
    pub queue: u16,
}

/// Every stream of a run, with its frames and keys.
pub struct Flows {
    pub streams: Vec<Stream>,
    pub payload: u32,
    pub inner_bytes: u64,
    pub outer_bytes: u64,
    templates: Vec<Vec<u8>>,
    /// What NetQueue filters see: the outer frame's key, without its VXLAN layer unless the
    /// NIC filters on inner MACs.
    filter_keys: Vec<FlowKey>,
    by_port: HashMap<u16, u32>,
}

fn vm_mac(vm: u32) -> MacAddr {
    let b = vm.to_be_bytes();
    MacAddr([2, 0, 0, 0xaa, b[2], b[3]])
}

impl Flows {
    /// Builds `streams_per_vm` streams to each VM from senders on distinct TCP source ports
    /// (shuffled by `seed`), and steers each as the NIC would.
    pub fn new(s: &Setup, seed: u64) -> Result<Flows, String> {
        let t = &s.traffic;
        let n = s.vms.count * t.streams_per_vm;
        // Each VM's streams come from one client VM, from distinct ephemeral ports (Linux's
        // range, 32768-60999) drawn by the seed.
        let mut ports: Vec<u16> = (32768..61000).collect();
        ports.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        ports.truncate(n as usize);
        let rss = RssConfig {
            inner: s.nic.inner,
            ..RssConfig::new(usize::from(s.nic.queues))?
        };
        let gap_ns = t
            .rate
            .map_or(0, |r| (f64::from(t.payload) * 8.0 / r.bps_f64() * 1e9) as u64);
        let ends = TunnelEnds::new(
            MacAddr([2, 0xee, 0, 0, 0, 2]),
            MacAddr([2, 0xee, 0, 0, 0, 1]),
            [192, 0, 2, 2].into(),
            [192, 0, 2, 1].into(),
        )?;
        let mut f = Flows {
            streams: Vec::new(),
            payload: t.payload,
            inner_bytes: (t.payload as usize + HEADERS) as u64,
            outer_bytes: (t.payload as usize + HEADERS + if t.overlay { ends.overhead() } else { 0 }) as u64,
            templates: Vec::new(),
            filter_keys: Vec::new(),
            by_port: HashMap::new(),
        };
        for (i, sport) in ports.into_iter().enumerate() {
            let vm = i as u32 / t.streams_per_vm;
            let b = vm.to_be_bytes();
            let mut frame = Vec::new();
            let builder = etherparse::PacketBuilder::ethernet2([2, 0xcc, 0, 0, 0, 1], vm_mac(vm).0)
                .ipv4([10, 1, b[2], b[3]], [10, 0, b[2], b[3]], 64)
                .tcp(sport, 5001, 0, 65535)
                .ack(1);
            let builder = if t.push { builder.psh() } else { builder };
            builder
                .write(&mut frame, &vec![0; t.payload as usize])
                .map_err(|e| e.to_string())?;
            let outer = if t.overlay {
                encapsulate(&frame, Vni::new(u64::from(VNI))?, &ends).ok_or("a segment too long for VXLAN")?
            } else {
                frame.clone()
            };
            let key = parse(&outer).map_err(|e| e.to_string())?;
            let queue = match s.nic.steering {
                Steering::Rss => rss.queue(&key),
                Steering::Single | Steering::Netqueue => 0,
            };
            let mut filter_key = key;
            if !s.nic.inner {
                filter_key.vxlan = None;
            }
            f.by_port.insert(sport, i as u32);
            f.streams.push(Stream {
                vm,
                in_flight: 0,
                next_allowed: 0,
                gap_ns,
                next_seq: 1,
                queue,
            });
            f.templates.push(frame);
            f.filter_keys.push(filter_key);
        }
        Ok(f)
    }

    /// The NetQueue filters the host programs: one per VM, on its MAC (and the VNI, where the
    /// NIC filters inner MACs).
    pub fn filters(&self, s: &Setup) -> Vec<(PortId, MacAddr, Option<u32>)> {
        let vni = (s.traffic.overlay && s.nic.inner).then_some(VNI);
        (0..s.vms.count).map(|vm| (PortId(vm), vm_mac(vm), vni)).collect()
    }

    pub fn filter_key(&self, stream: u32) -> &FlowKey {
        &self.filter_keys[stream as usize]
    }

    /// Stream `stream`'s (inner) segment at sequence `seq`, checksum complete.
    pub fn frame(&self, stream: u32, seq: u32) -> Vec<u8> {
        let mut f = self.templates[stream as usize].clone();
        f[SEQ_AT..SEQ_AT + 4].copy_from_slice(&seq.to_be_bytes());
        fill_l4_checksum(&mut f);
        f
    }

    /// The stream a (coalesced) segment belongs to, by its source port.
    pub fn stream_of(&self, frame: &[u8]) -> u32 {
        let port = u16::from_be_bytes([frame[SPORT_AT], frame[SPORT_AT + 1]]);
        self.by_port[&port]
    }

    pub fn vm_of(&self, stream: u32, probe: bool) -> u32 {
        if probe {
            0
        } else {
            self.streams[stream as usize].vm
        }
    }

    /// VMs with a stream steered to queue `q` (single queue and RSS).
    pub fn vms_on_queue(&self, q: u16) -> usize {
        let mut vms: Vec<u32> = self.streams.iter().filter(|s| s.queue == q).map(|s| s.vm).collect();
        vms.dedup();
        vms.len()
    }
}
