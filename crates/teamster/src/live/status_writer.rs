//! The status file, written off the data plane's thread.
//!
//! The loop builds a snapshot every second and offers it here; a thread of its own turns it into
//! JSON and replaces the file (see [`super::safe_file`]), so neither serialising nor a slow disk
//! delays a frame. The hand-over holds one snapshot: if the writer is still busy with the last
//! one, the new one is dropped, since the file is a periodic view and the next second brings a
//! fresher one. The last snapshot, when the switch stops, is always written.

use super::safe_file::TrustedDir;
use super::snapshot::Snapshot;
use std::ffi::OsString;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Where the status file goes: its directory, checked and held open, and its name there.
pub struct StatusFile {
    pub dir: TrustedDir,
    pub name: OsString,
    /// The last write failed (said once, not every second).
    failing: bool,
}

impl StatusFile {
    pub fn new(dir: TrustedDir, name: OsString) -> StatusFile {
        StatusFile {
            dir,
            name,
            failing: false,
        }
    }

    /// Replaces the status file (mode 0644) atomically, never through a planted name (see
    /// [`super::safe_file`]); a failure is logged once, and its end once.
    fn write(&mut self, snap: &Snapshot) {
        let text = serde_json::to_vec(snap).unwrap_or_default();
        let shown = self.dir.path().join(&self.name);
        match self.dir.replace(&self.name, &text, Some(0o644)) {
            Ok(()) if self.failing => {
                eprintln!("teamster: status file {} written again", shown.display());
                self.failing = false;
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                eprintln!("teamster: status file {}: {e}", shown.display());
                self.failing = true;
            }
            Err(_) => {}
        }
    }
}

/// The writer thread and the way to it.
pub struct StatusWriter {
    to: SyncSender<Arc<Snapshot>>,
    thread: JoinHandle<()>,
}

impl StatusWriter {
    /// Starts the thread that writes `file`.
    pub fn start(mut file: StatusFile) -> std::io::Result<StatusWriter> {
        let (to, from) = sync_channel::<Arc<Snapshot>>(1);
        let thread = std::thread::Builder::new()
            .name("teamster-status".into())
            .spawn(move || {
                while let Ok(snap) = from.recv() {
                    file.write(&snap);
                }
            })?;
        Ok(StatusWriter { to, thread })
    }

    /// Hands `snap` to the writer, unless it is still writing the previous one.
    pub fn offer(&self, snap: Arc<Snapshot>) {
        // Full: the writer is busy, and the next second brings a fresher one. Disconnected:
        // the thread is gone (it panicked), and there is nothing left to write with.
        let _ = self.to.try_send(snap);
    }

    /// Writes `last` (waiting for the writer to be free) and stops the thread.
    pub fn finish(self, last: Arc<Snapshot>) {
        let _ = self.to.send(last);
        drop(self.to);
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t_s: f64) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            t_s,
            ..Snapshot::default()
        })
    }

    fn written(dir: &std::path::Path) -> f64 {
        let text = std::fs::read_to_string(dir.join("status.json")).unwrap();
        serde_json::from_str::<Snapshot>(&text).unwrap().t_s
    }

    #[test]
    fn the_last_snapshot_is_always_written() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TrustedDir::open(tmp.path(), "status directory").unwrap();
        let w = StatusWriter::start(StatusFile::new(dir, "status.json".into())).unwrap();
        // Offers faster than a disk takes them: some may be dropped, never the last.
        for i in 0..100 {
            w.offer(at(f64::from(i)));
        }
        w.finish(at(1000.0));
        assert_eq!(written(tmp.path()), 1000.0);
    }
}
