//! A flag a poll can wait on: an eventfd, readable while set.
//!
//! The data plane's threads sleep in `ppoll` on descriptors; a flag is how something that is
//! not a socket wakes them. It is set by writing 1 and cleared by reading the count back (both
//! non-blocking), so setting it many times before it is cleared costs nothing more. The
//! doorbell between data-plane threads (`datapath::handoff`) and the fake platform's interfaces
//! ([`crate::fake`] under test) are flags.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An eventfd used as a level flag (see the module documentation).
#[derive(Debug)]
pub(crate) struct Flag(OwnedFd);

impl Flag {
    pub fn new() -> io::Result<Flag> {
        // SAFETY: eventfd takes no pointers; the descriptor it returns is owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nobody else owns.
        Ok(Flag(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor to poll for reading.
    pub fn raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes the descriptor readable.
    pub fn set(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a local u64 to our own non-blocking eventfd.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Makes it unreadable again.
    pub fn clear(&self) {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a local u64 from our own non-blocking eventfd.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }
}
