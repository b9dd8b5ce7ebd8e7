//! Link-control frames on the live switch, sent as a hostile VM and a physical switch send
//! them (hand-built frames on a packet socket in their namespaces): a VM's STP and TCN BPDUs,
//! PVST+ BPDUs, 802.3x PAUSE, PFC, EAPOL and LLDP must reach neither the physical switch's side
//! of the uplinks nor the other VM, each dropped and counted as `link_control`; the physical
//! switch's BPDUs and LLDP must reach no VM, unless the VM's group asks for LLDP
//! (`security = { link_local = ["lldp"] }`), whose ports then get LLDP and nothing else.
//! Topology and helpers: [`netns`].

mod netns;
use netns::raw::{capture, send_on};
use netns::*;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How many of each kind are sent.
const EACH: usize = 5;
/// VM1's MAC (its namespace's eth0).
const VM1: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// The physical switch's MAC, as its link-control frames carry it.
const NEIGHBOUR: [u8; 6] = [0x0a, 0, 0, 0, 0, 0x42];

fn frame(dst: [u8; 6], src: [u8; 6], et: u16, body: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(body);
    f.resize(f.len().max(60), 0);
    f
}

/// A configuration BPDU (802.1D), with LLC, claiming root with priority 0.
fn stp(src: [u8; 6]) -> Vec<u8> {
    let mut b = vec![0x42, 0x42, 0x03, 0, 0, 0, 0x00, 0x00];
    b.extend_from_slice(&[0, 0]); // root priority 0: the best root there is
    b.extend_from_slice(&src);
    b.extend_from_slice(&[0, 0, 0, 0]); // path cost
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&src);
    b.extend_from_slice(&[0x80, 0x01, 0, 0, 0x14, 0, 0x02, 0, 0x0f, 0]);
    frame([0x01, 0x80, 0xc2, 0, 0, 0], src, b.len() as u16, &b)
}

/// A Topology Change Notification BPDU.
fn tcn(src: [u8; 6]) -> Vec<u8> {
    let b = [0x42, 0x42, 0x03, 0, 0, 0, 0x80];
    frame([0x01, 0x80, 0xc2, 0, 0, 0], src, b.len() as u16, &b)
}

/// A Cisco PVST+ BPDU (SNAP, to the SSTP address), with its VLAN TLV.
fn pvst(src: [u8; 6]) -> Vec<u8> {
    let mut b = vec![0xaa, 0xaa, 0x03, 0x00, 0x00, 0x0c, 0x01, 0x0b];
    b.extend_from_slice(&stp(src)[17..52]);
    b.extend_from_slice(&[0, 0, 0, 2, 0, 1]);
    frame([0x01, 0x00, 0x0c, 0xcc, 0xcc, 0xcd], src, b.len() as u16, &b)
}

/// An 802.3x PAUSE for the longest time there is.
fn pause(src: [u8; 6]) -> Vec<u8> {
    frame([0x01, 0x80, 0xc2, 0, 0, 1], src, 0x8808, &[0x00, 0x01, 0xff, 0xff])
}

/// An 802.1Qbb PFC frame pausing all eight priorities.
fn pfc(src: [u8; 6]) -> Vec<u8> {
    let mut b = vec![0x01, 0x01, 0x00, 0xff];
    b.extend_from_slice(&[0xff; 16]);
    frame([0x01, 0x80, 0xc2, 0, 0, 1], src, 0x8808, &b)
}

/// An 802.1X EAPOL-Start.
fn eapol(src: [u8; 6]) -> Vec<u8> {
    frame([0x01, 0x80, 0xc2, 0, 0, 3], src, 0x888e, &[0x01, 0x01, 0x00, 0x00])
}

/// An LLDPDU: chassis and port ID (MAC subtypes), TTL 120 s, end.
fn lldp(src: [u8; 6]) -> Vec<u8> {
    let mut b = vec![0x02, 0x07, 0x04];
    b.extend_from_slice(&src);
    b.extend_from_slice(&[0x04, 0x07, 0x03]);
    b.extend_from_slice(&src);
    b.extend_from_slice(&[0x06, 0x02, 0x00, 0x78, 0x00, 0x00]);
    frame([0x01, 0x80, 0xc2, 0, 0, 0x0e], src, 0x88cc, &b)
}

/// The seven kinds, `EACH` of each, from `src`.
fn every_kind(src: [u8; 6]) -> Vec<Vec<u8>> {
    let kinds: [fn([u8; 6]) -> Vec<u8>; 7] = [stp, tcn, pvst, pause, pfc, eapol, lldp];
    kinds.iter().flat_map(|k| std::iter::repeat_n(k(src), EACH)).collect()
}

