//! The `[rx]` section: how each uplink's received frames are spread over the data-plane
//! threads (see `teamster_dp::datapath`'s `rx_queues` for the model).
//!
//! ```toml
//! [rx]
//! queues = 2                 # receive queues per uplink, 1-16 (1: no spreading, the default)
//! steering = "rss"           # "rss", "netqueue" or "dynamic_netqueue"
//! rss_key = "6d5a56da..."    # 40 bytes in hex (Microsoft's key by default)
//! indirection = 128          # RSS table entries, 1-256, spreading the queues round robin
//! hash_udp = false           # RSS: hash UDP's ports too (off: fragments would hash two ways)
//! # Dynamic NetQueue's packing: a queue's load is its frames per second / its capacity
//! # queue_pps = 250000       # a fixed capacity, frames/s; absent (the default): each queue's
//! #                          # is measured from the thread reading it (see below)
//! interval_ms = 1000         # how often the filters are measured and repacked
//! spread_above = 0.8         # a queue over this spreads its filters out
//! pack_below = 0.4           # a queue under this is emptied into the others ...
//! pack_target = 0.7          # ... if they stay under this
//! ```
//!
//! A queue's capacity is what the thread reading it receives at full load: without `queue_pps`
//! it is measured, each round, from that thread's time at work per frame it received (its
//! switching, sending and everything else per frame included; `teamster_dp::datapath`'s
//! `thread_load`), so a queue's load is the share of its thread's time its frames take, and a
//! queue whose thread is saturated reads near 100% on any host and build. Until a round has
//! had enough frames to measure, 250,000 frames/s stands.
//!
//! Queues past the first are read by port workers, so more than one needs `workers` of 2 or
//! more; they are AF_PACKET sockets of one fanout group, so an uplink with `backend = "af_xdp"`
//! cannot have them (with `auto`, such an uplink uses AF_PACKET). Every error names its key.

use serde::{Deserialize, Serialize};
use teamster_core::rx::netqueue::{Packing, Placement};
use teamster_core::rx::{Indirection, RssConfig, RssKey};
use teamster_dp::datapath::{RxPlan, Steering, MAX_RX_QUEUES};
use teamster_dp::steer::MAX_LIVE_TABLE;

/// A queue's capacity until the thread reading it is measured (or always, as `queue_pps`
/// gives it), frames per second: AF_PACKET on a shared core of a release build
/// (`bench/live/RESULTS.md`); a debug build or a busy host does far less, hence the measure.
pub const DEFAULT_QUEUE_PPS: f64 = 250_000.0;

/// How received frames choose a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SteeringSetting {
    #[default]
    Rss,
    Netqueue,
    DynamicNetqueue,
}

/// The `[rx]` section as written.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RxSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<u64>,
    #[serde(default)]
    pub steering: SteeringSetting,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indirection: Option<u64>,
    #[serde(default)]
    pub hash_udp: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_pps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_above: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack_below: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack_target: Option<f64>,
}

impl RxSection {
    pub fn is_default(&self) -> bool {
        *self == RxSection::default()
    }

    /// The receive queues per uplink asked for (1 unless set).
    pub fn queue_count(&self) -> usize {
        self.queues.map_or(1, |q| q as usize)
    }
}

