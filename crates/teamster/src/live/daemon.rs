//! The poll loop of the live switch; see the [parent module](super).

use super::config::SwitchPlan;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use teamster_core::ioc::{NodeId, Scheduler, SharedLimits};
use teamster_core::switch::{Counters, DropReason, Egress, Ingress, Output, Switch};
use teamster_core::teaming::{Effect, LinkState, PortId, UplinkId};
use teamster_core::Instant;
use teamster_dp::afpacket::AfPacket;
use teamster_dp::netlink::LinkWatch;
use teamster_dp::pacer::Pacer;
use teamster_dp::Backend;

/// Frames queued per port in an uplink's scheduler before tail drop.
const LEAF_QUEUE: usize = 1024;
/// The longest the loop sleeps, so timers and signals are seen promptly.
const MAX_WAIT_MS: i32 = 10;

struct Port {
    id: PortId,
    backend: AfPacket,
    leaf: NodeId,
    mtu: usize,
    oversize_drops: u64,
    ring_drops: u64,
    tx_errors: u64,
}

struct Uplink {
    backend: AfPacket,
    ifindex: i32,
    mtu: usize,
    oversize_drops: u64,
    ring_drops: u64,
    sched: Scheduler<Vec<u8>>,
    pacer: Pacer,
    queue_drops: u64,
    tx_errors: u64,
}

/// A running switch.
pub struct Daemon {
    switch: Switch,
    ports: Vec<Port>,
    index: HashMap<PortId, usize>,
    uplinks: Vec<Uplink>,
    names: Vec<String>,
    shared: SharedLimits,
    links: LinkWatch,
    started: std::time::Instant,
    moves: Vec<Value>,
    status_file: Option<PathBuf>,
    /// Every descriptor the loop waits on (ports, uplinks, netlink), built once at attach.
    pollfds: Vec<libc::pollfd>,
}

/// Lets one uplink's scheduler send what its pacer allows at `now`, a batch at a time, and
/// stops while the device is busy: frames then wait in the scheduler, where NetIOC decides whose
/// are dropped if the wait grows, rather than in the kernel's FIFO.
fn pace_one(u: &mut Uplink, shared: &mut SharedLimits, now: Instant) {
    u.pacer.refill(now);
    loop {
        let mut batch = 0;
        while batch < AfPacket::TX_BATCH && u.pacer.may_send() {
            let Some((_, len, frame)) = u.sched.dequeue(now, shared) else {
                break;
            };
            u.backend.send_owned(frame);
            u.pacer.charge(len as usize);
            batch += 1;
        }
        u.tx_errors += u.backend.flush() as u64;
        if batch < AfPacket::TX_BATCH || u.backend.tx_pending() > 0 {
            return;
        }
    }
}

/// An interface's MTU (1500 if sysfs does not say).
fn mtu_of(iface: &str) -> usize {
    sysfs(iface, "mtu").and_then(|m| m.parse().ok()).unwrap_or(1500)
}

/// Fits a frame to an interface's MTU and hands each resulting frame to `out`: the frame as is,
/// or its pieces when it is a TCP super-frame a stack handed over for offload. Returns false
/// (handing over nothing) if it is too large and cannot be split.
fn fit(frame: Vec<u8>, mtu: usize, out: &mut dyn FnMut(Vec<u8>)) -> bool {
    if frame.len() <= mtu + 14 {
        out(frame);
        return true;
    }
    match teamster_core::offload::segment_tcp(&frame, mtu) {
        Some(pieces) => pieces.into_iter().for_each(out),
        // Up to two VLAN tags may sit on top of a packet that fits.
        None if frame.len() <= mtu + 22 => out(frame),
        None => return false,
    }
    true
}

fn sysfs(iface: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/sys/class/net").join(iface).join(file))
        .ok()
        .map(|s| s.trim().to_string())
}

