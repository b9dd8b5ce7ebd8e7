//! Golden tests: every scenario in `scenarios/` runs, and every expectation it states holds.

use std::path::{Path, PathBuf};
use teamster_sim::{fluid, simulate, Scenario};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

#[test]
fn every_bundled_scenario_meets_its_expectations() {
    let out = tempfile::tempdir().unwrap();
    let mut ran = 0;
    for entry in std::fs::read_dir(scenarios_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let o = simulate(&path, &out.path().join(path.file_stem().unwrap())).unwrap();
            assert!(
                !o.summary.expectations.is_empty(),
                "{}: states no expectations",
                path.display()
            );
            for v in &o.summary.expectations {
                assert!(v.held, "{}: `{}` did not hold: {}", path.display(), v.name, v.detail);
            }
            ran += 1;
        }
    }
    assert!(ran >= 3, "found only {ran} scenarios");
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
