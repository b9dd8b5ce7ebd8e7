"""Tables for bench/live/compare.sh: reads OUTDIR/runs.jsonl and each run's summary.json, writes
OUTDIR/compare.json and OUTDIR/compare.md (and prints the markdown).

Usage: python3 bench/live/compare_report.py OUTDIR

Switches, as compare.sh names them: teamster-kernel (Teamster's kernel fast path, DATAPATH=kernel),
teamster (its user-space data plane), ovs, bridge.

Per offload setting and metric: min / median / max across rounds for each switch, and the
same-round ratios of each Teamster to OVS and to the bridge (each round's Teamster figure divided
by the other switch's figure in the same round, then min / median / max of those ratios). Then the
issue's targets for the user-space data plane and the kernel path's targets (ratios to the bridge),
each with the figures it was judged on.
"""
import json
import statistics
import sys

out = sys.argv[1]
runs = [json.loads(l) for l in open(f"{out}/runs.jsonl") if l.strip()]
for r in runs:
    try:
        r["summary"] = json.load(open(f"{r['dir']}/summary.json"))
    except Exception:
        r["summary"] = None


def dig(s, *path):
    for p in path:
        if s is None:
            return None
        s = s.get(p) if isinstance(s, dict) else None
    return s


def div(a, b):
    return a / b if a is not None and b else None


def total(d):
    v = [x for x in (d or {}).values() if x is not None]
    return sum(v) if v else None


# (key, label, extractor, ratio?) for the bond runs; ratio = same-round ratios are meaningful.
BOND = [
    ("gbit", "TCP throughput, 4 VMs (Gbit/s)", lambda s: div(s.get("aggregate_mbps_steady"), 1000), True),
    ("switch_cpu_per_gbit", "switch process CPU-s per Gbit", lambda s: s.get("switch_cpu_s_per_gbit"), True),
    ("host_cpu_per_gbit", "whole machine CPU-s per Gbit (incl. iperf3)", lambda s: s.get("host_cpu_s_per_gbit"), True),
    ("retransmits", "TCP retransmits", lambda s: s.get("tcp_retransmits"), False),
    ("ping_load_p50", "ping under 4 TCP streams p50 (ms)", lambda s: dig(s, "ping_under_tcp_load", "p50_ms"), True),
    ("ping_load_p99", "ping under 4 TCP streams p99 (ms)", lambda s: dig(s, "ping_under_tcp_load", "p99_ms"), True),
    ("ping_load_lost", "pings lost under load", lambda s: dig(s, "ping_under_tcp_load", "lost"), False),
    ("ping_idle_p50", "idle ping p50 (ms)", lambda s: dig(s, "ping_idle", "p50_ms"), True),
    ("ping_idle_p99", "idle ping p99 (ms)", lambda s: dig(s, "ping_idle", "p99_ms"), True),
    ("ping_idle_lost", "idle pings lost", lambda s: dig(s, "ping_idle", "lost"), False),
    # Packets per second: delivered (at the receiver's interface) and, beside it, offered (sent by
    # the generator into the sender's interface). Delivered == offered: the switch kept up with the
    # generator, so the figure is the generator's rate, not the switch's limit.
    ("kpps_64_v2u", "64 B VM to uplink (kpps delivered)", lambda s: dig(s, "pps", "vm-to-uplink", "64B", "delivered_kpps"), True),
    ("kpps_64_v2u_offered", "64 B VM to uplink (kpps offered)", lambda s: dig(s, "pps", "vm-to-uplink", "64B", "offered_kpps"), False),
    ("kpps_1500_v2u", "1500 B VM to uplink (kpps delivered)", lambda s: dig(s, "pps", "vm-to-uplink", "1500B", "delivered_kpps"), True),
    ("kpps_1500_v2u_offered", "1500 B VM to uplink (kpps offered)", lambda s: dig(s, "pps", "vm-to-uplink", "1500B", "offered_kpps"), False),
    ("kpps_64_u2v", "64 B uplink to VM (kpps delivered)", lambda s: dig(s, "pps", "uplink-to-vm", "64B", "delivered_kpps"), True),
    ("kpps_64_u2v_offered", "64 B uplink to VM (kpps offered)", lambda s: dig(s, "pps", "uplink-to-vm", "64B", "offered_kpps"), False),
    ("kpps_1500_u2v", "1500 B uplink to VM (kpps delivered)", lambda s: dig(s, "pps", "uplink-to-vm", "1500B", "delivered_kpps"), True),
    ("kpps_1500_u2v_offered", "1500 B uplink to VM (kpps offered)", lambda s: dig(s, "pps", "uplink-to-vm", "1500B", "offered_kpps"), False),
    ("steal_steady", "steal % over the TCP steady window", lambda s: dig(s, "machine_steady", "steal_pct"), False),
]
FAILOVER = [
    ("gap_at_fail", "largest receiver gap at the failure, ms (max of 4 VMs)", lambda s: s.get("failover_gap_ms_max"), True),
    ("noise_floor", "noise floor: largest gap in the 2 s before, ms (max of 4 VMs)", lambda s: s.get("failover_noise_floor_ms_max"), True),
    ("ping_gap", "longest ping gap, ms (10 ms pings, max of 4 VMs)", lambda s: max([v for v in (s.get("failover_longest_ping_gap_ms") or {}).values() if v is not None] or [None]) if s.get("failover_longest_ping_gap_ms") else None, False),
    ("udp_lost", "UDP packets lost, whole run (sum of 4 VMs)", lambda s: total(s.get("failover_udp_lost_packets")), False),
]
SWITCHES = [s for s in ("teamster-kernel", "teamster", "ovs", "bridge") if any(r["switch"] == s for r in runs)]
# Same-round ratio columns: (numerator switch, denominator switch, column name).
RATIOS = [("teamster-kernel", "ovs", "teamster-kernel/ovs"), ("teamster-kernel", "bridge", "teamster-kernel/bridge"),
          ("teamster", "ovs", "teamster/ovs"), ("teamster", "bridge", "teamster/bridge")]


