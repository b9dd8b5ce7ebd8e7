//! `teamster-sim`: runs a scenario in the simulator, prints each expectation and whether it
//! held, and writes the run's folder (CSV series, moves, SVG plot, report.html, summary.json).
//!
//! ```text
//! teamster-sim SCENARIO [--out DIR] [--json]
//! teamster-sim --whatif < REQUEST.json
//! ```
//!
//! Exit status: 0 if every expectation held, 1 if one did not, 2 on bad input. `teamster
//! simulate ARGS...` runs this binary, installed beside `teamster`, with the same arguments.
//!
//! `--whatif` answers a what-if (`teamster_sim::whatif::Request`): a JSON object on standard
//! input, `{"scenario": TEXT, "changes": [...], "evidence": {...}, "fidelity": "fluid"}`, and
//! the answer as JSON on standard output; changes that do not fit the scenario are an error on
//! standard error and exit status 2, a request or scenario that is bad in itself exit status 3,
//! a question the model asked for cannot answer (the packet model's bounds) exit status 4. The
//! switch runs it for `POST /api/v1/whatif` and `teamster ctl whatif`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use teamster_sim::run::gbps;

#[derive(Parser)]
#[command(
    name = "teamster-sim",
    version,
    about = "Run a scenario in Teamster's simulator and check its expectations"
)]
struct Cli {
    /// The scenario file (TOML), e.g. scenarios/lbt-specweb.toml.
    #[arg(required_unless_present = "whatif")]
    scenario: Option<PathBuf>,
    /// Answer a what-if: `{"scenario": TEXT, "changes": [...]}` on standard input, the answer
    /// as JSON on standard output.
    #[arg(long, conflicts_with_all = ["scenario", "out", "json"])]
    whatif: bool,
    /// The run's output folder [default: out/<scenario name>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the summary as JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    // Output piped into `head` ends quietly, as for any Unix tool, rather than a panic on the
    // closed pipe.
    // SAFETY: restoring a signal's default disposition at start, before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    match cli.scenario {
        Some(scenario) if !cli.whatif => simulate(scenario, cli.out, cli.json),
        _ => whatif(),
    }
}

/// Answers the what-if on standard input (see the module documentation): exit status 2 when
/// the changes do not fit the past, 3 when the request or the past itself is bad.
fn whatif() -> ExitCode {
    let mut input = String::new();
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut input) {
        eprintln!("error: reading the what-if: {e}");
        return ExitCode::from(3);
    }
    let request = match serde_json::from_str::<teamster_sim::whatif::Request>(&input) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: the what-if: {e}");
            return ExitCode::from(3);
        }
    };
    let path = std::path::Path::new("the switch's past");
    match teamster_sim::whatif::answer(&request, path) {
        Ok(a) => match serde_json::to_string(&a) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(3)
            }
        },
        Err(e @ teamster_sim::whatif::WhatIfError::Changes(_)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e @ teamster_sim::whatif::WhatIfError::Unsupported(_)) => {
            eprintln!("error: {e}");
            ExitCode::from(4)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(3)
        }
    }
}

