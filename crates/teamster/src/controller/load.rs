//! `teamster controller load`: a load generator of simulated hosts against a running
//! controller, over its real API and real TLS, to measure what one controller holds.
//!
//! Model. Each simulated host has a certificate of its own, made in memory from the cluster's
//! CA (`--ca-dir`: `ca.pem` and `ca.key`), and behaves as a perfect agent: it registers once,
//! then reports every interval (its uplinks up, the VMs it was last told to have attached),
//! each report a fresh TLS connection as the switch's agent makes it. Before the measurement,
//! `--vms` VMs are powered on by the operator (the token), placed by the controller; during
//! it, `--power-ons-per-s` more are powered on and off again, and each one's latency taken.
//!
//! What it prints: reports sent and answered per second against the rate asked, report and
//! power-on latency percentiles, errors by kind, and, when `--pid` names the controller's
//! process, its CPU (user + system, from /proc) and resident memory, and the store's writes
//! per second (from the controller's `/metrics`). The generator runs on the same machine as
//! the controller unless it is run elsewhere: on a small machine it takes CPU from it, which
//! the figures must say.

use crate::http::client::{request, Target};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// The controller's TLS listener: https://HOST:PORT.
    #[arg(long)]
    url: String,
    /// The cluster CA's directory: ca.pem (which signed the controller's certificate) and
    /// ca.key (which makes each simulated host's certificate, in memory only).
    #[arg(long)]
    ca_dir: PathBuf,
    /// The operator's bearer token file (for the power-ons and /metrics).
    #[arg(long)]
    token_file: PathBuf,
    /// Simulated hosts (named load-00001 ...).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=20000))]
    hosts: u64,
    /// VMs powered on before the measurement.
    #[arg(long, default_value_t = 0)]
    vms: u64,
    /// Seconds measured.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
    /// Each host's report interval, milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60000))]
    interval_ms: u64,
    /// VMs powered on (and off again) per second during the measurement.
    #[arg(long, default_value_t = 1)]
    power_ons_per_s: u64,
    /// Requests in flight at most while registering and powering on.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// The controller's process, for its CPU and memory.
    #[arg(long)]
    pid: Option<u32>,
    /// Each simulated host connects from its own address: this one for the first, the next
    /// for the second, and so on (they must be this machine's, e.g. added to an interface of
    /// a namespace of the generator's own). Without it, every host connects from the system's
    /// choice, so a controller on the same machine sees them all as one local user, whose
    /// connections still in their handshake it caps (16).
    #[arg(long)]
    source_from: Option<std::net::Ipv4Addr>,
}

/// Each host's shape: two 25G uplinks, the vm class and a pool.
const SHAPE: &str = r#"{"uplinks": [{"name": "uplink1", "capacity": "25G"}, {"name": "uplink2", "capacity": "25G"}],
    "traffic_classes": [{"class": "vm"}], "pools": [{"name": "vm-pool"}], "derived": ["vm", "vm-pool"]}"#;

/// Latencies and outcomes, shared by the tasks.
#[derive(Default)]
struct Tally {
    reports_sent: AtomicU64,
    reports_ok: AtomicU64,
    report_ms: Mutex<Vec<f64>>,
    power_on_ms: Mutex<Vec<f64>>,
    errors: Mutex<std::collections::BTreeMap<String, u64>>,
}

/// The most latencies kept of each kind (later ones are not: the percentiles are of the first).
const LATENCIES_KEPT: usize = 1 << 20;

/// What was counted over the window.
struct Counted {
    reports_sent: u64,
    reports_ok: u64,
    report_ms: Vec<f64>,
    power_on_ms: Vec<f64>,
    errors: std::collections::BTreeMap<String, u64>,
}

impl Tally {
    fn error(&self, kind: String) {
        *self
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind)
            .or_default() += 1;
    }

    fn latency(&self, of: &Mutex<Vec<f64>>, ms: f64) {
        let mut v = of.lock().unwrap_or_else(|e| e.into_inner());
        if v.len() < LATENCIES_KEPT {
            v.push(ms);
        }
    }

    /// Forgets everything counted so far (the window starts).
    fn reset(&self) {
        self.snapshot();
    }

    /// What was counted since the last reset, and a reset.
    fn snapshot(&self) -> Counted {
        let take = |m: &Mutex<Vec<f64>>| std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner()));
        Counted {
            reports_sent: self.reports_sent.swap(0, Ordering::Relaxed),
            reports_ok: self.reports_ok.swap(0, Ordering::Relaxed),
            report_ms: take(&self.report_ms),
            power_on_ms: take(&self.power_on_ms),
            errors: std::mem::take(&mut *self.errors.lock().unwrap_or_else(|e| e.into_inner())),
        }
    }
}

