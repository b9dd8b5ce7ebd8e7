//! Migration scenario files: two or more hosts joined by one physical switch, the live
//! migrations between them, and what the run must show.
//!
//! Each `[[hosts]]` table is a host as `switch.toml` describes one (`[lbt]`, `[[uplinks]]`,
//! `[[port_groups]]`, `[[ports]]`), checked by the same code ([`teamster_core::host::build`]);
//! its ports are the host's own interfaces on the migration network (the migration endpoints).
//! Each `[[migrations]]` table moves `vms` VMs of `memory` each from one host to another. Unknown
//! keys are errors, and every error names the key.

use crate::scenario::{check_queues, UplinkFile};
use serde::Deserialize;
use teamster_core::host::{self, GroupEntry, Host, HostSpec, LbtSection, UplinkDesc};
use teamster_core::teaming::Policy;
use teamster_core::units::Bandwidth;
use teamster_core::wire::MacAddr;

/// A migration scenario as written in its file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrationFile {
    /// Always `"migration"` (what picks this model).
    pub mode: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seed of the endpoints' generated MACs.
    #[serde(default)]
    pub seed: u64,
    /// The longest simulated time; the run ends earlier when every migration has finished.
    pub duration_s: f64,
    /// Clock step in seconds, 0.0001 to 0.01 (default 0.001), below every flowlet gap.
    #[serde(default = "millisecond")]
    pub step_s: f64,
    pub hosts: Vec<HostFile>,
    pub migrations: Vec<MigrationEntry>,
    #[serde(default)]
    pub expect: Vec<MigrationExpect>,
}

fn millisecond() -> f64 {
    0.001
}

/// A `[[hosts]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFile {
    pub name: String,
    #[serde(default)]
    pub lbt: LbtSection,
    pub uplinks: Vec<UplinkFile>,
    pub port_groups: Vec<GroupEntry>,
    #[serde(default)]
    pub ports: Vec<EndpointFile>,
}

teamster_core::port_entry! {
    /// A host's interface on the migration network: a port of its team with its own MAC.
    pub struct EndpointFile {}
}

/// A `[[migrations]]` table: `vms` VMs of `memory` each, from host `from` to host `to`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrationEntry {
    pub from: String,
    pub to: String,
    /// 1 to 1000.
    pub vms: u32,
    /// Each VM's memory, in bytes with a unit: `"9GiB"`, `"512MiB"`, `"9GB"` (10^9).
    pub memory: String,
    /// How many migrate at once (default all); the next starts when one finishes.
    pub concurrency: Option<u32>,
    /// When the first ones start (default 0).
    #[serde(default)]
    pub start_s: f64,
}

/// The most VMs a scenario moves (all `[[migrations]]` together).
const MAX_VMS: u64 = 1000;
/// The most clock steps times VMs a run may take (about a minute and a half of work).
const MAX_STREAM_STEPS: f64 = 1e9;

/// An expectation of a migration scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum MigrationExpect {
    FinishBetween {
        min_s: f64,
        max_s: f64,
        name: Option<String>,
    },
    /// The mean rate of `host`'s `uplink` (of all its uplinks if none is named).
    Rate {
        host: String,
        uplink: Option<String>,
        direction: Way,
        from_s: f64,
        to_s: f64,
        #[serde(default)]
        min: Bandwidth,
        max: Option<Bandwidth>,
        name: Option<String>,
    },
    OneMemberPerMigration {
        name: Option<String>,
    },
}

/// Which way a member's traffic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Way {
    Send,
    Receive,
}

impl std::fmt::Display for Way {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Way::Send => "send",
            Way::Receive => "receive",
        })
    }
}

/// The smallest VM memory accepted (1 MiB) and the largest (16 TiB).
const MIN_MEMORY: u64 = 1 << 20;
const MAX_MEMORY: u64 = 16 << 40;

/// A checked scenario.
#[derive(Debug, Clone)]
pub struct MigrationPlan {
    pub file: MigrationFile,
    pub hosts: Vec<HostPlan>,
    pub migrations: Vec<MigrationSet>,
}

/// A host, built.
#[derive(Debug, Clone)]
pub struct HostPlan {
    pub name: String,
    pub host: Host,
    /// Its uplinks' receive queues (VMQs), for the summary.
    pub rx_queues: Vec<u32>,
}

