//! `switch.toml`: a live switch, in the same shape as a simulated host.
//!
//! ```toml
//! mac_ageing_s = 300           # optional
//! reservation_cap = 0.75       # optional
//! [lbt]                        # optional, as in scenarios
//! [[uplinks]]
//! name = "uplink1"
//! interface = "eth1"
//! capacity = "10G"             # optional: else the speed the interface reports in sysfs
//! [[port_groups]]              # as in scenarios: name, policy, active, standby, failback,
//!                              # notify_switches, vlan
//! [[traffic_classes]]          # as in packet scenarios (optional)
//! [[pools]]                    # as in packet scenarios (optional)
//! [[ports]]
//! name = "vm1"
//! interface = "vnet0"          # the host end of a veth pair, or a tap device
//! mac = "52:54:00:12:34:56"
//! group = "vms"
//! pool = "gold"                # or class = "nfs"; reservation, shares, limit as in scenarios
//! ```
//!
//! Everything is checked before any interface is touched: the TOML shape (errors name the key
//! path), names, that every uplink's interface exists (a port's may be missing: a stopped VM's
//! tap; the port then starts detached), that no interface or MAC is used twice, that each
//! uplink has a capacity, and admission control.

use serde::{Deserialize, Serialize};
use std::path::Path;
use teamster_core::ioc::admission::{admit, ReservationCap};
use teamster_core::ioc::{NodeId, Shares, Tree};
use teamster_core::teaming::{GroupId, PortId, PortSpec, Team};
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;
use teamster_sim::host::{build_tree, ClassFile, PoolFile, PortControls};
use teamster_sim::scenario::{GroupFile, LbtFile};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchFile {
    pub mac_ageing_s: Option<f64>,
    pub reservation_cap: Option<f64>,
    #[serde(default)]
    pub lbt: LbtFile,
    pub uplinks: Vec<UplinkFile>,
    pub port_groups: Vec<GroupFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic_classes: Vec<ClassFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolFile>,
    pub ports: Vec<PortFile>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UplinkFile {
    pub name: String,
    pub interface: String,
    pub capacity: Option<Bandwidth>,
    /// Administrative state: `down` keeps the uplink out of use whatever its carrier says.
    #[serde(default, skip_serializing_if = "AdminState::is_up")]
    pub admin: AdminState,
}

/// An uplink's administrative state, set by the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AdminState {
    #[default]
    Up,
    Down,
}

