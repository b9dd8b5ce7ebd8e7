//! Bandwidth in bits per second, as network engineers write it.
//!
//! Accepted forms: a plain number of bits/s (`"1000000"`, or a TOML/JSON number), or a decimal
//! number followed by an SI prefix (`k`, `M`, `G`, `T`, powers of 1000, any case) and an optional
//! bit unit (`bps`, `bit/s`, `bits/s`, `b/s`, `bit`, `b`), with optional spaces: `"10G"`,
//! `"10Gbps"`, `"750M"`, `"1.5 Gbit/s"`, `"100 kbps"`.
//!
//! An upper-case `B` means bytes. Bandwidths here are always bits, so `"10GB"` or `"1.25 GB/s"`
//! are **rejected** with an error that says so, rather than silently multiplied by eight: a
//! config that means bytes should say so in bits. Negative values, exponents, `inf`, `NaN`, and
//! values above `u64::MAX` bits/s are rejected too.
//!
//! [`Bandwidth`] prints with the largest prefix that represents it exactly with at most three
//! decimals (`"10Gbps"`, `"1.5Gbps"`, `"123bps"`), and parsing what it prints gives it back.

use core::fmt;
use core::str::FromStr;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bandwidth(u64);

/// Why a bandwidth string was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BandwidthError {
    #[error("empty bandwidth: expected a number of bits/s such as \"10G\" or \"750Mbps\"")]
    Empty,
    #[error("`{0}` is not a bandwidth: expected a decimal number then an optional k/M/G/T prefix and bit unit, such as \"10G\", \"1.5 Gbit/s\" or \"750Mbps\"")]
    Syntax(String),
    #[error("`{0}` is in bytes (upper-case B); Teamster bandwidths are bits per second: multiply by 8 and write it in bits, e.g. \"80Gbps\" for 10 GB/s")]
    Bytes(String),
    #[error("unknown unit `{unit}` in `{input}`: expected k, M, G or T, optionally followed by bps, bit/s or b/s")]
    Unit { input: String, unit: String },
    #[error("`{0}` is out of range: at most 18446744073709551615 bits/s")]
    Range(String),
}

impl Bandwidth {
    /// Zero bits per second.
    pub const ZERO: Bandwidth = Bandwidth(0);
    /// The largest representable rate, used as "unlimited".
    pub const MAX: Bandwidth = Bandwidth(u64::MAX);

    /// A rate of `bps` bits per second.
    pub const fn from_bps(bps: u64) -> Self {
        Bandwidth(bps)
    }
    /// A rate of `m` megabits per second.
    pub const fn from_mbps(m: u64) -> Self {
        Bandwidth(m * 1_000_000)
    }
    /// A rate of `g` gigabits per second.
    pub const fn from_gbps(g: u64) -> Self {
        Bandwidth(g * 1_000_000_000)
    }
    /// A rate from a float number of bits per second, rounded and clamped to the valid range.
    pub fn from_bps_f64(bps: f64) -> Self {
        if bps.is_nan() || bps <= 0.0 {
            Bandwidth(0)
        } else if bps >= u64::MAX as f64 {
            Bandwidth::MAX
        } else {
            Bandwidth(bps.round() as u64)
        }
    }
    /// Bits per second.
    pub const fn bps(self) -> u64 {
        self.0
    }
    /// Bits per second as a float, for arithmetic on rates.
    pub fn bps_f64(self) -> f64 {
        self.0 as f64
    }
    /// Gigabits per second as a float, for reports.
    pub fn gbps_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

/// SI prefixes, largest first, used both to parse and to print.
const PREFIXES: [(&str, u64); 4] = [
    ("T", 1_000_000_000_000),
    ("G", 1_000_000_000),
    ("M", 1_000_000),
    ("k", 1_000),
];

impl FromStr for Bandwidth {
    type Err = BandwidthError;