/// Runs one scenario and reports it; see the module documentation for the exit status.
fn simulate(scenario: PathBuf, out: Option<PathBuf>, json: bool) -> ExitCode {
    let stem = scenario
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "run".into());
    let out = out.unwrap_or_else(|| PathBuf::from("out").join(stem));
    let outcome = match teamster_sim::simulate(&scenario, &out) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&outcome.summary) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print_text(&outcome);
    }
    if outcome.all_held() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_text(o: &teamster_sim::Outcome) {
    let f = &o.info;
    println!("scenario {} ({} mode): {}", f.name, f.mode, f.description.trim());
    if !o.summary.variants.is_empty() {
        print_variants(o);
    } else {
        let step = f.step_s.map_or(String::new(), |s| format!(" in steps of {s} s"));
        println!(
            "  {} uplinks, {} ports, {:.0} s{step}, seed {}",
            f.uplinks, f.ports, f.duration_s, f.seed
        );
    }
    if o.run.packets > 0 {
        println!(
            "  simulated {} packets in {:.2} s of wall time: {:.2} M packets per wall second",
            o.run.packets,
            f.wall_s,
            o.run.packets as f64 / f.wall_s.max(1e-9) / 1e6
        );
    }
    for (i, l) in o.run.latencies.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
        let (p50, n) = teamster_sim::expect::latency(&o.run, i, 50.0, 0.0, f64::INFINITY);
        let (p99, _) = teamster_sim::expect::latency(&o.run, i, 99.0, 0.0, f64::INFINITY);
        println!(
            "  {}: {n} TCP_RR transactions, p50 {p50:.1} µs, p99 {p99:.1} µs over the run",
            o.run.ports[i],
            n = l.len().min(n)
        );
    }
    // The timeline: events and moves in time order (an event before the moves it caused).
    let mut lines: Vec<(f64, u8, String)> = o
        .run
        .events
        .iter()
        .map(|(t, e)| (*t, 0, format!("event: {e}")))
        .collect();
    for m in &o.run.moves {
        let (from, to) = (m.from.as_deref().unwrap_or("none"), m.to.as_deref().unwrap_or("none"));
        lines.push((m.t_s, 1, format!("move: {} {from} -> {to} ({})", m.port, m.reason)));
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let decimals = if f.duration_s < 10.0 { 3 } else { 1 };
    const SHOWN: usize = 40;
    for (t, _, line) in lines.iter().take(SHOWN) {
        println!("  {t:>7.decimals$} s  {line}");
    }
    if lines.len() > SHOWN {
        println!("  ... and {} more (moves.csv, summary.json)", lines.len() - SHOWN);
    }
    if !o.run.cluster.is_empty() {
        println!("  cluster: time, reservations that cannot be kept, migrations, faults, refusals so far");
        for c in o.run.cluster.iter().take(SHOWN) {
            println!(
                "  {:>7.decimals$} s  {:>5} broken  {:>5} migrations  {:>4} faults  {:>4} refusals",
                c.t_s, c.violated, c.migrations, c.faults, c.refusals
            );
        }
    }
    if let Some(last) = o.run.rows.last().filter(|_| o.summary.variants.is_empty()) {
        let mut per: Vec<String> = o
            .run
            .uplinks
            .iter()
            .zip(&last.uplink_tx)
            .take(8)
            .map(|(n, v)| format!("{n} {}", gbps(*v)))
            .collect();
        if o.run.uplinks.len() > 8 {
            per.push(format!("{} more uplinks", o.run.uplinks.len() - 8));
        }
        println!(
            "  at the end: {}; delivered {}",
            per.join(", "),
            gbps(last.total_delivered())
        );
    }
    for t in &o.summary.teams {
        let members: Vec<String> = t.member_queues.iter().map(u32::to_string).collect();
        println!(
            "port group {}: {}, {}; VMQs offered {} (members' receive queues {})",
            t.group,
            t.policy,
            t.mode,
            t.vmq_queues,
            members.join(" + ")
        );
    }
    println!("expectations:");
    for v in &o.summary.expectations {
        println!(
            "  [{}] {}: {}",
            if v.held { "held" } else { "FAILED" },
            v.name,
            v.detail
        );
    }
    let held = o.summary.expectations.iter().filter(|v| v.held).count();
    println!(
        "{held} of {} expectations held; output in {}",
        o.summary.expectations.len(),
        o.out_dir.display()
    );
}

/// Receive mode: each variant's figures over the measured window, one line each.
fn print_variants(o: &teamster_sim::Outcome) {
    let f = &o.info;
    println!("  {:.0} ms per variant, seed {}", f.duration_s * 1e3, f.seed);
    let width = o
        .summary
        .variants
        .iter()
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0)
        .max(7);
    println!(
        "  {:width$}  {:>6}  {:>10}  {:>11}  {:>10}  {:>6}  {:>6}  {:>8}  {:>7}",
        "variant", "Gbps", "host cores", "guest cores", "cores/Gbps", "queues", "drops", "ping us", "irq k/s"
    );
    for (name, m) in &o.summary.variants {
        // A send run's probe is one way (vNIC to wire), a receive run's a round trip.
        let ping = match (m.ping_us, m.send_latency_us) {
            (_, Some(one_way)) => format!("{one_way:.1} 1w"),
            (Some(p), None) => format!("{p:.1}"),
            _ => "-".to_string(),
        };
        println!(
            "  {name:width$}  {:>6.2}  {:>10.2}  {:>11.2}  {:>10.3}  {:>6}  {:>6}  {ping:>8}  {:>7.1}",
            m.throughput_gbps,
            m.host_cpu,
            m.guest_cpu,
            m.cpu_per_gbps,
            m.queues_used,
            m.drops,
            m.guest_irqs_per_s / 1e3
        );
    }
}
