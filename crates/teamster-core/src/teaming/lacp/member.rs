//! One member port's LACP machines (802.1AX): receive, periodic transmission, mux, churn
//! detection and the transmit rate limit. Selection is the group's ([`super::Lacp`]).

use super::settings::{LacpActivity, LacpRate, LacpSettings};
use crate::teaming::UplinkId;
use crate::wire::lacp::{state, LacpInfo, Lacpdu};
use crate::Instant;
use core::time::Duration;
use std::collections::VecDeque;

pub const FAST_PERIODIC: Duration = Duration::from_secs(1);
pub const SLOW_PERIODIC: Duration = Duration::from_secs(30);
pub const SHORT_TIMEOUT: Duration = Duration::from_secs(3);
pub const LONG_TIMEOUT: Duration = Duration::from_secs(90);
pub const AGGREGATE_WAIT: Duration = Duration::from_secs(2);
pub const CHURN_DETECTION: Duration = Duration::from_secs(60);
/// LACPDUs a port may send per fast periodic time.
pub const MAX_TX_PER_PERIOD: usize = 3;
/// Marker Responses a port may send per second: with its LACPDUs, within 802.3's ten
/// slow-protocol frames per second, whatever the partner (or a flood) sends it.
pub const MAX_MARKER_RESPONSES_PER_SECOND: usize = 5;

/// The receive machine's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxState {
    /// The link is down.
    PortDisabled,
    /// The partner's information timed out once: asked to hurry, kept one short timeout more.
    Expired,
    /// No partner: its information is the (empty) default.
    Defaulted,
    /// The partner's information is current.
    Current,
}

/// The mux machine's state (coupled control).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MuxState {
    Detached,
    /// Selected, waiting `AGGREGATE_WAIT` for the other members to join.
    Waiting,
    /// In the aggregate, in sync, waiting for the partner's sync.
    Attached,
    /// Carrying traffic.
    CollectingDistributing,
}

/// The partner's identity an aggregate is chosen by: system priority, system and key, and for
/// a partner port that says it is individual (cannot aggregate) its port number, so that it
/// forms an aggregate of its own.
pub type AggregatorId = (u16, crate::wire::MacAddr, u16, u16);

/// A member's counters, as `ovs-appctl lacp/stats-show` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemberCounters {
    pub rx_lacpdus: u64,
    pub tx_lacpdus: u64,
    /// Slow-protocol frames that did not parse, and LACPDUs from our own system (a loop).
    pub rx_bad: u64,
    pub rx_markers: u64,
    pub tx_marker_responses: u64,
    /// Times the partner's information expired.
    pub expirations: u64,
    /// Times the actor (or the partner) failed to reach sync within the churn detection time.
    pub actor_churns: u64,
    pub partner_churns: u64,
}

/// A member port of an LACP group.
#[derive(Debug, Clone)]
pub struct Member {
    pub uplink: UplinkId,
    /// Its 802.1AX port number, unique in the team and kept while it is a member.
    pub port: u16,
    pub settings: LacpSettings,
    pub link_up: bool,
    pub partner: LacpInfo,
    pub rx: RxState,
    pub mux: MuxState,
    /// The aggregate selection put it in, if any.
    pub selected: Option<AggregatorId>,
    /// The aggregate its mux is attached (or waiting) to.
    attached_to: Option<AggregatorId>,
    current_while: Option<Instant>,
    next_periodic: Option<Instant>,
    wait_until: Option<Instant>,
    actor_churn_at: Option<Instant>,
    partner_churn_at: Option<Instant>,
    pub actor_churn: bool,
    pub partner_churn: bool,
    ntt: bool,
    /// The partner's identity changed since the mux last ran: it detaches first.
    partner_changed: bool,
    sent: VecDeque<Instant>,
    /// When the Marker Responses of the last second went out.
    answered: VecDeque<Instant>,
    pub counters: MemberCounters,
}

/// The fields that identify a side (the aggregation bit included).
fn identity(i: &LacpInfo) -> (u16, crate::wire::MacAddr, u16, u16, u16, bool) {
    (
        i.system_priority,
        i.system,
        i.key,
        i.port_priority,
        i.port,
        i.state & state::AGGREGATION != 0,
    )
}