def mmm(v):
    v = [x for x in v if x is not None]
    if not v:
        return None
    return {"min": min(v), "median": statistics.median(v), "max": max(v), "n": len(v)}


def fmt(x):
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if isinstance(x, int):
        return str(x)
    return f"{x:.0f}" if a >= 100 else f"{x:.1f}" if a >= 10 else f"{x:.2f}" if a >= 0.1 else f"{x:.3f}"


def cell(m, suffix=""):
    if not m:
        return "n/a"
    if m["n"] == 1 or m["min"] == m["max"]:
        return fmt(m["median"]) + suffix
    return f"{fmt(m['min'])} / **{fmt(m['median'])}** / {fmt(m['max'])}{suffix}"


def table(mode, offload, metrics):
    sel = [r for r in runs if r["mode"] == mode and r["offload"] == offload and r["rc"] == 0 and r["summary"]]
    if not sel:
        return None
    rounds = sorted({r["round"] for r in sel})
    by = {(r["switch"], r["round"]): r["summary"] for r in sel}
    sws = [s for s in SWITCHES if any(k[0] == s for k in by)]
    res = {}
    for key, label, f, ratio in metrics:
        row = {"label": label}
        for sw in sws:
            row[sw] = mmm([f(by[(sw, n)]) for n in rounds if (sw, n) in by])
        for num, other, name in RATIOS:
            if num in sws and other in sws and ratio:
                row[name] = mmm([div(f(by[(num, n)]), f(by[(other, n)])) for n in rounds
                                 if (num, n) in by and (other, n) in by
                                 and f(by[(num, n)]) is not None])
        res[key] = row
    return {"switches": sws, "rounds": rounds, "metrics": res}


report = {"runs": [{k: v for k, v in r.items() if k != "summary"} for r in runs], "bond": {}, "failover": {}}
md = []
info = open(f"{out}/run-info.txt").read() if __import__("os").path.exists(f"{out}/run-info.txt") else ""
md.append("```\n" + info.strip() + "\n```\n")
md.append("Cells: min / **median** / max across rounds (one value when they agree or one round ran). "
          "Ratios are same-round: each round's figure for the switch named first over the other switch's in that round. "
          "teamster-kernel is Teamster with its kernel fast path (DATAPATH=kernel: a tcx BPF program switches the frames), "
          "teamster its user-space data plane.\n")
md.append("Switch process CPU counts the process's own user + system time: none for the bridge, and for "
          "teamster-kernel only the daemon's (control plane, punted frames), since the BPF program runs in softirq "
          "time in other processes' contexts as the bridge does; compare those two on whole-machine CPU.\n")
md.append("Packets per second: offered is what the generator (iperf3 UDP, unthrottled, one stream) sent into the "
          "sender's interface, delivered what the receiver's interface counted. Delivered == offered means the switch "
          "kept up and the generator was the bound (it was saturated): the figure, and a ratio of two such figures, "
          "then measures the generator (and any forwarding work charged to the sending CPU), not the switch's limit. "
          "Delivered < offered means the switch was the bound.\n")
