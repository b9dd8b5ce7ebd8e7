//! A port group's security policy: vSphere's MAC address changes, forged transmits and
//! promiscuous mode, each accepted or rejected, all rejected by default.
//!
//! Model. Each port has a configured MAC (vSphere's `.vmx` address, the port's initial MAC). The
//! switch cannot see the guest program its NIC, so a port's *effective* MAC (the address the
//! guest uses) is inferred from the source MAC of the frames it sends:
//! - **Forged transmits** compares a frame's source MAC with the port's effective MAC. Rejected:
//!   a frame from any other source is dropped and counted ([`DropReason::ForgedTransmit`](super::DropReason::ForgedTransmit)) and
//!   its source is never learned. Accepted: no comparison (a guest bridge, a nested hypervisor).
//! - **MAC address changes** decides whether the port may receive on an address other than its
//!   configured MAC. Rejected: the effective MAC is always the configured one, and no unicast
//!   frame for another address is delivered to the port (nothing else is learned behind it, and
//!   unknown unicast is not flooded to it). Accepted: the addresses the guest sends from are
//!   learned behind the port and receive frames. With forged transmits rejected that is one
//!   address at a time: a frame from a new source is the guest changing its MAC, which moves the
//!   port's effective MAC (the previous changed address is forgotten; sending from the configured
//!   MAC again changes back). With forged transmits accepted, every source is learned (up to the
//!   per-port MAC limit), as vSphere's MAC learning does for nested hypervisors. Such ports also
//!   receive unknown unicast, since they may own addresses the switch has not learned (yet).
//! - **Promiscuous mode** accepted: the port receives a copy of every frame the switch passes in
//!   its VLAN (between other ports, to and from the uplinks), as vSphere's "all frames passed on
//!   the switch allowed under the VLAN policy". Frames the switch drops are not copied.
//!
//! In every mode, another port's configured MAC is never learned behind a port, and a port
//! whose forged transmits are rejected cannot change to it. The configured MAC always stays the
//! port's (frames to it are delivered even after a change). With both MAC address changes and
//! forged transmits accepted a guest can claim any address not configured on a local port,
//! including an outside host's: that is what the two rejects (the default) prevent.
//!
//! **Link-local protocols** ([`LinkLocal`]): link-control frames (BPDUs, PAUSE, EAPOL, LLDP and
//! the rest of [`crate::wire::LinkControl`]) are never forwarded, from a VM or from an uplink. A
//! group may ask to receive one of them, LLDP only for now (`link_local = ["lldp"]`): its ports
//! then get the LLDP frames the physical switches send on the group's uplinks (a monitoring VM
//! that maps which switch port each uplink reaches); what the ports send stays dropped.

use crate::wire::MacAddr;
use serde::{Deserialize, Serialize};

/// Accept or reject, as vSphere's security settings read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Accept,
    #[default]
    Reject,
}

impl Verdict {
    pub fn accepts(self) -> bool {
        self == Verdict::Accept
    }
}

/// A port group's security policy; see the module documentation. The default rejects all three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityPolicy {
    #[serde(default)]
    pub mac_changes: Verdict,
    #[serde(default)]
    pub forged_transmits: Verdict,
    #[serde(default)]
    pub promiscuous: Verdict,
    /// Link-local protocols the group's ports receive from its uplinks (none by default).
    #[serde(default, skip_serializing_if = "LinkLocal::is_none")]
    pub link_local: LinkLocal,
}

/// A link-local protocol a port group may receive (`link_local = ["lldp"]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkLocalProtocol {
    /// LLDP from the physical switches, on the group's uplinks.
    Lldp,
}

/// The link-local protocols a port group's ports receive from its uplinks, written as a list of
/// [`LinkLocalProtocol`] names, each at most once; none by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Deserialize, Serialize)]
#[serde(try_from = "Vec<LinkLocalProtocol>", into = "Vec<LinkLocalProtocol>")]
pub struct LinkLocal {
    lldp: bool,
}

impl LinkLocal {
    /// Nothing (the default).
    pub const NONE: LinkLocal = LinkLocal { lldp: false };
    /// LLDP only.
    pub const LLDP: LinkLocal = LinkLocal { lldp: true };

    /// True if nothing is allowed (the default).
    pub fn is_none(&self) -> bool {
        *self == LinkLocal::default()
    }

    /// True if the ports receive `protocol`'s frames from their group's uplinks.
    pub fn allows(&self, protocol: crate::wire::LinkControl) -> bool {
        protocol == crate::wire::LinkControl::Lldp && self.lldp
    }
}

impl TryFrom<Vec<LinkLocalProtocol>> for LinkLocal {
    type Error = String;
    /// Refuses a protocol listed twice (a list that says something else than it seems to).
    fn try_from(list: Vec<LinkLocalProtocol>) -> Result<LinkLocal, String> {
        let mut set = LinkLocal::default();
        for p in list {
            match p {
                LinkLocalProtocol::Lldp if set.lldp => return Err("`lldp` listed twice".into()),
                LinkLocalProtocol::Lldp => set.lldp = true,
            }
        }
        Ok(set)
    }
}

impl From<LinkLocal> for Vec<LinkLocalProtocol> {
    fn from(set: LinkLocal) -> Vec<LinkLocalProtocol> {
        set.lldp.then_some(LinkLocalProtocol::Lldp).into_iter().collect()
    }
}

