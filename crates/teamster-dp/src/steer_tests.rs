//! The steering programs run, in a classic BPF interpreter written for these tests, on frames
//! of every kind, and must pick the queue `core::rx` picks.

use super::*;
use proptest::prelude::*;
use teamster_core::rx::{Indirection, RssKey};
use teamster_core::wire::parse;

/// Runs a classic BPF program on `frame` as the kernel runs a fanout group's: one VLAN tag
/// taken out, the data starting at the network header, the EtherType in the metadata, and the
/// link-layer header behind `SKF_LL_OFF`; a load past the data's end ends it with 0. Only the
/// instructions the programs use are handled; any other fails the test.
fn run(prog: &[sock_filter], frame: &[u8]) -> u32 {
    let tagged = matches!(frame.get(12..14), Some([0x81, 0x00] | [0x88, 0xa8]));
    let l3 = if tagged { 18 } else { 14 };
    let Some(proto) = frame.get(l3 - 2..l3) else { return 0 };
    let protocol = u32::from(u16::from_be_bytes([proto[0], proto[1]]));
    let data = &frame[l3..];
    let (mut a, mut x, mut m) = (0u32, 0u32, [0u32; 16]);
    let mut pc = 0;
    let load = |at: u64, size: u16| -> Option<u32> {
        let n = match size {
            W => 4,
            H => 2,
            _ => 1,
        };
        let (bytes, at) = if at >= u64::from(AD_PROTOCOL) {
            assert_eq!((at, size), (u64::from(AD_PROTOCOL), H), "ancillary load");
            return Some(protocol);
        } else if at >= u64::from(LL_OFF) {
            (frame, at - u64::from(LL_OFF))
        } else {
            (data, at)
        };
        let at = usize::try_from(at).ok()?;
        let b = bytes.get(at..at.checked_add(n)?)?;
        Some(b.iter().fold(0u32, |v, byte| (v << 8) | u32::from(*byte)))
    };
    loop {
        let i = prog[pc];
        pc += 1;
        match i.code & 0x07 {
            LD => {
                let at = match i.code & 0xe0 {
                    IMM => {
                        a = i.k;
                        continue;
                    }
                    MEM => {
                        a = m[i.k as usize];
                        continue;
                    }
                    ABS => u64::from(i.k),
                    IND => u64::from(x) + u64::from(i.k),
                    other => panic!("ld mode {other:#x}"),
                };
                match load(at, i.code & 0x18) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            LDX => {
                x = match i.code & 0xe0 {
                    MSH => match data.get(i.k as usize) {
                        Some(b) => 4 * u32::from(b & 0x0f),
                        None => return 0,
                    },
                    other => panic!("ldx mode {other:#x}"),
                }
            }
            ST => m[i.k as usize] = a,
            ALU => {
                a = match i.code & 0xf8 {
                    c if c == MOD | K => a % i.k,
                    c if c == XOR | K => a ^ i.k,
                    other => panic!("alu op {other:#x}"),
                }
            }
            JMP => {
                let taken = match i.code & 0xf8 {
                    c if c == JA => {
                        pc += i.k as usize;
                        continue;
                    }
                    c if c == JEQ | K => a == i.k,
                    c if c == JGE | K => a >= i.k,
                    c if c == JSET | K => a & i.k != 0,
                    other => panic!("jmp op {other:#x}"),
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            RET => return i.k,
            other => panic!("class {other:#x}"),
        }
    }
}

/// A frame of `kind` (0 IPv4, 1 IPv6, 2 ARP-like other) with these fields.
#[allow(clippy::too_many_arguments)]
fn frame(
    kind: u8,
    tag: Option<u16>,
    proto: u8,
    ihl: u8,
    frag: u16,
    addrs: &[u8; 32],
    ports: (u16, u16),
    dst_mac: [u8; 6],
) -> Vec<u8> {
    let mut f = dst_mac.to_vec();
    f.extend([2, 0, 0, 0, 0, 1]);
    if let Some(tpid) = tag {
        f.extend(tpid.to_be_bytes());
        f.extend(7u16.to_be_bytes());
    }
    let l4_len = if proto == 17 { 8 } else { 20 };
    let mut l4 = vec![0u8; l4_len];
    l4[..2].copy_from_slice(&ports.0.to_be_bytes());
    l4[2..4].copy_from_slice(&ports.1.to_be_bytes());
    if proto == 17 {
        l4[4..6].copy_from_slice(&8u16.to_be_bytes());
    } else {
        l4[12] = 5 << 4;
    }
    match kind {
        0 => {
            f.extend(0x0800u16.to_be_bytes());
            let hlen = usize::from(ihl) * 4;
            let mut ip = vec![0u8; hlen];
            ip[0] = 0x40 | ihl;
            ip[2..4].copy_from_slice(&((hlen + l4.len()) as u16).to_be_bytes());
            ip[6..8].copy_from_slice(&frag.to_be_bytes());
            ip[8] = 64;
            ip[9] = proto;
            ip[12..20].copy_from_slice(&addrs[..8]);
            f.extend(ip);
        }
        1 => {
            f.extend(0x86ddu16.to_be_bytes());
            let mut ip = vec![0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
            ip[6] = proto;
            ip[7] = 64;
            ip[8..40].copy_from_slice(addrs);
            f.extend(ip);
        }
        _ => f.extend(0x88b5u16.to_be_bytes()),
    }
    f.extend(l4);
    f
}

fn config(key: [u8; 40], types: [bool; 6], table: Vec<u16>, queues: usize) -> RssConfig {
    RssConfig {
        key: RssKey::new(&key).unwrap(),
        types: HashTypes {
            ipv4: types[0],
            tcp_ipv4: types[1],
            udp_ipv4: types[2],
            ipv6: types[3],
            tcp_ipv6: types[4],
            udp_ipv6: types[5],
        },
        table: Indirection::new(table, queues).unwrap(),
        inner: false,
    }
}

#[test]
fn programs_fit_the_kernel_limit() {
    let mut rss = RssConfig::new(8).unwrap();
    rss.types.udp_ipv4 = true;
    rss.types.udp_ipv6 = true;
    rss.table = Indirection::round_robin(MAX_LIVE_TABLE, 8).unwrap();
    assert!(rss_program(&rss).unwrap().len() <= MAX_INSNS);
    rss.table = Indirection::round_robin(MAX_LIVE_TABLE + 1, 8).unwrap();
    let e = rss_program(&rss).unwrap_err();
    assert!(e.contains("rx.indirection"), "{e}");
    let many: Vec<_> = (0..MAX_PROGRAM_FILTERS + 50)
        .map(|i| (MacAddr([2, 0, 0, 0, (i >> 8) as u8, i as u8]), 1))
        .collect();
    assert!(mac_program(&many).len() <= MAX_INSNS);
}

#[test]
fn the_specifications_vector_steers_as_its_hash_says() {
    // Microsoft's first IPv4/TCP vector: 66.9.149.187:2794 -> 161.142.100.80:1766, hash
    // 0x51ccc178; a table of 128 entries sends it to entry 0x78 = 120.
    let mut addrs = [0u8; 32];
    addrs[..8].copy_from_slice(&[66, 9, 149, 187, 161, 142, 100, 80]);
    let f = frame(0, None, 6, 5, 0, &addrs, (2794, 1766), [2; 6]);
    let table: Vec<u16> = (0..128).collect();
    let rss = config(teamster_core::rx::MICROSOFT_KEY, [true; 6], table, 128);
    assert_eq!(run(&rss_program(&rss).unwrap(), &f), 0x51ccc178 % 128);
}

fn any_frame() -> impl Strategy<Value = Vec<u8>> {
    let tag = prop_oneof![Just(None), Just(Some(0x8100u16)), Just(Some(0x88a8u16))];
    let proto = prop_oneof![Just(6u8), Just(17u8), Just(1u8), Just(58u8), Just(47u8)];
    let frag = prop_oneof![
        Just(0u16),
        Just(0x4000u16),
        Just(0x2000u16),
        1u16..0x1fff,
        Just(0x2000u16 | 3)
    ];
    (
        0u8..3,
        tag,
        proto,
        5u8..=15,
        frag,
        any::<[u8; 32]>(),
        any::<(u16, u16)>(),
    )
        .prop_filter("not VXLAN", |t| t.6 .1 != 4789 && t.6 .0 != 4789)
        .prop_map(|(kind, tag, proto, ihl, frag, addrs, ports)| {
            frame(kind, tag, proto, ihl, frag, &addrs, ports, [2; 6])
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// The program picks the queue core::rx picks, whatever the frame, key, hash types and
    /// table.
    #[test]
    fn rss_program_picks_core_rx_queue(
        f in any_frame(),
        key in any::<[u8; 40]>(),
        types in any::<[bool; 6]>(),
        queues in 1usize..16,
        table in prop::collection::vec(any::<u16>(), 1..=MAX_LIVE_TABLE),
    ) {
        let table: Vec<u16> = table.iter().map(|q| q % queues as u16).collect();
        let rss = config(key, types, table, queues);
        let flow = parse(&f).unwrap();
        let program = rss_program(&rss).unwrap();
        prop_assert_eq!(run(&program, &f), u32::from(rss.queue(&flow)));
    }

    /// A frame goes to its destination MAC's filter's queue, else to queue 0.
    #[test]
    fn mac_program_picks_the_filters_queue(
        macs in prop::collection::vec(any::<[u8; 6]>(), 0..40),
        pick in any::<prop::sample::Index>(),
        stranger in any::<[u8; 6]>(),
    ) {
        let filters: Vec<(MacAddr, u16)> = macs.iter().enumerate().map(|(i, m)| (MacAddr(*m), (i % 5) as u16)).collect();
        let program = mac_program(&filters);
        let addrs = [1u8; 32];
        if !filters.is_empty() {
            let (mac, _) = filters[pick.index(filters.len())];
            let want = filters.iter().find(|f| f.0 == mac).unwrap().1;
            let f = frame(0, None, 6, 5, 0, &addrs, (1, 2), mac.0);
            prop_assert_eq!(run(&program, &f), u32::from(want));
        }
        if !filters.iter().any(|f| f.0 .0 == stranger) {
            let f = frame(1, None, 6, 5, 0, &addrs, (1, 2), stranger);
            prop_assert_eq!(run(&program, &f), 0);
        }
    }
}

/// The kernel's own classic BPF checker accepts every program (attached as a socket filter
/// to a UDP socket: the same checks as a fanout program, and no privilege needed).
#[test]
fn the_kernel_accepts_the_programs() {
    use std::os::fd::AsRawFd;
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let load = |program: &[sock_filter]| {
        let prog = libc::sock_fprog {
            len: program.len() as u16,
            filter: program.as_ptr() as *mut sock_filter,
        };
        // SAFETY: `prog` points at `program`, alive for the call, of the length given.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&prog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        assert_eq!(
            r,
            0,
            "{} instructions: {}",
            program.len(),
            std::io::Error::last_os_error()
        );
    };
    for (size, queues, udp) in [
        (1, 1, false),
        (128, 8, false),
        (128, 16, true),
        (MAX_LIVE_TABLE, 3, true),
    ] {
        let mut rss = RssConfig::new(queues).unwrap();
        rss.types.udp_ipv4 = udp;
        rss.types.udp_ipv6 = udp;
        rss.table = Indirection::round_robin(size, queues).unwrap();
        load(&rss_program(&rss).unwrap());
    }
    // A socket filter is charged to the socket's option memory (`optmem_max`), a fanout
    // program is not: the longest MAC program is left to the live tests and the length check.
    let filters: Vec<_> = (0..MAX_PROGRAM_FILTERS / 4)
        .map(|i| (MacAddr([2, 0, 0, 0, (i >> 8) as u8, i as u8]), 1 + (i % 3) as u16))
        .collect();
    load(&mac_program(&filters));
    load(&mac_program(&[]));
}

#[test]
fn a_short_frame_goes_to_the_default_queue() {
    let rss = RssConfig::new(4).unwrap();
    let program = rss_program(&rss).unwrap();
    let mut addrs = [0u8; 32];
    addrs[..8].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    let f = frame(0, None, 6, 5, 0, &addrs, (1000, 80), [2; 6]);
    for cut in [0, 13, 20, 33, 36] {
        assert_eq!(run(&program, &f[..cut]), 0, "cut at {cut}");
    }
}
