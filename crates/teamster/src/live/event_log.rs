//! The daemon's log of data-plane events: one line on stderr per event, as text or as JSON.
//!
//! The data plane records events and publishes each to a sink
//! ([`teamster_dp::datapath::AttachOptions::events`]); this module is that sink for the
//! daemon. Text: `   12.345 s  kind: message`. JSON (`--log-format json`, for journald and
//! log shippers): the API's [`EventView`], `{"seq", "t_s", "kind", "message"}`.

use super::snapshot::EventView;
use std::sync::Arc;
use teamster_dp::datapath::{Event, EventSink};

/// One event's log line.
pub fn line(e: &Event, json: bool) -> String {
    if json {
        serde_json::to_string(&EventView::from(e)).expect("an event serialises")
    } else {
        format!("{:>9.3} s  {}: {}", e.at.as_secs_f64(), e.kind, e.message)
    }
}

/// The sink that writes each event to stderr, as JSON lines or as text.
pub fn stderr(json: bool) -> EventSink {
    Arc::new(move |e: &Event| eprintln!("{}", line(e, json)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_core::Instant;

    #[test]
    fn an_event_reads_the_same_as_text_and_as_json() {
        let e = Event {
            seq: 7,
            at: Instant::from_nanos(12_345_000_000),
            kind: "link",
            message: "uplink a: carrier lost".to_string(),
        };
        assert_eq!(line(&e, false), "   12.345 s  link: uplink a: carrier lost");
        let v: serde_json::Value = serde_json::from_str(&line(&e, true)).unwrap();
        assert_eq!(v["seq"], 7);
        assert_eq!(v["kind"], "link");
        assert_eq!(v["message"], "uplink a: carrier lost");
        assert_eq!(v["t_s"], 12.345);
    }
}
