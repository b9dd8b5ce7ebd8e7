//! LACP (IEEE 802.1AX, formerly 802.3ad): the team's side of a negotiated bundle.
//!
//! Model. Every uplink in the failover order of a port group whose mode is `lacp` is a
//! *member*, running its own machines ([`member`]): the receive machine keeps the partner's
//! information current for three of our periodic times (3 s fast, 90 s slow), then *expired*
//! (out of sync, the partner asked to hurry) for one short timeout, then *defaulted* (no
//! partner); the periodic machine sends an LACPDU every 1 s or 30 s as the partner's timeout
//! bit asks (none if both sides are passive); the mux machine (coupled control) goes detached,
//! waiting (2 s), attached (our sync set), and collecting-and-distributing once the partner is
//! in sync too; churn detection flags a side that has not reached sync 60 s after the link came
//! up. LACPDUs are sent when something changed or the periodic time came, at most three per
//! second per member; a Marker PDU is answered with a Marker Response, at most five a second per
//! member (with the LACPDUs, within 802.3's ten slow-protocol frames a second).
//!
//! Selection. Members with the same actor system and key form one active aggregate: among
//! those whose partner information is current (or just expired), the ones that share the most common partner (system
//! priority, system ID and key) and link capacity are selected (ties to the one holding the
//! lowest port number); a partner port that says it is individual forms an aggregate of its own
//! (used only if no larger aggregate exists). Every other member is unselected, so a member
//! cabled to another switch, or whose partner has another key or speed, is left out of the
//! bundle. Only members
//! collecting and distributing carry traffic: the team sees the others as down (failover moves
//! their ports, exactly as on carrier loss).
//!
//! Fallback. While no member of an aggregate is distributing, none hears a partner and one has
//! given up (defaulted: no partner speaks LACP), the group's [`LacpFallback`] applies:
//! active/backup (the first live member, in failover order, carries traffic alone) or down
//! (no member carries the group's traffic). What arrives on a member outside the bundle
//! (detached or waiting) is dropped; a member still attached but not collecting (its partner
//! went quiet) keeps taking frames, since a partner that still hears us keeps sending there.
//!
//! Sans-IO like the team: time is passed in, LACPDUs to send are returned, and the team turns
//! member states into uplink usability.

pub mod member;
pub mod settings;
#[cfg(test)]
mod tests;

pub use member::{AggregatorId, Member, MemberCounters, MuxState, RxState};
pub use settings::{LacpActivity, LacpFallback, LacpRate, LacpSettings};

use super::UplinkId;
use crate::wire::lacp::{build_lacpdu, build_marker_response, parse_slow, SlowPdu};
use crate::Instant;

/// Our side of an aggregate: system priority, system ID and key.
type ActorId = (u16, crate::wire::MacAddr, u16);

fn actor_id(m: &Member) -> ActorId {
    (m.settings.system_priority, m.settings.system, m.settings.key)
}

/// The LACP members of a team (see the [module documentation](self)).
#[derive(Debug, Clone, Default)]
pub struct Lacp {
    members: Vec<Member>,
    /// Each member's capacity in bits/s, for selection.
    capacities: Vec<(UplinkId, u64)>,
}

/// A member to run, as the team's groups list it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemberPlan {
    pub uplink: UplinkId,
    pub settings: LacpSettings,
    pub link_up: bool,
    /// Its capacity in bits/s: members of one aggregate must match.
    pub capacity_bps: u64,
}

impl Lacp {
    /// Every member, in failover order of the groups that list them.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The member on uplink `u`, if it runs LACP.
    pub fn member(&self, u: UplinkId) -> Option<&Member> {
        self.members.iter().find(|m| m.uplink == u)
    }

    /// Makes the members those of `plans` at `now`: new ones start, gone ones stop, and one
    /// whose settings changed starts afresh (its partner sees a new actor). Returns the uplinks
    /// that stopped running LACP.
    pub fn set_members(&mut self, plans: &[MemberPlan], now: Instant) -> Vec<UplinkId> {
        let gone: Vec<UplinkId> = self
            .members
            .iter()
            .filter(|m| !plans.iter().any(|p| p.uplink == m.uplink))
            .map(|m| m.uplink)
            .collect();
        let mut next = Vec::with_capacity(plans.len());
        for p in plans {
            match self.members.iter().position(|m| m.uplink == p.uplink) {
                Some(i) if self.members[i].settings == p.settings => next.push(self.members[i].clone()),
                found => {
                    let port = found.map(|i| self.members[i].port).unwrap_or_else(|| {
                        let used: Vec<u16> = self.members.iter().chain(&next).map(|m| m.port).collect();
                        (1..=u16::MAX).find(|n| !used.contains(n)).unwrap_or(u16::MAX)
                    });
                    next.push(Member::new(p.uplink, port, p.settings, p.link_up, now));
                }
            }
        }
        self.members = next;
        self.capacities = plans.iter().map(|p| (p.uplink, p.capacity_bps)).collect();
        self.run(now);
        gone
    }

    /// Uplink `u`'s carrier changed at `now`.
    pub fn set_link(&mut self, u: UplinkId, up: bool, now: Instant) {
        if let Some(m) = self.members.iter_mut().find(|m| m.uplink == u) {
            m.set_link(up, now);
            self.run(now);
        }
    }

