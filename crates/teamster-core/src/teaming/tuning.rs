//! A port group's per-policy knobs: which fields Address Hash covers, the flowlet gap and the
//! rebalancing interval of the flowlet policies. Each policy reads the knobs it uses and ignores
//! the others, so a group keeps its knobs across policy changes.

use core::fmt;
use core::str::FromStr;
use core::time::Duration;

/// The knobs of a group's policy (see [`super::address_hash`] and [`super::flowlet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyTuning {
    /// What Address Hash (and the flowlet policies' bucket hash) covers.
    pub hash_fields: HashFields,
    /// The idle time after which a flow's next frame may take another member
    /// ([`PolicyTuning::DEFAULT_FLOWLET_GAP`]).
    pub flowlet_gap: Duration,
    /// How often the flowlet policies rebalance their buckets by measured load
    /// ([`PolicyTuning::DEFAULT_REBALANCE`]).
    pub rebalance: Duration,
}

impl PolicyTuning {
    /// Ten milliseconds: twice the data plane's default uplink queue budget (5 ms of sending,
    /// [`crate::ioc::QueueLimit::DEFAULT`]). A frame waits at most about that long in its
    /// uplink's queue, so a flow idle for longer has nothing left queued on its old member and
    /// its next frame cannot overtake the previous ones on a new one. A shorter gap moves flows
    /// more often at some risk of reordering under deep queues.
    pub const DEFAULT_FLOWLET_GAP: Duration = Duration::from_millis(10);
    /// One second: moves only happen at flowlet boundaries, so rebalancing often costs no
    /// reordering; bucket loads decay by half per interval (about the last few seconds count).
    pub const DEFAULT_REBALANCE: Duration = Duration::from_secs(1);
    /// The longest gap or interval accepted: a minute (longer almost certainly means a unit
    /// mistake, and a flow would never move).
    pub const MAX: Duration = Duration::from_secs(60);

    /// Refuses a zero or over-long flowlet gap or interval; the error names the knob as
    /// configuration files spell it.
    pub fn validate(&self) -> Result<(), String> {
        if self.flowlet_gap.is_zero() || self.flowlet_gap > Self::MAX {
            return Err(format!(
                "flowlet_gap_us: {} µs: expected 1 µs to 60 s (a zero gap would move flows mid-burst and reorder TCP)",
                self.flowlet_gap.as_micros()
            ));
        }
        if self.rebalance < Duration::from_millis(1) || self.rebalance > Self::MAX {
            return Err(format!(
                "rebalance_ms: {} ms: expected 1 ms to 60 s",
                self.rebalance.as_millis()
            ));
        }
        Ok(())
    }
}

impl Default for PolicyTuning {
    fn default() -> Self {
        PolicyTuning {
            hash_fields: HashFields::default(),
            flowlet_gap: Self::DEFAULT_FLOWLET_GAP,
            rebalance: Self::DEFAULT_REBALANCE,
        }
    }
}

/// The fields Address Hash covers (see [`super::address_hash`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HashFields {
    /// 4-tuple, else 2-tuple, else MACs (Windows' `TransportPorts`, its default).
    #[default]
    TransportPorts,
    /// 2-tuple, else MACs (`IPAddresses`).
    IpAddresses,
    /// MACs (`MacAddresses`).
    MacAddresses,
}

impl HashFields {
    pub const ALL: [HashFields; 3] = [
        HashFields::TransportPorts,
        HashFields::IpAddresses,
        HashFields::MacAddresses,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            HashFields::TransportPorts => "transport-ports",
            HashFields::IpAddresses => "ip-addresses",
            HashFields::MacAddresses => "mac-addresses",
        }
    }
}

impl fmt::Display for HashFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HashFields {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HashFields::ALL.into_iter().find(|h| h.name() == s).ok_or_else(|| {
            format!("unknown hash fields `{s}`: expected one of transport-ports, ip-addresses, mac-addresses")
        })
    }
}

impl serde::Serialize for HashFields {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for HashFields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|_| serde::de::Error::unknown_variant(&s, &["transport-ports", "ip-addresses", "mac-addresses"]))
    }
}
