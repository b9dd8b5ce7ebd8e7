//! Interfaces that come and go, and link state that cannot be lost.
//!
//! Model. A port or uplink is *attached* while its backend (an AF_PACKET or AF_XDP socket, as
//! its configuration chooses) is open on the interface its configuration names, bound to that interface's index; otherwise it is *detached*. Three
//! things tell the loop that an interface changed, and each one alone is enough:
//! - netlink: RTM_DELLINK (or a rename) of an attached index detaches it; RTM_NEWLINK of a name
//!   we wait for, or of a name we hold under another index, (re)attaches it; carrier and MTU
//!   changes of attached uplinks are applied at once;
//! - the socket: the kernel marks a packet socket with an error when its interface goes down or
//!   away, and poll reports POLLERR until the error is read. The loop reads it and checks the
//!   name still has the socket's index; if not (or nothing explains the error), the socket is
//!   closed and a new one opened. Reading the error is what keeps the loop from spinning;
//! - re-reading: after a netlink overrun every port and uplink is checked; and every second the
//!   uplinks' carrier is re-read from sysfs and missing interfaces are looked for, so a lost
//!   message never leaves a dead uplink in use or a returned tap unattached.
//!
//! A detached uplink is out of use (the team fails its ports over) and what its scheduler holds
//! is dropped as `detached`; frames for a detached port are dropped as `detached`. A detached
//! port owns no MAC: the switch installs its MAC-table entry when it attaches (unless a host
//! outside uses the address: see `teamster_core::switch::claims`) and forgets it and everything
//! learned behind the port when it detaches. Each attach and detach is an `attach` event; a
//! failing re-attach is logged once per distinct error.

use super::port_worker::Command;
use super::{Datapath, Instant, PortIo, Slot};
use crate::backend::BackendChoice;
use crate::netlink::LinkMsg;
use crate::platform::{Opened, Platform};
use crate::Device;
use std::io;
use teamster_core::teaming::UplinkId;
use teamster_core::units::Bandwidth;

/// Opens an uplink's interface: its device, MTU and whether it can carry traffic now.
pub(super) fn open_uplink<P: Platform>(
    platform: &P,
    interface: &str,
    choice: BackendChoice,
) -> io::Result<(Opened<P::Device>, usize, bool)> {
    let device = platform.open(interface, choice)?;
    let mtu = platform.mtu(interface)?;
    let up = platform.link_up(interface)?;
    Ok((device, mtu, up))
}

/// Opens a port's interface: its device and MTU.
fn open_port<P: Platform>(
    platform: &P,
    interface: &str,
    choice: BackendChoice,
) -> io::Result<(Opened<P::Device>, usize)> {
    let device = platform.open(interface, choice)?;
    Ok((device, platform.mtu(interface)?))
}

/// What to log about the device `who` got on `interface`: which AF_XDP modes, or why `auto`
/// fell back; nothing for plain AF_PACKET.
pub(super) fn backend_note<D: Device>(who: &str, interface: &str, opened: &Opened<D>) -> Option<String> {
    match &opened.note {
        Some(note) => Some(format!("{who}: {note}")),
        None if opened.link.noteworthy() => Some(format!("{who}: {interface} on {}", opened.link.describe())),
        None => None,
    }
}

/// Records a failed attach of `who` in `last`, and says what to log: nothing if the interface
/// is simply not there (yet) or the same error was already logged, so a retry every second
/// does not flood the event log.
fn failure_to_log(last: &mut Option<String>, who: &str, e: &io::Error) -> Option<String> {
    let text = e.to_string();
    let log = e.kind() != io::ErrorKind::NotFound && last.as_deref() != Some(&text);
    let what = log.then(|| format!("{who}: cannot attach: {text}"));
    *last = Some(text);
    what
}

