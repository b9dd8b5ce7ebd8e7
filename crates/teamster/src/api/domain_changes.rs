//! The libvirt hook's changes: a domain's ports set as a whole, or all removed (see
//! [`crate::live::domain_ports`] for the model: origin `libvirt`, owned by the domain, named by
//! the switch, saved in their own file).
//!
//! A domain's whole set is one change, checked and saved once, so a domain with thousands of
//! interfaces costs one check of the configuration rather than one per interface (each of
//! which re-checked every port). Ports are matched to the domain's interfaces by MAC: one still
//! wanted is kept (its interface, group and controls updated in place if they changed); one of
//! the domain's no longer wanted goes; a new one is named `DOMAIN-N`, or `vm-HASH-N` if that name
//! is taken by a port that is not the domain's. No other port is ever touched: a MAC, interface
//! or name another port has refuses the change whole, naming that port.

use super::changes::ChangeError;
use crate::live::config::{PortFile, PortOrigin, SwitchFile};
use crate::live::domain_ports::{hashed_name, plain_name};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use teamster_core::wire::MacAddr;
use utoipa::ToSchema;

/// The most bytes a domain's port list may take (the API's other bodies take 64 KiB): room for
/// as many ports as a switch holds.
pub const DOMAIN_BODY_LIMIT: usize = 1 << 20;

/// A domain's ports, in the order of its interfaces.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainPorts {
    /// Every port the domain should have now; its others go.
    pub ports: Vec<DomainPort>,
}

super::changes::port_body! {
    /// One of a domain's interfaces, as a port.
    pub struct DomainPort {
        /// The VM's tap (`<target dev=...>`).
        pub interface: String,
        /// Its port group.
        pub group: String,
        /// The VM's MAC on this interface: what identifies the port within its domain.
        #[schema(pattern = r"^([0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2}$")]
        pub mac: String,
    }
    then {}
}

/// Whether port `p` is domain `domain`'s.
pub fn owned_by(p: &PortFile, domain: &str) -> bool {
    p.origin == PortOrigin::Libvirt && p.owner.as_deref() == Some(domain)
}

/// A domain name as the API takes it (and its schema says): 1 to 1024 characters, no control
/// characters (the name goes into event lines and the hook's file).
pub(super) fn check_domain(domain: &str) -> Result<(), String> {
    let n = domain.chars().count();
    if n == 0 || n > 1024 || domain.chars().any(|c| c.is_control()) {
        return Err(format!(
            "`{}` is not a domain name (1 to 1024 characters, no control characters)",
            domain.escape_debug()
        ));
    }
    Ok(())
}

/// The port `w` asks for, named `name`, owned by `domain`.
fn port_of(domain: &str, name: String, w: &DomainPort) -> PortFile {
    // A tenant's domain XML never takes a MAC from a host outside (SECURITY.md): `entry` gives
    // no port that.
    PortFile {
        mac: Some(w.mac.to_ascii_lowercase()),
        ..w.entry(name, PortOrigin::Libvirt, Some(domain.to_string()))
    }
}

