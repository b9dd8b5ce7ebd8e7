//! Receive steering in the kernel: a classic BPF program that picks, for each frame an uplink
//! receives, which of its receive queues (the sockets of a `PACKET_FANOUT` group) takes it.
//!
//! Model. An uplink with several receive queues has one AF_PACKET socket per queue, joined in
//! queue order to one fanout group of type `PACKET_FANOUT_CBPF`; the kernel runs the group's
//! program on every frame and gives the frame to member `result mod members`. Two programs:
//! - [`rss_program`]: the Toeplitz hash of `core::rx` over the same input bytes (source and
//!   destination address, then the ports for TCP, and for UDP when its type is on; the 2-tuple
//!   for fragments and other protocols; nothing for frames that are not IP), then the
//!   indirection table. The key is folded in when the program is built: input bit `i` XORs the
//!   32-bit window of the key starting at bit `i` into the hash, which is what the hash is
//!   (so the program is the specification's loop, unrolled). Not hashed as `core::rx` would: IPv6 with
//!   extension headers before TCP/UDP (the 2-tuple here; `core::rx` walks them), and VXLAN's
//!   inner headers (the outer ones here: inner hashing needs a longer program than the
//!   4096 instructions classic BPF allows with IPv6 included).
//! - [`mac_program`]: NetQueue's filters, a destination MAC to a queue each; everything else to
//!   queue 0, the default queue. Up to [`MAX_PROGRAM_FILTERS`] filters; the rest of the MACs
//!   take the default queue (said by the caller). VXLAN's inner-MAC filters are not steered
//!   live (their frames all carry the VTEP's MAC outside: they take the default queue).
//!
//! What the program sees: the kernel runs a fanout group's program where it hands frames to
//! packet sockets, after it has taken a VLAN tag out of the frame (into the frame's metadata)
//! and with the frame's data starting at the network header: the EtherType is read from the
//! frame's metadata (`SKF_AD_PROTOCOL`) and the destination MAC through the link-layer window
//! (`SKF_LL_OFF`). A frame whose metadata still says VLAN (a second tag) is not hashed.
//!
//! Classic BPF, not eBPF: it needs no verifier-friendly loop bounds, no map, no `bpf()`
//! system call and no libbpf (no crate builds classic BPF programs, so they are assembled here
//! from the instruction encoding of `linux/filter.h`). A frame too short for a load ends the
//! program with 0: queue 0.

use libc::sock_filter;
use teamster_core::rx::{HashTypes, RssConfig};
use teamster_core::wire::MacAddr;

/// The longest classic BPF program the kernel loads (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;
/// The largest indirection table steered live (the program's table is a search tree whose
/// branches must stay within a conditional jump's 255 instructions).
pub const MAX_LIVE_TABLE: usize = 256;
/// The most MAC filters a program holds (five instructions each).
pub const MAX_PROGRAM_FILTERS: usize = 800;

// Instruction classes, sizes, modes and operations of `linux/filter.h`.
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const IMM: u16 = 0x00;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const MSH: u16 = 0xa0;
const MOD: u16 = 0x90;
const XOR: u16 = 0xa0;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JGE: u16 = 0x30;
const JSET: u16 = 0x40;
const K: u16 = 0x00;

/// Where classic BPF's ancillary loads start, and the frame's EtherType among them
/// (`SKF_AD_OFF + SKF_AD_PROTOCOL`, a negative offset as the kernel reads it).
const AD_PROTOCOL: u32 = (-0x1000i32) as u32;
/// Where loads relative to the link-layer header start (`SKF_LL_OFF`).
const LL_OFF: u32 = (-0x200000i32) as u32;

/// Scratch cells: the hash, the byte being hashed, whether ports are hashed.
const M_HASH: u32 = 0;
const M_BYTE: u32 = 1;
const M_PORTS: u32 = 2;

/// A jump target while assembling: the next instruction, or a label placed later.
#[derive(Clone, Copy)]
enum To {
    Next,
    /// Skip this many instructions.
    Skip(u8),
    Label(usize),
}

/// A program being assembled, with forward labels resolved at the end.
struct Asm {
    code: Vec<(sock_filter, To, To)>,
    labels: Vec<Option<usize>>,
}

fn insn(code: u16, k: u32) -> sock_filter {
    sock_filter { code, jt: 0, jf: 0, k }
}

