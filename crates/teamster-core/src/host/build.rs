//! [`build`]: a host file's shared tables, checked and turned into the engine's team and NetIOC
//! tree. The one place where names are resolved, numbers range-checked, MACs checked, and
//! admission control run for a configuration as a whole.

use super::entries::{ClassEntry, GroupEntry, LbtSection, PortEntry};
use super::netioc::{build_tree, PortControls};
use crate::ioc::admission::{admit, ReservationCap};
use crate::ioc::{NodeId, Tree};
use crate::teaming::{FailoverOrder, GroupId, LbtConfig, PortGroupSpec, PortId, PortSpec, Team, TeamMode, UplinkId};
use crate::units::Bandwidth;
use crate::wire::MacAddr;
use std::collections::BTreeMap;

/// An uplink as the host model needs it: its name and the capacity it is paced and admitted at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkDesc {
    pub name: String,
    pub capacity: Bandwidth,
}

/// A host file's shared tables, borrowed from whichever file holds them.
pub struct HostSpec<'a, P: PortEntry> {
    pub lbt: &'a LbtSection,
    pub reservation_cap: Option<f64>,
    /// The uplinks, in file order, with their capacities resolved by the caller.
    pub uplinks: Vec<UplinkDesc>,
    pub port_groups: &'a [GroupEntry],
    pub traffic_classes: &'a [ClassEntry],
    pub pools: &'a [super::PoolEntry],
    pub ports: &'a [P],
}

/// A port of a built host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub name: String,
    pub id: PortId,
    pub mac: MacAddr,
    pub group: GroupId,
    /// Its leaf in the NetIOC tree.
    pub leaf: NodeId,
}

/// A checked host: its team (groups and ports added), its NetIOC tree, and the resolved knobs.
#[derive(Debug, Clone)]
pub struct Host {
    pub lbt: LbtConfig,
    pub reservation_cap: ReservationCap,
    pub uplinks: Vec<UplinkDesc>,
    pub groups: Vec<PortGroupSpec>,
    pub team: Team,
    pub tree: Tree,
    /// In file order.
    pub ports: Vec<HostPort>,
}

/// The smallest capacity accepted: under it, a plain number was almost certainly meant in Mbit/s.
pub const MIN_CAPACITY: Bandwidth = Bandwidth::from_mbps(1);
/// The largest capacity accepted (10 Tbit/s).
pub const MAX_CAPACITY: Bandwidth = Bandwidth::from_mbps(10_000_000);

/// Refuses a name that is empty, too long, has control characters or slashes, or is `.`/`..`:
/// names end up in file paths, URLs, metrics labels and logs.
pub fn check_name(key: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!("{key}: expected a name of 1 to 64 characters"));
    }
    if name == "." || name == ".." || name.chars().any(|c| c.is_control() || c == '/' || c == '\\') {
        return Err(format!(
            "{key}: `{}` is not a usable name (no `/`, `\\`, control characters, `.` or `..`)",
            name.escape_debug()
        ));
    }
    Ok(())
}

/// Checks an uplink's capacity, under `key`.
pub fn check_capacity(key: &str, c: Bandwidth) -> Result<(), String> {
    if c < MIN_CAPACITY {
        return Err(format!(
            "{key}: {c} is under {MIN_CAPACITY}: write the unit (\"10G\", \"100M\"); a plain number is bits/s"
        ));
    }
    if c > MAX_CAPACITY {
        return Err(format!("{key}: {c} is over {MAX_CAPACITY}"));
    }
    Ok(())
}

/// The index of the uplink named `name`; the error, under `key`, lists the known ones.
pub fn uplink_index(uplinks: &[&str], key: &str, name: &str) -> Result<UplinkId, String> {
    uplinks
        .iter()
        .position(|u| *u == name)
        .map(UplinkId)
        .ok_or_else(|| format!("{key}: no uplink named `{name}` (uplinks: {})", uplinks.join(", ")))
}

