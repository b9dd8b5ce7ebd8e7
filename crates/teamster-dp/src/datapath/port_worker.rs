//! A port worker: a data-plane thread that does the receiving and sending for a set of VM
//! ports, while the switching worker decides where each frame goes.
//!
//! Model. The switching worker (the thread running [`super::Datapath::run`]) owns the core
//! switch, every uplink with its NetIOC scheduler and pacer, netlink and the control plane's
//! turn. A port worker owns the sockets of the ports given to it, and nothing else: it receives
//! each frame into a pooled buffer and hands it, with its port and offload request, to the
//! switching worker; it sends the frames the switching worker hands it for its ports
//! (already fitted to the port), and counts what it did in its ports' [`PortTally`], which the
//! switching worker takes each turn. A port has one socket, read by one thread at a time, so
//! its frames reach the switch in the order they arrived; a frame for a port is sent by that port's
//! worker in the order the switch handed it over. The two directions run through the lock-free
//! queues of [`super::handoff`].
//!
//! Attaching stays with the switching worker: it opens a port's socket and gives it to the
//! worker ([`Command::Attach`]), and takes it away when netlink says the interface went
//! ([`Command::Detach`]; the worker closes it after counting what it still held as
//! `detached`). A socket that polls in error is examined by the worker; if its interface is
//! gone (or nothing explains the error) the worker closes it and reports the port
//! [`Gone`], and the switching worker re-attaches it like any other. Each attach carries a
//! generation, so a report about a socket the switching worker has already replaced is ignored.
//!
//! Moves. A port's socket can move to another worker (its NetQueue filter moved to a queue
//! that worker reads, see [`super::port_moves`]): [`Command::Release`] makes the worker send
//! every frame the switching worker handed it so far, flush the socket, count it, and hand it
//! back ([`Returned`]), still holding any frames the device had no room for, which the next
//! worker sends. A worker that finds a frame for a port it has no socket for reads its
//! commands before dropping it (the socket may be in one), so a frame handed right after its
//! socket is dropped only if the port is really gone. A port's frames reach the switch in
//! order across a move (the switching worker takes the old worker's before the socket moves).
//!
//! Receive queues. A worker may also be given an uplink's receive queue (a socket of the
//! uplink's fanout group, see [`super::rx_queues`]): it is attached, read, counted and
//! reported gone as a port's socket is, in a slot past the ports' ([`super::rx_queues::slot`]),
//! and never sent on. The frames it hands over carry the attach's generation, so the switching
//! worker can tell frames of a queue it has since closed or renumbered.

use super::handoff::Doorbell;
use crate::platform::Platform;
use crate::pool::{FramePool, Spill};
use crate::{Device, Frame};
use crossbeam_queue::ArrayQueue;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Frames each handoff queue holds, each way: 4 ms of 1500-byte frames at 10 Gbit/s.
pub(super) const HANDOFF_FRAMES: usize = 4096;
/// Room a port worker wants in the queue to the switch before it reads a port's socket again
/// (one receive batch); with less, frames wait in the kernel, where a full buffer is counted.
const RX_ROOM: usize = 64;
/// How often the kernel's receive-drop counters are read.
const RING_DROPS_EVERY: Duration = Duration::from_millis(100);
/// The longest a port worker sleeps (it is woken for frames and commands; this bounds how long
/// a stop takes).
const MAX_WAIT: Duration = Duration::from_millis(10);

/// A frame handed between threads: the port (or receive queue slot) it came from or goes to,
/// its offload request, and the generation of the socket that received it.
pub(super) struct Handed {
    pub port: u32,
    pub frame: Frame,
    pub generation: u64,
}

/// Counts a port worker keeps for one port, taken (and zeroed) by the switching worker.
#[derive(Debug, Default)]
pub(super) struct PortTally {
    sent_packets: AtomicU64,
    sent_bytes: AtomicU64,
    truncated: AtomicU64,
    bad_offload: AtomicU64,
    tx_error: AtomicU64,
    ring_full: AtomicU64,
    detached: AtomicU64,
    handoff_full: AtomicU64,
}

