//! Where the controller keeps its state: behind [`Store`], so an embedded file serves one
//! controller and a shared store several.
//!
//! The state is kept as records ([`super::records`]: one per host, one per VM, the cluster's
//! own), and a change is saved as its delta: what it made, changed or removed, in one
//! transaction, so a change writes in proportion to itself and a report that changes nothing
//! writes nothing. A store that holds the state in the earlier layout (one JSON value) is read
//! from it and written whole in the new one at its first save, the old value removed in the
//! same transaction.
//!
//! [`EmbeddedStore`] is a redb database (one file, ACID: a write is either wholly on disk or
//! not at all, whatever kills the process; it is flushed before `save` returns), so a
//! restarted controller reads exactly the last state it accepted. redb locks the file: a
//! second controller on the same file is refused at start. The file is opened once, relative
//! to its checked directory's descriptor, and redb is handed the open file (its
//! `FileBackend`), so a directory or name swapped after the check redirects nothing.

use super::records::Delta;
use super::state::ClusterState;
use crate::live::safe_file::TrustedDir;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// A place the cluster's state is loaded from and saved to.
pub trait Store: Send {
    /// The last state saved, or None for a new store.
    fn load(&self) -> Result<Option<ClusterState>, String>;
    /// Saves `state`, whose records that differ from the last saved state's are `delta`,
    /// durably: after `Ok`, a restart loads it.
    fn save(&self, state: &ClusterState, delta: &Delta) -> Result<(), SaveError>;
    /// What it is, for logs and errors.
    fn describe(&self) -> String;
}

/// Why a save did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaveError {
    /// The store could not keep the change (a full disk); the controller goes on, and a later
    /// change may be kept.
    Failed(String),
    /// The store could not keep it and this controller stops: it no longer leads (another
    /// won the election), or what the store holds is no longer known (an etcd write whose
    /// outcome is unknown). It keeps nothing from now on.
    Stopping(String),
}

impl std::fmt::Display for SaveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SaveError::Failed(why) | SaveError::Stopping(why) => f.write_str(why),
        }
    }
}

impl From<String> for SaveError {
    fn from(why: String) -> SaveError {
        SaveError::Failed(why)
    }
}

/// The records, by key.
const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("teamster-records");
/// The earlier layout: the whole state under one key.
const LEGACY: TableDefinition<&str, &[u8]> = TableDefinition::new("teamster-controller");
const LEGACY_KEY: &str = "cluster";

/// The embedded store: a redb file.
pub struct EmbeddedStore {
    db: redb::Database,
    path: String,
    /// The state was read from the earlier layout: the next save writes it whole.
    legacy: AtomicBool,
}

impl EmbeddedStore {
    /// Opens (or creates) the store `name` in `dir`, a directory opened once and checked
    /// ([`TrustedDir`]): the file is opened relative to that descriptor, never through a
    /// symlink, only as a regular file of root's or the controller's user's, and made 0600;
    /// redb then works on that open file, so no path is resolved again.
    pub fn open(dir: &TrustedDir, name: &OsStr) -> Result<EmbeddedStore, String> {
        let shown = dir.path().join(name).display().to_string();
        let file = dir.open_private(name, "state file")?;
        let backend = redb::backends::FileBackend::new(file).map_err(|e| format!("state file {shown}: {e}"))?;
        let db = redb::Database::builder()
            .create_with_backend(backend)
            .map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => {
                    format!("state file {shown}: another controller has it open")
                }
                e => format!("state file {shown}: {e}"),
            })?;
        Ok(EmbeddedStore {
            db,
            path: shown,
            legacy: AtomicBool::new(false),
        })
    }
}