    /// A slow-protocol frame arrived on member `u` at `now`; returns a Marker Response to send,
    /// if it was a Marker.
    pub fn receive(&mut self, u: UplinkId, frame: &[u8], now: Instant) -> Option<Vec<u8>> {
        let m = self.members.iter_mut().find(|m| m.uplink == u)?;
        match parse_slow(frame) {
            Ok(SlowPdu::Lacp(pdu)) => {
                m.receive(&pdu, now);
                self.run(now);
                None
            }
            Ok(SlowPdu::Marker(marker)) if !marker.response => m
                .answer_marker(now)
                .then(|| build_marker_response(m.settings.system, &marker)),
            Ok(SlowPdu::Marker(_)) => {
                m.counters.rx_markers += 1;
                None
            }
            Err(_) => {
                m.counters.rx_bad += 1;
                None
            }
        }
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for m in &mut self.members {
            m.on_timers(now);
        }
        self.run(now);
    }

    /// When a member next has timed work.
    pub fn poll_at(&self) -> Option<Instant> {
        self.members.iter().filter_map(Member::poll_at).min()
    }

    /// The LACPDUs due at `now`, each with the uplink it goes out on.
    pub fn transmit(&mut self, now: Instant) -> Vec<(UplinkId, Vec<u8>)> {
        self.members
            .iter_mut()
            .filter_map(|m| {
                m.transmit(now)
                    .map(|pdu| (m.uplink, build_lacpdu(m.settings.system, &pdu)))
            })
            .collect()
    }

    /// Selection, then every member's mux.
    fn run(&mut self, now: Instant) {
        self.select();
        for m in &mut self.members {
            m.run_mux(now);
        }
    }

    /// The actor aggregators there are: each distinct (system priority, system, key) of ours.
    fn actors(&self) -> Vec<ActorId> {
        let mut ids: Vec<ActorId> = self.members.iter().map(actor_id).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Chooses each actor aggregator's partner aggregate (see the [module documentation](self)).
    fn select(&mut self) {
        let capacity =
            |u: UplinkId, caps: &[(UplinkId, u64)]| caps.iter().find(|(c, _)| *c == u).map_or(0, |(_, bps)| *bps);
        for key in self.actors() {
            let offers: Vec<(usize, (AggregatorId, u64))> = self
                .members
                .iter()
                .enumerate()
                .filter(|(_, m)| actor_id(m) == key)
                .filter_map(|(i, m)| m.offer().map(|o| (i, (o, capacity(m.uplink, &self.capacities)))))
                .collect();
            let count = |c: &(AggregatorId, u64)| offers.iter().filter(|(_, o)| o == c).count();
            let lowest_port = |c: &(AggregatorId, u64)| {
                offers
                    .iter()
                    .filter(|(_, o)| o == c)
                    .map(|(i, _)| self.members[*i].port)
                    .min()
            };
            let best = offers
                .iter()
                .map(|(_, o)| *o)
                .max_by(|a, b| count(a).cmp(&count(b)).then(lowest_port(b).cmp(&lowest_port(a))));
            for (i, m) in self.members.iter_mut().enumerate() {
                if actor_id(m) != key {
                    continue;
                }
                let mine = offers.iter().find(|(j, _)| *j == i).map(|(_, o)| *o);
                m.selected = match (mine, best) {
                    (Some(o), Some(b)) if o == b => Some(o.0),
                    _ => None,
                };
            }
        }
    }

    /// The members that may carry traffic: those distributing, or under an aggregate's
    /// fallback its first live member (see the [module documentation](self)).
    pub fn usable(&self) -> Vec<(UplinkId, bool)> {
        let mut out: Vec<(UplinkId, bool)> = self.members.iter().map(|m| (m.uplink, m.distributing())).collect();
        for key in self.actors() {
            let of_key = || self.members.iter().filter(move |m| actor_id(m) == key);
            let negotiated = of_key().any(Member::distributing);
            let live: Vec<&Member> = of_key().filter(|m| m.link_up).collect();
            // No partner heard on any live member, one of them given up on (a member whose link
            // just came up, expired for a moment, does not end a fallback under way).
            let unanswered =
                live.iter().all(|m| m.rx != RxState::Current) && live.iter().any(|m| m.rx == RxState::Defaulted);
            // The first live member that gave up carries it (not one whose link just came up).
            let first = live.iter().find(|m| m.rx == RxState::Defaulted);
            if let (false, true, Some(m)) = (negotiated, unanswered, first) {
                if m.settings.fallback == LacpFallback::ActiveBackup {
                    if let Some(o) = out.iter_mut().find(|(u, _)| *u == m.uplink) {
                        o.1 = true;
                    }
                }
            }
        }
        out
    }

    /// True if `u`'s aggregate is falling back (no partner anywhere).
    pub fn falling_back(&self, u: UplinkId) -> bool {
        let Some(m) = self.member(u) else { return false };
        let usable = self.usable();
        !m.distributing() && usable.iter().any(|(v, ok)| *v == u && *ok)
    }

    /// Uplink `removed` left the team: IDs above it move down one.
    pub fn uplink_removed(&mut self, removed: UplinkId) {
        let renumber = |u: &mut UplinkId| u.after_removal(removed).map(|new| *u = new).is_some();
        self.members.retain_mut(|m| renumber(&mut m.uplink));
        self.capacities.retain_mut(|(u, _)| renumber(u));
    }
}
