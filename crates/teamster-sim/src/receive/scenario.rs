//! Receive scenario files: one host's NIC, cores, costs, VMs and traffic, run as several
//! variants, and what the variants must show against each other.
//!
//! The file's `[host]`, `[nic]`, `[costs]`, `[vms]`, `[traffic]` and optional `[ping]` tables
//! are the base setup; each `[[variants]]` table names a variant and may replace any key of
//! those tables (`nic = { steering = "rss" }`). Unknown keys are errors naming the key path.

use serde::Deserialize;
use teamster_core::units::Bandwidth;

/// The most variants a file runs, VMs a host has, and streams a run carries.
const MAX_VARIANTS: usize = 16;
const MAX_VMS: u32 = 256;
const MAX_STREAMS: u32 = 4096;
/// The longest simulated run, in ms: runs are packet by packet.
const MAX_DURATION_MS: f64 = 2000.0;
/// The most frames the link can carry in one variant's run, and in all of a file's variants
/// together (a few seconds of wall time each).
const MAX_FRAMES: f64 = 20e6;
const MAX_FRAMES_IN_ALL: f64 = 60e6;

/// A receive scenario's header, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// Always `"receive"`.
    pub mode: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub seed: u64,
    /// Simulated time per variant, in ms (at most 2000).
    pub duration_ms: f64,
    /// Time before measurement starts, in ms (default 20% of the run).
    pub warmup_ms: Option<f64>,
    #[serde(default)]
    pub expect: Vec<Expect>,
}

/// One variant's complete setup.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    #[serde(default)]
    pub host: HostSection,
    pub nic: Nic,
    #[serde(default)]
    pub costs: Costs,
    pub vms: Vms,
    pub traffic: Traffic,
    pub ping: Option<Ping>,
}

/// `[host]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSection {
    /// Cores for the hypervisor's receive queues, SplitRx workers and send threads (each
    /// takes one); VMs' vCPUs are separate.
    pub cores: u32,
}

impl Default for HostSection {
    fn default() -> Self {
        HostSection { cores: 64 }
    }
}

/// How the NIC picks a frame's receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Steering {
    /// Everything to queue 0.
    Single,
    /// NetQueue: destination-MAC filters (`inner`: VXLAN inner MAC and VNI), else queue 0.
    Netqueue,
    /// RSS: Toeplitz hash of the addresses and ports (`inner`: VXLAN inner headers) through a
    /// 128-entry indirection table.
    Rss,
}

/// How NetQueue filters are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementMode {
    Even,
    /// Dynamic NetQueue.
    Packed,
}

/// SplitRx: the copy to VMs moved to per-VM workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SplitMode {
    Off,
    On,
    /// Decided per queue by `teamster_core::rx::split_rx::SplitRx` from the queue's load.
    Auto,
}

/// `[nic]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    pub speed: Bandwidth,
    /// Receive queues, 1 to 64, each served by its own core.
    pub queues: u16,
    pub steering: Steering,
    /// VXLAN: steer by the inner headers (RSS) or inner MAC (NetQueue).
    #[serde(default)]
    pub inner: bool,
    #[serde(default = "even")]
    pub placement: PlacementMode,
    /// Dynamic NetQueue's measure of a full queue, frames per second (default: what one
    /// queue's core carries at the stated costs).
    pub queue_pps: Option<f64>,
    /// Dynamic NetQueue's round, in ms (default 10).
    #[serde(default = "ten")]
    pub packing_interval_ms: f64,
    /// Hardware LRO: the NIC coalesces a flow's segments; the host sees one frame.
    #[serde(default)]
    pub lro: bool,
    /// Software GRO on the queue's core.
    #[serde(default)]
    pub gro: bool,
    /// The NIC verifies received TCP checksums (inner ones too, for VXLAN).
    #[serde(default = "yes")]
    pub rx_checksum: bool,
    /// Send, overlay traffic: the NIC segments TSO frames inside VXLAN (VXLAN TSO); without
    /// it the host cuts them. (Plain TCP is always segmented by the NIC here.)
    #[serde(default = "yes")]
    pub tso: bool,
    #[serde(default = "off")]
    pub split_rx: SplitMode,
    /// Interrupt moderation: how long after a frame reaches an idle queue its core is woken.
    #[serde(default = "twenty")]
    pub coalesce_us: f64,
    /// Frames a receive queue (and a vNIC) holds; more are dropped.
    #[serde(default = "ring")]
    pub ring: u32,
    /// Frames a core takes per poll.
    #[serde(default = "budget")]
    pub budget: u32,
    /// Send: what stands between the VMs' send threads and the wire (default `fifo`).
    #[serde(default = "fifo")]
    pub scheduler: TxScheduler,
}

