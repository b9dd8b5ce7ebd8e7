//! The migration run: streams stepped through the hosts' real teams and the switch between them.

use super::fabric::SwitchSide;
use super::scenario::MigrationPlan;
use crate::maxmin::progressive_fill;
use crate::run::{MoveRecord, Row, RunOutput};
use core::net::Ipv4Addr;
use core::time::Duration;
use std::collections::BTreeSet;
use teamster_core::teaming::{Direction, PortId, Team, UplinkId};
use teamster_core::wire::FlowKey;
use teamster_core::Instant;

/// TCP payload per byte on the wire: 1448 bytes of payload (1500-byte MTU, IPv4 and TCP
/// headers with timestamps) per 1538 bytes of Ethernet frame, preamble and gap.
pub const GOODPUT: f64 = 1448.0 / 1538.0;

/// What a migration run produced: the rows and reports of any run, and per migration what it
/// took and where it went.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationRun {
    /// Uplinks are named `host:uplink`; ports are the migrations, `from>to vmN`.
    pub output: RunOutput,
    pub streams: Vec<StreamRecord>,
    /// Simulated seconds until the last migration finished (or the scenario's `duration_s`).
    pub end_s: f64,
    /// Each row's length in seconds (the last may be shorter: it ends at `end_s`).
    pub row_s: f64,
}

/// One VM's migration.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRecord {
    pub name: String,
    pub start_s: Option<f64>,
    pub finish_s: Option<f64>,
    /// Members of the source host it left on, and of the destination host it arrived on.
    pub send_members: BTreeSet<usize>,
    pub receive_members: BTreeSet<usize>,
}

/// A migration under way.
struct Stream {
    record: usize,
    set: usize,
    from: usize,
    to: usize,
    src: PortId,
    dst: PortId,
    flow: FlowKey,
    left_bytes: f64,
    last_bytes: f64,
    last_member: Option<UplinkId>,
}

/// A host during the run.
struct HostState {
    team: Team,
    side: SwitchSide,
    /// Offset of its uplinks among all hosts'.
    first: usize,
}

