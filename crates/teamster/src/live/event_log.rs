//! The daemon's log of data-plane events: one line on stderr per event, as text or as JSON.
//!
//! The data plane records events and publishes each to a sink
//! ([`teamster_dp::datapath::AttachOptions::events`]); this module is that sink for the
//! daemon. Text: `   12.345 s  kind: message`. JSON (`--log-format json`, for journald and
//! log shippers): `{"t_s", "seq", "kind", "message"}`, the API's event fields.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use teamster_dp::datapath::{Event, EventSink};

/// Whether events are logged as JSON lines; the process's one choice, made at start.
static JSON: AtomicBool = AtomicBool::new(false);

/// Logs events as JSON lines from now on, or as text.
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

/// One event's log line.
pub fn line(e: &Event, json: bool) -> String {
    if json {
        serde_json::json!({
            "t_s": e.at.as_secs_f64(), "seq": e.seq, "kind": e.kind, "message": e.message,
        })
        .to_string()
    } else {
        format!("{:>9.3} s  {}: {}", e.at.as_secs_f64(), e.kind, e.message)
    }
}

/// The sink that writes each event to stderr in the format chosen.
pub fn stderr() -> EventSink {
    Arc::new(|e: &Event| eprintln!("{}", line(e, JSON.load(Ordering::Relaxed))))
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
