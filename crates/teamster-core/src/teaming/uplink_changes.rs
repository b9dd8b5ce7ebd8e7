//! Uplinks that join and leave a running team (a NIC added to the host, or taken out of the
//! switch for maintenance).
//!
//! Model. An uplink's [`UplinkId`] is its index, so a new uplink goes after the others and no
//! group uses it until a group's failover order names it. An uplink leaves only when nothing
//! refers to it: no group's order lists it and no port is homed or placed on it (which follows
//! from the first, since ports live on their group's uplinks). The uplinks after it then move
//! down one index, and so does every reference to them: the groups' orders, the ports' home and
//! current uplinks, the effects not yet taken, and the policies' own state
//! ([`TeamingPolicy::uplink_removed`](super::TeamingPolicy::uplink_removed)). Nothing moves: a
//! port keeps its uplink, under that uplink's new index.

use super::meter::RateMeter;
use super::state::UplinkState;
use super::team::check_uplink;
use super::{Effect, Team, TeamError, UplinkId, UplinkSpec};

impl Team {
    /// Adds uplink `spec` after the others, up, with empty meters; refused (changing nothing)
    /// if its name is taken or its capacity zero.
    pub fn add_uplink(&mut self, spec: UplinkSpec) -> Result<UplinkId, TeamError> {
        check_uplink(&spec, self.uplinks.iter().map(|u| &u.spec))?;
        let meter = RateMeter::new(self.lbt.window);
        self.uplinks.push(UplinkState::new(spec, &meter));
        Ok(UplinkId(self.uplinks.len() - 1))
    }

