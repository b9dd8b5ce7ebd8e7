//! The send model: NetIOC's interleaving against the default scheduler's bursts, interrupt
//! moderation, ACKs' cost, and the probe's one-way latency.

use super::engine;
use super::scenario::{resolve, Setup};
use super::Measured;

const SEND: &str = r#"
[host]
cores = 16
[nic]
speed = "10Gbps"
queues = 1
steering = "single"
[costs]
guest_irq = 1000.0
[vms]
count = 8
vcpus = 1
tx_batch = 16
irq_rate = 4000
[traffic]
direction = "send"
streams_per_vm = 1
payload = 1448
tso_segments = 44
window = 704
"#;

fn file(body: &str) -> String {
    format!(
        "mode = \"receive\"\nname = \"t\"\nduration_ms = 60\nwarmup_ms = 20\n{body}\n[[variants]]\nname = \"only\"\n"
    )
}

fn setup(body: &str) -> Setup {
    resolve(&file(body)).unwrap().variants.remove(0).1
}

fn run(s: &Setup) -> Measured {
    engine::run(s, 1, 60_000_000, 20_000_000).unwrap()
}

fn netioc(body: &str) -> String {
    body.replace("steering = \"single\"", "steering = \"single\"\nscheduler = \"netioc\"")
}

/// Under NetIOC a round of eight ports' super-frames (8 x 53 us) outlasts the 250 us
/// coalescing timer, so every super-frame's completion has an interrupt of its own; the default
/// scheduler sends each VM's window as one burst, whose completions share a few.
#[test]
fn netioc_spreads_what_the_default_scheduler_sends_in_bursts() {
    let fifo = run(&setup(SEND));
    let ioc = run(&setup(&netioc(SEND)));
    let window_s = 0.04;
    let super_frames = ioc.segments as f64 / 44.0 / window_s;
    assert!(
        (ioc.guest_irqs_per_s - super_frames).abs() < super_frames * 0.03,
        "NetIOC: {} interrupts/s for {super_frames} super-frames/s",
        ioc.guest_irqs_per_s
    );
    assert!(
        fifo.guest_irqs_per_s * 2.5 < ioc.guest_irqs_per_s,
        "fifo {} against NetIOC {} interrupts/s",
        fifo.guest_irqs_per_s,
        ioc.guest_irqs_per_s
    );
    // Both carry the link; NetIOC costs more, on the host (its scheduler, the send threads'
    // wake-ups) and in the guests (the interrupts).
    assert!((ioc.throughput_gbps / fifo.throughput_gbps - 1.0).abs() < 0.01);
    assert!(fifo.throughput_gbps > 9.0, "{fifo:?}");
    assert!(
        ioc.host_cpu > fifo.host_cpu && ioc.guest_cpu > fifo.guest_cpu,
        "{fifo:?} {ioc:?}"
    );
}

/// A vNIC takes at most one interrupt per coalescing timer; a window that the timer outlasts
/// holds the VM below the link.
#[test]
fn moderation_caps_the_interrupt_rate() {
    let body = SEND
        .replace("count = 8", "count = 1")
        .replace("irq_rate = 4000", "irq_rate = 1000");
    let m = run(&setup(&body));
    // Each cycle: the 704-segment window's first super-frame leaves the wire (53 us), the
    // timer runs 1 ms, the interrupt releases the window: about 925 a second.
    assert!(
        (900.0..=1000.0).contains(&m.guest_irqs_per_s),
        "{} interrupts/s at a 1 ms timer",
        m.guest_irqs_per_s
    );
    // 704 segments are 0.86 ms of wire: idle for the rest of each 1.08 ms cycle.
    let expect = 704.0 * 1448.0 * 8.0 * m.guest_irqs_per_s / 1e9;
    assert!(
        (m.throughput_gbps - expect).abs() < expect * 0.03,
        "{m:?} against {expect}"
    );
    let fast = run(&setup(&SEND.replace("count = 8", "count = 1")));
    assert!(
        fast.throughput_gbps > 9.4,
        "a 250 us timer leaves the wire busy: {fast:?}"
    );
    assert!(fast.guest_irqs_per_s <= 4000.0, "{fast:?}");
}

