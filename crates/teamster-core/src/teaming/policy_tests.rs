//! The policy trait as the next modes will use it: per-frame state that sees `now` and the frame
//! length, timers that re-home ports, a per-port receive uplink, state kept across a
//! reconfiguration that keeps the policy. The policy here is a test double, not registered.

use super::policy::{PolicyEntry, PortView, Rehome, TeamView, TeamingPolicy};
use super::*;
use crate::units::Bandwidth;
use crate::wire::FlowKey;
use core::time::Duration;

/// Per flow (keyed by source port): a flow keeps its uplink while its frames come less than a
/// second apart (a flowlet), and otherwise takes the next active uplink in turn. Every 10 s it
/// re-homes the lowest port to the last active uplink. Each port receives on its current uplink.
#[derive(Debug, Clone, Default)]
struct Flowlets {
    flows: Vec<(u16, UplinkId, Instant)>,
    turn: usize,
    bytes: u64,
    next_timer: Option<Instant>,
}

impl TeamingPolicy for Flowlets {
    fn home(&self, team: &TeamView<'_>, _: &PortSpec) -> UplinkId {
        team.order().active[0]
    }
    fn per_flow(&self) -> bool {
        true
    }
    fn select(&self, _: &TeamView<'_>, port: &PortView<'_>, flow: &FlowKey) -> Option<UplinkId> {
        let key = flow.src_port?;
        self.flows.iter().find(|f| f.0 == key).map(|f| f.1).or(port.current())
    }
    fn select_frame(
        &mut self,
        team: &TeamView<'_>,
        _: &PortView<'_>,
        flow: &FlowKey,
        len: usize,
        now: Instant,
    ) -> Option<UplinkId> {
        let key = flow.src_port?;
        self.bytes += len as u64;
        self.next_timer.get_or_insert(now + Duration::from_secs(10));
        let active = &team.order().active;
        let fresh = active[self.turn % active.len()];
        match self.flows.iter_mut().find(|f| f.0 == key) {
            Some(f) if now - f.2 < Duration::from_secs(1) => f.2 = now,
            Some(f) => {
                self.turn += 1;
                *f = (key, fresh, now);
            }
            None => {
                self.turn += 1;
                self.flows.push((key, fresh, now));
            }
        }
        self.flows.iter().find(|f| f.0 == key).map(|f| f.1)
    }
    fn receive_uplink(&self, team: &TeamView<'_>, port: Option<&PortView<'_>>) -> Option<UplinkId> {
        port.and_then(|p| p.current()).or_else(|| team.first_live())
    }
    fn poll_at(&self) -> Option<Instant> {
        self.next_timer
    }
    fn handle_timeout(&mut self, team: &TeamView<'_>, now: Instant) -> Vec<Rehome> {
        self.next_timer = Some(now + Duration::from_secs(10));
        let to = *team.order().active.last().unwrap();
        let lowest = team.ports().filter(|p| p.group() == team.group()).map(|p| p.id()).min();
        let mut out: Vec<Rehome> = lowest
            .map(|port| Rehome {
                port,
                to,
                reason: MoveReason::PolicyChange,
            })
            .into_iter()
            .collect();
        // A policy bug: a port of no group of ours. The team must ignore it.
        out.push(Rehome {
            port: PortId(999),
            to,
            reason: MoveReason::PolicyChange,
        });
        out
    }
}

static FLOWLETS: PolicyEntry = PolicyEntry {
    name: "test-flowlets",
    build: |_| Box::new(Flowlets::default()),
};

fn team() -> Team {
    let uplinks = (1..=3)
        .map(|i| UplinkSpec {
            name: format!("uplink{i}"),
            capacity: Bandwidth::from_gbps(10),
        })
        .collect();
    let mut t = Team::new(uplinks, LbtConfig::default()).unwrap();
    let g = t
        .add_group(PortGroupSpec {
            mode: Default::default(),
            tuning: Default::default(),
            lacp: Default::default(),
            name: "pg".into(),
            policy: Policy::new(&FLOWLETS),
            order: FailoverOrder {
                active: vec![UplinkId(0), UplinkId(1), UplinkId(2)],
                standby: vec![],
            },
            failback: true,
            notify_switches: false,
            vlan: None,
        })
        .unwrap();
    for id in [5, 6] {
        t.add_port(PortSpec {
            id: PortId(id),
            mac: crate::wire::MacAddr([2, 0, 0, 0, 0, id as u8]),
            group: g,
        })
        .unwrap();
    }
    t
}

