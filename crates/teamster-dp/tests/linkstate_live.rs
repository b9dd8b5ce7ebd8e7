//! Link state that cannot be lost (needs root; CI runs as root): the data plane's netlink socket
//! is given a tiny receive buffer and flooded with link changes while the loop is not reading,
//! so it overruns; an uplink's carrier then goes down, its message lost with the others. The
//! overrun must make the loop re-read every link, so the team stops using the dead uplink.
//! Interfaces are veth pairs made here (named tmt-o*) and removed by name, whatever happens.

mod live;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use teamster_core::ioc::{NodeId, NodeSpec, Shares, Tree};
use teamster_core::teaming::{
    FailoverOrder, GroupId, LbtConfig, LinkState, Policy, PortGroupSpec, PortId, PortSpec, Team, UplinkId, UplinkSpec,
};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;
use teamster_dp::datapath::{AttachOptions, Control, Datapath, DatapathPlan, PortPlan, UplinkPlan};

/// The live tests' cross-process lock (the same file as crates/teamster/tests/netns), so this
/// never runs at the same time as another live test.
fn lock() -> std::fs::File {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("/tmp/teamster-live-tests.lock")
        .expect("open /tmp/teamster-live-tests.lock");
    // SAFETY: flock on a descriptor this function owns; blocks until the lock is free.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
    file
}