/// Send: the transmit scheduler in front of the NIC's one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxScheduler {
    /// The default scheduler: each send thread's batch goes to the NIC's queue as it is
    /// handed over, in arrival order.
    Fifo,
    /// NetIOC: a queue per VM port, served one packet (super-frame) per backlogged port in
    /// turn by a scheduler core of its own, which keeps the NIC's queue short
    /// ([`super::engine`]'s `NIC_DEPTH`) so that its order is the wire's.
    Netioc,
}

fn fifo() -> TxScheduler {
    TxScheduler::Fifo
}

fn even() -> PlacementMode {
    PlacementMode::Even
}
fn ten() -> f64 {
    10.0
}
fn yes() -> bool {
    true
}
fn off() -> SplitMode {
    SplitMode::Off
}
fn twenty() -> f64 {
    20.0
}
fn ring() -> u32 {
    1024
}
fn budget() -> u32 {
    64
}

/// `[costs]`: CPU nanoseconds per stage. The defaults are Teamster's own (see the module
/// documentation of [`super`] for where each comes from).
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Costs {
    /// A core woken from idle (interrupt, thread switch, cold caches), per wake-up.
    pub wakeup: f64,
    /// The driver's work per frame taken from a receive queue.
    pub rx: f64,
    /// ... and per byte of it.
    pub rx_byte: f64,
    /// Opening a VXLAN frame (outer checks, VNI and VTEP lookup), per frame.
    pub decap: f64,
    /// Verifying a checksum in software, per byte (when the NIC does not).
    pub checksum_byte: f64,
    /// Software GRO, per segment.
    pub gro: f64,
    /// The switching decision (MAC lookup, policy), per frame delivered.
    pub switch: f64,
    /// Copying a frame into a VM's memory, per frame and per byte.
    pub copy: f64,
    pub copy_byte: f64,
    /// SplitRx: queuing a frame to a VM's worker.
    pub handoff: f64,
    /// The guest's receive path, per frame and per byte (on the VM's vCPUs).
    pub guest: f64,
    pub guest_byte: f64,
    /// Send: handing a frame (or TSO super-frame) to the NIC.
    pub tx: f64,
    /// Send: wrapping a frame in VXLAN.
    pub encap: f64,
    /// Send: software segmentation, per segment and per byte.
    pub segment: f64,
    pub segment_byte: f64,
    /// Send, `scheduler = "netioc"`: the scheduler's work per packet (enqueue, pick, dequeue,
    /// hand to the NIC), on its own core.
    pub schedule: f64,
    /// Send, with `vms.irq_rate`: a transmit-completion interrupt taken by a guest (the
    /// virtual interrupt's delivery and the guest's handler), on the VM's vCPU.
    pub guest_irq: f64,
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            wakeup: 4000.0,
            rx: 1200.0,
            rx_byte: 0.0,
            decap: 150.0,
            checksum_byte: 0.14,
            gro: 540.0,
            switch: 300.0,
            copy: 800.0,
            copy_byte: 0.1,
            handoff: 100.0,
            guest: 2000.0,
            guest_byte: 0.1,
            tx: 1200.0,
            encap: 150.0,
            segment: 150.0,
            segment_byte: 0.07,
            schedule: 500.0,
            guest_irq: 0.0,
        }
    }
}

