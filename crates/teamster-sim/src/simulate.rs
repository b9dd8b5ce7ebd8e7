//! One `teamster simulate` run: load and check everything, run, judge, then write the folder.
//!
//! The scenario's `mode` (default `fluid`) picks the model: [`crate::fluid`],
//! [`crate::packet`] or [`crate::migration`]. All input (the scenario and any baseline it names) is checked before
//! anything runs, and the output folder is written beside its final place and renamed into it at
//! the end, so a failed run leaves no partial output and an earlier run's folder intact.

use crate::cluster;
use crate::expect::{self, Names, Verdict};
use crate::fluid;
use crate::migration;
use crate::packet::{engine, scenario as packet_scenario};
use crate::receive;
use crate::report::{self, PlotSeries, Summary};
use crate::run::RunOutput;
use crate::scenario::{parse_toml, Scenario, ScenarioError};
use std::path::{Path, PathBuf};

/// What was run, for the report.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub name: String,
    pub description: String,
    pub mode: &'static str,
    pub uplinks: usize,
    pub ports: usize,
    pub duration_s: f64,
    /// The clock step (fluid mode).
    pub step_s: Option<f64>,
    pub seed: u64,
    /// Wall-clock seconds the model took to run (not part of any output file).
    pub wall_s: f64,
}

/// A finished run and where it was written.
#[derive(Debug)]
pub struct Outcome {
    pub info: RunInfo,
    pub run: RunOutput,
    pub summary: Summary,
    pub out_dir: PathBuf,
}

impl Outcome {
    /// True if every expectation held.
    pub fn all_held(&self) -> bool {
        self.summary.expectations.iter().all(|v| v.held)
    }
}

/// Why a run produced nothing.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("{file}: {message}")]
    Run { file: String, message: String },
    #[error("writing {path}: {message}")]
    Output { path: String, message: String },
}

