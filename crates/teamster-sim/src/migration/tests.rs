//! Migration mode's model checked on small plans.

use super::*;
use crate::scenario::parse_toml;
use std::collections::BTreeSet;

/// Two hosts of two 10G members, `policy` and `mode` on both, `endpoints` each, and `extra`
/// (migrations and expectations) appended.
pub(crate) fn two_hosts(policy: &str, mode: &str, endpoints: usize, extra: &str) -> String {
    let mut s = String::from("mode = \"migration\"\nname = \"t\"\nduration_s = 120\n");
    for h in ["a", "b"] {
        s += &format!(
            "[[hosts]]\nname = \"host-{h}\"\n\
             [[hosts.uplinks]]\nname = \"{h}1\"\ncapacity = \"10G\"\n\
             [[hosts.uplinks]]\nname = \"{h}2\"\ncapacity = \"10G\"\n\
             [[hosts.port_groups]]\nname = \"lm\"\npolicy = \"{policy}\"\nmode = \"{mode}\"\nactive = [\"{h}1\", \"{h}2\"]\n"
        );
        for e in 0..endpoints {
            s += &format!("[[hosts.ports]]\nname = \"lm{e}\"\ngroup = \"lm\"\n");
        }
    }
    s + extra
}

pub(crate) fn plan(text: &str) -> Result<MigrationPlan, String> {
    resolve(parse_toml::<MigrationFile>(text)?)
}

fn migrate(vms: u32, concurrency: Option<u32>) -> String {
    let c = concurrency.map_or(String::new(), |c| format!("concurrency = {c}\n"));
    format!("[[migrations]]\nfrom = \"host-a\"\nto = \"host-b\"\nvms = {vms}\nmemory = \"1GiB\"\n{c}")
}

#[test]
fn every_byte_is_carried_and_no_link_exceeds_its_goodput() {
    for policy in ["dynamic", "hyperv-port", "address-hash"] {
        let p = plan(&two_hosts(policy, "switch-independent", 2, &migrate(5, None))).unwrap();
        let r = run(&p).unwrap();
        assert!(r.streams.iter().all(|s| s.finish_s.is_some()), "{policy}");
        for (k, s) in r.streams.iter().enumerate() {
            // Rows are means over their span: the delivered bits add up to the VM's memory.
            let bits: f64 = r
                .output
                .rows
                .iter()
                .map(|row| row.delivered_tx[k] * r.row_s.min(r.end_s - row.t_s))
                .sum();
            let want = (1u64 << 30) as f64 * 8.0;
            assert!(
                (bits - want).abs() / want < 1e-6,
                "{policy} {}: {bits} of {want}",
                s.name
            );
        }
        for row in &r.output.rows {
            for (u, cap) in r.output.capacities.iter().enumerate() {
                assert!(row.uplink_tx[u] <= cap * 1.000_001 && row.uplink_rx[u] <= cap * 1.000_001);
            }
        }
    }
}

#[test]
fn rows_tile_the_run() {
    let p = plan(&two_hosts("dynamic", "switch-independent", 1, &migrate(3, Some(2)))).unwrap();
    let r = run(&p).unwrap();
    assert_eq!(r.output.rows[0].t_s, 0.0);
    for w in r.output.rows.windows(2) {
        assert!(
            (w[1].t_s - w[0].t_s - r.row_s).abs() < 1e-9,
            "{} {}",
            w[0].t_s,
            w[1].t_s
        );
    }
    let last = r.output.rows.last().unwrap().t_s;
    assert!(last < r.end_s && r.end_s <= last + r.row_s + 1e-9, "{last} {}", r.end_s);
}

#[test]
fn concurrency_queues_the_rest() {
    // One at a time at one member's goodput: four times one migration.
    let one = run(&plan(&two_hosts("dynamic", "switch-independent", 1, &migrate(1, None))).unwrap()).unwrap();
    let four = run(&plan(&two_hosts("dynamic", "switch-independent", 1, &migrate(4, Some(1)))).unwrap()).unwrap();
    let t1 = one.streams[0].finish_s.unwrap();
    let t4 = four.streams.iter().map(|s| s.finish_s.unwrap()).fold(0.0, f64::max);
    assert!((t4 / t1 - 4.0).abs() < 0.01, "{t1} {t4}");
    let expected = (1u64 << 30) as f64 * 8.0 / (10e9 * engine::GOODPUT);
    assert!((t1 - expected).abs() < 0.002, "{t1} vs {expected}");
    // Never more than one under way: each starts when the one before finished.
    for w in four.streams.windows(2) {
        assert!(w[1].start_s.unwrap() + 0.0011 >= w[0].finish_s.unwrap(), "{w:?}");
    }
}