impl Costs {
    fn check(&self) -> Result<(), String> {
        let v = toml::Value::try_from(self).map_err(|e| e.to_string())?;
        for (k, x) in v.as_table().into_iter().flatten() {
            let x = x.as_float().unwrap_or(f64::NAN);
            if !(x.is_finite() && (0.0..=1e9).contains(&x)) {
                return Err(format!("costs.{k} = {x}: expected nanoseconds, 0 to 1e9"));
            }
        }
        Ok(())
    }
}

/// `[vms]`: `count` VMs alike.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vms {
    pub count: u32,
    pub vcpus: u32,
    /// The guest spreads its receive work over its vCPUs by flow (vmxnet3 RSS).
    #[serde(default = "yes")]
    pub guest_rss: bool,
    /// Send: the most super-frames a VM's send thread takes from its vNIC in one run and
    /// hands to the NIC together, 1 to 256 (default 1).
    #[serde(default = "one")]
    pub tx_batch: u32,
    /// Send: interrupt moderation of the vNIC's transmit completions, the most interrupts per
    /// second (100 to 1e6). The first completion not yet reported starts a coalescing timer
    /// of 1 / `irq_rate`; the interrupt that ends it reports every completion until then, and
    /// only then do their segments leave the VM's window. None: completions are not modelled
    /// (segments leave the window as they leave the wire).
    pub irq_rate: Option<f64>,
}

fn one() -> u32 {
    1
}

/// Which way the traffic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    Receive,
    Send,
}

/// `[traffic]`: TCP streams, `streams_per_vm` to (or from) each VM.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    pub direction: Direction,
    pub streams_per_vm: u32,
    /// TCP payload per segment, 64 to 8948 bytes.
    pub payload: u32,
    /// Every segment carries PSH (small writes with Nagle off): GRO does not merge them.
    #[serde(default)]
    pub push: bool,
    /// The VMs' traffic is VXLAN between VTEPs.
    #[serde(default)]
    pub overlay: bool,
    /// Each stream's offered rate; none: as fast as its window allows.
    pub rate: Option<Bandwidth>,
    /// Segments a stream has in flight (TCP's window), 1 to 4096.
    #[serde(default = "window")]
    pub window: u32,
    /// Send: the receiver acknowledges every `ack_every`-th segment (1 to 64); each ACK is a
    /// 66-byte frame the host and the guest receive at the receive costs (`rx`, `switch`,
    /// `copy`; `guest`), taken with the completions it comes back with. 0 (the default): ACKs
    /// are not modelled.
    #[serde(default)]
    pub ack_every: u32,
    /// Segments per TSO super-frame (1 to 45): receive, how many of a stream's segments the
    /// sender puts on the wire back to back; send, what a VM hands over at once.
    #[serde(default = "tso_segments")]
    pub tso_segments: u32,
}

fn window() -> u32 {
    64
}
fn tso_segments() -> u32 {
    44
}

/// `[ping]`: an echo request to VM 0 every `interval_us`, its latency measured.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ping {
    pub interval_us: f64,
}

/// What a variant's run is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// TCP payload delivered, Gbps.
    Throughput,
    /// Hypervisor cores busy (queues, workers, send threads).
    HostCpu,
    /// Host cores per Gbps.
    CpuPerGbps,
    /// Host and guest cores busy together.
    TotalCpu,
    /// Mean ping round trip, µs (twice the measured one-way receive latency).
    Ping,
    /// Receive queues that took frames.
    QueuesUsed,
    /// Send: mean one-way latency of the probe (`[ping]`) from its hand-over by the vNIC to
    /// its last bit on the wire, µs.
    SendLatency,
    /// Send: transmit-completion interrupts the guests took, thousands per second.
    GuestIrqs,
}

impl Metric {
    /// The name a file gives it.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Throughput => "throughput",
            Metric::HostCpu => "host-cpu",
            Metric::CpuPerGbps => "cpu-per-gbps",
            Metric::TotalCpu => "total-cpu",
            Metric::Ping => "ping",
            Metric::QueuesUsed => "queues-used",
            Metric::SendLatency => "send-latency",
            Metric::GuestIrqs => "guest-irqs",
        }
    }
}

