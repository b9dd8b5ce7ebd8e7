//! The libvirt hook's ports: a namespace of their own beside the operator's.
//!
//! Model. A port the hook makes (`teamster libvirt-hook`, through `PUT
//! /api/v1/domains/{domain}/ports`) has origin `libvirt` and an owner, its domain. The hook only
//! ever touches its domain's ports: it never replaces or removes a port it did not make for
//! that domain (an operator's `db-0` is not domain `db`'s), and when the domain stops every port
//! it owns goes, however many it had (a NIC hot-plugged with `virsh attach-device --live` runs no
//! hook, so the switch may hold a port the XML at `stopped` no longer lists). A domain's ports
//! are matched to its interfaces by MAC; a new one is named by the switch, `DOMAIN-N` for the
//! domain's `N`th interface, or `vm-HASH-N` (a stable hash of the domain's name) when the plain
//! name is not usable or is taken by a port that is not the domain's, so a domain named like an
//! operator's port or like another domain's hashed name gets a name of its own instead of that
//! port.
//!
//! The hook's ports are saved in a file of their own beside `switch.toml` (`switch.toml` ->
//! `switch.libvirt.toml`), rewritten at each change of them, so they never rewrite the
//! operator's file and a restart keeps them with their owners. At start a saved port comes back
//! only if its interface still exists (a VM that stopped while the switch was down left none)
//! and it does not clash with `switch.toml`, which wins.

use super::config::{PortFile, PortOrigin, SwitchFile};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file of the hook's ports.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct DomainsFile {
    #[serde(default)]
    domains: Vec<DomainEntry>,
}

/// A domain and its ports.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct DomainEntry {
    name: String,
    #[serde(default)]
    ports: Vec<PortFile>,
}

/// Where the hook's ports are saved: beside the configuration, `NAME.libvirt.toml` for
/// `NAME.toml` (or `NAME.EXT`).
pub fn path_for(config: &Path) -> PathBuf {
    let stem = config
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    config.with_file_name(format!("{stem}.libvirt.toml"))
}

/// The hook's ports of `f`, as saved: by domain, in the order they were made.
pub fn render(f: &SwitchFile) -> String {
    let mut file = DomainsFile::default();
    for p in f.ports.iter().filter(|p| p.origin == PortOrigin::Libvirt) {
        let owner = p.owner.clone().unwrap_or_default();
        match file.domains.iter_mut().find(|d| d.name == owner) {
            Some(d) => d.ports.push(p.clone()),
            None => file.domains.push(DomainEntry {
                name: owner,
                ports: vec![p.clone()],
            }),
        }
    }
    let body = toml::to_string(&file).expect("the hook's ports always serialise");
    format!(
        "# The ports Teamster's libvirt hook made for the VMs running on this host, by domain.\n\
         # The switch rewrites this file at each change of them and restores them at start; do\n\
         # not edit it (`teamster ctl port del NAME` removes one).\n\n{body}"
    )
}

/// Reads the hook's ports saved in `text`, each with origin `libvirt` and its domain as owner.
pub fn parse(text: &str) -> Result<Vec<PortFile>, String> {
    let file: DomainsFile = teamster_core::host::parse_toml(text)?;
    Ok(file
        .domains
        .into_iter()
        .flat_map(|d| {
            let owner = d.name;
            d.ports.into_iter().map(move |mut p| {
                p.origin = PortOrigin::Libvirt;
                p.owner = Some(owner.clone());
                p
            })
        })
        .collect())
}

/// Adds to `f` (just read from `switch.toml`) the hook's `saved` ports that still fit: whose
/// interface exists (`exists`), whose name, interface and MAC `f` does not use, and which pass
/// `check` with the others (tried all together, then one by one if that fails). Returns a note
/// for each port left out, saying why.
pub fn restore(
    f: &mut SwitchFile,
    saved: Vec<PortFile>,
    exists: impl Fn(&str) -> bool,
    check: impl Fn(&SwitchFile) -> Result<(), String>,
) -> Vec<String> {
    let mut notes = Vec::new();
    let who = |p: &PortFile| format!("port {} of domain {}", p.name, p.owner.as_deref().unwrap_or("?"));
    let mac = |p: &PortFile| {
        p.mac
            .as_deref()
            .and_then(|m| m.parse::<teamster_core::wire::MacAddr>().ok())
    };
    let mut fitting = Vec::new();
    for p in saved {
        let clash = f.ports.iter().chain(&fitting).find(|o: &&PortFile| {
            o.name == p.name || o.interface == p.interface || (mac(o).is_some() && mac(o) == mac(&p))
        });
        if !exists(&p.interface) {
            notes.push(format!(
                "{}: interface {} is gone (its VM stopped while the switch was down); not restored",
                who(&p),
                p.interface
            ));
        } else if let Some(o) = clash {
            notes.push(format!(
                "{}: switch.toml's port {} has its name, interface or MAC; not restored",
                who(&p),
                o.name
            ));
        } else {
            fitting.push(p);
        }
    }
    let mut all = f.clone();
    all.ports.extend(fitting.iter().cloned());
    if check(&all).is_ok() {
        *f = all;
        return notes;
    }
    for p in fitting {
        let mut trial = f.clone();
        trial.ports.push(p.clone());
        match check(&trial) {
            Ok(()) => *f = trial,
            Err(e) => notes.push(format!("{}: refused ({e}); not restored", who(&p))),
        }
    }
    notes
}

