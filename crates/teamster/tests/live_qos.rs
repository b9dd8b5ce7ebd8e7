//! The live switch on 100 Mbit/s uplinks shaped by tc htb: NetIOC reservation and limit, and an
//! LBT move. Topology and helpers: [`netns`].

mod netns;
use netns::*;

/// Both VMs pinned to uplink1 (100 Mbit/s), sending UDP flat out: vm1's reservation holds and
/// vm2's limit caps it.
fn pinned() -> String {
    switch_toml(
        "",
        "100M",
        "policy = \"port-id\"\nactive = [\"uplink1\"]\nstandby = [\"uplink2\"]",
        "[[traffic_classes]]\nclass = \"vm\"\nreservation = \"75M\"",
        "reservation = \"60M\"",
        "limit = \"20M\"",
    )
}

#[test]
fn reservation_holds_and_limit_caps_on_a_saturated_uplink() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::shaped(100);
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, _status) = start(dir.path(), &pinned());
    ping("tmt-vm1", "10.77.0.100", "2", "0.2");
    ping("tmt-vm2", "10.77.0.100", "2", "0.2");
    let a = udp_stream("tmt-vm1", 5201, 100, 6);
    let b = udp_stream("tmt-vm2", 5202, 100, 6);
    let (vm1, vm2) = (a.join().unwrap(), b.join().unwrap());
    eprintln!("saturated 100 Mbit/s uplink: vm1 (R 60M) {vm1:.1} Mbit/s, vm2 (L 20M) {vm2:.1} Mbit/s");
    assert!(vm1 >= 0.9 * 60.0, "reservation: vm1 got {vm1:.1} Mbit/s of its 60");
    assert!(vm2 <= 1.05 * 20.0, "limit: vm2 got {vm2:.1} Mbit/s over its 20");
    assert!(vm2 > 10.0, "vm2 still gets its share: {vm2:.1}");
}

/// Both VMs hashed to uplink1 under LBT with a short window: when uplink1 passes 75%, one moves.
fn lbt() -> String {
    switch_toml(
        "[lbt]\nwindow_s = 3\nperiod_s = 3",
        "100M",
        "policy = \"load-based\"\nactive = [\"uplink1\", \"uplink2\"]",
        "",
        "id = 2",
        "id = 4",
    )
}

#[test]
fn lbt_moves_a_port_off_a_saturated_uplink() {
    let _one_at_a_time = netns::lock();
    if !ready() {
        return;
    }
    let _topology = Topology::shaped(100);
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, status_path) = start(dir.path(), &lbt());
    ping("tmt-vm1", "10.77.0.100", "2", "0.2");
    ping("tmt-vm2", "10.77.0.100", "2", "0.2");
    // 70 Mbit/s each: 140 offered on one 100 Mbit/s uplink until LBT moves one of them.
    let a = udp_stream("tmt-vm1", 5201, 70, 12);
    let b = udp_stream("tmt-vm2", 5202, 70, 12);
    let (vm1, vm2) = (a.join().unwrap(), b.join().unwrap());
    let s = status(&status_path);
    let moves: Vec<&serde_json::Value> = s["lbt"]["moves"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["reason"].as_str().unwrap().starts_with("load-based"))
        .collect();
    eprintln!(
        "LBT: moves {moves:?}; vm1 {vm1:.1} + vm2 {vm2:.1} = {:.1} Mbit/s over 12 s",
        vm1 + vm2
    );
    assert_eq!(moves.len(), 1, "one LBT move");
    // Before the move the pair shares 100; after it each gets its 70: over 12 s the total
    // must clearly exceed one uplink's capacity.
    assert!(
        vm1 + vm2 > 110.0,
        "aggregate {:.1} Mbit/s did not rise above one uplink",
        vm1 + vm2
    );
}
