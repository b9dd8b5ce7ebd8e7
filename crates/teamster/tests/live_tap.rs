//! A VM on a tap device: the test holds the tap's file descriptor (as QEMU would) and speaks
//! ARP and ICMP through the switch to the remote host. Topology and helpers: [`netns`].

mod netns;
use netns::*;

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

const TAP_MAC: [u8; 6] = [2, 0, 0, 0, 0, 3];
const TAP_IP: [u8; 4] = [10, 77, 0, 3];
const REMOTE_IP: [u8; 4] = [10, 77, 0, 100];

/// Creates tap device `name` and returns the VM's end of it. The device lives as long as the
/// file (it is not persistent), and the carrier is up while the file is open.
fn open_tap(name: &str) -> File {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .expect("open /dev/net/tun");
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads an ifreq we own, for the duration of the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) };
    assert_eq!(rc, 0, "TUNSETIFF {name}: {}", std::io::Error::last_os_error());
    file
}

fn mac_of(ns: &str, dev: &str) -> [u8; 6] {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", &format!("/sys/class/net/{dev}/address")])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut mac = [0u8; 6];
    for (b, part) in mac.iter_mut().zip(text.trim().split(':')) {
        *b = u8::from_str_radix(part, 16).unwrap();
    }
    mac
}

fn echo_request(dst_mac: [u8; 6], seq: u16) -> Vec<u8> {
    let builder = etherparse::PacketBuilder::ethernet2(TAP_MAC, dst_mac)
        .ipv4(TAP_IP, REMOTE_IP, 64)
        .icmpv4_echo_request(0x7a7a, seq);
    let payload = [0x5a; 32];
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut frame, &payload).unwrap();
    frame
}

/// The ARP reply "TAP_IP is at TAP_MAC" to the asker of `request`, if `request` asks for TAP_IP.
fn arp_reply(request: &[u8]) -> Option<Vec<u8>> {
    let arp = request.get(14..42)?;
    let is_request = request[12..14] == [0x08, 0x06] && arp[6..8] == [0, 1];
    if !is_request || arp[24..28] != TAP_IP {
        return None;
    }
    let (asker_mac, asker_ip) = (&arp[8..14], &arp[14..18]);
    let mut reply = Vec::with_capacity(60);
    reply.extend_from_slice(asker_mac);
    reply.extend_from_slice(&TAP_MAC);
    reply.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2]);
    reply.extend_from_slice(&TAP_MAC);
    reply.extend_from_slice(&TAP_IP);
    reply.extend_from_slice(asker_mac);
    reply.extend_from_slice(asker_ip);
    reply.resize(60, 0);
    Some(reply)
}

/// True if `frame` is an ICMP echo reply from the remote host to the tap VM.
fn is_echo_reply(frame: &[u8]) -> bool {
    let Ok(p) = etherparse::SlicedPacket::from_ethernet(frame) else {
        return false;
    };
    let addressed = matches!(&p.net, Some(etherparse::NetSlice::Ipv4(ip))
        if ip.header().source() == REMOTE_IP && ip.header().destination() == TAP_IP);
    let reply = matches!(&p.transport, Some(etherparse::TransportSlice::Icmpv4(icmp))
        if matches!(icmp.icmp_type(), etherparse::Icmpv4Type::EchoReply(h) if h.id == 0x7a7a));
    addressed && reply
}

const SWITCH_WITH_TAP: &str = r#"
[[uplinks]]
name = "uplink1"
interface = "tmt-u1"
capacity = "1G"

[[uplinks]]
name = "uplink2"
interface = "tmt-u2"
capacity = "1G"

[[port_groups]]
name = "vms"
policy = "port-id"
active = ["uplink1", "uplink2"]

[[ports]]
name = "vm1"
interface = "tmt-v1"
mac = "02:00:00:00:00:01"
group = "vms"

[[ports]]
name = "vm3"
interface = "tmt-t1"
mac = "02:00:00:00:00:03"
group = "vms"
"#;

#[test]
fn a_vm_on_a_tap_device_reaches_the_remote_host() {
    let _one_at_a_time = netns::lock();
    if !ready() || !skip_unless(std::path::Path::new("/dev/net/tun").exists(), "/dev/net/tun") {
        return;
    }
    let _topology = Topology::up();
    let mut tap = open_tap("tmt-t1");
    must(&["ip", "link", "set", "tmt-t1", "up"]);
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, status_path) = start(dir.path(), SWITCH_WITH_TAP);
    assert_eq!(received(&ping("tmt-vm1", "10.77.0.100", "2", "0.2")), 2);

    // The VM pings the remote host; the remote's ARP request for the VM is flooded to the tap
    // and answered, and its echo reply comes back to the tap.
    let remote_mac = mac_of("tmt-remote", "eth0");
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut seq, mut last_sent) = (0u16, Instant::now() - Duration::from_secs(1));
    let (mut arp_answered, mut replies) = (0, 0);
    let mut buf = [0u8; 2048];
    while replies < 3 && Instant::now() < deadline {
        if last_sent.elapsed() >= Duration::from_millis(200) {
            seq += 1;
            tap.write_all(&echo_request(remote_mac, seq)).unwrap();
            last_sent = Instant::now();
        }
        match tap.read(&mut buf) {
            Ok(n) => {
                if let Some(reply) = arp_reply(&buf[..n]) {
                    tap.write_all(&reply).unwrap();
                    arp_answered += 1;
                } else if is_echo_reply(&buf[..n]) {
                    replies += 1;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => panic!("tap read: {e}"),
        }
    }
    eprintln!("tap VM: {seq} echo requests, {replies} replies, {arp_answered} ARP requests answered");
    assert!(
        replies >= 3,
        "only {replies} echo replies of {seq} requests reached the tap"
    );
    assert!(arp_answered >= 1, "the remote's ARP request was not flooded to the tap");

    std::thread::sleep(Duration::from_millis(1200)); // the status file is rewritten every second
    let s = status(&status_path);
    let vm3 = s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["interface"] == "tmt-t1")
        .unwrap();
    assert!(vm3["counters"]["rx_packets"].as_u64().unwrap() >= 3, "{vm3}");
    assert!(vm3["counters"]["tx_packets"].as_u64().unwrap() >= 3, "{vm3}");
}
