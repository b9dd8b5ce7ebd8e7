//! What an LACP group is configured with: activity, rate, identity and fallback.

use crate::wire::MacAddr;
use core::fmt;
use serde::{Deserialize, Serialize};

/// Whether a member sends LACPDUs unasked (active) or only answers (passive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LacpActivity {
    #[default]
    Active,
    Passive,
}

/// How often the partner is asked to send: every second with a 3 s timeout (fast), or every
/// 30 s with a 90 s timeout (slow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LacpRate {
    #[default]
    Fast,
    Slow,
}

/// What a group does while no member has an LACP partner (every live member defaulted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LacpFallback {
    /// The first live member carries the group's traffic alone, as an active/standby team
    /// would, so a host whose switch has no LACP configured still reaches the network.
    #[default]
    ActiveBackup,
    /// No member carries the group's traffic until a partner answers (and what arrives on a
    /// member outside a bundle is dropped).
    Down,
}

impl fmt::Display for LacpActivity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LacpActivity::Active => "active",
            LacpActivity::Passive => "passive",
        })
    }
}

impl fmt::Display for LacpRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LacpRate::Fast => "fast",
            LacpRate::Slow => "slow",
        })
    }
}

impl fmt::Display for LacpFallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LacpFallback::ActiveBackup => "active-backup",
            LacpFallback::Down => "down",
        })
    }
}

/// An LACP group's settings (802.1AX administrative values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LacpSettings {
    pub activity: LacpActivity,
    pub rate: LacpRate,
    /// The actor system priority (lower wins the choice of which side's ports decide).
    pub system_priority: u16,
    /// The actor system ID: unique per host (the live switch takes the first member's MAC).
    pub system: MacAddr,
    /// The actor key: members with the same key may aggregate (1-65535).
    pub key: u16,
    pub port_priority: u16,
    pub fallback: LacpFallback,
}

impl LacpSettings {
    pub const DEFAULT_PRIORITY: u16 = 32768;

    /// Refuses a zero key or priority, or a system ID that is zero or a group address; the
    /// error names the key as configuration files spell it.
    pub fn validate(&self) -> Result<(), String> {
        if self.key == 0 {
            return Err("lacp.key: 0 is out of range 1-65535".into());
        }
        if self.system_priority == 0 {
            return Err("lacp.system_priority: 0 is out of range 1-65535".into());
        }
        if self.port_priority == 0 {
            return Err("lacp.port_priority: 0 is out of range 1-65535".into());
        }
        if self.system == MacAddr::default() || self.system.is_multicast() {
            return Err(format!("lacp.system_mac: {} is not a unicast MAC", self.system));
        }
        Ok(())
    }
}

impl Default for LacpSettings {
    /// Active, fast, priorities 32768, key 1, fallback to active/backup, and a placeholder
    /// system ID (02:00:00:00:00:01) that a host replaces with its own.
    fn default() -> Self {
        LacpSettings {
            activity: LacpActivity::default(),
            rate: LacpRate::default(),
            system_priority: Self::DEFAULT_PRIORITY,
            system: MacAddr([2, 0, 0, 0, 0, 1]),
            key: 1,
            port_priority: Self::DEFAULT_PRIORITY,
            fallback: LacpFallback::default(),
        }
    }
}
