//! Which data plane switches the frames: `datapath = "kernel" | "userspace"` in `switch.toml`.
//!
//! - `userspace`: the poll loop of `teamster_dp::datapath` receives every frame through packet
//!   sockets (AF_PACKET or AF_XDP) and switches it in this process.
//! - `kernel`: the tcx program of `teamster-kernel` switches every frame in the kernel, from
//!   tables the engine writes after each of its turns; only what changes the engine's state
//!   (LACPDUs, a guest changing its MAC, a port's claim on its MAC, link-local frames a group
//!   asks for, frames its parser cannot decide exactly) comes up to this process, which switches
//!   it as the user-space path does. The API, `ctl`, metrics, the dashboard and the status file
//!   read the same engine either way; the kernel's counters are added to the engine's every
//!   100 ms, and feed Load-Based Teaming's meters.
//! - unset (the default): the kernel path where it can run ([`platform`] says when), else the
//!   user-space path, with the reason in the log.
//!
//! NetIOC's controls (reservations, shares, limits) run on an HTB qdisc per uplink that the
//! engine keeps to its tree (`teamster_kernel::shaping`); an uplink whose root qdisc is someone
//! else's is refused by name.
//!
//! What the kernel path does not do yet, and so refuses by name when it is asked for (the
//! switch does not start): overlays (VXLAN groups), AF_XDP and receive-queue settings (the
//! kernel path receives in the kernel), more than one data-plane thread. Nor does it pace an uplink to a configured capacity below its
//! link speed when no NetIOC control asks for shaping.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use teamster_dp::datapath::DatapathPlan;
use teamster_dp::platform::Kernel;

/// `datapath` in `switch.toml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataPlane {
    Kernel,
    Userspace,
}

/// Checks what a file asks of the data plane it names (`datapath`), before anything is
/// touched: its `workers`, whether its `[rx]` section is the default, and the first port or
/// uplink that asks for AF_XDP (`uplink \`u1\``), if any.
pub fn check(
    datapath: Option<DataPlane>,
    workers: Option<u64>,
    rx_default: bool,
    af_xdp: Option<String>,
) -> Result<(), String> {
    if datapath != Some(DataPlane::Kernel) {
        return Ok(());
    }
    kernel_refusal(workers, rx_default, af_xdp).map_or(Ok(()), |what| Err(format!("datapath = \"kernel\": {what}")))
}

/// What of the file's `workers`, `[rx]` and backends the kernel path cannot do, if anything.
pub fn kernel_refusal(workers: Option<u64>, rx_default: bool, af_xdp: Option<String>) -> Option<String> {
    if let Some(n) = workers.filter(|n| *n != 1) {
        return Some(format!(
            "workers = {n}: the kernel path switches in the kernel, with one thread for what it hands up"
        ));
    }
    if !rx_default {
        return Some("[rx]: the kernel path receives in the kernel, without receive queues of its own".into());
    }
    af_xdp.map(|who| format!("{who} asks for backend = \"af_xdp\""))
}

/// The platform the switch runs on, and a line for the log saying which data plane and why.
///
/// `datapath` as the file says: `userspace`, or `kernel` (an error names what the kernel path
/// cannot do). Unset, the kernel path where it can run: where the file asks nothing it refuses
/// (`refusal`, from the file's `workers`, `[rx]` and backends), the switch's groups and policies
/// fit its tables, the uplinks' root qdiscs allow NetIOC, and the kernel loads the program;
/// the user-space path otherwise, with the reason in the log line. On the kernel path the plan
/// runs one data-plane thread without receive queues of its own.
pub fn platform(
    datapath: Option<DataPlane>,
    refusal: Option<String>,
    plan: &mut DatapathPlan,
    config: &Path,
) -> Result<(Kernel, String), String> {
    match datapath {
        Some(DataPlane::Userspace) => Ok((Kernel::new(), "data plane: userspace".into())),
        Some(DataPlane::Kernel) => {
            let (path, pinned) = kernel_path(plan, config).map_err(|e| format!("datapath = \"kernel\": {e}"))?;
            Ok((
                Kernel::with_fast_path(Arc::new(path)),
                format!("data plane: kernel (tcx fast path; {pinned})"),
            ))
        }
        None => {
            let tried = match refusal {
                Some(why) => Err(why),
                None => kernel_path(plan, config),
            };
            match tried {
                Ok((path, pinned)) => {
                    plan.workers = 1;
                    plan.rx = teamster_dp::datapath::RxPlan::default();
                    Ok((
                        Kernel::with_fast_path(Arc::new(path)),
                        format!("data plane: kernel (tcx fast path; the default; {pinned})"),
                    ))
                }
                Err(why) => Ok((
                    Kernel::new(),
                    format!("data plane: userspace (the default here: the kernel path cannot run: {why})"),
                )),
            }
        }
    }
}