/// Runs the load: registers, powers on, measures, prints.
pub fn run(args: LoadArgs) -> Result<(), String> {
    if !args.url.starts_with("https://") {
        return Err(format!("--url {}: expected https://HOST:PORT", args.url));
    }
    let ca_pem = args.ca_dir.join("ca.pem");
    let ca = super::ca::Authority::open(&args.ca_dir)?;
    let cas = [ca.certificate().clone()];
    let operator = Target {
        socket: PathBuf::new(),
        url: Some(args.url.clone()),
        token_file: Some(args.token_file.clone()),
        ca: Some(ca_pem.clone()),
        cert: None,
        key: None,
        tls: Some(crate::http::tls::client_config(&cas, None)?),
        source: None,
    };
    eprintln!("load: making {} host certificates", args.hosts);
    let mut hosts = Vec::new();
    for i in 1..=args.hosts {
        let name = format!("load-{i:05}");
        let issued = ca.issue(&super::ca::Kind::Host, &name, super::ca::validity(1))?;
        let chain = crate::http::tls::certificates(&issued.cert_pem)?;
        let key = crate::http::tls::private_key(&issued.key_pem)?;
        let mut t = operator.clone();
        (t.token_file, t.tls) = (None, Some(crate::http::tls::client_config(&cas, Some((chain, key)))?));
        t.source = args
            .source_from
            .map(|a| std::net::IpAddr::V4((u32::from(a) + (i - 1) as u32).into()));
        hosts.push((name, t));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    rt.block_on(drive(args, operator, hosts))
}

async fn drive(args: LoadArgs, operator: Target, hosts: Vec<(String, Target)>) -> Result<(), String> {
    let shape: serde_json::Value = serde_json::from_str(SHAPE).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(args.concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for (name, t) in &hosts {
        let (name, t, shape, sem) = (name.clone(), t.clone(), shape.clone(), sem.clone());
        set.spawn(async move {
            let _permit = sem.acquire().await;
            let path = format!("/api/v1/hosts/{name}");
            match request(&t, "PUT", &path, Some(shape)).await {
                Ok(a) if a.status == 200 => Ok(()),
                Ok(a) => Err(format!(
                    "register {name}: {} {}",
                    a.status,
                    String::from_utf8_lossy(&a.body)
                )),
                Err(e) => Err(format!("register {name}: {e}")),
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    eprintln!(
        "load: {} hosts registered in {:.1} s",
        hosts.len(),
        started.elapsed().as_secs_f64()
    );
    // The hosts report from now on, through the power-ons too (a host silent for the host
    // timeout would be failed); what they did before the window is not counted.
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let interval = Duration::from_millis(args.interval_ms);
    let mut reporting = tokio::task::JoinSet::new();
    for (k, (name, t)) in hosts.into_iter().enumerate() {
        let (tally, stop) = (tally.clone(), stop.clone());
        // Spread over the interval, as hosts started at different times are.
        let offset = interval.mul_f64(k as f64 / args.hosts as f64);
        reporting.spawn(report_loop(name, t, tally, offset, interval, stop));
    }
    let started = Instant::now();
    for i in 1..=args.vms {
        let (t, sem, tally) = (operator.clone(), sem.clone(), tally.clone());
        set.spawn(async move {
            let _permit = sem.acquire().await;
            power_on(&t, &format!("vm-{i:06}"), i, &tally).await;
            Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    if args.vms > 0 {
        eprintln!(
            "load: {} VMs powered on in {:.1} s",
            args.vms,
            started.elapsed().as_secs_f64()
        );
    }
    tally.reset();
    let before = Sample::take(&operator, args.pid).await;
    let window = Duration::from_secs(args.seconds);
    let until = tokio::time::Instant::now() + window;
    if args.power_ons_per_s > 0 {
        let (t, tally) = (operator.clone(), tally.clone());
        let every = Duration::from_secs(1) / args.power_ons_per_s.min(1000) as u32;
        set.spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut n = 0u64;
            while tokio::time::Instant::now() < until {
                tick.tick().await;
                n += 1;
                let name = format!("probe-{n:06}");
                power_on(&t, &name, 1_000_000 + n, &tally).await;
                let _ = request(&t, "DELETE", &format!("/api/v1/vms/{name}"), None).await;
            }
            Ok(())
        });
    }
    tokio::time::sleep_until(until).await;
    let counted = tally.snapshot();
    let after = Sample::take(&operator, args.pid).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = set.join_next().await {
        r.map_err(|e| e.to_string())??;
    }
    while reporting.join_next().await.is_some() {}
    print(&args, &counted, &before, &after, window);
    Ok(())
}

/// One simulated host: a report every `interval` until `stop`, attaching what it is told.
async fn report_loop(
    name: String,
    t: Target,
    tally: Arc<Tally>,
    offset: Duration,
    interval: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    tokio::time::sleep(offset).await;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let path = format!("/api/v1/hosts/{name}/report");
    let mut attached: Vec<String> = Vec::new();
    loop {
        tick.tick().await;
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let body = serde_json::json!({"links": {"uplink1": true, "uplink2": true}, "attached": attached});
        tally.reports_sent.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        match request(&t, "POST", &path, Some(body)).await {
            Ok(a) if a.status == 200 => {
                let ms = sent.elapsed().as_secs_f64() * 1e3;
                tally.reports_ok.fetch_add(1, Ordering::Relaxed);
                tally.latency(&tally.report_ms, ms);
                if let Ok(told) = serde_json::from_slice::<serde_json::Value>(&a.body) {
                    let names = told["assignments"].as_array().into_iter().flatten();
                    attached = names.filter_map(|v| v["vm"].as_str().map(str::to_string)).collect();
                }
            }
            Ok(a) => tally.error(format!("report: HTTP {}", a.status)),
            Err(e) => tally.error(format!("report: {}", kind(&e))),
        }
    }
}

/// An error's kind: its text without the URL, cut short.
fn kind(e: &str) -> String {
    let text = match e.find("://") {
        Some(i) => e[i..].split_once(": ").map_or(e, |(_, rest)| rest),
        None => e,
    };
    text.chars().take(80).collect()
}

/// Powers VM `name` on (100 Mbit/s reserved, a MAC from `n`), its latency taken.
async fn power_on(t: &Target, name: &str, n: u64, tally: &Tally) {
    let mac = format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        (n >> 32) & 0xff,
        (n >> 24) & 0xff,
        (n >> 16) & 0xff,
        (n >> 8) & 0xff,
        n & 0xff
    );
    let body = serde_json::json!({"name": name, "mac": mac, "reservation": "100M"});
    let sent = Instant::now();
    match request(t, "POST", "/api/v1/vms", Some(body)).await {
        Ok(a) if a.status == 201 => {
            let ms = sent.elapsed().as_secs_f64() * 1e3;
            tally.latency(&tally.power_on_ms, ms);
        }
        Ok(a) => tally.error(format!("power-on: HTTP {}", a.status)),
        Err(e) => tally.error(format!("power-on: {}", kind(&e))),
    }
}

/// The controller's counters at one moment.
struct Sample {
    at: Instant,
    cpu_s: Option<f64>,
    rss_kib: Option<u64>,
    saves: Option<f64>,
}

impl Sample {
    async fn take(operator: &Target, pid: Option<u32>) -> Sample {
        let (cpu_s, rss_kib) = pid.map_or((None, None), process);
        let saves = match request(operator, "GET", "/metrics", None).await {
            Ok(a) => String::from_utf8_lossy(&a.body)
                .lines()
                .find_map(|l| l.strip_prefix("teamster_controller_store_saves_total "))
                .and_then(|v| v.trim().parse().ok()),
            Err(_) => None,
        };
        Sample {
            at: Instant::now(),
            cpu_s,
            rss_kib,
            saves,
        }
    }
}

/// Process `pid`'s CPU seconds (user + system) and resident memory (KiB), from /proc.
fn process(pid: u32) -> (Option<f64>, Option<u64>) {
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    // The fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let cpu = stat.as_deref().and_then(|s| {
        let rest = s.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / tick)
    });
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        });
    (cpu, rss)
}

/// The `p`th percentile of `v` (sorted here), if any.
fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    Some(v[i.min(v.len() - 1)])
}

