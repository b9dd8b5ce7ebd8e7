//! Two teams negotiating over two links, each the other's LACP partner.

use super::*;
use crate::teaming::tests::{group, uplinks};
use crate::teaming::{Effect, LbtConfig, LinkState, Policy, Team, TeamMode};
use crate::wire::MacAddr;
use core::time::Duration;

/// Two teams of two 10G uplinks, uplink `i` of one cabled to uplink `i` of the other.
struct Wire {
    sides: [Team; 2],
    now: Instant,
    /// Per side, per link: LACPDUs sent that way are lost (the sender stopped, or the wire).
    silenced: [[bool; 2]; 2],
    /// LACPDUs delivered, per side sent from.
    sent: [u64; 2],
}

fn settings(system: u8, activity: LacpActivity, rate: LacpRate) -> LacpSettings {
    LacpSettings {
        activity,
        rate,
        system: MacAddr([2, 0, 0, 0, 0, system]),
        ..LacpSettings::default()
    }
}

fn side(s: LacpSettings, fallback_keys: Option<[u16; 2]>) -> Team {
    let mut t = Team::new(uplinks(&[10.0, 10.0]), LbtConfig::default()).unwrap();
    match fallback_keys {
        None => {
            let mut g = group(Policy::ADDRESS_HASH, &[0, 1], &[], true);
            g.mode = TeamMode::Lacp;
            g.lacp = s;
            t.add_group(g).unwrap();
        }
        Some(keys) => {
            // One group per uplink, each with its own key (as a switch would configure two
            // port channels).
            for (i, key) in keys.into_iter().enumerate() {
                let mut g = group(Policy::ADDRESS_HASH, &[i], &[], true);
                g.name = format!("pg{i}");
                g.mode = TeamMode::Lacp;
                g.lacp = LacpSettings { key, ..s };
                t.add_group(g).unwrap();
            }
        }
    }
    t
}

impl Wire {
    fn new(a: Team, b: Team) -> Wire {
        Wire {
            sides: [a, b],
            now: Instant::ZERO,
            silenced: [[false; 2]; 2],
            sent: [0; 2],
        }
    }

    /// Runs both sides for `d` in 10 ms steps, delivering what each sends to the other (over
    /// as many links as they have; `silenced` covers the first two).
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = self.now + Duration::from_millis(10);
            for s in 0..2 {
                let t = &mut self.sides[s];
                if t.poll_at().is_some_and(|p| p <= self.now) {
                    t.handle_timeout(self.now);
                }
            }
            // Deliver until nobody has anything more to say at this instant.
            loop {
                let mut any = false;
                for s in 0..2 {
                    while let Some(e) = self.sides[s].poll_effect() {
                        if let Effect::Transmit { uplink, frame } = e {
                            let silenced = self.silenced[s].get(uplink.0).copied().unwrap_or(false);
                            let lost = silenced || self.sides[s].link_state(uplink) == Some(LinkState::Down);
                            if !lost && crate::wire::lacp::is_slow(&frame) {
                                self.sent[s] += 1;
                                self.sides[1 - s].receive_slow(uplink, &frame, self.now);
                                any = true;
                            }
                        }
                    }
                }
                if !any {
                    break;
                }
            }
        }
    }

    fn member(&self, s: usize, u: usize) -> &Member {
        self.sides[s].lacp().member(UplinkId(u)).unwrap()
    }

    /// Whether each side's member `u` is collecting and distributing.
    fn distributing(&self, u: usize) -> [bool; 2] {
        [self.member(0, u).distributing(), self.member(1, u).distributing()]
    }

    /// Both sides set a link's carrier.
    fn set_link(&mut self, u: usize, up: bool) {
        let state = if up { LinkState::Up } else { LinkState::Down };
        for t in &mut self.sides {
            t.set_link(UplinkId(u), state, self.now).unwrap();
        }
    }
}

fn fast(system: u8) -> LacpSettings {
    settings(system, LacpActivity::Active, LacpRate::Fast)
}

