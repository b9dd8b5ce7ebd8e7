//! NetIOC's HTB hierarchy against the kernel (root; fails, not skips, where
//! TEAMSTER_REQUIRE_LIVE is set): in a network namespace of this test's own, on a veth, the
//! planned classes and queues appear as planned, a change of controls changes them in place,
//! a port that goes loses its class, a bad class gets the kernel's own words back, a root qdisc
//! that is not Teamster's is refused and left alone, and releasing restores the default.

use std::process::Command;
use teamster_core::ioc::htb::{self, HtbClass};
use teamster_core::ioc::{NodeId, NodeSpec, Shares, Tree};
use teamster_core::teaming::PortId;
use teamster_core::units::Bandwidth;
use teamster_core::Instant;
use teamster_kernel::shaping::{ShapedUplink, Shaping};
use teamster_kernel::tc::Tc;

fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn spec(name: &str, r_mbit: u64, limit_mbit: Option<u64>) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        reservation: Bandwidth::from_mbps(r_mbit),
        shares: Shares::NORMAL,
        limit: limit_mbit.map(Bandwidth::from_mbps),
    }
}

/// Root, or None after saying why (and a failure where TEAMSTER_REQUIRE_LIVE is set); the
/// calling thread then has a network namespace of its own holding the veth `up0`.
fn netns_with_veth() -> Option<u32> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("TEAMSTER_REQUIRE_LIVE").is_none(),
            "the shaping tests need root (TEAMSTER_REQUIRE_LIVE is set)"
        );
        eprintln!("skipped: the shaping tests need root");
        return None;
    }
    // SAFETY: acts on the calling thread only.
    assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare(CLONE_NEWNET)");
    sh(&["ip", "link", "add", "up0", "type", "veth", "peer", "name", "up0x"]);
    sh(&["ip", "link", "set", "up0", "up"]);
    Some(teamster_dp::iface::index("up0").unwrap() as u32)
}

