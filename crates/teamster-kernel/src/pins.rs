//! The kernel path's attachments pinned in the BPF file system, so that forwarding outlives the
//! daemon (killed, crashed, or replaced by an upgrade) and the next start takes over without a
//! gap.
//!
//! Model. Each tcx attachment (a bpf link) is pinned at
//! `/sys/fs/bpf/teamster/<switch>/if<ifindex>_<pid>`, where `<switch>` stands for the daemon's
//! configuration file (a stable hash of its path: one switch, one directory) and `<pid>` for the
//! run that made it. A pinned link stays attached when its process dies, and with it the
//! program and the maps that program holds: the kernel goes on switching with the tables of the
//! moment.
//!
//! The next start finds the earlier run's links ([`Pins::earlier`]). It never reads or reuses
//! their maps (a pin from another build or another configuration cannot be half-used): it
//! attaches its own program *behind* each earlier link on the same interface, so the earlier
//! program keeps deciding every frame (its verdicts end the chain), writes its tables, and only
//! then removes the earlier links, one map write's time later: each frame is switched by one
//! program or the other, never by neither. A link on an interface the new configuration does
//! not have is removed then too. SIGTERM removes every pin of the run (the interfaces are left
//! as they were); so does a start that fails, for its own pins (the earlier run's stay, still
//! forwarding, for the next try).
//!
//! A start also collects what no run will take over: the pins, in any switch's directory, of
//! links whose interface is gone ([`collect_defunct`]; a kill -9'd switch whose configuration
//! never starts again would otherwise keep them for ever). A link on an interface that is still
//! there is never collected: it may be forwarding for a switch that will start again.
//!
//! Hostile ground: the directories are made here, root's, mode 0700; one that is not a plain
//! directory owned by root (a symlink planted, say) is refused, never followed. Where
//! `/sys/fs/bpf` is not a BPF file system it is mounted there (as systemd does at boot).

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where BPF objects are pinned on every distribution.
const BPFFS: &str = "/sys/fs/bpf";
/// statfs's f_type for a BPF file system.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// One switch's pin directory; see the module documentation.
#[derive(Debug)]
pub struct Pins {
    dir: PathBuf,
    collected: Vec<PathBuf>,
}

impl Pins {
    /// The pin directory of the switch whose configuration file is `config` (made if missing,
    /// with its parents; the BPF file system mounted if it is not). An error says what is in
    /// the way.
    pub fn for_config(config: &Path) -> Result<Pins, String> {
        let root = Path::new(BPFFS);
        ensure_bpffs(root)?;
        let base = root.join("teamster");
        private_dir(&base)?;
        let collected = collect_defunct(&base);
        let canonical = config.canonicalize().unwrap_or_else(|_| config.to_path_buf());
        let dir = base.join(format!("{:016x}", fnv1a(canonical.as_os_str().as_encoded_bytes())));
        private_dir(&dir)?;
        Ok(Pins { dir, collected })
    }

    /// The pins [`collect_defunct`] removed when this directory was opened.
    pub fn collected(&self) -> &[PathBuf] {
        &self.collected
    }