/// The usable port name closest to `DOMAIN-N`: that, or for a domain name a port name cannot
/// hold (over 64 bytes with the suffix, or with `/`, `\\` or control characters), `vm-HASH-N`
/// with a stable 64-bit FNV-1a hash of the domain name.
pub fn plain_name(domain: &str, n: usize) -> String {
    let plain = format!("{domain}-{n}");
    let usable = plain.len() <= 64 && !plain.chars().any(|c| c.is_control() || c == '/' || c == '\\');
    if usable {
        return plain;
    }
    hashed_name(domain, n)
}

/// `vm-HASH-N`: the domain's `N`th port named by a stable 64-bit FNV-1a hash of its name.
pub fn hashed_name(domain: &str, n: usize) -> String {
    let hash = domain.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("vm-{hash:016x}-{n}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::config::{parse_file, ONE_PORT};

    fn hook_port(name: &str, owner: &str, interface: &str, mac: &str) -> PortFile {
        let mut p = parse_file(ONE_PORT).unwrap().ports.remove(0);
        p.name = name.into();
        p.interface = interface.into();
        p.mac = Some(mac.into());
        p.limit = None;
        p.origin = PortOrigin::Libvirt;
        p.owner = Some(owner.into());
        p
    }

    #[test]
    fn the_hooks_ports_are_saved_with_their_owners_and_not_in_switch_toml() {
        let mut f = parse_file(ONE_PORT).unwrap();
        f.ports.push(hook_port("web1-0", "web1", "vnet7", "52:54:00:00:00:07"));
        f.ports.push(hook_port("db-0", "db", "vnet8", "52:54:00:00:00:08"));
        f.ports.push(hook_port("web1-1", "web1", "vnet9", "52:54:00:00:00:09"));
        let text = render(&f);
        assert!(!crate::live::config::render(&f).contains("web1"), "not in switch.toml");
        let back = parse(&text).unwrap();
        let got: Vec<(&str, Option<&str>)> = back.iter().map(|p| (p.name.as_str(), p.owner.as_deref())).collect();
        assert_eq!(
            got,
            [("web1-0", Some("web1")), ("web1-1", Some("web1")), ("db-0", Some("db"))]
        );
        assert!(back.iter().all(|p| p.origin == PortOrigin::Libvirt));
        assert!(parse("[[domains]]\nname = 1\n").unwrap_err().contains("domains"));
        assert_eq!(
            path_for(Path::new("/etc/teamster/switch.toml")),
            Path::new("/etc/teamster/switch.libvirt.toml")
        );
    }

    /// At start, switch.toml wins, a port whose tap is gone stays gone, and what fails the
    /// checks is left out alone.
    #[test]
    fn saved_ports_come_back_only_where_they_fit() {
        let mut f = parse_file(ONE_PORT).unwrap();
        let saved = vec![
            hook_port("web1-0", "web1", "vnet7", "52:54:00:00:00:07"),
            hook_port("vm1", "vm", "vnet8", "52:54:00:00:00:08"),
            hook_port("gone-0", "gone", "vnet9", "52:54:00:00:00:09"),
            hook_port("db-0", "db", "vnet6", "52:54:00:00:00:01"),
            hook_port("big-0", "big", "vnet5", "52:54:00:00:00:05"),
        ];
        let notes = restore(
            &mut f,
            saved,
            |i| i != "vnet9",
            |f| match f.ports.iter().any(|p| p.name == "big-0") {
                true => Err("admission control".into()),
                false => Ok(()),
            },
        );
        let names: Vec<&str> = f.ports.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["vm1", "web1-0"]);
        assert_eq!(f.ports[0].origin, PortOrigin::Configured);
        let all = notes.join("\n");
        for want in [
            "port vm1 of domain vm: switch.toml's port vm1",
            "port gone-0 of domain gone: interface vnet9 is gone",
            "port db-0 of domain db: switch.toml's port vm1 has its name, interface or MAC",
            "port big-0 of domain big: refused (admission control)",
        ] {
            assert!(all.contains(want), "`{want}` not in:\n{all}");
        }
    }

    #[test]
    fn every_domain_name_gives_a_usable_port_name() {
        assert_eq!(plain_name("web1", 0), "web1-0");
        let long = "x".repeat(80);
        let name = plain_name(&long, 2);
        assert!(
            name.starts_with("vm-") && name.ends_with("-2") && name.len() <= 64,
            "{name}"
        );
        assert_eq!(name, hashed_name(&long, 2), "stable");
        assert_ne!(plain_name("a\\b", 0), "a\\b-0");
    }
}
