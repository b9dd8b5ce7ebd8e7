//! Frame buffers, reused: the data plane's answer to a heap allocation per frame.
//!
//! Model. Every frame the switch forwards is received into a buffer from this pool (a
//! super-frame straight from the kernel; a smaller frame copied into a small buffer, so it does
//! not pin 64 KiB while it waits), and that buffer travels (through an uplink's scheduler, or
//! straight to a port's transmit batch) to the backend, which hands it back once the kernel has
//! taken the frame. Buffers come in two sizes, so a queue of small frames does not pin 64 KiB each: small
//! ([`SMALL`] bytes, a full-size frame with tags) and large (a 64 KiB super-frame). Each size
//! keeps at most [`KEPT`] free buffers; beyond that a returned buffer is freed, so a burst that
//! needed many buffers does not hold them for ever.
//!
//! With several data-plane threads, buffers travel between them (received by one, sent and
//! freed by another), so each thread keeps at most [`LOCAL`] free buffers per size and spills
//! the rest into a [`Spill`] shared by all (holding at most [`KEPT`]), where the thread that
//! runs short takes them back before it allocates.

use crossbeam_queue::ArrayQueue;
use std::sync::Arc;

/// A small buffer: a 1500-byte MTU frame with two VLAN tags, rounded up.
pub const SMALL: usize = 2048;
/// A large buffer: the largest super-frame a packet socket hands over, with two tags.
pub const LARGE: usize = 65_536 + 64;
/// Free buffers kept per size in the shared spill (small: 8 MiB, large: 32 MiB at most).
pub const KEPT: [usize; 2] = [4096, 512];
/// Free buffers kept per size by each thread before it spills.
pub const LOCAL: [usize; 2] = [1024, 128];

/// Free frame buffers shared by every data-plane thread, of the two sizes the pool keeps.
#[derive(Debug)]
pub struct Spill {
    free: [ArrayQueue<Vec<u8>>; 2],
}

impl Spill {
    /// Room for `kept[class]` buffers of each size.
    pub fn new(kept: [usize; 2]) -> Spill {
        Spill {
            free: [ArrayQueue::new(kept[0]), ArrayQueue::new(kept[1])],
        }
    }

    /// A free buffer of size class `class`, if there is one.
    pub fn take(&self, class: usize) -> Option<Vec<u8>> {
        self.free[class].pop()
    }

    /// Keeps `b` for any thread, or frees it when enough are kept.
    pub fn give(&self, class: usize, b: Vec<u8>) {
        let _ = self.free[class].push(b);
    }

    /// Free buffers of size class `class`.
    #[cfg(test)]
    pub fn len(&self, class: usize) -> usize {
        self.free[class].len()
    }
}

/// Free frame buffers of two sizes, one thread's.
#[derive(Debug)]
pub struct FramePool {
    free: [Vec<Vec<u8>>; 2],
    spill: Arc<Spill>,
    /// Buffers allocated because none was free, since start.
    pub allocated: u64,
}

impl Default for FramePool {
    /// A pool with a spill of its own (one thread).
    fn default() -> FramePool {
        FramePool::sharing(Arc::new(Spill::new(KEPT)))
    }
}

impl FramePool {
    /// A thread's pool spilling into `spill`.
    pub fn sharing(spill: Arc<Spill>) -> FramePool {
        FramePool {
            free: [Vec::new(), Vec::new()],
            spill,
            allocated: 0,
        }
    }

    /// An empty buffer that holds `len` bytes without growing: from the pool where one is free.
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        let class = usize::from(len > SMALL);
        if let Some(mut b) = self.free[class].pop().or_else(|| self.spill.take(class)) {
            b.clear();
            if b.capacity() >= len {
                return b;
            }
        }
        self.allocated += 1;
        Vec::with_capacity(if len > SMALL { len.max(LARGE) } else { SMALL })
    }

    /// Takes back a buffer whose frame was sent (or dropped), unless enough are free already.
    pub fn give(&mut self, b: Vec<u8>) {
        let class = usize::from(b.capacity() > SMALL);
        if b.capacity() < SMALL {
            return;
        }
        if self.free[class].len() < LOCAL[class] {
            self.free[class].push(b);
        } else {
            self.spill.give(class, b);
        }
    }

    /// Free buffers of each size, kept here and in the spill.
    #[cfg(test)]
    pub fn free(&self) -> [usize; 2] {
        [
            self.free[0].len() + self.spill.len(0),
            self.free[1].len() + self.spill.len(1),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spill_is_bounded() {
        let spill = Spill::new([2, 1]);
        for _ in 0..5 {
            spill.give(0, Vec::with_capacity(10));
        }
        assert!(spill.take(0).is_some() && spill.take(0).is_some());
        assert!(spill.take(0).is_none(), "the third was freed");
        assert!(spill.take(1).is_none());
    }

    #[test]
    fn buffers_are_reused_by_size_and_the_pool_is_bounded() {
        let mut pool = FramePool::default();
        let small = pool.take(60);
        let large = pool.take(40_000);
        assert!(small.capacity() >= SMALL && small.capacity() < LARGE);
        assert!(large.capacity() >= LARGE);
        assert_eq!(pool.allocated, 2);
        let (sp, lp) = (small.as_ptr(), large.as_ptr());
        pool.give(small);
        pool.give(large);
        assert_eq!(pool.free(), [1, 1]);
        // The same buffers come back, empty, for frames of their size.
        let again = pool.take(1514);
        assert_eq!((again.as_ptr(), again.len()), (sp, 0));
        let big = pool.take(65_000);
        assert_eq!(big.as_ptr(), lp);
        assert_eq!(pool.allocated, 2, "no allocation while buffers are free");
        // Bounded: past LOCAL + KEPT free buffers of a size, returned ones are freed.
        for _ in 0..LOCAL[0] + KEPT[0] + 10 {
            pool.give(Vec::with_capacity(SMALL));
        }
        assert_eq!(pool.free()[0], LOCAL[0] + KEPT[0]);
        // A buffer too small for any class (not ours) is not kept.
        pool.give(Vec::with_capacity(16));
        assert_eq!(pool.free()[0], LOCAL[0] + KEPT[0]);
    }

    /// A buffer freed by one thread past its local stock serves another thread's next frame.
    #[test]
    fn threads_share_what_they_do_not_keep() {
        let spill = Arc::new(Spill::new(KEPT));
        let (mut a, mut b) = (FramePool::sharing(spill.clone()), FramePool::sharing(spill));
        let bufs: Vec<_> = (0..LOCAL[0] + 1).map(|_| a.take(100)).collect();
        let last = bufs.last().unwrap().as_ptr();
        for buf in bufs {
            a.give(buf);
        }
        let got = b.take(100);
        assert_eq!(got.as_ptr(), last, "the spilled buffer");
        assert_eq!(b.allocated, 0);
    }
}
