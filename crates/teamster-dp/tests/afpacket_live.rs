//! AF_PACKET on a real veth pair (needs root; CI runs as root). Interfaces are made here and
//! removed by name when the test ends, whatever happens.

mod live;
use std::process::Command;
use std::time::{Duration, Instant};
use teamster_core::offload::{Gso, GsoKind, Offload, PartialChecksum};
use teamster_dp::afpacket::AfPacket;
use teamster_dp::pool::FramePool;
use teamster_dp::Device;

struct Veth(&'static str);

impl Veth {
    fn new(a: &'static str, b: &'static str) -> Option<Veth> {
        let _ = Command::new("ip").args(["link", "del", a]).output();
        let ok = Command::new("ip")
            .args(["link", "add", a, "type", "veth", "peer", "name", b])
            .status()
            .ok()?
            .success();
        if !ok {
            return None;
        }
        for dev in [a, b] {
            Command::new("ip").args(["link", "set", dev, "up"]).status().ok()?;
        }
        // Until the kernel's link watch has seen the carrier (operstate up), the device has no
        // queueing discipline and drops what is sent, silently: wait for it.
        let deadline = Instant::now() + Duration::from_secs(5);
        for dev in [a, b] {
            let path = format!("/sys/class/net/{dev}/operstate");
            while std::fs::read_to_string(&path).ok()?.trim() != "up" {
                if Instant::now() > deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Some(Veth(a))
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", self.0]).status();
    }
}

fn frame(vlan: Option<u16>, n: u8) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0xbb, 0x02, 0, 0, 0, 0, 0xaa];
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00, (v >> 8) as u8, v as u8]);
    }
    f.extend_from_slice(&[0x88, 0xb5]); // local experimental EtherType
    f.extend(std::iter::repeat_n(n, 60));
    f
}

#[test]
fn frames_cross_a_veth_pair_with_their_vlan_tags() {
    if !live::as_root() {
        return;
    }
    let _veth = Veth::new("tmtafa", "tmtafb").expect("create veth pair");
    let mut a = AfPacket::open("tmtafa").unwrap();
    let mut b = AfPacket::open("tmtafb").unwrap();
    let sent = [frame(None, 1), frame(Some(42), 2), frame(None, 3)];
    for f in &sent {
        a.send(f, Offload::NONE);
    }
    assert_eq!(a.flush(), 0);
    let bytes: usize = sent.iter().map(Vec::len).sum();
    assert_eq!(
        a.take_sent(),
        teamster_dp::TxTotals {
            packets: 3,
            bytes: bytes as u64
        },
        "what the device took is reported once"
    );
    assert_eq!(a.take_sent(), teamster_dp::TxTotals::default());
    let (mut got, mut echoed) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < sent.len() && Instant::now() < deadline {
        b.recv_batch(&mut FramePool::default(), &mut |f: teamster_dp::Frame| {
            let f = f.bytes;
            if f.len() >= 14 && f[12..14] != [0x86, 0xdd] && f[12..14] != [0x08, 0x06] {
                got.push(f);
            }
        });
        a.recv_batch(&mut FramePool::default(), &mut |f: teamster_dp::Frame| {
            let f = f.bytes;
            if f.len() >= 14 && (f[12..14] == [0x88, 0xb5] || f[16..18] == [0x88, 0xb5]) {
                echoed += 1;
            }
        });
        std::thread::sleep(Duration::from_millis(5));
    }
    let ours: Vec<&Vec<u8>> = got.iter().filter(|f| f[..6] == [0x02, 0, 0, 0, 0, 0xbb]).collect();
    assert_eq!(ours.len(), 3, "received {} of ours", ours.len());
    for (g, s) in ours.iter().zip(&sent) {
        assert_eq!(&g[..s.len()], &s[..], "frame (VLAN tag included) arrives as sent");
    }
    assert_eq!(echoed, 0, "a socket does not hear its own transmissions");
    assert_eq!(b.take_rx_drops(), teamster_dp::RxDrops::default());
    let missing = AfPacket::open("tmt-no-such").err().expect("no such interface");
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    assert!(missing.to_string().contains("tmt-no-such"), "{missing}");
}

/// An IPv4 TCP super-frame: 20-byte IP and TCP headers, `payload` bytes after them, with its
/// checksum left partial (the pseudo-header sum is not needed by anyone on this path).
fn super_frame(payload: usize) -> (Vec<u8>, Offload) {
    let mut f = vec![0x02, 0, 0, 0, 0, 0xbb, 0x02, 0, 0, 0, 0, 0xaa, 0x08, 0x00];
    let total = (40 + payload) as u16;
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 1, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&[10, 9, 0, 1, 10, 9, 0, 2]);
    let c = teamster_core::offload::internet_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&[
        0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    f.extend((0..payload).map(|i| (i % 251) as u8));
    let o = Offload {
        csum: Some(PartialChecksum { start: 34, offset: 16 }),
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1448,
            ecn: false,
        }),
    };
    assert_eq!(o.check(&f), Ok(()));
    (f, o)
}