/// Runs the plan: settles any LACP bundles, then steps the clock until every migration has
/// finished or `duration_s` has passed.
pub fn run(plan: &MigrationPlan) -> Result<MigrationRun, String> {
    let f = &plan.file;
    let mut records = Vec::new();
    for m in &plan.migrations {
        let (a, b) = (&plan.hosts[m.from].name, &plan.hosts[m.to].name);
        for k in 0..m.vms {
            records.push(StreamRecord {
                name: format!("{a}>{b} vm{}", k + 1),
                start_s: None,
                finish_s: None,
                send_members: BTreeSet::new(),
                receive_members: BTreeSet::new(),
            });
        }
    }
    let n = records.len();
    let mut out = RunOutput::new(Vec::new(), Vec::new(), records.iter().map(|r| r.name.clone()).collect());
    out.port_uplinks = vec![None; n];
    let mut hosts = Vec::new();
    // Every host's bundles form before the clock starts: time zero is when the last did.
    let mut start = Instant::ZERO;
    for (h, hp) in plan.hosts.iter().enumerate() {
        let mut team = hp.host.team.clone();
        let mut side = SwitchSide::new(h, &hp.host)?;
        start = start.max(
            side.settle(&mut team, Instant::ZERO)
                .map_err(|e| format!("host `{}`: {e}", hp.name))?,
        );
        let first = out.uplinks.len();
        for u in &hp.host.uplinks {
            out.uplinks.push(format!("{}:{}", hp.name, u.name));
            out.capacities.push(u.capacity.bps_f64());
        }
        for mut line in crate::run::team_lines(&hp.host.groups, &hp.rx_queues) {
            line.group = format!("{}:{}", hp.name, line.group);
            out.teams.push(line);
        }
        hosts.push(HostState { team, side, first });
    }
    let links = out.uplinks.len();
    // Each stream crosses a sending member (first `links` entries) and a receiving one.
    let caps: Vec<f64> = out
        .capacities
        .iter()
        .chain(&out.capacities)
        .map(|c| c * GOODPUT)
        .collect();
    let mut started = vec![0u32; plan.migrations.len()];
    let mut first_record: Vec<usize> = Vec::new();
    let mut acc = 0;
    for m in &plan.migrations {
        first_record.push(acc);
        acc += m.vms as usize;
    }
    let mut active: Vec<Stream> = Vec::new();
    let dt = f.step_s;
    let steps = (f.duration_s / dt).ceil() as u64;
    let mut row = RowSums::new(links, n);
    let per_row = plan.row_steps();
    let mut end_s = f.duration_s;
    for step in 0..steps {
        let t = step as f64 * dt;
        let now = start + Duration::from_secs_f64(t);
        // Start what may start: in file order, up to each set's concurrency.
        for (s, m) in plan.migrations.iter().enumerate() {
            while t + 1e-12 >= m.start_s
                && started[s] < m.vms
                && active.iter().filter(|x| x.set == s).count() < m.concurrency as usize
            {
                let record = first_record[s] + started[s] as usize;
                let (src, dst) = (
                    endpoint(&plan.hosts[m.from].host, started[s] as usize),
                    endpoint(&plan.hosts[m.to].host, started[s] as usize),
                );
                active.push(Stream {
                    record,
                    set: s,
                    from: m.from,
                    to: m.to,
                    src: src.0,
                    dst: dst.0,
                    flow: migration_flow(m.from, src, m.to, dst, record),
                    left_bytes: m.memory as f64,
                    last_bytes: 0.0,
                    last_member: None,
                });
                records[record].start_s = Some(t);
                started[s] += 1;
            }
        }
        if active.is_empty() && started.iter().zip(&plan.migrations).all(|(s, m)| *s == m.vms) {
            end_s = t;
            break;
        }
        // The teams' timers and LACP; moves are recorded by port (endpoint) name.
        for (h, hs) in hosts.iter_mut().enumerate() {
            let moves = hs.side.exchange(&mut hs.team, now);
            if moves.is_empty() {
                continue;
            }
            let names: Vec<String> = out.uplinks[hs.first..hs.first + hs.team.uplink_count()].to_vec();
            for m in moves {
                let port = plan.hosts[h]
                    .host
                    .ports
                    .iter()
                    .find(|p| p.id == m.port)
                    .map(|p| p.name.as_str());
                out.moves.push(MoveRecord::new(t, m, &names, port));
            }
        }
        // Where each stream leaves and arrives: the source team picks (recording the frame
        // for its flowlets and meters), the switch delivers.
        let mut paths = Vec::with_capacity(active.len());
        for s in &mut active {
            let len = s.last_bytes.max(1.0) as usize;
            let out_member = hosts[s.from].team.select_frame(s.src, Some(&s.flow), len, now);
            let dst = &hosts[s.to];
            let in_member = dst.side.arrival(&dst.team, s.dst, &s.flow);
            let mut path = Vec::new();
            if let (Some(o), Some(i)) = (out_member, in_member) {
                if hosts[s.from].team.uplink_usable(o) && dst.side.usable(i) {
                    path = vec![hosts[s.from].first + o.0, links + dst.first + i.0];
                    let r = &mut records[s.record];
                    r.send_members.insert(o.0);
                    r.receive_members.insert(i.0);
                }
            }
            if out_member != s.last_member && s.last_member.is_some() {
                out.member_changes[s.record] += 1;
            }
            s.last_member = out_member;
            paths.push(path);
        }
        let rates = progressive_fill(&caps, &paths);
        for (k, s) in active.iter_mut().enumerate() {
            let bytes = (rates[k] * dt / 8.0).min(s.left_bytes);
            s.left_bytes -= bytes;
            s.last_bytes = bytes;
            let wire = (bytes / GOODPUT) as u64;
            if let [tx, rx] = paths[k][..] {
                let (fh, th) = (&hosts[s.from], &hosts[s.to]);
                let (o, i) = (UplinkId(tx - fh.first), UplinkId(rx - links - th.first));
                hosts[s.from].team.account(s.src, o, Direction::Tx, wire, now);
                hosts[s.to].team.account(s.dst, i, Direction::Rx, wire, now);
                row.link[tx] += wire as f64 * 8.0;
                row.link[rx] += wire as f64 * 8.0;
            }
            row.port[s.record] += bytes * 8.0;
            if s.left_bytes <= 0.5 {
                // It finished part-way through the step, at the rate it had.
                let used = if rates[k] > 0.0 { bytes * 8.0 / rates[k] } else { dt };
                records[s.record].finish_s = Some(t + used);
                out.port_uplinks[s.record] = s.last_member.map(|u| out.uplinks[hosts[s.from].first + u.0].clone());
            }
        }
        active.retain(|s| s.left_bytes > 0.5);
        row.steps += 1;
        if row.steps == per_row {
            out.rows.push(row.take(dt, links));
        }
    }
    if row.steps > 0 {
        out.rows.push(row.take(dt, links));
    }
    Ok(MigrationRun {
        output: out,
        streams: records,
        end_s,
        row_s: per_row as f64 * dt,
    })
}

