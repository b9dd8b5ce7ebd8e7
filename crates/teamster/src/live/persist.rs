//! Saving the configuration so that a crash at any instant leaves either the old file or the new
//! one, never a mix, and so that root never writes through a name someone else planted: the
//! text goes to a temporary created fresh (`O_EXCL|O_NOFOLLOW`, random name) in the file's
//! directory, checked to be writable only by root or the daemon's user, which is flushed to disk
//! (fsync) and renamed over the old file (rename is atomic within a file system, and replaces a
//! symlink rather than following it); the directory is then flushed so the rename itself
//! survives a power cut. The file keeps its permission bits. See [`super::safe_file`].
//!
//! An operator's edit is never overwritten without a word. [`KeptFile`] remembers the bytes the
//! daemon last read from a file or wrote to it; before each save it reads the file again, and if
//! the bytes differ (an edit not yet reloaded: compared whole, not by modification time, which
//! an editor or a copy may keep or a coarse clock hide) the save, and so the change that asked
//! for it, is refused: the operator reloads the edit first, then the change can be made. The
//! reverse order, an edit made on a copy read before the daemon saved a change, is caught at
//! the reload by the revision the daemon writes in the file's header (see [`KeptFile::reload`]).

use super::safe_file::{split, TrustedDir};
use std::path::{Path, PathBuf};

/// Replaces `path` with `text` atomically (see the module documentation).
pub fn save_atomically(path: &Path, text: &str) -> Result<(), String> {
    let (dir, name) = split(path)?;
    // Checked at every save: the directory must still be one only root or we may change.
    let dir = TrustedDir::open(&dir, "configuration directory")?;
    dir.replace(&name, text.as_bytes(), None).map_err(|e| e.to_string())
}

/// A file the daemon rewrites (`switch.toml`, the libvirt hook's ports), with what it last read
/// there or wrote, and how many times it has saved it.
#[derive(Debug, Clone)]
pub struct KeptFile {
    path: PathBuf,
    /// The bytes last read or written; None: there was no file.
    known: Option<Vec<u8>>,
    /// The revision in force: the one the file last read named (0 if none), counted up by
    /// each save.
    revision: u64,
    /// Whether the daemon saved the file since it last read it.
    saved_since_read: bool,
}

