//! Bad scenarios get an error naming the file, the key and what was expected, and write nothing.

use std::path::Path;
use teamster_sim::{fluid, simulate, Scenario};

const GOOD: &str = r#"
name = "t"
duration_s = 10
[[uplinks]]
name = "u1"
capacity = "1G"
[[uplinks]]
name = "u2"
capacity = "1G"
[[port_groups]]
name = "g"
policy = "load-based"
active = ["u1", "u2"]
[[ports]]
name = "p"
group = "g"
tx = { kind = "constant", rate = "100M" }
"#;

fn err(text: &str) -> String {
    Scenario::from_str(text, Path::new("bad.toml")).unwrap_err().to_string()
}

#[test]
fn the_reference_scenario_loads() {
    Scenario::from_str(GOOD, Path::new("good.toml")).unwrap();
}

#[test]
fn errors_name_the_file_the_key_and_the_expectation() {
    let cases = [
        (GOOD.replace("\"1G\"\n[[uplinks]]", "\"1GB\"\n[[uplinks]]"), "bytes"),
        (GOOD.replace("active = [\"u1\", \"u2\"]", "active = [\"u1\", \"u9\"]"), "port_groups[0].active[1]: no uplink named `u9`"),
        (GOOD.replace("group = \"g\"", "group = \"nope\""), "ports[0].group: no port group named `nope`"),
        (GOOD.replace("policy = \"load-based\"", "policy = \"round-robin\""), "unknown variant `round-robin`"),
        (
            GOOD.replace("\"1G\"\n[[uplinks]]", "\"1G\"\nrx_queues = 0\n[[uplinks]]"),
            "uplinks[0].rx_queues: 0 for `u1` is out of range 1-4096",
        ),
        (
            GOOD.replace("policy = \"load-based\"", "policy = \"load-based\"\nmode = \"static\""),
            "port_groups[0].policy: `load-based` is switch independent only",
        ),
        (GOOD.replace("duration_s = 10", "duration_s = 10\nstep_s = 0.0001"), "step_s"),
        (GOOD.replace("duration_s = 10", "duration_s = 10\ncolour = 3"), "unknown field `colour`"),
        (GOOD.replace("kind = \"constant\"", "kind = \"sine\""), "unknown variant `sine`"),
        (GOOD.replace("name = \"u2\"", "name = \"u1\""), "uplinks[1].name: `u1` is used twice"),
        (GOOD.replace("name = \"p\"", "name = \"p\"\nmac = \"02:00\""), "ports[0].mac"),
        (GOOD.replace("name = \"p\"", "name = \"p\"\njitter = 1.5"), "ports[0].jitter"),
        (GOOD.to_string() + "[lbt]\nthreshold = 0\n", "lbt.threshold: lbt threshold 0"),
        (GOOD.to_string() + "[lbt]\nwindow_s = 1e20\n", "lbt.window_s = 100000000000000000000: expected seconds from 0.03 to 86400"),
        (GOOD.to_string() + "[[events]]\nkind = \"link-down\"\nat_s = 10\nuplink = \"u1\"\n", "events[0].at_s = 10: at or after the end of the run"),
        (
            GOOD.to_string() + "[[events]]\nkind = \"link-down\"\nat_s = 2\nuplink = \"u1\"\n[[events]]\nkind = \"link-down\"\nat_s = 5\nuplink = \"u1\"\n",
            "events[1]: uplink `u1` is already down at 5 s",
        ),
        (GOOD.to_string() + "[[events]]\nkind = \"link-up\"\nat_s = 2\nuplink = \"u1\"\n", "events[0]: uplink `u1` is already up at 2 s"),
        (
            GOOD.to_string() + "[[events]]\nkind = \"link-down\"\nat_s = 2\nuplink = \"u1\"\n[[events]]\nkind = \"link-up\"\nat_s = 2\nuplink = \"u1\"\n",
            "events[1]: events[0] already acts on uplink `u1` at 2 s",
        ),
        (GOOD.replace("\"100M\" }", "\"100M\" }\nlimit = 0"), "ports[0].limit: 0bps is below the smallest limit"),
        (GOOD.replace("\"1G\"\n[[uplinks]]", "1000\n[[uplinks]]"), "uplinks[0].capacity: 1kbps is under 1Mbps"),
                (GOOD.to_string() + "[lbt]\ndamping = \"fast\"\n", "lbt.damping: TOML parse error"),
        (GOOD.replace("duration_s = 10", "duration_s = 10\nstep_s = 4"), "step_s = 4: Load-Based Teaming"),
        (GOOD.to_string() + "[[events]]\nkind = \"link-down\"\nat_s = 1\nuplink = \"u7\"\n", "events[0].uplink: no uplink named `u7`"),
        (GOOD.to_string() + "[[expect]]\nkind = \"move-count\"\nmin = 3\nmax = 1\n", "expect[0]: min (3) is greater than max (1)"),
        (GOOD.to_string() + "[[expect]]\nkind = \"delivered-matches-baseline\"\nbaseline = \"missing.toml\"\nfrom_s = 0\ntolerance = 0.1\n", "expect[0]: baseline: no file"),
        (GOOD.replace("tx = { kind = \"constant\", rate = \"100M\" }", "tx = { kind = \"csv\", file = \"nowhere.csv\" }"), "ports[0].tx: "),
        ("name = 5".to_string(), "invalid type"),
    ];
    for (text, want) in cases {
        let e = err(&text);
        assert!(e.starts_with("bad.toml: "), "no file name in: {e}");
        assert!(e.contains(want), "`{want}` not in: {e}");
    }
}