impl Daemon {
    /// Attaches to every interface of `plan`. On error, whatever was opened is closed again.
    pub fn attach(plan: SwitchPlan, status_file: Option<PathBuf>) -> Result<Daemon, String> {
        let started = std::time::Instant::now();
        let now = Instant::ZERO;
        // Subscribe before reading carriers, so a change in between is not missed.
        let links = LinkWatch::open().map_err(|e| format!("netlink link watch: {e}"))?;
        let mut switch = Switch::new(plan.team, plan.mac_ageing);
        let mut ports = Vec::new();
        for (id, iface, leaf) in plan.ports {
            let backend = AfPacket::open(&iface).map_err(|e| e.to_string())?;
            let mtu = mtu_of(&iface);
            ports.push(Port {
                id,
                backend,
                leaf,
                mtu,
                oversize_drops: 0,
                ring_drops: 0,
                tx_errors: 0,
            });
        }
        let mut uplinks = Vec::new();
        let mut names = Vec::new();
        for (i, (iface, capacity)) in plan.uplinks.iter().enumerate() {
            let backend = AfPacket::open(iface).map_err(|e| e.to_string())?;
            let ifindex = sysfs(iface, "ifindex").and_then(|s| s.parse().ok()).unwrap_or(-1);
            if sysfs(iface, "carrier").as_deref() != Some("1") {
                let _ = switch.team_mut().set_link(UplinkId(i), LinkState::Down, now);
            }
            uplinks.push(Uplink {
                backend,
                ifindex,
                mtu: mtu_of(iface),
                oversize_drops: 0,
                ring_drops: 0,
                sched: Scheduler::new(&plan.tree, &[]),
                pacer: Pacer::new(capacity.bps_f64(), now),
                queue_drops: 0,
                tx_errors: 0,
            });
            names.push(iface.clone());
        }
        let index = ports.iter().enumerate().map(|(i, p)| (p.id, i)).collect();
        let pollfds = ports
            .iter()
            .map(|p| p.backend.raw_fd())
            .chain(uplinks.iter().map(|u| u.backend.raw_fd()))
            .chain(std::iter::once(links.raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        Ok(Daemon {
            pollfds,
            switch,
            ports,
            index,
            uplinks,
            names,
            shared: SharedLimits::default(),
            links,
            started,
            moves: Vec::new(),
            status_file,
        })
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.started.elapsed().as_nanos() as u64)
    }

    /// Runs until `stop` is set.
    pub fn run(&mut self, stop: &Arc<AtomicBool>) {
        let mut next_status = Instant::ZERO;
        let mut pending: Vec<(Option<PortId>, Output)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            self.wait();
            let now = self.now();
            for change in self.links.drain() {
                if let Some(u) = self.uplinks.iter().position(|u| u.ifindex == change.ifindex) {
                    let state = if change.up { LinkState::Up } else { LinkState::Down };
                    if self.switch.team().link_state(UplinkId(u)) != Some(state) {
                        eprintln!(
                            "{:>9.3} s  link {} {}",
                            now.as_secs_f64(),
                            self.names[u],
                            if change.up { "up" } else { "down" }
                        );
                        let _ = self.switch.team_mut().set_link(UplinkId(u), state, now);
                    }
                }
            }
            for p in 0..self.ports.len() {
                let id = self.ports[p].id;
                let switch = &mut self.switch;
                self.ports[p].backend.recv_batch(&mut |frame| {
                    pending.extend(
                        switch
                            .ingress(Ingress::Port(id), frame, now)
                            .into_iter()
                            .map(|o| (Some(id), o)),
                    );
                });
            }
            for u in 0..self.uplinks.len() {
                let switch = &mut self.switch;
                self.uplinks[u].backend.recv_batch(&mut |frame| {
                    pending.extend(
                        switch
                            .ingress(Ingress::Uplink(UplinkId(u)), frame, now)
                            .into_iter()
                            .map(|o| (None, o)),
                    );
                });
            }
            self.dispatch(&mut pending, now);
            if now >= self.switch.poll_at() {
                self.switch.handle_timeout(now);
            }
            while let Some(effect) = self.switch.poll_effect() {
                match effect {
                    Effect::Transmit { uplink, frame } => self.uplinks[uplink.0].backend.send_owned(frame),
                    Effect::PortMoved(m) => {
                        let name = |u: Option<UplinkId>| u.map_or("none".to_string(), |u| self.names[u.0].clone());
                        eprintln!(
                            "{:>9.3} s  move port {}: {} -> {} ({})",
                            now.as_secs_f64(),
                            m.port.0,
                            name(m.from),
                            name(m.to),
                            m.reason
                        );
                        self.moves.push(json!({"t_s": now.as_secs_f64(), "port": m.port.0, "from": name(m.from), "to": name(m.to), "reason": m.reason.to_string()}));
                    }
                }
            }
            self.pace(now);
            for p in &mut self.ports {
                p.tx_errors += p.backend.flush() as u64;
            }
            for u in &mut self.uplinks {
                u.tx_errors += u.backend.flush() as u64;
            }
            if now >= next_status {
                for p in &mut self.ports {
                    p.ring_drops += p.backend.ring_drops();
                }
                for u in &mut self.uplinks {
                    u.ring_drops += u.backend.ring_drops();
                }
                self.write_status(now);
                next_status = now + core::time::Duration::from_secs(1);
            }
        }
        self.write_status(self.now());
    }

