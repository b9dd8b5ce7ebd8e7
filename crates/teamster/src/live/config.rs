//! `switch.toml`: a live switch, in the same shape as a simulated host.
//!
//! ```toml
//! mac_ageing_s = 300           # optional
//! mac_limit = 16384            # optional: learned MAC-table entries in all (1 to 1048576)
//! mac_limit_per_port = 4096    # optional: learned entries behind one VM port (1 to mac_limit)
//! reservation_cap = 0.75       # optional
//! busy_poll_us = 50            # optional: after frames, poll without sleeping this long (0 to
//!                              # 1000; 0 sleeps at once), see `teamster_dp::datapath`
//! datapath = "kernel"          # optional: "kernel" (the tcx fast path) or "userspace"; unset:
//!                              # the kernel path where it can run; see `super::data_plane`
//! workers = 2                  # optional: data-plane threads (1 to 64; default one per core,
//!                              # at most 8, but 1 with two cores or fewer), see
//!                              # `teamster_dp::datapath::default_workers`
//! [lbt]                        # optional, as in scenarios
//! [[uplinks]]
//! name = "uplink1"
//! interface = "eth1"
//! capacity = "10G"             # optional: else the speed the interface reports in sysfs
//! backend = "af_xdp"           # optional: "af_packet" (the default), "af_xdp" or "auto"
//! [[port_groups]]              # as in scenarios: name, policy, active, standby, failback,
//!                              # notify_switches, vlan
//! security = { forged_transmits = "accept" }  # optional: mac_changes, forged_transmits,
//!                              # promiscuous, each "accept" or "reject" (the default);
//!                              # link_local = ["lldp"]: LLDP from the uplinks to the ports
//! [[traffic_classes]]          # as in packet scenarios (optional)
//! [[pools]]                    # as in packet scenarios (optional)
//! [[ports]]
//! name = "vm1"
//! interface = "vnet0"          # the host end of a veth pair, or a tap device
//! mac = "52:54:00:12:34:56"
//! group = "vms"
//! pool = "gold"                # or class = "nfs"; reservation, shares, limit as in scenarios
//! backend = "auto"             # optional, as for uplinks
//! mac_takeover = true          # optional: take `mac` over from a host outside that uses it
//! ```
//!
//! `backend` chooses how frames move between the interface and the switch. `af_packet` (the
//! default) works on every interface. `af_xdp` attaches an XDP program that redirects the
//! interface's frames to an AF_XDP socket (native XDP where the driver has it, as veth does, else
//! generic; zero-copy where the driver supports it, else copy mode); the switch refuses to
//! start, naming the interface and what is missing, if the kernel, a capability (CAP_BPF), the
//! driver, the MTU (at most 3822: one 4 KiB frame, no jumbo frames), the number of receive
//! queues (one) or an XDP program already on the interface stands in the way. `auto` uses
//! AF_XDP where it works and AF_PACKET elsewhere, and logs which and why. The program is
//! detached when the switch stops, or dies.
//!
//! Everything is checked before any interface is touched: the TOML shape (errors name the key
//! path), names, that every uplink's interface exists (a port's may be missing: a stopped VM's
//! tap; the port then starts detached), that no interface or MAC is used twice, that port MACs
//! are neither zero nor group addresses, that each uplink has a capacity, and admission control.

use serde::{Deserialize, Serialize};
use std::path::Path;
use teamster_core::host::{self, ClassEntry, GroupEntry, HostPort, HostSpec, LbtSection, PoolEntry, UplinkDesc};
use teamster_core::switch::{MacLimits, SwitchConfig};
use teamster_core::units::Bandwidth;
use teamster_dp::backend::BackendChoice;
use teamster_dp::datapath::{DatapathPlan, PortPlan, UplinkPlan};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchFile {
    pub mac_ageing_s: Option<f64>,
    pub mac_limit: Option<u64>,
    pub mac_limit_per_port: Option<u64>,
    pub reservation_cap: Option<f64>,
    pub busy_poll_us: Option<u64>,
    /// Which data plane switches the frames (see [`super::data_plane`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath: Option<super::data_plane::DataPlane>,
    pub workers: Option<u64>,
    #[serde(default)]
    pub lbt: LbtSection,
    /// Receive queues per uplink (see [`super::rx_config`]).
    #[serde(default, skip_serializing_if = "super::rx_config::RxSection::is_default")]
    pub rx: super::rx_config::RxSection,
    pub uplinks: Vec<UplinkFile>,
    pub port_groups: Vec<GroupEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic_classes: Vec<ClassEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortFile>,
    /// Interfaces that become ports when they appear (see `super::port_rules`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_rules: Vec<PortRule>,
    /// The cluster controller this host belongs to (see [`super::controller_config`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<super::controller_config::ControllerSection>,
}

/// A `[[port_rules]]` entry: an interface whose name matches `match` (a glob: `*` any run of
/// characters, `?` one) and, if given, whose MAC starts with `mac_prefix`, becomes a port of
/// `group` named after the interface when it appears, and stops being one when it goes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PortRule {
    #[serde(rename = "match")]
    pub pattern: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_prefix: Option<String>,
    pub group: String,
    /// How the VM's MAC is found (see [`VmMac`]).
    #[serde(default, skip_serializing_if = "VmMac::is_default")]
    pub vm_mac: VmMac,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default)]
    pub reservation: Bandwidth,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<teamster_core::ioc::Shares>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Bandwidth>,
    #[serde(default, skip_serializing_if = "BackendSetting::is_default")]
    pub backend: BackendSetting,
}

