//! The daemon: the data plane's poll loop ([`teamster_dp::datapath`]) with the control plane's
//! turn added: configuration changes from the API applied between packets, and the data
//! plane's state copied twice a second (and at once after a change) for
//! [`super::snapshot_thread`], which builds the snapshots for the API and the status file
//! (rewritten every second by [`super::status_writer`]) off the loop's thread.

use super::config::{SwitchFile, SwitchPlan};
use super::snapshot::Snapshot;
use super::snapshot_thread::{SnapshotThread, Taken};
use super::status_writer::{StatusFile, StatusWriter};
use super::view::{EVENTS_SHOWN, MOVES_SHOWN};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use teamster_core::switch::SecurityPolicy;
use teamster_core::teaming::{GroupId, PortGroupSpec};
use teamster_core::Instant;
use teamster_dp::datapath::{AttachOptions, Control, Datapath, EventSink, LinkNews};

/// How often the loop publishes a snapshot.
const SNAPSHOT_EVERY: core::time::Duration = core::time::Duration::from_millis(500);
/// How often the status file is rewritten.
const STATUS_EVERY: core::time::Duration = core::time::Duration::from_secs(1);

/// A change the API asks the loop to make: a checked plan to switch to, and where to say done.
pub struct Apply {
    /// None: nothing to change, only notes to record.
    pub plan: Option<Box<SwitchPlan>>,
    /// Recorded as events (`port`), before the change.
    pub notes: Vec<String>,
    /// Answered with the snapshot taken right after the change.
    pub done: tokio::sync::oneshot::Sender<Arc<Snapshot>>,
}

/// How the loop talks to the API: changes in, snapshots out.
pub struct ControlLink {
    pub changes: std::sync::mpsc::Receiver<Apply>,
    /// Interface news for the port rules (None: no rules).
    pub news: Option<tokio::sync::mpsc::Sender<LinkNews>>,
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
    file: Arc<SwitchFile>,
    /// Where copies of the data plane's state go to become snapshots (None once stopped).
    snapshots: Option<SnapshotThread>,
    /// A copy the snapshot thread had no room for, answering a change: offered again next turn.
    held: Option<Taken>,
    changes: Option<std::sync::mpsc::Receiver<Apply>>,
    /// Where netlink's interface news goes (the port rules' task), and what it had no room for.
    news: Option<tokio::sync::mpsc::Sender<LinkNews>>,
    news_held: LinkNews,
    next_snapshot: Instant,
    next_status: Instant,
    /// systemd's watchdog, fed from this loop.
    watchdog: super::service::Watchdog,
}

impl Daemon {
    /// Attaches to every interface of `plan`, read from the file `config`. On error, whatever was
    /// opened is closed again. `link`, if given, connects the loop to the API.
    pub fn attach(
        config: &std::path::Path,
        plan: SwitchPlan,
        status_file: Option<StatusFile>,
        link: Option<ControlLink>,
        events: EventSink,
    ) -> Result<Daemon, String> {
        let SwitchPlan { datapath, file } = plan;
        let mut datapath = datapath;
        let refusal = super::config::kernel_refusal(&file);
        let (platform, which) = super::data_plane::platform(file.datapath, refusal, &mut datapath, config)?;
        let options = AttachOptions {
            events: Some(events),
            ..AttachOptions::default()
        };
        let mut dp = Datapath::attach_on(platform, datapath, options)?;
        let now = dp.now();
        dp.event(now, "start", which);
        let status = status_file
            .map(StatusWriter::start)
            .transpose()
            .map_err(|e| format!("cannot start the status file's writer: {e}"))?;
        let (changes, watch, news) = match link {
            Some(l) => (Some(l.changes), Some(l.snapshots), l.news),
            None => (None, None, None),
        };
        let snapshots =
            SnapshotThread::start(watch, status).map_err(|e| format!("cannot start the snapshot thread: {e}"))?;
        Ok(Daemon {
            dp,
            plane: ControlPlane {
                file: Arc::new(file),
                snapshots: Some(snapshots),
                held: None,
                changes,
                news,
                news_held: LinkNews::default(),
                next_snapshot: Instant::ZERO,
                next_status: Instant::ZERO,
                watchdog: super::service::Watchdog::from_env(),
            },
        })
    }

    /// Runs until `stop` is set; writes the status file a last time.
    pub fn run(&mut self, stop: &Arc<AtomicBool>) {
        teamster_dp::datapath::run_kernel(&mut self.dp, stop, &mut self.plane);
        let status = self.plane.snapshots.take().and_then(SnapshotThread::stop);
        if let Some(w) = status {
            self.dp.collect_ring_drops();
            let state = self.dp.publish(self.dp.now(), MOVES_SHOWN, EVENTS_SHOWN);
            w.finish(Arc::new(super::view::snapshot(&state, &self.plane.file)));
        }
    }
}

impl ControlPlane {
    /// Copies the data plane's state for the snapshot thread.
    fn take(&self, dp: &Datapath, now: Instant, status_due: bool, done: Option<Done>) -> Taken {
        Taken {
            state: dp.publish(now, MOVES_SHOWN, EVENTS_SHOWN),
            file: self.file.clone(),
            status_due,
            done,
        }
    }

    /// Hands `taken` to the snapshot thread; a change's copy that finds no room is held for the
    /// next turn, a periodic one is skipped.
    fn hand_over(&mut self, taken: Taken) {
        let Some(thread) = &self.snapshots else { return };
        if let Some(t) = thread.offer(taken) {
            if t.done.is_some() {
                self.held = Some(t);
            }
        }
    }
}