/// Each ACK (one per two segments here) costs the host's receive path and the guest's, as
/// the receive costs say.
#[test]
fn acks_cost_the_receive_path() {
    let plain = setup(SEND);
    let with = setup(&SEND.replace("window = 704", "window = 704\nack_every = 2"));
    let (a, b) = (run(&plain), run(&with));
    assert_eq!(a.segments, b.segments, "ACKs change the cost, not the timing");
    let c = plain.costs;
    let acks_per_s = b.segments as f64 / 2.0 / 0.04;
    let host = acks_per_s * (c.rx + c.rx_byte * 66.0 + c.switch + c.copy + c.copy_byte * 66.0) / 1e9;
    let guest = acks_per_s * (c.guest + c.guest_byte * 66.0) / 1e9;
    // The window's edges cut a few ACKs either way.
    assert!(
        (b.host_cpu - a.host_cpu - host).abs() < host * 0.02,
        "{} vs {host}",
        b.host_cpu - a.host_cpu
    );
    assert!((b.guest_cpu - a.guest_cpu - guest).abs() < guest * 0.02);
}

/// On an idle link the probe goes straight to the wire under the default scheduler; under
/// NetIOC it first waits for the scheduler to wake and do its work.
#[test]
fn an_idle_probe_pays_the_schedulers_wake_up_and_work() {
    let body = format!(
        "{}rate = \"1Mbps\"\n[ping]\ninterval_us = 500\n",
        SEND.replace("payload = 1448", "payload = 64")
            .replace("tso_segments = 44", "tso_segments = 1")
    );
    let s = setup(&body);
    let wire = ((98.0 + 24.0) * 8.0 / 10e9 * 1e9_f64).ceil();
    let fifo = run(&s).send_latency_us.unwrap() * 1e3;
    let ioc = run(&setup(&netioc(&body))).send_latency_us.unwrap() * 1e3;
    let c = s.costs;
    // Now and then a VM's 64-byte frame is on the wire first: 74 ns each, rarely.
    assert!(fifo >= wire && fifo < wire + 5.0, "{fifo} ns against the wire's {wire}");
    let stages = c.wakeup + c.schedule + wire;
    assert!(ioc >= stages && ioc < stages + 20.0, "{ioc} ns against {stages}");
}

#[test]
fn send_only_keys_and_bad_values_are_refused_by_name() {
    let receive = SEND.replace("direction = \"send\"", "direction = \"receive\"");
    let cases = [
        (
            netioc(&receive.replace("tx_batch = 16\nirq_rate = 4000\n", "")),
            "nic.scheduler: only for",
        ),
        (receive.replace("tx_batch = 16\n", ""), "vms.irq_rate: only for"),
        (SEND.replace("irq_rate = 4000", "irq_rate = 5"), "vms.irq_rate = 5"),
        (SEND.replace("tx_batch = 16", "tx_batch = 0"), "vms.tx_batch = 0"),
        (
            SEND.replace("window = 704", "window = 704\nack_every = 65"),
            "traffic.ack_every = 65",
        ),
        (
            netioc(&SEND.replace("cores = 16", "cores = 8")),
            "host.cores = 8: the queues and threads need 9",
        ),
        (SEND.replace("queues = 1", "queues = 1\nscheduler = \"wfq\""), "wfq"),
    ];
    for (body, want) in cases {
        let e = resolve(&file(&body)).unwrap_err();
        assert!(e.contains(want), "{want}: got {e}");
    }
    let diff = format!(
        "{}\n[[expect]]\nmetric = \"send-latency\"\nvariant = \"only\"\ncompare = \"difference\"\nmax = 5\n",
        file(SEND)
    );
    let e = resolve(&diff).unwrap_err();
    assert!(e.contains("name the variant to subtract"), "{e}");
}
