//! One `teamster simulate` run: load and check everything, run, judge, then write the folder.
//!
//! All input (the scenario and any baseline it names) is checked before anything runs, and the
//! output folder is written beside its final place and renamed into it at the end, so a failed
//! run leaves no partial output and an earlier run's folder intact.

use crate::expect::{self, Verdict};
use crate::fluid::{self, RunOutput};
use crate::report::{self, Summary};
use crate::scenario::{Scenario, ScenarioError};
use std::path::{Path, PathBuf};

/// A finished run and where it was written.
#[derive(Debug)]
pub struct Outcome {
    pub scenario: Scenario,
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
    let scenario = Scenario::load(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut baselines = Vec::new();
    for spec in &scenario.file.expect {
        if let Some(b) = spec.baseline() {
            baselines.push((b.to_string(), Scenario::load(&dir.join(b))?));
        }
    }
    let run_err = |file: &Path| {
        let file = file.display().to_string();
        move |message: String| SimulateError::Run { file, message }
    };
    let run = fluid::run(&scenario).map_err(run_err(path))?;
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
    let summary = Summary::new(&scenario.file.name, &run, verdicts, &out_dir.join("series.csv"));
    write_folder(&scenario, &run, &summary, out_dir)?;
    Ok(Outcome {
        scenario,
        run,
        summary,
        out_dir: out_dir.to_path_buf(),
    })
}

/// Writes the run's files into a fresh sibling folder, then swaps it into `out_dir`.
fn write_folder(scenario: &Scenario, run: &RunOutput, summary: &Summary, out_dir: &Path) -> Result<(), SimulateError> {
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
        let title = format!("{}: per-uplink send throughput", scenario.file.name);
        report::write_plot(run, &title, &tmp.join("throughput.svg")).map_err(err(&tmp.join("throughput.svg")))?;
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