impl AdminState {
    pub fn is_up(&self) -> bool {
        *self == AdminState::Up
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PortFile {
    pub name: String,
    pub interface: String,
    pub mac: String,
    pub group: String,
    pub id: Option<u32>,
    pub pool: Option<String>,
    pub class: Option<String>,
    #[serde(default)]
    pub reservation: Bandwidth,
    pub shares: Option<Shares>,
    pub limit: Option<Bandwidth>,
}

/// A checked switch, ready to attach.
pub struct SwitchPlan {
    pub team: Team,
    pub tree: Tree,
    /// Per port (in file order): its ID, interface and NetIOC leaf.
    pub ports: Vec<(PortId, String, NodeId)>,
    /// Per uplink (in file order): its interface and capacity.
    pub uplinks: Vec<(String, Bandwidth)>,
    pub mac_ageing: core::time::Duration,
    /// The file this plan was built from (names, MACs, administrative states).
    pub file: SwitchFile,
}

/// Where interfaces are looked up: `/sys/class/net` normally, a folder of fakes in tests.
pub trait Interfaces {
    fn exists(&self, name: &str) -> bool;
    /// The link speed the interface reports, in Mbit/s.
    fn speed_mbps(&self, name: &str) -> Option<u64>;
}

/// The system's interfaces, from sysfs.
pub struct Sysfs;

impl Interfaces for Sysfs {
    fn exists(&self, name: &str) -> bool {
        !name.contains('/') && Path::new("/sys/class/net").join(name).exists()
    }
    fn speed_mbps(&self, name: &str) -> Option<u64> {
        let s = std::fs::read_to_string(Path::new("/sys/class/net").join(name).join("speed")).ok()?;
        s.trim().parse::<i64>().ok().filter(|v| *v > 0).map(|v| v as u64)
    }
}

/// Reads and checks a switch file.
pub fn load(path: &Path, ifs: &dyn Interfaces) -> Result<SwitchPlan, String> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{file}: cannot read: {e}"))?;
    parse(&text, ifs).map_err(|e| format!("{file}: {e}"))
}

/// Parses and checks switch-file text.
pub fn parse(text: &str, ifs: &dyn Interfaces) -> Result<SwitchPlan, String> {
    check(&parse_file(text)?, ifs)
}

/// Parses switch-file text without checking it against the host.
pub fn parse_file(text: &str) -> Result<SwitchFile, String> {
    teamster_sim::scenario::parse_toml(text)
}

/// The file as TOML, as the daemon saves it after a change made through the API.
pub fn render(f: &SwitchFile) -> String {
    let body = toml::to_string(f).expect("a switch file always serialises");
    format!("# Teamster switch configuration. The daemon rewrites this file when a change is made\n# through its API (`teamster ctl`); edit it while the daemon is stopped.\n\n{body}")
}

/// Checks a switch file against the host (interfaces, capacities) and admission control, and
/// builds the switch it describes.
pub fn check(f: &SwitchFile, ifs: &dyn Interfaces) -> Result<SwitchPlan, String> {
    let lbt = teamster_sim::scenario::lbt_config(&f.lbt)?;
    let cap = match f.reservation_cap {
        Some(c) => ReservationCap::new(c).map_err(|e| format!("reservation_cap: {e}"))?,
        None => ReservationCap::default(),
    };
    let ageing = match f.mac_ageing_s {
        Some(s) if s.is_finite() && s >= 1.0 => core::time::Duration::from_secs_f64(s),
        Some(s) => return Err(format!("mac_ageing_s = {s}: expected at least 1 second")),
        None => teamster_core::switch::MacTable::DEFAULT_AGEING,
    };
    if f.uplinks.is_empty() {
        return Err("uplinks: expected at least one [[uplinks]] table".into());
    }
    let mut interfaces: Vec<(String, String)> = Vec::new();
    // An uplink's interface must exist; a port's may be missing (it attaches when it appears)
    // but must be a name Linux could give an interface.
    let mut claim = |key: String, name: &str, must_exist: bool| -> Result<(), String> {
        if must_exist && !ifs.exists(name) {
            return Err(format!("{key}.interface: no interface named `{name}` on this host"));
        }
        if !must_exist {
            teamster_dp::iface::check_name(name).map_err(|e| format!("{key}.interface: {e}"))?;
        }
        if let Some((_, other)) = interfaces.iter().find(|(n, _)| *n == name) {
            return Err(format!("{key}.interface: `{name}` is already used by {other}"));
        }
        interfaces.push((name.to_string(), key));
        Ok(())
    };
    let mut uplinks = Vec::new();
    for (i, u) in f.uplinks.iter().enumerate() {
        let key = format!("uplinks[{i}]");
        if f.uplinks[..i].iter().any(|o| o.name == u.name) {
            return Err(format!("{key}.name: `{}` is used twice", u.name));
        }
        claim(key.clone(), &u.interface, true)?;
        let capacity = match u.capacity {
            Some(c) if c.bps() > 0 => c,
            Some(_) => return Err(format!("{key}.capacity: must be greater than zero")),
            None => ifs.speed_mbps(&u.interface).map(Bandwidth::from_mbps).ok_or_else(|| {
                format!(
                    "{key}.capacity: not given, and `{}` reports no link speed: set it",
                    u.interface
                )
            })?,
        };
        uplinks.push((u.interface.clone(), capacity));
    }
    let names: Vec<&str> = f.uplinks.iter().map(|u| u.name.as_str()).collect();
    let groups = teamster_sim::scenario::resolve_groups(&f.port_groups, &names)?;
    let specs = f.uplinks.iter().zip(&uplinks).map(|(u, (_, c))| (u.name.clone(), *c));
    let mut team = teamster_sim::scenario::build_team(specs, lbt, &groups)?;
    if f.ports.is_empty() {
        return Err("ports: expected at least one [[ports]] table".into());
    }
    let controls: Vec<PortControls> = f
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| PortControls {
            key: format!("ports[{i}]"),
            name: &p.name,
            pool: p.pool.as_deref(),
            class: p.class.as_deref(),
            reservation: p.reservation,
            shares: p.shares,
            limit: p.limit,
        })
        .collect();
    let (tree, leaves) = build_tree(&f.uplinks[0].name, &f.traffic_classes, &f.pools, &controls)?;
    let mut ports = Vec::new();
    let mut macs: Vec<(MacAddr, String)> = Vec::new();
    for (i, p) in f.ports.iter().enumerate() {
        let key = format!("ports[{i}]");
        claim(key.clone(), &p.interface, false)?;
        let mac: MacAddr = p.mac.parse().map_err(|e| format!("{key}.mac: {e}"))?;
        if mac.is_multicast() {
            return Err(format!(
                "{key}.mac: {mac} is a group address; a port needs a unicast MAC"
            ));
        }
        if let Some((_, other)) = macs.iter().find(|(m, _)| *m == mac) {
            return Err(format!("{key}.mac: {mac} is already the MAC of {other}"));
        }
        macs.push((mac, format!("port `{}`", p.name)));
        let group = f
            .port_groups
            .iter()
            .position(|g| g.name == p.group)
            .ok_or_else(|| format!("{key}.group: no port group named `{}`", p.group))?;
        let id = PortId(p.id.unwrap_or(i as u32 + 1));
        team.add_port(PortSpec {
            id,
            mac,
            group: GroupId(group),
        })
        .map_err(|e| format!("{key}: {e}"))?;
        ports.push((id, p.interface.clone(), leaves[i]));
    }
    let smallest = uplinks.iter().map(|(_, c)| *c).min().expect("at least one uplink");
    admit(&tree, smallest, cap).map_err(|e| format!("admission control: {e}"))?;
    Ok(SwitchPlan {
        team,
        tree,
        ports,
        uplinks,
        mac_ageing: ageing,
        file: f.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interfaces that exist in tests: eth1, eth2 (10 GbE), eth3 (no speed), vnet0, vnet1.
    struct Fake;

    impl Interfaces for Fake {
        fn exists(&self, name: &str) -> bool {
            ["eth1", "eth2", "eth3", "vnet0", "vnet1"].contains(&name)
        }
        fn speed_mbps(&self, name: &str) -> Option<u64> {
            (name == "eth1" || name == "eth2").then_some(10_000)
        }
    }

    const GOOD: &str = r#"
[[uplinks]]
name = "uplink1"
interface = "eth1"
[[uplinks]]
name = "uplink2"
interface = "eth2"
capacity = "1G"
[[port_groups]]
name = "vms"
policy = "load-based"
active = ["uplink1", "uplink2"]
[[traffic_classes]]
class = "vm"
reservation = "500M"
[[ports]]
name = "vm1"
interface = "vnet0"
mac = "52:54:00:00:00:01"
group = "vms"
reservation = "100M"
[[ports]]
name = "vm2"
interface = "vnet1"
mac = "52:54:00:00:00:02"
group = "vms"
"#;

    #[test]
    fn a_good_file_builds_the_switch() {
        let p = parse(GOOD, &Fake).unwrap();
        assert_eq!(
            p.uplinks,
            [
                ("eth1".to_string(), Bandwidth::from_gbps(10)),
                ("eth2".to_string(), Bandwidth::from_gbps(1))
            ]
        );
        assert_eq!(p.ports.len(), 2);
        assert_eq!(p.tree.node(p.ports[0].2).spec.reservation, Bandwidth::from_mbps(100));
    }

    #[test]
    fn a_missing_port_interface_is_allowed() {
        // A stopped VM's tap: the port starts detached and attaches when the tap appears.
        let p = parse(&GOOD.replace("interface = \"vnet1\"", "interface = \"vnet9\""), &Fake).unwrap();
        assert_eq!(p.ports[1].1, "vnet9");
    }

    #[test]
    fn bad_files_name_the_key_before_anything_is_attached() {
        let cases = [
            (
                GOOD.replace("interface = \"eth2\"", "interface = \"eth9\""),
                "uplinks[1].interface: no interface named `eth9`",
            ),
            (
                GOOD.replace("interface = \"vnet1\"", "interface = \"../vnet1\""),
                "ports[1].interface: `../vnet1`: not an interface name",
            ),
            (
                GOOD.replace("interface = \"vnet1\"", "interface = \"vnet0\""),
                "ports[1].interface: `vnet0` is already used by ports[0]",
            ),
            (
                GOOD.replace("interface = \"vnet1\"", "interface = \"eth1\""),
                "ports[1].interface: `eth1` is already used by uplinks[0]",
            ),
            (
                GOOD.replace("52:54:00:00:00:02", "52:54:00:00:00:01"),
                "ports[1].mac: 52:54:00:00:00:01 is already the MAC of port `vm1`",
            ),
            (
                GOOD.replace("52:54:00:00:00:02", "01:00:5e:00:00:01"),
                "ports[1].mac: 01:00:5e:00:00:01 is a group address",
            ),
            (GOOD.replace("52:54:00:00:00:02", "52:54:00"), "ports[1].mac"),
            (
                GOOD.replace("interface = \"eth1\"", "interface = \"eth3\""),
                "uplinks[0].capacity: not given, and `eth3` reports no link speed",
            ),
            (
                GOOD.replace("group = \"vms\"\nreservation", "group = \"web\"\nreservation"),
                "ports[0].group: no port group named `web`",
            ),
            (
                GOOD.replace("reservation = \"100M\"", "reservation = \"900M\""),
                "admission control: `vm1`",
            ),
            (
                GOOD.replace("reservation = \"100M\"", "reservation = \"1GB\""),
                "is in bytes",
            ),
            (
                GOOD.replace("policy = \"load-based\"", "policy = \"fastest\""),
                "port_groups[0].policy",
            ),
            (GOOD.to_string() + "mtu = 9000\n", "unknown field `mtu`"),
        ];
        for (text, want) in cases {
            let e = parse(&text, &Fake)
                .err()
                .unwrap_or_else(|| panic!("accepted; wanted `{want}`"));
            assert!(e.contains(want), "`{want}` not in: {e}");
        }
    }
}