    /// Sleeps until a frame, a link change, or the next timer (at most 10 ms).
    fn wait(&mut self) {
        let now = self.now();
        let mut deadline = self.switch.poll_at();
        for u in &self.uplinks {
            if let Some(t) = u.pacer.ready_at() {
                deadline = deadline.min(t);
            }
        }
        let first_uplink = self.ports.len();
        for (i, u) in self.uplinks.iter().enumerate() {
            // A busy device: wake when it can take frames again.
            let busy = u.backend.tx_pending() > 0;
            self.pollfds[first_uplink + i].events = if busy {
                libc::POLLIN | libc::POLLOUT
            } else {
                libc::POLLIN
            };
        }
        let backlog = self
            .uplinks
            .iter()
            .any(|u| !u.pacer.may_send() || u.backend.tx_pending() > 0);
        let ms = if backlog {
            1
        } else {
            (deadline - now).as_millis().min(MAX_WAIT_MS as u128) as i32
        };
        let fds = &mut self.pollfds;
        fds.iter_mut().for_each(|f| f.revents = 0);
        // SAFETY: `fds` is a live array of pollfd of the length passed.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }

    /// Sends frames to ports at once and queues frames for uplinks in their schedulers, each cut
    /// to the egress MTU first.
    fn dispatch(&mut self, pending: &mut Vec<(Option<PortId>, Output)>, now: Instant) {
        for (from, out) in pending.drain(..) {
            match out.to {
                Egress::Port(q) => {
                    let Some(&i) = self.index.get(&q) else { continue };
                    let port = &mut self.ports[i];
                    let backend = &mut port.backend;
                    if !fit(out.frame, port.mtu, &mut |f| backend.send_owned(f)) {
                        port.oversize_drops += 1;
                    }
                }
                Egress::Uplink(u) => {
                    let leaf = from.and_then(|p| self.index.get(&p)).map(|&i| self.ports[i].leaf);
                    let up = &mut self.uplinks[u.0];
                    let shared = &mut self.shared;
                    let mtu = up.mtu;
                    let fitted = fit(out.frame, mtu, &mut |piece| match leaf {
                        Some(leaf) if up.sched.queued(leaf) < LEAF_QUEUE => {
                            up.sched.enqueue(leaf, piece.len() as u32, piece, now);
                            // Send what the pacer allows at once, so the queue fills only when
                            // the uplink itself is the bottleneck.
                            pace_one(up, shared, now);
                        }
                        Some(_) => up.queue_drops += 1,
                        None => up.backend.send_owned(piece),
                    });
                    if !fitted {
                        up.oversize_drops += 1;
                    }
                }
            }
        }
    }

    /// Lets each uplink's scheduler send what its pacer allows.
    fn pace(&mut self, now: Instant) {
        for u in &mut self.uplinks {
            pace_one(u, &mut self.shared, now);
        }
    }

    /// The counters, link states and moves as JSON.
    pub fn status(&self, now: Instant) -> Value {
        let counters = |c: &Counters| {
            let drops: serde_json::Map<String, Value> = DropReason::ALL
                .iter()
                .map(|r| (r.name().to_string(), json!(c.drops(*r))))
                .collect();
            json!({"rx_packets": c.rx_packets, "rx_bytes": c.rx_bytes, "tx_packets": c.tx_packets, "tx_bytes": c.tx_bytes, "drops": drops})
        };
        let team = self.switch.team();
        let uplinks: Vec<Value> = self
            .uplinks
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let c = self.switch.uplink_counters(UplinkId(i)).cloned().unwrap_or_default();
                let util = team.utilisation(UplinkId(i), now).unwrap_or_default();
                json!({
                    "interface": self.names[i],
                    "link": if team.link_state(UplinkId(i)) == Some(LinkState::Up) { "up" } else { "down" },
                    "counters": counters(&c),
                    "queue_drops": u.queue_drops,
                    "oversize_drops": u.oversize_drops,
                    "ring_drops": u.ring_drops,
                    "tx_errors": u.tx_errors,
                    "tx_utilisation": util.tx,
                    "rx_utilisation": util.rx,
                })
            })
            .collect();
        let ports: Vec<Value> = self
            .ports
            .iter()
            .map(|p| {
                let c = self.switch.port_counters(p.id).cloned().unwrap_or_default();
                json!({"id": p.id.0, "interface": p.backend.name(), "uplink": team.port_uplink(p.id).map(|u| self.names[u.0].clone()), "counters": counters(&c), "oversize_drops": p.oversize_drops, "ring_drops": p.ring_drops, "tx_errors": p.tx_errors})
            })
            .collect();
        json!({"t_s": now.as_secs_f64(), "uplinks": uplinks, "ports": ports, "moves": self.moves})
    }

    /// Writes the status file atomically (temporary file, then rename).
    fn write_status(&self, now: Instant) {
        if let Some(path) = &self.status_file {
            let tmp = path.with_extension("tmp");
            if std::fs::write(&tmp, self.status(now).to_string()).is_ok() {
                let _ = std::fs::rename(&tmp, path);
            }
        }
    }
}
