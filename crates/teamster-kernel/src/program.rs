//! The loaded program and its maps: [`SwitchProgram::load`] loads the committed object
//! (`bpf/switch.bpf.o`), [`SwitchProgram::write`] brings the maps to a [`Tables`] (writing only what
//! changed, so a failover is one or two map updates), [`SwitchProgram::attach`] puts the program on an
//! interface's tcx ingress, and [`SwitchProgram::run`] runs it on one frame under BPF_PROG_TEST_RUN
//! (the differential test's way in).

use crate::abi::{self, Config, Domain, FdbEntry, FdbKey, Flowlet, Group, Iface, SlotInfo, Stats, Verdict};
use crate::tables::Tables;
use aya::maps::{Array, HashMap, MapData, PerCpuArray, PerCpuValues};
use aya::programs::links::FdLink;
use aya::programs::tc::{SchedClassifierLink, TcAttachOptions, TcAttachType};
use aya::programs::{LinkOrder, SchedClassifier, TestRun, TestRunOptions};
use aya::{Ebpf, EbpfLoader};
use std::collections::BTreeSet;

/// The program, built from `bpf/switch.bpf.c` by `bpf/build.sh` (see there).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/switch.bpf.o");
const PROGRAM: &str = "teamster_switch";

/// What went wrong, with what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("loading the kernel path's BPF object: {0}")]
    Load(#[source] Box<aya::EbpfError>),
    #[error("the kernel refused the switch program: {0}")]
    Program(#[source] Box<aya::programs::ProgramError>),
    #[error("the kernel path's map `{map}`: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error("attaching the switch program to {iface} (tcx ingress): {source}")]
    Attach {
        iface: String,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    #[error("the switch program's tcx link on {iface}: {source}")]
    Link {
        iface: String,
        #[source]
        source: Box<aya::programs::links::LinkError>,
    },
}

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> Error {
    move |e| Error::Map {
        map,
        source: Box::new(e),
    }
}

/// A removal's result, a key already gone counting as done: writes are repeated after a
/// failure part-way, and the program may have removed an entry meanwhile.
fn gone_ok(r: Result<(), aya::maps::MapError>) -> Result<(), aya::maps::MapError> {
    match r {
        Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        r => r,
    }
}

fn map<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> &'a mut aya::maps::Map {
    ebpf.map_mut(name).expect("the object declares every map")
}

/// A flowlet bucket's target as the program reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Not placed by the engine: the program hands the bucket's next frame to it (or, while the
    /// engine is gone, sends it on the bucket's hashed member).
    Unplaced,
    /// Placed without a target while an active member is live: the engine places its next
    /// flowlet (on the least loaded member, which sets its target); its burst goes on.
    Open,
    /// Placed, with no target the program can use: its flowlets take the bucket's hashed member
    /// (active[bucket mod n], or the fallback), as the engine's do.
    Hashed,
    /// The target uplink's slot.
    Slot(u32),
}

/// The loaded fast path; see the module documentation.
pub struct SwitchProgram {
    ebpf: Ebpf,
    /// What the maps hold now (the last [`SwitchProgram::write`]).
    written: Tables,
}

impl SwitchProgram {
    /// Loads the program and creates its maps, the MAC table sized for `total_macs` learned
    /// addresses beside the ports' configured ones. Needs CAP_BPF (root).
    pub fn load(total_macs: usize) -> Result<SwitchProgram, Error> {
        let fdb = u32::try_from(total_macs + abi::MAX_SLOTS).unwrap_or(u32::MAX);
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("fdb", fdb)
            .load(OBJECT)
            .map_err(|e| Error::Load(Box::new(e)))?;
        let prog: &mut SchedClassifier = ebpf
            .program_mut(PROGRAM)
            .expect("the object has the switch program")
            .try_into()
            .map_err(|e| Error::Program(Box::new(e)))?;
        prog.load().map_err(|e| Error::Program(Box::new(e)))?;
        Ok(SwitchProgram {
            ebpf,
            written: Tables::default(),
        })
    }

