//! The receive queues' rounds: every second (or Dynamic NetQueue's interval) each queue's rate
//! is measured, queues that could not be opened are tried again, and NetQueue's filters are
//! brought in line with the MAC table, repacked, and their program swapped when what it steers
//! changed, by a thread of its own (a replaced fanout program costs an RCU grace period, which
//! the frames' path must not wait for); then ports follow their filters (see `port_moves`).
//! The model is the `rx_queues` module's.

use super::rx_queues::{queue_thread, RxEvent, Steering, FILTERS_PER_PORT, ROUND, RX_EVENTS_KEPT};
use super::Datapath;
use crate::afpacket;
use crate::platform::Platform;
use crate::steer;
use crate::Device;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{Receiver, Sender};
use teamster_core::rx::netqueue::{NetQueue, Placement, Reason};
use teamster_core::teaming::PortId;
use teamster_core::wire::MacAddr;
use teamster_core::Instant;

/// A program to install on a fanout group, off the frames' path.
struct SteerJob {
    fd: OwnedFd,
    program: Vec<libc::sock_filter>,
    uplink: String,
}

/// The thread that installs NetQueue's programs, and the errors it reports.
pub(super) struct Steerer {
    jobs: Sender<SteerJob>,
    failed: Receiver<String>,
}

impl Steerer {
    /// Starts the thread.
    pub(super) fn spawn() -> std::io::Result<Steerer> {
        let (jobs, inbox) = std::sync::mpsc::channel::<SteerJob>();
        let (report, failed) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("teamster-steer".into())
            .spawn(move || {
                for job in inbox {
                    if let Err(e) = afpacket::steer_fd(job.fd.as_raw_fd(), &job.program, &job.uplink) {
                        let _ = report.send(format!("uplink {}: steering not changed: {e}", job.uplink));
                    }
                }
            })?;
        Ok(Steerer { jobs, failed })
    }
}

impl<P: Platform> Datapath<P> {
    /// Each data-plane thread's capacity (this one first), frames per second at full load, as
    /// measured since the last round (see `thread_load`); None until measured.
    /// A thread on whose uplink receive queues the kernel dropped frames since the last round
    /// may have fallen behind, whatever its own clock says (the meter decides). A thread not measured yet (it has
    /// received too little) has None, and its queues keep the configured figure: a spread onto
    /// it is a trial, which its first measure confirms or not (a queue's lone filter never
    /// moves back for a spread).
    fn thread_capacities(&mut self, elapsed: core::time::Duration) -> Vec<Option<f64>> {
        let mut drops = vec![0u64; self.meters.len()];
        for u in &mut self.uplinks {
            let rx = &mut u.rx;
            for q in 0..rx.drops.len() {
                let t = queue_thread(&self.rx.steering, self.workers.len(), q);
                if let Some(d) = drops.get_mut(t) {
                    *d += rx.drops[q].saturating_sub(rx.drops_then[q]);
                }
                rx.drops_then[q] = rx.drops[q];
            }
        }
        let mut counts = vec![self.load.read()];
        counts.extend(self.workers.iter().map(|w| w.lane.load.read()));
        (self.meters.iter_mut().zip(counts).zip(drops))
            .map(|((m, c), d)| m.round(c, elapsed, d))
            .collect()
    }

