use super::engine::{self, queue_ns_per_frame};
use super::scenario::{resolve, Setup};
use super::*;

/// A one-variant file around `body` (the [nic], [vms], [traffic] ... tables).
fn file(body: &str, variants: &str) -> String {
    format!(
        "mode = \"receive\"\nname = \"t\"\nduration_ms = 20\nwarmup_ms = 5\n{body}\n{}",
        if variants.is_empty() {
            "[[variants]]\nname = \"only\"\n"
        } else {
            variants
        }
    )
}

const BASE: &str = r#"
[nic]
speed = "10Gbps"
queues = 4
steering = "single"
[vms]
count = 2
vcpus = 2
[traffic]
direction = "receive"
streams_per_vm = 4
payload = 1460
"#;

fn setup(body: &str) -> Setup {
    resolve(&file(body, "")).unwrap().variants.remove(0).1
}

fn run(s: &Setup) -> Measured {
    engine::run(s, 1, 20_000_000, 5_000_000).unwrap()
}

#[test]
fn every_error_names_its_key() {
    let cases = [
        (BASE.replace("queues = 4", "queues = 0"), "nic.queues = 0"),
        (BASE.replace("payload = 1460", "payload = 20"), "traffic.payload = 20"),
        (BASE.replace("count = 2", "count = 0"), "vms.count = 0"),
        (format!("{BASE}\n[host]\ncores = 2\n"), "host.cores = 2"),
        (BASE.replace("steering = \"single\"", "steering = \"magic\""), "magic"),
        (format!("{BASE}\n[costs]\nrx = -1.0\n"), "costs.rx = -1"),
        (
            BASE.replace("queues = 4", "queues = 4\nlro = true\ngro = true"),
            "nic.lro and nic.gro",
        ),
    ];
    for (body, want) in cases {
        let e = resolve(&file(&body, "")).unwrap_err();
        assert!(e.contains(want), "{want}: got {e}");
    }
    let more = [
        (format!("{BASE}[ping]\ninterval_us = 1e300\n"), "expected 10 to 1000000"),
        (format!("{BASE}[ping]\n"), "ping: missing field `interval_us`"),
        (
            BASE.replace("queues = 4", "queues = 4\npacking_interval_ms = 5.0"),
            "nic.packing_interval_ms = 5",
        ),
        (BASE.replace("queues = 4", "queues = 70000"), "nic: "),
        (BASE.replace("[vms]", "[vmz]"), "unknown field `vmz`"),
    ];
    for (body, want) in more {
        let e = resolve(&file(&body, "")).unwrap_err();
        assert!(e.contains(want), "{want}: got {e}");
    }
    assert!(
        resolve(&file(BASE, "").replace("duration_ms = 20", "duration_ms = 1e-7"))
            .unwrap_err()
            .contains("duration_ms")
    );
    assert!(resolve(&file(BASE, "[[variants]]\nname = \" a \"\n"))
        .unwrap_err()
        .contains("spaces"));
    let long = file(&BASE.replace("\"10Gbps\"", "\"400Gbps\""), "").replace("duration_ms = 20", "duration_ms = 2000");
    assert!(resolve(&long).unwrap_err().contains("shorten duration_ms"));
    let bad_variant = "[[variants]]\nname = \"v\"\nnic = { steerin = \"rss\" }\n";
    let e = resolve(&file(BASE, bad_variant)).unwrap_err();
    assert!(e.starts_with("variants[0]: ") && e.contains("steerin"), "{e}");
    let twice = "[[variants]]\nname = \"v\"\n[[variants]]\nname = \"v\"\n";
    assert!(resolve(&file(BASE, twice)).unwrap_err().contains("used twice"));
    let unknown = "[[variants]]\nname = \"v\"\nwire = { x = 1 }\n";
    assert!(resolve(&file(BASE, unknown))
        .unwrap_err()
        .contains("unknown table `wire`"));
    let expect = |x: &str| resolve(&file(&format!("{BASE}\n[[expect]]\n{x}\n"), "")).unwrap_err();
    assert!(
        expect("metric = \"throughput\"\nvariant = \"nope\"\nmin = 1.0").contains("expect[0]: no variant named `nope`")
    );
    assert!(expect("metric = \"throughput\"\nvariant = \"only\"\ntolerance = 0.1").contains("give seed"));
    assert!(expect("metric = \"throughput\"\nvariant = \"only\"\nmin = 2.0\nmax = 1.0").contains("min <= max"));
    assert!(resolve("mode = \"fluid\"\nname = \"x\"\nduration_ms = 1\n[[variants]]\nname = \"v\"").is_err());
}