/// An `[[expect]]` table: a metric of one variant (`variant`), or its ratio to another's
/// (`variant` over `to`; its difference with `compare = "difference"`), against the seed's
/// figure within a relative `tolerance`, or within `min`/`max`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub metric: Metric,
    pub variant: String,
    pub to: Option<String>,
    /// How `variant` is set against `to` (default `ratio`).
    #[serde(default)]
    pub compare: Compare,
    /// The seed's figure.
    pub seed: Option<f64>,
    /// Relative: holds when |simulated - seed| <= tolerance * seed.
    pub tolerance: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// Where the seed states it.
    #[serde(default)]
    pub source: String,
}

/// `variant` over `to`, or `variant` less `to`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compare {
    #[default]
    Ratio,
    Difference,
}

/// A checked file: its header, and each variant's name and setup.
#[derive(Debug, Clone)]
pub struct ReceivePlan {
    pub header: Header,
    pub variants: Vec<(String, Setup)>,
}

impl ReceivePlan {
    pub fn warmup_ms(&self) -> f64 {
        self.header.warmup_ms.unwrap_or(self.header.duration_ms * 0.2)
    }
}

/// Reads and checks a receive scenario; every error names its key.
pub fn resolve(text: &str) -> Result<ReceivePlan, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut head = toml::Table::new();
    let mut base = toml::Table::new();
    let mut variants = Vec::new();
    for (k, v) in table {
        match k.as_str() {
            "host" | "nic" | "costs" | "vms" | "traffic" | "ping" => {
                base.insert(k, v);
            }
            "variants" => variants = v.as_array().cloned().ok_or("variants: expected [[variants]] tables")?,
            _ => {
                head.insert(k, v);
            }
        }
    }
    let header: Header = toml::Value::Table(head)
        .try_into()
        .map_err(|e: toml::de::Error| e.message().to_string())?;
    check_header(&header)?;
    if variants.is_empty() || variants.len() > MAX_VARIANTS {
        return Err(format!("variants: expected 1 to {MAX_VARIANTS} [[variants]] tables"));
    }
    let mut out: Vec<(String, Setup)> = Vec::new();
    let mut frames_in_all = 0.0;
    for (i, v) in variants.into_iter().enumerate() {
        let duration_ms = header.duration_ms;
        let at = |e: String| format!("variants[{i}]: {e}");
        let toml::Value::Table(mut v) = v else {
            return Err(at("expected a table".into()));
        };
        let name = match v.remove("name") {
            Some(toml::Value::String(s)) if !s.trim().is_empty() && s.trim() == s && s.len() <= 64 => s,
            _ => {
                return Err(at(
                    "name: expected 1 to 64 characters, without spaces around them".into()
                ))
            }
        };
        if out.iter().any(|(n, _)| *n == name) {
            return Err(at(format!("name: `{name}` is used twice")));
        }
        let mut merged = base.clone();
        for (k, over) in v {
            let toml::Value::Table(over) = over else {
                return Err(at(format!("{k}: expected a table of keys to replace")));
            };
            match merged.get_mut(&k) {
                Some(toml::Value::Table(t)) => t.extend(over),
                _ if ["host", "nic", "costs", "vms", "traffic", "ping"].contains(&k.as_str()) => {
                    merged.insert(k, toml::Value::Table(over));
                }
                _ => return Err(at(format!("unknown table `{k}`"))),
            }
        }
        let setup = setup_of(merged).map_err(at)?;
        check_setup(&setup).map_err(at)?;
        let t = &setup.traffic;
        let wire = f64::from(t.payload) + 54.0 + 24.0 + if t.overlay { 50.0 } else { 0.0 };
        let frames = setup.nic.speed.bps_f64() / 8.0 / wire * duration_ms / 1e3;
        frames_in_all += frames;
        if frames_in_all > MAX_FRAMES_IN_ALL {
            return Err(at(format!(
                "the variants so far carry {:.0} million frames, more than {:.0} million a file \
                 simulates: shorten duration_ms or run fewer variants",
                frames_in_all / 1e6,
                MAX_FRAMES_IN_ALL / 1e6
            )));
        }
        if frames > MAX_FRAMES {
            return Err(at(format!(
                "nic.speed = {} for duration_ms = {duration_ms} is {:.0} million frames of {} bytes, \
                 more than {:.0} million a run simulates: shorten duration_ms",
                setup.nic.speed,
                frames / 1e6,
                t.payload,
                MAX_FRAMES / 1e6
            )));
        }
        out.push((name, setup));
    }
    let plan = ReceivePlan { header, variants: out };
    for (i, x) in plan.header.expect.iter().enumerate() {
        check_expect(x, &plan).map_err(|e| format!("expect[{i}]: {e}"))?;
    }
    Ok(plan)
}

