//! The control plane's thread: snapshots built off the data plane.
//!
//! Model. Twice a second, and at once after a change, the data plane's loop copies its state
//! ([`Published`]) and hands it here through a queue of two; this thread builds the
//! [`Snapshot`] from it (NetIOC allocations, names, views), publishes it to the API, offers it
//! to the status file's writer once a second, and answers the change that asked for it. When
//! this thread falls behind, the loop keeps its copy for the next turn (a change) or skips it (a
//! periodic one): the data plane never waits for the control plane.

use super::config::SwitchFile;
use super::snapshot::Snapshot;
use super::status_writer::StatusWriter;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use teamster_dp::datapath::Published;

/// Copies the thread may hold before the loop skips one.
const QUEUED: usize = 2;

/// One copy of the data plane's state, and what to do with its snapshot.
pub(super) struct Taken {
    pub state: Published,
    /// The configuration in force when it was taken.
    pub file: Arc<SwitchFile>,
    /// Offer it to the status file's writer.
    pub status_due: bool,
    /// Answer a change with it.
    pub done: Option<tokio::sync::oneshot::Sender<Arc<Snapshot>>>,
}

/// The loop's handle on the thread.
pub(super) struct SnapshotThread {
    queue: Option<SyncSender<Taken>>,
    thread: Option<std::thread::JoinHandle<Option<StatusWriter>>>,
}

impl SnapshotThread {
    /// Starts the thread, which publishes to `snapshots` (the API's) and `status`.
    pub fn start(
        snapshots: Option<tokio::sync::watch::Sender<Arc<Snapshot>>>,
        status: Option<StatusWriter>,
    ) -> std::io::Result<SnapshotThread> {
        let (queue, inbox) = sync_channel(QUEUED);
        let thread = std::thread::Builder::new()
            .name("teamster-snapshots".into())
            .spawn(move || run(inbox, snapshots, status))?;
        Ok(SnapshotThread {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Hands `taken` over without waiting; gives it back if the thread is behind.
    pub fn offer(&self, taken: Taken) -> Option<Taken> {
        let q = self.queue.as_ref()?;
        match q.try_send(taken) {
            Ok(()) => None,
            Err(TrySendError::Full(t)) => Some(t),
            // The thread is gone (it panicked): nothing to publish to.
            Err(TrySendError::Disconnected(_)) => None,
        }
    }

    /// Lets the thread finish what it holds and returns the status file's writer.
    pub fn stop(mut self) -> Option<StatusWriter> {
        self.queue = None;
        self.thread.take().and_then(|t| t.join().ok().flatten())
    }
}

/// Builds and publishes a snapshot for each copy until the loop's handle is dropped.
fn run(
    inbox: Receiver<Taken>,
    snapshots: Option<tokio::sync::watch::Sender<Arc<Snapshot>>>,
    status: Option<StatusWriter>,
) -> Option<StatusWriter> {
    for taken in inbox {
        let snap = Arc::new(super::view::snapshot(&taken.state, &taken.file));
        if taken.status_due {
            if let Some(w) = &status {
                w.offer(snap.clone());
            }
        }
        if let Some(s) = &snapshots {
            s.send_replace(snap.clone());
        }
        if let Some(done) = taken.done {
            let _ = done.send(snap);
        }
    }
    status
}
