//! bpf(2), called with one command's attribute struct: for the few commands Teamster makes
//! outside aya (the AF_XDP backend's program and map, [`crate::afxdp`]; the kernel path's look at
//! a pinned link, `teamster_kernel::pins`), each module saying why it does not use aya there.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// bpf(2) with `attr`, the attribute struct of `cmd`: its non-negative answer, or errno.
///
/// # Safety
///
/// `attr` must be a `repr(C)` struct laid out as the kernel's `union bpf_attr` member for `cmd`
/// (the kernel zero-extends it to its own size), and every address in it must be valid for what
/// the kernel reads or writes there during the call.
pub unsafe fn bpf<T>(cmd: u32, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: the caller vouches for the attribute; its size is passed with it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_long,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// [`bpf`] for a command that answers with a new descriptor, owned by the caller from then on.
///
/// # Safety
///
/// As [`bpf`]; and `cmd` must be one whose answer is a new descriptor (BPF_MAP_CREATE,
/// BPF_PROG_LOAD, BPF_LINK_CREATE, BPF_OBJ_GET and the like).
pub unsafe fn bpf_fd<T>(cmd: u32, attr: &mut T) -> io::Result<OwnedFd> {
    // SAFETY: as the caller vouches.
    let r = unsafe { bpf(cmd, attr) }?;
    // SAFETY: bpf(2) just returned this descriptor, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}