    /// Parses the forms described in the module documentation.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let s = input.trim();
        if s.is_empty() {
            return Err(BandwidthError::Empty);
        }
        let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
        let (number, unit) = (&s[..split], s[split..].trim());
        let (whole, frac) = match number.split_once('.') {
            Some((w, f)) => (w, f),
            None => (number, ""),
        };
        let digits_ok = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
        if (whole.is_empty() && frac.is_empty()) || !digits_ok(whole) || !digits_ok(frac) {
            return Err(BandwidthError::Syntax(input.to_string()));
        }
        if unit.contains('B') {
            return Err(BandwidthError::Bytes(input.to_string()));
        }
        let multiplier = unit_multiplier(unit).ok_or_else(|| BandwidthError::Unit {
            input: input.to_string(),
            unit: unit.to_string(),
        })?;
        scale(whole, frac, multiplier)
            .map(Bandwidth)
            .ok_or_else(|| BandwidthError::Range(input.to_string()))
    }
}

/// Maps a unit suffix ("Gbps", "m", "bit/s", "") to its multiplier, or None if unknown.
fn unit_multiplier(unit: &str) -> Option<u64> {
    let lower = unit.to_ascii_lowercase();
    let prefix = ["bits/s", "bit/s", "bps", "b/s", "bits", "bit", "b"]
        .iter()
        .find_map(|suffix| lower.strip_suffix(suffix))
        .unwrap_or(&lower)
        .trim();
    if prefix.is_empty() {
        return Some(1);
    }
    PREFIXES
        .iter()
        .find(|(p, _)| p.eq_ignore_ascii_case(prefix))
        .map(|(_, m)| *m)
}

/// Computes `whole.frac * multiplier` exactly in integers, rounding below one bit; None on overflow.
fn scale(whole: &str, frac: &str, multiplier: u64) -> Option<u64> {
    let mut value: u128 = 0;
    for b in whole.bytes() {
        value = value.checked_mul(10)?.checked_add(u128::from(b - b'0'))?;
        if value > u128::from(u64::MAX) {
            return None;
        }
    }
    let mut total = value.checked_mul(u128::from(multiplier))?;
    let mut place = u128::from(multiplier);
    let mut remainder_num: u128 = 0;
    let mut remainder_den: u128 = 1;
    for b in frac.bytes().take(30) {
        let d = u128::from(b - b'0');
        if place >= 10 {
            place /= 10;
            total = total.checked_add(d * place)?;
        } else {
            // Below one bit: keep just enough to round to the nearest bit.
            remainder_den = remainder_den.saturating_mul(10);
            remainder_num = remainder_num.saturating_mul(10).saturating_add(d);
        }
    }
    if remainder_num.saturating_mul(2) >= remainder_den && remainder_num > 0 {
        total = total.checked_add(1)?;
    }
    u64::try_from(total).ok()
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        for (prefix, m) in PREFIXES {
            if v >= m && (v % (m / 1000)) == 0 {
                let whole = v / m;
                let milli = (v % m) / (m / 1000);
                return if milli == 0 {
                    write!(f, "{whole}{prefix}bps")
                } else {
                    let frac = format!("{milli:03}");
                    write!(f, "{whole}.{}{prefix}bps", frac.trim_end_matches('0'))
                };
            }
        }
        write!(f, "{v}bps")
    }
}