/// Link-control frames from `src` (to 802.1D's reserved block or to PVST+'s address) seen
/// arriving at each of `(namespace, interface)` while `act` runs (with a moment after it for
/// stragglers). Only those: the VM's own stack may send a neighbour solicitation meanwhile.
fn seen_from(src: [u8; 6], at: &[(&str, &str)], act: impl FnOnce()) -> Vec<Vec<Vec<u8>>> {
    let stop = Arc::new(AtomicBool::new(false));
    let link_control = move |f: &[u8]| {
        f.len() >= 14
            && f[6..12] == src
            && (f[0..5] == [0x01, 0x80, 0xc2, 0, 0] || f[0..6] == [0x01, 0x00, 0x0c, 0xcc, 0xcc, 0xcd])
    };
    let watchers: Vec<_> = at
        .iter()
        .map(|(ns, dev)| capture(ns, dev, link_control, stop.clone()))
        .collect();
    act();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    watchers.into_iter().map(|w| w.join().unwrap()).collect()
}

/// The switch on the shared topology, its group `vms` (port-ID over both uplinks) with
/// `security`.
fn switch(dir: &std::path::Path, security: &str) -> (Daemon, std::path::PathBuf) {
    let group = format!("policy = \"port-id\"\nactive = [\"uplink1\", \"uplink2\"]\n{security}");
    let started = start(dir, &switch_toml("", "1G", &group, "", "", ""));
    // Both VMs attached and switching (VM2's ARP reaches the remote host through VM1's uplink).
    assert!(reaches_remote("tmt-vm1") && reaches_remote("tmt-vm2"));
    started
}

#[test]
fn a_vms_link_control_frames_reach_neither_the_physical_switch_nor_another_vm() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::up();
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, status_path) = switch(dir.path(), "");
    let sent = every_kind(VM1);
    let n = sent.len();
    let seen = seen_from(
        VM1,
        &[("tmt-phys", "p1"), ("tmt-phys", "p2"), ("tmt-vm2", "eth0")],
        || send_on("tmt-vm1", "eth0", sent, Duration::from_millis(2)),
    );
    let (physical, vm2) = (seen[0].len() + seen[1].len(), seen[2].len());
    let counted = drops(&status_path, "ports", "vm1", "link_control", n as u64);
    eprintln!(
        "{n} link-control frames from VM1: {physical} reached the physical switch, {vm2} reached VM2, \
         {counted} counted as link_control\n{}",
        counters_line(&status(&status_path))
    );
    assert_eq!(physical, 0, "frames crossed to the physical switch");
    assert_eq!(vm2, 0, "frames crossed to VM2");
    assert_eq!(counted, n as u64, "each frame dropped and counted");
    // VM1 still reaches the remote host: only the link-control frames were dropped.
    assert!(reaches_remote("tmt-vm1"));
}

#[test]
fn the_physical_switchs_link_control_frames_reach_a_vm_only_as_lldp_it_asked_for() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let vms = [("tmt-vm1", "eth0"), ("tmt-vm2", "eth0")];
    let lldp_frames = every_kind(NEIGHBOUR)
        .into_iter()
        .filter(|f| f[12..14] == [0x88, 0xcc])
        .count();
    for (security, want_lldp) in [("", 0), ("security = { link_local = [\"lldp\"] }", EACH)] {
        let _topology = Topology::up();
        let dir = tempfile::tempdir().unwrap();
        let (_daemon, status_path) = switch(dir.path(), security);
        let sent = every_kind(NEIGHBOUR);
        let n = sent.len();
        // From the physical switch's port facing uplink1.
        let seen = seen_from(NEIGHBOUR, &vms, || {
            send_on("tmt-phys", "p1", sent, Duration::from_millis(2))
        });
        let not_lldp = |v: &Vec<Vec<u8>>| v.iter().filter(|f| f[12..14] != [0x88, 0xcc]).count();
        let lldp_in = |v: &Vec<Vec<u8>>| v.iter().filter(|f| f[12..14] == [0x88, 0xcc]).count();
        let dropped = if want_lldp > 0 { n - lldp_frames } else { n };
        let counted = drops(&status_path, "uplinks", "uplink1", "link_control", dropped as u64);
        eprintln!(
            "`{security}`: {n} link-control frames from the physical switch: VM1 got {} ({} LLDP), VM2 \
             got {} ({} LLDP); {counted} counted as link_control",
            seen[0].len(),
            lldp_in(&seen[0]),
            seen[1].len(),
            lldp_in(&seen[1]),
        );
        for (vm, got) in vms.iter().zip(&seen) {
            assert_eq!(not_lldp(got), 0, "{}: non-LLDP link-control frames reached it", vm.0);
            assert_eq!(lldp_in(got), want_lldp, "{}: LLDP frames", vm.0);
        }
        assert_eq!(counted, dropped as u64, "each frame not delivered dropped and counted");
        if want_lldp > 0 {
            // What the monitoring VMs send stays on the switch.
            let back = seen_from(VM1, &[("tmt-phys", "p1"), ("tmt-phys", "p2")], || {
                send_on("tmt-vm1", "eth0", vec![lldp(VM1); EACH], Duration::from_millis(2))
            });
            assert_eq!(
                back[0].len() + back[1].len(),
                0,
                "VM1's LLDP reached the physical switch"
            );
        }
    }
}
