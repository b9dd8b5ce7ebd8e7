use super::scenario::ClusterFile;
use super::*;
use teamster_core::units::Bandwidth;

fn scenario(name: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/");
    std::fs::read_to_string(format!("{path}{name}")).unwrap()
}

fn plan(text: &str) -> Result<ClusterPlan, String> {
    let f: ClusterFile = teamster_core::host::parse_toml(text)?;
    resolve(f)
}

/// Figure 2 at fluid fidelity: the same sequence and figures as in packet mode, quickly.
fn fig2_fluid() -> ClusterPlan {
    plan(&fig2_fluid_text()).unwrap()
}

/// Figure 2's file at fluid fidelity (without the migrations' own traffic, a packet-mode model).
fn fig2_fluid_text() -> String {
    (scenario("netioc-fig2.toml"))
        .replace("fidelity = \"packet\"", "fidelity = \"fluid\"")
        .replace("traffic_s = 2", "traffic_s = 0")
}

/// With the migrations' own traffic (packet fidelity): each VM runs at its source through its
/// 2 s pre-copy, with the copy's stream there, and keeps its source's reservation meanwhile.
#[test]
fn a_migration_copies_first_then_switches_over() {
    let p = plan(&scenario("netioc-fig2.toml")).unwrap();
    let d = decide::decide(&p);
    let copies: Vec<(usize, f64, f64)> = d.transfers.iter().map(|x| (x.host, x.from_s, x.to_s)).collect();
    assert_eq!(copies, [(0, 50.0, 52.0), (0, 80.0, 82.0)]);
    let vm2: Vec<(usize, f64, Option<f64>)> = (d.stays.iter())
        .filter(|s| s.vm == 1)
        .map(|s| (s.host, s.from_s, s.to_s))
        .collect();
    assert_eq!(vm2, [(0, 0.0, Some(52.0)), (1, 52.3, None)]);
    // Host 1's controls during the copy: VM2 still reserves nothing there.
    let during = (d.controls[0].iter()).rev().find(|(t, _)| *t <= 51.0).unwrap();
    assert!(
        during
            .1
            .iter()
            .all(|(s, r)| d.stays[*s].vm != 1 || *r == Bandwidth::ZERO),
        "{during:?}"
    );
    // Fluid fidelity does not model the copy; a host without the class cannot have one.
    let fluid = scenario("netioc-fig2.toml").replace("fidelity = \"packet\"", "fidelity = \"fluid\"");
    assert!(plan(&fluid).unwrap_err().contains("drs.traffic_s"));
    let classless = scenario("netioc-fig2.toml").replace(", { class = \"live-migration\" }", "");
    assert!(plan(&classless).unwrap_err().contains("live-migration"));
}

/// The mean rate of VM `vm` over rows in [from, to).
fn mean(run: &crate::run::RunOutput, vm: usize, from: f64, to: f64) -> f64 {
    let rows: Vec<_> = run.rows.iter().filter(|r| r.t_s >= from && r.t_s + 1.0 <= to).collect();
    rows.iter().map(|r| r.delivered_tx[vm]).sum::<f64>() / rows.len() as f64
}

#[test]
fn figure_2_decisions_fault_then_move_vm2_then_vm3() {
    let p = fig2_fluid();
    let d = decide::decide(&p);
    let moves: Vec<(f64, &str, Option<usize>, usize)> = (d.migrations.iter())
        .map(|m| (m.t_s, p.vms[m.vm].vm.name.as_str(), m.from, m.to))
        .collect();
    assert_eq!(moves, [(50.0, "vm2", Some(0), 1), (80.0, "vm3", Some(0), 1)]);
    let faults: Vec<(f64, &str)> = d.faults.iter().map(|(t, h, _)| (*t, h.as_str())).collect();
    assert_eq!(faults, [(40.0, "host1"), (70.0, "host1")]);
    assert!(d.refusals.is_empty(), "{:?}", d.refusals);
    // One reservation broken from each fault until its migration: VM1's and VM2's (or VM3's)
    // are on a host that cannot hold both.
    let broken: Vec<(f64, usize)> = d.violated.clone();
    assert_eq!(broken, [(0.0, 0), (40.0, 2), (50.0, 0), (70.0, 2), (80.0, 0)]);
    // Each VM's stays follow one another with the switch-over gap, never overlapping.
    for vm in 0..3 {
        let stays: Vec<_> = d.stays.iter().filter(|s| s.vm == vm).collect();
        for w in stays.windows(2) {
            let end = w[0].to_s.unwrap();
            assert!((w[1].from_s - end - 0.3).abs() < 1e-9, "{w:?}");
        }
    }
}