/// A `[[migrations]]` entry with its hosts resolved and its memory in bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationSet {
    pub from: usize,
    pub to: usize,
    pub vms: u32,
    pub memory: u64,
    pub concurrency: u32,
    pub start_s: f64,
}

/// Checks a migration scenario but for its expectations ([`super::resolve`] checks those);
/// errors carry the key path.
pub fn resolve(file: MigrationFile) -> Result<MigrationPlan, String> {
    if file.mode != "migration" {
        return Err(format!("mode = \"{}\": expected \"migration\"", file.mode));
    }
    crate::scenario::check_day(file.duration_s)?;
    if !(file.step_s.is_finite() && (0.0001..=0.01).contains(&file.step_s)) {
        return Err(format!(
            "step_s = {}: expected seconds between 0.0001 and 0.01",
            file.step_s
        ));
    }
    if file.hosts.len() < 2 || file.hosts.len() > 16 {
        return Err(format!(
            "hosts: {} [[hosts]] tables; a migration scenario has 2 to 16",
            file.hosts.len()
        ));
    }
    let mut hosts = Vec::new();
    for (h, hf) in file.hosts.iter().enumerate() {
        let key = format!("hosts[{h}]");
        host::check_name(&format!("{key}.name"), &hf.name)?;
        if file.hosts[..h].iter().any(|o| o.name == hf.name) {
            return Err(format!("{key}.name: `{}` is used twice", hf.name));
        }
        hosts.push(build_host(h, hf, file.seed, file.step_s).map_err(|e| format!("{key}.{e}"))?);
    }
    let index = |key: String, name: &str| {
        file.hosts.iter().position(|h| h.name == name).ok_or_else(|| {
            let known: Vec<&str> = file.hosts.iter().map(|h| h.name.as_str()).collect();
            format!("{key}: no host named `{name}` (hosts: {})", known.join(", "))
        })
    };
    let total: u64 = file.migrations.iter().map(|m| u64::from(m.vms)).sum();
    if total > MAX_VMS {
        return Err(format!(
            "migrations: {total} VMs in all; a scenario moves at most {MAX_VMS}"
        ));
    }
    if (file.duration_s / file.step_s) * total as f64 > MAX_STREAM_STEPS {
        return Err(format!(
            "duration_s / step_s x VMs = {:.0}: over {MAX_STREAM_STEPS:.0} stream-steps; use a \
             larger step_s, a shorter duration_s or fewer VMs",
            (file.duration_s / file.step_s) * total as f64
        ));
    }
    if file.migrations.is_empty() {
        return Err("migrations: expected at least one [[migrations]] table".into());
    }
    let mut migrations = Vec::new();
    for (i, m) in file.migrations.iter().enumerate() {
        let key = format!("migrations[{i}]");
        let from = index(format!("{key}.from"), &m.from)?;
        let to = index(format!("{key}.to"), &m.to)?;
        if from == to {
            return Err(format!("{key}.to: `{}` is also the source host", m.to));
        }
        if !(1..=1000).contains(&m.vms) {
            return Err(format!("{key}.vms: {} is out of range 1-1000", m.vms));
        }
        let memory = memory(&format!("{key}.memory"), &m.memory)?;
        let concurrency = m.concurrency.unwrap_or(m.vms);
        if !(1..=m.vms).contains(&concurrency) {
            return Err(format!(
                "{key}.concurrency: {concurrency} is out of range 1-{} (vms)",
                m.vms
            ));
        }
        if !(m.start_s.is_finite() && m.start_s >= 0.0 && m.start_s < file.duration_s) {
            return Err(format!(
                "{key}.start_s = {}: expected seconds from 0 to below duration_s",
                m.start_s
            ));
        }
        migrations.push(MigrationSet {
            from,
            to,
            vms: m.vms,
            memory,
            concurrency,
            start_s: m.start_s,
        });
    }
    Ok(MigrationPlan {
        file,
        hosts,
        migrations,
    })
}

/// The most rows a run records: rows are 0.1 s long, or longer for long runs.
const MAX_ROWS: f64 = 5000.0;