#[test]
fn a_variant_replaces_only_the_keys_it_names() {
    let v = "[[variants]]\nname = \"a\"\n[[variants]]\nname = \"b\"\nnic = { steering = \"rss\" }\ntraffic = { payload = 256 }\n";
    let plan = resolve(&file(BASE, v)).unwrap();
    let (a, b) = (&plan.variants[0].1, &plan.variants[1].1);
    assert_eq!((a.nic.steering, a.traffic.payload), (scenario::Steering::Single, 1460));
    assert_eq!((b.nic.steering, b.traffic.payload), (scenario::Steering::Rss, 256));
    assert_eq!(
        (b.nic.queues, b.traffic.streams_per_vm),
        (4, 4),
        "the rest is the base's"
    );
}

#[test]
fn one_queue_carries_what_its_core_can_and_no_more() {
    let s = setup(&BASE.replace("count = 2", "count = 4"));
    let m = run(&s);
    // Saturated, the core is busy all the time and rarely sleeps: the throughput is the core's
    // frame rate at the stated costs, within the wake-ups it still pays.
    let ideal = 1e9 / queue_ns_per_frame(&s) * 1460.0 * 8.0 / 1e9;
    assert!(m.host_cpu > 0.99 && m.host_cpu <= 1.0, "{m:?}");
    // (Frames begun before the window and delivered in it make up to a batch more.)
    assert!(
        m.throughput_gbps <= 1.01 * ideal && m.throughput_gbps > 0.97 * ideal,
        "{} vs {ideal}",
        m.throughput_gbps
    );
    assert_eq!((m.queues_used, m.drops), (1, 0));
}

#[test]
fn paced_streams_below_every_limit_get_their_rate_and_rss_spreads_them() {
    let s = setup(&format!(
        "{}rate = \"200Mbps\"\n",
        BASE.replace("\"single\"", "\"rss\"")
    ));
    let m = run(&s);
    let offered = 8.0 * 0.2;
    assert!((m.throughput_gbps - offered).abs() < 0.02 * offered, "{m:?}");
    assert_eq!(m.drops, 0);
    assert!(m.queues_used >= 3, "8 flows over {} of 4 queues", m.queues_used);
    // Deterministic: the same run twice is the same, to the frame.
    assert_eq!(run(&s), m);
}

#[test]
fn gro_merges_segments_without_losing_a_byte() {
    let body = BASE.replace("steering = \"single\"", "steering = \"rss\"\ngro = true");
    let m = run(&setup(&body));
    // The link is the limit: every segment it carries reaches a VM, merged.
    let line = 10.0 * 1460.0 / (1460.0 + 54.0 + 24.0);
    assert!((m.throughput_gbps - line).abs() < 0.01 * line, "{m:?}");
    assert!(
        m.delivered_frames * 5 < m.segments,
        "{} frames from {} segments",
        m.delivered_frames,
        m.segments
    );
    // Pushed segments are not merged; paced streams' segments interleave and seldom are.
    let p = run(&setup(&format!("{body}push = true\n")));
    assert!(p.delivered_frames + 8 >= p.segments, "{p:?}");
}

