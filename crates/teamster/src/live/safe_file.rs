//! Files the daemon, running as root, writes or trusts: the status file, the configuration's
//! saved copy, the lock files that keep one daemon per switch, and the API's token file.
//!
//! The model. The daemon writes only inside a *trusted directory*: the directory and every
//! directory on the way to it are owned by root or by the daemon's own user, and none is
//! writable by group or others unless it is owned by root and sticky (like /tmp, where others
//! may add names but never remove or rename ours). This is OpenSSH's rule for the directories
//! above a key, with the sticky-bit exception most tools make. A trusted directory is opened
//! once, by a walk from `/` on descriptors that follows only root's (or the daemon's user's)
//! symlinks ([`super::dir_walk`]), checked through its descriptor, and from then on named only
//! by that descriptor (`openat`, `renameat`), so swapping a path component later redirects
//! nothing.
//!
//! A file is replaced by creating a temporary with `O_CREAT|O_EXCL|O_NOFOLLOW` under a fresh
//! random name (a name someone planted, file or symlink, makes the open fail; it is never
//! opened, so never written through), writing and flushing it (fsync), renaming it over the
//! target (a rename replaces a symlink, it does not follow it) and flushing the directory.
//! A lock file is opened read-only with `O_NOFOLLOW` (created if absent) and never written, so
//! even a file planted in its place is not modified; its `flock` lasts as long as the process.
//! It is private to its owner (0600): anyone who may open a file may `flock` it, so a lock file
//! others could read would let any user hold it and keep the daemon from starting.
//! A secret (the token file) is refused, like an ssh key, when group or others may read or
//! write it or it is owned by someone other than root or the daemon's user.

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, Flock, FlockArg, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, FileStat, Mode, SFlag};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// How many fresh names a temporary is tried under before giving up (each is 64 random bits,
/// so a second try means someone is guessing, and a fourth is not going to be luckier).
const TEMPORARY_TRIES: usize = 4;
/// The largest secret file read (a token is tens of bytes).
const SECRET_MAX: u64 = 4096;

/// A directory checked to be writable by no one but root and the daemon's user, held open.
#[derive(Debug)]
pub struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Why a directory owned by `uid` with `mode` may be changed by someone other than root or
/// `euid`, if it may: the rule of the module documentation.
fn untrusted_dir(uid: u32, mode: u32, euid: u32) -> Option<String> {
    if uid != 0 && uid != euid {
        return Some(format!(
            "owned by uid {uid} (mode {:04o}), not by root or the daemon's uid {euid}",
            mode & 0o7777
        ));
    }
    let writable_by_others = mode & 0o022 != 0;
    let root_and_sticky = uid == 0 && mode & 0o1000 != 0;
    if writable_by_others && !root_and_sticky {
        return Some(format!(
            "mode {:04o} (owner uid {uid}) lets group or others write to it; make it 0755, or \
             root-owned and sticky (1777)",
            mode & 0o7777
        ));
    }
    None
}

/// Why a secret file owned by `uid` with `mode` is not private to root or `euid`, if it is not.
fn unprivate_file(uid: u32, mode: u32, euid: u32) -> Option<String> {
    if uid != 0 && uid != euid {
        return Some(format!("owned by uid {uid}, not by root or the daemon's uid {euid}"));
    }
    if mode & 0o077 != 0 {
        return Some(format!(
            "mode {:04o} lets group or others read or write it; chmod 600 it",
            mode & 0o7777
        ));
    }
    None
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Splits a file's path into its directory and its name (`status.json` is in `.`).
pub fn split(path: &Path) -> Result<(PathBuf, OsString), String> {
    let name = path
        .file_name()
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .ok_or_else(|| format!("{}: not a file name", path.display()))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name.to_os_string()))
}

/// The nearest ancestor of `path` that exists (itself if it does): what must be trusted before
/// the daemon creates the rest.
pub fn existing_ancestor(path: &Path) -> &Path {
    let mut p = path;
    while std::fs::symlink_metadata(p).is_err() {
        match p.parent() {
            Some(q) if !q.as_os_str().is_empty() => p = q,
            _ => return Path::new("."),
        }
    }
    p
}

