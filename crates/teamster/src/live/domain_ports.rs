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
//! operator's file and a restart keeps them with their owners. With each port the file keeps
//! the interface it was made on as the kernel knew it then (its index and MAC): a name alone
//! says nothing, since a VM that stopped while the switch was down frees its `vnetN` for the
//! next VM to start. At start a saved port comes back only if that very interface is still
//! there (same name, index and MAC; for a file from before the identities were kept, a tap
//! whose MAC is the one libvirt gives a tap for the port's MAC, `fe:` then the VM MAC's last
//! five bytes), and it does not clash with `switch.toml`, which wins.

use super::config::{PortFile, PortOrigin, SwitchFile};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use teamster_core::wire::MacAddr;

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
    /// The interfaces its ports were made on, by name, as the kernel knew them at the save.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    interfaces: BTreeMap<String, SeenLink>,
}

/// An interface as the kernel knew it: what tells the same tap from a new one of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SeenLink {
    pub ifindex: i32,
    #[serde(with = "mac_text")]
    pub mac: MacAddr,
}

/// A MAC in the file as text, `52:54:00:12:34:56`.
mod mac_text {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};
    use teamster_core::wire::MacAddr;

    pub fn serialize<S: Serializer>(mac: &MacAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(mac)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MacAddr, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|_| D::Error::custom(format!("`{text}` is not a MAC address")))
    }
}