    fn prog(&self) -> &SchedClassifier {
        self.ebpf
            .program(PROGRAM)
            .expect("loaded")
            .try_into()
            .expect("a tc program")
    }

    fn prog_mut(&mut self) -> &mut SchedClassifier {
        self.ebpf
            .program_mut(PROGRAM)
            .expect("loaded")
            .try_into()
            .expect("a tc program")
    }

    /// Takes the punt ring map out (for the reader that drains it).
    pub fn take_punts(&mut self) -> Result<aya::maps::PerfEventArray<MapData>, Error> {
        let map = self.ebpf.take_map("punts").expect("declared");
        aya::maps::PerfEventArray::try_from(map).map_err(map_err("punts"))
    }

    /// Attaches the program to `iface`'s tcx ingress, ahead of anything there, or right behind
    /// `after` (an earlier run's link, which then keeps deciding until it is removed). The link
    /// is the caller's: dropping it (and removing its pin, if pinned) takes the program off.
    pub fn attach(&mut self, iface: &str, after: Option<&SchedClassifierLink>) -> Result<FdLink, Error> {
        let failed = |e: aya::programs::ProgramError| Error::Attach {
            iface: iface.into(),
            source: Box::new(e),
        };
        let link_failed = |e: aya::programs::links::LinkError| Error::Link {
            iface: iface.into(),
            source: Box::new(e),
        };
        let order = match after {
            Some(l) => LinkOrder::after_link(l).map_err(link_failed)?,
            None => LinkOrder::first(),
        };
        let prog = self.prog_mut();
        let id = prog
            .attach_with_options(iface, TcAttachType::Ingress, TcAttachOptions::TcxOrder(order))
            .map_err(failed)?;
        let link = prog.take_link(id).map_err(failed)?;
        FdLink::try_from(link).map_err(link_failed)
    }

    /// Brings the maps from what they hold to `t`: entries that changed are written, those gone
    /// removed (with the MAC-table entries of freed slots). Configuration first, then what
    /// frames are sent to, then what refers to it, so no frame is switched to a half-written
    /// entry.
    pub fn write(&mut self, t: &Tables) -> Result<(), Error> {
        {
            let mut m: Array<&mut MapData, Config> =
                Array::try_from(map(&mut self.ebpf, "config")).map_err(map_err("config"))?;
            // Stamped: the program hands the engine nothing while the stamp is old (it is gone).
            let config = Config {
                engine_ns: monotonic_ns(),
                ..t.config
            };
            m.set(0, config, 0).map_err(map_err("config"))?;
        }
        {
            let mut m: Array<&mut MapData, SlotInfo> =
                Array::try_from(map(&mut self.ebpf, "slots")).map_err(map_err("slots"))?;
            for (slot, info) in &t.slots {
                if self.written.slots.get(slot) != Some(info) {
                    m.set(*slot, *info, 0).map_err(map_err("slots"))?;
                }
            }
        }
        {
            let mut m: Array<&mut MapData, Group> =
                Array::try_from(map(&mut self.ebpf, "groups")).map_err(map_err("groups"))?;
            for (i, g) in t.groups.iter().enumerate() {
                if self.written.groups.get(i) != Some(g) {
                    m.set(i as u32, *g, 0).map_err(map_err("groups"))?;
                }
            }
        }
        {
            // An array: a domain gone is written empty (no members: none, to the program).
            let mut m: Array<&mut MapData, Domain> =
                Array::try_from(map(&mut self.ebpf, "domains")).map_err(map_err("domains"))?;
            for (d, v) in &t.domains {
                if self.written.domains.get(d) != Some(v) {
                    m.set(abi::domain_index(*d), **v, 0).map_err(map_err("domains"))?;
                }
            }
            for d in self.written.domains.keys().filter(|d| !t.domains.contains_key(d)) {
                m.set(abi::domain_index(*d), Domain::default(), 0)
                    .map_err(map_err("domains"))?;
            }
        }
        {
            let mut m: HashMap<&mut MapData, FdbKey, u32> =
                HashMap::try_from(map(&mut self.ebpf, "own_macs")).map_err(map_err("own_macs"))?;
            for mac in &t.own_macs {
                m.insert(FdbKey { domain: 0, mac: *mac }, 1, 0)
                    .map_err(map_err("own_macs"))?;
            }
            for mac in self.written.own_macs.difference(&t.own_macs) {
                m.remove(&FdbKey { domain: 0, mac: *mac })
                    .map_err(map_err("own_macs"))?;
            }
        }
        {
            let mut m: HashMap<&mut MapData, u32, Iface> =
                HashMap::try_from(map(&mut self.ebpf, "ifaces")).map_err(map_err("ifaces"))?;
            for (ifindex, i) in &t.ifaces {
                if self.written.ifaces.get(ifindex) != Some(i) {
                    m.insert(*ifindex, *i, 0).map_err(map_err("ifaces"))?;
                }
            }
            for ifindex in self.written.ifaces.keys().filter(|i| !t.ifaces.contains_key(i)) {
                gone_ok(m.remove(ifindex)).map_err(map_err("ifaces"))?;
            }
        }
        self.write_statics(t)?;
        {
            let mut m: Array<&mut MapData, SlotInfo> =
                Array::try_from(map(&mut self.ebpf, "slots")).map_err(map_err("slots"))?;
            for slot in self.written.slots.keys().filter(|s| !t.slots.contains_key(s)) {
                m.set(*slot, SlotInfo::default(), 0).map_err(map_err("slots"))?;
            }
        }
        self.written = t.clone();
        Ok(())
    }