impl Member {
    /// A member whose link is `link_up` at `now`.
    pub fn new(uplink: UplinkId, port: u16, settings: LacpSettings, link_up: bool, now: Instant) -> Member {
        let mut m = Member {
            uplink,
            port,
            settings,
            link_up: false,
            partner: LacpInfo::default(),
            rx: RxState::PortDisabled,
            mux: MuxState::Detached,
            selected: None,
            attached_to: None,
            current_while: None,
            next_periodic: None,
            wait_until: None,
            actor_churn_at: None,
            partner_churn_at: None,
            actor_churn: false,
            partner_churn: false,
            ntt: false,
            partner_changed: false,
            sent: VecDeque::new(),
            answered: VecDeque::new(),
            counters: MemberCounters::default(),
        };
        m.set_link(link_up, now);
        m
    }

    /// Our side as we send it.
    pub fn actor(&self) -> LacpInfo {
        let s = &self.settings;
        let mut bits = state::AGGREGATION;
        if s.activity == LacpActivity::Active {
            bits |= state::ACTIVITY;
        }
        if s.rate == LacpRate::Fast {
            bits |= state::TIMEOUT;
        }
        match self.mux {
            MuxState::Attached => bits |= state::SYNCHRONIZATION,
            MuxState::CollectingDistributing => {
                bits |= state::SYNCHRONIZATION | state::COLLECTING | state::DISTRIBUTING
            }
            _ => {}
        }
        match self.rx {
            RxState::Defaulted => bits |= state::DEFAULTED,
            RxState::Expired => bits |= state::EXPIRED,
            _ => {}
        }
        LacpInfo {
            system_priority: s.system_priority,
            system: s.system,
            key: s.key,
            port_priority: s.port_priority,
            port: self.port,
            state: bits,
        }
    }

    /// The LACPDU this member sends now.
    pub fn pdu(&self) -> Lacpdu {
        Lacpdu {
            actor: self.actor(),
            partner: self.partner,
            collector_max_delay: 0,
        }
    }

    /// True if the partner says it is in sync with us.
    pub fn partner_in_sync(&self) -> bool {
        self.partner.state & state::SYNCHRONIZATION != 0
    }

    /// True if the mux has attached the member to its aggregate (attached, or collecting and
    /// distributing).
    pub fn attached(&self) -> bool {
        matches!(self.mux, MuxState::Attached | MuxState::CollectingDistributing)
    }

    /// True if the member carries traffic: collecting and distributing on a live link.
    pub fn distributing(&self) -> bool {
        self.link_up && self.mux == MuxState::CollectingDistributing
    }

    /// The link went up or down at `now`: down disables the port (partner forgotten, detached);
    /// up starts it expired, asking the partner to hurry.
    pub fn set_link(&mut self, up: bool, now: Instant) {
        if up == self.link_up && self.rx != RxState::PortDisabled {
            return;
        }
        self.link_up = up;
        if up {
            self.expire(now);
            self.actor_churn_at = Some(now + CHURN_DETECTION);
            self.partner_churn_at = Some(now + CHURN_DETECTION);
            self.next_periodic = Some(now);
        } else {
            self.rx = RxState::PortDisabled;
            // Nothing goes out on a dead link: nothing waits to (no timer for it).
            self.ntt = false;
            self.sent.clear();
            self.partner.state &= !state::SYNCHRONIZATION;
            self.selected = None;
            self.current_while = None;
            self.next_periodic = None;
            self.actor_churn_at = None;
            self.partner_churn_at = None;
        }
    }

    /// The partner's information times out once: it is kept (out of sync) for a short timeout
    /// more, with the partner asked to send fast.
    fn expire(&mut self, now: Instant) {
        self.rx = RxState::Expired;
        self.partner.state &= !state::SYNCHRONIZATION;
        self.partner.state |= state::TIMEOUT;
        self.current_while = Some(now + SHORT_TIMEOUT);
        self.ntt = true;
        self.retime_periodic(now);
    }

    /// Brings the next periodic LACPDU forward if the partner now asks for the fast rate
    /// (802.1AX moves to fast transmission at once; waiting out a slow period would let the
    /// partner time us out).
    fn retime_periodic(&mut self, now: Instant) {
        if let Some(next) = self.next_periodic {
            if next > now + self.periodic_time() {
                self.next_periodic = Some(now + self.periodic_time());
            }
        }
    }

