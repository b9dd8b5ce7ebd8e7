//! Sleeping until there is work: one poll over every attached port's and uplink's socket and
//! the netlink socket, for at most 10 ms, or 1 ms while an uplink has frames its pacer or device
//! holds back. The poll set is rebuilt when an interface is attached or detached. A socket that
//! polls in error (its interface went down or away) is handed back to the loop, which reads the
//! error before polling again, so an error never makes the loop spin.

use super::{Datapath, Slot, MAX_WAIT_MS};
use crate::Backend;

impl Datapath {
    /// Sleeps until a frame, a link change, or the next timer (at most 10 ms); puts in `errored`
    /// every socket that reported an error (its interface went down or away), for the caller to
    /// deal with before it polls again.
    pub(super) fn wait(&mut self, errored: &mut Vec<Slot>) {
        if self.pollfds_stale {
            self.rebuild_pollfds();
        }
        let now = self.now();
        let mut deadline = self.switch.poll_at().min(self.next_resync);
        for u in &self.uplinks {
            if let Some(t) = u.pacer.ready_at() {
                deadline = deadline.min(t);
            }
        }
        let mut backlog = false;
        for (fd, slot) in self.pollfds.iter_mut().zip(&self.pollmap) {
            fd.revents = 0;
            if let Slot::Uplink(u) = *slot {
                let u = &self.uplinks[u];
                // A busy device: wake when it can take frames again.
                let busy = u.backend.as_ref().is_some_and(|b| b.tx_pending() > 0);
                fd.events = if busy {
                    libc::POLLIN | libc::POLLOUT
                } else {
                    libc::POLLIN
                };
                backlog |= busy || !u.pacer.may_send();
            }
        }
        let ms = if backlog {
            1
        } else {
            (deadline - now).as_millis().min(MAX_WAIT_MS as u128) as i32
        };
        let fds = &mut self.pollfds;
        // SAFETY: `fds` is a live array of pollfd of the length passed.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n > 0 {
            let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
            errored.extend(
                fds.iter()
                    .zip(&self.pollmap)
                    .filter(|(f, _)| f.revents & bad != 0)
                    .map(|(_, s)| *s),
            );
        }
    }

    /// The poll set: every attached port and uplink, and netlink.
    fn rebuild_pollfds(&mut self) {
        self.pollfds.clear();
        self.pollmap.clear();
        let ports = self
            .ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((p.backend.as_ref()?.raw_fd(), Slot::Port(i))));
        let uplinks = self
            .uplinks
            .iter()
            .enumerate()
            .filter_map(|(i, u)| Some((u.backend.as_ref()?.raw_fd(), Slot::Uplink(i))));
        for (fd, slot) in ports
            .chain(uplinks)
            .chain(std::iter::once((self.links.raw_fd(), Slot::Links)))
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