    /// Removes uplink `u`, which no group's failover order may list (the last uplink stays: a
    /// team needs one), and renumbers the uplinks after it as the module documentation says.
    pub fn remove_uplink(&mut self, u: UplinkId) -> Result<UplinkSpec, TeamError> {
        let name = self
            .uplinks
            .get(u.0)
            .ok_or(TeamError::UnknownUplink(u.0))?
            .spec
            .name
            .clone();
        if self.uplinks.len() == 1 {
            return Err(TeamError::NoUplinks);
        }
        let in_use = |what: String| TeamError::UplinkInUse {
            uplink: name.clone(),
            what,
        };
        if let Some(g) = self
            .groups
            .iter()
            .find(|g| g.spec.order.active.contains(&u) || g.spec.order.standby.contains(&u))
        {
            let what = format!("port group `{}` lists it in its failover order", g.spec.name);
            return Err(in_use(what));
        }
        if let Some(p) = self.ports.iter().find(|p| p.home == u || p.current == Some(u)) {
            return Err(in_use(format!("{} is on it", p.spec.id)));
        }
        let gone = self.uplinks.remove(u.0);
        self.lacp.uplink_removed(u);
        let after = |x: UplinkId| if x > u { UplinkId(x.0 - 1) } else { x };
        for g in &mut self.groups {
            let order = &mut g.spec.order;
            for x in order.active.iter_mut().chain(order.standby.iter_mut()) {
                *x = after(*x);
            }
            g.policy.uplink_removed(u);
            g.uplink_removed(u);
        }
        for p in &mut self.ports {
            p.home = after(p.home);
            p.current = p.current.map(after);
        }
        // A frame for the uplink gone is not sent; a move from or to it (none, by the checks
        // above) would name no uplink.
        self.effects
            .retain(|e| !matches!(e, Effect::Transmit { uplink, .. } if *uplink == u));
        for e in &mut self.effects {
            match e {
                Effect::Transmit { uplink, .. } => *uplink = after(*uplink),
                Effect::PortMoved(m) => {
                    m.from = m.from.filter(|&x| x != u).map(after);
                    m.to = m.to.filter(|&x| x != u).map(after);
                }
            }
        }
        Ok(gone.spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::teaming::{FailoverOrder, GroupId, LbtConfig, LinkState, Policy, PortGroupSpec, PortId, PortSpec};
    use crate::units::Bandwidth;
    use crate::wire::MacAddr;
    use crate::Instant;

    fn uplink(name: &str) -> UplinkSpec {
        UplinkSpec {
            name: name.into(),
            capacity: Bandwidth::from_gbps(10),
        }
    }

    fn group(name: &str, active: &[usize], standby: &[usize]) -> PortGroupSpec {
        PortGroupSpec {
            mode: Default::default(),
            tuning: Default::default(),
            lacp: Default::default(),
            name: name.into(),
            policy: Policy::PORT_ID,
            order: FailoverOrder {
                active: active.iter().map(|&u| UplinkId(u)).collect(),
                standby: standby.iter().map(|&u| UplinkId(u)).collect(),
            },
            failback: true,
            notify_switches: true,
            vlan: None,
        }
    }

    /// Three uplinks; group a on u1 (standby u3), group b on u3; ports 1-4 in a, 5-6 in b.
    fn team() -> Team {
        let mut t = Team::new(vec![uplink("u1"), uplink("u2"), uplink("u3")], LbtConfig::default()).unwrap();
        t.add_group(group("a", &[0], &[2])).unwrap();
        t.add_group(group("b", &[2], &[])).unwrap();
        for i in 1..=6u8 {
            let spec = PortSpec {
                id: PortId(u32::from(i)),
                mac: MacAddr([2, 0, 0, 0, 0, i]),
                group: GroupId(usize::from(i > 4)),
            };
            t.add_port(spec).unwrap();
        }
        t
    }

    #[test]
    fn an_uplink_added_is_unused_until_a_group_names_it() {
        let mut t = team();
        let u = t.add_uplink(uplink("u4")).unwrap();
        assert_eq!(u, UplinkId(3));
        assert_eq!(t.uplink_count(), 4);
        assert_eq!(t.link_state(u), Some(LinkState::Up));
        assert!(t.ports().all(|p| t.port_uplink(p.id) != Some(u)));
        let order = FailoverOrder {
            active: vec![UplinkId(0), u],
            standby: vec![],
        };
        t.reconfigure_group(GroupId(0), Policy::PORT_ID, order, true, Instant::ZERO)
            .unwrap();
        let on_new = (1..=4).filter(|&i| t.port_uplink(PortId(i)) == Some(u)).count();
        assert!(on_new > 0, "port-ID hashing spreads group a over both active uplinks");
        // Refused, changing nothing.
        assert_eq!(t.add_uplink(uplink("u1")), Err(TeamError::DuplicateUplink("u1".into())));
        let zero = UplinkSpec {
            capacity: Bandwidth::ZERO,
            ..uplink("u9")
        };
        assert_eq!(t.add_uplink(zero), Err(TeamError::ZeroCapacity("u9".into())));
        assert_eq!(t.uplink_count(), 4);
    }

    #[test]
    fn an_uplink_in_a_failover_order_cannot_leave() {
        let mut t = team();
        let e = t.remove_uplink(UplinkId(2)).unwrap_err().to_string();
        assert_eq!(
            e,
            "uplink `u3` is in use: port group `a` lists it in its failover order"
        );
        assert_eq!(t.remove_uplink(UplinkId(7)), Err(TeamError::UnknownUplink(7)));
        assert_eq!(t.uplink_count(), 3);
    }

    /// u2, which no group uses, leaves: u3 becomes index 1 everywhere, and no port moves.
    #[test]
    fn the_uplinks_after_one_removed_are_renumbered_and_nothing_moves() {
        let mut t = team();
        while t.poll_effect().is_some() {}
        let before: Vec<(PortId, Option<String>)> = t
            .ports()
            .map(|p| {
                (
                    p.id,
                    t.port_uplink(p.id).and_then(|u| t.uplink(u)).map(|s| s.name.clone()),
                )
            })
            .collect();
        t.announce(PortId(5));
        assert_eq!(t.remove_uplink(UplinkId(1)).unwrap().name, "u2");
        assert_eq!(t.uplink_count(), 2);
        assert_eq!(t.uplink(UplinkId(1)).unwrap().name, "u3");
        assert_eq!(t.group(GroupId(0)).unwrap().order.standby, vec![UplinkId(1)]);
        assert_eq!(t.group(GroupId(1)).unwrap().order.active, vec![UplinkId(1)]);
        let after: Vec<(PortId, Option<String>)> = t
            .ports()
            .map(|p| {
                (
                    p.id,
                    t.port_uplink(p.id).and_then(|u| t.uplink(u)).map(|s| s.name.clone()),
                )
            })
            .collect();
        assert_eq!(before, after);
        assert_eq!(t.port_home(PortId(5)), Some(UplinkId(1)));
        // The RARP queued for port 5 goes out of u3, under its new index.
        match t.poll_effect() {
            Some(Effect::Transmit { uplink, .. }) => assert_eq!(uplink, UplinkId(1)),
            other => panic!("{other:?}"),
        }
        assert!(t.poll_effect().is_none(), "no move");
        // Failover still works on the renumbered IDs: u1 down sends group a to u3.
        t.set_link(UplinkId(0), LinkState::Down, Instant::ZERO).unwrap();
        assert_eq!(t.port_uplink(PortId(1)), Some(UplinkId(1)));
    }

    /// Failover picks by the uplinks' names, not their indices: with `a` down and its ports
    /// spread over b, c and d, removing the unused `x` before them moves no port.
    #[test]
    fn removing_an_uplink_leaves_failover_choices_alone() {
        let names = ["x", "a", "b", "c", "d"];
        let mut t = Team::new(names.iter().map(|n| uplink(n)).collect(), LbtConfig::default()).unwrap();
        t.add_group(group("g", &[1, 2, 3, 4], &[])).unwrap();
        for i in 1..=200u32 {
            let b = i.to_be_bytes();
            let spec = PortSpec {
                id: PortId(i),
                mac: MacAddr([2, 0, 0, b[1], b[2], b[3]]),
                group: GroupId(0),
            };
            t.add_port(spec).unwrap();
        }
        t.set_link(UplinkId(1), LinkState::Down, Instant::ZERO).unwrap();
        let placed = |t: &Team| -> Vec<String> {
            (1..=200)
                .map(|i| t.uplink(t.port_uplink(PortId(i)).unwrap()).unwrap().name.clone())
                .collect()
        };
        let before = placed(&t);
        t.remove_uplink(UplinkId(0)).unwrap();
        assert_eq!(placed(&t), before);
        // A second failure after the removal: only c's ports move (rendezvous on names).
        t.set_link(UplinkId(2), LinkState::Down, Instant::ZERO).unwrap();
        for (was, now) in before.iter().zip(placed(&t)) {
            assert!(was == "c" || *was == now, "{was} -> {now}");
        }
    }

    #[test]
    fn the_last_uplink_stays() {
        let mut t = Team::new(vec![uplink("u1")], LbtConfig::default()).unwrap();
        assert_eq!(t.remove_uplink(UplinkId(0)), Err(TeamError::NoUplinks));
    }
}