/// Whether the kernel path can enforce `plan`'s NetIOC controls: it runs them on HTB qdiscs at
/// the uplinks' roots, so an uplink holding a root qdisc that is not Teamster's is refused by
/// name (at start, and for a change on a switch running on the kernel path).
pub fn can_shape(plan: &DatapathPlan) -> Result<(), String> {
    let leaves: Vec<_> = plan.ports.iter().map(|p| p.leaf).collect();
    if teamster_core::ioc::htb::needs_shaping(&plan.tree, &leaves) {
        for u in &plan.uplinks {
            teamster_kernel::shaping::check_uplink(&u.interface)
                .map_err(|e| format!("NetIOC on uplink `{}` (kernel path): {e}", u.name))?;
        }
    }
    Ok(())
}

/// The kernel path for `plan`, its attachments pinned under the switch whose file is `config`
/// (so forwarding outlives the daemon), and a word on the pinning for the log; or what it
/// cannot do (nothing attached yet).
fn kernel_path(plan: &DatapathPlan, config: &Path) -> Result<(teamster_kernel::KernelPath, String), String> {
    // Refused before anything is attached.
    can_shape(plan)?;
    let switch = teamster_core::switch::Switch::with_config(plan.team.clone(), plan.switch.clone());
    teamster_kernel::Tables::build(
        &switch,
        &teamster_kernel::Interfaces::default(),
        &mut teamster_kernel::Slots::default(),
        teamster_core::Instant::ZERO,
    )
    .map_err(|e| e.to_string())?;
    let (pins, pinned) = match teamster_kernel::pins::Pins::for_config(config) {
        Ok(p) => {
            let mut said = format!("pinned in {}", p.dir().display());
            if !p.collected().is_empty() {
                let gone: Vec<String> = p.collected().iter().map(|c| c.display().to_string()).collect();
                said += &format!(
                    "; removed {} stale pin(s) of attachments whose interfaces are gone: {}",
                    gone.len(),
                    gone.join(", ")
                );
            }
            (Some(p), said)
        }
        Err(e) => (None, format!("not pinned, so forwarding stops with the daemon: {e}")),
    };
    // A directory made for a program that did not load holds nothing: not left behind.
    let dir = pins.as_ref().map(|p| p.dir().to_path_buf());
    let path = teamster_kernel::KernelPath::load(plan.switch.mac_limits.total, pins).inspect_err(|_| {
        if let Some(d) = &dir {
            let _ = std::fs::remove_dir(d);
        }
    })?;
    Ok((path, pinned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_path_refuses_what_it_cannot_do_by_name() {
        let kernel = Some(DataPlane::Kernel);
        check(kernel, None, true, None).unwrap();
        check(kernel, Some(1), true, None).unwrap();
        check(Some(DataPlane::Userspace), Some(4), false, Some("uplink `u1`".into())).unwrap();
        let e = check(kernel, Some(2), true, None).unwrap_err();
        assert!(e.contains("workers = 2") && e.contains("kernel"), "{e}");
        let e = check(kernel, None, false, None).unwrap_err();
        assert!(e.contains("[rx]"), "{e}");
        let e = check(kernel, None, true, Some("uplink `u1`".into())).unwrap_err();
        assert!(e.contains("uplink `u1`") && e.contains("af_xdp"), "{e}");
    }

    #[test]
    fn the_setting_is_spelled_as_documented_and_anything_else_is_refused() {
        #[derive(Debug, Deserialize)]
        struct File {
            datapath: DataPlane,
        }
        let f: File = toml::from_str("datapath = \"userspace\"").unwrap();
        assert_eq!(f.datapath, DataPlane::Userspace);
        let f: File = toml::from_str("datapath = \"kernel\"").unwrap();
        assert_eq!(f.datapath, DataPlane::Kernel);
        let e = toml::from_str::<File>("datapath = \"ebpf\"").unwrap_err();
        assert!(
            e.to_string().contains("kernel") && e.to_string().contains("userspace"),
            "{e}"
        );
    }
}