impl KeptFile {
    /// A file the daemon read as `text` (None: it did not exist), whose header names `revision`.
    pub fn new(path: &Path, text: Option<&str>, revision: Option<u64>) -> KeptFile {
        KeptFile {
            path: path.to_path_buf(),
            known: text.map(|t| t.as_bytes().to_vec()),
            revision: revision.unwrap_or(0),
            saved_since_read: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes now (None: it does not exist).
    fn on_disk(&self) -> Result<Option<Vec<u8>>, String> {
        match std::fs::read(&self.path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: cannot read it: {e}", self.path.display())),
        }
    }

    /// Refuses if the file is not what the daemon last read or wrote: an edit that a save
    /// would lose.
    pub fn unchanged(&self) -> Result<(), String> {
        if self.on_disk()? == self.known {
            return Ok(());
        }
        Err(format!(
            "{} changed on disk since the switch last read or wrote it: reload it to apply the edit (`systemctl reload teamster`, SIGHUP) or undo it, then make the change again; nothing changed",
            self.path.display()
        ))
    }

    /// Saves the text `text_of(revision)` gives for the next revision, unless the file holds an
    /// edit the daemon has not read (then nothing is written and the error says so).
    pub fn save(&mut self, text_of: impl FnOnce(u64) -> String) -> Result<(), String> {
        self.unchanged()?;
        let text = text_of(self.revision + 1);
        save_atomically(&self.path, &text)?;
        self.revision += 1;
        self.known = Some(text.into_bytes());
        self.saved_since_read = true;
        Ok(())
    }

    /// Replaces the file with `text` whatever it holds now: for a file only the daemon writes
    /// (the libvirt hook's ports), where refusing would leave no way on but a restart, since a
    /// reload does not read it.
    pub fn overwrite(&mut self, text: String) -> Result<(), String> {
        save_atomically(&self.path, &text)?;
        self.revision += 1;
        self.known = Some(text.into_bytes());
        self.saved_since_read = true;
        Ok(())
    }

    /// Checks that `text`, read from the file for a reload, may replace what the daemon runs:
    /// refused if it names an older revision than the one in force (a copy read before a change
    /// made through the API, which the reload would undo: whether or not the daemon has read
    /// the file since, or restarted), if it names another revision while the daemon saved since
    /// it last read the file, or if it carries no revision while the daemon saved since then.
    pub fn reload(&self, text: &str, revision: Option<u64>) -> Result<(), String> {
        if self.known.as_deref() == Some(text.as_bytes()) {
            return Ok(());
        }
        let (path, now) = (self.path.display(), self.revision);
        let older = |r: u64| {
            format!(
                "{path} is an edit of revision {r}, but the switch runs revision {now} (changes made through the API since), which this reload would undo: make the edit on the file as it is now (revision {now}), or, to put back an older file on purpose, give it the first line of revision {now}, and reload; nothing changed"
            )
        };
        match revision {
            Some(r) if r < now => Err(older(r)),
            Some(r) if self.saved_since_read && r != now => Err(older(r)),
            None if self.saved_since_read => Err(format!(
                "{path} has no revision line, and the switch has saved it since it last read it (revision {now}, changes made through the API), which this reload would undo: make the edit on the file as it is now, keeping its first line, and reload; nothing changed"
            )),
            _ => Ok(()),
        }
    }

    /// Records that the daemon now runs `text`, read for a reload, whose header names
    /// `revision`.
    pub fn reloaded(&mut self, text: &str, revision: Option<u64>) {
        self.known = Some(text.as_bytes().to_vec());
        self.revision = revision.unwrap_or(self.revision);
        self.saved_since_read = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// An edit on disk is never overwritten, whatever its modification time; once reloaded,
    /// saves go on.
    #[test]
    fn a_kept_file_refuses_to_overwrite_an_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switch.toml");
        std::fs::write(&path, "a = 1\n").unwrap();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let mut kept = KeptFile::new(&path, Some("a = 1\n"), None);
        kept.save(|r| format!("# r{r}\na = 2\n")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# r1\na = 2\n");
        // Same length, same modification time: still an edit.
        std::fs::write(&path, "# r1\na = 3\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let e = kept.save(|_| "lost".into()).unwrap_err();
        assert!(e.contains("changed on disk") && e.contains("switch.toml"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# r1\na = 3\n");
        // Removed is changed too.
        std::fs::remove_file(&path).unwrap();
        assert!(kept.unchanged().is_err());
        std::fs::write(&path, "# r1\na = 3\n").unwrap();
        kept.reload("# r1\na = 3\n", Some(1)).unwrap();
        kept.reloaded("# r1\na = 3\n", Some(1));
        kept.save(|r| format!("# r{r}\na = 4\n")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# r2\na = 4\n");
    }

    /// A reload of an edit made on a copy older than the daemon's last save is refused; an
    /// edit of the current revision, or a fresh file while the daemon has not saved, is not.
    #[test]
    fn a_reload_of_an_older_revision_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switch.toml");
        std::fs::write(&path, "x").unwrap();
        let mut kept = KeptFile::new(&path, Some("x"), Some(4));
        assert!(
            kept.reload("fresh, no revision", None).is_ok(),
            "nothing saved since the read"
        );
        kept.save(|r| format!("rev {r}")).unwrap();
        let e = kept.reload("old copy", Some(4)).unwrap_err();
        assert!(e.contains("revision 4") && e.contains("revision 5"), "{e}");
        assert!(kept.reload("no line", None).unwrap_err().contains("no revision line"));
        assert!(kept.reload("edited", Some(5)).is_ok());
        assert!(kept.reload("rev 5", None).is_ok(), "the file as saved");
        // Once the daemon has read revision 5 again (a reload, or a restart), an older copy
        // is still refused: it would undo the change all the same.
        kept.reloaded("rev 5 edited", Some(5));
        let e = kept.reload("old copy", Some(4)).unwrap_err();
        assert!(e.contains("revision 4") && e.contains("revision 5"), "{e}");
        let restarted = KeptFile::new(&path, Some("rev 5"), Some(5));
        assert!(restarted.reload("old copy", Some(4)).is_err());
        assert!(restarted.reload("edited again", Some(5)).is_ok());
        assert!(restarted.reload("hand-written, no line", None).is_ok());
    }

    #[test]
    fn replaces_the_file_keeps_its_mode_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switch.toml");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        save_atomically(&path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["switch.toml"]);
    }

    #[test]
    fn a_symlink_at_the_old_temporary_name_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        let path = etc.join("switch.toml");
        std::fs::write(&path, "old").unwrap();
        // The name the old code used, guessable from the daemon's pid.
        std::os::unix::fs::symlink(&victim, etc.join(format!(".switch.toml.tmp-{}", std::process::id()))).unwrap();
        save_atomically(&path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
    }

    #[test]
    fn a_directory_others_may_write_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switch.toml");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = save_atomically(&path, "new").unwrap_err();
        assert!(e.contains("configuration directory") && e.contains("0777"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
    }

    #[test]
    fn a_failed_save_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone").join("switch.toml");
        assert!(save_atomically(&path, "new").is_err());
        assert!(!path.exists());
    }
}