/// The endpoint the `k`th migration of a set uses on a host: round robin over its endpoints.
fn endpoint(h: &teamster_core::host::Host, k: usize) -> (PortId, teamster_core::wire::MacAddr) {
    let p = &h.ports[k % h.ports.len()];
    (p.id, p.mac)
}

/// The TCP connection of migration number `k` (globally): from an ephemeral port of the source
/// endpoint to port 6600 (Hyper-V's live migration port) of the destination endpoint.
fn migration_flow(
    from: usize,
    src: (PortId, teamster_core::wire::MacAddr),
    to: usize,
    dst: (PortId, teamster_core::wire::MacAddr),
    k: usize,
) -> FlowKey {
    let ip = |h: usize, p: PortId| Ipv4Addr::new(10, 77, h as u8, p.0 as u8);
    FlowKey {
        src_mac: src.1,
        dst_mac: dst.1,
        ether_type: 0x0800,
        src_ip: Some(ip(from, src.0).into()),
        dst_ip: Some(ip(to, dst.0).into()),
        ip_proto: Some(6),
        src_port: Some(49152 + (k % 16384) as u16),
        dst_port: Some(6600),
        ..Default::default()
    }
}

/// Bits carried since the last row, per link (sends, then receives) and per migration.
struct RowSums {
    link: Vec<f64>,
    port: Vec<f64>,
    /// The step the row starts at, and how many it has taken in.
    first: u64,
    steps: u64,
}

impl RowSums {
    fn new(links: usize, ports: usize) -> RowSums {
        RowSums {
            link: vec![0.0; 2 * links],
            port: vec![0.0; ports],
            first: 0,
            steps: 0,
        }
    }

    /// The row so far, as means in bits/s over its steps of `dt`; starts the next.
    fn take(&mut self, dt: f64, links: usize) -> Row {
        let e = self.steps as f64 * dt;
        let mean = |v: &[f64]| v.iter().map(|b| b / e).collect::<Vec<f64>>();
        let port = mean(&self.port);
        let row = Row {
            t_s: self.first as f64 * dt,
            uplink_tx: mean(&self.link[..links]),
            uplink_rx: mean(&self.link[links..]),
            offered_tx: port.clone(),
            delivered_tx: port,
            offered_rx: vec![0.0; self.port.len()],
            delivered_rx: vec![0.0; self.port.len()],
        };
        self.link.iter_mut().for_each(|b| *b = 0.0);
        self.port.iter_mut().for_each(|b| *b = 0.0);
        self.first += self.steps;
        self.steps = 0;
        row
    }
}