impl TrustedDir {
    /// Opens directory `path` after checking it and every directory on the way to it, following
    /// only symlinks of root's or the daemon's user's ([`super::dir_walk`]); `what` names it in
    /// errors ("status file directory").
    pub fn open(path: &Path, what: &str) -> Result<TrustedDir, String> {
        let (fd, path) = super::dir_walk::open(path, what, euid(), untrusted_dir, None)?;
        Ok(TrustedDir { fd, path })
    }

    /// As [`TrustedDir::open`], making the directories missing on the way with `mode`.
    pub fn open_or_make(path: &Path, what: &str, mode: u32) -> Result<TrustedDir, String> {
        let (fd, path) = super::dir_walk::open(path, what, euid(), untrusted_dir, Some(mode))?;
        Ok(TrustedDir { fd, path })
    }

    /// Opens `name` here for reading and writing, creating it empty (mode 0600) if missing:
    /// never through a symlink, only a regular file of root's or the daemon's user's, made
    /// private to its owner (0600). `what` names it in errors ("state file").
    pub fn open_private(&self, name: &OsStr, what: &str) -> Result<File, String> {
        let shown = self.path.join(name);
        let shown = shown.display();
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| match e {
            Errno::ELOOP => format!("{what} {shown}: a symlink, not a regular file; not opening it"),
            e => format!("{what} {shown}: {}", std::io::Error::from(e)),
        })?;
        let st = fstat(&fd).map_err(|e| format!("{what} {shown}: {e}"))?;
        if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
            return Err(format!("{what} {shown}: not a regular file; not opening it"));
        }
        if st.st_uid != 0 && st.st_uid != euid() {
            return Err(format!(
                "{what} {shown}: owned by uid {}, not by root or the daemon's uid {}",
                st.st_uid,
                euid()
            ));
        }
        fchmod(&fd, Mode::from_bits_truncate(0o600)).map_err(|e| format!("{what} {shown}: {e}"))?;
        Ok(File::from(fd))
    }

    /// The directory's canonical path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `name` exists here (as anything: a symlink is not followed).
    pub fn exists(&self, name: &OsStr) -> bool {
        fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    }

    /// The target's permission bits, if `name` is a regular file here.
    fn mode_of(&self, name: &OsStr) -> Option<u32> {
        let st: FileStat = fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        (SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG).then_some(st.st_mode & 0o777)
    }

    /// Replaces `name` with `bytes` atomically (see the module documentation). The file gets
    /// `mode`, or with `None` the mode of the file it replaces (0644 if there is none).
    pub fn replace(&self, name: &OsStr, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
        let mode = mode.or_else(|| self.mode_of(name)).unwrap_or(0o644);
        self.write(name, bytes, mode, false)
    }

    /// Creates `name` with `bytes` and `mode`, whole or not at all, only if nothing named
    /// `name` exists: an `AlreadyExists` error otherwise, even for one made meanwhile (the
    /// finished temporary is hard-linked to `name`, which never replaces).
    pub fn create_new(&self, name: &OsStr, bytes: &[u8], mode: u32) -> std::io::Result<()> {
        self.write(name, bytes, mode, true)
    }

    /// Removes the file (or symlink, never followed) `name` here.
    pub fn remove(&self, name: &OsStr) -> std::io::Result<()> {
        Ok(nix::unistd::unlinkat(
            &self.fd,
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )?)
    }

    /// Writes `bytes` to a temporary with `mode`, synced, then puts it at `name`: replacing
    /// what is there, or with `exclusive` only where nothing is.
    fn write(&self, name: &OsStr, bytes: &[u8], mode: u32, exclusive: bool) -> std::io::Result<()> {
        let (tmp, fd) = self.create_temporary(name)?;
        let result = (|| {
            // The creation mode went through the umask; set exactly what was asked.
            fchmod(&fd, Mode::from_bits_truncate(mode))?;
            let mut f = File::from(fd);
            f.write_all(bytes)?;
            f.sync_all()?;
            drop(f);
            if exclusive {
                nix::unistd::linkat(&self.fd, tmp.as_os_str(), &self.fd, name, AtFlags::empty())?;
                // Made: what follows only tidies (the temporary is removed below on an error,
                // and a leftover one by remove_temporaries), so it cannot fail the creation.
                let _ = nix::unistd::unlinkat(&self.fd, tmp.as_os_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
                let _ = nix::unistd::fsync(&self.fd);
                return Ok(());
            } else {
                renameat(&self.fd, tmp.as_os_str(), &self.fd, name)?;
            }
            nix::unistd::fsync(&self.fd)?;
            Ok(())
        })();
        if result.is_err() {
            let _ = nix::unistd::unlinkat(&self.fd, tmp.as_os_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        }
        result
    }

    /// Creates a new, empty temporary for `name` under a fresh random name, never reusing a
    /// name that exists.
    fn create_temporary(&self, name: &OsStr) -> std::io::Result<(OsString, OwnedFd)> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let mut last = Errno::EEXIST;
        for _ in 0..TEMPORARY_TRIES {
            let mut tmp = temporary_prefix(name);
            tmp.push(format!("{:016x}", random_u64()?));
            match openat(&self.fd, tmp.as_os_str(), flags, Mode::from_bits_truncate(0o600)) {
                Ok(fd) => return Ok((tmp, fd)),
                Err(Errno::EEXIST) => last = Errno::EEXIST,
                Err(e) => return Err(e.into()),
            }
        }
        Err(last.into())
    }

    /// Removes the temporaries a crashed write of `name` left behind (never the file itself).
    pub fn remove_temporaries(&self, name: &OsStr) {
        let prefix = temporary_prefix(name);
        let Ok(mut listing) = nix::dir::Dir::openat(&self.fd, ".", OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        else {
            return;
        };
        let stale: Vec<OsString> = listing
            .iter()
            .flatten()
            .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
            .filter(|n| n.as_bytes().starts_with(prefix.as_bytes()))
            .collect();
        for n in stale {
            let _ = nix::unistd::unlinkat(&self.fd, n.as_os_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        }
    }

    /// Takes the exclusive lock on `name` here, creating it if need be (see the module
    /// documentation); `what` says what it guards, for the error when another process holds it.
    pub fn lock(&self, name: &OsStr, what: &str) -> Result<Flock<File>, String> {
        let shown = self.path.join(name);
        let shown = shown.display();
        let (file, ino) = self
            .open_lock_file(name)
            .map_err(|e| format!("lock file {shown}: {e}"))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(lock),
            Err((_, Errno::EWOULDBLOCK)) => Err(format!("lock file {shown} is held by {}: {what}", holder(ino))),
            Err((_, e)) => Err(format!("lock file {shown}: {e}")),
        }
    }

    /// Opens (creating) lock file `name` read-only, never through a symlink, as a regular file
    /// private to its owner (0600, an older one made so): no one else may open it, so no one
    /// else may hold its lock and keep the daemon from starting. Returns it and its inode.
    fn open_lock_file(&self, name: &OsStr) -> Result<(File, u64), String> {
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| std::io::Error::from(e).to_string())?;
        let st = fstat(&fd).map_err(|e| e.to_string())?;
        if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
            return Err("not a regular file".into());
        }
        if st.st_mode & 0o077 != 0 {
            fchmod(&fd, Mode::from_bits_truncate(0o600)).map_err(|e| format!("cannot make it private: {e}"))?;
        }
        Ok((File::from(fd), st.st_ino))
    }

    /// Takes the exclusive lock on `name` here for as long as the result lives, as
    /// [`TrustedDir::lock`], for a lock file that is removed when released
    /// ([`TrustedDir::release`]): after locking, the name must still be the file locked (else
    /// its holder released it meanwhile, and the lock is taken again on a fresh file). When
    /// another process has it, the error is `what` followed by the holder ("another teamster
    /// (pid N)") and the lock file.
    pub fn claim(&self, name: &OsStr, what: &str) -> Result<Flock<File>, String> {
        let shown = self.path.join(name);
        let shown = shown.display();
        for _ in 0..TEMPORARY_TRIES {
            let (file, ino) = self
                .open_lock_file(name)
                .map_err(|e| format!("lock file {shown}: {e}"))?;
            let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => lock,
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(format!("{what} {} (lock {shown})", holder(ino)));
                }
                Err((_, e)) => return Err(format!("lock file {shown}: {e}")),
            };
            match fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) if st.st_ino == ino => return Ok(lock),
                _ => continue,
            }
        }
        Err(format!("lock file {shown}: released and made again under every try"))
    }

    /// Releases a lock taken with [`TrustedDir::claim`]: its file is removed while it is still
    /// held, then the lock is dropped.
    pub fn release(&self, name: &OsStr, lock: Flock<File>) {
        let _ = nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        drop(lock);
    }
}