#[test]
fn figure_2_at_fluid_fidelity_gives_the_papers_figures() {
    let p = fig2_fluid();
    let (run, _) = run(&p).unwrap();
    let near = |got: f64, want: f64| (got - want).abs() <= want * 0.01;
    let phases = [
        (2.0, 20.0, [3.133e9, 3.133e9, 3.133e9]),
        (22.0, 50.0, [8.133e9, 0.633e9, 0.633e9]),
        (52.0, 80.0, [8.45e9, 9.4e9, 0.95e9]),
        (82.0, 100.0, [9.4e9, 5.45e9, 3.95e9]),
    ];
    for (from, to, want) in phases {
        for (vm, want) in want.into_iter().enumerate() {
            let got = mean(&run, vm, from, to);
            assert!(near(got, want), "vm{} over [{from}, {to}): {got} vs {want}", vm + 1);
        }
    }
    assert_eq!(run.cluster.last().map(|c| (c.violated, c.migrations)), Some((0, 2)));
}

#[test]
fn runs_are_deterministic() {
    let p = plan(&scenario("cluster-whatif-32.toml")).unwrap();
    let (a, _) = run(&p).unwrap();
    let (b, _) = run(&p).unwrap();
    assert_eq!(a, b);
}

/// The what-if: host07's VMs restart elsewhere, host12's move when it loses its uplinks;
/// no VM is ever on two hosts at once, and every reservation holds once DRS has acted.
#[test]
fn a_failed_host_s_vms_restart_and_none_runs_twice() {
    let p = plan(&scenario("cluster-whatif-32.toml")).unwrap();
    let d = decide::decide(&p);
    let on_07 = (d.stays.iter())
        .filter(|s| p.hosts[s.host] == "host07" && s.from_s == 0.0)
        .count();
    let restarts = d.migrations.iter().filter(|m| m.from.is_none()).count();
    assert!(
        on_07 > 20 && restarts == on_07,
        "{on_07} VMs on host07, {restarts} restarted"
    );
    for vm in 0..p.vms.len() {
        let mut stays: Vec<_> = d.stays.iter().filter(|s| s.vm == vm).collect();
        stays.sort_by(|a, b| a.from_s.total_cmp(&b.from_s));
        for w in stays.windows(2) {
            assert!(
                w[0].to_s.is_some_and(|e| e <= w[1].from_s),
                "{} twice: {w:?}",
                p.vms[vm].vm.name
            );
        }
    }
    let last = d.violated.last().unwrap();
    assert_eq!(last.1, 0, "{:?}", d.violated);
    // Every migration off host12 left when its links were gone, to a host that admits it.
    assert!(d
        .migrations
        .iter()
        .any(|m| m.from.is_some_and(|h| p.hosts[h] == "host12")));
}

/// Bad input names the key, and nothing runs.
#[test]
fn bad_cluster_files_are_refused_with_the_key() {
    let base = scenario("netioc-fig2.toml");
    let cases = [
        (
            "vm = \"vm1\"\nreservation = \"7.5G\"",
            "vm = \"vm9\"\nreservation = \"7.5G\"",
            "events[0].vm: no VM named `vm9`",
        ),
        ("hosts = [\"host1\", \"host2\"]", "hosts = []", "hosts: expected 1 to"),
        (
            "derived = [\"vm\", \"vm-pool\"]",
            "derived = [\"vm\", \"nfs-pool\"]",
            "host.derived[1]",
        ),
        ("pool = \"vm-pool\"\nquota", "pool = \"nope\"\nquota", "quotas[0].pool"),
        (
            "name = \"vm1\"\ngroup = \"vms\"\npool = \"vm-pool\"\nhost = \"host1\"",
            "name = \"vm1\"\ngroup = \"vms\"\npool = \"vm-pool\"\nhost = \"host9\"",
            "vms[0].host: no host named `host9`",
        ),
        ("name = \"vm2\"", "name = \"vm1\"", "vms[1].name: `vm1` is used twice"),
        ("delay_s = 10", "delay_s = -1", "drs.delay_s"),
        ("at_s = 20", "at_s = 200", "events[0].at_s = 200"),
        (
            "to = \"host2\"\nfrom_s = 50",
            "to = \"host5\"\nfrom_s = 50",
            "to: no host named `host5`",
        ),
        ("fidelity = \"packet\"", "fidelity = \"quantum\"", "fidelity"),
        ("name = \"vm3\"", "name = \"vm#3\"", "`#` and `~`"),
    ];
    for (from, to, want) in cases {
        assert!(base.contains(from), "the case must change the file: {from}");
        let e = plan(&base.replacen(from, to, 1)).unwrap_err();
        assert!(e.contains(want), "{to}: {e}");
    }
    let tcp = fig2_fluid_text().replacen("{ kind = \"greedy\", bytes = 9000 }", "{ kind = \"tcp-stream\" }", 1);
    assert!(plan(&tcp).unwrap_err().contains("vms[0].source: fluid fidelity"));
}

