//! What happened: the data plane's events and its ports' moves between uplinks.
//!
//! Model. Each event (`start`, `link`, `attach`, `port`, `move`, `config`, `rx`) gets the next
//! sequence number and goes to the sink the data plane was attached with, as it happens (the
//! daemon logs it: `teamster::live::event_log`), and into a ring of the most recent
//! [`EVENTS_KEPT`] that the control plane publishes. Each move of a port between uplinks is
//! kept the same way (the most recent [`MOVES_KEPT`]), and counted by its reason for ever.
//! The data plane itself writes nothing anywhere.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use teamster_core::Instant;

/// Events kept (the most recent).
pub const EVENTS_KEPT: usize = 1000;
/// Port moves kept (the most recent; their counts by reason are kept for ever).
pub const MOVES_KEPT: usize = 1000;

/// Something that happened, for logs and the control plane.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Increases by one per event since start.
    pub seq: u64,
    pub at: Instant,
    /// `start`, `link`, `attach`, `move` or `config`.
    pub kind: &'static str,
    pub message: String,
}

/// A port's move between uplinks, by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub at: Instant,
    pub port: String,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
}

/// Where events go as they happen, beside the ring of recent ones.
pub type EventSink = Arc<dyn Fn(&Event) + Send + Sync>;

/// The rings of recent events and moves (see the module documentation).
pub(super) struct History {
    events: VecDeque<Event>,
    next_seq: u64,
    sink: Option<EventSink>,
    moves: VecDeque<Move>,
    moves_by_reason: BTreeMap<String, u64>,
}

impl History {
    pub fn new(sink: Option<EventSink>) -> History {
        History {
            events: VecDeque::new(),
            next_seq: 0,
            sink,
            moves: VecDeque::new(),
            moves_by_reason: BTreeMap::new(),
        }
    }

    /// Records an event: the sink is told, the ring keeps it.
    pub fn record(&mut self, now: Instant, kind: &'static str, message: String) {
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        let event = Event {
            seq: self.next_seq,
            at: now,
            kind,
            message,
        };
        if let Some(sink) = &self.sink {
            sink(&event);
        }
        self.events.push_back(event);
        self.next_seq += 1;
    }

    /// Records a port's move, and counts it by its reason (the text before any `:`).
    pub fn record_move(&mut self, m: Move) {
        let reason = m.reason.split(':').next().unwrap_or_default().to_string();
        *self.moves_by_reason.entry(reason).or_default() += 1;
        if self.moves.len() == MOVES_KEPT {
            self.moves.pop_front();
        }
        self.moves.push_back(m);
    }

    pub fn events(&self) -> std::collections::vec_deque::Iter<'_, Event> {
        self.events.iter()
    }

    pub fn moves(&self) -> std::collections::vec_deque::Iter<'_, Move> {
        self.moves.iter()
    }

    /// Moves since start, by reason.
    pub fn moves_by_reason(&self) -> &BTreeMap<String, u64> {
        &self.moves_by_reason
    }

    /// The last `n` events and the last `m` moves, oldest first.
    pub fn recent(&self, n: usize, m: usize) -> (Vec<Event>, Vec<Move>) {
        let events = self
            .events
            .iter()
            .skip(self.events.len().saturating_sub(n))
            .cloned()
            .collect();
        let moves = self
            .moves
            .iter()
            .skip(self.moves.len().saturating_sub(m))
            .cloned()
            .collect();
        (events, moves)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The sink hears every event as it happens; the rings keep the most recent only.
    #[test]
    fn events_reach_the_sink_and_the_rings_are_bounded() {
        let heard = Arc::new(Mutex::new(0u64));
        let h2 = heard.clone();
        let mut h = History::new(Some(Arc::new(move |_: &Event| *h2.lock().unwrap() += 1)));
        for i in 0..EVENTS_KEPT + 5 {
            h.record(Instant::ZERO, "link", format!("event {i}"));
            h.record_move(Move {
                at: Instant::ZERO,
                port: "vm1".into(),
                from: None,
                to: Some("u1".into()),
                reason: format!("lbt: {i}"),
            });
        }
        assert_eq!(*heard.lock().unwrap(), (EVENTS_KEPT + 5) as u64);
        assert_eq!(h.events().len(), EVENTS_KEPT);
        assert_eq!(h.events().next().unwrap().seq, 5, "the oldest went first");
        assert_eq!(h.moves().len(), MOVES_KEPT);
        assert_eq!(h.moves_by_reason()["lbt"], (MOVES_KEPT + 5) as u64, "counted for ever");
        let (e, m) = h.recent(3, 2);
        assert_eq!((e.len(), m.len()), (3, 2));
        assert_eq!(e[2].message, format!("event {}", EVENTS_KEPT + 4));
    }
}