/// How a matched port's VM MAC is found from its interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VmMac {
    /// libvirt's rule: a tap's MAC is the guest's with the first byte set to `fe`; the guest's
    /// first byte is taken to be libvirt's default, `52` (prefix 52:54:00). A tap whose MAC
    /// does not start with `fe` is not matched (an event says why).
    #[default]
    Libvirt,
    /// The interface's own MAC (an interface the VM itself owns, such as a macvtap).
    Interface,
}

impl VmMac {
    pub fn is_default(&self) -> bool {
        *self == VmMac::Libvirt
    }
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
    /// How frames move between the interface and the switch.
    #[serde(default, skip_serializing_if = "BackendSetting::is_default")]
    pub backend: BackendSetting,
}

/// An interface's I/O backend (`backend = "af_packet" | "af_xdp" | "auto"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackendSetting {
    #[default]
    AfPacket,
    AfXdp,
    Auto,
}

impl BackendSetting {
    pub fn is_default(&self) -> bool {
        *self == BackendSetting::AfPacket
    }

    /// The data plane's choice for this setting.
    pub fn choice(self) -> teamster_dp::backend::BackendChoice {
        use teamster_dp::backend::BackendChoice;
        match self {
            BackendSetting::AfPacket => BackendChoice::AfPacket,
            BackendSetting::AfXdp => BackendChoice::AfXdp,
            BackendSetting::Auto => BackendChoice::Auto,
        }
    }
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

teamster_core::port_entry! {
    /// A `[[ports]]` entry of `switch.toml`: the host model's port, on an interface.
    pub struct PortFile {
        /// The host end of a veth pair, or a tap device.
        pub interface: String,
        /// How frames move between the interface and the switch.
        #[serde(default, skip_serializing_if = "BackendSetting::is_default")]
        pub backend: BackendSetting,
        /// Where the port came from (not in the file: a port read from it is `configured`).
        #[serde(skip)]
        pub origin: PortOrigin,
        /// The libvirt domain whose port it is (origin `libvirt` only; kept with the hook's
        /// ports in their own file, see [`super::domain_ports`]).
        #[serde(skip)]
        pub owner: Option<String>,
        /// The operator's word: the port takes its MAC over from a host outside that uses it
        /// (a gateway's MAC, say); without it the port waits until that host is quiet (see
        /// `teamster_core::switch::claims`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub mac_takeover: bool,
    }
}

/// Where a port came from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PortOrigin {
    /// From `switch.toml` when the switch started (or a port added through the API before).
    #[default]
    Configured,
    /// Added through the API (`POST /api/v1/ports`, `teamster ctl port add`) since the start;
    /// saved in `switch.toml`, so `configured` after a restart.
    Api,
    /// Attached because its interface matched a `[[port_rules]]` entry; removed when the
    /// interface goes, and never saved.
    Matched,
    /// Attached because the cluster controller (`[controller]`) assigns its VM to this host;
    /// detached when it no longer does, and never saved (the controller holds it).
    Assigned,
    /// Made by the libvirt hook for a running VM (its `owner`, the domain); removed when the
    /// domain stops. Saved in the hook's own file beside `switch.toml`, not in it.
    Libvirt,
}

impl PortOrigin {
    /// Whether a port of this origin is saved with the file.
    pub fn saved(&self) -> bool {
        !matches!(self, PortOrigin::Matched | PortOrigin::Assigned | PortOrigin::Libvirt)
    }
}

/// A switch file with one 10 Gbit/s uplink and one port (vm1, limited to 2 Gbit/s), for tests.
#[cfg(test)]
pub(crate) const ONE_PORT: &str = r#"
[[uplinks]]
name = "uplink1"
interface = "eth1"
capacity = "10G"
[[port_groups]]
name = "vms"
policy = "port-id"
active = ["uplink1"]
[[ports]]
name = "vm1"
interface = "vnet0"
mac = "52:54:00:00:00:01"
group = "vms"
limit = "2G"
"#;

/// A checked switch, ready to attach or to change to: what the data plane is to run (its ports
/// and uplinks each by name, see [`port_plan`] and [`uplink_plan`]), and the file it was
/// built from.
pub struct SwitchPlan {
    pub datapath: DatapathPlan,
    /// The file this plan was built from (names, MACs, origins, administrative states).
    pub file: SwitchFile,
}

/// The first uplink or port of `f` that asks for AF_XDP (`uplink \`u1\``), if any.
fn af_xdp_user(f: &SwitchFile) -> Option<String> {
    let xdp = BackendSetting::AfXdp;
    (f.uplinks
        .iter()
        .find(|u| u.backend == xdp)
        .map(|u| format!("uplink `{}`", u.name)))
    .or_else(|| {
        f.ports
            .iter()
            .find(|p| p.backend == xdp)
            .map(|p| format!("port `{}`", p.name))
    })
}

/// Why what `f` asks of the data plane keeps the switch off the kernel path (a `workers` other
/// than 1, an `[rx]` section, AF_XDP), if anything does: with `datapath` unset, the switch then
/// runs on the user-space path and logs this.
pub fn kernel_refusal(f: &SwitchFile) -> Option<String> {
    super::data_plane::kernel_refusal(f.workers, f.rx.is_default(), af_xdp_user(f))
}

/// Where interfaces are looked up: `/sys/class/net` normally, a folder of fakes in tests.
pub trait Interfaces {
    fn exists(&self, name: &str) -> bool;
    /// The link speed the interface reports, in Mbit/s.
    fn speed_mbps(&self, name: &str) -> Option<u64>;
    /// The interface's MAC address (an LACP group's system ID when its file gives none).
    fn mac(&self, name: &str) -> Option<teamster_core::wire::MacAddr> {
        let _ = name;
        None
    }
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
    fn mac(&self, name: &str) -> Option<teamster_core::wire::MacAddr> {
        teamster_dp::iface::check_name(name).ok()?;
        let s = std::fs::read_to_string(Path::new("/sys/class/net").join(name).join("address")).ok()?;
        s.trim().parse().ok()
    }
}