impl<P: Platform> Datapath<P> {
    /// Attaches port `i` at start: a missing interface leaves it detached with a warning; any
    /// other failure is an error naming the port and interface.
    pub(super) fn attach_port_at_start(&mut self, i: usize, now: Instant) -> Result<(), String> {
        let p = &self.ports[i].plan;
        match open_port(&self.platform, &p.interface, p.backend) {
            Ok((opened, mtu)) => {
                let note = backend_note(&format!("port {}", p.name), &p.interface, &opened);
                self.ports[i].mtu = mtu;
                self.place_port(i, opened.link);
                if let Some(note) = note {
                    self.event(now, "attach", note);
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let what = format!(
                    "warning: port {}: interface {} is missing; the port starts detached and attaches when it appears",
                    p.name, p.interface
                );
                // Detached, it owns no MAC until its interface appears.
                self.switch.detach_port(p.id);
                self.ports[i].attach_error = Some(e.to_string());
                self.event(now, "attach", what);
                Ok(())
            }
            Err(e) => Err(format!("port {}: {e}", p.name)),
        }
    }

    /// Tries to attach detached port `i`; a failure other than "not there" is logged once.
    pub(super) fn attach_port(&mut self, i: usize, now: Instant) {
        let (name, interface) = (self.ports[i].plan.name.clone(), self.ports[i].plan.interface.clone());
        match open_port(&self.platform, &interface, self.ports[i].plan.backend) {
            Ok((opened, mtu)) => {
                let backend = opened.link;
                let what = format!(
                    "port {name}: attached to {interface} (index {}, {}){}",
                    backend.ifindex(),
                    backend.describe(),
                    opened.note.map(|n| format!("; {n}")).unwrap_or_default()
                );
                self.ports[i].mtu = mtu;
                self.ports[i].attach_error = None;
                self.place_port(i, backend);
                self.event(now, "attach", what);
                // Its MAC is its own from now, unless a host outside uses it.
                self.switch.attach_port(self.ports[i].plan.id, now);
            }
            Err(e) => {
                if let Some(what) = failure_to_log(&mut self.ports[i].attach_error, &format!("port {name}"), &e) {
                    self.event(now, "attach", what);
                }
            }
        }
    }

    /// Detaches port `i` (its interface went away): the socket is closed, what it still held to
    /// send is counted as `detached`.
    pub(super) fn detach_port(&mut self, i: usize, why: &str, now: Instant) {
        match std::mem::replace(&mut self.ports[i].io, PortIo::Detached) {
            PortIo::Detached => return,
            PortIo::Here(mut backend) => {
                let sent = backend.take_sent();
                let port = &mut self.ports[i];
                self.switch.count_sent(
                    teamster_core::switch::Egress::Port(port.plan.id),
                    sent.packets,
                    sent.bytes,
                );
                port.extra.detached += backend.tx_pending() as u64;
                self.close(backend);
            }
            // The worker counts what the socket sent and held in the port's tally.
            PortIo::Away { worker, .. } => {
                self.workers[worker].command(Command::Detach { port: i });
                let p = &mut self.ports[i];
                p.extra.detached += p.held.len() as u64;
                for frame in p.held.drain(..) {
                    self.pool.give(frame.into_bytes());
                }
            }
        }
        let port = &mut self.ports[i];
        port.attach_error = None;
        self.pollfds_stale = true;
        // A port whose interface is gone owns no MAC.
        self.switch.detach_port(port.plan.id);
        let what = format!("port {}: detached from {} ({why})", port.plan.name, port.plan.interface);
        self.event(now, "attach", what);
    }

    /// Gives port `i` its newly opened socket: to the port worker whose share it is, if there
    /// are any (see [`super::port_worker`]), else to this thread.
    fn place_port(&mut self, i: usize, link: P::Device) {
        self.pollfds_stale = true;
        match self.ports[i].home.or(self.port_worker_of(i)) {
            Some(worker) => self.give(i, worker, Box::new(link)),
            None => self.ports[i].io = PortIo::Here(link),
        }
    }

    /// Tries to attach detached uplink `u`, reading its carrier; a failure other than "not
    /// there" is logged once.
    pub(super) fn attach_uplink(&mut self, u: usize, now: Instant) {
        let (name, interface) = (
            self.uplinks[u].plan.name.clone(),
            self.uplinks[u].plan.interface.clone(),
        );
        match open_uplink(&self.platform, &interface, self.uplinks[u].plan.backend) {
            Ok((opened, mtu, up)) => {
                let backend = opened.link;
                let what = format!(
                    "uplink {name}: attached to {interface} (index {}, {}){}",
                    backend.ifindex(),
                    backend.describe(),
                    opened.note.map(|n| format!("; {n}")).unwrap_or_default()
                );
                self.uplinks[u].backend = Some(backend);
                self.uplinks[u].fanout = None;
                self.uplinks[u].mtu = mtu;
                self.switch
                    .set_uplink_mac(UplinkId(u), self.platform.mac(&interface).ok());
                self.uplinks[u].attach_error = None;
                self.pollfds_stale = true;
                self.event(now, "attach", what);
                self.attach_queues(u, now);
                self.set_carrier(u, up, now);
            }
            Err(e) => {
                let who = format!("uplink {name}");
                if let Some(what) = failure_to_log(&mut self.uplinks[u].attach_error, &who, &e) {
                    self.event(now, "attach", what);
                }
            }
        }
    }

    /// Detaches uplink `u` (its interface went away): out of use until it returns.
    pub(super) fn detach_uplink(&mut self, u: usize, why: &str, now: Instant) {
        self.detach_queues(u);
        let Some(mut backend) = self.uplinks[u].backend.take() else {
            return;
        };
        let sent = backend.take_sent();
        self.switch.count_sent(
            teamster_core::switch::Egress::Uplink(UplinkId(u)),
            sent.packets,
            sent.bytes,
        );
        self.uplinks[u].extra.detached += backend.tx_pending() as u64;
        self.close(backend);
        let up = &mut self.uplinks[u];
        up.attach_error = None;
        self.pollfds_stale = true;
        let what = format!("uplink {}: detached from {} ({why})", up.plan.name, up.plan.interface);
        self.event(now, "attach", what);
        self.set_carrier(u, false, now);
    }

    /// Uplink `u`'s link now runs at `speed`: if that is not its capacity, the capacity becomes
    /// `speed` for the pacer, the team (utilisation, LBT) and admission control, and the change
    /// is a `link` event; reservations that no longer fit are said in the event (the speed is a
    /// fact, so it applies all the same, and NetIOC shares what there is in proportion to them).
    pub fn set_uplink_speed(&mut self, u: usize, speed: Bandwidth, now: Instant) {
        let old = self.uplinks[u].plan.capacity;
        if speed == old || speed.bps() == 0 {
            return;
        }
        self.uplinks[u].plan.capacity = speed;
        self.uplinks[u].pacer.set_rate(speed.bps_f64(), now);
        let _ = self.switch.team_mut().set_capacity(UplinkId(u), speed);
        let fit = match self.ioc.set_capacity(u, speed) {
            Ok(()) => String::new(),
            Err(e) => format!("; reservations no longer fit: {e}"),
        };
        let what = format!("{} speed {old} -> {speed}{fit}", self.uplinks[u].plan.name);
        self.event(now, "link", what);
    }

    /// Records uplink `u`'s carrier; a change is a `link` event and reaches the team at once.
    pub(super) fn set_carrier(&mut self, u: usize, up: bool, now: Instant) {
        if self.uplinks[u].carrier == up {
            return;
        }
        self.uplinks[u].carrier = up;
        let what = format!(
            "{} carrier {}",
            self.uplinks[u].plan.name,
            if up { "up" } else { "down" }
        );
        self.event(now, "link", what);
        self.refresh_link(u, now);
    }

    /// Deals with a socket poll reported in error: reads (and so clears) the error, and if the
    /// name no longer has the socket's index, or nothing explains the error, replaces the socket.
    pub(super) fn socket_error(&mut self, slot: Slot, now: Instant) {
        match slot {
            Slot::Port(i) => {
                let PortIo::Here(b) = &self.ports[i].io else {
                    return;
                };
                let err = b.take_error();
                if err.is_none() || !self.platform.is_index(&self.ports[i].plan.interface, b.ifindex()) {
                    self.detach_port(i, "interface gone", now);
                    self.attach_port(i, now);
                }
            }
            Slot::Uplink(u) => {
                let Some(b) = self.uplinks[u].backend.as_ref() else {
                    return;
                };
                let err = b.take_error();
                if err.is_none() || !self.platform.is_index(&self.uplinks[u].plan.interface, b.ifindex()) {
                    self.detach_uplink(u, "interface gone", now);
                    self.attach_uplink(u, now);
                }
            }
            Slot::Queue(u) => {
                if self.uplinks[u]
                    .rx
                    .local_error(&self.uplinks[u].plan.interface, &self.platform)
                {
                    self.detach_uplink(u, "a receive queue's socket failed", now);
                    self.attach_uplink(u, now);
                }
            }
            Slot::Links | Slot::Bell => {}
        }
    }

    /// Applies one netlink link message.
    pub(super) fn link_msg(&mut self, msg: &LinkMsg, now: Instant) {
        self.note_link(msg);
        let renamed = |iface: &str| msg.name.as_deref().is_some_and(|n| n != iface);
        for u in 0..self.uplinks.len() {
            let up = &self.uplinks[u];
            let ours = up.backend.as_ref().is_some_and(|b| b.ifindex() == msg.ifindex);
            if ours && (msg.deleted || renamed(&up.plan.interface)) {
                self.detach_uplink(
                    u,
                    if msg.deleted {
                        "interface deleted"
                    } else {
                        "interface renamed"
                    },
                    now,
                );
            } else if ours {
                if let Some(mtu) = msg.mtu {
                    self.uplinks[u].mtu = mtu as usize;
                }
                self.set_carrier(u, msg.up, now);
                continue;
            }
            if !msg.deleted && msg.name.as_deref() == Some(self.uplinks[u].plan.interface.as_str()) {
                // The name is back, or a new interface took it: (re)attach to it.
                self.detach_uplink(u, "interface replaced", now);
                self.attach_uplink(u, now);
            }
        }
        for i in 0..self.ports.len() {
            let p = &self.ports[i];
            if !p.present() {
                continue;
            }
            let ours = p.ifindex() == Some(msg.ifindex);
            if ours && (msg.deleted || renamed(&p.plan.interface)) {
                self.detach_port(
                    i,
                    if msg.deleted {
                        "interface deleted"
                    } else {
                        "interface renamed"
                    },
                    now,
                );
            } else if ours {
                if let Some(mtu) = msg.mtu {
                    self.ports[i].mtu = mtu as usize;
                }
                continue;
            }
            if !msg.deleted && msg.name.as_deref() == Some(self.ports[i].plan.interface.as_str()) {
                self.detach_port(i, "interface replaced", now);
                self.attach_port(i, now);
            }
        }
    }

    /// Re-reads link state without netlink: every uplink's index and carrier, detached ports'
    /// interfaces, and with `all` (after an overrun) every attached port's index too.
    pub(super) fn resync(&mut self, now: Instant, all: bool) {
        self.next_resync = now + super::RESYNC_EVERY;
        for u in 0..self.uplinks.len() {
            let iface = self.uplinks[u].plan.interface.clone();
            match self.uplinks[u].backend.as_ref().map(|b| b.ifindex()) {
                Some(ifindex) if self.platform.is_index(&iface, ifindex) => {
                    let up = self.platform.link_up(&iface).unwrap_or(false);
                    self.set_carrier(u, up, now);
                    if up && self.uplinks[u].plan.follows_link_speed {
                        if let Some(mbps) = self.platform.speed_mbps(&iface) {
                            self.set_uplink_speed(u, Bandwidth::from_mbps(mbps), now);
                        }
                    }
                }
                Some(_) => {
                    self.detach_uplink(u, "interface gone", now);
                    self.attach_uplink(u, now);
                }
                None => self.attach_uplink(u, now),
            }
        }
        for i in 0..self.ports.len() {
            match self.ports[i].ifindex() {
                None if !self.ports[i].present() => {}
                None => self.attach_port(i, now),
                Some(ifindex) if all && !self.platform.is_index(&self.ports[i].plan.interface, ifindex) => {
                    self.detach_port(i, "interface gone", now);
                    self.attach_port(i, now);
                }
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::failure_to_log;
    use std::io;

    /// A missing interface is never logged; another error is logged once until it changes.
    #[test]
    fn attach_failures_are_logged_once_each() {
        let mut last = None;
        let missing = io::Error::from(io::ErrorKind::NotFound);
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(failure_to_log(&mut last, "port vm1", &missing), None);
        let first = failure_to_log(&mut last, "port vm1", &denied).unwrap();
        assert!(first.starts_with("port vm1: cannot attach: "), "{first}");
        assert_eq!(failure_to_log(&mut last, "port vm1", &denied), None);
        assert_eq!(failure_to_log(&mut last, "port vm1", &missing), None);
        assert!(
            failure_to_log(&mut last, "port vm1", &denied).is_some(),
            "a new error after a change"
        );
    }
}
