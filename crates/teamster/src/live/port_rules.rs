//! Port rules: interfaces that become ports when the kernel announces them, as libvirt's taps
//! (`vnet0`, `vnet1`, ...) do when a VM starts, and stop being ports when they go.
//!
//! Model. `[[port_rules]]` entries are tried in file order against an interface that appeared
//! and is a VM's kind of interface ([`vm_interface`]: a tap or a veth, by the kernel's link kind,
//! whose lower device is no uplink's interface): the first whose `match` glob takes the
//! interface's name and whose `mac_prefix` (if any)
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
use teamster_dp::netlink::{LinkInfo, ARPHRD_ETHER};

/// Whether `link` can be a VM's port by a rule: a tap (link kind `tun`, Ethernet hardware type:
/// libvirt's `vnetN`) or a veth, whose lower device (a veth's peer) is not one of `uplinks`
/// (their interfaces' indexes in this namespace, with the uplinks' names). A name alone says
/// nothing of what an interface is: a macvlan, VLAN or ipvlan device named `vnet99` on an
/// uplink would splice the physical network's segment into the rule's port group (its frames
/// cross between the two untouched by VLANs or port security), and a bridge, bond or NIC is
/// never a VM's. So every other kind is refused, with the reason.
pub fn vm_interface(link: &LinkInfo, uplinks: &[(i32, &str)]) -> Result<(), String> {
    let kind = link.kind.as_deref();
    let tap = kind == Some("tun") && link.hw_type == ARPHRD_ETHER;
    if !(tap || kind == Some("veth")) {
        let what = match kind {
            Some("tun") => "a tun (layer 3) device".to_string(),
            Some(k) => format!("a {k} device"),
            None => "a physical or kernel device (no link kind)".to_string(),
        };
        return Err(format!("it is {what}; port rules take taps and veths only"));
    }
    let lower = link.link.filter(|_| !link.link_elsewhere);
    if let Some((_, uplink)) = lower.and_then(|i| uplinks.iter().find(|(u, _)| *u == i)) {
        return Err(format!(
            "its lower device (its peer) is uplink `{uplink}`'s interface; port rules never take an uplink's"
        ));
    }
    Ok(())
}

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
    fn only_taps_and_veths_off_the_uplinks_are_vm_interfaces() {
        let link = |kind: Option<&str>, hw_type: u16, lower: Option<i32>, elsewhere: bool| LinkInfo {
            ifindex: 20,
            name: "vnet99".into(),
            hw_type,
            kind: kind.map(str::to_string),
            link: lower,
            link_elsewhere: elsewhere,
            mac: None,
        };
        let uplinks = [(7, "uplink1")];
        assert!(vm_interface(&link(Some("tun"), ARPHRD_ETHER, None, false), &uplinks).is_ok());
        assert!(vm_interface(&link(Some("veth"), ARPHRD_ETHER, Some(3), false), &uplinks).is_ok());
        // A veth's peer in another namespace may have any index.
        assert!(vm_interface(&link(Some("veth"), ARPHRD_ETHER, Some(7), true), &uplinks).is_ok());
        for (l, want) in [
            (link(Some("macvlan"), ARPHRD_ETHER, Some(7), false), "a macvlan device"),
            (link(Some("vlan"), ARPHRD_ETHER, Some(9), false), "a vlan device"),
            (link(Some("bridge"), ARPHRD_ETHER, None, false), "a bridge device"),
            (link(Some("tun"), 65534, None, false), "a tun (layer 3) device"),
            (link(None, ARPHRD_ETHER, None, false), "a physical or kernel device"),
            (
                link(Some("veth"), ARPHRD_ETHER, Some(7), false),
                "uplink `uplink1`'s interface",
            ),
        ] {
            let e = vm_interface(&l, &uplinks).unwrap_err();
            assert!(e.contains(want), "`{want}` not in: {e}");
        }
    }

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