/// The host's interfaces now, by name (one netlink dump), for saving and restoring the hook's
/// ports; empty if the dump fails (then a save keeps no identities, and a restore falls back
/// to libvirt's tap MAC).
pub fn links_now() -> HashMap<String, SeenLink> {
    let Ok(all) = teamster_dp::netlink::links() else {
        return HashMap::new();
    };
    (all.into_iter())
        .filter_map(|l| {
            let mac = MacAddr(l.mac?);
            Some((
                l.name,
                SeenLink {
                    ifindex: l.ifindex,
                    mac,
                },
            ))
        })
        .collect()
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

/// The hook's ports of `ports`, as saved: by domain, in the order they were made, each domain
/// with the interfaces (of `links`) its ports are on.
pub fn render(ports: &[PortFile], links: &HashMap<String, SeenLink>) -> String {
    let mut file = DomainsFile::default();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for p in ports.iter().filter(|p| p.origin == PortOrigin::Libvirt) {
        let owner = p.owner.as_deref().unwrap_or_default();
        let i = *at.entry(owner).or_insert_with(|| {
            file.domains.push(DomainEntry {
                name: owner.to_string(),
                ports: Vec::new(),
                interfaces: BTreeMap::new(),
            });
            file.domains.len() - 1
        });
        let d = &mut file.domains[i];
        d.ports.push(p.clone());
        if let Some(seen) = links.get(&p.interface) {
            d.interfaces.insert(p.interface.clone(), *seen);
        }
    }
    let body = toml::to_string(&file).expect("the hook's ports always serialise");
    format!(
        "# The ports Teamster's libvirt hook made for the VMs running on this host, by domain.\n\
         # The switch rewrites this file at each change of them and restores them at start; do\n\
         # not edit it (`teamster ctl port del NAME` removes one).\n\n{body}"
    )
}

/// A hook port read back from the file, with the interface it was made on (None: a file from
/// before identities were kept).
#[derive(Debug)]
pub struct SavedPort {
    pub port: PortFile,
    pub seen: Option<SeenLink>,
}

/// Reads the hook's ports saved in `text`, each with origin `libvirt` and its domain as owner.
pub fn parse(text: &str) -> Result<Vec<SavedPort>, String> {
    let file: DomainsFile = teamster_core::host::parse_toml(text)?;
    Ok(file
        .domains
        .into_iter()
        .flat_map(|d| {
            let (owner, interfaces) = (d.name, d.interfaces);
            d.ports.into_iter().map(move |mut p| {
                p.origin = PortOrigin::Libvirt;
                p.owner = Some(owner.clone());
                let seen = interfaces.get(&p.interface).copied();
                SavedPort { port: p, seen }
            })
        })
        .collect())
}

/// Whether the interface a saved port names is the one it was made on (see the module
/// documentation), from the host's interfaces now (`links`); the error says why not.
pub fn same_interface(saved: &SavedPort, links: &HashMap<String, SeenLink>) -> Result<(), String> {
    let p = &saved.port;
    let Some(now) = links.get(&p.interface) else {
        return Err(format!(
            "interface {} is gone (its VM stopped while the switch was down)",
            p.interface
        ));
    };
    match saved.seen {
        Some(then) if then == *now => Ok(()),
        Some(then) => Err(format!(
            "interface {} is not the one the port was made on (index {} MAC {} then, index {} MAC {} now: another VM's, most likely)",
            p.interface, then.ifindex, then.mac, now.ifindex, now.mac
        )),
        None => {
            let vm = mac_of(p);
            let tap = vm.map(|MacAddr(m)| MacAddr([0xfe, m[1], m[2], m[3], m[4], m[5]]));
            match tap == Some(now.mac) {
                true => Ok(()),
                false => Err(format!(
                    "interface {} has MAC {}, not the one libvirt gives the tap of a VM with MAC {} (another VM's, most likely)",
                    p.interface,
                    now.mac,
                    p.mac.as_deref().unwrap_or("?")
                )),
            }
        }
    }
}

/// Adds to `f` (just read from `switch.toml`) the hook's `saved` ports that still fit: whose
/// interface is the one they were made on (`present`, see [`same_interface`]), whose name,
/// interface and MAC `f` does not use, and which pass `check` with the others (tried all
/// together, then one by one if that fails). Returns a note for each port left out, saying why.
pub fn restore(
    f: &mut SwitchFile,
    saved: Vec<SavedPort>,
    present: impl Fn(&SavedPort) -> Result<(), String>,
    check: impl Fn(&SwitchFile) -> Result<(), String>,
) -> Vec<String> {
    let mut notes = Vec::new();
    let who = |p: &PortFile| format!("port {} of domain {}", p.name, p.owner.as_deref().unwrap_or("?"));
    let mut taken = Taken::default();
    for p in &f.ports {
        taken.take(p, format!("switch.toml's port {}", p.name));
    }
    let mut fitting = Vec::new();
    for s in saved {
        let p = &s.port;
        if let Err(why) = present(&s) {
            notes.push(format!("{}: {why}; not restored", who(p)));
        } else if let Some(o) = taken.clash(p) {
            notes.push(format!("{}: {o} has its name, interface or MAC; not restored", who(p)));
        } else {
            taken.take(p, format!("the restored {}", who(p)));
            fitting.push(s.port);
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

/// The names, interfaces and MACs ports use, each with who uses it: a clash found in time
/// linear in the ports.
#[derive(Default)]
struct Taken {
    names: HashMap<String, String>,
    interfaces: HashMap<String, String>,
    macs: HashMap<MacAddr, String>,
}

impl Taken {
    fn take(&mut self, p: &PortFile, who: String) {
        self.names.insert(p.name.clone(), who.clone());
        self.interfaces.insert(p.interface.clone(), who.clone());
        if let Some(m) = mac_of(p) {
            self.macs.insert(m, who);
        }
    }

    /// Who uses `p`'s name, interface or MAC already, if anyone.
    fn clash(&self, p: &PortFile) -> Option<&String> {
        (self.names.get(&p.name))
            .or_else(|| self.interfaces.get(&p.interface))
            .or_else(|| mac_of(p).and_then(|m| self.macs.get(&m)))
    }
}

fn mac_of(p: &PortFile) -> Option<MacAddr> {
    p.mac.as_deref().and_then(|m| m.parse().ok())
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

    fn seen(ifindex: i32, mac: &str) -> SeenLink {
        SeenLink {
            ifindex,
            mac: mac.parse().unwrap(),
        }
    }

    fn saved(port: PortFile) -> SavedPort {
        SavedPort { port, seen: None }
    }

    #[test]
    fn the_hooks_ports_are_saved_with_their_owners_and_not_in_switch_toml() {
        let mut f = parse_file(ONE_PORT).unwrap();
        f.ports.push(hook_port("web1-0", "web1", "vnet7", "52:54:00:00:00:07"));
        f.ports.push(hook_port("db-0", "db", "vnet8", "52:54:00:00:00:08"));
        f.ports.push(hook_port("web1-1", "web1", "vnet9", "52:54:00:00:00:09"));
        let links = HashMap::from([("vnet7".to_string(), seen(17, "fe:54:00:00:00:07"))]);
        let text = render(&f.ports, &links);
        assert!(!crate::live::config::render(&f).contains("web1"), "not in switch.toml");
        let back = parse(&text).unwrap();
        let got: Vec<(&str, Option<&str>, Option<SeenLink>)> = (back.iter())
            .map(|s| (s.port.name.as_str(), s.port.owner.as_deref(), s.seen))
            .collect();
        assert_eq!(
            got,
            [
                ("web1-0", Some("web1"), Some(seen(17, "fe:54:00:00:00:07"))),
                ("web1-1", Some("web1"), None),
                ("db-0", Some("db"), None)
            ]
        );
        assert!(back.iter().all(|s| s.port.origin == PortOrigin::Libvirt));
        assert!(parse("[[domains]]\nname = 1\n").unwrap_err().contains("domains"));
        let bad = "[[domains]]\nname = \"a\"\n[domains.interfaces.vnet0]\nifindex = 3\nmac = \"nope\"\n";
        assert!(parse(bad).unwrap_err().contains("`nope` is not a MAC"));
        assert_eq!(
            path_for(Path::new("/etc/teamster/switch.toml")),
            Path::new("/etc/teamster/switch.libvirt.toml")
        );
    }

    /// A saved port's interface must be the one it was made on: same index and MAC, or, from a
    /// file without them, libvirt's tap MAC for the port's MAC. A new VM's tap that took the
    /// name is not its.
    #[test]
    fn a_saved_port_comes_back_only_on_its_own_interface() {
        let port = hook_port("web1-0", "web1", "vnet7", "52:54:00:00:00:07");
        let then = seen(17, "fe:54:00:00:00:07");
        let links = |s: SeenLink| HashMap::from([("vnet7".to_string(), s)]);
        let with = SavedPort {
            port: port.clone(),
            seen: Some(then),
        };
        assert!(same_interface(&with, &links(then)).is_ok());
        let e = same_interface(&with, &links(seen(31, "fe:54:00:00:00:07"))).unwrap_err();
        assert!(
            e.contains("not the one the port was made on") && e.contains("index 31"),
            "{e}"
        );
        assert!(same_interface(&with, &links(seen(17, "fe:54:00:00:00:99"))).is_err());
        assert!(same_interface(&with, &HashMap::new()).unwrap_err().contains("gone"));
        let old_file = saved(port);
        assert!(same_interface(&old_file, &links(seen(5, "fe:54:00:00:00:07"))).is_ok());
        let e = same_interface(&old_file, &links(seen(5, "fe:54:00:00:00:42"))).unwrap_err();
        assert!(
            e.contains("MAC fe:54:00:00:00:42") && e.contains("52:54:00:00:00:07"),
            "{e}"
        );
    }

    /// At start, switch.toml wins, a port whose tap is gone stays gone, and what fails the
    /// checks is left out alone.
    #[test]
    fn saved_ports_come_back_only_where_they_fit() {
        let mut f = parse_file(ONE_PORT).unwrap();
        let from_file = vec![
            saved(hook_port("web1-0", "web1", "vnet7", "52:54:00:00:00:07")),
            saved(hook_port("vm1", "vm", "vnet8", "52:54:00:00:00:08")),
            saved(hook_port("gone-0", "gone", "vnet9", "52:54:00:00:00:09")),
            saved(hook_port("db-0", "db", "vnet6", "52:54:00:00:00:01")),
            saved(hook_port("twin-0", "twin", "vnet4", "52:54:00:00:00:07")),
            saved(hook_port("big-0", "big", "vnet5", "52:54:00:00:00:05")),
        ];
        let notes = restore(
            &mut f,
            from_file,
            |s| match s.port.interface.as_str() {
                "vnet9" => Err("interface vnet9 is gone".into()),
                _ => Ok(()),
            },
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
            "port gone-0 of domain gone: interface vnet9 is gone; not restored",
            "port db-0 of domain db: switch.toml's port vm1 has its name, interface or MAC",
            "port twin-0 of domain twin: the restored port web1-0 of domain web1 has its name, interface or MAC",
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