impl SecurityPolicy {
    /// True for the default (all rejected), which configuration files need not spell out.
    pub fn is_default(&self) -> bool {
        *self == SecurityPolicy::default()
    }
}

/// What a port's frame is, judged by its source MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// From the port's configured MAC.
    Configured,
    /// From the address the guest changed to earlier (to refresh in the MAC table).
    Changed,
    /// The guest changes its MAC to this source (forged transmits rejected, MAC changes accepted).
    Change,
    /// Another source, allowed (forged transmits accepted); learned if MAC changes are accepted.
    Other,
    /// Another source, refused: drop it.
    Forged,
}

/// A port's policy and effective MAC.
#[derive(Debug, Clone)]
pub(crate) struct PortGuard {
    pub vlan: Option<u16>,
    pub mac: MacAddr,
    pub policy: SecurityPolicy,
    /// The address the guest changed to, if it did (MAC changes accepted, forged rejected).
    pub changed: Option<MacAddr>,
    /// Its hold on its configured MAC (see [`super::claims`]).
    pub claim: super::claims::PortClaim,
}

impl PortGuard {
    /// Classifies a frame from `src` under the port's policy.
    pub fn source(&self, src: MacAddr) -> Source {
        let p = self.policy;
        if src == self.mac {
            Source::Configured
        } else if self.changed == Some(src) {
            Source::Changed
        } else if p.forged_transmits.accepts() {
            Source::Other
        } else if p.mac_changes.accepts() && !src.is_multicast() && src != MacAddr([0; 6]) {
            Source::Change
        } else {
            Source::Forged
        }
    }

    /// True if the port takes a flooded frame for `dst` (unicast to an unknown address only if
    /// it may own addresses beyond its configured MAC).
    pub fn takes_flood(&self, dst: MacAddr) -> bool {
        dst.is_multicast() || self.policy.mac_changes.accepts()
    }

    /// True if the port gets a copy of everything passed in its VLAN.
    pub fn promiscuous(&self) -> bool {
        self.policy.promiscuous.accepts()
    }

    /// True if addresses this port sends from (other than its configured MAC) are learned.
    pub fn learns(&self) -> bool {
        self.policy.mac_changes.accepts()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(mac_changes: Verdict, forged_transmits: Verdict) -> PortGuard {
        PortGuard {
            vlan: None,
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            policy: SecurityPolicy {
                mac_changes,
                forged_transmits,
                promiscuous: Verdict::Reject,
                link_local: LinkLocal::NONE,
            },
            changed: None,
            claim: super::super::claims::PortClaim::owned(crate::Instant::ZERO),
        }
    }

    #[test]
    fn sources_under_each_policy() {
        use Verdict::*;
        let (own, other) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 9]));
        let cases = [
            (Reject, Reject, Source::Forged),
            (Accept, Reject, Source::Change),
            (Reject, Accept, Source::Other),
            (Accept, Accept, Source::Other),
        ];
        for (mc, ft, want) in cases {
            let mut g = guard(mc, ft);
            assert_eq!(g.source(own), Source::Configured);
            assert_eq!(g.source(other), want, "mac_changes {mc:?}, forged {ft:?}");
            g.changed = Some(other);
            assert_eq!(g.source(other), Source::Changed);
        }
        let g = guard(Accept, Reject);
        assert_eq!(g.source(MacAddr([0; 6])), Source::Forged, "no change to the zero MAC");
        assert_eq!(
            g.source(MacAddr([1, 0, 0x5e, 0, 0, 1])),
            Source::Forged,
            "nor a group MAC"
        );
    }

    #[test]
    fn policy_parses_with_reject_as_default_and_names_bad_keys() {
        let p: SecurityPolicy = serde_json::from_str(r#"{"forged_transmits": "accept"}"#).unwrap();
        assert!(p.forged_transmits.accepts() && !p.mac_changes.accepts() && !p.promiscuous.accepts());
        let e = serde_json::from_str::<SecurityPolicy>(r#"{"forged": "accept"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `forged`"), "{e}");
        let e = serde_json::from_str::<SecurityPolicy>(r#"{"promiscuous": "yes"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant `yes`"), "{e}");
        let p: SecurityPolicy = serde_json::from_str(r#"{"link_local": ["lldp"]}"#).unwrap();
        assert_eq!(p.link_local, LinkLocal::LLDP);
        assert!(p.link_local.allows(crate::wire::LinkControl::Lldp));
        assert!(!p.link_local.allows(crate::wire::LinkControl::SpanningTree));
        assert_eq!(serde_json::to_string(&p).unwrap().matches("lldp").count(), 1);
        let e = serde_json::from_str::<SecurityPolicy>(r#"{"link_local": ["stp"]}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant `stp`, expected `lldp`"), "{e}");
        let e = serde_json::from_str::<SecurityPolicy>(r#"{"link_local": ["lldp", "lldp"]}"#).unwrap_err();
        assert!(e.to_string().contains("`lldp` listed twice"), "{e}");
        let none: SecurityPolicy = serde_json::from_str(r#"{"link_local": []}"#).unwrap();
        assert!(none.is_default() && !serde_json::to_string(&none).unwrap().contains("link_local"));
    }
}
