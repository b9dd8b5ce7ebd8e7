//! An overlay port group on a live uplink, against Linux's own VXLAN as the remote VTEP: the
//! VM's ping and TCP (its TSO super-frames cut and checksummed inside the tunnel) reach a host
//! behind a kernel `vxlan` device in another namespace, both ways; the switch answers ARP for
//! its VTEP address and finds the remote's by ARP; and a VTEP the group does not list cannot
//! put frames into the segment.

mod netns;
use netns::*;

use std::process::Command;

/// What the test built, removed by name when dropped. The VM (tmt-vm1, 10.99.0.1) is on port
/// tmt-v1; the uplink tmt-u1's far end is in tmt-remote's bridge, whose address 192.0.2.2 is
/// the remote VTEP (`vx0`, VNI 5001, to 192.0.2.1) carrying 10.99.0.2; tmt-phys, on the same
/// bridge, is a VTEP the overlay does not list (192.0.2.3, `vx1`, 10.99.0.3).
struct VxlanTopology;

impl VxlanTopology {
    fn up() -> VxlanTopology {
        VxlanTopology::clean();
        let t = VxlanTopology;
        must(&["ip", "netns", "add", "tmt-vm1"]);
        must(&["ip", "netns", "add", "tmt-remote"]);
        must(&[
            "ip", "link", "add", "tmt-v1", "type", "veth", "peer", "name", "eth0", "netns", "tmt-vm1",
        ]);
        must(&["ip", "link", "set", "tmt-v1", "up"]);
        let vm = |args: &[&str]| must(&[&["ip", "-n", "tmt-vm1"][..], args].concat());
        vm(&["link", "set", "eth0", "address", "02:00:00:00:00:01"]);
        // The overlay's MTU: 50 bytes under the underlay's, as with any VXLAN.
        vm(&["link", "set", "eth0", "mtu", "1450"]);
        vm(&["addr", "add", "10.99.0.1/24", "dev", "eth0"]);
        vm(&["link", "set", "eth0", "up"]);
        must(&["ip", "netns", "add", "tmt-phys"]);
        must(&[
            "ip",
            "link",
            "add",
            "tmt-u1",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            "tmt-remote",
        ]);
        must(&["ip", "link", "set", "tmt-u1", "up"]);
        // The underlay: a bridge in tmt-remote joins the uplink's far end and tmt-phys.
        let remote = |args: &[&str]| must(&[&["ip", "-n", "tmt-remote"][..], args].concat());
        remote(&["link", "add", "br0", "type", "bridge"]);
        remote(&["link", "set", "eth0", "master", "br0"]);
        remote(&[
            "link", "add", "r0", "type", "veth", "peer", "name", "eth0", "netns", "tmt-phys",
        ]);
        remote(&["link", "set", "r0", "master", "br0"]);
        for l in ["eth0", "r0", "br0"] {
            remote(&["link", "set", l, "up"]);
        }
        remote(&["addr", "add", "192.0.2.2/24", "dev", "br0"]);
        remote(&[
            "link",
            "add",
            "vx0",
            "type",
            "vxlan",
            "id",
            "5001",
            "local",
            "192.0.2.2",
            "remote",
            "192.0.2.1",
            "dstport",
            "4789",
            "dev",
            "br0",
        ]);
        remote(&["addr", "add", "10.99.0.2/24", "dev", "vx0"]);
        remote(&["link", "set", "vx0", "up"]);
        // A VTEP the overlay does not list (192.0.2.3, in tmt-phys), in the same VNI, with a
        // host of the same subnet behind it; brought up later.
        let phys = |args: &[&str]| must(&[&["ip", "-n", "tmt-phys"][..], args].concat());
        phys(&["addr", "add", "192.0.2.3/24", "dev", "eth0"]);
        phys(&["link", "set", "eth0", "up"]);
        phys(&[
            "link",
            "add",
            "vx1",
            "type",
            "vxlan",
            "id",
            "5001",
            "local",
            "192.0.2.3",
            "remote",
            "192.0.2.1",
            "dstport",
            "4789",
            "dev",
            "eth0",
        ]);
        phys(&["addr", "add", "10.99.0.3/24", "dev", "vx1"]);
        t
    }