/// A failover order from uplink names, under `key`: at least one active uplink, none twice.
pub fn failover_order(
    uplinks: &[&str],
    key: &str,
    active: &[String],
    standby: &[String],
) -> Result<FailoverOrder, String> {
    let list = |k: &str, names: &[String]| {
        names
            .iter()
            .enumerate()
            .map(|(j, n)| uplink_index(uplinks, &format!("{key}.{k}[{j}]"), n))
            .collect::<Result<Vec<_>, _>>()
    };
    let order = FailoverOrder {
        active: list("active", active)?,
        standby: list("standby", standby)?,
    };
    if order.active.is_empty() {
        return Err(format!("{key}.active: expected at least one active uplink"));
    }
    let all: Vec<UplinkId> = order.active.iter().chain(&order.standby).copied().collect();
    if let Some((i, u)) = all.iter().enumerate().find(|(i, u)| all[..*i].contains(u)) {
        let list = if i < order.active.len() { "active" } else { "standby" };
        return Err(format!(
            "{key}.{list}: uplink `{}` is listed twice in the failover order",
            uplinks[u.0]
        ));
    }
    Ok(order)
}

/// Resolves `[[port_groups]]` against the uplinks' names; errors carry the key path.
fn resolve_groups(groups: &[GroupEntry], uplinks: &[&str]) -> Result<Vec<PortGroupSpec>, String> {
    let mut out = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let key = format!("port_groups[{i}]");
        check_name(&format!("{key}.name"), &g.name)?;
        if groups[..i].iter().any(|o| o.name == g.name) {
            return Err(format!("{key}.name: `{}` is used twice", g.name));
        }
        if let Some(v) = g.vlan.filter(|v| !(1..=4094).contains(v)) {
            return Err(format!("{key}.vlan: {v} is out of range 1-4094"));
        }
        check_overlay(groups, i)?;
        let tuning = g.tuning();
        tuning.validate().map_err(|e| format!("{key}.{e}"))?;
        if let Some(why) = g.mode.refuses(g.policy) {
            return Err(format!("{key}.policy: {why}"));
        }
        if g.mode.switch_dependent() && !g.standby.is_empty() {
            return Err(format!(
                "{key}.standby: a `{}` bundle has no standby uplinks (the physical switch sends on every member): list them as active",
                g.mode
            ));
        }
        if g.lacp.is_some() && g.mode != TeamMode::Lacp {
            return Err(format!(
                "{key}.lacp: LACP settings need `mode = \"lacp\"` (the mode is `{}`)",
                g.mode
            ));
        }
        let order = failover_order(uplinks, &key, &g.active, &g.standby)?;
        let lacp = g
            .lacp
            .clone()
            .unwrap_or_default()
            .settings(&format!("{key}.lacp"), placeholder_system(&g.name, &g.active))?;
        let spec = PortGroupSpec {
            name: g.name.clone(),
            policy: g.policy,
            order,
            failback: g.failback,
            notify_switches: g.notify_switches,
            vlan: g.vlan,
            mode: g.mode,
            tuning,
            lacp,
        };
        check_shared_mode(&out, &spec, uplinks).map_err(|e| format!("{key}.mode: {e}"))?;
        out.push(spec);
    }
    Ok(out)
}

/// Checks group `i`'s overlay: a valid segment, not also a VLAN, the same local VTEP as every
/// earlier overlay (a host has one VTEP address) and a VNI of its own.
fn check_overlay(groups: &[GroupEntry], i: usize) -> Result<(), String> {
    let key = format!("port_groups[{i}].overlay");
    let Some(entry) = &groups[i].overlay else {
        return Ok(());
    };
    let o = entry.overlay(&key)?;
    if groups[i].vlan.is_some() {
        return Err(format!(
            "{key}: an overlay group carries its frames in VXLAN, not in a VLAN: remove `vlan`"
        ));
    }
    if groups[..i].iter().filter(|g| g.overlay.is_some()).count() >= crate::switch::MAX_SEGMENTS {
        return Err(format!(
            "{key}: more than {} overlay groups",
            crate::switch::MAX_SEGMENTS
        ));
    }
    // The underlay is untagged: a VM of an untagged group on the same uplinks could speak for
    // the VTEP (and the VTEP would answer it).
    let uplinks = |g: &GroupEntry| g.active.iter().chain(&g.standby).cloned().collect::<Vec<String>>();
    let mine = uplinks(&groups[i]);
    for (j, other) in groups.iter().enumerate() {
        let shared = uplinks(other).into_iter().find(|u| mine.contains(u));
        if let (None, None, Some(u)) = (&other.overlay, other.vlan, shared) {
            return Err(format!(
                "{key}: port_groups[{j}] (`{}`) is untagged on uplink `{u}`, where the overlay's \
                 VTEP sends and receives untagged: give that group a VLAN",
                other.name
            ));
        }
    }
    for (j, other) in groups[..i].iter().enumerate() {
        let Some(e) = &other.overlay else { continue };
        if e.local_vtep != o.local {
            return Err(format!(
                "{key}.local_vtep = {}: port_groups[{j}] has {}; a host has one VTEP address",
                o.local, e.local_vtep
            ));
        }
        if e.vni == u64::from(o.vni.get()) {
            return Err(format!("{key}.vni = {}: port_groups[{j}] uses it too", o.vni));
        }
    }
    Ok(())
}