impl ControlPlane {
    /// Passes netlink's interface news to the port rules' task; what finds no room waits (a
    /// name once, and past [`teamster_dp::datapath::NEWS_KEPT`] names as "look at everything").
    fn forward_news(&mut self, dp: &mut Datapath) {
        let fresh = dp.take_link_news();
        let Some(tx) = &self.news else { return };
        let held = &mut self.news_held;
        held.lost |= fresh.lost;
        for name in fresh.names {
            if held.names.len() >= teamster_dp::datapath::NEWS_KEPT {
                held.lost = true;
                break;
            }
            if !held.names.contains(&name) {
                held.names.push(name);
            }
        }
        if held.lost {
            held.names.clear();
        }
        if !held.lost && held.names.is_empty() {
            return;
        }
        if tx.try_send(std::mem::take(held)).is_err() {
            // Full (the task is busy) or gone: everything is looked at when it has room.
            held.lost = true;
        }
    }
}

/// Where a change's snapshot is answered.
type Done = tokio::sync::oneshot::Sender<Arc<Snapshot>>;

impl Control for ControlPlane {
    fn turn(&mut self, dp: &mut Datapath, now: Instant) {
        self.watchdog.tick(now);
        if let Some(t) = self.held.take() {
            self.hand_over(t);
            if self.held.is_some() {
                // Still no room: the change after it waits too, so answers keep their order.
                return;
            }
        }
        self.forward_news(dp);
        while let Some(apply) = self.changes.as_ref().and_then(|c| c.try_recv().ok()) {
            for note in apply.notes {
                dp.event(now, "port", note);
            }
            if let Some(plan) = apply.plan {
                let SwitchPlan { datapath: want, file } = *plan;
                let groups: Vec<(PortGroupSpec, SecurityPolicy)> = (0..file.port_groups.len())
                    .filter_map(|g| {
                        let security = want.switch.security.get(g).copied().unwrap_or_default();
                        Some((want.team.group(GroupId(g))?.clone(), security))
                    })
                    .collect();
                dp.reconfigure(want.tree, &want.ports, &groups, &want.uplinks, now);
                self.file = Arc::new(file);
            }
            let taken = self.take(dp, now, false, Some(apply.done));
            self.hand_over(taken);
            if self.held.is_some() {
                return;
            }
        }
        if now < self.next_snapshot {
            return;
        }
        self.next_snapshot = now + SNAPSHOT_EVERY;
        dp.collect_ring_drops();
        let status_due = now >= self.next_status;
        if status_due {
            self.next_status = now + STATUS_EVERY;
        }
        let taken = self.take(dp, now, status_due, None);
        self.hand_over(taken);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_dp::datapath::{PortState, Published, UplinkState};

    use super::super::config::{AllThere, ONE_PORT as FILE};

    /// A data plane's state as `publish` would copy it at 3 s, from FILE's plan.
    fn published() -> (Published, SwitchFile) {
        let plan = super::super::config::parse(FILE, &AllThere).unwrap();
        let SwitchPlan { datapath: dp, file } = plan;
        let ports = dp
            .ports
            .iter()
            .map(|p| PortState {
                plan: p.clone(),
                attached: true,
                backend: Some("af_packet".into()),
                worker: Some(0),
                extra: Default::default(),
                ecn_marked: 0,
                queue: Default::default(),
                counters: None,
                mac_claim: None,
            })
            .collect();
        let uplinks = dp
            .uplinks
            .iter()
            .map(|u| UplinkState {
                plan: u.clone(),
                attached: true,
                backend: Some("af_packet".into()),
                carrier: true,
                extra: Default::default(),
                ecn_marked: 0,
                counters: None,
                queued_frames: 0,
                queued_bytes: 0,
                queue_budget: 62_500,
                rx: None,
            })
            .collect();
        let state = Published {
            at: Instant::from_secs(3),
            team: dp.team,
            tree: dp.tree,
            ports,
            uplinks,
            moves: Vec::new(),
            moves_by_reason: Default::default(),
            events: Vec::new(),
            failovers: 0,
            vtep: None,
            rx_events: Vec::new(),
            rx_moves: Default::default(),
            data_plane: "userspace",
        };
        (state, file)
    }

    /// The snapshot thread builds the snapshot from the copy, publishes it to the API and
    /// answers the change with the same one; stopping it hands back the status writer.
    #[test]
    fn snapshots_are_built_off_the_loop_and_answer_changes() {
        let (watch, seen) = tokio::sync::watch::channel(Arc::new(Snapshot::default()));
        let thread = SnapshotThread::start(Some(watch), None).unwrap();
        let (done, answer) = tokio::sync::oneshot::channel();
        let (state, file) = published();
        let taken = Taken {
            state,
            file: Arc::new(file),
            status_due: false,
            done: Some(done),
        };
        assert!(thread.offer(taken).is_none(), "room for the first copy");
        let snap = answer.blocking_recv().expect("the change is answered");
        assert_eq!(snap.t_s, 3.0);
        assert_eq!(snap.uplinks[0].name, "uplink1");
        assert_eq!(snap.uplinks[0].queue_budget_bytes, 62_500);
        assert_eq!(snap.ports[0].name, "vm1");
        assert_eq!(snap.ports[0].limit_bps, Some(2_000_000_000));
        assert_eq!(snap.ports[0].worker, Some(0));
        assert!(Arc::ptr_eq(&seen.borrow(), &snap), "the API sees the same snapshot");
        assert!(thread.stop().is_none(), "no status file here");
    }
}
