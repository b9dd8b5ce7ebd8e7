//! The daemon: the data plane's poll loop ([`teamster_dp::datapath`]) with the control plane's
//! turn added: configuration changes from the API applied between packets, snapshots published
//! for the API (twice a second, and at once after a change), the status file rewritten every
//! second (by [`super::status_writer`], off the loop's thread).

use super::config::{AdminState, SwitchFile, SwitchPlan};
use super::snapshot::Snapshot;
use super::status_writer::{StatusFile, StatusWriter};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use teamster_core::teaming::{GroupId, PortGroupSpec};
use teamster_core::Instant;
use teamster_dp::datapath::{Control, Datapath, DatapathPlan, PortPlan, UplinkPlan};

/// How often the loop publishes a snapshot.
const SNAPSHOT_EVERY: core::time::Duration = core::time::Duration::from_millis(500);
/// How often the status file is rewritten.
const STATUS_EVERY: core::time::Duration = core::time::Duration::from_secs(1);

/// A change the API asks the loop to make: a checked plan to switch to, and where to say done.
pub struct Apply {
    pub plan: Box<SwitchPlan>,
    /// Answered with the snapshot taken right after the change.
    pub done: tokio::sync::oneshot::Sender<Arc<Snapshot>>,
}

/// How the loop talks to the API: changes in, snapshots out.
pub struct ControlLink {
    pub changes: std::sync::mpsc::Receiver<Apply>,
    pub snapshots: tokio::sync::watch::Sender<Arc<Snapshot>>,
}

/// A running switch.
pub struct Daemon {
    dp: Datapath,
    plane: ControlPlane,
}

/// The daemon's side of each turn of the loop.
struct ControlPlane {
    /// The configuration in force (names, MACs, what a restart would load).
    file: SwitchFile,
    status: Option<StatusWriter>,
    link: Option<ControlLink>,
    next_snapshot: Instant,
    next_status: Instant,
}

/// The data plane's part of a checked plan, with names from its file.
fn datapath_plan(plan: SwitchPlan) -> (DatapathPlan, SwitchFile) {
    let file = plan.file;
    let ports = plan
        .ports
        .into_iter()
        .zip(&file.ports)
        .map(|((id, interface, leaf), pf)| PortPlan {
            id,
            name: pf.name.clone(),
            interface,
            leaf,
            backend: pf.backend.choice(),
        })
        .collect();
    let uplinks = plan
        .uplinks
        .into_iter()
        .zip(&file.uplinks)
        .map(|((interface, capacity), uf)| UplinkPlan {
            name: uf.name.clone(),
            interface,
            capacity,
            follows_link_speed: uf.capacity.is_none(),
            admin_up: uf.admin == AdminState::Up,
            backend: uf.backend.choice(),
        })
        .collect();
    let dp = DatapathPlan {
        team: plan.team,
        tree: plan.tree,
        reservation_cap: plan.reservation_cap,
        ports,
        uplinks,
        switch: plan.switch,
        busy_poll: plan.busy_poll,
        workers: plan.workers,
    };
    (dp, file)
}

impl Daemon {
    /// Attaches to every interface of `plan`. On error, whatever was opened is closed again.
    /// `link`, if given, connects the loop to the API.
    pub fn attach(
        plan: SwitchPlan,
        status_file: Option<StatusFile>,
        link: Option<ControlLink>,
    ) -> Result<Daemon, String> {
        let (dp_plan, file) = datapath_plan(plan);
        let dp = Datapath::attach(dp_plan)?;
        let status = status_file
            .map(StatusWriter::start)
            .transpose()
            .map_err(|e| format!("cannot start the status file's writer: {e}"))?;
        Ok(Daemon {
            dp,
            plane: ControlPlane {
                file,
                status,
                link,
                next_snapshot: Instant::ZERO,
                next_status: Instant::ZERO,
            },
        })
    }

    /// Runs until `stop` is set; writes the status file a last time.
    pub fn run(&mut self, stop: &Arc<AtomicBool>) {
        self.dp.run(stop, &mut self.plane);
        let now = self.dp.now();
        if let Some(w) = self.plane.status.take() {
            w.finish(Arc::new(super::view::snapshot(&self.dp, &self.plane.file, now)));
        }
    }
}

impl Control for ControlPlane {
    fn turn(&mut self, dp: &mut Datapath, now: Instant) {
        while let Some(apply) = self.link.as_ref().and_then(|l| l.changes.try_recv().ok()) {
            let plan = *apply.plan;
            let groups: Vec<PortGroupSpec> = (0..plan.file.port_groups.len())
                .filter_map(|g| plan.team.group(GroupId(g)).cloned())
                .collect();
            let admin: Vec<bool> = plan.file.uplinks.iter().map(|u| u.admin == AdminState::Up).collect();
            dp.reconfigure(plan.tree, &groups, &admin, now);
            self.file = plan.file;
            let snap = Arc::new(super::view::snapshot(dp, &self.file, now));
            if let Some(l) = &self.link {
                l.snapshots.send_replace(snap.clone());
            }
            let _ = apply.done.send(snap);
        }
        if now < self.next_snapshot {
            return;
        }
        self.next_snapshot = now + SNAPSHOT_EVERY;
        dp.collect_ring_drops();
        let snap = Arc::new(super::view::snapshot(dp, &self.file, now));
        if now >= self.next_status {
            if let Some(w) = &self.status {
                w.offer(snap.clone());
            }
            self.next_status = now + STATUS_EVERY;
        }
        if let Some(l) = &self.link {
            l.snapshots.send_replace(snap);
        }
    }
}