/// Each group's overlay segment (None for a VLAN group), for [`crate::switch::SwitchConfig`];
/// the groups must have been checked by [`build`].
pub fn overlays(groups: &[GroupEntry]) -> Vec<Option<crate::overlay::Overlay>> {
    groups
        .iter()
        .map(|g| g.overlay.as_ref().and_then(|o| o.overlay("").ok()))
        .collect()
}

/// Refuses a group that shares an uplink with an earlier one of another mode, or (LACP) other
/// LACP settings: an uplink is in one bundle on the physical switch or in none.
fn check_shared_mode(earlier: &[PortGroupSpec], spec: &PortGroupSpec, uplinks: &[&str]) -> Result<(), String> {
    let listed = |g: &PortGroupSpec| {
        g.order
            .active
            .iter()
            .chain(&g.order.standby)
            .copied()
            .collect::<Vec<_>>()
    };
    let mine = listed(spec);
    for o in earlier {
        let Some(u) = listed(o).into_iter().find(|u| mine.contains(u)) else {
            continue;
        };
        if o.mode != spec.mode {
            return Err(format!(
                "`{}`, but uplink `{}` is also in port group `{}`, whose mode is `{}`: groups sharing an uplink share its mode",
                spec.mode, uplinks[u.0], o.name, o.mode
            ));
        }
        if o.mode == TeamMode::Lacp && o.lacp != spec.lacp {
            return Err(format!(
                "`lacp`, but uplink `{}` is also in port group `{}`, whose LACP settings differ: groups sharing an LACP member share its settings",
                uplinks[u.0], o.name
            ));
        }
    }
    Ok(())
}

/// The LACP system ID of a group whose table gives none, until the live switch puts its first
/// member's MAC there: a locally administered MAC from FNV-1a of the group's name and members.
pub fn placeholder_system(group: &str, members: &[String]) -> MacAddr {
    let h = crate::teaming::fnv1a64(group.bytes().chain(members.iter().flat_map(|m| m.bytes().chain([0]))));
    let b = h.to_be_bytes();
    MacAddr([0x02, b[1], b[2], b[3], b[4], b[5]])
}

/// Refuses an LACP group whose active members differ in capacity: an aggregate's members run at
/// one speed (802.1AX keys them apart otherwise).
fn check_lacp_speeds(groups: &[PortGroupSpec], uplinks: &[UplinkDesc]) -> Result<(), String> {
    for (i, g) in groups.iter().enumerate().filter(|(_, g)| g.mode == TeamMode::Lacp) {
        let first = &uplinks[g.order.active[0].0];
        let other = g
            .order
            .active
            .iter()
            .map(|u| &uplinks[u.0])
            .find(|u| u.capacity != first.capacity);
        if let Some(other) = other {
            return Err(format!(
                "port_groups[{i}].active: the members of an LACP aggregate must have one speed: `{}` is {}, `{}` is {}",
                first.name, first.capacity, other.name, other.capacity
            ));
        }
    }
    Ok(())
}