/// Checks `[rx]` for a switch of `workers` data-plane threads whose uplinks use `backends`
/// (each uplink's name and whether it asks for AF_XDP explicitly).
pub fn rx_plan(rx: &RxSection, workers: usize, backends: &[(String, bool)]) -> Result<RxPlan, String> {
    let queues = match rx.queues {
        None => 1,
        Some(q) if (1..=MAX_RX_QUEUES as u64).contains(&q) => q as usize,
        Some(q) => return Err(format!("rx.queues = {q}: expected 1 to {MAX_RX_QUEUES}")),
    };
    if queues > 1 && workers < 2 {
        return Err(format!(
            "rx.queues = {queues}: queues past the first are read by port workers; set workers = 2 or more"
        ));
    }
    if queues > 1 {
        if let Some((name, _)) = backends.iter().find(|(_, xdp)| *xdp) {
            return Err(format!(
                "rx.queues = {queues}: uplink `{name}` uses backend = \"af_xdp\", which receives on one queue; use \"af_packet\" or \"auto\""
            ));
        }
    }
    let mut rss = RssConfig::new(queues)?;
    if let Some(hex) = &rx.rss_key {
        rss.key = RssKey::parse_hex(hex).map_err(|e| format!("rx.rss_key: {e}"))?;
    }
    if let Some(n) = rx.indirection {
        if !(1..=MAX_LIVE_TABLE as u64).contains(&n) {
            return Err(format!("rx.indirection = {n}: expected 1 to {MAX_LIVE_TABLE} entries"));
        }
        if (n as usize) < queues {
            return Err(format!(
                "rx.indirection = {n}: fewer entries than rx.queues = {queues}, so some queues would never receive"
            ));
        }
        rss.table = Indirection::round_robin(n as usize, queues).map_err(|e| format!("rx.indirection: {e}"))?;
    }
    rss.types.udp_ipv4 = rx.hash_udp;
    rss.types.udp_ipv6 = rx.hash_udp;
    let packing_set = rx.queue_pps.is_some()
        || rx.interval_ms.is_some()
        || rx.spread_above.is_some()
        || rx.pack_below.is_some()
        || rx.pack_target.is_some();
    if packing_set && rx.steering != SteeringSetting::DynamicNetqueue {
        return Err("rx: queue_pps, interval_ms, spread_above, pack_below and pack_target are Dynamic NetQueue's: set steering = \"dynamic_netqueue\"".to_string());
    }
    let rss_set = rx.rss_key.is_some() || rx.indirection.is_some() || rx.hash_udp;
    if rss_set && rx.steering != SteeringSetting::Rss {
        return Err("rx: rss_key, indirection and hash_udp are RSS's: set steering = \"rss\"".to_string());
    }
    let steering = match rx.steering {
        SteeringSetting::Rss => {
            teamster_dp::steer::rss_program(&rss)?;
            Steering::Rss(rss)
        }
        SteeringSetting::Netqueue => Steering::NetQueue(Placement::Even),
        SteeringSetting::DynamicNetqueue => {
            let d = Packing::default();
            let interval_ms = rx.interval_ms.unwrap_or(d.interval.as_millis() as u64);
            if !(10..=3_600_000).contains(&interval_ms) {
                return Err(format!("rx.interval_ms = {interval_ms}: expected 10 to 3600000"));
            }
            let p = Packing {
                queue_pps: rx.queue_pps.unwrap_or(DEFAULT_QUEUE_PPS),
                interval: core::time::Duration::from_millis(interval_ms),
                spread_above: rx.spread_above.unwrap_or(d.spread_above),
                pack_below: rx.pack_below.unwrap_or(d.pack_below),
                pack_target: rx.pack_target.unwrap_or(d.pack_target),
            };
            p.validate().map_err(|e| format!("rx.{e}"))?;
            Steering::NetQueue(Placement::Packed(p))
        }
    };
    let measure_capacity = rx.steering == SteeringSetting::DynamicNetqueue && rx.queue_pps.is_none();
    Ok(RxPlan {
        queues,
        steering,
        measure_capacity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> RxSection {
        toml::from_str(text).unwrap()
    }

    fn err(text: &str, workers: usize) -> String {
        rx_plan(&parse(text), workers, &[("u1".into(), false)]).unwrap_err()
    }

    #[test]
    fn defaults_are_one_queue_and_rss() {
        let plan = rx_plan(&RxSection::default(), 1, &[]).unwrap();
        assert_eq!(plan.queues, 1);
        assert!(matches!(plan.steering, Steering::Rss(_)));
    }

    #[test]
    fn each_setting_is_read() {
        let p = rx_plan(
            &parse("queues = 4\nrss_key = \"6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa\"\nindirection = 64\nhash_udp = true"),
            2,
            &[],
        )
        .unwrap();
        let Steering::Rss(rss) = p.steering else { panic!() };
        assert_eq!((p.queues, rss.table.entries().len(), rss.types.udp_ipv4), (4, 64, true));
        let p = rx_plan(
            &parse("queues = 3\nsteering = \"dynamic_netqueue\"\nqueue_pps = 1000\ninterval_ms = 200"),
            2,
            &[],
        )
        .unwrap();
        let Steering::NetQueue(Placement::Packed(k)) = p.steering else {
            panic!()
        };
        assert_eq!((k.queue_pps, k.interval.as_millis()), (1000.0, 200));
    }

    #[test]
    fn bad_settings_name_their_key() {
        for (text, workers, key) in [
            ("queues = 0", 2, "rx.queues = 0"),
            ("queues = 17", 2, "rx.queues = 17"),
            ("queues = 2", 1, "set workers"),
            ("queues = 2\nrss_key = \"6d5a\"", 2, "rx.rss_key"),
            ("queues = 2\nrss_key = \"zz\"", 2, "rx.rss_key"),
            ("queues = 2\nindirection = 257", 2, "rx.indirection = 257"),
            ("queues = 2\nindirection = 0", 2, "rx.indirection = 0"),
            (
                "queues = 4\nindirection = 2",
                2,
                "rx.indirection = 2: fewer entries than rx.queues = 4",
            ),
            (
                "queues = 2\nsteering = \"dynamic_netqueue\"\ninterval_ms = 5",
                2,
                "rx.interval_ms = 5",
            ),
            ("queues = 2\nqueue_pps = 10", 2, "dynamic_netqueue"),
            (
                "queues = 2\nsteering = \"netqueue\"\nhash_udp = true",
                2,
                "set steering = \"rss\"",
            ),
            (
                "queues = 2\nsteering = \"dynamic_netqueue\"\nqueue_pps = 0",
                2,
                "rx.queue_pps",
            ),
            (
                "queues = 2\nsteering = \"dynamic_netqueue\"\npack_below = 0.9",
                2,
                "pack_below",
            ),
        ] {
            let e = err(text, workers);
            assert!(e.contains(key), "{text}: {e}");
        }
        let e = rx_plan(&parse("queues = 2"), 2, &[("u1".into(), true)]).unwrap_err();
        assert!(e.contains("rx.queues = 2") && e.contains("af_xdp"), "{e}");
        assert!(toml::from_str::<RxSection>("queues = 2\nsteer = \"rss\"").is_err());
        assert!(toml::from_str::<RxSection>("steering = \"magic\"").is_err());
    }
}
