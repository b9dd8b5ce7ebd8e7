#!/usr/bin/env bash
# NetIOC scheduler vs DPDK rte_sched, back to back on this machine, limits-only workload.
# Builds the rte_sched peer from ../../../shared/peers/rte_sched into a temporary folder (its
# code is not part of this repository), builds teamster, then runs ROUNDS rounds of
# {uniform, zipf} x {no backlog, 16 packets per leaf} x {1024, 4096 leaves} x {64, 1500 B} for
# both, alternating (the peer first in odd rounds, Teamster first in even ones). Both draw the
# same leaf table (the peer's --dist; Teamster's --dist builds it the same way). Teamster's
# harness writes and reads a 64-byte metadata record per packet, as rte_sched's mbufs are.
# Knobs: ROUNDS, PACKETS, DISTS, BACKLOGS, LEAVES, LENS (space-separated lists); TEAMSTER=path
# runs that binary instead of building this checkout (to measure another version).
# Output: JSON lines in $OUT (default bench/sched/results.jsonl), each with the 1-minute load
# average and the steal time (% of the run's wall time, from /proc/stat) measured around it,
# and a Markdown table on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
peer=${PEER:-$repo/../shared/peers/rte_sched}
OUT=${OUT:-$here/results.jsonl}
ROUNDS=${ROUNDS:-3}
PACKETS=${PACKETS:-10000000}
DISTS=${DISTS:-uniform zipf}
BACKLOGS=${BACKLOGS:-0 16}
LEAVES=${LEAVES:-1024 4096}
LENS=${LENS:-64 1500}
if ! pkg-config --exists libdpdk 2>/dev/null; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    dpdk-dev libdpdk-dev pkg-config build-essential
fi
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cp "$peer"/bench.c "$peer"/Makefile "$build"/
make -s -C "$build"
teamster=${TEAMSTER:-}
if [ -z "$teamster" ]; then
  cargo build -q --release -p teamster --manifest-path "$repo/Cargo.toml"
  teamster=$repo/target/release/teamster
fi
: > "$OUT"
# Total and steal jiffies of all CPUs (the "cpu" line of /proc/stat).
cpu_jiffies() { awk '/^cpu /{t=0; for (i = 2; i <= NF; i++) t += $i; print t, $9}' /proc/stat; }
# Runs one benchmark ("$@"), tagging its JSON line with round, backlog, load and steal.
one() {
  local tag=$1; shift
  local load t0 s0 t1 s1 line
  load=$(cut -d' ' -f1 /proc/loadavg)
  read -r t0 s0 < <(cpu_jiffies)
  line=$("$@" 2>/dev/null | tail -1)
  read -r t1 s1 < <(cpu_jiffies)
  local steal
  steal=$(awk -v a="$t0" -v b="$t1" -v c="$s0" -v d="$s1" 'BEGIN { printf "%.1f", (b > a) ? 100 * (d - c) / (b - a) : 0 }')
  echo "$line" | sed "s/^{/{$tag,\"loadavg1\":$load,\"steal_pct\":$steal,/" >> "$OUT"
}
for round in $(seq "$ROUNDS"); do
  for dist in $DISTS; do
    for bl in $BACKLOGS; do
      for leaves in $LEAVES; do
        for len in $LENS; do
          peer_run() {
            one "\"round\":$round,\"backlog_per_leaf\":$bl" \
              "$build"/bench --pipes "$leaves" --pkt-len "$len" --packets "$PACKETS" --dist "$dist" --backlog $((bl * leaves))
          }
          ours_run() {
            one "\"round\":$round,\"backlog_per_leaf\":$bl" \
              "$teamster" bench sched --tree limits --dist "$dist" --leaves "$leaves" --pkt-len "$len" --packets "$PACKETS" --backlog "$bl" --json
          }
          if ((round % 2)); then peer_run; ours_run; else ours_run; peer_run; fi
        done
      done
    done
  done
done
python3 - "$OUT" <<'PY'
import json, statistics as st, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    d = json.loads(line)
    n = d.get("pipes") or d.get("leaves")
    rows[(d.get("dist", "uniform"), d["backlog_per_leaf"], n, d["pkt_len"], d["impl"])].append(d)
print("| dist | backlog/leaf | leaves | bytes | rte_sched Mpps min / median / max | CPU ns/pkt | Teamster Mpps min / median / max | CPU ns/pkt | Mpps ratio (medians) | same-round Mpps ratios min / max | CPU ns ratio (medians) | load max | steal % max |")
print("|---|---:|---:|---:|---|---:|---|---:|---:|---|---:|---:|---:|")
order = {"uniform": 0, "zipf": 1}
for key in sorted((k for k in rows if k[4] == "teamster"), key=lambda k: (order.get(k[0], 9), k[1:4])):
    dist, bl, n, l, _ = key
    r, t = rows[(dist, bl, n, l, "rte_sched")], rows[key]
    f = lambda v: "%.2f / %.2f / %.2f | %.0f" % (min(x["mpps"] for x in v), st.median(x["mpps"] for x in v), max(x["mpps"] for x in v), st.median(x["cpu_ns_per_pkt"] for x in v))
    by_round = {x["round"]: x["mpps"] for x in r}
    same = [x["mpps"] / by_round[x["round"]] for x in t if x["round"] in by_round]
    steal = max(x.get("steal_pct", 0) for x in r + t)
    load = max(x.get("loadavg1", 0) for x in r + t)
    ratio = st.median(x["mpps"] for x in t) / st.median(x["mpps"] for x in r)
    cpu = st.median(x["cpu_ns_per_pkt"] for x in r) / st.median(x["cpu_ns_per_pkt"] for x in t)
    print(f"| {dist} | {bl} | {n} | {l} | {f(r)} | {f(t)} | {ratio:.2f}x | {min(same):.2f}x / {max(same):.2f}x | {cpu:.2f}x | {load:.1f} | {steal:.1f} |")
PY