    /// The receive queues' round at `now`: rates measured; queues that could not be opened
    /// tried again; NetQueue's filters refreshed from the MAC table, repacked, and the program
    /// swapped when what it steers changed.
    pub(super) fn rx_round(&mut self, now: Instant) {
        while let Ok(what) = self.steerer.failed.try_recv() {
            self.event(now, "rx", what);
        }
        if self.rx.queues <= 1 || now < self.next_rx_round {
            return;
        }
        let interval = match self.rx.steering {
            Steering::NetQueue(Placement::Packed(p)) => p.interval,
            _ => ROUND,
        };
        let elapsed = (now - self.next_rx_round + interval).as_secs_f64();
        self.next_rx_round = now + interval;
        let netqueue = matches!(self.rx.steering, Steering::NetQueue(_));
        // The MACs behind local ports (the first port a MAC is found on, for one in two VLANs).
        let mut macs: HashMap<MacAddr, PortId> = HashMap::new();
        if netqueue {
            for (vlan, mac, port) in self.switch.mac_table().port_macs(now) {
                if vlan.is_none_or(|v| v < 4096) && !mac.is_multicast() {
                    macs.entry(mac).or_insert(port);
                }
            }
        }
        let mut sorted: Vec<(MacAddr, PortId)> = macs.iter().map(|(m, p)| (*m, *p)).collect();
        sorted.sort();
        let capacities = self.thread_capacities(core::time::Duration::from_secs_f64(elapsed));
        for u in 0..self.uplinks.len() {
            if self.uplinks[u].backend.is_some() && self.uplinks[u].rx.generations.len() <= 1 {
                self.attach_queues(u, now);
            }
            let rx = &mut self.uplinks[u].rx;
            for q in 0..rx.frames.len() {
                rx.pps[q] = (rx.frames[q] - rx.frames_then[q]) as f64 / elapsed;
                rx.frames_then[q] = rx.frames[q];
            }
            let Some(nq) = rx.netqueue.as_mut() else { continue };
            if self.rx.measure_capacity {
                for q in 1..nq.queues() {
                    if let Some(c) = capacities[queue_thread(&self.rx.steering, self.workers.len(), usize::from(q))] {
                        nq.set_capacity(q, c);
                    }
                }
            }
            let capped = refresh_filters(nq, &macs, &sorted, now);
            let note = capped.then(|| {
                format!(
                    "MACs past {FILTERS_PER_PORT} per port or {} in all take the default queue",
                    steer::MAX_PROGRAM_FILTERS
                )
            });
            if rx.generations.len() > 1 {
                rx.note = note;
            }
            nq.handle_timeout(now);
            let name = self.uplinks[u].plan.name.clone();
            let mut events = Vec::new();
            while let Some(e) = self.uplinks[u].rx.netqueue.as_mut().and_then(NetQueue::poll_event) {
                events.push(RxEvent {
                    at: e.at,
                    uplink: name.clone(),
                    mac: e.mac,
                    from: e.from,
                    to: e.to,
                    reason: match e.reason {
                        Reason::Spread => "spread",
                        Reason::Pack => "pack",
                    },
                    loads: e.loads,
                });
            }
            for e in events {
                let loads: Vec<String> = e.loads.iter().map(|l| format!("{:.0}%", l * 100.0)).collect();
                let what = format!(
                    "uplink {}: {} queue {} -> {} ({}; loads {})",
                    e.uplink,
                    e.mac,
                    e.from,
                    e.to,
                    e.reason,
                    loads.join(" ")
                );
                self.event(now, "rx", what);
                *self.rx_moves.entry(e.reason).or_default() += 1;
                if self.rx_events.len() >= RX_EVENTS_KEPT {
                    self.rx_events.pop_front();
                }
                self.rx_events.push_back(e);
            }
            self.resteer(u, now);
        }
        if netqueue {
            self.follow_queues();
        }
    }

    /// Replaces uplink `u`'s NetQueue program if its filters steer differently now, on the
    /// steering thread.
    fn resteer(&mut self, u: usize, now: Instant) {
        let up = &mut self.uplinks[u];
        let Some(nq) = up.rx.netqueue.as_ref() else { return };
        let mut steered: Vec<(MacAddr, u16)> = (nq.filters().iter())
            .filter(|f| f.queue != 0)
            .map(|f| (f.mac, f.queue))
            .collect();
        steered.truncate(steer::MAX_PROGRAM_FILTERS);
        if steered == up.rx.steered || up.rx.generations.len() <= 1 {
            return;
        }
        let Some(b) = &up.backend else { return };
        let job = match b.steering_handle() {
            Ok(fd) => SteerJob {
                fd,
                program: steer::mac_program(&steered),
                uplink: up.plan.name.clone(),
            },
            Err(e) => {
                let what = format!("uplink {}: steering not changed: {e}", up.plan.name);
                return self.event(now, "rx", what);
            }
        };
        up.rx.steered = steered;
        let _ = self.steerer.jobs.send(job);
    }
}

/// Brings NetQueue's filters in line with the MACs behind local ports (`macs`, and the same
/// sorted): a filter whose MAC left (or moved to another port) is removed, a new MAC gets one
/// unless its port has [`FILTERS_PER_PORT`] or the uplink [`steer::MAX_PROGRAM_FILTERS`]
/// already. Says whether a MAC went without a filter for those limits. Costs a hash lookup
/// per MAC and filter.
fn refresh_filters(
    nq: &mut NetQueue,
    macs: &HashMap<MacAddr, PortId>,
    sorted: &[(MacAddr, PortId)],
    now: Instant,
) -> bool {
    let stale: Vec<MacAddr> = (nq.filters().iter())
        .filter(|f| macs.get(&f.mac) != Some(&f.port))
        .map(|f| f.mac)
        .collect();
    for mac in stale {
        nq.remove_filter(mac, None);
    }
    let mut per_port: HashMap<PortId, usize> = HashMap::new();
    for f in nq.filters() {
        *per_port.entry(f.port).or_default() += 1;
    }
    let mut capped = false;
    for (mac, port) in sorted {
        if nq.has_filter(*mac, None) {
            continue;
        }
        let n = per_port.entry(*port).or_default();
        if *n >= FILTERS_PER_PORT || nq.filters().len() >= steer::MAX_PROGRAM_FILTERS {
            capped = true;
            continue;
        }
        if nq.add_filter(*port, *mac, None, now).is_ok() {
            *n += 1;
        }
    }
    capped
}