    /// How long our own rate lets the partner's information live.
    fn timeout(&self) -> Duration {
        match self.settings.rate {
            LacpRate::Fast => SHORT_TIMEOUT,
            LacpRate::Slow => LONG_TIMEOUT,
        }
    }

    /// Records a partner's LACPDU received at `now` (802.1AX recordPDU, update_NTT): the
    /// partner's information becomes current, in sync only if its view of us matches, and a
    /// partner whose view of us is out of date is answered at once. (Selection, run right after,
    /// moves the port if the partner's system or key changed.)
    pub fn receive(&mut self, pdu: &Lacpdu, now: Instant) {
        if !self.link_up {
            return;
        }
        if pdu.actor.system == self.settings.system {
            // Our own PDU looped back (two members on one segment): never our partner.
            self.counters.rx_bad += 1;
            return;
        }
        self.counters.rx_lacpdus += 1;
        let me = self.actor();
        let individual = pdu.actor.state & state::AGGREGATION == 0;
        let matched = identity(&pdu.partner) == identity(&me) || individual;
        // Another partner port (or priority) than the one we attached with, under the same
        // system and key: 802.1AX's update_Selected unselects the port, so it detaches and
        // waits again before it carries traffic (a recabled link is not trusted at once).
        let known = self.partner.system != crate::wire::MacAddr::default();
        if known && identity(&self.partner) != identity(&pdu.actor) {
            self.partner_changed = true;
        }
        self.partner = pdu.actor;
        if !(matched && pdu.actor.state & state::SYNCHRONIZATION != 0) {
            self.partner.state &= !state::SYNCHRONIZATION;
        }
        let mask = state::ACTIVITY | state::TIMEOUT | state::SYNCHRONIZATION | state::AGGREGATION;
        if identity(&pdu.partner) != identity(&me) || (pdu.partner.state & mask) != (me.state & mask) {
            self.ntt = true;
        }
        self.rx = RxState::Current;
        self.current_while = Some(now + self.timeout());
        self.retime_periodic(now);
    }

    /// The aggregate a partner offers while its information is current or just expired (an
    /// expired member stays in its aggregate, out of sync, and is back at the partner's next
    /// LACPDU without a new aggregate wait): its system and key's, or, if the partner port is
    /// individual, one of its own.
    pub fn offer(&self) -> Option<AggregatorId> {
        let individual = self.partner.state & state::AGGREGATION == 0;
        let heard = matches!(self.rx, RxState::Current | RxState::Expired);
        (self.link_up && heard && self.partner.system != crate::wire::MacAddr::default()).then_some((
            self.partner.system_priority,
            self.partner.system,
            self.partner.key,
            if individual { self.partner.port.max(1) } else { 0 },
        ))
    }

    /// Runs the timers due at `now`: expiry of the partner's information, periodic
    /// transmission, the aggregate wait and churn detection.
    pub fn on_timers(&mut self, now: Instant) {
        if let Some(t) = self.current_while.filter(|t| *t <= now) {
            let _ = t;
            match self.rx {
                RxState::Current => {
                    self.counters.expirations += 1;
                    self.expire(now);
                }
                RxState::Expired => {
                    self.rx = RxState::Defaulted;
                    self.partner = LacpInfo {
                        state: state::TIMEOUT,
                        ..LacpInfo::default()
                    };
                    self.selected = None;
                    self.current_while = None;
                }
                _ => self.current_while = None,
            }
        }
        if let Some(t) = self.next_periodic.filter(|t| *t <= now) {
            let _ = t;
            if self.sends_periodically() {
                self.ntt = true;
            }
            self.next_periodic = Some(now + self.periodic_time());
        }
        if self.actor_churn_at.is_some_and(|t| t <= now) {
            self.actor_churn_at = None;
            if self.mux == MuxState::Detached || self.mux == MuxState::Waiting {
                self.actor_churn = true;
                self.counters.actor_churns += 1;
            }
        }
        if self.partner_churn_at.is_some_and(|t| t <= now) {
            self.partner_churn_at = None;
            if !self.partner_in_sync() {
                self.partner_churn = true;
                self.counters.partner_churns += 1;
            }
        }
    }