/// The groups of `f` with each LACP group's system ID filled in, where the file gives none, with
/// the MAC of its first active uplink's interface (so two hosts with the same file never share
/// an ID a physical switch would bundle across them). Only for building: the file keeps its
/// text. An interface absent at start leaves the placeholder ID (see
/// [`host::placeholder_system`]) for the run.
fn with_lacp_systems(f: &SwitchFile, ifs: &dyn Interfaces) -> Vec<GroupEntry> {
    let mut groups = f.port_groups.clone();
    for g in groups
        .iter_mut()
        .filter(|g| g.mode == teamster_core::teaming::TeamMode::Lacp)
    {
        let entry = g.lacp.get_or_insert_with(Default::default);
        if entry.system_mac.is_some() {
            continue;
        }
        let first = g.active.first().and_then(|a| f.uplinks.iter().find(|u| u.name == *a));
        if let Some(mac) = first.and_then(|u| ifs.mac(&u.interface)) {
            entry.system_mac = Some(mac.to_string());
        }
    }
    groups
}

/// Parses and checks switch-file text.
#[cfg(test)]
pub fn parse(text: &str, ifs: &dyn Interfaces) -> Result<SwitchPlan, String> {
    check(&parse_file(text)?, ifs)
}

/// Parses switch-file text without checking it against the host.
pub fn parse_file(text: &str) -> Result<SwitchFile, String> {
    let mut f: SwitchFile = host::parse_toml(text)?;
    if let Some(c) = f.controller.as_mut() {
        super::controller_config::fill(c);
    }
    Ok(f)
}

/// The file's settings as TOML, what the daemon saves after a change made through the API
/// (without the header [`saved_text`] adds): two files whose `render` is the same say the same.
pub fn render(f: &SwitchFile) -> String {
    // Ports matched by a rule live as long as their interface, ports the controller assigns as
    // long as it does, and the libvirt hook's are kept in a file of their own: not saved here.
    let saved = SwitchFile {
        ports: f.ports.iter().filter(|p| p.origin.saved()).cloned().collect(),
        ..f.clone()
    };
    toml::to_string(&saved).expect("a switch file always serialises")
}

/// The first words of the header the daemon writes, before the revision's number.
const REVISION_LINE: &str = "# Teamster switch configuration, revision ";

/// The file as the daemon saves it: a header naming `revision` (the count of the daemon's
/// saves, see [`super::persist::KeptFile`]) and how to edit it, then `body`, its [`render`].
pub fn saved_text(body: &str, revision: u64) -> String {
    format!(
        "{REVISION_LINE}{revision}. The daemon rewrites this file\n\
         # when a change is made through its API (`teamster ctl`, the libvirt hook's ports excepted).\n\
         # To edit it: edit, then reload (`systemctl reload teamster`) before any other change, and\n\
         # keep this line: a reload refuses an edit of an older revision, and a change through the\n\
         # API refuses to overwrite an edit not yet reloaded. Comments are not kept.\n\n{body}"
    )
}

/// The revision a saved file's header names, if it has that header.
pub fn revision_of(text: &str) -> Option<u64> {
    text.lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.strip_prefix(REVISION_LINE)?.split('.').next()?.parse().ok())
}

/// The longest MAC ageing time accepted: a day.
const MAX_AGEING_S: f64 = 86_400.0;

/// Checks a switch file against the host (interfaces, capacities) and admission control, and
/// builds the switch it describes, at start: an uplink without a capacity in the file gets the
/// speed its interface reports.
pub fn check(f: &SwitchFile, ifs: &dyn Interfaces) -> Result<SwitchPlan, String> {
    check_with(f, ifs, &[])
}