/// A VM whose reservation no host can hold is refused at power-on, with each host's reason,
/// and a migration by hand to a host that cannot hold it is refused: nothing changes.
#[test]
fn what_no_host_can_hold_is_refused_with_each_host_s_reason() {
    let base = fig2_fluid_text();
    let text = base.replacen(
        "name = \"vm3\"\ngroup = \"vms\"\npool = \"vm-pool\"\nhost = \"host1\"",
        "name = \"vm3\"\ngroup = \"vms\"\npool = \"vm-pool\"\nreservation = \"8G\"",
        1,
    );
    let text = text.replacen(
        "[[events]]\nkind = \"set-reservation\"\nat_s = 70",
        "[[events]]\nkind = \"migrate\"\nat_s = 60\nvm = \"vm1\"\nto = \"host2\"\n\n[[events]]\nkind = \"set-reservation\"\nat_s = 70",
        1,
    );
    let p = plan(&text).unwrap();
    let d = decide::decide(&p);
    let (t, vm, why) = &d.refusals[0];
    assert_eq!((*t, vm.as_str()), (0.0, "vm3"));
    assert!(
        why.contains("host1: ") && why.contains("host2: ") && why.contains("75% of uplink"),
        "{why}"
    );
    let (t, vm, why) = &d.refusals[1];
    assert_eq!((*t, vm.as_str()), (60.0, "vm1"));
    assert!(why.contains("host2 does not admit vm1"), "{why}");
    assert!(d.stays.iter().all(|s| p.vms[s.vm].vm.name != "vm3"), "vm3 never runs");
    assert!(
        !d.migrations.iter().any(|m| m.t_s == 60.0),
        "the refused migration changed nothing"
    );
}

const SMALL: &str = r#"
mode = "cluster"
name = "small"
fidelity = "packet"
duration_s = 8
hosts = ["a", "b", "c"]
[drs]
delay_s = 1
switchover_s = 0.5
[host]
uplinks = [{ name = "u1", capacity = "1G" }]
port_groups = [{ name = "vms", policy = "port-id", active = ["u1"] }]
traffic_classes = [{ class = "vm", reservation = "750M" }]
[[vms]]
name = "vm1"
group = "vms"
host = "a"
source = { kind = "greedy", bytes = 9000 }
"#;

/// A VM that comes back to a host it left runs there again (a port of its own), in packet
/// fidelity; a migration by hand while it is in transit replaces the one under way, and a
/// destination that fails before it arrives never gets it: one stay at a time, always.
#[test]
fn migrations_in_transit_and_returns_keep_one_stay_at_a_time() {
    let text = format!(
        "{SMALL}{}",
        r#"
[[events]]
kind = "migrate"
at_s = 1
vm = "vm1"
to = "b"
[[events]]
kind = "migrate"
at_s = 1.2
vm = "vm1"
to = "c"
[[events]]
kind = "migrate"
at_s = 3
vm = "vm1"
to = "a"
[[events]]
kind = "migrate"
at_s = 5
vm = "vm1"
to = "b"
[[events]]
kind = "host-down"
at_s = 5.2
host = "b"
"#
    );
    let p = plan(&text).unwrap();
    let (run, d) = run(&p).unwrap();
    let stays: Vec<(&str, f64, Option<f64>)> = (d.stays.iter())
        .map(|s| (p.hosts[s.host].as_str(), s.from_s, s.to_s))
        .collect();
    // On a until 1; to b voided by the move to c at 1.2 (arrives 1.7); back to a at 3.5; to b
    // at 5, which fails at 5.2: restarted by DRS 1 s later on a host that admits it.
    assert_eq!(
        &stays[..3],
        &[("a", 0.0, Some(1.0)), ("c", 1.7, Some(3.0)), ("a", 3.5, Some(5.0))]
    );
    assert_eq!(stays.len(), 4, "{stays:?}");
    assert!(stays[3].1 >= 6.2 && stays[3].0 != "b", "{stays:?}");
    // It sent on a, then c, then a again.
    let sent = |row: usize| run.rows[row].delivered_tx[0];
    assert!(sent(0) > 0.9e9 && sent(2) > 0.9e9 && sent(4) > 0.9e9, "{:?}", run.rows);
}

#[test]
fn absurd_numbers_are_refused() {
    let cases = [
        ("delay_s = 1", "delay_s = 0", "drs.delay_s"),
        (
            "hosts = [\"a\", \"b\", \"c\"]",
            "hosts = 10000000000",
            "hosts: expected 1 to",
        ),
        (
            "fidelity = \"packet\"\nduration_s = 8",
            "fidelity = \"fluid\"\nduration_s = 86000\nstep_s = 0.001",
            "rates a run keeps",
        ),
        (
            "name = \"vm1\"",
            "name = \"vm1\"\nid = 4000000000",
            "kept for the hosts",
        ),
    ];
    for (from, to, want) in cases {
        assert!(SMALL.contains(from), "{from}");
        let e = plan(&SMALL.replacen(from, to, 1)).unwrap_err();
        assert!(e.contains(want), "{to}: {e}");
    }
}