#[test]
fn a_bad_scenario_writes_nothing_and_keeps_the_previous_run() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, GOOD).unwrap();
    let out = dir.path().join("out");
    simulate(&good, &out).unwrap();
    let before = std::fs::read(out.join("series.csv")).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, GOOD.replace("\"100M\"", "\"lots\"")).unwrap();
    let e = simulate(&bad, &out).unwrap_err().to_string();
    assert!(e.contains("bad.toml") && e.contains("not a bandwidth"), "{e}");
    assert_eq!(std::fs::read(out.join("series.csv")).unwrap(), before);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 3, "stray files: {names:?}");
}

#[test]
fn output_folder_holds_series_moves_plot_and_summary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, GOOD).unwrap();
    let o = simulate(&path, &dir.path().join("run")).unwrap();
    let csv = std::fs::read_to_string(dir.path().join("run/series.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "t_s,u1_tx_bps,u1_rx_bps,u2_tx_bps,u2_rx_bps,p_offered_tx_bps,p_delivered_tx_bps,p_offered_rx_bps,p_delivered_rx_bps"
    );
    assert_eq!(lines.count(), 10, "one row per 1 s step");
    assert!(std::fs::read_to_string(dir.path().join("run/throughput.svg"))
        .unwrap()
        .starts_with("<svg"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/summary.json")).unwrap()).unwrap();
    assert_eq!(json["scenario"], "t");
    assert_eq!(json["series_csv"], o.summary.series_csv);
}

#[test]
fn millisecond_steps_record_per_second_and_agree_with_one_second_steps() {
    let fine = GOOD.replace("duration_s = 10", "duration_s = 10\nstep_s = 0.001");
    let a = fluid::run(&Scenario::from_str(&fine, Path::new("f.toml")).unwrap()).unwrap();
    let b = fluid::run(&Scenario::from_str(GOOD, Path::new("g.toml")).unwrap()).unwrap();
    assert_eq!(a.rows.len(), 10);
    for (x, y) in a.rows.iter().zip(&b.rows) {
        assert!((x.t_s - y.t_s).abs() < 1e-9);
        assert!((x.total_delivered_tx() - y.total_delivered_tx()).abs() < 1.0);
    }
}

#[test]
fn link_down_event_fails_over_and_is_logged() {
    let text = GOOD.to_string() + "[[events]]\nkind = \"link-down\"\nat_s = 4\nuplink = \"u1\"\n";
    let run = fluid::run(&Scenario::from_str(&text, Path::new("e.toml")).unwrap()).unwrap();
    assert_eq!(run.events, vec![(4.0, "link down u1".to_string())]);
    // Port ID 1 -> active[1] = u2, so u1 failing moves nothing; fail u2 instead.
    let text = GOOD.to_string() + "[[events]]\nkind = \"link-down\"\nat_s = 4\nuplink = \"u2\"\n";
    let run = fluid::run(&Scenario::from_str(&text, Path::new("e.toml")).unwrap()).unwrap();
    assert_eq!(run.moves.len(), 1);
    assert_eq!((run.moves[0].t_s, run.moves[0].to.as_deref()), (4.0, Some("u1")));
    assert_eq!(run.notifications, 1, "one RARP for the moved port");
    assert!(run.rows[5].uplink_tx[0] > 0.0 && run.rows[5].uplink_tx[1] == 0.0);
}

#[test]
fn dynamic_spreads_flows_in_the_fluid_model() {
    // The flowlet policies place flows by the frames the model records: 64 flows offering
    // 1.6 Gbit/s use both 1G uplinks, and nothing is lost.
    let text = GOOD
        .replace("policy = \"load-based\"", "policy = \"dynamic\"")
        .replace("name = \"p\"", "name = \"p\"\nflows = 64")
        .replace("rate = \"100M\"", "rate = \"1600M\"");
    let run = fluid::run(&Scenario::from_str(&text, Path::new("d.toml")).unwrap()).unwrap();
    for r in &run.rows[1..] {
        assert!(
            r.uplink_tx[0] > 0.6e9 && r.uplink_tx[1] > 0.6e9,
            "t={}: {:?}",
            r.t_s,
            r.uplink_tx
        );
        assert!(
            r.total_delivered_tx() > 1.599e9,
            "t={}: {}",
            r.t_s,
            r.total_delivered_tx()
        );
    }
}

#[test]
fn policy_event_rehomes_and_ip_hash_spreads_flows() {
    let text = GOOD.replace("name = \"p\"", "name = \"p\"\nflows = 64")
        + "[[events]]\nkind = \"policy\"\nat_s = 5\ngroup = \"g\"\npolicy = \"ip-hash-l4\"\n";
    let run = fluid::run(&Scenario::from_str(&text, Path::new("p.toml")).unwrap()).unwrap();
    assert!(run.rows[2].uplink_tx[0] == 0.0, "before: one home uplink");
    let r = &run.rows[7];
    assert!(
        r.uplink_tx[0] > 20e6 && r.uplink_tx[1] > 20e6,
        "after: flows on both uplinks: {:?}",
        r.uplink_tx
    );
}

#[test]
fn the_plot_threshold_follows_lbt_even_when_switched_on_later() {
    let static_only = GOOD.replace("policy = \"load-based\"", "policy = \"port-id\"");
    let run = fluid::run(&Scenario::from_str(&static_only, Path::new("s.toml")).unwrap()).unwrap();
    assert_eq!(run.lbt_threshold, None);
    let later = static_only + "[[events]]\nkind = \"policy\"\nat_s = 5\ngroup = \"g\"\npolicy = \"load-based\"\n";
    let run = fluid::run(&Scenario::from_str(&later, Path::new("l.toml")).unwrap()).unwrap();
    assert_eq!(run.lbt_threshold, Some(0.75));
}