/// Who holds the `flock` on inode `ino`: "another teamster (pid N)", or, if the holder runs
/// as another user than root or the daemon's, "pid N of uid U, not a teamster".
fn holder(ino: u64) -> String {
    let Some(pid) = flock_holder(ino) else {
        return "another teamster".into();
    };
    let uid = std::fs::metadata(format!("/proc/{pid}")).map(|m| m.uid()).ok();
    match uid {
        Some(uid) if uid != 0 && uid != euid() => format!("pid {pid} of uid {uid}, not a teamster"),
        _ => format!("another teamster (pid {pid})"),
    }
}

/// The prefix of every temporary for `name`: `.NAME.tmp-`.
fn temporary_prefix(name: &OsStr) -> OsString {
    let mut p = OsString::from(".");
    p.push(name);
    p.push(".tmp-");
    p
}

/// 64 bits from the kernel's random source, for names no one can guess.
fn random_u64() -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(u64::from_ne_bytes(b))
}

/// The process holding a `flock` on inode `ino`, from /proc/locks, if it can be told.
fn flock_holder(ino: u64) -> Option<u32> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        let f: Vec<&str> = l.split_whitespace().collect();
        let same = f.get(1) == Some(&"FLOCK")
            && f.get(5)
                .and_then(|d| d.rsplit(':').next())
                .and_then(|i| i.parse::<u64>().ok())
                == Some(ino);
        if same {
            f.get(4)?.parse().ok()
        } else {
            None
        }
    })
}