    /// Puts the configured port MACs in the MAC table (over a learned entry for the same
    /// address, whose count goes), and takes out those gone and every entry of a freed slot.
    fn write_statics(&mut self, t: &Tables) -> Result<(), Error> {
        // Nothing to do unless slots were freed or the configured MACs changed: the table is
        // read whole only then (two system calls an entry: a full table of learned addresses,
        // which any host outside can fill, would cost a CPU if read every turn).
        if t.freed.is_empty() && t.statics == self.written.statics && !self.written.ifaces.is_empty() {
            return Ok(());
        }
        let freed: BTreeSet<u32> = t.freed.iter().copied().collect();
        let old = self.written.statics.clone();
        let entries = self.fdb()?;
        let mut fdb: HashMap<&mut MapData, FdbKey, FdbEntry> =
            HashMap::try_from(self.ebpf.map_mut("fdb").expect("declared")).map_err(map_err("fdb"))?;
        let mut forgotten = Vec::new();
        for (k, e) in &entries {
            let learned = e.flags & abi::FDB_STATIC == 0;
            let stale_static = !learned && !t.statics.contains_key(k);
            let shadowed = learned && t.statics.contains_key(k);
            // (Gone already if the program moved it meanwhile.)
            if (freed.contains(&e.slot) || stale_static || shadowed) && fdb.remove(k).is_ok() && learned {
                forgotten.push(e.slot);
            }
        }
        for (k, slot) in &t.statics {
            if old.get(k) != Some(slot) || !entries.iter().any(|(e, _)| e == k) {
                let e = FdbEntry {
                    seen: 0,
                    slot: *slot,
                    flags: abi::FDB_STATIC,
                };
                fdb.insert(*k, e, 0).map_err(map_err("fdb"))?;
            }
        }
        let mut counts: Array<&mut MapData, u64> =
            Array::try_from(self.ebpf.map_mut("learned").expect("declared")).map_err(map_err("learned"))?;
        for slot in forgotten {
            let total = counts.get(&(abi::MAX_SLOTS as u32), 0).map_err(map_err("learned"))?;
            counts
                .set(abi::MAX_SLOTS as u32, total.saturating_sub(1), 0)
                .map_err(map_err("learned"))?;
            let n = counts.get(&slot, 0).map_err(map_err("learned"))?;
            counts.set(slot, n.saturating_sub(1), 0).map_err(map_err("learned"))?;
        }
        for slot in &freed {
            counts.set(*slot, 0, 0).map_err(map_err("learned"))?;
        }
        let mut sent: Array<&mut MapData, u64> =
            Array::try_from(map(&mut self.ebpf, "sent_out")).map_err(map_err("sent_out"))?;
        for slot in &freed {
            sent.set(*slot, 0, 0).map_err(map_err("sent_out"))?;
        }
        let mut stats: PerCpuArray<&mut MapData, Stats> =
            PerCpuArray::try_from(map(&mut self.ebpf, "stats")).map_err(map_err("stats"))?;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| Error::Map {
            map: "stats",
            source: Box::new(aya::maps::MapError::SyscallError(aya::sys::SyscallError {
                call: "nr_cpus",
                io_error: e,
            })),
        })?;
        for slot in &freed {
            let zero = PerCpuValues::try_from(vec![Stats::default(); cpus]).expect("one per CPU");
            stats.set(*slot, zero, 0).map_err(map_err("stats"))?;
        }
        Ok(())
    }

    /// Records that the port in `slot` sent a frame out of an uplink at `at_ns` (the kernel's
    /// clock), as the program does for what it forwards: a seam for tests that stage what
    /// another CPU may write between the program's reading of the clock and its use of it.
    #[doc(hidden)]
    pub fn mark_sent_out(&mut self, slot: u32, at_ns: u64) -> Result<(), Error> {
        let mut sent: Array<&mut MapData, u64> =
            Array::try_from(map(&mut self.ebpf, "sent_out")).map_err(map_err("sent_out"))?;
        sent.set(slot, at_ns, 0).map_err(map_err("sent_out"))
    }

    /// Flowlet bucket `index` (group * [`abi::FLOWLET_BUCKETS`] + bucket) as the program keeps it.
    pub fn flowlet(&self, index: u32) -> Result<Flowlet, Error> {
        let m: Array<&MapData, Flowlet> =
            Array::try_from(self.ebpf.map("flowlets").expect("declared")).map_err(map_err("flowlets"))?;
        m.get(&index, 0).map_err(map_err("flowlets"))
    }

    /// Sets flowlet bucket `index` (only while it has no target: the program leaves it alone).
    pub fn put_flowlet(&mut self, index: u32, f: Flowlet) -> Result<(), Error> {
        let mut m: Array<&mut MapData, Flowlet> =
            Array::try_from(map(&mut self.ebpf, "flowlets")).map_err(map_err("flowlets"))?;
        m.set(index, f, 0).map_err(map_err("flowlets"))
    }

    /// Sets flowlet bucket `index`'s target (see [`Target`]).
    pub fn put_flowlet_target(&mut self, index: u32, target: Target) -> Result<(), Error> {
        let mut m: Array<&mut MapData, u32> =
            Array::try_from(map(&mut self.ebpf, "flowlet_targets")).map_err(map_err("flowlet_targets"))?;
        let raw = match target {
            Target::Unplaced => 0,
            Target::Open => abi::FLOWLET_OPEN,
            Target::Hashed => abi::FLOWLET_HASHED,
            Target::Slot(s) => s + 1,
        };
        m.set(index, raw, 0).map_err(map_err("flowlet_targets"))
    }

    /// Stamps the tables as written by a live engine at `at_ns` (CLOCK_MONOTONIC), as every
    /// [`SwitchProgram::write`] does: a seam for tests that stage an engine gone (an old stamp)
    /// or keep a long run without writes alive.
    #[doc(hidden)]
    pub fn stamp_engine(&mut self, at_ns: u64) -> Result<(), Error> {
        let mut m: Array<&mut MapData, Config> =
            Array::try_from(map(&mut self.ebpf, "config")).map_err(map_err("config"))?;
        let config = Config {
            engine_ns: at_ns,
            ..self.written.config
        };
        m.set(0, config, 0).map_err(map_err("config"))
    }

    /// Every MAC-table entry, learned and configured.
    pub fn fdb(&self) -> Result<Vec<(FdbKey, FdbEntry)>, Error> {
        let m: HashMap<&MapData, FdbKey, FdbEntry> =
            HashMap::try_from(self.ebpf.map("fdb").expect("declared")).map_err(map_err("fdb"))?;
        m.iter().collect::<Result<_, _>>().map_err(map_err("fdb"))
    }

    /// Writes a learned entry the engine made (an address it learned or moved while switching a
    /// punted frame), heard at `seen` (the kernel's clock), and adjusts the counts. An address
    /// configured on a port stays as it is.
    pub fn put_learned(&mut self, key: FdbKey, slot: u32, seen: u64, behind_port: bool) -> Result<(), Error> {
        let old = self.fdb_entry(&key)?;
        if old.is_some_and(|e| e.flags & abi::FDB_STATIC != 0) {
            return Ok(());
        }
        let e = FdbEntry { seen, slot, flags: 0 };
        let mut fdb: HashMap<&mut MapData, FdbKey, FdbEntry> =
            HashMap::try_from(map(&mut self.ebpf, "fdb")).map_err(map_err("fdb"))?;
        fdb.insert(key, e, 0).map_err(map_err("fdb"))?;
        if let Some(old) = old {
            self.count(old.slot, -1, self.written_port(old.slot))?;
        }
        self.count(slot, 1, behind_port)
    }

    /// Removes the learned entry for `key`, if there is one, and adjusts the counts.
    pub fn forget(&mut self, key: FdbKey) -> Result<(), Error> {
        let Some(old) = self.fdb_entry(&key)? else {
            return Ok(());
        };
        if old.flags & abi::FDB_STATIC != 0 {
            return Ok(());
        }
        let mut fdb: HashMap<&mut MapData, FdbKey, FdbEntry> =
            HashMap::try_from(map(&mut self.ebpf, "fdb")).map_err(map_err("fdb"))?;
        // Gone already if the program moved it meanwhile: nothing to do then.
        if fdb.remove(&key).is_ok() {
            self.count(old.slot, -1, self.written_port(old.slot))?;
        }
        Ok(())
    }

    /// Sets the learned counts to what `entries` (a dump of the table) holds, which corrects any
    /// drift between the program's counting and ours.
    pub fn recount(&mut self, entries: &[(FdbKey, FdbEntry)]) -> Result<(), Error> {
        let mut per_slot = vec![0u64; abi::MAX_SLOTS + 1];
        for (_, e) in entries.iter().filter(|(_, e)| e.flags & abi::FDB_STATIC == 0) {
            per_slot[abi::MAX_SLOTS] += 1;
            if (e.slot as usize) < abi::MAX_SLOTS && self.written_port(e.slot) {
                per_slot[e.slot as usize] += 1;
            }
        }
        let mut counts: Array<&mut MapData, u64> =
            Array::try_from(map(&mut self.ebpf, "learned")).map_err(map_err("learned"))?;
        for (i, n) in per_slot.into_iter().enumerate() {
            counts.set(i as u32, n, 0).map_err(map_err("learned"))?;
        }
        Ok(())
    }

    fn fdb_entry(&self, key: &FdbKey) -> Result<Option<FdbEntry>, Error> {
        let fdb: HashMap<&MapData, FdbKey, FdbEntry> =
            HashMap::try_from(self.ebpf.map("fdb").expect("declared")).map_err(map_err("fdb"))?;
        match fdb.get(key, 0) {
            Ok(e) => Ok(Some(e)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err("fdb")(e)),
        }
    }

    /// True if `slot` is a port's in the tables last written.
    fn written_port(&self, slot: u32) -> bool {
        let ifindex = self.written.slots.get(&slot).map(|s| s.ifindex);
        ifindex
            .and_then(|i| self.written.ifaces.get(&i))
            .is_some_and(|i| i.kind == abi::KIND_PORT)
    }

    /// Adds `by` to the total count and, for a port, to `slot`'s.
    fn count(&mut self, slot: u32, by: i64, behind_port: bool) -> Result<(), Error> {
        let mut counts: Array<&mut MapData, u64> =
            Array::try_from(map(&mut self.ebpf, "learned")).map_err(map_err("learned"))?;
        let mut add = |i: u32| -> Result<(), Error> {
            let n = counts.get(&i, 0).map_err(map_err("learned"))?;
            counts
                .set(i, n.saturating_add_signed(by), 0)
                .map_err(map_err("learned"))
        };
        add(abi::MAX_SLOTS as u32)?;
        if behind_port && (slot as usize) < abi::MAX_SLOTS {
            add(slot)?;
        }
        Ok(())
    }

    /// Runs the program once on `frame` as if it arrived on `ifindex`, and returns its verdict
    /// (BPF_PROG_TEST_RUN on the calling CPU, which the caller pins to `cpu`).
    pub fn run(&self, ifindex: u32, frame: &[u8], cpu: usize) -> Result<(u32, Verdict), Error> {
        let r = self.test_run(ifindex, frame)?;
        let m: PerCpuArray<&MapData, Verdict> =
            PerCpuArray::try_from(self.ebpf.map("verdict").expect("declared")).map_err(map_err("verdict"))?;
        let v: PerCpuValues<Verdict> = m.get(&0, 0).map_err(map_err("verdict"))?;
        Ok((r.return_value, v[cpu]))
    }

    /// Runs the program once on `frame` as if it arrived on `ifindex`, and returns how long the
    /// kernel measured the run (BPF_PROG_TEST_RUN's duration: the program and the test run's own
    /// few hundred nanoseconds). The cold-run benchmark's way in.
    pub fn time_run(&self, ifindex: u32, frame: &[u8]) -> Result<std::time::Duration, Error> {
        Ok(self.test_run(ifindex, frame)?.duration)
    }

    fn test_run(&self, ifindex: u32, frame: &[u8]) -> Result<aya::programs::TestRunResult, Error> {
        // struct __sk_buff: only ifindex (at byte 40) set; the kernel takes the rest from the frame.
        let mut ctx = [0u8; 192];
        ctx[40..44].copy_from_slice(&ifindex.to_ne_bytes());
        let mut out = vec![0u8; frame.len() + 64];
        let opts = TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ctx_in: Some(&ctx),
            ..TestRunOptions::default()
        };
        self.prog().test_run(opts).map_err(|e| Error::Program(Box::new(e)))
    }

    /// The counters of `slot`, summed over CPUs.
    pub fn stats(&self, slot: u32) -> Result<Stats, Error> {
        let m: PerCpuArray<&MapData, Stats> =
            PerCpuArray::try_from(self.ebpf.map("stats").expect("declared")).map_err(map_err("stats"))?;
        let per_cpu = m.get(&slot, 0).map_err(map_err("stats"))?;
        let mut sum = Stats::default();
        for s in per_cpu.iter() {
            sum.add(s);
        }
        Ok(sum)
    }
}

/// The names of the programs on `interface`'s tcx ingress (the switch's is `teamster_switch`).
pub fn tcx_ingress_programs(interface: &str) -> Result<Vec<String>, Error> {
    let (_, infos) =
        SchedClassifier::query_tcx(interface, TcAttachType::Ingress).map_err(|e| Error::Program(Box::new(e)))?;
    Ok(infos
        .iter()
        .map(|i| i.name_as_str().unwrap_or("?").to_string())
        .collect())
}

/// CLOCK_MONOTONIC in ns: bpf_ktime_get_ns()'s clock.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
