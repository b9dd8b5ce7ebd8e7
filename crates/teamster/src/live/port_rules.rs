//! Port rules: interfaces that become ports when the kernel announces them, as libvirt's taps
//! (`vnet0`, `vnet1`, ...) do when a VM starts, and stop being ports when they go.
//!
//! Model. `[[port_rules]]` entries are tried in file order against an interface that appeared:
//! the first whose `match` glob takes the interface's name and whose `mac_prefix` (if any)
//! starts the interface's MAC gives it a port, named after the interface, in the rule's group
//! with the rule's NetIOC controls and the VM MAC its `vm_mac` says. Such a port is `matched`:
//! it is never saved to `switch.toml`, and it is removed when its interface is gone. An
//! interface some port (configured or from the API) already uses, an uplink's, or one whose
//! name is already a port's, is left alone. The change is checked as any other (admission
//! control, unique MACs): a refusal leaves the interface unattached and says why in an event.
//!
//! The rule's own checks and the port it makes are in [`super::config`] (a rule is checked
//! with the file); this module matches interfaces. `crate::api::rules` runs it under the API's configuration lock, fed by
//! the data plane's netlink news, so rule changes and API changes are serialised.

use super::config::{parse_mac_prefix, PortRule, SwitchFile, VmMac};
use super::glob::glob_match;
use teamster_core::wire::MacAddr;

/// The VM MAC of a port matched by `rule` on an interface whose own MAC is `iface`.
pub fn vm_mac(rule: &PortRule, iface: MacAddr) -> Result<MacAddr, String> {
    match rule.vm_mac {
        VmMac::Interface => Ok(iface),
        VmMac::Libvirt if iface.0[0] == 0xfe => {
            let mut m = iface.0;
            m[0] = 0x52;
            Ok(MacAddr(m))
        }
        VmMac::Libvirt => Err(format!(
            "its MAC {iface} does not start with fe, as libvirt gives its taps; set vm_mac = \"interface\" in the rule if the interface's own MAC is the VM's"
        )),
    }
}

/// The first rule of `f` that takes interface `name` with MAC `mac`, with its index.
pub fn rule_for<'a>(f: &'a SwitchFile, name: &str, mac: MacAddr) -> Option<(usize, &'a PortRule)> {
    f.port_rules.iter().enumerate().find(|(_, r)| {
        glob_match(&r.pattern, name)
            && r.mac_prefix
                .as_deref()
                .and_then(|p| parse_mac_prefix(p).ok())
                .is_none_or(|p| mac.0.starts_with(&p))
    })
}

/// Whether interface `name` is already the switch's (a port's or an uplink's), or its name a
/// port's: a rule leaves it alone.
pub fn taken(f: &SwitchFile, name: &str) -> bool {
    f.ports.iter().any(|p| p.interface == name || p.name == name) || f.uplinks.iter().any(|u| u.interface == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::config::check_rule;

    #[test]
    fn rules_are_checked_and_macs_derived() {
        let rule = |pattern: &str| PortRule {
            pattern: pattern.into(),
            mac_prefix: None,
            group: "vms".into(),
            vm_mac: VmMac::Libvirt,
            pool: None,
            class: None,
            reservation: Default::default(),
            shares: None,
            limit: None,
            backend: Default::default(),
        };
        assert!(check_rule("r", &rule("vnet*")).is_ok());
        for bad in ["*", "??*", "", "vnet/0", "a b"] {
            assert!(check_rule("port_rules[0]", &rule(bad)).is_err(), "{bad}");
        }
        let mut r = rule("vnet*");
        r.mac_prefix = Some("fe:5".into());
        assert!(check_rule("r", &r).unwrap_err().contains("mac_prefix"));
        let tap: MacAddr = "fe:54:00:12:34:56".parse().unwrap();
        assert_eq!(vm_mac(&rule("x*"), tap).unwrap().to_string(), "52:54:00:12:34:56");
        let veth: MacAddr = "02:00:00:00:00:01".parse().unwrap();
        assert!(vm_mac(&rule("x*"), veth).unwrap_err().contains("fe"));
        let mut r = rule("x*");
        r.vm_mac = VmMac::Interface;
        assert_eq!(vm_mac(&r, veth).unwrap(), veth);
    }
}