#[test]
fn an_idle_ping_takes_the_sum_of_its_stages() {
    let body = format!("{}rate = \"1Mbps\"\n[ping]\ninterval_us = 500\n", BASE);
    let s = setup(&body);
    let m = run(&s);
    let c = s.costs;
    // Wire (98-byte frame), moderation, wake-up, driver, switch, copy, guest; twice.
    let wire = ((98.0 + 24.0) * 8.0 / 10e9 * 1e9_f64).ceil();
    let one_way =
        wire + 20_000.0 + c.wakeup + c.rx + c.switch + c.copy + c.copy_byte * 98.0 + c.guest + c.guest_byte * 98.0;
    let got = m.ping_us.unwrap() * 1e3 / 2.0;
    // Now and then a data frame shares the probe's batch or vCPU: a few percent at most.
    assert!(
        got >= one_way - 2.0 && got < one_way * 1.05,
        "{got} ns one way, stages add to {one_way}"
    );
}

#[test]
fn split_rx_moves_the_copy_off_the_queue_core() {
    let body = BASE.replace("count = 2", "count = 4");
    let plain = run(&setup(&body));
    let split = run(&setup(
        &body.replace("steering = \"single\"", "steering = \"single\"\nsplit_rx = \"on\""),
    ));
    assert!(
        split.throughput_gbps > plain.throughput_gbps * 1.05,
        "{} vs {}",
        split.throughput_gbps,
        plain.throughput_gbps
    );
    assert!(
        split.cpu_per_gbps > plain.cpu_per_gbps,
        "hand-offs and wake-ups cost CPU"
    );
}

#[test]
fn dynamic_netqueue_packs_light_filters_and_says_so() {
    let body = BASE
        .replace(
            "steering = \"single\"",
            "steering = \"netqueue\"\nplacement = \"packed\"",
        )
        .replace("count = 2", "count = 3")
        + "rate = \"50Mbps\"\n";
    let m = engine::run(&setup(&body), 1, 100_000_000, 50_000_000).unwrap();
    assert_eq!(m.queues_used, 1, "{m:?}");
    let even = engine::run(
        &setup(&body.replace("\"packed\"", "\"even\"")),
        1,
        100_000_000,
        50_000_000,
    )
    .unwrap();
    assert_eq!(even.queues_used, 3);
    assert!(m.host_cpu < even.host_cpu);
}

#[test]
fn sending_without_tunnel_tso_costs_per_segment() {
    let body = BASE.replace("direction = \"receive\"", "direction = \"send\"\noverlay = true") + "rate = \"100Mbps\"\n";
    let tso = run(&setup(&body));
    let sw = run(&setup(
        &body.replace("steering = \"single\"", "steering = \"single\"\ntso = false"),
    ));
    assert!((tso.throughput_gbps - 0.8).abs() < 0.03 && (sw.throughput_gbps - 0.8).abs() < 0.03);
    assert!(sw.host_cpu > 5.0 * tso.host_cpu, "{} vs {}", sw.host_cpu, tso.host_cpu);
}

#[test]
fn split_rx_auto_splits_a_saturated_queue_and_says_so() {
    let body = BASE
        .replace("count = 2", "count = 4")
        .replace("steering = \"single\"", "steering = \"single\"\nsplit_rx = \"auto\"");
    let auto = engine::run(&setup(&body), 1, 100_000_000, 50_000_000).unwrap();
    let on = engine::run(&setup(&body.replace("\"auto\"", "\"on\"")), 1, 100_000_000, 50_000_000).unwrap();
    // One queue at full speed is saturated: SplitRx decides to split after its hold (three
    // 10 ms observations), and from then on runs as if it were on.
    assert!(
        auto.events
            .iter()
            .any(|(t, e)| e.contains("queue 0 split") && *t <= 0.05),
        "{:?}",
        auto.events
    );
    assert!(
        (auto.throughput_gbps - on.throughput_gbps).abs() < 0.02 * on.throughput_gbps,
        "{} vs {}",
        auto.throughput_gbps,
        on.throughput_gbps
    );
    // Paced far below what the core carries, it never splits.
    let light = engine::run(
        &setup(&format!("{body}rate = \"50Mbps\"\n")),
        1,
        100_000_000,
        50_000_000,
    )
    .unwrap();
    assert!(light.events.is_empty(), "{:?}", light.events);
}
