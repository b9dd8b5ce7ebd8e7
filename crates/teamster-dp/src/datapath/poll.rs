//! Sleeping until there is work: one poll over every attached port's and uplink's socket and
//! the netlink socket, until the next timer, to the nanosecond (`ppoll`), at most 10 ms, or
//! 1 ms while an uplink's device holds frames back. The timers: the switch's (MAC ageing, LBT,
//! ...), the link resync, each uplink pacer's next batch, and the next frame a port's limit
//! releases. A millisecond `poll` rounded a wait under 1 ms down to 0 and spun until it passed.
//! The poll set is rebuilt when an interface is attached or detached. A socket that polls in
//! error (its interface went down or away) is handed back to the loop, which reads the
//! error before polling again, so an error never makes the loop spin.
//!
//! Bounded busy polling. After a turn that received frames the loop polls without sleeping
//! (a `ppoll` with a zero timeout, repeated) for `busy_poll` (50 µs by default), and only then
//! sleeps. What follows a forwarded frame (the reply to a request, the ACK for a segment)
//! usually comes within tens of microseconds, and a sleeping thread takes from 50 µs to over a
//! millisecond to wake on a busy host: waking costs more than the wait. The price is CPU: at
//! most `busy_poll` of spinning per burst of frames, so a trickle of one frame every `busy_poll`
//! keeps one core busy; `busy_poll_us = 0` turns it off.
//!
//! Port workers hand this thread frames through queues, not sockets: it stops busy polling as
//! soon as one has, and before it sleeps it arms its doorbell (in the poll set) and looks at
//! their queues once more (see the `handoff` submodule).

use super::{Datapath, PortIo, Slot, MAX_WAIT_MS};
use crate::platform::{LinkSource, Platform};
use crate::Device;
use core::time::Duration;

impl<P: Platform> Datapath<P> {
    /// Sleeps until a frame, a link change, or the next timer (at most 10 ms); puts in `errored`
    /// every socket that reported an error (its interface went down or away), for the caller to
    /// deal with before it polls again.
    pub(super) fn wait(&mut self, errored: &mut Vec<Slot>) {
        if self.pollfds_stale {
            self.rebuild_pollfds();
        }
        let now = self.now();
        let mut deadline = self.switch.poll_at().min(self.next_resync);
        if self.ingress_waiting() {
            // Frames wait to be switched: poll (for errors and new frames) without sleeping.
            deadline = now;
        }
        for (i, u) in self.uplinks.iter().enumerate() {
            // Out of balance: wake when a batch may go. Otherwise a backlog held by a limit
            // (a port over its cap) is released by the scheduler's clock, not by the next
            // frame to arrive or the 10 ms cap, which would cost the port part of its limit.
            let next = if u.pacer.may_send() {
                self.ioc.next_eligible(i, now)
            } else {
                u.pacer.batch_ready_at()
            };
            if let Some(t) = next {
                deadline = deadline.min(t);
            }
        }
        let mut device_busy = false;
        for (fd, slot) in self.pollfds.iter_mut().zip(&self.pollmap) {
            fd.revents = 0;
            if let Slot::Uplink(u) = *slot {
                let u = &self.uplinks[u];
                // A busy device: wake when it can take frames again.
                let busy = u.backend.as_ref().is_some_and(|b| b.tx_pending() > 0);
                let pollout = busy && u.backend.as_ref().is_some_and(|b| b.pollout_means_room());
                fd.events = if pollout {
                    libc::POLLIN | libc::POLLOUT
                } else {
                    libc::POLLIN
                };
                device_busy |= busy;
            }
        }
        // A busy device also wakes the poll with POLLOUT where that means room (AF_PACKET); the
        // 1 ms cap is a backstop, and AF_XDP's retry.
        let cap = Duration::from_millis(if device_busy { 1 } else { MAX_WAIT_MS as u64 });
        let spin_until = self.busy_until.min(deadline);
        let mut n = 0;
        let mut t = now;
        // Bounded by the wall clock too, whatever the platform's clock does.
        let spinning = std::time::Instant::now();
        while n == 0 && t < spin_until && spinning.elapsed() < self.busy_poll {
            if self.handed_waiting() {
                return;
            }
            n = self.poll_for(Duration::ZERO);
            t = self.now();
        }
        if n == 0 {
            self.bell.arm();
            if !self.handed_waiting() {
                n = self.poll_for((deadline - t).min(cap));
            }
            self.bell.disarm();
        }
        if n > 0 {
            let fds = &self.pollfds;
            let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
            errored.extend(
                fds.iter()
                    .zip(&self.pollmap)
                    .filter(|(f, _)| f.revents & bad != 0)
                    .map(|(_, s)| *s),
            );
        }
    }

    /// One `ppoll` over the poll set for at most `wait`; returns how many descriptors are ready.
    pub(super) fn poll_for(&mut self, wait: Duration) -> libc::c_int {
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        let fds = &mut self.pollfds;
        // SAFETY: `fds` is a live array of pollfd of the length passed; `ts` outlives the call
        // and a null signal mask leaves the mask unchanged.
        unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) }
    }

    /// The poll set: every attached port and uplink, and netlink.
    fn rebuild_pollfds(&mut self) {
        self.pollfds.clear();
        self.pollmap.clear();
        let ports = self.ports.iter().enumerate().filter_map(|(i, p)| match &p.io {
            PortIo::Here(link) => Some((link.raw_fd(), Slot::Port(i))),
            _ => None,
        });
        let uplinks = self
            .uplinks
            .iter()
            .enumerate()
            .filter_map(|(i, u)| Some((u.backend.as_ref()?.raw_fd(), Slot::Uplink(i))));
        let queues =
            (self.uplinks.iter().enumerate()).flat_map(|(i, u)| u.rx.local_fds().map(move |fd| (fd, Slot::Queue(i))));
        for (fd, slot) in ports
            .chain(uplinks)
            .chain(queues)
            .chain(std::iter::once((self.links.raw_fd(), Slot::Links)))
            .chain(std::iter::once((self.bell.raw_fd(), Slot::Bell)))
        {
            self.pollfds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            self.pollmap.push(slot);
        }
        self.pollfds_stale = false;
    }
}