    /// True if LACPDUs go out periodically: unless both sides are passive.
    fn sends_periodically(&self) -> bool {
        self.settings.activity == LacpActivity::Active || self.partner.state & state::ACTIVITY != 0
    }

    /// The partner's timeout bit chooses our periodic rate.
    fn periodic_time(&self) -> Duration {
        if self.partner.state & state::TIMEOUT != 0 {
            FAST_PERIODIC
        } else {
            SLOW_PERIODIC
        }
    }

    /// Steps the mux machine (coupled control) to where the selection and the partner's sync
    /// say, asking for a transmission at each change of our sync, collecting or distributing.
    pub fn run_mux(&mut self, now: Instant) {
        if std::mem::take(&mut self.partner_changed) && self.mux != MuxState::Detached {
            self.mux = MuxState::Detached;
            self.attached_to = None;
            self.wait_until = None;
            self.ntt = true;
        }
        loop {
            let next = match self.mux {
                MuxState::Detached if self.selected.is_some() => {
                    self.attached_to = self.selected;
                    self.wait_until = Some(now + AGGREGATE_WAIT);
                    MuxState::Waiting
                }
                MuxState::Waiting if self.selected != self.attached_to => MuxState::Detached,
                MuxState::Waiting if self.wait_until.is_some_and(|t| t <= now) => MuxState::Attached,
                MuxState::Attached if self.selected != self.attached_to => MuxState::Detached,
                MuxState::Attached if self.partner_in_sync() => MuxState::CollectingDistributing,
                MuxState::CollectingDistributing if self.selected != self.attached_to || !self.partner_in_sync() => {
                    MuxState::Attached
                }
                _ => break,
            };
            if next == MuxState::Detached {
                self.attached_to = None;
                self.wait_until = None;
            }
            if next != MuxState::Waiting {
                self.ntt = true;
            }
            self.mux = next;
        }
        if matches!(self.mux, MuxState::Attached | MuxState::CollectingDistributing) {
            self.actor_churn = false;
            self.actor_churn_at = None;
        }
        if self.partner_in_sync() {
            self.partner_churn = false;
            self.partner_churn_at = None;
        }
    }

    /// True if an LACPDU may go out at all: the link is up, and we or the partner are active
    /// (or the partner, passive, just spoke to us).
    fn may_transmit(&self) -> bool {
        self.link_up && (self.sends_periodically() || self.rx == RxState::Current)
    }

    /// The LACPDU to send at `now`, if one is due and the rate limit allows it.
    pub fn transmit(&mut self, now: Instant) -> Option<Lacpdu> {
        while self
            .sent
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= FAST_PERIODIC)
        {
            self.sent.pop_front();
        }
        if !self.ntt || !self.may_transmit() {
            return None;
        }
        if self.sent.len() >= MAX_TX_PER_PERIOD {
            return None;
        }
        self.ntt = false;
        self.sent.push_back(now);
        self.counters.tx_lacpdus += 1;
        Some(self.pdu())
    }

    /// Whether a Marker received at `now` gets its response: at most
    /// [`MAX_MARKER_RESPONSES_PER_SECOND`] in any second; the rest are counted, not answered.
    pub fn answer_marker(&mut self, now: Instant) -> bool {
        self.counters.rx_markers += 1;
        while self
            .answered
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= Duration::from_secs(1))
        {
            self.answered.pop_front();
        }
        if !self.link_up || self.answered.len() >= MAX_MARKER_RESPONSES_PER_SECOND {
            return false;
        }
        self.answered.push_back(now);
        self.counters.tx_marker_responses += 1;
        true
    }

    /// When this member next has timed work.
    pub fn poll_at(&self) -> Option<Instant> {
        let rate_limited = (self.ntt && self.may_transmit() && self.sent.len() >= MAX_TX_PER_PERIOD)
            .then(|| self.sent.front().map(|t| *t + FAST_PERIODIC))
            .flatten();
        [
            self.current_while,
            self.next_periodic,
            self.wait_until.filter(|_| self.mux == MuxState::Waiting),
            self.actor_churn_at,
            self.partner_churn_at,
            rate_limited,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}
