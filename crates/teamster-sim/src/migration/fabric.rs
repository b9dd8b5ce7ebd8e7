//! The physical switch that joins the hosts: which member of the receiving host a frame
//! arrives on.
//!
//! Model. The switch is non-blocking, with one port per host uplink, cabled member `i` to port
//! `i` of that host's side. How it forwards into a host depends on the host port group's mode:
//! - switch independent: by destination MAC, to the port where it learned that MAC, which is the
//!   member the receiving port's own frames leave from ([`Team::port_uplink`]). The spreading
//!   policies send on other members under those members' MACs, so a port's MAC is learned on
//!   that one member only, and all its inbound traffic arrives there.
//! - static or LACP: the switch's port channel towards the host spreads frames by its own hash
//!   of addresses and TCP ports over the members it has bundled. That side is itself a Teamster
//!   team (policy `address-hash` over the 4-tuple, the same mode); under LACP it negotiates with
//!   the host's team over the simulated wires, LACPDUs both ways, before the run and throughout.

use teamster_core::host::Host;
use teamster_core::teaming::lacp::LacpSettings;
use teamster_core::teaming::{
    Effect, FailoverOrder, GroupId, LbtConfig, Policy, PortGroupSpec, PortId, PortMove, PortSpec, Team, UplinkId,
};
use teamster_core::wire::{FlowKey, MacAddr};
use teamster_core::Instant;

/// The switch's side facing one host.
#[derive(Debug, Clone)]
pub struct SwitchSide {
    /// The port channels towards the host's switch-dependent groups, if it has any.
    team: Option<Team>,
    /// Per host group, the switch-side port whose frames the port channel distributes.
    fabric: Vec<Option<PortId>>,
}

impl SwitchSide {
    /// The switch's side facing host number `h`: a port channel per switch-dependent group, on
    /// the same members, actively negotiating LACP (fast) where the group runs LACP.
    pub fn new(h: usize, host: &Host) -> Result<SwitchSide, String> {
        let mut groups = Vec::new();
        let mut fabric = vec![None; host.groups.len()];
        for (g, spec) in host.groups.iter().enumerate() {
            if !spec.mode.switch_dependent() {
                continue;
            }
            fabric[g] = Some(PortId(groups.len() as u32 + 1));
            groups.push(PortGroupSpec {
                name: spec.name.clone(),
                policy: Policy::ADDRESS_HASH,
                order: FailoverOrder {
                    active: spec.order.active.clone(),
                    standby: Vec::new(),
                },
                failback: true,
                notify_switches: false,
                vlan: spec.vlan,
                mode: spec.mode,
                tuning: Default::default(),
                lacp: LacpSettings {
                    system: MacAddr([0x02, 0x53, 0x57, 0, 0, h as u8 + 1]),
                    ..LacpSettings::default()
                },
            });
        }
        if groups.is_empty() {
            return Ok(SwitchSide { team: None, fabric });
        }
        let uplinks = host.uplinks.iter().map(|u| (format!("switch-{}", u.name), u.capacity));
        let mut team = Team::with_groups(uplinks, LbtConfig::default(), &groups).map_err(|e| e.to_string())?;
        for (i, _) in groups.iter().enumerate() {
            team.add_port(PortSpec {
                id: PortId(i as u32 + 1),
                mac: MacAddr([0x02, 0x53, 0x57, 1, h as u8, i as u8]),
                group: GroupId(i),
            })
            .map_err(|e| e.to_string())?;
        }
        Ok(SwitchSide {
            team: Some(team),
            fabric,
        })
    }

    /// The member of `host` a frame of `flow` to its port `dst` arrives on, if any.
    pub fn arrival(&self, host: &Team, dst: PortId, flow: &FlowKey) -> Option<UplinkId> {
        let g = host.port_group(dst)?;
        match (&self.team, self.fabric.get(g.0).copied().flatten()) {
            (Some(team), Some(port)) => team.select(port, Some(flow)),
            _ => host.port_uplink(dst),
        }
    }

    /// True if the switch carries traffic into the host on member `u`.
    pub fn usable(&self, u: UplinkId) -> bool {
        self.team.as_ref().is_none_or(|t| t.uplink_usable(u))
    }

    /// Runs both sides' timers due at `now` and delivers the slow-protocol frames each sends to
    /// the other until neither has more to say; returns the host's port moves.
    pub fn exchange(&mut self, host: &mut Team, now: Instant) -> Vec<PortMove> {
        let mut moves = Vec::new();
        if host.poll_at().is_some_and(|t| t <= now) {
            host.handle_timeout(now);
        }
        let Some(side) = self.team.as_mut() else {
            drain(host, &mut moves, |_, _| {});
            return moves;
        };
        if side.poll_at().is_some_and(|t| t <= now) {
            side.handle_timeout(now);
        }
        loop {
            let mut to_side = Vec::new();
            drain(host, &mut moves, |u, f| to_side.push((u, f)));
            let mut to_host = Vec::new();
            drain(side, &mut Vec::new(), |u, f| to_host.push((u, f)));
            if to_side.is_empty() && to_host.is_empty() {
                return moves;
            }
            for (u, f) in to_side {
                side.receive_slow(u, &f, now);
            }
            for (u, f) in to_host {
                host.receive_slow(u, &f, now);
            }
        }
    }

    /// Exchanges LACPDUs in 10 ms steps from `now` until every member of every LACP group is
    /// carrying traffic on both sides; the instant that happened, or an error after 30 s.
    pub fn settle(&mut self, host: &mut Team, mut now: Instant) -> Result<Instant, String> {
        let Some(side) = &self.team else { return Ok(now) };
        let members: Vec<UplinkId> = (0..side.group_count())
            .filter_map(|g| side.group(GroupId(g)))
            .flat_map(|g| g.order.active.clone())
            .collect();
        let limit = now + core::time::Duration::from_secs(30);
        loop {
            self.exchange(host, now);
            let side = self.team.as_ref().expect("checked above");
            if members.iter().all(|&u| side.uplink_usable(u) && host.uplink_usable(u)) {
                return Ok(now);
            }
            if now >= limit {
                return Err("the bundle did not form within 30 s of LACP".into());
            }
            now = now + core::time::Duration::from_millis(10);
        }
    }
}

/// Takes every effect `team` has queued: slow-protocol frames go to `send`, port moves to
/// `moves`, anything else (notify-switch frames) is dropped, as the switch only floods them.
fn drain(team: &mut Team, moves: &mut Vec<PortMove>, mut send: impl FnMut(UplinkId, Vec<u8>)) {
    while let Some(e) = team.poll_effect() {
        match e {
            Effect::Transmit { uplink, frame } if teamster_core::wire::lacp::is_slow(&frame) => send(uplink, frame),
            Effect::PortMoved(m) => moves.push(m),
            Effect::Transmit { .. } => {}
        }
    }
}