#[test]
fn the_planned_hierarchy_is_what_the_kernel_holds() {
    std::thread::spawn(|| {
        let Some(ifindex) = netns_with_veth() else { return };
        let mut tree = Tree::new("uplink");
        let vm = tree.add(NodeId::ROOT, spec("vm", 60, None)).unwrap();
        let leaves = vec![
            (PortId(1), tree.add(vm, spec("vm1", 60, None)).unwrap()),
            (PortId(2), tree.add(vm, spec("vm2", 0, Some(10))).unwrap()),
        ];
        let uplink = ShapedUplink {
            interface: "up0".into(),
            ifindex,
            capacity: Bandwidth::from_mbps(100),
        };
        // Each run of the planner against the one uplink.
        let sync = |shaping: &mut Shaping, tree: &Tree, leaves: &[(PortId, NodeId)]| {
            shaping.sync(Some(tree), leaves, std::slice::from_ref(&uplink), &|_| 1, Instant::ZERO)
        };
        let mut shaping = Shaping::default();
        sync(&mut shaping, &tree, &leaves).unwrap();
        let classes = sh(&["tc", "class", "show", "dev", "up0"]);
        assert_eq!(
            classes.lines().count(),
            5,
            "root, vm, two ports, the default:\n{classes}"
        );
        assert!(classes.contains("class htb 7473:1 root rate 100Mbit"), "{classes}");
        assert!(classes.contains("rate 10Mbit ceil 10Mbit"), "vm2's limit:\n{classes}");
        let p1 = shaping.priority(PortId(1));
        assert_eq!(p1 >> 16, 0x7473);
        let qdiscs = sh(&["tc", "qdisc", "show", "dev", "up0"]);
        assert!(
            qdiscs.contains("qdisc htb 7473: root") && qdiscs.matches("bfifo").count() == 3,
            "{qdiscs}"
        );

        // A run killed and the next one taking over: the qdisc is kept (what it counted and
        // queued stays), its classes written again.
        sh(&["ip", "link", "set", "up0x", "up"]);
        sh(&["ip", "addr", "add", "10.99.0.1/24", "dev", "up0"]);
        sh(&[
            "ip",
            "neigh",
            "add",
            "10.99.0.9",
            "lladdr",
            "02:00:00:00:00:09",
            "dev",
            "up0",
        ]);
        let _ = Command::new("ping")
            .args(["-c", "3", "-i", "0.01", "-W", "0.1", "10.99.0.9"])
            .output();
        let sent = |q: &str| -> u64 {
            q.split("Sent ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let before = sent(&sh(&["tc", "-s", "qdisc", "show", "dev", "up0", "root"]));
        assert!(before > 0, "the pings went through the qdisc");
        std::mem::forget(shaping);
        let mut shaping = Shaping::default();
        sync(&mut shaping, &tree, &leaves).unwrap();
        let after = sent(&sh(&["tc", "-s", "qdisc", "show", "dev", "up0", "root"]));
        assert!(after >= before, "the qdisc was replaced: sent {before} then {after}");
        assert_eq!(sh(&["tc", "class", "show", "dev", "up0"]).lines().count(), 5);
        assert_eq!(shaping.priority(PortId(1)), p1, "the same class for the same port");

        // Someone deletes the qdisc: the next check notices, and the next sync sets it again.
        sh(&["tc", "qdisc", "del", "dev", "up0", "root"]);
        let checked = shaping.check();
        assert!(checked.lost.iter().any(|l| l.contains("up0")), "{checked:?}");
        sync(&mut shaping, &tree, &leaves).unwrap();
        assert_eq!(sh(&["tc", "class", "show", "dev", "up0"]).lines().count(), 5);
        assert!(shaping.check().lost.is_empty());

        // A change of controls changes the classes in place: vm2's limit goes to 20M.
        let mut changed = Tree::new("uplink");
        let vm = changed.add(NodeId::ROOT, spec("vm", 60, None)).unwrap();
        changed.add(vm, spec("vm1", 60, None)).unwrap();
        changed.add(vm, spec("vm2", 0, Some(20))).unwrap();
        sync(&mut shaping, &changed, &leaves).unwrap();
        let classes = sh(&["tc", "class", "show", "dev", "up0"]);
        assert!(classes.contains("ceil 20Mbit"), "{classes}");
        assert_eq!(shaping.priority(PortId(1)), p1, "vm1 keeps its class");

        // vm2's port goes: its class goes with it.
        sync(&mut shaping, &changed, &leaves[..1]).unwrap();
        assert_eq!(sh(&["tc", "class", "show", "dev", "up0"]).lines().count(), 4);
        assert_eq!(shaping.priority(PortId(2)), 0);

        // Nothing asked of the ports any more: the default qdisc is back.
        let plain = Tree::new("uplink");
        sync(&mut shaping, &plain, &[]).unwrap();
        let qdiscs = sh(&["tc", "qdisc", "show", "dev", "up0"]);
        assert!(!qdiscs.contains("7473"), "{qdiscs}");

        // A class the kernel refuses (rate 0) comes back with its error.
        let mut tc = Tc::open().unwrap();
        tc.replace_root(ifindex, htb::UNCLASSIFIED).unwrap();
        let bad = HtbClass {
            name: "x".into(),
            minor: 9,
            parent: 1,
            rate: 0,
            ceil: 1000,
            quantum: 1514,
            burst: 3036,
            cburst: 3036,
            queue: None,
        };
        let e = tc.put_class(ifindex, &bad).unwrap_err();
        assert!(teamster_kernel::tc::errno(&e).is_some(), "{e}");
        tc.delete_root(ifindex).unwrap();

        // Someone else's root qdisc: refused by name, and left as it was.
        sh(&["tc", "qdisc", "add", "dev", "up0", "root", "handle", "1:", "htb"]);
        let e = sync(&mut shaping, &tree, &leaves).unwrap_err();
        assert!(e.contains("up0") && e.contains("htb 1:"), "{e}");
        assert!(sh(&["tc", "qdisc", "show", "dev", "up0"]).contains("htb 1:"));
    })
    .join()
    .unwrap();
}
