//! VLAN tagging on a live trunk: a port group on VLAN 100 tags what its VM sends on the uplink and
//! untags what comes back. This kernel has neither 802.1Q interfaces nor a VLAN-filtering
//! bridge, so the test itself plays the tagged physical network: it holds a packet socket on the
//! far end of the uplink's veth pair and answers the VM's ARP and ping with tagged frames.

mod netns;
use netns::*;

use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice, VlanId};
use std::time::{Duration, Instant};
use teamster_core::offload::Offload;
use teamster_dp::afpacket::AfPacket;
use teamster_dp::Device;

const VM_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const VM_IP: [u8; 4] = [10, 77, 0, 1];
const REMOTE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x64];
const REMOTE_IP: [u8; 4] = [10, 77, 0, 100];

/// What the test built, removed by name when dropped.
struct VlanTopology;

impl VlanTopology {
    fn up() -> VlanTopology {
        VlanTopology::clean();
        let t = VlanTopology;
        must(&["ip", "netns", "add", "tmt-vm1"]);
        must(&[
            "ip", "link", "add", "tmt-v1", "type", "veth", "peer", "name", "eth0", "netns", "tmt-vm1",
        ]);
        must(&["ip", "link", "set", "tmt-v1", "up"]);
        must(&[
            "ip",
            "-n",
            "tmt-vm1",
            "link",
            "set",
            "eth0",
            "address",
            "02:00:00:00:00:01",
        ]);
        must(&["ip", "-n", "tmt-vm1", "addr", "add", "10.77.0.1/24", "dev", "eth0"]);
        must(&["ip", "-n", "tmt-vm1", "link", "set", "eth0", "up"]);
        must(&["ip", "link", "add", "tmt-u1", "type", "veth", "peer", "name", "tmt-p1"]);
        must(&["ip", "link", "set", "tmt-u1", "up"]);
        must(&["ip", "link", "set", "tmt-p1", "up"]);
        t
    }

    fn clean() {
        Topology::clean();
        sh(&["ip", "link", "del", "tmt-p1"]);
    }
}

impl Drop for VlanTopology {
    fn drop(&mut self) {
        VlanTopology::clean();
    }
}

const SWITCH: &str = r#"
[[uplinks]]
name = "uplink1"
interface = "tmt-u1"
capacity = "1G"

[[port_groups]]
name = "vlan100"
policy = "port-id"
active = ["uplink1"]
vlan = 100

[[ports]]
name = "vm1"
interface = "tmt-v1"
mac = "02:00:00:00:00:01"
group = "vlan100"
"#;

/// The physical network's answer to a frame from the VM, tagged with VLAN 100: an ARP reply for
/// REMOTE_IP, or an echo reply. Panics if a frame from the VM was not tagged 100. (The host's
/// own stack also sends on the uplink interface, untagged: those frames are not the switch's.)
fn answer(frame: &[u8]) -> Option<Vec<u8>> {
    if frame.get(6..12)? != VM_MAC {
        return None;
    }
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let tag = match &p.link_exts.first() {
        Some(etherparse::LinkExtSlice::Vlan(v)) => v.vlan_identifier().value(),
        _ => panic!("untagged frame on the VLAN 100 trunk: {frame:02x?}"),
    };
    assert_eq!(tag, 100, "frame tagged {tag}, not 100");
    let tagged = PacketBuilder::ethernet2(REMOTE_MAC, VM_MAC).single_vlan(VlanId::try_new(100).unwrap());
    if let Some(NetSlice::Arp(arp)) = &p.net {
        if arp.operation() == etherparse::ArpOperation::REQUEST && arp.target_protocol_addr() == REMOTE_IP {
            let mut reply = Vec::with_capacity(64);
            reply.extend_from_slice(&VM_MAC);
            reply.extend_from_slice(&REMOTE_MAC);
            reply.extend_from_slice(&[0x81, 0x00, 0x00, 100, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2]);
            reply.extend_from_slice(&REMOTE_MAC);
            reply.extend_from_slice(&REMOTE_IP);
            reply.extend_from_slice(&VM_MAC);
            reply.extend_from_slice(&VM_IP);
            reply.resize(64, 0);
            return Some(reply);
        }
    }
    if let Some(TransportSlice::Icmpv4(icmp)) = &p.transport {
        if let etherparse::Icmpv4Type::EchoRequest(h) = icmp.icmp_type() {
            let builder = tagged.ipv4(REMOTE_IP, VM_IP, 64).icmpv4_echo_reply(h.id, h.seq);
            let mut reply = Vec::new();
            builder.write(&mut reply, icmp.payload()).unwrap();
            return Some(reply);
        }
    }
    None
}

#[test]
fn a_vlan_port_group_is_tagged_on_the_uplink_and_untagged_to_the_vm() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = VlanTopology::up();
    let mut network = AfPacket::open("tmt-p1").expect("packet socket on tmt-p1");
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, status_path) = start(dir.path(), SWITCH);

    // The VM pings the "remote host"; the network answers whatever arrives tagged 100.
    let pinger = std::thread::spawn(|| ping("tmt-vm1", "10.77.0.100", "3", "0.2"));
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut answered = 0;
    let mut pool = teamster_dp::pool::FramePool::default();
    while !pinger.is_finished() && Instant::now() < deadline {
        let mut replies = Vec::new();
        network.recv_batch(&mut pool, &mut |frame| replies.extend(answer(&frame.bytes)));
        for r in replies {
            network.send(&r, Offload::NONE);
            answered += 1;
        }
        network.flush();
        std::thread::sleep(Duration::from_millis(1));
    }
    let pings = pinger.join().unwrap();
    assert_eq!(received(&pings), 3, "{pings}");
    assert!(answered >= 4, "only {answered} tagged frames answered (ARP + 3 pings)");

    // An untagged frame on the trunk belongs to no port group here: dropped and counted.
    let stray = PacketBuilder::ethernet2(REMOTE_MAC, VM_MAC)
        .ipv4(REMOTE_IP, VM_IP, 64)
        .icmpv4_echo_request(1, 1);
    let mut frame = Vec::new();
    stray.write(&mut frame, &[0; 16]).unwrap();
    network.send(&frame, Offload::NONE);
    network.flush();
    std::thread::sleep(Duration::from_millis(1200)); // the status file is rewritten every second
    let s = status(&status_path);
    let uplink = &s["uplinks"][0]["counters"];
    assert!(uplink["drops"]["unknown_vlan"].as_u64().unwrap() >= 1, "{uplink}");
    let vm1 = &s["ports"][0]["counters"];
    assert!(vm1["tx_packets"].as_u64().unwrap() >= 4, "{vm1}");
}