#[test]
fn two_active_fast_sides_bundle_both_links_and_then_carry_traffic() {
    let mut a = side(fast(1), None);
    let vm = crate::teaming::PortId(5);
    a.add_port(crate::teaming::PortSpec {
        id: vm,
        mac: MacAddr([2, 0, 0, 0, 0, 5]),
        group: crate::teaming::GroupId(0),
    })
    .unwrap();
    let mut w = Wire::new(a, side(fast(2), None));
    // Nothing is usable before negotiation: the port has no uplink.
    w.run(Duration::from_millis(10));
    assert!(!w.sides[0].uplink_usable(UplinkId(0)) && !w.sides[0].uplink_usable(UplinkId(1)));
    assert_eq!(w.sides[0].port_uplink(vm), None);
    w.run(Duration::from_secs(4));
    assert!(w.sides[0].port_uplink(vm).is_some());
    for u in 0..2 {
        assert_eq!(w.distributing(u), [true, true], "link {u}");
        let m = w.member(0, u);
        assert_eq!(m.partner.system, MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(m.partner.port, w.member(1, u).port);
    }
    // Steady state: one LACPDU per second per member per side, never more than three.
    let before = w.sent;
    w.run(Duration::from_secs(10));
    for (s, (now, then)) in w.sent.iter().zip(before).enumerate() {
        let per_s = (now - then) as f64 / 10.0 / 2.0;
        assert!((0.9..=1.2).contains(&per_s), "side {s}: {per_s} LACPDUs/s per member");
    }
}

#[test]
fn a_silent_partner_is_out_within_three_fast_periods_and_carrier_loss_at_once() {
    let mut w = Wire::new(side(fast(1), None), side(fast(2), None));
    w.run(Duration::from_secs(5));
    assert_eq!(w.distributing(1), [true, true]);
    // Side 1 stops sending on link 1 (a hung partner): side 0 takes it out after 3 s, not
    // before 2 s (two missed PDUs are tolerated).
    w.silenced[1][1] = true;
    w.run(Duration::from_millis(2_000));
    assert!(w.member(0, 1).distributing(), "out after only two missed LACPDUs");
    w.run(Duration::from_millis(1_100));
    assert!(!w.member(0, 1).distributing(), "still in after three missed LACPDUs");
    assert_eq!(w.member(0, 1).rx, RxState::Expired);
    assert!(w.sides[0].link_state(UplinkId(1)) == Some(LinkState::Up));
    assert!(!w.sides[0].uplink_usable(UplinkId(1)));
    assert!(w.member(0, 0).distributing(), "the healthy link stays");
    // Expired, it stays in its aggregate (out of sync), so it is back within a second or so
    // of the partner's next LACPDU, with no new aggregate wait.
    assert!(w.member(0, 1).selected.is_some());
    w.silenced[1][1] = false;
    w.run(Duration::from_millis(1500));
    assert_eq!(w.distributing(1), [true, true]);
    // Carrier loss: out at once.
    w.set_link(0, false);
    assert!(!w.member(0, 0).distributing() && !w.sides[0].uplink_usable(UplinkId(0)));
    w.set_link(0, true);
    w.run(Duration::from_secs(4));
    assert_eq!(w.distributing(0), [true, true]);
}

#[test]
fn a_member_whose_partner_has_another_key_is_not_aggregated() {
    // The far side puts its two links in port channels with different keys.
    let mut w = Wire::new(side(fast(1), None), side(fast(2), Some([1, 2])));
    w.run(Duration::from_secs(5));
    let selected: Vec<bool> = (0..2).map(|u| w.member(0, u).selected.is_some()).collect();
    assert_eq!(selected, [true, false]);
    assert_eq!(w.distributing(0), [true, true]);
    assert!(!w.member(0, 1).distributing());
    assert!(w.sides[0].uplink_usable(UplinkId(0)) && !w.sides[0].uplink_usable(UplinkId(1)));
}

#[test]
fn passive_answers_active_and_two_passive_sides_stay_silent() {
    let passive = |s| settings(s, LacpActivity::Passive, LacpRate::Fast);
    let mut w = Wire::new(side(passive(1), None), side(fast(2), None));
    w.run(Duration::from_secs(5));
    assert_eq!(w.distributing(0), [true, true]);
    assert_eq!(w.distributing(1), [true, true]);
    let mut w = Wire::new(side(passive(1), None), side(passive(2), None));
    w.run(Duration::from_secs(10));
    assert_eq!(w.sent, [0, 0], "two passive sides sent LACPDUs");
    assert_eq!(w.member(0, 0).rx, RxState::Defaulted);
}

#[test]
fn slow_rate_sends_every_thirty_seconds_and_times_out_after_ninety() {
    let slow = |s| settings(s, LacpActivity::Active, LacpRate::Slow);
    let mut w = Wire::new(side(slow(1), None), side(slow(2), None));
    w.run(Duration::from_secs(5));
    assert_eq!(w.distributing(0), [true, true]);
    let before = w.sent;
    w.run(Duration::from_secs(120));
    let per_member = (w.sent[0] - before[0]) as f64 / 2.0;
    assert!((3.0..=5.0).contains(&per_member), "{per_member} LACPDUs in 120 s");
    w.silenced[1][0] = true;
    w.run(Duration::from_secs(80));
    assert!(w.member(0, 0).distributing(), "a slow partner timed out before 90 s");
    w.run(Duration::from_secs(15));
    assert!(!w.member(0, 0).distributing());
}

#[test]
fn with_no_partner_the_group_falls_back_as_configured() {
    let alone = |fallback| {
        let mut t = side(LacpSettings { fallback, ..fast(1) }, None);
        let mut now = Instant::ZERO;
        for _ in 0..1000 {
            now = now + Duration::from_millis(10);
            if t.poll_at().is_some_and(|p| p <= now) {
                t.handle_timeout(now);
            }
            while t.poll_effect().is_some() {}
        }
        t
    };
    let t = alone(LacpFallback::ActiveBackup);
    assert_eq!(t.lacp().member(UplinkId(0)).unwrap().rx, RxState::Defaulted);
    assert!(t.uplink_usable(UplinkId(0)) && !t.uplink_usable(UplinkId(1)));
    let t = alone(LacpFallback::Down);
    assert!(!t.uplink_usable(UplinkId(0)) && !t.uplink_usable(UplinkId(1)));
}

#[test]
fn a_marker_is_answered_and_garbage_counted() {
    let mut t = side(fast(1), None);
    t.handle_timeout(Instant::ZERO);
    while t.poll_effect().is_some() {}
    let mut marker = vec![0x01, 0x80, 0xc2, 0, 0, 2, 2, 0, 0, 0, 0, 9, 0x88, 0x09];
    marker.extend_from_slice(&[2, 1, 1, 16, 0, 3, 2, 0, 0, 0, 0, 9, 0, 0, 0, 42, 0, 0, 0, 0]);
    marker.resize(60, 0);
    assert!(t.receive_slow(UplinkId(0), &marker, Instant::ZERO));
    let Some(Effect::Transmit { uplink, frame }) = t.poll_effect() else {
        panic!("no marker response")
    };
    assert_eq!(uplink, UplinkId(0));
    assert_eq!(&frame[14..17], &[2, 1, 2]);
    assert!(t.receive_slow(UplinkId(0), &marker[..20], Instant::ZERO));
    let c = t.lacp().member(UplinkId(0)).unwrap().counters;
    assert_eq!((c.rx_markers, c.tx_marker_responses, c.rx_bad), (1, 1, 1));
}

#[test]
fn a_dead_link_leaves_no_timer_in_the_past() {
    // Three LACPDUs within a second fill the rate limit; one more is due; then the link dies.
    let mut m = Member::new(UplinkId(0), 1, fast(1), true, Instant::ZERO);
    let mut partner = crate::wire::lacp::Lacpdu::default();
    partner.actor.system = MacAddr([2, 0, 0, 0, 0, 2]);
    partner.actor.state = crate::wire::lacp::state::ACTIVITY;
    let at = Instant::from_millis(10);
    for _ in 0..3 {
        m.receive(&partner, at);
        assert!(m.transmit(at).is_some());
        partner.actor.key += 1;
    }
    m.receive(&partner, at);
    assert!(m.transmit(at).is_none(), "a fourth LACPDU within a second");
    m.set_link(false, at);
    m.run_mux(at);
    let later = Instant::from_secs(5);
    assert!(m.poll_at().is_none_or(|t| t > at), "{:?}", m.poll_at());
    m.on_timers(later);
    assert!(m.poll_at().is_none_or(|t| t > later), "{:?}", m.poll_at());
}

#[test]
fn two_groups_with_the_default_key_each_bundle_their_own_links() {
    // Four links; each side has two LACP groups of two members, each group its own system ID
    // (as the live switch gives each its first member's MAC), both with key 1.
    let two_groups = |base: u8| {
        let mut t = Team::new(uplinks(&[10.0, 10.0, 10.0, 10.0]), LbtConfig::default()).unwrap();
        for (i, members) in [[0, 1], [2, 3]].into_iter().enumerate() {
            let mut g = group(Policy::ADDRESS_HASH, &members, &[], true);
            g.name = format!("pg{i}");
            g.mode = TeamMode::Lacp;
            g.lacp = fast(base + i as u8);
            t.add_group(g).unwrap();
        }
        t
    };
    let mut w = Wire {
        sides: [two_groups(1), two_groups(11)],
        now: Instant::ZERO,
        silenced: [[false; 2]; 2],
        sent: [0; 2],
    };
    w.run(Duration::from_secs(5));
    for u in 0..4 {
        assert!(
            w.member(0, u).distributing() && w.member(1, u).distributing(),
            "link {u}"
        );
    }
}

#[test]
fn a_fallback_under_way_outlives_another_link_coming_up() {
    let mut t = side(fast(1), None);
    let mut now = Instant::ZERO;
    let step = |t: &mut Team, ms: u64, now: &mut Instant, watch: bool| {
        for _ in 0..ms / 10 {
            *now = *now + Duration::from_millis(10);
            if t.poll_at().is_some_and(|p| p <= *now) {
                t.handle_timeout(*now);
            }
            while t.poll_effect().is_some() {}
            if watch {
                assert!(
                    t.uplink_usable(UplinkId(0)),
                    "the fallback member dropped out at {now:?}"
                );
            }
        }
    };
    step(&mut t, 10_000, &mut now, false);
    assert!(t.uplink_usable(UplinkId(0)));
    t.set_link(UplinkId(1), LinkState::Down, now).unwrap();
    step(&mut t, 100, &mut now, true);
    t.set_link(UplinkId(1), LinkState::Up, now).unwrap();
    step(&mut t, 10_000, &mut now, true);
    assert!(!t.uplink_usable(UplinkId(1)));
}

#[test]
fn a_partner_port_that_changes_detaches_and_waits_again() {
    let mut m = Member::new(UplinkId(0), 1, fast(1), true, Instant::ZERO);
    let mut pdu = crate::wire::lacp::Lacpdu {
        actor: crate::wire::lacp::LacpInfo {
            system_priority: 1,
            system: MacAddr([2, 0, 0, 0, 0, 2]),
            key: 9,
            port_priority: 1,
            port: 7,
            state: crate::wire::lacp::state::ACTIVITY | crate::wire::lacp::state::AGGREGATION,
        },
        ..Default::default()
    };
    let step = |m: &mut Member, pdu: &mut crate::wire::lacp::Lacpdu, at: Instant| {
        pdu.partner = m.actor();
        m.receive(pdu, at);
        // Selection, as the group runs it for a member alone: its partner's aggregate.
        m.selected = m.offer();
        m.on_timers(at);
        m.run_mux(at);
    };
    // In sync with the partner: attached after the aggregate wait, then distributing.
    pdu.actor.state |= crate::wire::lacp::state::SYNCHRONIZATION;
    for ms in (0..3000).step_by(100) {
        step(&mut m, &mut pdu, Instant::from_millis(ms));
    }
    assert_eq!(m.mux, MuxState::CollectingDistributing);
    // The same system and key, another port: detached, waiting again.
    pdu.actor.port = 8;
    step(&mut m, &mut pdu, Instant::from_millis(3100));
    assert_eq!(m.mux, MuxState::Waiting);
    for ms in (3200..5500).step_by(100) {
        step(&mut m, &mut pdu, Instant::from_millis(ms));
    }
    assert_eq!(m.mux, MuxState::CollectingDistributing);
}
