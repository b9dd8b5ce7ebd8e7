//! The memory an AF_XDP socket shares with the kernel: the UMEM that holds frames, and the
//! four single-producer, single-consumer rings that pass frame addresses back and forth.
//!
//! Model. Each ring is an array of `size` entries (a power of two) with a producer and a
//! consumer index that only ever grow (wrapping at 2^32); an entry's slot is its index masked
//! by `size - 1`. Exactly one side writes each index: we produce on the fill and transmit
//! rings and consume on the receive and completion rings, the kernel the other way round. The
//! producer writes entries, then publishes its index with a release store; the consumer reads
//! the index with an acquire load, then reads entries, then publishes its own index with a
//! release store, after which the producer may overwrite them. Each side keeps its own index
//! locally and caches the other's, refreshing the cache only when it seems to run out.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// A mapping, unmapped on drop.
pub struct Mmap {
    ptr: *mut u8,
    len: usize,
}

impl Mmap {
    /// Anonymous memory of `len` bytes, populated up front (the UMEM).
    pub fn anonymous(len: usize) -> io::Result<Mmap> {
        Self::map(len, -1, 0, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE)
    }

    /// `len` bytes of the socket `fd` at page offset `pgoff` (a ring).
    fn socket(fd: RawFd, len: usize, pgoff: u64) -> io::Result<Mmap> {
        Self::map(len, fd, pgoff as libc::off_t, libc::MAP_SHARED | libc::MAP_POPULATE)
    }

    fn map(len: usize, fd: RawFd, off: libc::off_t, flags: libc::c_int) -> io::Result<Mmap> {
        // SAFETY: a fresh mapping chosen by the kernel; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                off,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap { ptr: ptr.cast(), len })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are exactly the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One ring of `T` entries (`u64` frame addresses, or `xdp_desc`) mapped from the socket.
pub struct Ring<T> {
    _map: Mmap,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
    mask: u32,
    /// Our index (the one this side writes).
    local: u32,
    /// The other side's index, as last read.
    cached: u32,
}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at `pgoff`, laid out as `off` (from XDP_MMAP_OFFSETS)
    /// says; `produce` tells which index is ours.
    pub fn map(fd: RawFd, off: &libc::xdp_ring_offset, pgoff: u64, size: u32, produce: bool) -> io::Result<Self> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        let map = Mmap::socket(fd, len, pgoff)?;
        let at = |o: u64| {
            // SAFETY: the kernel's offsets lie within the mapping it sized for this ring.
            unsafe { map.as_ptr().add(o as usize) }
        };
        let (producer, consumer) = (
            at(off.producer).cast::<AtomicU32>(),
            at(off.consumer).cast::<AtomicU32>(),
        );
        let flags = at(off.flags).cast::<AtomicU32>();
        let entries = at(off.desc).cast::<T>();
        let mut ring = Ring {
            _map: map,
            producer,
            consumer,
            flags,
            entries,
            mask: size - 1,
            local: 0,
            cached: 0,
        };
        // SAFETY: the indices are aligned u32s inside the mapping, which lives as long as `ring`.
        unsafe {
            if produce {
                ring.local = (*producer).load(Ordering::Relaxed);
                ring.cached = (*consumer).load(Ordering::Acquire);
            } else {
                ring.local = (*consumer).load(Ordering::Relaxed);
                ring.cached = (*producer).load(Ordering::Acquire);
            }
        }
        Ok(ring)
    }

    fn size(&self) -> u32 {
        self.mask + 1
    }

    /// Whether the kernel asks to be woken (a system call) to make progress on this ring.
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: an aligned u32 inside the live mapping.
        unsafe { (*self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0 }
    }

    // --- our side produces (fill, transmit) ---

    /// Entries we may write now: refreshes the kernel's consumer index when the cache says full.
    pub fn free(&mut self) -> u32 {
        let free = self.size() - self.local.wrapping_sub(self.cached);
        if free > 0 {
            return free;
        }
        // SAFETY: an aligned u32 inside the live mapping.
        self.cached = unsafe { (*self.consumer).load(Ordering::Acquire) };
        self.size() - self.local.wrapping_sub(self.cached)
    }

    /// Writes entry `value` after those written so far (the caller checked [`Ring::free`]);
    /// the kernel sees it at the next [`Ring::publish`].
    pub fn push(&mut self, value: T) {
        debug_assert!(self.local.wrapping_sub(self.cached) < self.size());
        // SAFETY: the slot is inside the entry array, and not the kernel's to read until the
        // producer index passes it (the ring is not full: checked by the caller through `free`).
        unsafe { self.entries.add((self.local & self.mask) as usize).write(value) };
        self.local = self.local.wrapping_add(1);
    }

    /// Publishes every entry pushed so far.
    pub fn publish(&mut self) {
        // SAFETY: an aligned u32 inside the live mapping; release orders the entries before it.
        unsafe { (*self.producer).store(self.local, Ordering::Release) };
    }

    /// Entries published and not yet taken by the kernel.
    pub fn unconsumed(&self) -> u32 {
        // SAFETY: aligned u32s inside the live mapping; the producer index is ours, read back
        // as published.
        unsafe {
            let taken = (*self.consumer).load(Ordering::Acquire);
            (*self.producer).load(Ordering::Relaxed).wrapping_sub(taken)
        }
    }

    /// The last entry the kernel has taken.
    pub fn last_taken(&self) -> T {
        // SAFETY: an aligned u32 inside the live mapping, then a slot inside the entry array;
        // an entry the kernel has taken is left as written until we push over it.
        unsafe {
            let i = (*self.consumer).load(Ordering::Acquire).wrapping_sub(1);
            self.entries.add((i & self.mask) as usize).read()
        }
    }

    // --- our side consumes (receive, completion) ---

    /// Entries the kernel has produced that we have not consumed.
    pub fn available(&mut self) -> u32 {
        // SAFETY: an aligned u32 inside the live mapping; acquire orders the entries after it.
        self.cached = unsafe { (*self.producer).load(Ordering::Acquire) };
        self.cached.wrapping_sub(self.local)
    }

    /// The `i`-th entry not yet consumed (`i` < [`Ring::available`]).
    pub fn peek(&self, i: u32) -> T {
        debug_assert!(i < self.cached.wrapping_sub(self.local));
        // SAFETY: inside the entry array, and published by the kernel (acquired in `available`).
        unsafe {
            self.entries
                .add((self.local.wrapping_add(i) & self.mask) as usize)
                .read()
        }
    }

    /// Gives `n` consumed entries back to the kernel.
    pub fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // SAFETY: an aligned u32 inside the live mapping; release orders our reads before it.
        unsafe { (*self.consumer).store(self.local, Ordering::Release) };
    }
}