#[test]
fn lacp_bundles_before_the_clock_starts_and_the_switch_spreads_into_the_host() {
    let p = plan(&two_hosts("address-hash", "lacp", 1, &migrate(2, None))).unwrap();
    let r = run(&p).unwrap();
    for s in &r.streams {
        assert_eq!((s.send_members.len(), s.receive_members.len()), (1, 1), "{s:?}");
    }
    let used: BTreeSet<usize> = r
        .streams
        .iter()
        .flat_map(|s| s.receive_members.iter().copied())
        .collect();
    assert_eq!(used.len(), 2, "the switch's hash put both streams on one member");
}

#[test]
fn a_run_that_cannot_finish_says_so() {
    let text = two_hosts("hyperv-port", "switch-independent", 1, &migrate(2, None))
        .replace("duration_s = 120", "duration_s = 1")
        + "[[expect]]\nkind = \"finish-between\"\nmin_s = 0\nmax_s = 100\n";
    let p = plan(&text).unwrap();
    let r = run(&p).unwrap();
    let v = expect::evaluate(&p.file.expect[0], &r);
    assert!(
        !v.held && v.detail.contains("2 of 2 migrations had not finished"),
        "{v:?}"
    );
}

#[test]
fn bad_input_is_refused_naming_the_key() {
    let ok = |extra: &str| two_hosts("dynamic", "switch-independent", 1, extra);
    let cases = [
        (ok(&migrate(0, None)), "migrations[0].vms: 0 is out of range"),
        (ok(&migrate(2, Some(3))), "migrations[0].concurrency: 3 is out of range 1-2"),
        (ok("[[migrations]]\nfrom = \"host-a\"\nto = \"host-c\"\nvms = 1\nmemory = \"1GiB\"\n"), "migrations[0].to: no host named `host-c`"),
        (ok("[[migrations]]\nfrom = \"host-a\"\nto = \"host-a\"\nvms = 1\nmemory = \"1GiB\"\n"), "migrations[0].to: `host-a` is also the source host"),
        (ok("[[migrations]]\nfrom = \"host-a\"\nto = \"host-b\"\nvms = 1\nmemory = \"8Gb\"\n"), "migrations[0].memory"),
        (ok("[[migrations]]\nfrom = \"host-a\"\nto = \"host-b\"\nvms = 1\nmemory = \"1GiB\"\nstart_s = -1\n"), "migrations[0].start_s"),
        (ok(&migrate(1, None)).replace("duration_s = 120", "duration_s = 120\nstep_s = 0.5"), "step_s = 0.5"),
        (ok(&migrate(1, None)).replacen("mode = \"switch-independent\"", "mode = \"switch-independent\"\nflowlet_gap_us = 500", 1), "hosts[0].port_groups[0].flowlet_gap_us"),
        (two_hosts("load-based", "lacp", 1, &migrate(1, None)), "hosts[0].port_groups[0]"),
        (ok(&(migrate(1, None) + "[[expect]]\nkind = \"rate\"\nhost = \"host-a\"\nuplink = \"x9\"\ndirection = \"send\"\nfrom_s = 0\nto_s = 1\n")), "expect[0]: uplink: host `host-a` has no uplink named `x9`"),
        (ok(&(migrate(1, None) + "[[expect]]\nkind = \"rate\"\nhost = \"host-a\"\ndirection = \"send\"\nfrom_s = 5\nto_s = 1\n")), "expect[0]: from_s = 5"),
        (ok(&migrate(1, None)).replace("[[hosts.ports]]\nname = \"lm0\"\ngroup = \"lm\"\n", ""), "ports: expected at least one"),
        (ok(&migrate(1, None)).replace("name = \"host-b\"", "name = \"host-a\""), "hosts[1].name: `host-a` is used twice"),
        (ok(&migrate(1, None)).replace("vms = 1", "vms = 1\nspeed = 3"), "unknown field `speed`"),
        (ok(&migrate(1, None)).replace("group = \"lm\"\n", "group = \"lm\"\nlimit = \"1G\"\n"), "hosts[0].ports[0].limit: Network I/O Control is not modelled"),
        (ok(&(migrate(1000, None) + &migrate(1, None))), "migrations: 1001 VMs in all"),
        (ok(&migrate(500, None)).replace("duration_s = 120", "duration_s = 86400\nstep_s = 0.0001"), "stream-steps"),
        (ok(&(migrate(1, None) + "[[expect]]\nkind = \"rate\"\nhost = \"host-a\"\ndirection = \"send\"\nfrom_s = 0\nto_s = 1\n")), "expect[0]: give a min above 0 or a max"),
        (ok(&(migrate(1, None) + "[[expect]]\nkind = \"rate\"\nhost = \"host-a\"\ndirection = \"send\"\nfrom_s = 1.01\nto_s = 1.09\nmin = \"1G\"\n")), "shorter than the run's rows"),
    ];
    for (text, want) in cases {
        let e = plan(&text).unwrap_err();
        assert!(e.contains(want), "wanted `{want}` in: {e}");
    }
}

#[test]
fn runs_are_reproducible() {
    let p = plan(&two_hosts("dynamic", "lacp", 2, &migrate(3, Some(2)))).unwrap();
    assert_eq!(run(&p).unwrap(), run(&p).unwrap());
}
