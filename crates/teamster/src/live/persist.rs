//! Saving the configuration so that a crash at any instant leaves either the old file or the new
//! one, never a mix, and so that root never writes through a name someone else planted: the
//! text goes to a temporary created fresh (`O_EXCL|O_NOFOLLOW`, random name) in the file's
//! directory, checked to be writable only by root or the daemon's user, which is flushed to disk
//! (fsync) and renamed over the old file (rename is atomic within a file system, and replaces a
//! symlink rather than following it); the directory is then flushed so the rename itself
//! survives a power cut. The file keeps its permission bits. See [`super::safe_file`].

use super::safe_file::{split, TrustedDir};
use std::path::Path;

/// Replaces `path` with `text` atomically (see the module documentation).
pub fn save_atomically(path: &Path, text: &str) -> Result<(), String> {
    let (dir, name) = split(path)?;
    // Checked at every save: the directory must still be one only root or we may change.
    let dir = TrustedDir::open(&dir, "configuration directory")?;
    dir.replace(&name, text.as_bytes(), None).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

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
