//! Packet-mode scenarios: bad NetIOC input gets an error naming the file and key, writes nothing.

use teamster_sim::simulate;

const GOOD: &str = r#"
mode = "packet"
name = "p"
duration_s = 2
[[uplinks]]
name = "u1"
capacity = "10G"
effective = "9.4G"
[[port_groups]]
name = "g"
policy = "port-id"
active = ["u1"]
[[traffic_classes]]
class = "vm"
reservation = "2G"
[[pools]]
name = "gold"
reservation = "1G"
[[ports]]
name = "vm1"
group = "g"
pool = "gold"
reservation = "500M"
source = { kind = "greedy", bytes = 9000 }
[[ports]]
name = "vm2"
group = "g"
pool = "gold"
source = { kind = "cbr", rate = "1G" }
"#;

fn run(text: &str) -> Result<teamster_sim::Outcome, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let out = dir.path().join("out");
    let r = simulate(&path, &out).map_err(|e| e.to_string());
    if r.is_err() {
        assert!(!out.exists(), "a rejected scenario wrote output");
    }
    r
}

#[test]
fn the_reference_packet_scenario_runs() {
    let o = run(GOOD).unwrap();
    assert_eq!(o.info.mode, "packet");
    assert!(o.run.packets > 0);
    let r = &o.run.rows[1];
    assert!(
        (r.delivered_tx[1] - 1e9).abs() < 0.01e9,
        "CBR 1G delivered: {}",
        r.delivered_tx[1]
    );
    assert!(
        (r.delivered_tx[0] - 8.4e9).abs() < 0.02e9,
        "greedy takes the rest: {}",
        r.delivered_tx[0]
    );
}

#[test]
fn bad_netioc_input_names_the_key() {
    let cases = [
        (GOOD.replace("class = \"vm\"", "class = \"vmotion\""), "traffic_classes[0].class: unknown traffic class `vmotion`"),
        (GOOD.replace("name = \"gold\"\nreservation = \"1G\"", "name = \"gold\"\nreservation = \"1G\"\nshares = 101"), "pools[0].shares"),
        (GOOD.replace("name = \"gold\"\nreservation = \"1G\"", "name = \"gold\"\nreservation = \"1G\"\nshares = 0"), "shares `0` is not valid"),
        (GOOD.replace("reservation = \"500M\"", "reservation = \"-500M\""), "ports[0].reservation"),
        (GOOD.replace("reservation = \"500M\"", "reservation = \"lots\""), "`lots` is not a bandwidth"),
        (GOOD.replace("reservation = \"500M\"", "reservation = \"500M\"\nlimit = \"100M\""), "ports[0].limit: 100Mbps is below the reservation 500Mbps"),
        (GOOD.replace("name = \"vm2\"", "name = \"gold\""), "ports[1]: the name `gold` is already used"),
        (GOOD.replace("name = \"gold\"", "name = \"vm\""), "pools[0]: the name `vm` is already used"),
        (GOOD.replace("reservation = \"500M\"", "reservation = \"1.5G\""), "admission control: `vm1`: reservation 1.5Gbps does not fit: 1Gbps is free of 1Gbps"),
        (GOOD.replace("reservation = \"2G\"", "reservation = \"8G\""), "admission control: `vm`: reservation 8Gbps does not fit: 7.5Gbps is free"),
        (GOOD.replace("pool = \"gold\"\nreservation", "pool = \"silver\"\nreservation"), "ports[0].pool: no pool named `silver`"),
        (GOOD.replace("pool = \"gold\"\nreservation", "pool = \"gold\"\nclass = \"nfs\"\nreservation"), "ports[0]: give `pool` or `class`, not both"),
        (GOOD.replace("bytes = 9000", "bytes = 9"), "ports[0].source.bytes = 9"),
        (GOOD.replace("kind = \"greedy\"", "kind = \"firehose\""), "unknown variant `firehose`"),
        (GOOD.replace("effective = \"9.4G\"", "effective = \"12G\""), "uplinks[0].effective: 12Gbps must be above zero and at most the capacity"),
        (GOOD.replace("mode = \"packet\"", "mode = \"quantum\""), "mode = \"quantum\": expected \"fluid\", \"packet\", \"migration\", \"receive\" or \"cluster\""),
        (GOOD.to_string() + "[[events]]\nkind = \"queueing\"\nat_s = 1e9\nqueueing = \"fifo\"\n", "events[0].at_s = 1000000000: at or after the end of the run"),
        (
            GOOD.to_string() + "[[events]]\nkind = \"set-controls\"\nat_s = 1\nnode = \"vm1\"\nshares = 10\n[[events]]\nkind = \"set-controls\"\nat_s = 1\nnode = \"vm1\"\nshares = 90\n",
            "events[1]: events[0] already acts on `vm1` at 1 s",
        ),
        (GOOD.to_string() + "[[events]]\nkind = \"set-controls\"\nat_s = 1\nnode = \"vm1\"\nlimit = 0\n", "events[0].limit: 0bps is below the smallest limit"),
        (GOOD.to_string() + "[[events]]\nkind = \"set-controls\"\nat_s = 1\nnode = \"vm9\"\nreservation = \"1G\"\n", "events[0].node: no class, pool or port named `vm9`"),
        (GOOD.to_string() + "[[events]]\nkind = \"set-controls\"\nat_s = 1\nnode = \"vm1\"\nlimit = \"1M\"\n", "events[0].limit: 1Mbps is below the reservation 500Mbps"),
        (GOOD.to_string() + "[[expect]]\nkind = \"admission-rejected\"\nnode = \"vm7\"\nat_s = 1\n", "expect[0]: node: no class, pool or port named `vm7`"),
        (GOOD.to_string() + "[[expect]]\nkind = \"latency-at-most\"\nport = \"vm1\"\npercentile = 120\nfrom_s = 0\nto_s = 1\nmax_us = 5\n", "expect[0]: percentile = 120"),
    ];
    for (text, want) in cases {
        let e = run(&text).err().unwrap_or_else(|| panic!("accepted; wanted `{want}`"));
        assert!(e.contains("bad.toml: ") && e.contains(want), "`{want}` not in: {e}");
    }
}

#[test]
fn a_rejected_change_at_run_time_changes_nothing() {
    let text =
        GOOD.to_string() + "[[events]]\nkind = \"set-controls\"\nat_s = 1\nnode = \"vm2\"\nreservation = \"600M\"\n";
    let o = run(&text).unwrap();
    assert_eq!(o.run.rejections.len(), 1);
    assert!(o.run.rejections[0]
        .1
        .contains("`vm2`: reservation 600Mbps does not fit: 500Mbps is free of 1Gbps (the reservation of `gold`)"));
    // vm2 keeps its CBR rate and vm1 its share after the refused change.
    let r = &o.run.rows[1];
    assert!((r.delivered_tx[1] - 1e9).abs() < 0.01e9);
}
