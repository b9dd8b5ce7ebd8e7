//! What the control plane reads of the data plane: a copy taken between packets.
//!
//! Model. The switching worker copies, at one instant, the state an operator looks at (the
//! team with its meters and link states, the NetIOC tree, every port's and uplink's counters,
//! drops, attachment and queue, the most recent moves and events) into a [`Published`] value
//! and hands it to another thread; everything built from it (allocations, snapshots, JSON, the
//! status file) happens there. The copy costs the data plane one pass over ports and uplinks
//! and one clone of the team and the tree; the rest of the control plane's work never runs on
//! a data-plane thread, and nothing is shared, so nothing is locked.

use super::{Datapath, Event, ExtraDrops, Move, PortPlan, UplinkPlan};
use crate::platform::Platform;
use teamster_core::ioc::Tree;
use teamster_core::switch::Counters;
use teamster_core::teaming::{Team, UplinkId};
use teamster_core::Instant;

/// A port as the control plane sees it.
#[derive(Debug, Clone)]
pub struct PortState {
    pub plan: PortPlan,
    pub attached: bool,
    /// The backend in use while attached.
    pub backend: Option<String>,
    /// The data-plane thread doing its I/O while attached.
    pub worker: Option<usize>,
    pub extra: ExtraDrops,
    /// Frames from it marked Congestion Experienced in the switch's receive queue.
    pub ecn_marked: u64,
    /// What its NetIOC queues did with its frames.
    pub queue: super::QueueTally,
    /// The core switch's counters, once it has seen traffic.
    pub counters: Option<Counters>,
    /// Where it stands with its MAC (owned, waiting for a host outside, detached).
    pub mac_claim: Option<teamster_core::switch::Claim>,
}

/// An uplink as the control plane sees it.
#[derive(Debug, Clone)]
pub struct UplinkState {
    pub plan: UplinkPlan,
    pub attached: bool,
    pub backend: Option<String>,
    pub carrier: bool,
    pub extra: ExtraDrops,
    pub ecn_marked: u64,
    pub counters: Option<Counters>,
    /// Frames waiting in its scheduler, all ports together.
    pub queued_frames: u64,
    /// Bytes (on the wire) waiting in its scheduler.
    pub queued_bytes: u64,
    /// Its queue's byte budget.
    pub queue_budget: u64,
    /// Its receive queues, with more than one configured.
    pub rx: Option<super::RxState>,
}

/// This host's VTEP address, and each remote VTEP with the MAC ARP found for it.
pub type VtepState = (
    core::net::Ipv4Addr,
    Vec<(core::net::Ipv4Addr, Option<teamster_core::wire::MacAddr>)>,
);

/// The data plane's state at one instant, for the control plane.
#[derive(Debug, Clone)]
pub struct Published {
    pub at: Instant,
    pub team: Team,
    pub tree: Tree,
    pub ports: Vec<PortState>,
    pub uplinks: Vec<UplinkState>,
    /// The most recent moves, oldest first.
    pub moves: Vec<Move>,
    /// Port moves since start, by the reason's first word.
    pub moves_by_reason: std::collections::BTreeMap<String, u64>,
    /// The most recent events, oldest first.
    pub events: Vec<Event>,
    pub failovers: u64,
    /// This host's VTEP address and each remote VTEP with the MAC ARP found for it, if any
    /// port group is an overlay.
    pub vtep: Option<VtepState>,
    /// The most recent moves of NetQueue filters between receive queues, oldest first.
    pub rx_events: Vec<super::RxEvent>,
    /// NetQueue filter moves since start, by reason (`pack`, `spread`).
    pub rx_moves: std::collections::BTreeMap<&'static str, u64>,
    /// Which data plane switches the frames: `kernel` (a fast path) or `userspace`.
    pub data_plane: &'static str,
}

impl<P: Platform> Datapath<P> {
    /// Copies what the control plane shows, with at most `moves` moves and `events` events
    /// (the most recent).
    pub fn publish(&self, now: Instant, moves: usize, events: usize) -> Published {
        let ports = self
            .present_ports()
            .map(|p| PortState {
                plan: p.plan.clone(),
                attached: p.attached(),
                backend: p.backend(),
                worker: p.worker(),
                extra: p.extra.clone(),
                ecn_marked: p.ecn_marked,
                queue: p.queue,
                counters: self.switch.port_counters(p.plan.id).cloned(),
                mac_claim: self.switch.mac_claim(p.plan.id),
            })
            .collect();
        let uplinks = self
            .uplinks
            .iter()
            .enumerate()
            .map(|(i, u)| UplinkState {
                plan: u.plan.clone(),
                attached: u.attached(),
                backend: u.backend(),
                carrier: u.carrier,
                extra: u.extra.clone(),
                ecn_marked: u.ecn_marked,
                counters: self.switch.uplink_counters(UplinkId(i)).cloned(),
                queued_frames: self
                    .present_ports()
                    .map(|p| self.ioc.queued(i, p.plan.leaf) as u64)
                    .sum(),
                queued_bytes: self.ioc.queued_bytes(i),
                queue_budget: self.ioc.budget(i),
                rx: self.rx_state(i),
            })
            .collect();
        let (recent_events, recent_moves) = self.history.recent(events, moves);
        Published {
            at: now,
            team: self.switch.team().clone(),
            tree: self.ioc.tree().clone(),
            ports,
            uplinks,
            moves: recent_moves,
            moves_by_reason: self.history.moves_by_reason().clone(),
            events: recent_events,
            failovers: self.failovers,
            vtep: self.switch.vtep().map(|v| (v.local(), self.switch.vtep_neighbors())),
            rx_events: self.recent_rx_events(events),
            rx_moves: self.rx_moves.clone(),
            data_plane: if self.platform.fast_path().is_some() {
                "kernel"
            } else {
                "userspace"
            },
        }
    }
}