impl Asm {
    fn new() -> Asm {
        Asm {
            code: Vec::new(),
            labels: Vec::new(),
        }
    }

    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn place(&mut self, l: usize) {
        self.labels[l] = Some(self.code.len());
    }

    fn op(&mut self, code: u16, k: u32) {
        self.code.push((insn(code, k), To::Next, To::Next));
    }

    fn jump(&mut self, code: u16, k: u32, yes: To, no: To) {
        self.code.push((insn(JMP | code | K, k), yes, no));
    }

    /// An unconditional jump, of any length.
    fn goto(&mut self, l: usize) {
        self.code.push((insn(JMP | JA, 0), To::Label(l), To::Next));
    }

    /// Resolves the labels; None if the program is too long or a conditional jump too far.
    fn finish(self) -> Option<Vec<sock_filter>> {
        if self.code.len() > MAX_INSNS {
            return None;
        }
        let mut out = Vec::with_capacity(self.code.len());
        for (pc, (mut i, yes, no)) in self.code.into_iter().enumerate() {
            let dist = |t: To| -> Option<usize> {
                match t {
                    To::Next => Some(0),
                    To::Skip(n) => Some(usize::from(n)),
                    To::Label(l) => self.labels[l]?.checked_sub(pc + 1),
                }
            };
            if i.code == JMP | JA {
                i.k = u32::try_from(dist(yes)?).ok()?;
            } else if i.code & 0x07 == JMP {
                i.jt = u8::try_from(dist(yes)?).ok()?;
                i.jf = u8::try_from(dist(no)?).ok()?;
            }
            out.push(i);
        }
        Some(out)
    }

    /// Hashes `len` bytes from `offset` into the network header (past X, with `past_x`),
    /// starting at key bit `bit`; returns the next key bit.
    fn hash_bytes(&mut self, key: &[u8], mut bit: usize, offset: u32, len: u32, past_x: bool) -> usize {
        for b in 0..len {
            self.op(LD | B | if past_x { IND } else { ABS }, offset + b);
            self.op(ST, M_BYTE);
            for shift in (0..8).rev() {
                let window = key_window(key, bit);
                bit += 1;
                if window == 0 {
                    continue;
                }
                self.op(LD | MEM, M_BYTE);
                self.jump(JSET, 1 << shift, To::Next, To::Skip(3));
                self.op(LD | MEM, M_HASH);
                self.op(ALU | XOR | K, window);
                self.op(ST, M_HASH);
            }
        }
        bit
    }
}

/// The 32 bits of `key` starting at bit `bit` (zeros past its end).
fn key_window(key: &[u8], bit: usize) -> u32 {
    let byte = |i: usize| u64::from(key.get(i).copied().unwrap_or(0));
    let i = bit / 8;
    let wide = (byte(i) << 32) | (byte(i + 1) << 24) | (byte(i + 2) << 16) | (byte(i + 3) << 8) | byte(i + 4);
    (wide >> (8 - bit % 8)) as u32
}

/// One IP version's part of the RSS program: `ip` says whether its 2-tuple is hashed, `tcp` and
/// `udp` whether their 4-tuples are; `proto_at` is the offset of the protocol (next header)
/// field, `frag` of IPv4's flags and fragment offset, `addrs` where the addresses start and how
/// long they are. Ends at `table` with the hash in M_HASH, or returns 0.
#[allow(clippy::too_many_arguments)]
fn rss_version(
    a: &mut Asm,
    key: &[u8],
    (ip, tcp, udp): (bool, bool, bool),
    proto_at: u32,
    frag: Option<u32>,
    addrs: (u32, u32),
    v4: bool,
    table: usize,
) {
    let (l4, no_l4, hash) = (a.label(), a.label(), a.label());
    if let Some(f) = frag {
        a.op(LD | H | ABS, f);
        a.jump(JSET, 0x3fff, To::Label(no_l4), To::Next);
    }
    a.op(LD | B | ABS, proto_at);
    a.jump(JEQ, 6, To::Label(if tcp { l4 } else { no_l4 }), To::Next);
    a.jump(JEQ, 17, To::Label(if udp { l4 } else { no_l4 }), To::Label(no_l4));
    a.place(l4);
    a.op(LD | IMM, 1);
    a.op(ST, M_PORTS);
    a.goto(hash);
    a.place(no_l4);
    if !ip {
        a.op(RET | K, 0);
    }
    a.op(LD | IMM, 0);
    a.op(ST, M_PORTS);
    a.place(hash);
    let bit = a.hash_bytes(key, 0, addrs.0, addrs.1, false);
    let ports = a.label();
    a.op(LD | MEM, M_PORTS);
    a.jump(JEQ, 0, To::Next, To::Label(ports));
    a.goto(table);
    a.place(ports);
    if v4 {
        // X = the IPv4 header's length: the ports follow it.
        a.op(LDX | B | MSH, 0);
        a.hash_bytes(key, bit, 0, 4, true);
    } else {
        a.hash_bytes(key, bit, 40, 4, false);
    }
    a.goto(table);
}

