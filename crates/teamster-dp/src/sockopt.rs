//! Socket options and errors as `io::Result`s naming the interface, shared by the backends.
//!
//! libc's setsockopt/getsockopt take raw pointers and lengths; these wrappers take a
//! plain-data value, so each call site states only the option and what it is for, and every
//! error says which interface and which step failed.

use std::io;
use std::os::fd::RawFd;

/// A system call's result: its value, or the OS error prefixed with the interface and step.
pub fn check(ret: libc::c_int, what: &str, name: &str) -> io::Result<libc::c_int> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{name}: {what}: {e}")))
    } else {
        Ok(ret)
    }
}

/// setsockopt with a plain-old-data value.
pub fn set_opt<T>(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: &T, what: &str, name: &str) -> io::Result<()> {
    // SAFETY: `val` points to a live `T` of exactly the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    check(r, what, name).map(|_| ())
}

/// Reads and clears a socket's pending error (ENETDOWN after its interface went down or
/// away), which otherwise keeps it polling with POLLERR.
pub fn take_error(fd: RawFd) -> Option<io::Error> {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` is a c_int of the length passed, filled by the kernel.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        Some(io::Error::last_os_error())
    } else {
        (err != 0).then(|| io::Error::from_raw_os_error(err))
    }
}
