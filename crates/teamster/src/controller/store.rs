//! Where the controller keeps its state: behind [`Store`], so an embedded file serves one
//! controller and a shared store several.
//!
//! [`EmbeddedStore`] is a redb database (one file, ACID: a write is either wholly on disk or
//! not at all, whatever kills the process; it is flushed before `save` returns). The state is
//! one JSON value under one key, written in one transaction, so a restarted controller reads
//! exactly the last state it accepted. redb locks the file: a second controller on the same
//! file is refused at start. The file is opened once, relative to its checked directory's
//! descriptor, and redb is handed the open file (its `FileBackend`), so a directory or name
//! swapped after the check redirects nothing.

use super::state::ClusterState;
use crate::live::safe_file::TrustedDir;
use redb::{ReadableDatabase, TableDefinition};
use std::ffi::OsStr;

/// A place the cluster's state is loaded from and saved to.
pub trait Store: Send {
    /// The last state saved, or None for a new store.
    fn load(&self) -> Result<Option<ClusterState>, String>;
    /// Saves `state` durably: after `Ok`, a restart loads it.
    fn save(&self, state: &ClusterState) -> Result<(), String>;
    /// What it is, for logs and errors.
    fn describe(&self) -> String;
}

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("teamster-controller");
const KEY: &str = "cluster";

/// The embedded store: a redb file.
pub struct EmbeddedStore {
    db: redb::Database,
    path: String,
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
        Ok(EmbeddedStore { db, path: shown })
    }
}

impl Store for EmbeddedStore {
    fn load(&self) -> Result<Option<ClusterState>, String> {
        let err = |e: &dyn std::fmt::Display| format!("state file {}: {e}", self.path);
        let txn = self.db.begin_read().map_err(|e| err(&e))?;
        let table = match txn.open_table(TABLE) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(err(&e)),
        };
        let Some(value) = table.get(KEY).map_err(|e| err(&e))? else {
            return Ok(None);
        };
        serde_json::from_slice(value.value()).map(Some).map_err(|e| err(&e))
    }

    fn save(&self, state: &ClusterState) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| format!("state file {}: {e}", self.path);
        let bytes = serde_json::to_vec(state).map_err(|e| err(&e))?;
        let txn = self.db.begin_write().map_err(|e| err(&e))?;
        {
            let mut table = txn.open_table(TABLE).map_err(|e| err(&e))?;
            table.insert(KEY, bytes.as_slice()).map_err(|e| err(&e))?;
        }
        txn.commit().map_err(|e| err(&e))
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
        store.save(&s).unwrap();
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
