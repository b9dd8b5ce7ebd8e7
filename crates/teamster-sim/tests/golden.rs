//! Golden tests: every scenario in `scenarios/` runs, and every expectation it states holds.

use std::path::{Path, PathBuf};
use teamster_sim::{fluid, simulate, Scenario};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

/// Every scenario runs, spread over the machine's cores (the packet-level ones take seconds
/// each), and states expectations that hold.
#[test]
fn every_bundled_scenario_meets_its_expectations() {
    let out = tempfile::tempdir().unwrap();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 3, "found only {} scenarios", paths.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(4);
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut failed = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(path) = paths.get(i) else { return failed };
                        failed.extend(check(path, &out.path().join(path.file_stem().unwrap())));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Runs one scenario into `out`: what did not hold, if anything.
fn check(path: &Path, out: &Path) -> Vec<String> {
    let o = match simulate(path, out) {
        Ok(o) => o,
        Err(e) => return vec![format!("{}: {e}", path.display())],
    };
    if o.summary.expectations.is_empty() {
        return vec![format!("{}: states no expectations", path.display())];
    }
    (o.summary.expectations.iter())
        .filter(|v| !v.held)
        .map(|v| format!("{}: `{}` did not hold: {}", path.display(), v.name, v.detail))
        .collect()
}

#[test]
fn runs_are_bit_for_bit_reproducible_and_the_seed_matters() {
    let path = scenarios_dir().join("lbt-specweb.toml");
    let s = Scenario::load(&path).unwrap();
    let a = fluid::run(&s).unwrap();
    assert_eq!(a, fluid::run(&s).unwrap());
    let mut other = s.clone();
    other.file.seed += 1;
    assert_ne!(a.rows, fluid::run(&other).unwrap().rows, "the seed drives the jitter");
}

#[test]
fn lbt_study_phases() {
    let s = Scenario::load(&scenarios_dir().join("lbt-specweb.toml")).unwrap();
    let run = fluid::run(&s).unwrap();
    let lbt: Vec<_> = run.moves.iter().filter(|m| m.lbt.is_some()).collect();
    assert_eq!(lbt.len(), 2);
    // Each move leaves uplink1 for uplink2 and keeps uplink2 under 75% of its capacity.
    for m in &lbt {
        assert_eq!((m.from.as_deref(), m.to.as_deref()), (Some("uplink1"), Some("uplink2")));
        assert!(m.lbt.unwrap().to_after.tx <= 0.75);
    }
    // Load is conserved: with LBT nothing is lost (uplink1 never saturates), so delivered = offered.
    for r in &run.rows {
        let offered: f64 = r.offered_tx.iter().sum();
        assert!(
            (offered - r.total_delivered_tx()).abs() < 1.0,
            "t={} lost traffic",
            r.t_s
        );
    }
    // Under the static policy everything above 10 Gbps is lost.
    let st = fluid::run(&Scenario::load(&scenarios_dir().join("lbt-static.toml")).unwrap()).unwrap();
    let last = st.rows.last().unwrap();
    assert!(last.total_offered_tx() > 13e9 && (last.total_delivered_tx() - 10e9).abs() < 1.0);
}
