//! How data-plane threads hand frames to each other and wake each other up.
//!
//! Model. Between the switching worker and each port worker run two bounded single-producer,
//! single-consumer queues of frames (one each way), lock-free ([`crossbeam_queue::ArrayQueue`]:
//! a push or pop is a few atomic operations, and nobody ever waits for a lock held by a thread
//! that the scheduler has put to sleep). A queue that is full refuses the frame; the producer
//! drops it and counts it (`handoff_full`), so a stalled consumer costs frames, never memory.
//!
//! A thread with nothing to do sleeps in `ppoll` on its sockets and its [`Doorbell`], an
//! eventfd. The producer rings the bell only when the consumer has said it is going to sleep, so
//! a busy pair pays no system call per frame: the consumer arms the bell, then looks at its
//! queues once more before it sleeps; the producer pushes, then looks at the bell. Each side's
//! store is fenced before its load (`SeqCst`), so at least one of them sees the other: either
//! the consumer finds the frame, or the producer finds it asleep and wakes it.

use crate::flag::Flag;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{fence, AtomicBool, Ordering};

/// Wakes a thread sleeping in `ppoll`, at most one system call per sleep.
#[derive(Debug)]
pub(super) struct Doorbell {
    flag: Flag,
    asleep: AtomicBool,
}

impl Doorbell {
    pub fn new() -> io::Result<Doorbell> {
        Ok(Doorbell {
            flag: Flag::new()?,
            asleep: AtomicBool::new(false),
        })
    }

    /// The descriptor to poll for reading.
    pub fn raw_fd(&self) -> RawFd {
        self.flag.raw_fd()
    }

    /// The owner is about to sleep: from here on a producer rings. The owner must look at its
    /// queues once more after this and before it sleeps.
    pub fn arm(&self) {
        self.asleep.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// The owner is awake again: it empties the eventfd and producers stop ringing.
    pub fn disarm(&self) {
        self.asleep.store(false, Ordering::Relaxed);
        self.flag.clear();
    }

    /// Wakes the owner if it is asleep or about to be: call after pushing into its queue.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) && self.asleep.swap(false, Ordering::AcqRel) {
            self.flag.set();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_queue::ArrayQueue;

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    /// The bell makes its descriptor readable only while its owner is armed, and once.
    #[test]
    fn a_bell_rings_only_for_an_armed_owner() {
        let bell = Doorbell::new().unwrap();
        bell.ring();
        assert!(!readable(bell.raw_fd()), "awake owner: no system call, nothing to read");
        bell.arm();
        bell.ring();
        assert!(readable(bell.raw_fd()));
        bell.ring();
        bell.disarm();
        assert!(!readable(bell.raw_fd()), "disarm empties the eventfd");
    }

    /// A sleeper that armed its bell and found its queue empty is woken by any later push.
    #[test]
    fn no_wakeup_is_lost_between_threads() {
        use std::sync::Arc;
        let bell = Arc::new(Doorbell::new().unwrap());
        let queue = Arc::new(ArrayQueue::<u32>::new(64));
        const N: u32 = 20_000;
        let (b, q) = (bell.clone(), queue.clone());
        let producer = std::thread::spawn(move || {
            for i in 0..N {
                while q.push(i).is_err() {
                    std::thread::yield_now();
                }
                b.ring();
            }
        });
        let mut next = 0;
        while next < N {
            if let Some(v) = queue.pop() {
                assert_eq!(v, next, "order holds");
                next += 1;
                continue;
            }
            bell.arm();
            if queue.is_empty() {
                let mut p = libc::pollfd {
                    fd: bell.raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // A lost wakeup would stall here for the whole timeout, every time it happened.
                // SAFETY: one live pollfd.
                let n = unsafe { libc::poll(&mut p, 1, 5_000) };
                assert_eq!(n, 1, "woken by the producer, not by the timeout (at {next})");
            }
            bell.disarm();
        }
        producer.join().unwrap();
    }
}
