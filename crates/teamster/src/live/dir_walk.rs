//! Opening a directory by a path that no one but root and the daemon's user can steer, for
//! [`super::safe_file::TrustedDir`].
//!
//! The model. A path is resolved one component at a time from `/`, each step relative to the
//! descriptor of the directory before it, never by handing the kernel the whole path again
//! (which would resolve it afresh, and a name swapped since the check would win). Every
//! directory the walk enters must pass the trust rule ([`super::safe_file`]: owned by root or
//! the daemon's user, writable by no one else unless root's and sticky), checked on the
//! descriptor itself; so no entry the walk looks up can be replaced by anyone else. A symlink
//! is followed only if root or the daemon's user owns it (a root daemon never follows a
//! symlink someone else made, which in a sticky directory like /tmp anyone may plant and
//! re-point at will); its target is walked the same way, `..` going back up the directories
//! already opened. Missing directories may be made on the way, with a given mode.

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, Mode, SFlag};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// Symlinks followed in one walk at most (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Why a directory owned by `uid` with `mode` fails the trust rule, if it does.
pub type TrustRule = fn(uid: u32, mode: u32, euid: u32) -> Option<String>;

/// Opens directory `path` by the walk of the module documentation, making missing
/// directories with `make`'s mode if given; `what` names it in errors. Returns its descriptor
/// and its canonical path.
pub fn open(
    path: &Path,
    what: &str,
    euid: u32,
    rule: TrustRule,
    make: Option<u32>,
) -> Result<(OwnedFd, PathBuf), String> {
    let shown = path.display();
    let fail = |at: &Path, why: String| match at == path {
        true => format!("{what} {shown}: {why}"),
        false => format!("{what} {shown}: {}: {why}", at.display()),
    };
    let absolute = match path.is_absolute() {
        true => path.to_path_buf(),
        false => std::env::current_dir()
            .map_err(|e| format!("{what} {shown}: the current directory: {e}"))?
            .join(path),
    };
    let mut todo: VecDeque<OsString> = names(&absolute);
    let root = nix::fcntl::open("/", dir_flags(), Mode::empty()).map_err(|e| fail(Path::new("/"), e.to_string()))?;
    let mut stack: Vec<(OwnedFd, PathBuf)> = vec![(root, PathBuf::from("/"))];
    check(&stack[0], todo.is_empty(), what, &shown, euid, rule)?;
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let (dir, at) = stack.last().expect("the root is never popped");
        let here = at.join(&name);
        let mut made = None;
        match fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if kind(st.st_mode) == SFlag::S_IFLNK => {
                if st.st_uid != 0 && st.st_uid != euid {
                    return Err(fail(
                        &here,
                        format!(
                            "a symlink owned by uid {}, not by root or the daemon's uid {euid}: not followed",
                            st.st_uid
                        ),
                    ));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(fail(&here, format!("more than {MAX_LINKS} symlinks")));
                }
                let target = PathBuf::from(readlinkat(dir, name.as_os_str()).map_err(|e| fail(&here, e.to_string()))?);
                if target.is_absolute() {
                    stack.truncate(1);
                }
                for n in names(&target).into_iter().rev() {
                    todo.push_front(n);
                }
                continue;
            }
            Ok(_) => {}
            Err(Errno::ENOENT) if make.is_some() => {
                match mkdirat(dir, name.as_os_str(), Mode::from_bits_truncate(0o700)) {
                    Ok(()) => made = make,
                    Err(Errno::EEXIST) => {}
                    Err(e) => return Err(fail(&here, format!("cannot make it: {e}"))),
                }
            }
            Err(e) => return Err(fail(&here, std::io::Error::from(e).to_string())),
        }
        let fd = openat(dir, name.as_os_str(), dir_flags(), Mode::empty()).map_err(|e| {
            let why = match e {
                Errno::ELOOP => "a symlink appeared here during the walk: not followed".to_string(),
                e => std::io::Error::from(e).to_string(),
            };
            fail(&here, why)
        })?;
        // A directory this walk made (0700 until now): the mode asked, exactly.
        if let Some(mode) = made {
            fchmod(&fd, Mode::from_bits_truncate(mode)).map_err(|e| fail(&here, e.to_string()))?;
        }
        stack.push((fd, here));
        check(
            stack.last().expect("just pushed"),
            todo.is_empty(),
            what,
            &shown,
            euid,
            rule,
        )?;
    }
    Ok(stack.pop().expect("the root at least"))
}

/// The trust rule on an opened directory: the final one is named, any other is an ancestor.
fn check(
    (fd, at): &(OwnedFd, PathBuf),
    last: bool,
    what: &str,
    shown: &std::path::Display,
    euid: u32,
    rule: TrustRule,
) -> Result<(), String> {
    let st = fstat(fd).map_err(|e| format!("{what} {shown}: {}: {e}", at.display()))?;
    match rule(st.st_uid, st.st_mode, euid) {
        None => Ok(()),
        Some(why) if last => Err(format!("{what} {}: {why}", at.display())),
        Some(why) => Err(format!("{what} {shown}: its ancestor {} is {why}", at.display())),
    }
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn kind(mode: u32) -> SFlag {
    SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits())
}

/// A path's names in order, `.` left out, `..` kept (it is walked on descriptors).
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}
