//! The team's per-uplink and per-port state that policies read: link state, current and home
//! uplink, and the send and receive meters. Kept apart from the team and the policy trait so that
//! both read it without importing each other.

use super::meter::RateMeter;
use super::{Direction, LinkState, PortSpec, UplinkId, UplinkSpec};
use crate::Instant;

/// Measured send and receive rates in bits/s.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rates {
    pub tx: f64,
    pub rx: f64,
}

/// A send and a receive meter: what the team measures of each uplink and each port.
#[derive(Debug, Clone)]
pub(super) struct Meters {
    tx: RateMeter,
    rx: RateMeter,
}

impl Meters {
    /// Two empty meters shaped like `meter`.
    fn new(meter: &RateMeter) -> Meters {
        Meters {
            tx: meter.clone(),
            rx: meter.clone(),
        }
    }

    /// Counts `bytes` carried in direction `dir` at `now`.
    fn record(&mut self, dir: Direction, bytes: u64, now: Instant) {
        match dir {
            Direction::Tx => self.tx.record(bytes, now),
            Direction::Rx => self.rx.record(bytes, now),
        }
    }

    /// Mean rates over the window before `now`.
    fn rates(&self, now: Instant) -> Rates {
        Rates {
            tx: self.tx.mean_bps(now),
            rx: self.rx.mean_bps(now),
        }
    }

    /// Rates over the window's last complete bucket before `now`.
    fn last(&self, now: Instant) -> Rates {
        Rates {
            tx: self.tx.last_bps(now),
            rx: self.rx.last_bps(now),
        }
    }

    /// Rates over the window's last few buckets before `now`.
    fn recent(&self, now: Instant) -> Rates {
        Rates {
            tx: self.tx.recent_bps(now),
            rx: self.rx.recent_bps(now),
        }
    }
}

/// An uplink of the team: its configuration, link state and meters.
#[derive(Debug, Clone)]
pub(super) struct UplinkState {
    pub(super) spec: UplinkSpec,
    pub(super) link: LinkState,
    /// Its rendezvous salt ([`super::uplink_salt`] of its name), kept: failover reads it per frame.
    pub(super) salt: u64,
    /// False while LACP keeps it out of its bundle (not collecting and distributing, and not
    /// the fallback member); always true for an uplink no LACP group lists.
    pub(super) bundled: bool,
    meters: Meters,
}

impl UplinkState {
    /// A live uplink with empty meters shaped like `meter`.
    pub(super) fn new(spec: UplinkSpec, meter: &RateMeter) -> UplinkState {
        UplinkState {
            salt: super::uplink_salt(&spec.name),
            spec,
            link: LinkState::Up,
            bundled: true,
            meters: Meters::new(meter),
        }
    }

    /// True if it can carry traffic: its link is up and LACP (if it runs) lets it.
    pub(super) fn is_up(&self) -> bool {
        self.link == LinkState::Up && self.bundled
    }

    /// Counts `bytes` carried in direction `dir` at `now`.
    pub(super) fn record(&mut self, dir: Direction, bytes: u64, now: Instant) {
        self.meters.record(dir, bytes, now);
    }

    pub(super) fn rates(&self, now: Instant) -> Rates {
        self.meters.rates(now)
    }
}

/// A port of the team: its configuration, home and current uplink, and meters.
#[derive(Debug, Clone)]
pub(super) struct PortState {
    pub(super) spec: PortSpec,
    pub(super) home: UplinkId,
    pub(super) current: Option<UplinkId>,
    meters: Meters,
}

impl PortState {
    /// A port not yet placed, with empty meters shaped like `meter`.
    pub(super) fn new(spec: PortSpec, home: UplinkId, meter: &RateMeter) -> PortState {
        PortState {
            spec,
            home,
            current: None,
            meters: Meters::new(meter),
        }
    }

    /// Counts `bytes` of this port's traffic in direction `dir` at `now`.
    pub(super) fn record(&mut self, dir: Direction, bytes: u64, now: Instant) {
        self.meters.record(dir, bytes, now);
    }

    pub(super) fn rates(&self, now: Instant) -> Rates {
        self.meters.rates(now)
    }

    pub(super) fn last(&self, now: Instant) -> Rates {
        self.meters.last(now)
    }

    pub(super) fn recent(&self, now: Instant) -> Rates {
        self.meters.recent(now)
    }
}