impl Store for EmbeddedStore {
    fn load(&self) -> Result<Option<ClusterState>, String> {
        let err = |e: &dyn std::fmt::Display| format!("state file {}: {e}", self.path);
        let txn = self.db.begin_read().map_err(|e| err(&e))?;
        match txn.open_table(RECORDS) {
            Ok(table) => {
                let mut records = Vec::new();
                for entry in table.iter().map_err(|e| err(&e))? {
                    let (k, v) = entry.map_err(|e| err(&e))?;
                    records.push((k.value().to_string(), v.value().to_vec()));
                }
                let read = ClusterState::from_records(records.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
                if let Some(state) = read.map_err(|e| err(&e))? {
                    return Ok(Some(state));
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(err(&e)),
        }
        let table = match txn.open_table(LEGACY) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(err(&e)),
        };
        let Some(value) = table.get(LEGACY_KEY).map_err(|e| err(&e))? else {
            return Ok(None);
        };
        let state = serde_json::from_slice(value.value()).map_err(|e| err(&e))?;
        self.legacy.store(true, Ordering::Relaxed);
        Ok(Some(state))
    }

    fn save(&self, state: &ClusterState, delta: &Delta) -> Result<(), SaveError> {
        let err = |e: &dyn std::fmt::Display| format!("state file {}: {e}", self.path);
        let legacy = self.legacy.load(Ordering::Relaxed);
        let delta = delta.or_whole(state, legacy)?;
        if delta.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(|e| err(&e))?;
        if legacy {
            txn.delete_table(RECORDS).map_err(|e| err(&e))?;
        }
        {
            let mut table = txn.open_table(RECORDS).map_err(|e| err(&e))?;
            for (k, v) in &delta.puts {
                table.insert(k.as_str(), v.as_slice()).map_err(|e| err(&e))?;
            }
            for k in &delta.deletes {
                table.remove(k.as_str()).map_err(|e| err(&e))?;
            }
        }
        if legacy {
            txn.delete_table(LEGACY).map_err(|e| err(&e))?;
        }
        txn.commit().map_err(|e| err(&e))?;
        self.legacy.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn describe(&self) -> String {
        format!("embedded store {}", self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_state_loads_after_reopening_and_a_second_opener_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let trusted = TrustedDir::open(dir.path(), "x").unwrap();
        let name = OsStr::new("state.redb");
        let store = EmbeddedStore::open(&trusted, name).unwrap();
        assert_eq!(store.load().unwrap(), None);
        let s = ClusterState {
            generation: 7,
            ..ClusterState::default()
        };
        store.save(&s, &s.records().unwrap()).unwrap();
        let e = EmbeddedStore::open(&trusted, name).err().unwrap();
        assert!(e.contains("another controller"), "{e}");
        drop(store);
        assert_eq!(EmbeddedStore::open(&trusted, name).unwrap().load().unwrap(), Some(s));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(name)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A symlink or a directory at the name is refused, not followed.
        std::os::unix::fs::symlink(dir.path().join(name), dir.path().join("link.redb")).unwrap();
        let e = EmbeddedStore::open(&trusted, OsStr::new("link.redb")).err().unwrap();
        assert!(e.contains("symlink") && e.contains("not a regular file"), "{e}");
        std::fs::create_dir(dir.path().join("dir.redb")).unwrap();
        let e = EmbeddedStore::open(&trusted, OsStr::new("dir.redb")).err().unwrap();
        assert!(e.contains("dir.redb"), "{e}");
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    /// A state file of the earlier layout (one JSON value) is read, and written whole in
    /// records at the first save, the old value gone; later saves write their delta alone.
    #[test]
    fn a_state_of_the_earlier_layout_is_read_and_moved_to_records() {
        let dir = tempfile::tempdir().unwrap();
        let trusted = TrustedDir::open(dir.path(), "x").unwrap();
        let name = OsStr::new("state.redb");
        let shape: super::super::state::HostShape =
            serde_json::from_value(serde_json::json!({"uplinks": [{"name": "u", "capacity": "10G"}]})).unwrap();
        let mut old = ClusterState::default();
        old.register("h1", shape, 1).unwrap();
        {
            let store = EmbeddedStore::open(&trusted, name).unwrap();
            let txn = store.db.begin_write().unwrap();
            {
                let mut t = txn.open_table(LEGACY).unwrap();
                t.insert(LEGACY_KEY, serde_json::to_vec(&old).unwrap().as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let store = EmbeddedStore::open(&trusted, name).unwrap();
        assert_eq!(store.load().unwrap().as_ref(), Some(&old));
        let mut next = old.clone();
        next.generation += 1;
        // Its delta names the cluster's record alone; the save writes the host's too.
        let delta = next.delta(&old).unwrap();
        assert_eq!(delta.puts.len(), 1);
        store.save(&next, &delta).unwrap();
        drop(store);
        let store = EmbeddedStore::open(&trusted, name).unwrap();
        assert_eq!(store.load().unwrap(), Some(next.clone()));
        let txn = store.db.begin_read().unwrap();
        assert!(matches!(
            txn.open_table(LEGACY),
            Err(redb::TableError::TableDoesNotExist(_))
        ));
        let keys: Vec<String> = (txn.open_table(RECORDS).unwrap().iter().unwrap())
            .map(|e| e.unwrap().0.value().to_string())
            .collect();
        assert_eq!(keys, ["cluster", "host/h1"]);
    }
}