fn ip(args: &[&str]) -> bool {
    Command::new("timeout")
        .arg("10")
        .arg("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Veth pairs `name` <-> `name`p, removed by name when dropped.
struct Veths(Vec<&'static str>);

impl Veths {
    fn new(names: &[&'static str]) -> Veths {
        let v = Veths(names.to_vec());
        for n in names {
            ip(&["link", "del", n]);
            let peer = format!("{n}p");
            assert!(
                ip(&["link", "add", n, "type", "veth", "peer", "name", &peer]),
                "create {n}"
            );
            assert!(ip(&["link", "set", n, "up"]) && ip(&["link", "set", &peer, "up"]));
        }
        v
    }
}

impl Drop for Veths {
    fn drop(&mut self) {
        for n in &self.0 {
            ip(&["link", "del", n]);
        }
    }
}

/// Two uplinks (tmt-ou1, tmt-ou2) under port-ID teaming, one port (ID 1, so at home on
/// uplink 2) on tmt-op1.
fn plan() -> DatapathPlan {
    let uplinks = ["uplink1", "uplink2"].map(|n| UplinkSpec {
        name: n.into(),
        capacity: Bandwidth::from_gbps(1),
    });
    let mut team = Team::new(uplinks.to_vec(), LbtConfig::default()).unwrap();
    team.add_group(PortGroupSpec {
        mode: Default::default(),
        tuning: Default::default(),
        lacp: Default::default(),
        name: "vms".into(),
        policy: Policy::PORT_ID,
        order: FailoverOrder {
            active: vec![UplinkId(0), UplinkId(1)],
            standby: vec![],
        },
        failback: true,
        notify_switches: true,
        vlan: None,
    })
    .unwrap();
    team.add_port(PortSpec {
        id: PortId(1),
        mac: MacAddr([2, 0, 0, 0, 0, 1]),
        group: GroupId(0),
    })
    .unwrap();
    let mut tree = Tree::new("uplink");
    let leaf = tree
        .add(
            NodeId::ROOT,
            NodeSpec {
                name: "vm1".into(),
                reservation: Bandwidth::ZERO,
                shares: Shares::new(50).unwrap(),
                limit: None,
            },
        )
        .unwrap();
    DatapathPlan {
        team,
        tree,
        ports: vec![PortPlan {
            id: PortId(1),
            name: "vm1".into(),
            interface: "tmt-op1".into(),
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            group: GroupId(0),
            leaf,
            backend: Default::default(),
            mac_takeover: false,
        }],
        uplinks: [("uplink1", "tmt-ou1"), ("uplink2", "tmt-ou2")]
            .map(|(name, interface)| UplinkPlan {
                name: name.into(),
                interface: interface.into(),
                capacity: Bandwidth::from_gbps(1),
                follows_link_speed: false,
                admin_up: true,
                backend: Default::default(),
            })
            .to_vec(),
        switch: teamster_core::switch::SwitchConfig::default(),
        reservation_cap: teamster_core::ioc::ReservationCap::default(),
        busy_poll: teamster_dp::datapath::DEFAULT_BUSY_POLL,
        workers: 2,
        rx: Default::default(),
    }
}

/// Runs the loop until `done` holds or `secs` pass; returns whether `done` held.
fn run_until(dp: &mut Datapath, secs: u64, done: impl Fn(&Datapath) -> bool) -> bool {
    struct Until<'a, F> {
        stop: &'a AtomicBool,
        deadline: Instant,
        done: F,
        held: bool,
    }
    impl<F: Fn(&Datapath) -> bool> Control for Until<'_, F> {
        fn turn(&mut self, dp: &mut Datapath, _: teamster_core::Instant) {
            self.held = (self.done)(dp);
            if self.held || Instant::now() > self.deadline {
                self.stop.store(true, Ordering::Relaxed);
            }
        }
    }
    let stop = AtomicBool::new(false);
    let mut c = Until {
        stop: &stop,
        deadline: Instant::now() + Duration::from_secs(secs),
        done,
        held: false,
    };
    dp.run(&stop, &mut c);
    c.held
}

#[test]
fn a_netlink_overrun_still_fails_the_dead_uplink_over() {
    let _one_at_a_time = lock();
    if !live::as_root() {
        return;
    }
    let _veths = Veths::new(&["tmt-ou1", "tmt-ou2", "tmt-op1", "tmt-oc"]);
    // The kernel's floor for a receive buffer (about 2 KiB, doubled) holds a message or two.
    let mut dp = Datapath::attach_with(
        plan(),
        AttachOptions {
            netlink_rcvbuf: Some(1),
            ..AttachOptions::default()
        },
    )
    .unwrap();
    let team = |dp: &Datapath| {
        (
            dp.switch().team().link_state(UplinkId(1)),
            dp.switch().team().port_uplink(PortId(1)),
        )
    };
    assert_eq!(team(&dp), (Some(LinkState::Up), Some(UplinkId(1))));

    // While the loop is not reading: a burst of link changes overruns the socket, and then
    // uplink2's carrier goes (its peer down), a message lost with the rest.
    for k in 0..20 {
        let state = if k % 2 == 0 { "down" } else { "up" };
        assert!(ip(&["link", "set", "tmt-oc", state]));
    }
    assert!(ip(&["link", "set", "tmt-ou2p", "down"]));

    let started = Instant::now();
    let failed_over = run_until(&mut dp, 5, |dp| team(dp) == (Some(LinkState::Down), Some(UplinkId(0))));
    let events: Vec<_> = dp.events().cloned().collect();
    assert!(failed_over, "uplink2 still in use: {:?}\n{events:#?}", team(&dp));
    eprintln!(
        "failed over {:.0} ms after the loop started",
        started.elapsed().as_secs_f64() * 1e3
    );
    // It was the overrun that made the loop re-read the carrier, not the once-a-second re-read:
    // both events at the same instant.
    let overrun = events
        .iter()
        .find(|e| e.message.contains("netlink overrun"))
        .unwrap_or_else(|| panic!("no overrun: {events:#?}"));
    let down = events
        .iter()
        .find(|e| e.message == "uplink2 carrier down")
        .unwrap_or_else(|| panic!("no carrier event: {events:#?}"));
    assert_eq!(down.at, overrun.at, "{events:#?}");

    // Netlink works again afterwards: the carrier's return is seen and the port fails back.
    assert!(ip(&["link", "set", "tmt-ou2p", "up"]));
    let back = run_until(&mut dp, 5, |dp| team(dp) == (Some(LinkState::Up), Some(UplinkId(1))));
    assert!(
        back,
        "no failback: {:?}\n{:#?}",
        team(&dp),
        dp.events().collect::<Vec<_>>()
    );
}

#[test]
fn a_missing_uplink_is_an_error_naming_it() {
    // Nothing is opened before the interface is looked up, so this needs no root.
    let mut p = plan();
    p.uplinks[0].interface = "tmt-onowhere".into();
    let e = Datapath::attach(p).err().expect("attached without its uplink");
    assert!(e.contains("uplink uplink1: tmt-onowhere: no such interface"), "{e}");
    let mut p = plan();
    p.uplinks[0].interface = "../tmt-ou1".into();
    let e = Datapath::attach(p).err().expect("attached to a path");
    assert!(e.contains("uplink uplink1: `../tmt-ou1`: not an interface name"), "{e}");
    let mut p = plan();
    p.ports[0].interface = "..".into();
    let e = Datapath::attach(p).err().expect("attached to a path");
    assert!(e.contains("port vm1: `..`: not an interface name"), "{e}");
}

/// An uplink whose capacity is its link's speed follows a new speed: the loop's once-a-second
/// re-read finds the veth's 10000 Mbit/s where it was told 1G, and the pacer, the team and
/// admission control take it, as a `link` event. A speed that leaves reservations too little is
/// applied all the same, and the event says what no longer fits.
#[test]
fn a_new_link_speed_becomes_the_capacity() {
    let _one_at_a_time = lock();
    if !live::as_root() {
        return;
    }
    let _veths = Veths::new(&["tmt-ou1", "tmt-ou2", "tmt-op1", "tmt-oc"]);
    let mut p = plan();
    p.uplinks[0].follows_link_speed = true;
    // 600M reserved: within 75% of 1G, not of 100M.
    let mut tree = Tree::new("uplink");
    let spec = NodeSpec {
        reservation: Bandwidth::from_mbps(600),
        ..p.tree.node(p.ports[0].leaf).spec.clone()
    };
    p.ports[0].leaf = tree.add(NodeId::ROOT, spec).unwrap();
    p.tree = tree;
    let mut dp = Datapath::attach(p).unwrap();
    let capacity = |dp: &Datapath| {
        (
            dp.uplinks()[0].plan.capacity,
            dp.switch().team().uplink(UplinkId(0)).unwrap().capacity,
        )
    };
    let ten = Bandwidth::from_gbps(10);
    assert!(
        run_until(&mut dp, 5, |dp| capacity(dp) == (ten, ten)),
        "{:?}\n{:#?}",
        capacity(&dp),
        dp.events().collect::<Vec<_>>()
    );
    assert!(
        dp.events()
            .any(|e| e.kind == "link" && e.message == "uplink1 speed 1Gbps -> 10Gbps"),
        "{:#?}",
        dp.events().collect::<Vec<_>>()
    );
    // uplink2's capacity was configured: the kernel's speed does not change it.
    assert_eq!(dp.uplinks()[1].plan.capacity, Bandwidth::from_gbps(1));

    let now = dp.now();
    dp.set_uplink_speed(0, Bandwidth::from_mbps(100), now);
    assert_eq!(capacity(&dp), (Bandwidth::from_mbps(100), Bandwidth::from_mbps(100)));
    let last = dp.events().last().unwrap().message.clone();
    assert!(
        last.starts_with("uplink1 speed 10Gbps -> 100Mbps; reservations no longer fit: `vm1`"),
        "{last}"
    );
}
