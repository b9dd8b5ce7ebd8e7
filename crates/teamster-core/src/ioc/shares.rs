//! Shares: a node's weight for the excess bandwidth, 1 to 100.
//!
//! The named levels are vSphere's: `low` = 25, `normal` = 50, `high` = 100.

use core::fmt;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A weight from 1 to 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shares(u8);

/// Shares out of range or not a known level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shares `{0}` is not valid: expected a whole number from 1 to 100, or low (25), normal (50) or high (100)")]
pub struct SharesError(pub String);

impl Shares {
    pub const LOW: Shares = Shares(25);
    pub const NORMAL: Shares = Shares(50);
    pub const HIGH: Shares = Shares(100);

    /// Shares of `v`, which must be 1 to 100.
    pub fn new(v: u32) -> Result<Shares, SharesError> {
        if (1..=100).contains(&v) {
            Ok(Shares(v as u8))
        } else {
            Err(SharesError(v.to_string()))
        }
    }

    /// The weight.
    pub fn get(self) -> u32 {
        u32::from(self.0)
    }
}

impl Default for Shares {
    fn default() -> Self {
        Shares::NORMAL
    }
}

impl core::str::FromStr for Shares {
    type Err = SharesError;
    fn from_str(s: &str) -> Result<Self, SharesError> {
        match s.trim() {
            "low" => Ok(Shares::LOW),
            "normal" => Ok(Shares::NORMAL),
            "high" => Ok(Shares::HIGH),
            t => t
                .parse::<u32>()
                .map_err(|_| SharesError(s.to_string()))
                .and_then(Shares::new),
        }
    }
}

impl fmt::Display for Shares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for Shares {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(self.0)
    }
}

impl<'de> Deserialize<'de> for Shares {
    /// Accepts 1-100 as a number or a string, or low / normal / high.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Shares;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("shares from 1 to 100, or low, normal or high")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Shares, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Shares, E> {
                u32::try_from(v)
                    .map_err(|_| SharesError(v.to_string()))
                    .and_then(Shares::new)
                    .map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Shares, E> {
                u32::try_from(v)
                    .map_err(|_| SharesError(v.to_string()))
                    .and_then(Shares::new)
                    .map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Shares, E> {
                if v.fract() == 0.0 && (1.0..=100.0).contains(&v) {
                    Ok(Shares(v as u8))
                } else {
                    Err(E::custom(SharesError(v.to_string())))
                }
            }
        }
        d.deserialize_any(V)
    }
}