/// The setup of merged tables, each read on its own so that an error names its table.
fn setup_of(mut t: toml::Table) -> Result<Setup, String> {
    fn section<T: serde::de::DeserializeOwned>(t: &mut toml::Table, key: &str) -> Result<Option<T>, String> {
        t.remove(key)
            .map(|v| {
                v.try_into()
                    .map_err(|e: toml::de::Error| format!("{key}: {}", e.message()))
            })
            .transpose()
    }
    let need = |key: &str| format!("[{key}]: missing");
    Ok(Setup {
        host: section(&mut t, "host")?.unwrap_or_default(),
        nic: section(&mut t, "nic")?.ok_or_else(|| need("nic"))?,
        costs: section(&mut t, "costs")?.unwrap_or_default(),
        vms: section(&mut t, "vms")?.ok_or_else(|| need("vms"))?,
        traffic: section(&mut t, "traffic")?.ok_or_else(|| need("traffic"))?,
        ping: section(&mut t, "ping")?,
    })
}

fn check_header(h: &Header) -> Result<(), String> {
    if h.mode != "receive" {
        return Err(format!("mode = \"{}\": expected \"receive\"", h.mode));
    }
    if !(h.duration_ms.is_finite() && (1.0..=MAX_DURATION_MS).contains(&h.duration_ms)) {
        return Err(format!(
            "duration_ms = {}: expected 1 to {MAX_DURATION_MS}",
            h.duration_ms
        ));
    }
    if let Some(w) = h.warmup_ms {
        if !(w.is_finite() && w >= 0.0 && w <= h.duration_ms - 1.0) {
            return Err(format!(
                "warmup_ms = {w}: expected 0 or more, at least 1 ms below duration_ms"
            ));
        }
    }
    Ok(())
}