/// Checks a host's shared tables and builds it. `default_mac(i, taken)` gives port `i` a MAC
/// when its entry has none (`None`: a MAC is required, an error). Errors carry the key path.
pub fn build<P: PortEntry>(
    spec: HostSpec<'_, P>,
    default_mac: &mut dyn FnMut(usize, &[MacAddr]) -> Option<MacAddr>,
) -> Result<Host, String> {
    let lbt = spec.lbt.config()?;
    let cap = match spec.reservation_cap {
        Some(c) => ReservationCap::new(c).map_err(|e| format!("reservation_cap: {e}"))?,
        None => ReservationCap::default(),
    };
    if spec.uplinks.is_empty() {
        return Err("uplinks: expected at least one [[uplinks]] table".into());
    }
    for (i, u) in spec.uplinks.iter().enumerate() {
        check_name(&format!("uplinks[{i}].name"), &u.name)?;
        if spec.uplinks[..i].iter().any(|o| o.name == u.name) {
            return Err(format!("uplinks[{i}].name: `{}` is used twice", u.name));
        }
        check_capacity(&format!("uplinks[{i}].capacity"), u.capacity)?;
    }
    let names: Vec<&str> = spec.uplinks.iter().map(|u| u.name.as_str()).collect();
    let groups = resolve_groups(spec.port_groups, &names)?;
    check_lacp_speeds(&groups, &spec.uplinks)?;
    let uplinks = spec.uplinks.iter().map(|u| (u.name.clone(), u.capacity));
    let mut team = Team::with_groups(uplinks, lbt, &groups).map_err(|e| e.to_string())?;
    // No ports is a host waiting for its VMs (ports added at run time, or matched by rules).
    let common: Vec<_> = spec.ports.iter().map(PortEntry::common).collect();
    let controls: Vec<PortControls> = common
        .iter()
        .enumerate()
        .map(|(i, p)| PortControls {
            key: format!("ports[{i}]"),
            name: p.name,
            pool: p.pool,
            class: p.class,
            reservation: p.reservation,
            shares: p.shares,
            limit: p.limit,
        })
        .collect();
    for (i, p) in common.iter().enumerate() {
        check_name(&format!("ports[{i}].name"), p.name)?;
    }
    // Admission counts against the smallest uplink: a port may fail over to any of them.
    let smallest = spec
        .uplinks
        .iter()
        .min_by_key(|u| u.capacity)
        .expect("at least one uplink");
    let (tree, leaves) = build_tree(&smallest.name, spec.traffic_classes, spec.pools, &controls)?;
    let mut ports: Vec<HostPort> = Vec::new();
    // The ports' IDs and MACs so far, each with its port's index: a host of thousands of ports
    // is checked in O(n log n), not by comparing each port with every other.
    let mut ids: BTreeMap<PortId, usize> = BTreeMap::new();
    let mut macs: BTreeMap<MacAddr, usize> = BTreeMap::new();
    for (i, p) in common.iter().enumerate() {
        let key = format!("ports[{i}]");
        let id = PortId(p.id.unwrap_or(i as u32 + 1));
        if let Some(&o) = ids.get(&id) {
            return Err(format!(
                "{key}.id: {} is already the ID of port `{}`",
                id.0, ports[o].name
            ));
        }
        let mac = match p.mac {
            Some(m) => m.parse::<MacAddr>().map_err(|e| format!("{key}.mac: {e}"))?,
            None => default_mac(i, &macs.keys().copied().collect::<Vec<_>>())
                .ok_or_else(|| format!("{key}.mac: required (the MAC the VM uses on this port)"))?,
        };
        if mac.is_multicast() {
            return Err(format!(
                "{key}.mac: {mac} is a group address; a port needs a unicast MAC"
            ));
        }
        if mac == MacAddr([0; 6]) {
            return Err(format!("{key}.mac: the all-zero MAC is not a port's address"));
        }
        if let Some(&o) = macs.get(&mac) {
            return Err(format!(
                "{key}.mac: {mac} is already the MAC of port `{}`",
                ports[o].name
            ));
        }
        let group = spec
            .port_groups
            .iter()
            .position(|g| g.name == p.group)
            .map(GroupId)
            .ok_or_else(|| {
                let known: Vec<&str> = spec.port_groups.iter().map(|g| g.name.as_str()).collect();
                format!(
                    "{key}.group: no port group named `{}` (port groups: {})",
                    p.group,
                    known.join(", ")
                )
            })?;
        team.add_port(PortSpec { id, mac, group })
            .map_err(|e| format!("{key}: {e}"))?;
        ids.insert(id, ports.len());
        macs.insert(mac, ports.len());
        ports.push(HostPort {
            name: p.name.to_string(),
            id,
            mac,
            group,
            leaf: leaves[i],
        });
    }
    admit(&tree, smallest.capacity, cap).map_err(|e| format!("admission control: {e}"))?;
    Ok(Host {
        lbt,
        reservation_cap: cap,
        uplinks: spec.uplinks,
        groups,
        team,
        tree,
        ports,
    })
}