/// Checks a change to a running switch: as [`check`], except that an uplink the switch already
/// runs keeps the capacity it runs at unless the file sets one (`running`, by uplink name), so
/// a change is never refused because a speed is unreadable while a carrier is down.
pub fn check_with(f: &SwitchFile, ifs: &dyn Interfaces, running: &[(String, Bandwidth)]) -> Result<SwitchPlan, String> {
    let ageing = match f.mac_ageing_s {
        Some(s) if s.is_finite() && (1.0..=MAX_AGEING_S).contains(&s) => core::time::Duration::from_secs_f64(s),
        Some(s) => return Err(format!("mac_ageing_s = {s}: expected seconds from 1 to {MAX_AGEING_S}")),
        None => teamster_core::switch::MacTable::DEFAULT_AGEING,
    };
    let mac_limits = mac_limits(f)?;
    let busy_poll = match f.busy_poll_us {
        None => teamster_dp::datapath::DEFAULT_BUSY_POLL,
        Some(us) if us <= 1000 => core::time::Duration::from_micros(us),
        Some(us) => return Err(format!("busy_poll_us = {us}: expected microseconds from 0 to 1000")),
    };
    let max = teamster_dp::datapath::MAX_WORKERS;
    let workers = match f.workers {
        None => teamster_dp::datapath::default_workers().min(max),
        Some(n) if (1..=max as u64).contains(&n) => n as usize,
        Some(n) => return Err(format!("workers = {n}: expected data-plane threads from 1 to {max}")),
    };
    let backends: Vec<(String, bool)> = (f.uplinks.iter())
        .map(|u| (u.name.clone(), u.backend == BackendSetting::AfXdp))
        .collect();
    let rx = super::rx_config::rx_plan(&f.rx, workers, &backends)?;
    super::data_plane::check(f.datapath, f.workers, f.rx.is_default(), af_xdp_user(f))?;
    // The kernel path switches in the kernel: one thread handles what it hands up.
    let workers = if f.datapath == Some(super::data_plane::DataPlane::Kernel) {
        1
    } else {
        workers
    };
    if let Some(c) = &f.controller {
        let groups: Vec<String> = f.port_groups.iter().map(|g| g.name.clone()).collect();
        let nodes: Vec<String> = (f.traffic_classes.iter().map(|c| c.class.clone()))
            .chain(f.pools.iter().map(|p| p.name.clone()))
            .collect();
        c.check(&groups, &nodes)?;
    }
    // By name, so a check costs time linear in the ports (a domain's thousands of them).
    let mut interfaces: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    // An uplink's interface must exist; a port's may be missing (it attaches when it appears)
    // but must be a name Linux could give an interface.
    // `who` is the object by name, so that a refusal names both sides as the operator knows
    // them (an uplink being added conflicts with a port the file lists earlier, say).
    let mut claim = |key: String, who: &str, name: &str, must_exist: bool| -> Result<(), String> {
        teamster_dp::iface::check_name(name).map_err(|e| format!("{key}.interface: {e}"))?;
        if must_exist && !ifs.exists(name) {
            return Err(format!("{key}.interface: no interface named `{name}` on this host"));
        }
        if let Some(other) = interfaces.get(name) {
            return Err(format!("{key}.interface ({who}): `{name}` is already used by {other}"));
        }
        interfaces.insert(name.to_string(), format!("{key} ({who})"));
        Ok(())
    };
    let max_uplinks = teamster_dp::datapath::MAX_UPLINKS;
    if f.uplinks.len() > max_uplinks {
        return Err(format!(
            "uplinks: {} uplinks, and a switch has at most {max_uplinks}",
            f.uplinks.len()
        ));
    }
    let mut uplinks = Vec::new();
    for (i, u) in f.uplinks.iter().enumerate() {
        let key = format!("uplinks[{i}]");
        claim(key.clone(), &format!("uplink `{}`", u.name), &u.interface, true)?;
        let kept = running.iter().find(|(n, _)| *n == u.name).map(|(_, c)| *c);
        let capacity = match (u.capacity, kept) {
            (Some(c), _) | (None, Some(c)) => c,
            (None, None) => ifs.speed_mbps(&u.interface).map(Bandwidth::from_mbps).ok_or_else(|| {
                format!(
                    "{key}.capacity: not given, and `{}` reports no link speed: set it",
                    u.interface
                )
            })?,
        };
        uplinks.push(uplink_plan(u, capacity, &f.rx));
    }
    // The data plane holds at most this many ports (its port workers' counters are allocated
    // at start): a file over it would be saved by the API and then refused at the next start,
    // and the port over it never attached.
    let max_ports = teamster_dp::datapath::MAX_PORTS;
    if f.ports.len() > max_ports {
        return Err(format!(
            "ports: {} ports, and a switch holds at most {max_ports}",
            f.ports.len()
        ));
    }
    // A port given an uplink's own MAC would take the host's traffic on that uplink (and the
    // physical switch would see the MAC on two ports of its own): refused, naming both.
    let uplink_macs: std::collections::HashMap<teamster_core::wire::MacAddr, &str> = (f.uplinks.iter())
        .filter_map(|u| Some((ifs.mac(&u.interface)?, u.name.as_str())))
        .collect();
    for (i, p) in f.ports.iter().enumerate() {
        claim(
            format!("ports[{i}]"),
            &format!("port `{}`", p.name),
            &p.interface,
            false,
        )?;
        let mac = p
            .mac
            .as_deref()
            .and_then(|m| m.parse::<teamster_core::wire::MacAddr>().ok());
        if let Some(uplink) = mac.and_then(|m| uplink_macs.get(&m)) {
            return Err(format!(
                "ports[{i}].mac (port `{}`): {} is the MAC of uplink `{uplink}`'s interface: a port given it would take the host's own traffic on that uplink; give the port its VM's MAC",
                p.name,
                p.mac.as_deref().unwrap_or_default()
            ));
        }
    }
    let groups = with_lacp_systems(f, ifs);
    let built = host::build(
        HostSpec {
            lbt: &f.lbt,
            reservation_cap: f.reservation_cap,
            uplinks: (uplinks.iter())
                .map(|u| UplinkDesc {
                    name: u.name.clone(),
                    capacity: u.capacity,
                })
                .collect(),
            port_groups: &groups,
            traffic_classes: &f.traffic_classes,
            pools: &f.pools,
            ports: &f.ports,
        },
        // A live port's MAC is the one its VM uses: the file must say it.
        &mut |_, _| None,
    )?;
    check_rules(f, ifs, running)?;
    // Joined by name: the built host's port and the entry it was built from.
    let entries: std::collections::HashMap<&str, &PortFile> = f.ports.iter().map(|p| (p.name.as_str(), p)).collect();
    let ports = (built.ports.iter())
        .map(|hp| match entries.get(hp.name.as_str()) {
            Some(p) => Ok(port_plan(p, hp)),
            None => Err(format!("port {}: built from no [[ports]] entry", hp.name)),
        })
        .collect::<Result<_, String>>()?;
    Ok(SwitchPlan {
        datapath: DatapathPlan {
            team: built.team,
            tree: built.tree,
            reservation_cap: built.reservation_cap,
            ports,
            uplinks,
            switch: SwitchConfig {
                ageing,
                mac_limits,
                security: f.port_groups.iter().map(|g| g.security).collect(),
                overlays: teamster_core::host::overlays(&f.port_groups),
            },
            busy_poll,
            workers,
            rx,
        },
        file: f.clone(),
    })
}