#[test]
fn a_super_frame_crosses_a_veth_pair_whole_with_its_offload_request() {
    if !live::as_root() {
        return;
    }
    let _veth = Veth::new("tmtafsa", "tmtafsb").expect("create veth pair");
    let mut a = AfPacket::open("tmtafsa").unwrap();
    let mut b = AfPacket::open("tmtafsb").unwrap();
    assert!(a.takes_offloads());
    let (f, o) = super_frame(20_000);
    a.send(&f, o);
    assert_eq!(
        a.flush(),
        0,
        "the kernel takes a super-frame with its virtio-net header"
    );
    // 20,000 bytes in 1,448-byte segments: 14 segments of 54 bytes of headers each.
    assert_eq!(
        a.take_sent(),
        teamster_dp::TxTotals {
            packets: 14,
            bytes: (f.len() + 13 * 54) as u64
        },
        "counted as the segments it becomes on the wire"
    );
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.is_empty() && Instant::now() < deadline {
        b.recv_batch(&mut FramePool::default(), &mut |g: teamster_dp::Frame| {
            let (g, go) = (g.bytes, g.offload);
            if g.len() > 14 && g[12..14] == [0x08, 0x00] {
                got.push((g, go));
            }
        });
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(got.len(), 1, "one frame, not segments");
    assert_eq!(got[0].0, f, "the super-frame arrives as sent");
    assert_eq!(got[0].1.gso, o.gso, "with its segmentation request");
    assert_eq!(got[0].1.csum, o.csum, "and its partial checksum");
    // Without its header, the same frame is more than the MTU: the kernel refuses it, and the
    // refusal is counted as a drop, not lost.
    a.send(&f, Offload::NONE);
    assert_eq!(a.flush(), 1);
    assert_eq!(a.take_sent(), teamster_dp::TxTotals::default());
}

/// One call hands over a turn's worth of frames and leaves the rest in the socket for the
/// next, so the poll loop can serve the other interfaces in between.
#[test]
fn a_receive_call_takes_one_turn_of_frames_and_leaves_the_rest() {
    if !live::as_root() {
        return;
    }
    let _veth = Veth::new("tmtafta", "tmtaftb").expect("create veth pair");
    let mut a = AfPacket::open("tmtafta").unwrap();
    let mut b = AfPacket::open("tmtaftb").unwrap();
    let sent = 3 * teamster_dp::RX_TURN;
    for n in 0..sent {
        a.send(&frame(None, n as u8), Offload::NONE);
    }
    assert_eq!(a.flush(), 0);
    let ours = |f: &[u8]| f.len() >= 14 && f[12..14] == [0x88, 0xb5];
    // Wait until the socket holds them all: the first call must then stop at a turn.
    let mut calls = Vec::new();
    let mut order = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    std::thread::sleep(Duration::from_millis(50));
    while order.len() < sent && Instant::now() < deadline {
        let mut got = 0;
        b.recv_batch(&mut FramePool::default(), &mut |f: teamster_dp::Frame| {
            let f = f.bytes;
            if ours(&f) {
                order.push(f[14]);
                got += 1;
            }
        });
        if got > 0 {
            calls.push(got);
        }
    }
    assert_eq!(order.len(), sent, "every frame arrives");
    assert!(
        order.iter().enumerate().all(|(i, &n)| n == i as u8),
        "in order across calls"
    );
    assert!(
        calls.iter().all(|&c| c <= teamster_dp::RX_TURN + 32),
        "no call takes much more than a turn: {calls:?}"
    );
    assert!(calls.len() >= 3, "the frames took several calls: {calls:?}");
}

/// A fanout group steered by Teamster's programs: the kernel loads the longest ones (a fanout
/// program is not charged to socket memory, as a socket filter is), and a frame goes to the
/// member its destination MAC's filter names, in the order the members joined; no member
/// takes a frame another one took.
#[test]
fn a_fanout_group_steers_each_frame_to_one_queue_by_its_filter() {
    use teamster_core::rx::{Indirection, RssConfig};
    use teamster_core::wire::MacAddr;
    use teamster_dp::steer;
    if !live::as_root() {
        return;
    }
    let _veth = Veth::new("tmtfna", "tmtfnb").expect("create veth pair");
    let own = AfPacket::open("tmtfna").unwrap();
    let group = own.start_fanout().unwrap();
    let mut queues = vec![own];
    for _ in 1..3 {
        queues.push(AfPacket::open_queue("tmtfna", group).unwrap());
    }
    let mut rss = RssConfig::new(3).unwrap();
    rss.types.udp_ipv4 = true;
    rss.types.udp_ipv6 = true;
    rss.table = Indirection::round_robin(steer::MAX_LIVE_TABLE, 3).unwrap();
    queues[0].steer(&steer::rss_program(&rss).unwrap()).unwrap();
    // Frame n goes to 02:00:00:00:00:0n; filters send ...01 to queue 1 and ...02 to queue 2,
    // behind hundreds of others; ...03 has none (queue 0).
    let mut filters: Vec<(MacAddr, u16)> = (0..steer::MAX_PROGRAM_FILTERS - 2)
        .map(|i| (MacAddr([6, 0, 0, 0, (i >> 8) as u8, i as u8]), 1))
        .collect();
    filters.push((MacAddr([2, 0, 0, 0, 0, 1]), 1));
    filters.push((MacAddr([2, 0, 0, 0, 0, 2]), 2));
    queues[0].steer(&steer::mac_program(&filters)).unwrap();
    let mut sender = AfPacket::open("tmtfnb").unwrap();
    for round in 0..5u8 {
        for n in 1..=3u8 {
            let mut f = frame(None, round);
            f[..6].copy_from_slice(&[2, 0, 0, 0, 0, n]);
            sender.send(&f, Offload::NONE);
        }
    }
    assert_eq!(sender.flush(), 0);
    let mut got = vec![Vec::new(); 3];
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.iter().map(Vec::len).sum::<usize>() < 15 && Instant::now() < deadline {
        for (q, sock) in queues.iter_mut().enumerate() {
            sock.recv_batch(&mut FramePool::default(), &mut |f: teamster_dp::Frame| {
                let f = f.bytes;
                if f.len() >= 14 && f[12..14] == [0x88, 0xb5] {
                    got[q].push(f[5]);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(got, [vec![3; 5], vec![1; 5], vec![2; 5]], "frames by queue: {got:?}");
}