impl MigrationPlan {
    /// The steps in a row of the run: 0.1 s, or `duration_s / 5000` if that is longer.
    pub fn row_steps(&self) -> u64 {
        let f = &self.file;
        ((0.1f64).max(f.duration_s / MAX_ROWS) / f.step_s).round().max(1.0) as u64
    }
}

/// Builds host `h` with the host model's checks; endpoints without a MAC get `02:4d:..`.
fn build_host(h: usize, hf: &HostFile, seed: u64, step_s: f64) -> Result<HostPlan, String> {
    check_queues(hf.uplinks.iter().map(|u| (u.name.as_str(), u.rx_queues)))?;
    if hf.ports.is_empty() {
        return Err("ports: expected at least one [[hosts.ports]] table (a migration endpoint)".into());
    }
    let spec = HostSpec {
        lbt: &hf.lbt,
        reservation_cap: None,
        uplinks: hf
            .uplinks
            .iter()
            .map(|u| UplinkDesc {
                name: u.name.clone(),
                capacity: u.capacity,
            })
            .collect(),
        port_groups: &hf.port_groups,
        traffic_classes: &[],
        pools: &[],
        ports: &hf.ports,
    };
    let salt = (seed as u8).wrapping_mul(31);
    let mut mac = |i: usize, _: &[MacAddr]| Some(MacAddr([0x02, 0x4d, salt, h as u8, (i >> 8) as u8, i as u8]));
    let host = host::build(spec, &mut mac)?;
    for (i, p) in hf.ports.iter().enumerate() {
        let ignored = [
            ("reservation", p.reservation.bps() > 0),
            ("shares", p.shares.is_some()),
            ("limit", p.limit.is_some()),
            ("pool", p.pool.is_some()),
            ("class", p.class.is_some()),
        ];
        if let Some((key, _)) = ignored.iter().find(|(_, set)| *set) {
            return Err(format!(
                "ports[{i}].{key}: Network I/O Control is not modelled in migration mode"
            ));
        }
    }
    for (g, group) in hf.port_groups.iter().enumerate() {
        let gap = group.tuning().flowlet_gap.as_secs_f64();
        if (group.policy == Policy::DYNAMIC || group.policy == Policy::LBT_DYNAMIC) && gap <= step_s {
            return Err(format!(
                "port_groups[{g}].flowlet_gap_us: {} µs is not above the scenario's step_s ({} s): \
                 every step would start a flowlet",
                gap * 1e6,
                step_s
            ));
        }
    }
    Ok(HostPlan {
        name: hf.name.clone(),
        rx_queues: hf.uplinks.iter().map(|u| u.rx_queues).collect(),
        host,
    })
}

/// Reads a memory size; it must end in `B` (`GiB`, `GB`, `MiB`, ...): a plain number, `9G` or
/// a bit unit (`Gb`) is refused, so that no one means gigabits (as in `capacity`) and gets
/// gigabytes.
fn memory(key: &str, text: &str) -> Result<u64, String> {
    let t = text.trim();
    if !t.ends_with('B') || t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "{key}: \"{text}\" needs a byte unit such as \"9GiB\", \"512MiB\" or \"9GB\""
        ));
    }
    let bytes = t
        .parse::<bytesize::ByteSize>()
        .map_err(|e| format!("{key}: \"{text}\": {e}"))?
        .as_u64();
    if !(MIN_MEMORY..=MAX_MEMORY).contains(&bytes) {
        return Err(format!("{key}: \"{text}\" is out of range 1MiB-16TiB"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::memory;

    #[test]
    fn memory_takes_byte_units_and_refuses_bits_and_bare_numbers() {
        assert_eq!(memory("m", "9GiB"), Ok(9 << 30));
        assert_eq!(memory("m", "9 GB"), Ok(9_000_000_000));
        assert_eq!(memory("m", "512MiB"), Ok(512 << 20));
        for bad in [
            "9", "9Gb", "9G", "9g", "9gib", "", "lots", "0GiB", "17TiB", "-1GiB", "1e30GiB",
        ] {
            let e = memory("migrations[0].memory", bad).unwrap_err();
            assert!(e.starts_with("migrations[0].memory: "), "{bad}: {e}");
        }
    }
}
