//! AF_XDP on real veth pairs (needs root; CI runs as root). Each test makes its own veth pair
//! with names no other test uses, inside a network namespace of its own name for the far end
//! where one is needed, and removes both by name when it ends, whatever happens.

mod live;
use std::process::Command;
use std::time::{Duration, Instant};
use teamster_core::offload::Offload;
use teamster_dp::afpacket::AfPacket;
use teamster_dp::afxdp::{AfXdp, AttachMode};
use teamster_dp::pool::FramePool;
use teamster_dp::{Device, RxDrops, TxTotals};

/// A veth pair `a`/`b` (both up), deleted by name on drop; `extra` goes on `ip link add`.
struct Veth(&'static str);

impl Veth {
    fn new(a: &'static str, b: &'static str, extra: &[&str]) -> Veth {
        let _ = Command::new("ip").args(["link", "del", a]).output();
        let ok = Command::new("ip")
            .args(["link", "add", a])
            .args(extra)
            .args(["type", "veth", "peer", "name", b])
            .status()
            .expect("run ip")
            .success();
        assert!(ok, "create veth pair {a}/{b}");
        let veth = Veth(a);
        for dev in [a, b] {
            ip(&["link", "set", dev, "up"]);
        }
        // Frames sent before both ends are operationally up are dropped by the kernel.
        let deadline = Instant::now() + Duration::from_secs(3);
        let up =
            |d: &str| std::fs::read_to_string(format!("/sys/class/net/{d}/operstate")).is_ok_and(|s| s.trim() == "up");
        while !(up(a) && up(b)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        veth
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", self.0]).status();
    }
}

/// A network namespace, deleted by name on drop.
struct Netns(&'static str);

impl Netns {
    fn new(name: &'static str) -> Netns {
        let _ = Command::new("ip").args(["netns", "del", name]).output();
        ip(&["netns", "add", name]);
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", self.0]).status();
    }
}

/// Whether `dev` has an XDP program attached, as `ip -d link` shows it.
fn has_xdp(dev: &str) -> bool {
    let out = Command::new("ip")
        .args(["-d", "link", "show", "dev", dev])
        .output()
        .expect("run ip");
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

fn ip(args: &[&str]) {
    let ok = Command::new("ip").args(args).status().expect("run ip").success();
    assert!(ok, "ip {args:?}");
}

/// An XDP-visible test frame: unicast between two local MACs, experimental EtherType, `len`
/// bytes, payload byte `n`.
fn frame(n: u8, len: usize) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0xbb, 0x02, 0, 0, 0, 0, 0xaa, 0x88, 0xb5];
    f.resize(len, n);
    f
}

fn ours(f: &[u8]) -> bool {
    f.len() >= 14 && f[12..14] == [0x88, 0xb5]
}

/// Receives on `rx` (kicking `tx`) until `want` of our frames arrived or 3 s passed.
fn collect(rx: &mut dyn Device, tx: &mut dyn Device, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < want && Instant::now() < deadline {
        tx.flush();
        rx.recv_batch(&mut FramePool::default(), &mut |f: teamster_dp::Frame| {
            let f = f.bytes;
            if ours(&f) {
                got.push(f);
            }
        });
        std::thread::sleep(Duration::from_millis(2));
    }
    got
}

#[test]
fn frames_cross_an_af_xdp_socket_both_ways_intact_and_counted() {
    if !live::as_root() {
        return;
    }
    let _veth = Veth::new("tmtxa", "tmtxb", &[]);
    let mut x = AfXdp::open("tmtxa").expect("AF_XDP on a veth");
    assert!(has_xdp("tmtxa"), "the program is attached while the backend lives");
    // veth: native XDP, and no zero-copy (the kernel falls back to copy mode).
    assert_eq!(x.attach_mode(), AttachMode::Native, "{}", x.mode());
    assert!(!x.zero_copy(), "{}", x.mode());
    let mut p = AfPacket::open("tmtxb").unwrap();
    // Out through AF_XDP: sizes from the minimum to a full 1500-byte MTU frame, more than one
    // transmit batch and more than one ring kick (copy mode sends 32 per call).
    let sent: Vec<Vec<u8>> = (0..300).map(|i| frame(i as u8, 60 + (i * 97) % 1455)).collect();
    for f in &sent {
        x.send(f, Offload::NONE);
    }
    assert_eq!(x.flush(), 0);
    let got = collect(&mut p, &mut x, sent.len());
    assert_eq!(got.len(), sent.len(), "every frame sent through AF_XDP arrives");
    assert_eq!(got, sent, "intact and in order");
    let bytes: usize = sent.iter().map(Vec::len).sum();
    assert_eq!(
        x.take_sent(),
        TxTotals {
            packets: 300,
            bytes: bytes as u64
        }
    );
    assert_eq!(x.take_sent(), TxTotals::default(), "reported once");
    assert_eq!(x.tx_pending(), 0);
    // In through AF_XDP: the program redirects what the peer sends.
    let back: Vec<Vec<u8>> = (0..200).map(|i| frame(i as u8, 1514 - i)).collect();
    for f in &back {
        p.send(f, Offload::NONE);
    }
    let got = collect(&mut x, &mut p, back.len());
    assert_eq!(got, back, "every frame the peer sent arrives through AF_XDP, intact");
    assert_eq!(x.take_rx_drops(), RxDrops::default());
    assert_eq!(x.ring_drops(), 0);
    drop(x);
    assert!(!has_xdp("tmtxa"), "dropping the backend detaches the program");
}

/// Several times more frames than the transmit ring and UMEM hold, in bursts: frames are
/// reused as the kernel completes them, and every one arrives.
#[test]
fn more_frames_than_the_rings_hold_keep_flowing() {
    if !live::as_root() {
        return;
    }
    let _veth = Veth::new("tmtxma", "tmtxmb", &[]);
    let mut x = AfXdp::open("tmtxma").unwrap();
    let mut p = AfPacket::open("tmtxmb").unwrap();
    let (mut sent, mut got, mut dropped) = (0u64, 0usize, 0usize);
    for burst in 0..20 {
        for i in 0..500 {
            x.send(&frame((burst * 7 + i) as u8, 60), Offload::NONE);
        }
        dropped += x.flush();
        sent += 500;
        got += collect(&mut p, &mut x, 500).len();
    }
    assert_eq!(dropped, 0);
    assert_eq!(got as u64, sent, "every frame arrives");
    assert_eq!(x.take_sent().packets, sent);
    assert_eq!(x.tx_pending(), 0);
}

/// While the interface is down the kernel takes nothing: frames stay queued (`tx_pending`, so
/// an uplink's scheduler holds back) and go out when it is up again.
#[test]
fn frames_wait_while_the_interface_is_down() {
    if !live::as_root() {
        return;
    }
    let _veth = Veth::new("tmtxda", "tmtxdb", &[]);
    let mut x = AfXdp::open("tmtxda").unwrap();
    let mut p = AfPacket::open("tmtxdb").unwrap();
    ip(&["link", "set", "tmtxda", "down"]);
    for i in 0..10 {
        x.send(&frame(i, 100), Offload::NONE);
    }
    assert_eq!(x.flush(), 0, "nothing dropped");
    assert_eq!(x.tx_pending(), 10, "held while down");
    assert_eq!(x.take_sent(), TxTotals::default());
    ip(&["link", "set", "tmtxda", "up"]);
    let got = collect(&mut p, &mut x, 10);
    assert_eq!(got.len(), 10, "sent once up");
    assert_eq!(x.tx_pending(), 0);
    assert_eq!(x.take_sent().packets, 10);
}

/// A frame a local stack sent with its checksum left to offload (veth's default) leaves the
/// AF_XDP backend with a complete, valid checksum.
#[test]
fn checksums_left_to_offload_are_completed() {
    if !live::as_root() {
        return;
    }
    let _ns = Netns::new("tmtxcs");
    let _veth = Veth::new("tmtxca", "tmtxcb", &[]);
    ip(&["link", "set", "tmtxcb", "netns", "tmtxcs"]);
    ip(&["-n", "tmtxcs", "addr", "add", "198.18.9.1/24", "dev", "tmtxcb"]);
    ip(&["-n", "tmtxcs", "link", "set", "tmtxcb", "up"]);
    ip(&[
        "-n",
        "tmtxcs",
        "neigh",
        "add",
        "198.18.9.2",
        "lladdr",
        "02:00:00:00:00:09",
        "dev",
        "tmtxcb",
    ]);
    let mut x = AfXdp::open("tmtxca").unwrap();
    // UDP from the namespace's stack, with tx checksum offload on (as veth starts).
    let send = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
                [s.sendto(bytes(range(n % 200 + 1)), ('198.18.9.2', 9999)) for n in range(20)]";
    let ok = Command::new("ip")
        .args(["netns", "exec", "tmtxcs", "python3", "-c", send])
        .status()
        .expect("run python3")
        .success();
    assert!(ok, "send UDP from the namespace");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < 20 && Instant::now() < deadline {
        x.recv_batch(&mut FramePool::default(), &mut |f: teamster_dp::Frame| {
            let f = f.bytes;
            if f.len() > 42 && f[12..14] == [0x08, 0x00] && f[23] == 17 {
                got.push(f);
            }
        });
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(got.len(), 20, "every datagram arrives");
    for f in &got {
        let mut check = f.clone();
        assert!(teamster_core::offload::fill_l4_checksum(&mut check));
        assert_eq!(&check, f, "the UDP checksum is already complete");
        assert_ne!(f[40..42], [0, 0], "and not left out");
    }
}

/// What AF_XDP cannot carry is refused with the interface named, and leaves no program behind.
#[test]
fn interfaces_it_cannot_carry_are_refused_clearly() {
    if !live::as_root() {
        return;
    }
    let _veth = Veth::new("tmtxra", "tmtxrb", &[]);
    ip(&["link", "set", "tmtxra", "mtu", "9000"]);
    let e = AfXdp::open("tmtxra").err().expect("a jumbo MTU is refused");
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
    let text = e.to_string();
    assert!(
        text.starts_with("tmtxra: MTU 9000 is more than one AF_XDP frame holds"),
        "{text}"
    );
    assert!(text.contains("af_packet"), "{text}");
    assert!(!has_xdp("tmtxra"));
    let _multi = Veth::new("tmtxqa", "tmtxqb", &["numrxqueues", "2", "numtxqueues", "2"]);
    let e = AfXdp::open("tmtxqa").err().expect("a second receive queue is refused");
    assert!(
        e.to_string()
            .starts_with("tmtxqa: 2 receive queues; AF_XDP binds queue 0 only"),
        "{e}"
    );
    assert!(!has_xdp("tmtxqa"));
    let e = AfXdp::open("tmtx-none").err().expect("no such interface");
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert!(e.to_string().contains("tmtx-none"), "{e}");
}

/// A second backend on an interface that has a program is refused, naming the interface; once
/// the first is dropped, the interface is free again.
#[test]
fn an_interface_with_a_program_is_refused_until_it_is_gone() {
    if !live::as_root() {
        return;
    }
    let _veth = Veth::new("tmtxba", "tmtxbb", &[]);
    let first = AfXdp::open("tmtxba").unwrap();
    let e = AfXdp::open("tmtxba").err().expect("a second program is refused");
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    assert!(e.to_string().starts_with("tmtxba: already has an AF_XDP socket"), "{e}");
    assert!(has_xdp("tmtxba"), "the first program stays");
    drop(first);
    assert!(!has_xdp("tmtxba"));
    AfXdp::open("tmtxba").expect("free again");
}

/// The child half of the next test: holds an AF_XDP backend on the interface named in
/// `TMTX_CHILD` until it is killed. Does nothing in a normal test run.
#[test]
fn child_holding_a_backend() {
    let Ok(dev) = std::env::var("TMTX_CHILD") else {
        return;
    };
    let _x = AfXdp::open(&dev).expect("child: open");
    println!("ready");
    std::thread::sleep(Duration::from_secs(30));
}

/// A process killed outright (SIGKILL, so no destructor runs) leaves no program behind: the
/// program hangs on a BPF link that the kernel drops with the process's descriptors, so the
/// next instance attaches at once.
#[test]
fn a_killed_process_leaves_no_program_behind() {
    if !live::as_root() {
        return;
    }
    use std::io::BufRead;
    let _veth = Veth::new("tmtxka", "tmtxkb", &[]);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holding_a_backend",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("TMTX_CHILD", "tmtxka")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the child");
    let out = child.stdout.take().unwrap();
    let ready = std::io::BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.trim().ends_with("ready"));
    assert!(ready, "the child attached");
    assert!(has_xdp("tmtxka"));
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel releases the link when the process's descriptors close, which is done by the
    // time wait() returns; allow a moment for deferred release all the same.
    let deadline = Instant::now() + Duration::from_secs(2);
    while has_xdp("tmtxka") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!has_xdp("tmtxka"), "no program left by the killed process");
    AfXdp::open("tmtxka").expect("a new instance attaches");
}