/// The port a `[[ports]]` entry plans, whichever road made the entry (the file or a reload of
/// it, the API, a port rule, the libvirt hook, the cluster controller): its ID, MAC, group
/// and NetIOC leaf as the checked host `built` them, the rest as the entry says.
pub fn port_plan(p: &PortFile, built: &HostPort) -> PortPlan {
    PortPlan {
        id: built.id,
        name: p.name.clone(),
        interface: p.interface.clone(),
        mac: built.mac,
        group: built.group,
        leaf: built.leaf,
        backend: p.backend.choice(),
        mac_takeover: p.mac_takeover,
    }
}

/// The uplink an `[[uplinks]]` entry plans, at `capacity` (the file's, the one it runs at, or
/// the interface's speed: see [`check_with`]).
pub fn uplink_plan(u: &UplinkFile, capacity: Bandwidth, rx: &super::rx_config::RxSection) -> UplinkPlan {
    UplinkPlan {
        name: u.name.clone(),
        interface: u.interface.clone(),
        capacity,
        follows_link_speed: u.capacity.is_none(),
        admin_up: u.admin == AdminState::Up,
        // Receive queues are sockets of one AF_PACKET fanout group.
        backend: match u.backend.choice() {
            BackendChoice::Auto if rx.queue_count() > 1 => BackendChoice::AfPacket,
            choice => choice,
        },
    }
}

/// Checks `[[port_rules]]`: each on its own, then a port each would make, added to the file
/// (without its reservation: whether that fits is decided when an interface matches, against
/// the ports there are then).
fn check_rules(f: &SwitchFile, ifs: &dyn Interfaces, running: &[(String, Bandwidth)]) -> Result<(), String> {
    if f.port_rules.is_empty() {
        return Ok(());
    }
    // A MAC no port has, for the trial ports. Compared as addresses, not text: "02:7E:..." or
    // "02-7e-..." in the file is taken too.
    let used: Vec<teamster_core::wire::MacAddr> =
        f.ports.iter().filter_map(|p| p.mac.as_deref()?.parse().ok()).collect();
    let mac = (1..=u32::MAX)
        .map(|n| {
            let b = n.to_be_bytes();
            teamster_core::wire::MacAddr([0x02, 0x7e, b[0], b[1], b[2], b[3]])
        })
        .find(|m| !used.contains(m))
        .expect("a free MAC");
    for (i, r) in f.port_rules.iter().enumerate() {
        let key = format!("port_rules[{i}]");
        check_rule(&key, r)?;
        // An uplink's interface is never a VM's: a rule that matches one would make the NIC a
        // VM port the moment the uplink is removed (the rules rescan every interface).
        if let Some(u) = f
            .uplinks
            .iter()
            .find(|u| super::glob::glob_match(&r.pattern, &u.interface))
        {
            return Err(format!(
                "{key}.match: `{}` matches uplink `{}`'s interface {}: a rule must not match an uplink",
                r.pattern, u.name, u.interface
            ));
        }
        let mut trial = f.clone();
        trial.port_rules.clear();
        // A full switch: the rule's port is tried in place of the last one (what is checked is
        // the port the rule makes; the count is checked when an interface matches).
        trial.ports.truncate(teamster_dp::datapath::MAX_PORTS - 1);
        let mut port = port_from(r, "rule-check", mac);
        port.name = key.clone();
        port.reservation = Bandwidth::ZERO;
        trial.ports.push(port);
        check_with(&trial, ifs, running).map_err(|e| format!("{key}: a port this rule makes is refused: {e}"))?;
    }
    Ok(())
}

/// A MAC prefix: one to six hex bytes separated by colons ("fe:54:00").
pub fn parse_mac_prefix(s: &str) -> Result<Vec<u8>, String> {
    let bytes: Result<Vec<u8>, _> = s.split(':').map(|b| u8::from_str_radix(b, 16)).collect();
    match bytes {
        Ok(b) if (1..=6).contains(&b.len()) && s.split(':').all(|b| b.len() == 2) => Ok(b),
        _ => Err(format!(
            "`{}` is not a MAC prefix (one to six hex bytes such as \"fe:54:00\")",
            s.escape_debug()
        )),
    }
}

/// Checks a rule on its own (the file's check builds a port from it for the rest).
pub fn check_rule(key: &str, r: &PortRule) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "-_.*?@:".contains(c);
    if r.pattern.is_empty() || r.pattern.len() > 64 || !r.pattern.chars().all(ok) {
        return Err(format!(
            "{key}.match: `{}` is not an interface-name glob (letters, digits, - _ . @ :, and * or ?)",
            r.pattern.escape_debug()
        ));
    }
    if r.pattern.chars().all(|c| c == '*' || c == '?') {
        return Err(format!(
            "{key}.match: `{}` matches every interface, uplinks' and the host's own among them: name a prefix such as \"vnet*\"",
            r.pattern
        ));
    }
    if let Some(m) = &r.mac_prefix {
        parse_mac_prefix(m).map_err(|e| format!("{key}.mac_prefix: {e}"))?;
    }
    Ok(())
}

/// The port rule `rule` gives interface `name` whose VM MAC is `mac`.
pub fn port_from(rule: &PortRule, name: &str, mac: teamster_core::wire::MacAddr) -> PortFile {
    PortFile {
        name: name.to_string(),
        id: None,
        mac: Some(mac.to_string()),
        group: rule.group.clone(),
        pool: rule.pool.clone(),
        class: rule.class.clone(),
        reservation: rule.reservation,
        shares: rule.shares,
        limit: rule.limit,
        interface: name.to_string(),
        backend: rule.backend,
        origin: PortOrigin::Matched,
        owner: None,
        mac_takeover: false,
    }
}

