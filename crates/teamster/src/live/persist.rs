//! Saving the configuration so that a crash at any instant leaves either the old file or the new
//! one, never a mix: the text goes to a temporary file in the same directory, which is flushed
//! to disk (fsync) and renamed over the old one (rename is atomic within a file system); the
//! directory is then flushed so the rename itself survives a power cut.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Replaces `path` with `text` atomically (see the module documentation).
pub fn save_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        // Keep the old file's permissions (a config may hold nothing secret, but the operator
        // chose its mode).
        if let Ok(meta) = std::fs::metadata(path) {
            f.set_permissions(meta.permissions())?;
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Removes temporaries a crashed save of `path` left behind (they are never the live file).
pub fn remove_stale_temporaries(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let prefix = format!(
        ".{}.tmp-",
        path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
    );
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switch.toml");
        std::fs::write(&path, "old").unwrap();
        save_atomically(&path, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["switch.toml"]);
    }

    #[test]
    fn stale_temporaries_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switch.toml");
        std::fs::write(&path, "live").unwrap();
        std::fs::write(dir.path().join(".switch.toml.tmp-123"), "half").unwrap();
        std::fs::write(dir.path().join("other"), "x").unwrap();
        remove_stale_temporaries(&path);
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["other", "switch.toml"]);
    }

    #[test]
    fn a_failed_save_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone").join("switch.toml");
        assert!(save_atomically(&path, "new").is_err());
        assert!(!path.exists());
    }
}
