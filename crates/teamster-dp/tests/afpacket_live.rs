//! AF_PACKET on a real veth pair (needs root; CI runs as root). Interfaces are made here and
//! removed by name when the test ends, whatever happens.

mod live;
use std::process::Command;
use std::time::{Duration, Instant};
use teamster_dp::afpacket::AfPacket;
use teamster_dp::Backend;

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
        a.send(f);
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
        b.recv_batch(&mut |f| {
            if f.len() >= 14 && f[12..14] != [0x86, 0xdd] && f[12..14] != [0x08, 0x06] {
                got.push(f.to_vec());
            }
        });
        a.recv_batch(&mut |f| {
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
