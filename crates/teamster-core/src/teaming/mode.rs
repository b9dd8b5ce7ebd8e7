//! Team modes: whether the physical switch knows the uplinks form a team, and what each mode
//! allows.
//!
//! Model. A port group's uplinks are either *switch independent* (the physical switches see
//! separate ports: each MAC must live on one member, so a group takes flooded frames from one
//! member per port or per group, and the team decides where every VM receives), or *switch
//! dependent*: the physical switch bundles the members into one logical port, as a static
//! EtherChannel (`static`) or an aggregate it negotiates with LACP (`lacp`), spreads what it
//! sends over the members by its own hash, and never sends a frame back into the bundle it came
//! from. So in a switch-dependent group every member that is up (under LACP: collecting) takes
//! in flooded frames, and no home-uplink rule applies on receive.
//!
//! What a mode allows (checked at start and on every change, nothing applied on refusal):
//! - Load-Based Teaming (`load-based`) is switch independent only: it moves a port so that the
//!   physical switch relearns its MAC on another member, which a bundle makes pointless (the
//!   switch balances what it sends itself).
//! - A switch-dependent group has no standby uplinks: the switch sends on every member of the
//!   bundle, so every member must be active.
//! - Groups that share an uplink share its mode (and under LACP its settings): an uplink is in
//!   a bundle on the physical switch or it is not.
//!
//! VMQ accounting follows Windows Server's: a team offers the *sum* of its members' receive
//! queues when each VM receives on one known member (switch independent with a per-port
//! receive policy: Hyper-V Port, Dynamic, and the other per-port policies), and the *minimum*
//! otherwise (switch dependent, where the switch may deliver a VM's frames on any member; or
//! switch-independent Address Hash, where everything arrives on the primary and the other
//! members hold mirror queues for failover).

use super::Policy;
use core::fmt;
use core::str::FromStr;

/// How the physical switch sees a group's uplinks (see the [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TeamMode {
    /// Separate switch ports; the team places every MAC on one member (the default).
    #[default]
    SwitchIndependent,
    /// A static bundle (EtherChannel) configured on the switch.
    Static,
    /// A bundle negotiated with LACP (IEEE 802.1AX).
    Lacp,
}

impl TeamMode {
    /// Every mode, in the order help and errors list them.
    pub const ALL: [TeamMode; 3] = [TeamMode::SwitchIndependent, TeamMode::Static, TeamMode::Lacp];

    /// Its kebab-case name, as configuration files and the API spell it.
    pub const fn name(self) -> &'static str {
        match self {
            TeamMode::SwitchIndependent => "switch-independent",
            TeamMode::Static => "static",
            TeamMode::Lacp => "lacp",
        }
    }

    /// True for `static` and `lacp`: the switch bundles the members.
    pub fn switch_dependent(self) -> bool {
        self != TeamMode::SwitchIndependent
    }

    /// Why `policy` cannot run in this mode, if it cannot.
    pub fn refuses(self, policy: Policy) -> Option<String> {
        (self.switch_dependent() && policy == Policy::LOAD_BASED).then(|| {
            format!(
                "`{policy}` is switch independent only (it moves ports for the physical switch to relearn); \
                 a `{self}` bundle balances what the switch sends itself: use `address-hash`, `dynamic` or `hyperv-port`"
            )
        })
    }

    /// How many receive queues (VMQs) a team of members with `queues` each offers a group of
    /// this mode whose policy is `policy` (see the [module documentation](self)).
    pub fn vmq_queues(self, policy: Policy, queues: &[u32]) -> u32 {
        let per_port_receive =
            policy != Policy::ADDRESS_HASH && policy != Policy::IP_HASH && policy != Policy::IP_HASH_L4;
        if self == TeamMode::SwitchIndependent && per_port_receive {
            queues.iter().sum()
        } else {
            queues.iter().copied().min().unwrap_or(0)
        }
    }
}

impl fmt::Display for TeamMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A mode name that is not one of [`TeamMode::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown team mode `{0}`: expected one of switch-independent, static, lacp")]
pub struct UnknownMode(pub String);

impl FromStr for TeamMode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TeamMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownMode(s.to_string()))
    }
}

impl serde::Serialize for TeamMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for TeamMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|_| serde::de::Error::unknown_variant(&s, &["switch-independent", "static", "lacp"]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_listed() {
        for m in TeamMode::ALL {
            assert_eq!(m.name().parse::<TeamMode>().unwrap(), m);
            assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{m}\""));
        }
        let e = serde_json::from_str::<TeamMode>("\"LACP\"").unwrap_err().to_string();
        assert!(e.contains("`LACP`") && e.contains("switch-independent"), "{e}");
        assert_eq!(TeamMode::default(), TeamMode::SwitchIndependent);
    }

    #[test]
    fn load_based_teaming_is_switch_independent_only() {
        assert!(TeamMode::SwitchIndependent.refuses(Policy::LOAD_BASED).is_none());
        for m in [TeamMode::Static, TeamMode::Lacp] {
            assert!(m
                .refuses(Policy::LOAD_BASED)
                .unwrap()
                .contains("switch independent only"));
            for p in Policy::all().iter().filter(|p| **p != Policy::LOAD_BASED) {
                assert!(m.refuses(*p).is_none(), "{m} refuses {p}");
            }
        }
    }

    #[test]
    fn vmq_is_the_sum_only_where_each_vm_receives_on_one_known_member() {
        let q = [8, 4];
        assert_eq!(TeamMode::SwitchIndependent.vmq_queues(Policy::HYPERV_PORT, &q), 12);
        assert_eq!(TeamMode::SwitchIndependent.vmq_queues(Policy::DYNAMIC, &q), 12);
        assert_eq!(TeamMode::SwitchIndependent.vmq_queues(Policy::ADDRESS_HASH, &q), 4);
        for m in [TeamMode::Static, TeamMode::Lacp] {
            for p in [Policy::HYPERV_PORT, Policy::DYNAMIC, Policy::ADDRESS_HASH] {
                assert_eq!(m.vmq_queues(p, &q), 4, "{m} {p}");
            }
        }
        assert_eq!(TeamMode::Static.vmq_queues(Policy::DYNAMIC, &[]), 0);
    }
}