impl Serialize for Bandwidth {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Bandwidth {
    /// Accepts a string with units or a non-negative number of bits/s.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Bandwidth;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a bandwidth such as \"10G\", \"750Mbps\" or a number of bits/s")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Bandwidth, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Bandwidth, E> {
                Ok(Bandwidth(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Bandwidth, E> {
                u64::try_from(v)
                    .map(Bandwidth)
                    .map_err(|_| E::custom(format!("bandwidth {v} is negative")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Bandwidth, E> {
                if v.is_finite() && v >= 0.0 && v < u64::MAX as f64 {
                    Ok(Bandwidth(v.round() as u64))
                } else {
                    Err(E::custom(format!(
                        "bandwidth {v} is not a non-negative finite number of bits/s"
                    )))
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bw(s: &str) -> Result<u64, BandwidthError> {
        s.parse::<Bandwidth>().map(Bandwidth::bps)
    }

    #[test]
    fn parses_engineer_notation() {
        assert_eq!(bw("10G"), Ok(10_000_000_000));
        assert_eq!(bw("10Gbps"), Ok(10_000_000_000));
        assert_eq!(bw("750M"), Ok(750_000_000));
        assert_eq!(bw("1.5 Gbit/s"), Ok(1_500_000_000));
        assert_eq!(bw("100 kbps"), Ok(100_000));
        assert_eq!(bw("12345"), Ok(12_345));
        assert_eq!(bw("7.5g"), Ok(7_500_000_000));
        assert_eq!(bw(".5G"), Ok(500_000_000));
        assert_eq!(bw("2Tb/s"), Ok(2_000_000_000_000));
        assert_eq!(bw("0.0000000015G"), Ok(2)); // 1.5 bits rounds to 2
    }

    #[test]
    fn rejects_bytes_and_garbage_with_clear_errors() {
        assert!(matches!(bw("10GB"), Err(BandwidthError::Bytes(_))));
        assert!(matches!(bw("1.25 GB/s"), Err(BandwidthError::Bytes(_))));
        assert!(bw("10GB").unwrap_err().to_string().contains("bytes"));
        assert!(matches!(bw(""), Err(BandwidthError::Empty)));
        assert!(matches!(bw("fast"), Err(BandwidthError::Syntax(_))));
        assert!(matches!(bw("-1G"), Err(BandwidthError::Syntax(_))));
        assert!(matches!(bw("1e9"), Err(BandwidthError::Unit { .. })));
        assert!(matches!(bw("10X"), Err(BandwidthError::Unit { .. })));
        assert!(matches!(bw("1.2.3G"), Err(BandwidthError::Syntax(_))));
        assert!(matches!(bw("."), Err(BandwidthError::Syntax(_))));
        assert!(matches!(bw("99999999999T"), Err(BandwidthError::Range(_))));
        assert!(matches!(bw("18446744073709551616"), Err(BandwidthError::Range(_))));
    }

    #[test]
    fn prints_back() {
        assert_eq!(Bandwidth::from_gbps(10).to_string(), "10Gbps");
        assert_eq!(Bandwidth::from_mbps(1500).to_string(), "1.5Gbps");
        assert_eq!(Bandwidth::from_mbps(750).to_string(), "750Mbps");
        assert_eq!(Bandwidth::from_bps(123).to_string(), "123bps");
        assert_eq!(Bandwidth::from_bps(1_000_001).to_string(), "1000.001kbps");
    }

    #[test]
    fn deserializes_strings_and_numbers() {
        #[derive(Deserialize)]
        struct T {
            a: Bandwidth,
            b: Bandwidth,
        }
        let t: T = serde_json::from_str(r#"{"a":"9.4G","b":1000}"#).unwrap();
        assert_eq!((t.a.bps(), t.b.bps()), (9_400_000_000, 1000));
        let err = serde_json::from_str::<T>(r#"{"a":"10GB","b":-5}"#).err().unwrap();
        assert!(err.to_string().contains("bytes"), "{err}");
        assert!(serde_json::from_str::<T>(r#"{"a":"1G","b":-5}"#).is_err());
    }

    proptest! {
        #[test]
        fn display_round_trips(v in any::<u64>()) {
            let b = Bandwidth::from_bps(v);
            prop_assert_eq!(b.to_string().parse::<Bandwidth>(), Ok(b));
        }

        #[test]
        fn never_panics_on_arbitrary_text(s in "\\PC{0,24}") {
            let _ = s.parse::<Bandwidth>();
        }
    }
}
