//! What one run of the switch program costs when the machine's caches hold none of it (after
//! 64 MiB of other work, as between two pings 5 ms apart on a shared host) and when they hold it
//! all (the same frame again at once): BPF_PROG_TEST_RUN's own measure of the run, on the
//! differential test's rig (an engine and the program over 8 ports and 3 uplinks, in a network
//! namespace of this process's own), for an ICMP echo a VM sends to a host outside and its reply.
//!
//! Run as root: `cargo bench -p teamster-kernel --bench cold_run` (ROUNDS, default 400). The idle
//! ping's gap to the Linux bridge is this cold cost, twice per round trip (bench/live/RESULTS.md).

#[allow(dead_code)]
#[path = "../tests/common/mod.rs"]
mod common;

use common::{port_mac, Rig};
use std::time::Duration;
use teamster_core::switch::Ingress;
use teamster_core::teaming::{PortId, UplinkId};

/// An ICMP echo request of ping's default size (84 bytes of IP) from `src` to `dst`.
fn echo(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut ip = vec![0x45, 0, 0, 84, 0, 1, 0x40, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
    let mut sum: u32 = ip.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut f = [&dst[..], &src[..], &[0x08, 0x00]].concat();
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
    f.extend_from_slice(&[0x5a; 56]);
    f
}

fn percentile(sorted: &[Duration], p: usize) -> u128 {
    sorted[(sorted.len() - 1) * p / 100].as_nanos()
}

fn main() {
    let Some(mut rig) = Rig::new_or_skip() else { return };
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(400);
    let outside = [0x0a, 0, 0, 0, 0, 0x99];
    let (port, uplink) = (Ingress::Port(PortId(1)), Ingress::Uplink(UplinkId(0)));
    let (request, reply) = (echo(outside, port_mac(1).0), echo(port_mac(1).0, outside));
    // Both sides learn both addresses first, so each run below is a known unicast.
    for (from, frame) in [(uplink, &reply), (port, &request)] {
        if let Err(e) = rig.compare(from, frame) {
            panic!("the engine and the program disagree on the benchmark's frame: {e}");
        }
    }
    let mut other_work = vec![0u8; 64 << 20];
    println!("switch program, one run (ns)   cold p10   cold p50   cold p90    hot p50");
    for (name, from, frame) in [
        ("echo, VM -> uplink", port, &request),
        ("reply, uplink -> VM", uplink, &reply),
    ] {
        let (ifindex, _) = rig.ingress_slot(from);
        let (_, v) = rig.program().run(ifindex, frame, 0).expect("the program runs");
        assert!(
            v.punt == 0 && v.drop == 0 && v.count == 1,
            "{name}: not switched to one output in the kernel (punt {}, drop {}, {} outputs)",
            v.punt,
            v.drop,
            v.count
        );
        let (mut cold, mut hot) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            for b in other_work.iter_mut().step_by(64) {
                *b = b.wrapping_add(round as u8 | 1);
            }
            cold.push(rig.program().time_run(ifindex, frame).expect("the program runs"));
            hot.push(rig.program().time_run(ifindex, frame).expect("the program runs"));
        }
        cold.sort();
        hot.sort();
        println!(
            "{name:<30} {:>10} {:>10} {:>10} {:>10}",
            percentile(&cold, 10),
            percentile(&cold, 50),
            percentile(&cold, 90),
            percentile(&hot, 50)
        );
    }
    std::hint::black_box(&other_work);
}