/// Emits a search tree over `entries[lo..hi]` for the table index in A.
fn table_tree(a: &mut Asm, entries: &[u16], lo: usize, hi: usize) {
    if hi - lo == 1 {
        a.op(RET | K, u32::from(entries[lo]));
        return;
    }
    let mid = (lo + hi) / 2;
    let right = a.label();
    a.jump(JGE, mid as u32, To::Label(right), To::Next);
    table_tree(a, entries, lo, mid);
    a.place(right);
    table_tree(a, entries, mid, hi);
}

/// The RSS steering program for `rss` (see the module documentation); an error naming the
/// setting if the table is longer than [`MAX_LIVE_TABLE`].
pub fn rss_program(rss: &RssConfig) -> Result<Vec<sock_filter>, String> {
    let entries = rss.table.entries();
    if entries.len() > MAX_LIVE_TABLE {
        return Err(format!(
            "rx.indirection = {}: at most {MAX_LIVE_TABLE} entries are steered live",
            entries.len()
        ));
    }
    let key = rss.key.bytes();
    let HashTypes {
        ipv4,
        tcp_ipv4,
        udp_ipv4,
        ipv6,
        tcp_ipv6,
        udp_ipv6,
    } = rss.types;
    let mut a = Asm::new();
    let (v4, v6, table) = (a.label(), a.label(), a.label());
    // Every scratch cell is written before it is read (the kernel checks).
    a.op(LD | IMM, 0);
    a.op(ST, M_HASH);
    a.op(ST, M_BYTE);
    a.op(ST, M_PORTS);
    a.op(LD | H | ABS, AD_PROTOCOL);
    a.jump(JEQ, 0x0800, To::Next, To::Skip(1));
    a.goto(v4);
    a.jump(JEQ, 0x86dd, To::Next, To::Skip(1));
    a.goto(v6);
    a.op(RET | K, 0);
    a.place(v4);
    rss_version(
        &mut a,
        key,
        (ipv4, tcp_ipv4, udp_ipv4),
        9,
        Some(6),
        (12, 8),
        true,
        table,
    );
    a.place(v6);
    rss_version(&mut a, key, (ipv6, tcp_ipv6, udp_ipv6), 6, None, (8, 32), false, table);
    a.place(table);
    a.op(LD | MEM, M_HASH);
    a.op(ALU | MOD | K, entries.len() as u32);
    table_tree(&mut a, entries, 0, entries.len());
    a.finish()
        .ok_or_else(|| format!("rx: the RSS program for a {}-entry table does not fit", entries.len()))
}

/// The NetQueue steering program: each of `filters` (a destination MAC and its queue) to its
/// queue, the rest to queue 0. Filters on queue 0, and past [`MAX_PROGRAM_FILTERS`], are left
/// to the default queue.
pub fn mac_program(filters: &[(MacAddr, u16)]) -> Vec<sock_filter> {
    let mut a = Asm::new();
    for (mac, queue) in filters.iter().filter(|f| f.1 != 0).take(MAX_PROGRAM_FILTERS) {
        let m = mac.0;
        let hi = u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
        let lo = u32::from(u16::from_be_bytes([m[4], m[5]]));
        let next = a.label();
        a.op(LD | W | ABS, LL_OFF);
        a.jump(JEQ, hi, To::Next, To::Label(next));
        a.op(LD | H | ABS, LL_OFF + 4);
        a.jump(JEQ, lo, To::Next, To::Label(next));
        a.op(RET | K, u32::from(*queue));
        a.place(next);
    }
    a.op(RET | K, 0);
    a.finish().expect("MAX_PROGRAM_FILTERS filters fit")
}

#[cfg(test)]
#[path = "steer_tests.rs"]
mod tests;