fn flow(sport: u16) -> FlowKey {
    FlowKey {
        src_port: Some(sport),
        ..Default::default()
    }
}

#[test]
fn a_stateful_policy_sees_frames_time_and_timers() {
    let mut t = team();
    assert!(t.poll_at().is_none(), "no timer until the policy asks for one");
    let ms = Instant::from_millis;
    // New flows take the active uplinks in turn: flow 1 uplink1, flow 2 uplink2.
    assert_eq!(
        t.select_frame(PortId(5), Some(&flow(1)), 1500, ms(0)),
        Some(UplinkId(0))
    );
    assert_eq!(
        t.select_frame(PortId(5), Some(&flow(2)), 1500, ms(10)),
        Some(UplinkId(1))
    );
    // Within the flowlet gap the flow stays; the pure query agrees and changes nothing.
    assert_eq!(
        t.select_frame(PortId(5), Some(&flow(1)), 64, ms(900)),
        Some(UplinkId(0))
    );
    assert_eq!(t.select(PortId(5), Some(&flow(1))), Some(UplinkId(0)));
    assert_eq!(t.select(PortId(5), Some(&flow(1))), Some(UplinkId(0)));
    // After an idle gap the flow may change member.
    assert_eq!(
        t.select_frame(PortId(5), Some(&flow(1)), 64, ms(2_000)),
        Some(UplinkId(2))
    );
    // No flow key: the port's current uplink.
    assert_eq!(t.select_frame(PortId(5), None, 64, ms(2_001)), Some(UplinkId(0)));
    assert_eq!(t.select_frame(PortId(77), Some(&flow(1)), 64, ms(2_001)), None);

    // The timer the first frame asked for fires and re-homes the lowest port, reported as a move.
    assert_eq!(t.poll_at(), Some(ms(10_000)));
    t.handle_timeout(ms(9_999));
    assert!(t.poll_effect().is_none(), "not due yet");
    t.handle_timeout(ms(10_000));
    let Some(Effect::PortMoved(m)) = t.poll_effect() else {
        panic!("no move")
    };
    assert_eq!(
        (m.port, m.from, m.to),
        (PortId(5), Some(UplinkId(0)), Some(UplinkId(2)))
    );
    assert!(t.poll_effect().is_none(), "the bogus re-home was ignored");
    assert_eq!(t.port_home(PortId(5)), Some(UplinkId(2)));
    assert_eq!(t.poll_at(), Some(ms(20_000)));

    // Receive: per port when the policy says so, one per group otherwise.
    assert_eq!(t.port_receive_uplink(PortId(5)), Some(UplinkId(2)));
    assert_eq!(t.port_receive_uplink(PortId(6)), Some(UplinkId(0)));
    assert_eq!(t.group_receive_uplink(GroupId(0)), Some(UplinkId(0)));

    // A clone carries the policy's state; the original and the clone then go their own ways.
    let mut c = t.clone();
    assert_eq!(c.select(PortId(5), Some(&flow(2))), Some(UplinkId(1)));
    c.select_frame(PortId(5), Some(&flow(2)), 64, ms(30_000));
    assert_ne!(c.select(PortId(5), Some(&flow(2))), t.select(PortId(5), Some(&flow(2))));

    // Reconfiguring with the same policy keeps its state; another policy starts afresh.
    let order = t.group(GroupId(0)).unwrap().order.clone();
    let policy = t.group(GroupId(0)).unwrap().policy;
    t.reconfigure_group(GroupId(0), policy, order.clone(), true, ms(11_000))
        .unwrap();
    assert_eq!(t.select(PortId(5), Some(&flow(2))), Some(UplinkId(1)));
    t.reconfigure_group(GroupId(0), Policy::PORT_ID, order, true, ms(12_000))
        .unwrap();
    assert!(t.poll_at().is_none());
    assert_eq!(t.select(PortId(5), Some(&flow(2))), Some(UplinkId(2)), "port 5 mod 3");
}

#[test]
fn per_port_policies_answer_from_the_current_uplink() {
    // Under a per-port policy the flow is never consulted, and select_frame equals select.
    let mut t = team();
    let order = t.group(GroupId(0)).unwrap().order.clone();
    t.reconfigure_group(GroupId(0), Policy::SOURCE_MAC, order, true, Instant::ZERO)
        .unwrap();
    for sport in 0..50 {
        let f = flow(sport);
        let want = t.port_uplink(PortId(6));
        assert_eq!(t.select(PortId(6), Some(&f)), want);
        assert_eq!(t.select_frame(PortId(6), Some(&f), 1500, Instant::ZERO), want);
    }
}