    /// A pin directory at `dir`, made if missing (tests: a directory on a BPF file system of
    /// their own).
    pub fn at(dir: &Path) -> Result<Pins, String> {
        private_dir(dir)?;
        Ok(Pins {
            dir: dir.to_path_buf(),
            collected: Vec::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where this run pins its link on `ifindex`.
    pub fn link_path(&self, ifindex: u32) -> PathBuf {
        // Not a dot: the BPF file system refuses names with one.
        self.dir.join(format!("if{ifindex}_{}", std::process::id()))
    }

    /// The links earlier runs pinned, by interface index (anything else in the directory is
    /// left alone).
    pub fn earlier(&self) -> BTreeMap<u32, Vec<PathBuf>> {
        let me = std::process::id().to_string();
        let mut out: BTreeMap<u32, Vec<PathBuf>> = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some((index, pid)) = name.to_str().and_then(|n| n.strip_prefix("if")?.split_once('_')) else {
                continue;
            };
            if let (Ok(index), true) = (index.parse::<u32>(), pid != me) {
                out.entry(index).or_default().push(e.path());
            }
        }
        out
    }

    /// Removes the directory if nothing is pinned in it any more.
    pub fn remove_if_empty(&self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Removes, in every switch's directory under `base`, the pins of tcx links whose interface is
/// gone, and a directory this leaves empty. Such a link switches nothing (a daemon killed with
/// -9 whose configuration never started again, its interfaces deleted since) and would stay
/// pinned for ever otherwise. A link whose interface is still there is left alone, whoever
/// pinned it: it may be forwarding for a switch that will start again. Only root's plain
/// directories and files named as this module names pins are looked at; nothing is followed.
/// Returns the pins it removed.
pub fn collect_defunct(base: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(dirs) = std::fs::read_dir(base) else {
        return removed;
    };
    for d in dirs.flatten() {
        let dir = d.path();
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_dir() && m.uid() == 0) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut emptied = false;
        for e in entries.flatten() {
            let path = e.path();
            let named = e.file_name().to_str().is_some_and(is_pin_name);
            let plain = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
            if named && plain && defunct_tcx_link(&path).unwrap_or(false) && std::fs::remove_file(&path).is_ok() {
                removed.push(path);
                emptied = true;
            }
        }
        if emptied {
            // Fails, as it should, while anything is left in it.
            let _ = std::fs::remove_dir(&dir);
        }
    }
    removed
}

/// `if<ifindex>_<pid>`.
fn is_pin_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("if")
        .and_then(|rest| rest.split_once('_'))
        .is_some_and(|(index, pid)| digits(index) && digits(pid))
}

/// Whether the object pinned at `path` is a tcx link whose interface is gone (the kernel then
/// reports its interface index as 0). By hand (`teamster_dp::bpf_call`): aya 0.14's `LinkInfo`
/// does not give a tcx link's interface.
fn defunct_tcx_link(path: &Path) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    use teamster_dp::bpf_call::{bpf, bpf_fd};
    const BPF_OBJ_GET: u32 = 7;
    const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
    const BPF_LINK_TYPE_TCX: u32 = 11;
    #[repr(C)]
    struct ObjGet {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
    }
    #[repr(C)]
    struct InfoByFd {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    /// `struct bpf_link_info` as far as a tcx link's interface: type, id, prog_id, then the
    /// (8-aligned) union, whose tcx member starts with the interface index; room for the rest.
    #[repr(C)]
    #[derive(Default)]
    struct LinkInfo {
        link_type: u32,
        id: u32,
        prog_id: u32,
        pad: u32,
        tcx_ifindex: u32,
        tcx_attach_type: u32,
        rest: [u64; 5],
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    let mut get = ObjGet {
        pathname: c.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    // SAFETY: BPF_OBJ_GET's attribute; the path it points to is NUL-terminated and outlives
    // the call.
    let fd = unsafe { bpf_fd(BPF_OBJ_GET, &mut get) }?;
    let mut info = LinkInfo::default();
    let mut attr = InfoByFd {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: size_of::<LinkInfo>() as u32,
        info: &mut info as *mut LinkInfo as u64,
    };
    // SAFETY: BPF_OBJ_GET_INFO_BY_FD's attribute; the kernel writes at most info_len bytes
    // into `info`, which holds that many.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info.link_type == BPF_LINK_TYPE_TCX && info.tcx_ifindex == 0)
}

/// A stable 64-bit hash of `bytes` (FNV-1a), so that a switch finds its directory again after an
/// upgrade: the standard library's hasher may change between Rust releases, and a
/// cryptographic hash would be a dependency for nothing secret.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Makes `path` a directory of root's, mode 0700, or checks that it is one; refuses anything
/// else there (a symlink, a file, another owner's directory) without following it.
fn private_dir(path: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_dir() && m.uid() == 0 => {
            if m.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            Ok(())
        }
        Ok(_) => Err(format!(
            "{} is not a directory of root's: the kernel path's pins are refused there",
            path.display()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .mode(0o700)
            .create(path)
            .map_err(|e| format!("cannot make {}: {e}", path.display())),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Mounts a BPF file system at `path` unless one is there.
fn ensure_bpffs(path: &Path) -> Result<(), String> {
    if is_bpffs(path) {
        return Ok(());
    }
    let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
    let target = c(path.to_str().expect("a constant path"));
    let (source, kind, options) = (c("bpf"), c("bpf"), c("mode=0700"));
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            kind.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            options.as_ptr().cast(),
        )
    };
    if r != 0 || !is_bpffs(path) {
        return Err(format!(
            "no BPF file system at {} and cannot mount one: {}",
            path.display(),
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes one struct statfs into `s`; `c` is NUL-terminated.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type as i64 == BPF_FS_MAGIC
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pin_names_are_taken_for_pins() {
        assert!(is_pin_name("if12_3456"));
        for name in ["if12", "if_3", "ifx_3", "if1_2_3", "if1_", "link", "if1_2 ", ".if1_2"] {
            assert!(!is_pin_name(name), "{name}");
        }
    }

    #[test]
    fn the_hash_is_fnv1a() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_planted_symlink_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        let link = dir.path().join("pins");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = private_dir(&link).unwrap_err();
        assert!(e.contains("not a directory of root's"), "{e}");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(private_dir(&file).is_err());
    }

    #[test]
    fn earlier_runs_links_are_found_by_interface_and_this_runs_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let pins = Pins {
            dir: dir.path().to_path_buf(),
            collected: Vec::new(),
        };
        for name in ["if7_1", "if7_2", "if9_3", "junk", "ifx_4"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        std::fs::write(pins.link_path(11), "").unwrap();
        let earlier = pins.earlier();
        assert_eq!(earlier.keys().copied().collect::<Vec<_>>(), [7, 9]);
        assert_eq!(earlier[&7].len(), 2);
    }
}