/// What a [`PortTally`] held when taken.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Taken {
    pub sent_packets: u64,
    pub sent_bytes: u64,
    pub truncated: u64,
    pub bad_offload: u64,
    pub tx_error: u64,
    pub ring_full: u64,
    pub detached: u64,
    pub handoff_full: u64,
}

fn add(counter: &AtomicU64, n: u64) {
    if n > 0 {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

impl PortTally {
    /// Everything counted since the last take.
    pub fn take(&self) -> Taken {
        let t = |c: &AtomicU64| c.swap(0, Ordering::Relaxed);
        Taken {
            sent_packets: t(&self.sent_packets),
            sent_bytes: t(&self.sent_bytes),
            truncated: t(&self.truncated),
            bad_offload: t(&self.bad_offload),
            tx_error: t(&self.tx_error),
            ring_full: t(&self.ring_full),
            detached: t(&self.detached),
            handoff_full: t(&self.handoff_full),
        }
    }

    /// Sends what `link` holds, takes back the buffers it is done with, and counts what it
    /// sent, failed to send and dropped on receive.
    fn flush_and_count<D: Device>(&self, link: &mut D, pool: &mut FramePool) {
        add(&self.tx_error, link.flush() as u64);
        link.recycle(&mut |b| pool.give(b));
        let sent = link.take_sent();
        add(&self.sent_packets, sent.packets);
        add(&self.sent_bytes, sent.bytes);
        let rx = link.take_rx_drops();
        add(&self.truncated, rx.truncated);
        add(&self.bad_offload, rx.bad_offload);
    }

    /// Takes a closing socket's counts: what it sent, and what it still held (`detached`).
    fn close<D: Device>(&self, mut link: D) {
        let sent = link.take_sent();
        add(&self.sent_packets, sent.packets);
        add(&self.sent_bytes, sent.bytes);
        add(&self.detached, link.tx_pending() as u64);
    }
}

/// What the switching worker asks of a port worker.
pub(super) enum Command<D> {
    /// Do port `port`'s I/O on this socket, opened on `interface`.
    Attach {
        port: usize,
        generation: u64,
        link: Box<D>,
        interface: String,
    },
    /// Close port `port`'s socket.
    Detach { port: usize },
    /// Hand port `port`'s socket back, once what was handed for it is sent.
    Release { port: usize },
}

/// A socket a worker handed back ([`Command::Release`]).
pub(super) struct Returned<D> {
    pub port: usize,
    pub generation: u64,
    pub link: Box<D>,
}

/// A port whose socket a worker closed because its interface is gone.
pub(super) struct Gone {
    pub port: usize,
    pub generation: u64,
}

/// What a port worker and the switching worker share.
pub(super) struct Lane {
    /// Frames for this worker's ports, fitted.
    pub to_ports: ArrayQueue<Handed>,
    /// Frames from this worker's ports.
    pub from_ports: ArrayQueue<Handed>,
    /// The port worker's bell.
    pub bell: Doorbell,
    /// Per slot: every port of the switch, then every uplink receive queue (this worker's
    /// only are used).
    pub tallies: Box<[PortTally]>,
    /// Set with each command sent, so a worker about to sleep sees one its bell missed.
    commands: AtomicBool,
    stop: AtomicBool,
    /// The worker's time at work and frames received (see `thread_load`).
    pub load: super::thread_load::ThreadLoad,
}

impl Lane {
    /// Hands the worker a frame for port `port`; gives the frame back if the queue is full.
    pub fn hand(&self, port: usize, frame: Frame) -> Result<(), Frame> {
        let h = Handed {
            port: port as u32,
            frame,
            generation: 0,
        };
        self.to_ports.push(h).map_err(|h| h.frame)
    }
}

/// The switching worker's handle on a port worker thread; dropping it stops the thread.
pub(super) struct PortWorker<P: Platform> {
    pub lane: Arc<Lane>,
    commands: Sender<Command<P::Device>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How a port worker reaches the switching worker.
pub(super) struct Upstream<P: Platform> {
    /// The switching worker's bell.
    pub bell: Arc<Doorbell>,
    pub gone: Sender<Gone>,
    pub returned: Sender<Returned<P::Device>>,
    pub spill: Arc<Spill>,
    /// What tells whether an interface still has a socket's index.
    pub platform: P,
}

impl<P: Platform> Clone for Upstream<P> {
    fn clone(&self) -> Self {
        Upstream {
            bell: self.bell.clone(),
            gone: self.gone.clone(),
            returned: self.returned.clone(),
            spill: self.spill.clone(),
            platform: self.platform.clone(),
        }
    }
}

impl<P: Platform> PortWorker<P> {
    /// Starts port worker `index` for a switch of `ports` ports now and at most `slots` ports
    /// and receive queues ever (the tallies are allocated for all of them: they are shared
    /// without a lock, so they cannot grow).
    pub fn spawn(
        index: usize,
        ports: usize,
        slots: usize,
        upstream: Upstream<P>,
        busy_poll: Duration,
    ) -> io::Result<PortWorker<P>> {
        let lane = Arc::new(Lane {
            to_ports: ArrayQueue::new(HANDOFF_FRAMES),
            from_ports: ArrayQueue::new(HANDOFF_FRAMES),
            bell: Doorbell::new()?,
            tallies: (0..slots).map(|_| PortTally::default()).collect(),
            commands: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            load: Default::default(),
        });
        let (commands, inbox) = std::sync::mpsc::channel();
        let mut run = Run {
            lane: lane.clone(),
            inbox,
            upstream: upstream.clone(),
            ports: (0..ports).map(|_| None).collect(),
            attached: Vec::new(),
            pool: FramePool::sharing(upstream.spill.clone()),
            pollfds: Vec::new(),
            pollmap: Vec::new(),
            busy_poll,
            busy_until: Instant::now(),
            next_ring_drops: Instant::now() + RING_DROPS_EVERY,
        };
        let thread = std::thread::Builder::new()
            .name(format!("teamster-ports{index}"))
            .spawn(move || run.run())?;
        Ok(PortWorker {
            lane,
            commands,
            thread: Some(thread),
        })
    }

    /// Passes `command` to the worker and wakes it.
    pub fn command(&self, command: Command<P::Device>) {
        // The worker lives as long as this handle; a send fails only if it panicked, and then
        // the socket in the command is closed here.
        let _ = self.commands.send(command);
        self.lane.commands.store(true, Ordering::SeqCst);
        self.lane.bell.ring();
    }
}

impl<P: Platform> Drop for PortWorker<P> {
    fn drop(&mut self) {
        self.lane.stop.store(true, Ordering::Relaxed);
        self.lane.bell.ring();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A port's socket while this worker has it.
struct Attached<D> {
    link: D,
    generation: u64,
    interface: String,
}

/// The port worker thread's state.
struct Run<P: Platform> {
    lane: Arc<Lane>,
    inbox: Receiver<Command<P::Device>>,
    upstream: Upstream<P>,
    ports: Vec<Option<Attached<P::Device>>>,
    /// The slots of `ports` holding a socket, in order.
    attached: Vec<usize>,
    pool: FramePool,
    /// The bell first, then each attached port's socket.
    pollfds: Vec<libc::pollfd>,
    pollmap: Vec<usize>,
    busy_poll: Duration,
    busy_until: Instant,
    next_ring_drops: Instant,
}

impl<P: Platform> Run<P> {
    fn run(&mut self) {
        self.rebuild_pollfds();
        while !self.lane.stop.load(Ordering::Relaxed) {
            let start = Instant::now();
            let received = self.turn();
            let now = Instant::now();
            self.lane.load.add(now - start, received as u64);
            if received > 0 {
                self.busy_until = now + self.busy_poll;
            }
            self.wait(now);
        }
        for (port, slot) in self.ports.iter_mut().enumerate() {
            if let Some(a) = slot.take() {
                self.lane.tallies[port].close(a.link);
            }
        }
    }

    /// Applies every command waiting; says whether there was one (the poll set is rebuilt).
    fn take_commands(&mut self) -> bool {
        self.lane.commands.store(false, Ordering::SeqCst);
        let mut changed = false;
        while let Ok(command) = self.inbox.try_recv() {
            self.apply(command);
            changed = true;
        }
        if changed {
            self.rebuild_pollfds();
        }
        changed
    }

    /// One turn: commands, receiving, sending, counting; returns the frames received.
    fn turn(&mut self) -> usize {
        self.take_commands();
        let (lane, pool) = (&*self.lane, &mut self.pool);
        let mut received = 0;
        let mut handed = 0;
        for &port in &self.attached {
            let Some(a) = self.ports[port].as_mut() else { continue };
            if lane.from_ports.capacity() - lane.from_ports.len() < RX_ROOM {
                break;
            }
            let tally = &lane.tallies[port];
            let generation = a.generation;
            // Refused by a full queue (rare: no allocation otherwise), back to the pool after.
            let mut full = Vec::new();
            received += a.link.recv_batch(pool, &mut |frame| {
                let h = Handed {
                    port: port as u32,
                    frame,
                    generation,
                };
                match lane.from_ports.push(h) {
                    Ok(()) => handed += 1,
                    Err(h) => {
                        add(&tally.handoff_full, 1);
                        full.push(h.frame.into_bytes());
                    }
                }
            });
            for frame in full {
                pool.give(frame);
            }
        }
        if handed > 0 {
            self.upstream.bell.ring();
        }
        self.send_handed();
        let (lane, pool) = (&*self.lane, &mut self.pool);
        let read_ring_drops = Instant::now() >= self.next_ring_drops;
        if read_ring_drops {
            self.next_ring_drops = Instant::now() + RING_DROPS_EVERY;
        }
        for &port in &self.attached {
            let Some(a) = self.ports[port].as_mut() else { continue };
            let tally = &lane.tallies[port];
            tally.flush_and_count(&mut a.link, pool);
            if read_ring_drops {
                add(&tally.ring_full, a.link.ring_drops());
            }
        }
        received
    }

    /// Sends every frame the switching worker has handed over. A frame for a port this
    /// worker has no socket for may be one whose socket is still in a command not yet read
    /// (the switching worker sends the command first): the commands are read, and it is
    /// dropped (as `detached`) only if there is still none.
    fn send_handed(&mut self) {
        while let Some(h) = self.lane.to_ports.pop() {
            let port = h.port as usize;
            let here = |ports: &[Option<Attached<P::Device>>]| ports.get(port).is_some_and(Option::is_some);
            if !here(&self.ports) {
                self.take_commands();
            }
            match self.ports.get_mut(port).and_then(Option::as_mut) {
                Some(a) => a.link.send_owned(h.frame),
                None => {
                    add(&self.lane.tallies[port].detached, 1);
                    self.pool.give(h.frame.into_bytes());
                }
            }
        }
    }

    /// Carries out one command from the switching worker.
    fn apply(&mut self, command: Command<P::Device>) {
        match command {
            Command::Release { port } => {
                // Everything handed for it before the command was sent is in the queue now.
                self.send_handed();
                let Some(mut a) = self.ports.get_mut(port).and_then(Option::take) else {
                    return;
                };
                self.lane.tallies[port].flush_and_count(&mut a.link, &mut self.pool);
                let back = Returned {
                    port,
                    generation: a.generation,
                    link: Box::new(a.link),
                };
                // The switching worker outlives its workers; if it is stopping, the socket
                // closes here.
                let _ = self.upstream.returned.send(back);
                self.upstream.bell.ring();
            }
            Command::Attach {
                port,
                generation,
                link,
                interface,
            } => {
                // A port added while the switch runs may be past the end.
                if port >= self.ports.len() {
                    self.ports.resize_with(port + 1, || None);
                }
                if let Some(old) = self.ports[port].take() {
                    self.lane.tallies[port].close(old.link);
                }
                self.ports[port] = Some(Attached {
                    link: *link,
                    generation,
                    interface,
                });
            }
            Command::Detach { port } => {
                if let Some(old) = self.ports.get_mut(port).and_then(Option::take) {
                    self.lane.tallies[port].close(old.link);
                }
            }
        }
    }

    fn rebuild_pollfds(&mut self) {
        self.pollfds.clear();
        self.pollmap.clear();
        self.attached.clear();
        self.attached
            .extend((0..self.ports.len()).filter(|&p| self.ports[p].is_some()));
        self.pollfds.push(libc::pollfd {
            fd: self.lane.bell.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        self.pollmap.push(usize::MAX);
        for (port, a) in self.ports.iter().enumerate() {
            if let Some(a) = a {
                self.pollfds.push(libc::pollfd {
                    fd: a.link.raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
                self.pollmap.push(port);
            }
        }
    }

    /// Polls without sleeping until `busy_until`, then sleeps until a frame, a handed frame or
    /// a command arrives (at most [`MAX_WAIT`]); deals with sockets that poll in error.
    fn wait(&mut self, now: Instant) {
        // With the queue to the switch nearly full, the sockets are not read (their frames wait
        // in the kernel), so they must not wake this thread: it waits for the switch instead,
        // briefly, as the switch does not ring for room.
        let backlogged = self.lane.from_ports.capacity() - self.lane.from_ports.len() < RX_ROOM;
        let sockets = if backlogged { 1 } else { self.pollfds.len() };
        let mut n = 0;
        let work = |lane: &Lane| !lane.to_ports.is_empty() || lane.commands.load(Ordering::SeqCst);
        while n == 0 && Instant::now() < self.busy_until {
            if work(&self.lane) {
                return;
            }
            n = self.poll(sockets, Duration::ZERO);
        }
        if n == 0 {
            self.lane.bell.arm();
            let cap = if backlogged {
                Duration::from_micros(100)
            } else {
                MAX_WAIT
            };
            if !work(&self.lane) && !self.lane.stop.load(Ordering::Relaxed) {
                n = self.poll(sockets, cap.saturating_sub(now.elapsed()));
            }
            self.lane.bell.disarm();
        }
        if n > 0 {
            self.socket_errors();
        }
    }

    /// One `ppoll` over the first `count` descriptors for at most `wait`.
    fn poll(&mut self, count: usize, wait: Duration) -> libc::c_int {
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        let fds = &mut self.pollfds[..count];
        for f in fds.iter_mut() {
            f.revents = 0;
        }
        // SAFETY: `fds` is a live array of pollfd of the length passed; `ts` outlives the call
        // and a null signal mask leaves the mask unchanged.
        unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) }
    }

    /// Examines every socket that polled in error: closes it and reports its port gone if its
    /// interface no longer has the socket's index, or nothing explains the error.
    fn socket_errors(&mut self) {
        let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
        let errored: Vec<usize> = (self.pollfds.iter().zip(&self.pollmap))
            .filter(|(f, &p)| p != usize::MAX && f.revents & bad != 0)
            .map(|(_, &p)| p)
            .collect();
        if errored.is_empty() {
            return;
        }
        for port in errored {
            let Some(a) = self.ports[port].as_ref() else { continue };
            let explained = a.link.take_error().is_some();
            if explained && self.upstream.platform.is_index(&a.interface, a.link.ifindex()) {
                continue;
            }
            let a = self.ports[port].take().expect("attached");
            self.lane.tallies[port].close(a.link);
            let _ = self.upstream.gone.send(Gone {
                port,
                generation: a.generation,
            });
        }
        self.upstream.bell.ring();
        self.rebuild_pollfds();
    }
}