fn print(args: &LoadArgs, counted: &Counted, before: &Sample, after: &Sample, window: Duration) {
    let secs = window.as_secs_f64();
    let asked = args.hosts as f64 * 1000.0 / args.interval_ms as f64;
    let sent = counted.reports_sent as f64 / secs;
    let ok = counted.reports_ok as f64 / secs;
    let mut reports = counted.report_ms.clone();
    let mut power_ons = counted.power_on_ms.clone();
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1} ms"));
    println!(
        "hosts {}  VMs {}  window {secs:.0} s  interval {} ms",
        args.hosts, args.vms, args.interval_ms
    );
    println!("reports/s: asked {asked:.0}, sent {sent:.0}, answered 200 {ok:.0}");
    println!(
        "report latency: p50 {}  p99 {}  max {}",
        ms(percentile(&mut reports, 50.0)),
        ms(percentile(&mut reports, 99.0)),
        ms(percentile(&mut reports, 100.0))
    );
    println!(
        "power-on latency ({}): p50 {}  p99 {}",
        power_ons.len(),
        ms(percentile(&mut power_ons, 50.0)),
        ms(percentile(&mut power_ons, 99.0))
    );
    let elapsed = after.at.duration_since(before.at).as_secs_f64();
    if let (Some(a), Some(b)) = (after.cpu_s, before.cpu_s) {
        println!("controller CPU: {:.0}% of one core", 100.0 * (a - b) / elapsed);
    }
    if let Some(rss) = after.rss_kib {
        println!("controller memory: {:.1} MiB resident", rss as f64 / 1024.0);
    }
    if let (Some(a), Some(b)) = (after.saves, before.saves) {
        println!("store writes/s: {:.1}", (a - b) / elapsed);
    }
    for (kind, n) in &counted.errors {
        println!("errors: {kind}: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_latencies() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 50.0), Some(51.0));
        assert_eq!(percentile(&mut v, 99.0), Some(99.0));
        assert_eq!(percentile(&mut [], 50.0), None);
    }
}
