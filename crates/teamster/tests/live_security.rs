//! Port security on the live switch, tried as a hostile VM would: VM1 sends ten ARP frames with
//! the remote host's MAC as their source (through a packet socket in its namespace), then VM2
//! pings the remote host while a packet socket in VM1 watches for frames meant for that host.
//! With forged transmits and MAC changes accepted the attack works (VM2's frames go to VM1, the
//! remote host's replies look reflected and are dropped); under the default policy (all
//! rejected) VM1's frames are dropped as `forged_transmit` and nothing changes. Topology and
//! helpers: [`netns`].

mod netns;
use netns::*;

use netns::raw::{mac_of, send_from, watch};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const FORGED_FRAMES: usize = 10;
const PINGS: usize = 5;

/// What the attack did: VM2's pings answered, frames for the remote host seen at VM1, and VM1's
/// `forged_transmit` drops.
struct Outcome {
    answered: usize,
    stolen: usize,
    forged_drops: u64,
}

/// Builds the topology, starts the switch with `security` on the port group, and runs the attack.
fn attack(security: &str) -> Outcome {
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let group = format!("policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]\n{security}");
    let (_daemon, status_path) = start(dir.path(), &switch_toml("", "1G", &group, "", "", ""));
    // VM2 knows the remote host (ARP), and the switch has learned it behind the uplinks.
    assert_eq!(received(&ping("tmt-vm2", "10.77.0.100", "2", "0.2")), 2);
    let remote = mac_of("tmt-remote", "eth0");

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch("tmt-vm1", remote, stop.clone());
    send_from("tmt-vm1", vec![raw::arp_reply_from(remote); FORGED_FRAMES]);
    let answered = received(&ping("tmt-vm2", "10.77.0.100", &PINGS.to_string(), "0.2"));
    stop.store(true, Ordering::Relaxed);
    let stolen = watcher.join().unwrap();
    let forged_drops = drops(&status_path, "ports", "vm1", "forged_transmit", FORGED_FRAMES as u64);
    if security.is_empty() {
        // VM1 itself is not cut off by its dropped frames.
        assert_eq!(received(&ping("tmt-vm1", "10.77.0.100", "2", "0.2")), 2);
    }
    Outcome {
        answered,
        stolen,
        forged_drops,
    }
}

#[test]
fn a_vm_cannot_steal_an_outside_hosts_mac() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    // The attack as it worked before port security, with the two checks accepted.
    let open = attack("security = { mac_changes = \"accept\", forged_transmits = \"accept\" }");
    assert_eq!(open.forged_drops, 0);
    assert!(
        open.answered == 0 && open.stolen >= 1,
        "with both accepted the attack should work: {} of {PINGS} pings answered, {} frames for \
         the remote host reached VM1",
        open.answered,
        open.stolen
    );
    // The default policy: forged transmits rejected.
    let safe = attack("");
    for (name, o) in [("accept both", &open), ("default", &safe)] {
        eprintln!(
            "{name}: {} of {PINGS} pings answered, {} frames for the remote host at VM1, {} forged drops",
            o.answered, o.stolen, o.forged_drops
        );
    }
    assert_eq!(
        safe.forged_drops, FORGED_FRAMES as u64,
        "each forged frame dropped and counted"
    );
    assert_eq!(safe.stolen, 0, "no frame for the remote host reached VM1");
    assert_eq!(safe.answered, PINGS, "the remote host stays reachable from VM2");
}