for mode, metrics, key in (("bond", BOND, "bond"), ("failover-udp", FAILOVER, "failover")):
    for off in ("on", "off"):
        t = table(mode, off, metrics)
        if not t:
            continue
        report[key][off] = t
        ratio_cols = [name for num, other, name in RATIOS if num in t["switches"] and other in t["switches"]]
        title = "TCP ramp, idle ping, packets per second" if mode == "bond" else "failover-udp (an uplink's physical-switch side down)"
        md.append(f"### {title}, offloads {off} (rounds {', '.join(map(str, t['rounds']))})\n")
        md.append("| metric | " + " | ".join(t["switches"] + ratio_cols) + " |")
        md.append("|---|" + "---|" * (len(t["switches"]) + len(ratio_cols)))
        for k, row in t["metrics"].items():
            cells = [cell(row.get(s)) for s in t["switches"]] + [cell(row.get(c), "x") if row.get(c) else "" for c in ratio_cols]
            md.append(f"| {row['label']} | " + " | ".join(cells) + " |")
        md.append("")

md.append("### Every run: the machine\n")
md.append("| round | # | switch | offloads | mode | load 1/5/15 min at start | busy % (run) | steal % (run) | steal % (steady window) | Gbit/s | exit |")
md.append("|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|")
for r in sorted(runs, key=lambda r: (r["round"], r["index"])):
    s = r["summary"] or {}
    g = div(s.get("aggregate_mbps_steady"), 1000)
    md.append(f"| {r['round']} | {r['index']} | {r['switch']} | {r['offload']} | {r['mode']} | {' '.join(r['loadavg_start'])} | "
              f"{r['busy_pct_run']} | {r['steal_pct_run']} | {fmt(dig(s, 'machine_steady', 'steal_pct'))} | {fmt(g)} | {r['rc']} |")
md.append("")

# The targets (issue 10), judged on the medians, with every round's figure beside.
def per_round(off, key, col="teamster", mode="bond"):
    t = report["bond" if mode == "bond" else "failover"].get(off)
    return (t or {}).get("metrics", {}).get(key, {}).get(col)


def all_rounds(off, key, sw="teamster"):
    f = dict((k, fn) for k, _, fn, _ in BOND)[key]
    return [f(r["summary"]) for r in runs if r["mode"] == "bond" and r["offload"] == off and r["switch"] == sw and r["rc"] == 0 and r["summary"]]


def by_round(off, sw):
    """Each round's summary of sw's bond run with offload setting off (runs that exited 0)."""
    return {r["round"]: r["summary"] for r in runs if r["mode"] == "bond" and r["offload"] == off
            and r["switch"] == sw and r["rc"] == 0 and r["summary"]}


targets = []
def target(name, m, ok, detail, into=None):
    (targets if into is None else into).append({"target": name, "met": ok, "figures": detail})


def judge(name, off, key, col, op, bound, into=None, also=None):
    """Judged on the median of column col (a switch or a same-round ratio); also = (ok, text): a
    further condition that must hold too, and its figures."""
    m = per_round(off, key, col)
    if not m:
        target(name, None, None, "not measured", into)
        return
    ok = m["median"] >= bound if op == ">=" else m["median"] <= bound
    detail = f"median {fmt(m['median'])} (rounds: min {fmt(m['min'])}, max {fmt(m['max'])}, n={m['n']}) {op} {bound}"
    if also:
        ok = ok and also[0]
        detail += "; " + also[1]
    target(name, m, ok, detail, into)


judge("offloads on: throughput >= 1.5x OVS userspace with TSO", "on", "gbit", "teamster/ovs", ">=", 1.5)
judge("offloads on: throughput >= 0.5x the Linux bridge", "on", "gbit", "teamster/bridge", ">=", 0.5)
judge("offloads on: switch CPU per Gbit no more than OVS's", "on", "switch_cpu_per_gbit", "teamster/ovs", "<=", 1.0)
judge("offloads off: throughput >= 1.5x OVS userspace", "off", "gbit", "teamster/ovs", ">=", 1.5)
for off in ("on", "off"):
    p50 = all_rounds(off, "ping_load_p50")
    lost = all_rounds(off, "ping_load_lost")
    if p50:
        ok = all(x is not None and x <= 2.0 for x in p50) and all(x == 0 for x in lost)
        target(f"offloads {off}: ping under load p50 <= 2 ms, no ping lost (every round)", None, ok,
               f"p50 {', '.join(fmt(x) for x in p50)} ms; lost {', '.join(fmt(x) for x in lost)}")
    i50, i99 = all_rounds(off, "ping_idle_p50"), all_rounds(off, "ping_idle_p99")
    if i50:
        ok = all(x is not None and x <= 0.1 for x in i50) and all(x is not None and x <= 0.5 for x in i99)
        target(f"offloads {off}: idle ping p50 <= 0.1 ms and p99 <= 0.5 ms (every round)", None, ok,
               f"p50 {', '.join(fmt(x) for x in i50)} ms; p99 {', '.join(fmt(x) for x in i99)} ms")
report["targets"] = targets