/// Reads a secret (a token) from `path`, refusing a file others may read or change; `what`
/// names it in errors. Surrounding whitespace (a trailing newline) is not part of it.
pub fn read_private(path: &Path, what: &str) -> Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    // Non-blocking, so a FIFO planted here cannot hang the start-up.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("{what} {shown}: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("{what} {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{what} {shown}: not a regular file"));
    }
    if let Some(why) = unprivate_file(meta.uid(), meta.mode(), euid()) {
        return Err(format!("{what} {shown}: {why}"));
    }
    let mut bytes = Vec::new();
    f.take(SECRET_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{what} {shown}: {e}"))?;
    if bytes.len() as u64 > SECRET_MAX {
        return Err(format!("{what} {shown}: longer than {SECRET_MAX} bytes"));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{what} {shown}: not UTF-8 text"))?;
    Ok(text.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_trust_rule() {
        assert_eq!(untrusted_dir(0, 0o40755, 0), None);
        assert_eq!(untrusted_dir(1000, 0o40700, 1000), None);
        assert_eq!(untrusted_dir(0, 0o41777, 0), None, "/tmp");
        assert_eq!(untrusted_dir(0, 0o41777, 1000), None, "/tmp for a user daemon");
        for (uid, mode, euid, says) in [
            (0, 0o40777, 0, "0777"),
            (0, 0o40775, 0, "0775"),
            (0, 0o40757, 0, "0757"),
            (1000, 0o41777, 1000, "1777"),
            (1000, 0o40755, 0, "uid 1000"),
        ] {
            let why = untrusted_dir(uid, mode, euid).unwrap();
            assert!(why.contains(says), "{why}");
        }
        assert_eq!(unprivate_file(0, 0o100600, 0), None);
        assert_eq!(unprivate_file(0, 0o100400, 0), None);
        assert!(unprivate_file(0, 0o100640, 0).unwrap().contains("0640"));
        assert!(unprivate_file(0, 0o100604, 0).unwrap().contains("0604"));
        assert!(unprivate_file(1000, 0o100600, 0).unwrap().contains("uid 1000"));
    }

    #[test]
    fn a_directory_others_may_write_is_refused_naming_it_and_its_mode() {
        let top = tempfile::tempdir().unwrap();
        let open = top.path().join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        let e = TrustedDir::open(&open, "status file directory").unwrap_err();
        assert!(
            e.contains("status file directory") && e.contains("open") && e.contains("0777"),
            "{e}"
        );
        // Below it, too: an ancestor others may write is as bad.
        let below = open.join("below");
        std::fs::create_dir(&below).unwrap();
        let e = TrustedDir::open(&below, "API socket directory").unwrap_err();
        assert!(e.contains("ancestor") && e.contains("0777"), "{e}");
        chmod(&open, 0o775);
        assert!(TrustedDir::open(&open, "x").unwrap_err().contains("0775"));
        chmod(&open, 0o755);
        assert!(TrustedDir::open(&below, "x").is_ok());
        if euid() == 0 {
            // Root-owned and sticky, like /tmp, is allowed.
            chmod(&open, 0o1777);
            assert!(TrustedDir::open(&open, "x").is_ok());
        }
    }

    #[test]
    fn only_symlinks_of_root_or_the_daemon_are_followed_and_missing_directories_are_made() {
        let top = tempfile::tempdir().unwrap();
        let real = top.path().join("real");
        std::fs::create_dir(&real).unwrap();
        // Our own symlink, relative, through `..`: followed; the path is the real one.
        std::os::unix::fs::symlink("sub/../real", top.path().join("ours")).unwrap();
        std::fs::create_dir(top.path().join("sub")).unwrap();
        let d = TrustedDir::open(&top.path().join("ours"), "x").unwrap();
        assert_eq!(d.path(), real.canonicalize().unwrap());
        // Someone else's: refused, naming it and its owner, wherever it is on the way.
        if euid() == 0 {
            let theirs = top.path().join("theirs");
            std::os::unix::fs::symlink(&real, &theirs).unwrap();
            std::os::unix::fs::lchown(&theirs, Some(65534), Some(65534)).unwrap();
            for path in [theirs.clone(), theirs.join("..").join("real")] {
                let e = TrustedDir::open(&path, "--state directory").unwrap_err();
                assert!(
                    e.contains("--state directory") && e.contains("theirs") && e.contains("symlink owned by uid 65534"),
                    "{e}"
                );
            }
        }
        // Made where missing, with the mode asked.
        let made = top.path().join("ours").join("a").join("b");
        let d = TrustedDir::open_or_make(&made, "x", 0o700).unwrap();
        assert_eq!(d.path(), real.join("a").join("b").canonicalize().unwrap());
        for p in [real.join("a"), real.join("a/b")] {
            assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o700, "{}", p.display());
        }
        assert!(TrustedDir::open(&top.path().join("missing"), "x")
            .unwrap_err()
            .contains("missing"));
        // A file on the way is not a directory.
        std::fs::write(real.join("f"), "").unwrap();
        assert!(TrustedDir::open(&real.join("f"), "x").is_err());
    }

    #[test]
    fn a_planted_symlink_or_file_is_never_written_through() {
        let top = tempfile::tempdir().unwrap();
        let victim = top.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let dir = top.path().join("state");
        std::fs::create_dir(&dir).unwrap();
        let d = TrustedDir::open(&dir, "x").unwrap();
        // Symlinks at the target and at every name an old build used, and a hard link.
        std::os::unix::fs::symlink(&victim, dir.join("status.json")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("status.tmp")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(format!(".status.json.tmp-{}", std::process::id()))).unwrap();
        std::fs::hard_link(&victim, dir.join("status.json.tmp")).unwrap();
        for round in 0..3 {
            d.replace(
                OsStr::new("status.json"),
                format!("{{\"round\": {round}}}").as_bytes(),
                Some(0o644),
            )
            .unwrap();
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let meta = std::fs::symlink_metadata(dir.join("status.json")).unwrap();
        assert!(meta.is_file(), "the symlink was replaced, not followed");
        assert_eq!(meta.mode() & 0o777, 0o644);
        assert_eq!(
            std::fs::read_to_string(dir.join("status.json")).unwrap(),
            "{\"round\": 2}"
        );
        // The temporaries are gone; the planted names are untouched apart from the target.
        d.remove_temporaries(OsStr::new("status.json"));
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["status.json", "status.json.tmp", "status.tmp"]);
    }

    #[test]
    fn a_replacement_keeps_the_old_mode_and_a_renamed_directory_is_still_the_one_written() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("etc");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("switch.toml"), "old").unwrap();
        chmod(&dir.join("switch.toml"), 0o640);
        let d = TrustedDir::open(&dir, "x").unwrap();
        d.replace(OsStr::new("switch.toml"), b"new", None).unwrap();
        let meta = std::fs::metadata(dir.join("switch.toml")).unwrap();
        assert_eq!(
            (
                meta.mode() & 0o777,
                std::fs::read_to_string(dir.join("switch.toml")).unwrap().as_str()
            ),
            (0o640, "new")
        );
        // The descriptor, not the path, names the directory.
        std::fs::rename(&dir, top.path().join("moved")).unwrap();
        std::fs::create_dir(&dir).unwrap();
        d.replace(OsStr::new("switch.toml"), b"newer", None).unwrap();
        assert_eq!(
            std::fs::read_to_string(top.path().join("moved/switch.toml")).unwrap(),
            "newer"
        );
        assert!(!dir.join("switch.toml").exists());
    }

    #[test]
    fn a_new_file_never_replaces_anything_not_even_a_symlink() {
        let top = tempfile::tempdir().unwrap();
        let d = TrustedDir::open(top.path(), "x").unwrap();
        d.create_new(OsStr::new("k"), b"first", 0o600).unwrap();
        assert_eq!(std::fs::metadata(top.path().join("k")).unwrap().mode() & 0o777, 0o600);
        let e = d.create_new(OsStr::new("k"), b"second", 0o600).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(top.path().join("k")).unwrap(), b"first");
        std::os::unix::fs::symlink(top.path().join("elsewhere"), top.path().join("l")).unwrap();
        assert!(d.create_new(OsStr::new("l"), b"x", 0o600).is_err());
        assert!(!top.path().join("elsewhere").exists(), "written through a symlink");
        // No temporary is left behind.
        let names: Vec<_> = std::fs::read_dir(top.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        d.remove(OsStr::new("l")).unwrap();
        assert!(top.path().join("elsewhere").symlink_metadata().is_err());
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_file_and_a_planted_lock_file_is_not_written() {
        let top = tempfile::tempdir().unwrap();
        let d = TrustedDir::open(top.path(), "x").unwrap();
        std::fs::write(top.path().join("switch.toml.lock"), "someone's").unwrap();
        let held = d
            .lock(OsStr::new("switch.toml.lock"), "a switch runs on this file")
            .unwrap();
        let e = d
            .lock(OsStr::new("switch.toml.lock"), "a switch runs on this file")
            .unwrap_err();
        assert!(
            e.contains("switch.toml.lock") && e.contains("held by another teamster"),
            "{e}"
        );
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        assert!(d.lock(OsStr::new("switch.toml.lock"), "x").is_ok());
        assert_eq!(
            std::fs::read_to_string(top.path().join("switch.toml.lock")).unwrap(),
            "someone's"
        );
        std::os::unix::fs::symlink("/etc/passwd", top.path().join("other.lock")).unwrap();
        assert!(d.lock(OsStr::new("other.lock"), "x").is_err());
    }

    #[test]
    fn a_secret_others_may_read_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let token = top.path().join("token");
        std::fs::write(&token, "s3cret + % & / ü 0123456789\n").unwrap();
        chmod(&token, 0o644);
        let e = read_private(&token, "--api-token-file").unwrap_err();
        assert!(
            e.contains("--api-token-file") && e.contains("token") && e.contains("0644"),
            "{e}"
        );
        chmod(&token, 0o640);
        assert!(read_private(&token, "t").unwrap_err().contains("0640"));
        chmod(&token, 0o600);
        assert_eq!(read_private(&token, "t").unwrap(), "s3cret + % & / ü 0123456789");
        let fifo = top.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        assert!(read_private(&fifo, "t").unwrap_err().contains("not a regular file"));
    }

    #[test]
    fn file_paths_split_into_directory_and_name() {
        assert_eq!(
            split(Path::new("status.json")).unwrap(),
            (PathBuf::from("."), OsString::from("status.json"))
        );
        assert_eq!(
            split(Path::new("/run/t/s.json")).unwrap(),
            (PathBuf::from("/run/t"), OsString::from("s.json"))
        );
        assert!(split(Path::new("/run/t/..")).is_err());
        assert!(split(Path::new("/")).is_err());
    }
}