/// The MAC-table limits the file sets, range-checked (a total of at least one, a per-port limit
/// no greater than the total).
fn mac_limits(f: &SwitchFile) -> Result<MacLimits, String> {
    let default = MacLimits::default();
    let total = match f.mac_limit {
        None => default.total,
        Some(n) if (1..=MacLimits::MAX as u64).contains(&n) => n as usize,
        Some(n) => {
            let max = MacLimits::MAX;
            return Err(format!("mac_limit = {n}: expected 1 to {max} learned addresses"));
        }
    };
    let per_port = match f.mac_limit_per_port {
        None => default.per_port.min(total),
        Some(n) if n >= 1 && n <= total as u64 => n as usize,
        Some(n) => {
            return Err(format!(
                "mac_limit_per_port = {n}: expected 1 to mac_limit ({total}) learned addresses"
            ))
        }
    };
    Ok(MacLimits { total, per_port })
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
        fn mac(&self, name: &str) -> Option<teamster_core::wire::MacAddr> {
            (name == "eth1").then(|| "02:00:00:00:0e:01".parse().unwrap())
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
        let p = parse(GOOD, &Fake).unwrap().datapath;
        let uplinks: Vec<_> = (p.uplinks.iter())
            .map(|u| (u.name.as_str(), u.interface.as_str(), u.capacity, u.follows_link_speed))
            .collect();
        assert_eq!(
            uplinks,
            [
                ("uplink1", "eth1", Bandwidth::from_gbps(10), true),
                ("uplink2", "eth2", Bandwidth::from_gbps(1), false)
            ]
        );
        let ports: Vec<_> = (p.ports.iter())
            .map(|p| (p.name.as_str(), p.interface.as_str(), p.mac.to_string()))
            .collect();
        assert_eq!(
            ports,
            [
                ("vm1", "vnet0", "52:54:00:00:00:01".to_string()),
                ("vm2", "vnet1", "52:54:00:00:00:02".to_string())
            ]
        );
        let vm1 = &p.ports[0];
        assert_eq!(p.tree.node(vm1.leaf).spec.reservation, Bandwidth::from_mbps(100));
        assert_eq!(p.team.port_mac(vm1.id), Some(vm1.mac), "the team's port is the plan's");
    }

    /// A port may not take an uplink's own MAC (it would take the host's traffic there).
    #[test]
    fn a_port_with_an_uplinks_mac_is_refused() {
        let Err(e) = parse(&GOOD.replace("52:54:00:00:00:02", "02:00:00:00:0E:01"), &Fake) else {
            panic!("a port with an uplink's MAC was taken");
        };
        assert!(
            e.contains("ports[1].mac") && e.contains("vm2") && e.contains("uplink `uplink1`"),
            "{e}"
        );
    }

    #[test]
    fn backends_are_chosen_per_interface_and_saved_as_given() {
        use teamster_dp::backend::BackendChoice;
        let p = parse(GOOD, &Fake).unwrap();
        assert!(p.file.uplinks.iter().all(|u| u.backend == BackendSetting::AfPacket));
        assert!(!render(&p.file).contains("backend"), "the default is not written out");
        let text = GOOD
            .replace("interface = \"eth1\"", "interface = \"eth1\"\nbackend = \"af_xdp\"")
            .replace("interface = \"vnet1\"", "interface = \"vnet1\"\nbackend = \"auto\"");
        let p = parse(&text, &Fake).unwrap();
        assert_eq!(p.file.uplinks[0].backend.choice(), BackendChoice::AfXdp);
        assert_eq!(p.file.uplinks[1].backend.choice(), BackendChoice::AfPacket);
        assert_eq!(p.file.ports[0].backend.choice(), BackendChoice::AfPacket);
        assert_eq!(p.file.ports[1].backend.choice(), BackendChoice::Auto);
        let again = parse(&render(&p.file), &Fake).unwrap();
        assert_eq!(again.file.uplinks[0].backend, BackendSetting::AfXdp);
        assert_eq!(again.file.ports[1].backend, BackendSetting::Auto);
    }

    /// A switch may start with no ports (a host waiting for its VMs), and port rules are
    /// checked before anything is attached: the glob, the MAC prefix, and the port a rule makes
    /// (its group, pool and controls).
    #[test]
    fn port_rules_are_checked_at_start() {
        let no_ports = &GOOD[..GOOD.find("[[ports]]").unwrap()];
        let rule = "[[port_rules]]\nmatch = \"vnet*\"\ngroup = \"vms\"\nlimit = \"1G\"\n";
        let p = parse(&format!("{no_ports}{rule}"), &Fake).unwrap();
        assert!(p.datapath.ports.is_empty());
        assert_eq!(p.file.port_rules[0].pattern, "vnet*");
        assert!(render(&p.file).contains("match = \"vnet*\""));
        for (bad, want) in [
            (rule.replace("vnet*", "*"), "port_rules[0].match"),
            (rule.replace("vnet*", "vn/et"), "port_rules[0].match"),
            (
                rule.replace("group = \"vms\"", "group = \"nope\""),
                "no port group named `nope`",
            ),
            (format!("{rule}mac_prefix = \"fe:zz\"\n"), "port_rules[0].mac_prefix"),
            (format!("{rule}pool = \"none\"\n"), "port_rules[0]"),
            (rule.replace("limit = \"1G\"", "limit = \"0\""), "port_rules[0]"),
            (format!("{rule}vm_mac = \"guess\"\n"), "vm_mac"),
            (
                rule.replace("vnet*", "eth?"),
                "port_rules[0].match: `eth?` matches uplink `uplink1`'s interface eth1: a rule must not match an uplink",
            ),
        ] {
            let e = match parse(&format!("{no_ports}{bad}"), &Fake) {
                Ok(_) => panic!("accepted: {bad}"),
                Err(e) => e,
            };
            assert!(e.contains(want), "`{want}` not in: {e}");
        }
    }

    /// A file may hold as many ports as the data plane does, port rules included, and no more:
    /// one port over would be saved by the API and then refused at the next start.
    #[test]
    fn the_ports_are_at_most_what_the_data_plane_holds() {
        let max = teamster_dp::datapath::MAX_PORTS;
        let no_ports = &GOOD[..GOOD.find("[[ports]]").unwrap()];
        let rule = "[[port_rules]]\nmatch = \"vnet*\"\ngroup = \"vms\"\n";
        let mut f = parse_file(&format!("{no_ports}{rule}")).unwrap();
        let mut text = String::new();
        for i in 0..=max {
            let mac = format!("52:54:00:01:{:02x}:{:02x}", i >> 8, i & 0xff);
            text += &format!("[[ports]]\nname = \"p{i}\"\ninterface = \"t{i}\"\nmac = \"{mac}\"\ngroup = \"vms\"\n");
        }
        f.ports = parse_file(&format!("{no_ports}{text}")).unwrap().ports;
        let e = check(&f, &Fake).err().expect("one port over the data plane's limit");
        assert!(e.contains(&format!("at most {max}")), "{e}");
        f.ports.pop();
        assert!(check(&f, &Fake).is_ok(), "a full switch with a port rule");
    }

    /// The MAC the rules' check gives its trial port is free whatever way the file writes MACs.
    #[test]
    fn a_rule_is_checked_against_the_macs_the_ports_have() {
        let rule = "[[port_rules]]\nmatch = \"vnet*\"\ngroup = \"vms\"\n";
        for written in ["02:7E:00:00:00:01", "02-7e-00-00-00-01"] {
            let text = format!("{}{rule}", GOOD.replace("52:54:00:00:00:01", written));
            assert!(parse(&text, &Fake).is_ok(), "{written}");
        }
    }

    #[test]
    fn security_and_mac_limits_reach_the_switch() {
        use teamster_core::switch::{SecurityPolicy, Verdict};
        let p = parse(GOOD, &Fake).unwrap();
        assert_eq!(p.datapath.switch.security, [SecurityPolicy::default()]);
        assert_eq!(p.datapath.switch.mac_limits, MacLimits::default());
        let text = GOOD.replace(
            "policy = \"load-based\"",
            "policy = \"load-based\"\nsecurity = { forged_transmits = \"accept\", promiscuous = \"reject\" }",
        );
        let p = parse(&format!("mac_limit = 100\n{text}"), &Fake).unwrap();
        let s = p.datapath.switch.security[0];
        assert!(s.forged_transmits == Verdict::Accept && s.mac_changes == Verdict::Reject);
        assert_eq!(
            p.datapath.switch.mac_limits,
            MacLimits {
                total: 100,
                per_port: 100
            }
        );
        // Saved as it was given (the default policy is not written out).
        assert!(render(&p.file).contains("forged_transmits = \"accept\""));
        let lldp = GOOD.replace(
            "policy = \"load-based\"",
            "policy = \"load-based\"\nsecurity = { link_local = [\"lldp\"] }",
        );
        let p = parse(&lldp, &Fake).unwrap();
        assert_eq!(
            p.datapath.switch.security[0].link_local,
            teamster_core::switch::LinkLocal::LLDP
        );
        assert!(
            render(&p.file).contains("link_local = [\"lldp\"]"),
            "{}",
            render(&p.file)
        );
        assert!(!render(&parse(GOOD, &Fake).unwrap().file).contains("security"));
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
                "ports[1].interface (port `vm2`): `vnet0` is already used by ports[0] (port `vm1`)",
            ),
            (
                GOOD.replace("interface = \"vnet1\"", "interface = \"eth1\""),
                "ports[1].interface (port `vm2`): `eth1` is already used by uplinks[0] (uplink `uplink1`)",
            ),
            (
                GOOD.replace("52:54:00:00:00:02", "52:54:00:00:00:01"),
                "ports[1].mac: 52:54:00:00:00:01 is already the MAC of port `vm1`",
            ),
            (
                GOOD.replace("52:54:00:00:00:02", "00:00:00:00:00:00"),
                "ports[1].mac: the all-zero MAC",
            ),
            (
                GOOD.replace("mac = \"52:54:00:00:00:02\"\n", ""),
                "ports[1].mac: required",
            ),
            (
                GOOD.replace("interface = \"vnet1\"", "interface = \"..\""),
                "ports[1].interface: `..`: not an interface name",
            ),
            (
                GOOD.replace("interface = \"vnet1\"", "interface = \"a/b\""),
                "ports[1].interface: `a/b`: not an interface name",
            ),
            (
                GOOD.replace("name = \"vm2\"", "name = \"\""),
                "ports[1].name: expected a name of 1 to 64 characters",
            ),
            (
                GOOD.replace("name = \"vm2\"", "name = \"../etc\""),
                "ports[1].name: `../etc` is not a usable name",
            ),
            (
                GOOD.replace("capacity = \"1G\"", "capacity = 100"),
                "uplinks[1].capacity: 100bps is under 1Mbps: write the unit",
            ),
            (
                GOOD.replace("reservation = \"100M\"", "reservation = \"100M\"\nlimit = 0"),
                "ports[0].limit: 0bps is below the smallest limit",
            ),
            (
                format!("busy_poll_us = 1001\n{GOOD}"),
                "busy_poll_us = 1001: expected microseconds from 0 to 1000",
            ),
            (format!("busy_poll_us = -1\n{GOOD}"), "busy_poll_us"),
            (
                format!("workers = 0\n{GOOD}"),
                "workers = 0: expected data-plane threads from 1 to 64",
            ),
            (
                format!("workers = 65\n{GOOD}"),
                "workers = 65: expected data-plane threads from 1 to 64",
            ),
            (format!("workers = \"two\"\n{GOOD}"), "workers"),
            (
                format!("mac_ageing_s = 1e20\n{GOOD}"),
                "mac_ageing_s = 100000000000000000000: expected seconds",
            ),
            (
                GOOD.replace(
                    "[[uplinks]]\nname = \"uplink1\"",
                    "[lbt]\nwindow_s = 1e20\n[[uplinks]]\nname = \"uplink1\"",
                ),
                "lbt.window_s = 100000000000000000000: expected seconds from 0.03 to 86400",
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
            (
                GOOD.replace("52:54:00:00:00:02", "00:00:00:00:00:00"),
                "ports[1].mac: the all-zero MAC is not a port's address",
            ),
            (
                GOOD.replace(
                    "policy = \"load-based\"",
                    "policy = \"load-based\"\nsecurity = { forged = \"accept\" }",
                ),
                "port_groups[0].security.forged",
            ),
            (
                GOOD.replace(
                    "policy = \"load-based\"",
                    "policy = \"load-based\"\nsecurity = { promiscuous = \"yes\" }",
                ),
                "port_groups[0].security.promiscuous",
            ),
            (
                GOOD.replace(
                    "policy = \"load-based\"",
                    "policy = \"load-based\"\nsecurity = { link_local = [\"stp\"] }",
                ),
                "port_groups[0].security.link_local[0]",
            ),
            (
                GOOD.replace(
                    "policy = \"load-based\"",
                    "policy = \"load-based\"\nsecurity = { link_local = [\"stp\"] }",
                ),
                "unknown variant `stp`, expected `lldp`",
            ),
            (
                GOOD.replace(
                    "policy = \"load-based\"",
                    "policy = \"load-based\"\nsecurity = { link_local = [\"lldp\", \"lldp\"] }",
                ),
                "`lldp` listed twice",
            ),
            (
                GOOD.replace(
                    "policy = \"load-based\"",
                    "policy = \"load-based\"\nsecurity = { link_local = \"lldp\" }",
                ),
                "port_groups[0].security.link_local",
            ),
            (format!("mac_limit = 0\n{GOOD}"), "mac_limit = 0: expected 1 to 1048576"),
            (
                format!("mac_limit = 2000000\n{GOOD}"),
                "mac_limit = 2000000: expected 1 to",
            ),
            (format!("mac_limit = -1\n{GOOD}"), "mac_limit: TOML parse error"),
            (format!("mac_limit = 1e20\n{GOOD}"), "mac_limit: TOML parse error"),
            (
                format!("mac_limit = 100\nmac_limit_per_port = 101\n{GOOD}"),
                "mac_limit_per_port = 101: expected 1 to mac_limit (100)",
            ),
            (format!("mac_limit_per_port = 0\n{GOOD}"), "mac_limit_per_port = 0"),
            (
                GOOD.replace("interface = \"eth2\"", "interface = \"eth2\"\nbackend = \"xdp\""),
                "unknown variant `xdp`, expected one of `af_packet`, `af_xdp`, `auto`",
            ),
            (
                GOOD.replace("interface = \"vnet0\"", "interface = \"vnet0\"\nbackend = 1"),
                "ports[0].backend",
            ),
        ];
        for (text, want) in cases {
            let e = parse(&text, &Fake)
                .err()
                .unwrap_or_else(|| panic!("accepted; wanted `{want}`"));
            assert!(e.contains(want), "`{want}` not in: {e}");
        }
    }
}