/// Refuses setups the model cannot run: queue, VM and stream counts out of range, a host
/// without the cores its queues and threads need, sizes no link carries.
fn check_setup(s: &Setup) -> Result<(), String> {
    let n = &s.nic;
    if !(1..=64).contains(&n.queues) {
        return Err(format!("nic.queues = {}: expected 1 to 64", n.queues));
    }
    if n.speed.bps_f64() < 1e6 || n.speed.bps_f64() > 1e12 {
        return Err(format!("nic.speed = {}: expected 1 Mbps to 1 Tbps", n.speed));
    }
    if !(n.coalesce_us.is_finite() && (0.0..=1000.0).contains(&n.coalesce_us)) {
        return Err(format!("nic.coalesce_us = {}: expected 0 to 1000", n.coalesce_us));
    }
    if let Some(p) = n.queue_pps {
        if !(p.is_finite() && (1.0..=1e9).contains(&p)) {
            return Err(format!("nic.queue_pps = {p}: expected 1 to 1e9 frames per second"));
        }
    }
    if !(n.packing_interval_ms.is_finite() && (10.0..=3_600_000.0).contains(&n.packing_interval_ms)) {
        return Err(format!(
            "nic.packing_interval_ms = {}: expected 10 to 3600000 (an hour)",
            n.packing_interval_ms
        ));
    }
    if !(1..=65536).contains(&n.ring) || !(1..=1024).contains(&n.budget) {
        return Err(format!(
            "nic.ring = {}, nic.budget = {}: expected 1-65536 and 1-1024",
            n.ring, n.budget
        ));
    }
    if n.lro && n.gro {
        return Err("nic.lro and nic.gro: pick one (LRO already coalesces)".into());
    }
    s.costs.check()?;
    let v = &s.vms;
    if !(1..=MAX_VMS).contains(&v.count) || !(1..=64).contains(&v.vcpus) {
        return Err(format!(
            "vms.count = {}, vms.vcpus = {}: expected 1-{MAX_VMS} and 1-64",
            v.count, v.vcpus
        ));
    }
    let t = &s.traffic;
    if t.streams_per_vm == 0 || t.streams_per_vm.saturating_mul(v.count) > MAX_STREAMS {
        return Err(format!(
            "traffic.streams_per_vm = {}: expected 1 or more, {MAX_STREAMS} streams in all at most",
            t.streams_per_vm
        ));
    }
    if !(64..=8948).contains(&t.payload) {
        return Err(format!("traffic.payload = {}: expected 64 to 8948 bytes", t.payload));
    }
    if !(1..=4096).contains(&t.window) || !(1..=45).contains(&t.tso_segments) {
        return Err(format!(
            "traffic.window = {}, traffic.tso_segments = {}: expected 1-4096 and 1-45",
            t.window, t.tso_segments
        ));
    }
    if let Some(r) = t.rate {
        if r.bps_f64() <= 0.0 {
            return Err("traffic.rate: expected above 0 (leave it out for as fast as the window allows)".into());
        }
    }
    if let Some(p) = &s.ping {
        if !(p.interval_us.is_finite() && (10.0..=1e6).contains(&p.interval_us)) {
            return Err(format!("ping.interval_us = {}: expected 10 to 1000000", p.interval_us));
        }
    }
    if t.ack_every > 64 {
        return Err(format!("traffic.ack_every = {}: expected 0 (none) to 64", t.ack_every));
    }
    if !(1..=256).contains(&v.tx_batch) {
        return Err(format!("vms.tx_batch = {}: expected 1 to 256", v.tx_batch));
    }
    if let Some(r) = v.irq_rate {
        if !(r.is_finite() && (100.0..=1e6).contains(&r)) {
            return Err(format!(
                "vms.irq_rate = {r}: expected 100 to 1000000 interrupts a second"
            ));
        }
    }
    if t.direction == Direction::Receive {
        let send_only = [
            ("nic.scheduler", n.scheduler != TxScheduler::Fifo),
            ("vms.tx_batch", v.tx_batch != 1),
            ("vms.irq_rate", v.irq_rate.is_some()),
            ("traffic.ack_every", t.ack_every != 0),
        ];
        if let Some((key, _)) = send_only.iter().find(|(_, set)| *set) {
            return Err(format!("{key}: only for traffic.direction = \"send\""));
        }
    }
    let threads = match t.direction {
        Direction::Receive => u32::from(n.queues) + if n.split_rx == SplitMode::Off { 0 } else { v.count },
        // A send thread per VM, and NetIOC's scheduler.
        Direction::Send => v.count + u32::from(n.scheduler == TxScheduler::Netioc),
    };
    if threads > s.host.cores {
        return Err(format!(
            "host.cores = {}: the queues and threads need {threads} (one each)",
            s.host.cores
        ));
    }
    Ok(())
}

fn check_expect(x: &Expect, plan: &ReceivePlan) -> Result<(), String> {
    for v in std::iter::once(&x.variant).chain(&x.to) {
        if !plan.variants.iter().any(|(n, _)| n == v) {
            return Err(format!("no variant named `{v}`"));
        }
    }
    if x.compare == Compare::Difference && x.to.is_none() {
        return Err("compare = \"difference\": name the variant to subtract (`to`)".into());
    }
    if let Some(s) = x.seed {
        if !(s.is_finite() && s > 0.0) {
            return Err(format!("seed = {s}: expected a figure above 0"));
        }
    }
    match (x.seed, x.tolerance, x.min, x.max) {
        (Some(_), Some(t), None, None) if t.is_finite() && t > 0.0 && t < 1.0 => Ok(()),
        (_, None, min, max) if min.is_some() || max.is_some() => match (min, max) {
            (Some(a), Some(b)) if a.is_nan() || b.is_nan() || a > b => {
                Err(format!("min = {a}, max = {b}: expected min <= max"))
            }
            _ => Ok(()),
        },
        _ => Err("give seed with tolerance (between 0 and 1), or min and/or max".into()),
    }
}
