#!/usr/bin/env bash
# NetIOC scheduler vs DPDK rte_sched, back to back on this machine, limits-only workload.
# Builds the rte_sched peer from ../../../shared/peers/rte_sched into a temporary folder (its
# code is not part of this repository), builds teamster, then runs ROUNDS rounds of
# {no backlog, 16 packets per leaf} x {1024, 4096 leaves} x {64, 1500 B} for both, alternating.
# Output: JSON lines in $OUT (default bench/sched/results.jsonl) and a Markdown table on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
peer=${PEER:-$repo/../shared/peers/rte_sched}
OUT=${OUT:-$here/results.jsonl}
ROUNDS=${ROUNDS:-3}
PACKETS=${PACKETS:-10000000}
if ! pkg-config --exists libdpdk 2>/dev/null; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    dpdk-dev libdpdk-dev pkg-config build-essential
fi
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cp "$peer"/bench.c "$peer"/Makefile "$build"/
make -s -C "$build"
cargo build -q --release -p teamster --manifest-path "$repo/Cargo.toml"
teamster=$repo/target/release/teamster
: > "$OUT"
for round in $(seq "$ROUNDS"); do
  for bl in 0 16; do
    for leaves in 1024 4096; do
      for len in 64 1500; do
        "$build"/bench --pipes "$leaves" --pkt-len "$len" --packets "$PACKETS" --backlog $((bl * leaves)) 2>/dev/null \
          | tail -1 | sed "s/^{/{\"impl\":\"rte_sched\",\"round\":$round,\"backlog_per_leaf\":$bl,/" >> "$OUT"
        "$teamster" bench sched --tree limits --leaves "$leaves" --pkt-len "$len" --packets "$PACKETS" --backlog "$bl" --json \
          | sed "s/^{/{\"round\":$round,\"backlog_per_leaf\":$bl,/" >> "$OUT"
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
    rows[(d["backlog_per_leaf"], n, d["pkt_len"], d["impl"])].append((d["mpps"], d["cpu_ns_per_pkt"]))
print("| backlog/leaf | leaves | bytes | rte_sched Mpps min / median / max | CPU ns/pkt | Teamster Mpps min / median / max | CPU ns/pkt | ratio |")
print("|---:|---:|---:|---|---:|---|---:|---:|")
for (bl, n, l, impl) in sorted(k for k in rows if k[3] == "teamster"):
    r, t = rows[(bl, n, l, "rte_sched")], rows[(bl, n, l, "teamster")]
    f = lambda v: "%.2f / %.2f / %.2f | %.0f" % (min(x[0] for x in v), st.median(x[0] for x in v), max(x[0] for x in v), st.median(x[1] for x in v))
    print(f"| {bl} | {n} | {l} | {f(r)} | {f(t)} | {st.median(x[0] for x in t) / st.median(x[0] for x in r):.2f}x |")
PY