# The kernel path's targets: teamster-kernel against the Linux bridge (the kernel's own switch, the
# bound a BPF fast path in the same kernel aims at), as same-round ratios, judged on their medians.
KERNEL, BASE = "teamster-kernel", "bridge"
kcol = f"{KERNEL}/{BASE}"
kernel_targets = []
PPS_TARGETS = [("kpps_64_v2u", "64 B VM to uplink", "vm-to-uplink", "64B"),
               ("kpps_1500_v2u", "1500 B VM to uplink", "vm-to-uplink", "1500B"),
               ("kpps_64_u2v", "64 B uplink to VM", "uplink-to-vm", "64B"),
               ("kpps_1500_u2v", "1500 B uplink to VM", "uplink-to-vm", "1500B")]


def kept_up(p):
    """The switch delivered what the generator offered (within 0.1 %): the generator was the bound."""
    return bool(p and p.get("offered_kpps") and p.get("delivered_kpps") is not None
                and p["delivered_kpps"] >= 0.999 * p["offered_kpps"])


def pps_fig(sw, p):
    """One switch's delivered / offered kpps in one round, and which side was the bound."""
    bound = "kept up" if kept_up(p) else "switch-bound"
    return f"{sw} {fmt(p.get('delivered_kpps'))}/{fmt(p.get('offered_kpps'))} ({bound})"


if KERNEL in SWITCHES:
    for off in ("on", "off"):
        judge(f"offloads {off}: throughput >= 1.0x the bridge", off, "gbit", kcol, ">=", 1.0, kernel_targets)
    for off in ("on", "off"):
        k, b = by_round(off, KERNEL), by_round(off, BASE)
        pm = lambda key, sw: per_round(off, key, sw)
        abs_ms = lambda key: (f"{KERNEL} median {fmt((pm(key, KERNEL) or {}).get('median'))} ms, "
                              f"{BASE} {fmt((pm(key, BASE) or {}).get('median'))} ms")
        judge(f"offloads {off}: idle ping p50 <= 1.5x the bridge's", off, "ping_idle_p50", kcol, "<=", 1.5,
              kernel_targets, (True, abs_ms("ping_idle_p50")))
        lost = [dig(k[n], "ping_under_tcp_load", "lost") for n in sorted(k)]
        judge(f"offloads {off}: ping p50 under 4 TCP streams <= 2x the bridge's, no ping lost (every round)", off,
              "ping_load_p50", kcol, "<=", 2.0, kernel_targets,
              (bool(lost) and all(x == 0 for x in lost),
               abs_ms("ping_load_p50") + f"; {KERNEL} lost {', '.join(fmt(x) for x in lost) or 'n/a'}"))
        for key, label, d, size in PPS_TARGETS:
            # Every round's delivered / offered for both, and whether the generator was the bound.
            figs, both_gen = [], []
            for n in sorted(set(k) & set(b)):
                pk, pb = dig(k[n], "pps", d, size), dig(b[n], "pps", d, size)
                if pk is None or pb is None:
                    continue
                both_gen.append(kept_up(pk) and kept_up(pb))
                figs.append(f"r{n} {pps_fig(KERNEL, pk)}, {pps_fig(BASE, pb)}")
            text = "kpps delivered/offered: " + ("; ".join(figs) or "n/a")
            if both_gen and all(both_gen):
                text += "; generator-bound in every round: the ratio compares the generators, not the switches' limits"
            judge(f"offloads {off}: {label} packets per second >= 1.0x the bridge", off, key, kcol, ">=", 1.0,
                  kernel_targets, (True, text))
        judge(f"offloads {off}: whole-machine CPU per Gbit <= 1.1x the bridge's", off, "host_cpu_per_gbit", kcol,
              "<=", 1.1, kernel_targets, (True, f"{KERNEL} median {fmt((pm('host_cpu_per_gbit', KERNEL) or {}).get('median'))} "
                                               f"CPU-s/Gbit, {BASE} {fmt((pm('host_cpu_per_gbit', BASE) or {}).get('median'))}"))
report["kernel_targets"] = kernel_targets

md.append("### The issue's targets (teamster: the user-space data plane)\n")
md.append("| target | met | figures |")
md.append("|---|---|---|")
for t in targets:
    md.append(f"| {t['target']} | {'n/a' if t['met'] is None else 'yes' if t['met'] else '**no**'} | {t['figures']} |")
md.append("")
if kernel_targets:
    md.append(f"### The kernel path's targets ({KERNEL}: same-round ratios to the bridge, medians over rounds)\n")
    md.append("| target | met | figures |")
    md.append("|---|---|---|")
    for t in kernel_targets:
        md.append(f"| {t['target']} | {'n/a' if t['met'] is None else 'yes' if t['met'] else '**no**'} | {t['figures']} |")
    md.append("")
json.dump(report, open(f"{out}/compare.json", "w"), indent=1)
open(f"{out}/compare.md", "w").write("\n".join(md))
print("\n".join(md))
