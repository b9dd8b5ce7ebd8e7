//! Where the controller keeps its state: behind [`Store`], so an embedded file serves one
//! controller and a shared store several.
//!
//! [`EmbeddedStore`] is a redb database (one file, ACID: a write is either wholly on disk or
//! not at all, whatever kills the process; it is flushed before `save` returns). The state is
//! one JSON value under one key, written in one transaction, so a restarted controller reads
//! exactly the last state it accepted. redb locks the file: a second controller on the same
//! file is refused at start.

use super::state::ClusterState;
use redb::{ReadableDatabase, TableDefinition};
use std::path::Path;

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
    /// Opens (or creates) the store at `path`. The caller has checked its directory; a path
    /// that is a symlink or not a regular file is refused rather than followed.
    pub fn open(path: &Path) -> Result<EmbeddedStore, String> {
        let shown = path.display().to_string();
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_file() {
                return Err(format!("state file {shown}: not a regular file; not opening it"));
            }
        }
        let db = redb::Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => {
                format!("state file {shown}: another controller has it open")
            }
            e => format!("state file {shown}: {e}"),
        })?;
        // The cluster's state is the controller's alone.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("state file {shown}: {e}"))?;
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
        let path = dir.path().join("state.redb");
        let store = EmbeddedStore::open(&path).unwrap();
        assert_eq!(store.load().unwrap(), None);
        let s = ClusterState {
            generation: 7,
            ..ClusterState::default()
        };
        store.save(&s).unwrap();
        let e = EmbeddedStore::open(&path).err().unwrap();
        assert!(e.contains("another controller"), "{e}");
        drop(store);
        assert_eq!(EmbeddedStore::open(&path).unwrap().load().unwrap(), Some(s));
        let link = dir.path().join("link.redb");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(EmbeddedStore::open(&link).err().unwrap().contains("not a regular file"));
    }
}