/// Runs the scenario at `path` and writes its folder at `out_dir`.
pub fn simulate(path: &Path, out_dir: &Path) -> Result<Outcome, SimulateError> {
    let file = path.display().to_string();
    let err = |message: String| {
        SimulateError::Scenario(ScenarioError {
            file: file.clone(),
            message,
        })
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let mode = toml::from_str::<toml::Table>(&text)
        .ok()
        .and_then(|t| t.get("mode").and_then(|m| m.as_str().map(String::from)));
    match mode.as_deref() {
        None | Some("fluid") => simulate_fluid(path, out_dir),
        Some("packet") => simulate_packet(path, &text, out_dir),
        Some("migration") => simulate_migration(path, &text, out_dir),
        Some("receive") => simulate_receive(path, &text, out_dir),
        Some("cluster") => simulate_cluster(path, &text, out_dir),
        Some(other) => Err(err(format!(
            "mode = \"{other}\": expected \"fluid\", \"packet\", \"migration\", \"receive\" or \"cluster\""
        ))),
    }
}

fn simulate_fluid(path: &Path, out_dir: &Path) -> Result<Outcome, SimulateError> {
    let scenario = Scenario::load(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut baselines = Vec::new();
    for spec in &scenario.file.expect {
        if let Some(b) = spec.baseline() {
            baselines.push((b.to_string(), Scenario::load(&dir.join(b))?));
        }
    }
    let started = std::time::Instant::now();
    let mut run = fluid::run(&scenario).map_err(run_err(path))?;
    let queues: Vec<u32> = scenario.file.uplinks.iter().map(|u| u.rx_queues).collect();
    run.teams = crate::run::team_lines(&scenario.host.groups, &queues);
    let wall_s = started.elapsed().as_secs_f64();
    let mut baseline_runs = Vec::new();
    for (name, b) in &baselines {
        baseline_runs.push((name.clone(), fluid::run(b).map_err(run_err(&b.path))?));
    }
    let verdicts: Vec<Verdict> = scenario
        .file
        .expect
        .iter()
        .map(|spec| {
            let b = spec
                .baseline()
                .and_then(|n| baseline_runs.iter().find(|(m, _)| m == n))
                .map(|(_, r)| r);
            expect::evaluate(spec, &run, b)
        })
        .collect();
    let f = &scenario.file;
    let info = RunInfo {
        name: f.name.clone(),
        description: f.description.clone(),
        mode: "fluid",
        uplinks: f.uplinks.len(),
        ports: f.ports.len(),
        duration_s: f.duration_s,
        step_s: Some(f.step_s),
        seed: f.seed,
        wall_s,
    };
    finish(info, run, verdicts, out_dir, PlotSeries::Uplinks, Vec::new())
}

fn simulate_packet(path: &Path, text: &str, out_dir: &Path) -> Result<Outcome, SimulateError> {
    let file = path.display().to_string();
    let err = |message: String| {
        SimulateError::Scenario(ScenarioError {
            file: file.clone(),
            message,
        })
    };
    let f: packet_scenario::PacketFile = parse_toml(text).map_err(err)?;
    crate::scenario::check_queues(f.uplinks.iter().map(|u| (u.name.as_str(), u.rx_queues))).map_err(err)?;
    let plan = packet_scenario::resolve(&f).map_err(err)?;
    let names = Names {
        uplinks: f.uplinks.iter().map(|u| u.name.clone()).collect(),
        ports: f.ports.iter().map(|p| p.name.clone()).collect(),
        nodes: plan
            .tree
            .ids()
            .skip(1)
            .map(|id| plan.tree.node(id).spec.name.clone())
            .collect(),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    for (i, x) in f.expect.iter().enumerate() {
        if x.baseline().is_some() {
            return Err(err(format!(
                "expect[{i}]: delivered-matches-baseline is for fluid scenarios"
            )));
        }
        x.check(&names, dir).map_err(|e| err(format!("expect[{i}]: {e}")))?;
    }
    let started = std::time::Instant::now();
    let mut run = engine::run(&plan).map_err(run_err(path))?;
    let queues: Vec<u32> = f.uplinks.iter().map(|u| u.rx_queues).collect();
    run.teams = crate::run::team_lines(&plan.groups, &queues);
    let wall_s = started.elapsed().as_secs_f64();
    let verdicts = f.expect.iter().map(|spec| expect::evaluate(spec, &run, None)).collect();
    let info = RunInfo {
        name: f.name.clone(),
        description: f.description.clone(),
        mode: "packet",
        uplinks: f.uplinks.len(),
        ports: f.ports.len(),
        duration_s: f.duration_s,
        step_s: None,
        seed: f.seed,
        wall_s,
    };
    finish(info, run, verdicts, out_dir, PlotSeries::Ports, Vec::new())
}

fn simulate_migration(path: &Path, text: &str, out_dir: &Path) -> Result<Outcome, SimulateError> {
    let err = |message: String| {
        SimulateError::Scenario(ScenarioError {
            file: path.display().to_string(),
            message,
        })
    };
    let file: migration::MigrationFile = parse_toml(text).map_err(err)?;
    let plan = migration::resolve(file).map_err(err)?;
    let started = std::time::Instant::now();
    let run = migration::run(&plan).map_err(run_err(path))?;
    let wall_s = started.elapsed().as_secs_f64();
    let verdicts = plan
        .file
        .expect
        .iter()
        .map(|x| migration::expect::evaluate(x, &run))
        .collect();
    let f = &plan.file;
    let info = RunInfo {
        name: f.name.clone(),
        description: f.description.clone(),
        mode: "migration",
        uplinks: run.output.uplinks.len(),
        ports: run.streams.len(),
        duration_s: run.end_s,
        step_s: Some(f.step_s),
        seed: f.seed,
        wall_s,
    };
    finish(info, run.output, verdicts, out_dir, PlotSeries::Uplinks, Vec::new())
}

fn simulate_receive(path: &Path, text: &str, out_dir: &Path) -> Result<Outcome, SimulateError> {
    let plan = receive::resolve(text).map_err(|message| {
        SimulateError::Scenario(ScenarioError {
            file: path.display().to_string(),
            message,
        })
    })?;
    let started = std::time::Instant::now();
    let run = receive::run(&plan).map_err(run_err(path))?;
    let wall_s = started.elapsed().as_secs_f64();
    let verdicts = plan.header.expect.iter().map(|x| receive::evaluate(x, &run)).collect();
    let h = &plan.header;
    let info = RunInfo {
        name: h.name.clone(),
        description: h.description.clone(),
        mode: "receive",
        uplinks: 1,
        ports: plan.variants.first().map_or(0, |(_, s)| s.vms.count as usize),
        duration_s: h.duration_ms / 1e3,
        step_s: None,
        seed: h.seed,
        wall_s,
    };
    let output = run.output();
    finish(info, output, verdicts, out_dir, PlotSeries::Variants, run.variants)
}

fn simulate_cluster(path: &Path, text: &str, out_dir: &Path) -> Result<Outcome, SimulateError> {
    let err = |message: String| {
        SimulateError::Scenario(ScenarioError {
            file: path.display().to_string(),
            message,
        })
    };
    let file: cluster::ClusterFile = parse_toml(text).map_err(err)?;
    let plan = cluster::resolve(file).map_err(err)?;
    let started = std::time::Instant::now();
    let (run, decisions) = cluster::run(&plan).map_err(run_err(path))?;
    let wall_s = started.elapsed().as_secs_f64();
    let f = &plan.file;
    let verdicts = (f.expect.iter())
        .map(|x| cluster::expect::evaluate(x, &plan, &run, &decisions))
        .collect();
    let info = RunInfo {
        name: f.name.clone(),
        description: f.description.clone(),
        mode: "cluster",
        uplinks: run.uplinks.len(),
        ports: plan.vms.len(),
        duration_s: f.duration_s,
        step_s: (plan.fidelity == cluster::Fidelity::Fluid).then_some(f.step_s),
        seed: f.seed,
        wall_s,
    };
    // A line per VM while they can be told apart; per uplink beyond.
    let plot = if plan.vms.len() <= 8 {
        PlotSeries::Ports
    } else {
        PlotSeries::Uplinks
    };
    finish(info, run, verdicts, out_dir, plot, Vec::new())
}

fn run_err(file: &Path) -> impl Fn(String) -> SimulateError {
    let file = file.display().to_string();
    move |message: String| SimulateError::Run {
        file: file.clone(),
        message,
    }
}

/// Summarises and writes a finished run.
fn finish(
    info: RunInfo,
    run: RunOutput,
    verdicts: Vec<Verdict>,
    out_dir: &Path,
    plot: PlotSeries,
    variants: Vec<(String, receive::Measured)>,
) -> Result<Outcome, SimulateError> {
    let mut summary = Summary::new(&info.name, &run, verdicts, &out_dir.join("series.csv"));
    summary.variants = variants;
    let title = match plot {
        PlotSeries::Uplinks => format!("{}: per-uplink send throughput", info.name),
        PlotSeries::Ports => format!("{}: per-port throughput", info.name),
        PlotSeries::Variants => format!("{}: delivered throughput per variant", info.name),
    };
    write_folder(&title, plot, &run, &summary, out_dir)?;
    Ok(Outcome {
        info,
        run,
        summary,
        out_dir: out_dir.to_path_buf(),
    })
}

/// Writes the run's files into a fresh sibling folder, then swaps it into `out_dir`.
fn write_folder(
    title: &str,
    plot: PlotSeries,
    run: &RunOutput,
    summary: &Summary,
    out_dir: &Path,
) -> Result<(), SimulateError> {
    let err = |p: &Path| {
        let path = p.display().to_string();
        move |message: String| SimulateError::Output { path, message }
    };
    let parent = out_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| err(parent)(e.to_string()))?;
    let name = out_dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "run".into());
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| err(&tmp)(e.to_string()))?;
    let result = (|| {
        report::write_series(run, &tmp.join("series.csv")).map_err(|e| err(&tmp.join("series.csv"))(e.to_string()))?;
        report::write_moves(run, &tmp.join("moves.csv")).map_err(|e| err(&tmp.join("moves.csv"))(e.to_string()))?;
        if !run.cluster.is_empty() {
            report::write_cluster(run, &tmp.join("cluster.csv"))
                .map_err(|e| err(&tmp.join("cluster.csv"))(e.to_string()))?;
        }
        if run.latencies.iter().any(|l| !l.is_empty()) {
            report::write_latency(run, &tmp.join("latency.csv"))
                .map_err(|e| err(&tmp.join("latency.csv"))(e.to_string()))?;
        }
        report::write_plot(run, title, plot, &tmp.join("throughput.svg")).map_err(err(&tmp.join("throughput.svg")))?;
        crate::web::write_report(run, title, &tmp.join("report.html"))
            .map_err(|e| err(&tmp.join("report.html"))(e.to_string()))?;
        report::write_summary(summary, &tmp.join("summary.json"))
            .map_err(|e| err(&tmp.join("summary.json"))(e.to_string()))?;
        if out_dir.exists() {
            std::fs::remove_dir_all(out_dir).map_err(|e| err(out_dir)(e.to_string()))?;
        }
        std::fs::rename(&tmp, out_dir).map_err(|e| err(out_dir)(e.to_string()))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}