/// A MAC written as the schema says: six pairs of hex digits, separated by `:` or `-` (what the
/// address parser takes, without its leniency for a sign).
fn mac_text(text: &str) -> Result<MacAddr, String> {
    let shaped = text.len() == 17
        && text.bytes().enumerate().all(|(i, b)| match i % 3 {
            2 => b == b':' || b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    if !shaped {
        return Err(format!(
            "`{}` is not a MAC address: expected six pairs of hex digits like 52:54:00:12:34:56",
            text.escape_debug()
        ));
    }
    text.parse()
}

/// What a port's MAC is as an address (None: not one).
fn mac_of(p: &PortFile) -> Option<MacAddr> {
    p.mac.as_deref()?.parse().ok()
}

/// The configuration with domain `domain`'s ports exactly `wanted` (see the module
/// documentation), and whether anything changed.
pub fn set_domain_ports(
    f: &SwitchFile,
    domain: &str,
    wanted: &[DomainPort],
) -> Result<(SwitchFile, bool), ChangeError> {
    check_domain(domain).map_err(ChangeError::Invalid)?;
    // Each wanted MAC with its entry's index.
    let mut macs: HashMap<MacAddr, usize> = HashMap::with_capacity(wanted.len());
    for (n, w) in wanted.iter().enumerate() {
        let mac = mac_text(&w.mac).map_err(|e| ChangeError::Invalid(format!("ports[{n}].mac: {e}")))?;
        // Well formed, each entry on its own (the schema's), but two entries claim one MAC: a
        // conflict, as a MAC another port holds is.
        if let Some(o) = macs.insert(mac, n) {
            return Err(ChangeError::Conflict(format!(
                "ports[{n}].mac: {mac} is ports[{o}]'s MAC too"
            )));
        }
    }
    let mut new = f.clone();
    let mut changed = false;
    // The domain's ports by MAC: kept (updated in place) where still wanted, else removed.
    let mut placed = vec![false; wanted.len()];
    let mut kept = Vec::with_capacity(new.ports.len());
    for p in new.ports.drain(..) {
        if !owned_by(&p, domain) {
            kept.push(p);
            continue;
        }
        match mac_of(&p).and_then(|m| macs.get(&m).copied()) {
            Some(n) if !placed[n] => {
                placed[n] = true;
                let now = port_of(domain, p.name.clone(), &wanted[n]);
                changed |= toml::to_string(&now).ok() != toml::to_string(&p).ok();
                kept.push(now);
            }
            _ => changed = true,
        }
    }
    new.ports = kept;
    let mut names: HashSet<String> = new.ports.iter().map(|p| p.name.clone()).collect();
    for (n, w) in wanted.iter().enumerate().filter(|(n, _)| !placed[*n]) {
        let (plain, hashed) = (plain_name(domain, n), hashed_name(domain, n));
        let Some(name) = [plain, hashed].into_iter().find(|c| !names.contains(c)) else {
            let (plain, hashed) = (plain_name(domain, n), hashed_name(domain, n));
            return Err(ChangeError::Conflict(format!(
                "ports[{n}]: the names `{plain}` and `{hashed}` are both other ports': domain `{domain}`'s interface {} gets no port",
                w.interface
            )));
        };
        names.insert(name.clone());
        new.ports.push(port_of(domain, name, w));
        changed = true;
    }
    Ok((new, changed))
}

/// The configuration without any of domain `domain`'s ports, and whether it had any.
pub fn remove_domain_ports(f: &SwitchFile, domain: &str) -> Result<(SwitchFile, bool), ChangeError> {
    check_domain(domain).map_err(ChangeError::Invalid)?;
    let mut new = f.clone();
    new.ports.retain(|p| !owned_by(p, domain));
    let changed = new.ports.len() != f.ports.len();
    Ok((new, changed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::config::{parse_file, ONE_PORT};

    fn wanted(json: &str) -> Vec<DomainPort> {
        serde_json::from_str::<DomainPorts>(json).unwrap().ports
    }

    const TWO: &str = r#"{"ports": [
        {"interface": "vnet7", "group": "vms", "mac": "52:54:00:AA:00:01", "limit": "1G"},
        {"interface": "vnet8", "group": "vms", "mac": "52:54:00:aa:00:02"}]}"#;

    /// A domain named like an operator's port gets a name of its own; its ports are matched by
    /// MAC across calls; stopping it removes its ports and no other.
    #[test]
    fn a_domain_owns_its_ports_and_no_other() {
        let mut f = parse_file(ONE_PORT).unwrap();
        f.ports[0].name = "db-0".into();
        let (g, changed) = set_domain_ports(&f, "db", &wanted(TWO)).unwrap();
        assert!(changed);
        let names: Vec<&str> = g.ports.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["db-0", hashed_name("db", 0).as_str(), "db-1"]);
        assert_eq!(
            g.ports[0].origin,
            PortOrigin::Configured,
            "the operator's port is untouched"
        );
        assert_eq!(g.ports[0].interface, "vnet0");
        assert_eq!(g.ports[1].mac.as_deref(), Some("52:54:00:aa:00:01"));
        assert_eq!(g.ports[1].owner.as_deref(), Some("db"));
        // The same set again changes nothing; a new tap for the same MAC is an update in place.
        assert!(!set_domain_ports(&g, "db", &wanted(TWO)).unwrap().1);
        let moved = TWO.replace("vnet8", "vnet9");
        let (h, changed) = set_domain_ports(&g, "db", &wanted(&moved)).unwrap();
        assert!(changed && h.ports[2].name == "db-1" && h.ports[2].interface == "vnet9");
        // A domain named like db's hashed name does not take that port over.
        let squatter = format!("vm-{}", &hashed_name("db", 0)[3..19]);
        let other = r#"{"ports": [{"interface": "vnet5", "group": "vms", "mac": "52:54:00:bb:00:01"}]}"#;
        let (i, _) = set_domain_ports(&h, &squatter, &wanted(other)).unwrap();
        assert_eq!(i.ports[1].owner.as_deref(), Some("db"));
        assert_eq!(i.ports[3].name, hashed_name(&squatter, 0));
        // An interface hot-unplugged goes; stopping goes with every port of the domain.
        let one = r#"{"ports": [{"interface": "vnet7", "group": "vms", "mac": "52:54:00:aa:00:01"}]}"#;
        let (j, changed) = set_domain_ports(&i, "db", &wanted(one)).unwrap();
        assert!(changed && !j.ports.iter().any(|p| p.name == "db-1"));
        let (k, changed) = remove_domain_ports(&i, "db").unwrap();
        assert!(changed);
        let names: Vec<&str> = k.ports.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["db-0", hashed_name(&squatter, 0).as_str()]);
        assert!(!remove_domain_ports(&k, "db").unwrap().1, "twice is harmless");
    }

    #[test]
    fn bad_lists_are_refused_naming_the_entry() {
        let f = parse_file(ONE_PORT).unwrap();
        let twice = TWO.replace("52:54:00:aa:00:02", "52:54:00:aa:00:01");
        let e = set_domain_ports(&f, "d", &wanted(&twice)).unwrap_err();
        assert!(
            matches!(&e, ChangeError::Conflict(m) if m.contains("ports[1].mac")),
            "{e:?}"
        );
        for mac in ["52:54", "+2:54:00:aa:00:02", "52:54:00:aa:00:0g", ""] {
            let bad = TWO.replace("52:54:00:aa:00:02", mac);
            assert!(
                matches!(set_domain_ports(&f, "d", &wanted(&bad)), Err(ChangeError::Invalid(_))),
                "{mac}"
            );
        }
        assert!(matches!(
            set_domain_ports(&f, "", &wanted(TWO)),
            Err(ChangeError::Invalid(_))
        ));
        assert!(matches!(remove_domain_ports(&f, "a\nb"), Err(ChangeError::Invalid(_))));
        // The hook's entries share PortAdd's fields but not these: the switch names the port,
        // and a domain never takes a MAC over.
        for extra in [r#""name": "x""#, r#""mac_takeover": true"#] {
            let body = format!(
                r#"{{"ports": [{{"interface": "vnet7", "group": "vms", "mac": "52:54:00:aa:00:01", {extra}}}]}}"#
            );
            let e = serde_json::from_str::<DomainPorts>(&body).unwrap_err().to_string();
            assert!(e.contains("unknown field"), "{e}");
        }
        // Both names taken: refused, naming them.
        let mut g = f.clone();
        g.ports[0].name = "d-0".into();
        let mut other = g.ports[0].clone();
        other.name = hashed_name("d", 0);
        other.interface = "vnet3".into();
        g.ports.push(other);
        let e = set_domain_ports(&g, "d", &wanted(TWO)).unwrap_err();
        assert!(matches!(&e, ChangeError::Conflict(m) if m.contains("`d-0`")), "{e:?}");
    }
}