    fn clean() {
        Topology::clean();
    }
}

impl Drop for VxlanTopology {
    fn drop(&mut self) {
        VxlanTopology::clean();
    }
}

const SWITCH: &str = r#"
[[uplinks]]
name = "uplink1"
interface = "tmt-u1"
capacity = "10G"

[[port_groups]]
name = "overlay"
policy = "port-id"
active = ["uplink1"]
[port_groups.overlay]
vni = 5001
local_vtep = "192.0.2.1"
remote_vteps = ["192.0.2.2"]

[[ports]]
name = "vm1"
interface = "tmt-v1"
mac = "02:00:00:00:00:01"
group = "overlay"
"#;

fn uplink_drop(status: &serde_json::Value, reason: &str) -> u64 {
    status["uplinks"][0]["counters"]["drops"][reason].as_u64().unwrap_or(0)
}

#[test]
fn an_overlay_group_talks_to_linux_vxlan_and_refuses_an_unlisted_vtep() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = VxlanTopology::up();
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, status_path) = start(dir.path(), SWITCH);

    // Ping across the tunnel: ARP for the VTEPs both ways, then the VM's ARP and echo inside.
    let pings = ping("tmt-vm1", "10.99.0.2", "5", "0.2");
    assert!(
        received(&pings) >= 4,
        "{pings}\n{}",
        counters_line(&status(&status_path))
    );

    // TCP both ways: the VM's TSO super-frames are cut at its MSS and checksummed in software
    // before they are wrapped; the kernel's frames are opened and delivered.
    for (way, reverse) in [("VM -> kernel VTEP", false), ("kernel VTEP -> VM", true)] {
        let mut server = Command::new("timeout")
            .args([
                "15",
                "ip",
                "netns",
                "exec",
                "tmt-remote",
                "iperf3",
                "-s",
                "-1",
                "-B",
                "10.99.0.2",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        await_listener("tmt-remote", 5201);
        let mut client = Command::new("timeout");
        client.args([
            "12",
            "ip",
            "netns",
            "exec",
            "tmt-vm1",
            "iperf3",
            "-c",
            "10.99.0.2",
            "-t",
            "2",
            "-J",
        ]);
        if reverse {
            client.arg("-R");
        }
        let out = client.output().unwrap();
        let _ = server.wait();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{way}: iperf3: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        let rate = report["end"]["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
        let retransmits = report["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
        assert!(
            rate > 20e6,
            "{way}: {rate} bit/s through the tunnel\n{}",
            counters_line(&status(&status_path))
        );
        println!("{way}: {:.0} Mbit/s, {retransmits} retransmits", rate / 1e6);
    }

    // Nothing was refused as a tunnel frame from the listed VTEP, and the status shows the
    // VTEP and the remote's MAC ARP found.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let before = status(&status_path);
    assert_eq!(uplink_drop(&before, "tunnel"), 0, "{}", counters_line(&before));
    let vtep = &before["vtep"];
    assert_eq!(vtep["address"], "192.0.2.1", "{vtep}");
    assert_eq!(vtep["remotes"][0]["address"], "192.0.2.2", "{vtep}");
    assert!(vtep["remotes"][0]["mac"].is_string(), "{vtep}");

    // The unlisted VTEP (192.0.2.3) sends into VNI 5001: its frames are dropped, counted.
    must(&["ip", "-n", "tmt-phys", "link", "set", "vx1", "up"]);
    let rogue = ping("tmt-phys", "10.99.0.1", "3", "0.2");
    assert_eq!(received(&rogue), 0, "the unlisted VTEP reached the VM: {rogue}");
    await_that("the unlisted VTEP's frames are counted as tunnel drops", || {
        uplink_drop(&status(&status_path), "tunnel") >= 1
    });
}
