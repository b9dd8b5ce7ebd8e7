//! Traffic sources for packet mode.
//!
//! - `greedy`: keeps its queue full (a bulk sender with a deep socket buffer): it sends until a
//!   frame is refused, holds that frame, and fills the queue again each time a frame leaves its
//!   uplink. Nothing it sends is lost; it is only held back.
//! - `cbr`: one packet every `bytes * 8 / rate` seconds, dropped if the port queue is full.
//! - `tcp-stream`: netperf TCP_STREAM-like. Each of `streams` connections keeps a window of
//!   packets in flight: slow start (+1 per ACK) up to the slow-start threshold, then congestion
//!   avoidance (+1/window per ACK); an ACK returns one `rtt` after the packet leaves the uplink.
//!   A packet dropped at a full port queue is a loss, seen one `rtt` later: the window halves
//!   (at most once per `rtt`) and the packet is sent again. The window is capped at `max_window`.
//! - `tcp-rr`: netperf TCP_RR-like: one transaction at a time. A `request`-byte packet is queued;
//!   the `response` comes back one `rtt` after the request leaves the uplink (the receive path is
//!   not scheduled by NetIOC), and the next request follows at once. Each transaction's latency
//!   (request queued to response received) is recorded.

use serde::Deserialize;
use teamster_core::units::Bandwidth;

/// A source as written in a scenario.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SourceSpec {
    Greedy {
        #[serde(default = "default_bytes")]
        bytes: u32,
    },
    Cbr {
        rate: Bandwidth,
        #[serde(default = "default_bytes")]
        bytes: u32,
    },
    TcpStream {
        #[serde(default = "one")]
        streams: u32,
        #[serde(default = "default_bytes")]
        bytes: u32,
        #[serde(default = "default_rtt")]
        rtt_us: f64,
        #[serde(default = "default_window")]
        max_window: u32,
    },
    TcpRr {
        #[serde(default = "default_rr")]
        request: u32,
        #[serde(default = "default_rr")]
        response: u32,
        #[serde(default = "default_rtt")]
        rtt_us: f64,
    },
}

fn default_bytes() -> u32 {
    1500
}
fn one() -> u32 {
    1
}
fn default_rtt() -> f64 {
    100.0
}
fn default_window() -> u32 {
    512
}
fn default_rr() -> u32 {
    64
}

impl SourceSpec {
    /// Checks sizes and times; the message names the key.
    pub fn check(&self) -> Result<(), String> {
        let bytes = |k: &str, b: u32| {
            if (60..=65_536).contains(&b) {
                Ok(())
            } else {
                Err(format!("{k} = {b}: expected 60 to 65536 bytes"))
            }
        };
        let rtt = |r: f64| {
            if r.is_finite() && r > 0.0 && r <= 1e7 {
                Ok(())
            } else {
                Err(format!("rtt_us = {r}: expected a positive number of microseconds"))
            }
        };
        match self {
            SourceSpec::Greedy { bytes: b } => bytes("bytes", *b),
            SourceSpec::Cbr { rate, bytes: b } => {
                bytes("bytes", *b)?;
                if rate.bps() == 0 {
                    return Err("rate: must be greater than zero".into());
                }
                Ok(())
            }
            SourceSpec::TcpStream {
                streams,
                bytes: b,
                rtt_us,
                max_window,
            } => {
                bytes("bytes", *b)?;
                rtt(*rtt_us)?;
                if !(1..=1024).contains(streams) {
                    return Err(format!("streams = {streams}: expected 1 to 1024"));
                }
                if !(2..=1 << 20).contains(max_window) {
                    return Err(format!("max_window = {max_window}: expected 2 to 1048576 packets"));
                }
                Ok(())
            }
            SourceSpec::TcpRr {
                request,
                response,
                rtt_us,
            } => {
                bytes("request", *request)?;
                bytes("response", *response)?;
                rtt(*rtt_us)
            }
        }
    }
}

/// One TCP connection's congestion state.
#[derive(Debug, Clone)]
pub struct Stream {
    pub cwnd: f64,
    pub ssthresh: f64,
    pub in_flight: u32,
    /// No further halving before this time (one RTT after the last).
    pub recovery_until: f64,
}

impl Stream {
    pub fn new() -> Stream {
        Stream {
            cwnd: 10.0,
            ssthresh: f64::INFINITY,
            in_flight: 0,
            recovery_until: f64::NEG_INFINITY,
        }
    }

    /// Grows the window for one ACK, capped at `max`.
    pub fn on_ack(&mut self, max: u32) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.cwnd += if self.cwnd < self.ssthresh {
            1.0
        } else {
            1.0 / self.cwnd
        };
        self.cwnd = self.cwnd.min(f64::from(max));
    }

    /// Halves the window for a loss seen at `now` (at most once per `rtt`).
    pub fn on_loss(&mut self, now: f64, rtt: f64) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if now >= self.recovery_until {
            self.cwnd = (self.cwnd / 2.0).max(2.0);
            self.ssthresh = self.cwnd;
            self.recovery_until = now + rtt;
        }
    }

    /// Whether the window lets another packet go.
    pub fn may_send(&self) -> bool {
        f64::from(self.in_flight) < self.cwnd.floor()
    }
}

impl Default for Stream {
    fn default() -> Self {
        Stream::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aimd_window() {
        let mut s = Stream::new();
        for _ in 0..10 {
            s.in_flight += 1;
            s.on_ack(64);
        }
        assert_eq!(s.cwnd, 20.0, "slow start doubles per window");
        s.on_loss(1.0, 0.5);
        assert_eq!((s.cwnd, s.ssthresh), (10.0, 10.0));
        s.on_loss(1.2, 0.5);
        assert_eq!(s.cwnd, 10.0, "one halving per RTT");
        for _ in 0..10 {
            s.on_ack(64);
        }
        assert!(
            (s.cwnd - 11.0).abs() < 0.05,
            "congestion avoidance: +1 per window, got {}",
            s.cwnd
        );
        for _ in 0..10_000 {
            s.on_ack(64);
        }
        assert_eq!(s.cwnd, 64.0, "capped at max_window");
    }

    #[test]
    fn checks_name_the_key() {
        assert!(SourceSpec::Greedy { bytes: 10 }
            .check()
            .unwrap_err()
            .starts_with("bytes"));
        let s = SourceSpec::TcpStream {
            streams: 0,
            bytes: 1500,
            rtt_us: 50.0,
            max_window: 64,
        };
        assert!(s.check().unwrap_err().starts_with("streams"));
        let r = SourceSpec::TcpRr {
            request: 64,
            response: 64,
            rtt_us: -1.0,
        };
        assert!(r.check().unwrap_err().starts_with("rtt_us"));
    }
}