/// Every interface exists and reports 10 Gbit/s, for tests.
#[cfg(test)]
pub(crate) struct AllThere;

#[cfg(test)]
impl Interfaces for AllThere {
    fn exists(&self, _: &str) -> bool {
        true
    }
    fn speed_mbps(&self, _: &str) -> Option<u64> {
        Some(10_000)
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    /// Each planned port carries its own entry's interface, MAC and controls, whatever the
    /// ports around it: three ports, then the middle one gone (a join by position would give the
    /// third the second's interface and MAC).
    #[test]
    fn each_planned_port_is_its_own_entry_by_name() {
        let mut text = ONE_PORT.replace("limit = \"2G\"\n", "limit = \"1G\"\n");
        for (n, limit) in [(2, "2G"), (3, "3G")] {
            text.push_str(&format!(
                "[[ports]]\nname = \"vm{n}\"\ninterface = \"vnet{n}\"\nmac = \"52:54:00:00:00:0{n}\"\n\
                 group = \"vms\"\nlimit = \"{limit}\"\n"
            ));
        }
        let mut file = parse_file(&text).unwrap();
        let check_all = |f: &SwitchFile| {
            let plan = check(f, &AllThere).unwrap();
            for p in &plan.datapath.ports {
                let n: u32 = p.name.trim_start_matches("vm").parse().unwrap();
                assert_eq!(
                    p.interface,
                    if n == 1 {
                        "vnet0".to_string()
                    } else {
                        format!("vnet{n}")
                    }
                );
                assert_eq!(p.mac.to_string(), format!("52:54:00:00:00:0{n}"));
                let limit = plan.datapath.tree.node(p.leaf).spec.limit;
                assert_eq!(limit, Some(Bandwidth::from_gbps(u64::from(n))), "{}", p.name);
            }
            plan.datapath.ports.len()
        };
        assert_eq!(check_all(&file), 3);
        file.ports.remove(1);
        assert_eq!(check_all(&file), 2);
    }
}
