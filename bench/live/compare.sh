#!/usr/bin/env bash
# One harness for the live data plane: Teamster with its kernel fast path (teamster-kernel: the
# tcx BPF program switches the frames), Teamster with its user-space data plane (teamster), the
# Open vSwitch peer (userspace datapath, bond balance-slb) and a Linux bridge in the same topology
# (bench/live/run.sh, SWITCH=... DATAPATH=...), interleaved over rounds, with offloads on and off.
#
#   bench/live/compare.sh OUTDIR
#
# Each round runs, for every offload setting in OFFLOAD and every switch in SWITCHES, run.sh
# MODE=bond (idle ping, packets per second, the four-VM TCP ramp with a ping under load), then a
# MODE=failover-udp run for every switch in FAILOVER (offloads FAILOVER_OFFLOAD); every other
# round runs the same list in reverse order, so no switch always goes first or last. Per run it
# records the 1-minute load average at the start and the machine's busy and steal shares over the
# whole run (/proc/stat). Then it writes OUTDIR/compare.json and OUTDIR/compare.md: min / median /
# max across rounds per switch, offload and metric, and the same-round ratios of each Teamster
# (teamster-kernel, teamster) to OVS and to the bridge, with the targets judged on them
# (bench/live/compare_report.py; rerun it on OUTDIR to redo the tables).
#
# Switch names (SWITCHES, FAILOVER) and what run.sh runs for each; each run's directory is
# OUTDIR/rROUND/NAME-OFFLOAD-MODE and runs.jsonl and summary.json carry NAME:
#   teamster-kernel  SWITCH=teamster DATAPATH=kernel    (one thread: WORKERS does not apply; it
#                    does not pace to a capacity yet, so with UPLINK_RATE set the physical
#                    switch's shapers hold its excess, as for OVS and the bridge)
#   teamster         SWITCH=teamster DATAPATH=userspace (named, not left to the switch's default,
#                    so the name stays true if the default changes)
#   ovs              SWITCH=ovs
#   bridge           SWITCH=bridge
#
# Parameters (environment; defaults in brackets):
#   ROUNDS [3]  OFFLOAD ["on off"]  SWITCHES ["teamster-kernel teamster ovs bridge"]
#   FAILOVER ["teamster-kernel teamster ovs"] (""= none; a bridge does not team)  FAILOVER_OFFLOAD [off]
#   UPLINK_RATE [none]  DURATION [15]  RAMP [2]  PPS [1]  PPS_S [3]  IDLE_PINGS [500]
#   FAIL_TOTAL [20]  FAIL_AT [6]  FAIL_HOLD [6]  UDP_RATE [20M]  WORKERS [switch default]
#   WAIT_LOAD: if set (e.g. 1.5), first wait until the 1-minute load average is below it, polling
#     every 30 s for at most WAIT_MAX_S [1200] s; the run then starts anyway and says so.
#   TEAMSTER [target/release/teamster, built if missing; teamster and teamster-kernel both run it]
# Every run is bounded by `timeout`; Ctrl-C or TERM stops the current run (which removes all it
# made) and the driver. A run that fails is recorded and reported, and the driver exits non-zero.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
OFFLOADS=${OFFLOAD:-on off}
SWITCHES=${SWITCHES:-teamster-kernel teamster ovs bridge}
FAILOVER=${FAILOVER-teamster-kernel teamster ovs}
FAILOVER_OFFLOAD=${FAILOVER_OFFLOAD:-off}
UPLINK_RATE=${UPLINK_RATE:-none}
DURATION=${DURATION:-15}
RAMP=${RAMP:-2}
PPS=${PPS:-1}
PPS_S=${PPS_S:-3}
IDLE_PINGS=${IDLE_PINGS:-500}
FAIL_TOTAL=${FAIL_TOTAL:-20}
FAIL_AT=${FAIL_AT:-6}
FAIL_HOLD=${FAIL_HOLD:-6}
UDP_RATE=${UDP_RATE:-20M}
WORKERS=${WORKERS:-}
WAIT_LOAD=${WAIT_LOAD:-}
WAIT_MAX_S=${WAIT_MAX_S:-1200}
OUT=${1:?usage: bench/live/compare.sh OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TEAMSTER=${TEAMSTER:-$REPO/target/release/teamster}
[ "$(id -u)" = 0 ] || { echo "compare.sh must run as root" >&2; exit 1; }
for s in $SWITCHES $FAILOVER; do
  case "$s" in teamster-kernel|teamster|ovs|bridge) ;; *) echo "unknown switch $s (teamster-kernel, teamster, ovs, bridge)" >&2; exit 2 ;; esac
done
for s in $FAILOVER; do [ "$s" != bridge ] || { echo "FAILOVER: a bridge does not team" >&2; exit 2; }; done
for o in $OFFLOADS $FAILOVER_OFFLOAD; do
  case "$o" in on|off) ;; *) echo "OFFLOAD entries must be on or off, not $o" >&2; exit 2 ;; esac
done
[ "$DURATION" -ge 5 ] || { echo "DURATION must be at least 5 s" >&2; exit 2; }

# Every tool any run needs, installed from Debian if missing; still missing = stop here.
tools=(ip:iproute2 bridge:iproute2 tc:iproute2 iperf3:iperf3 ping:iputils-ping ethtool:ethtool python3:python3 timeout:coreutils flock:util-linux)
case " $SWITCHES $FAILOVER " in *" ovs "*)
  tools+=(ovs-vswitchd:openvswitch-switch ovsdb-server:openvswitch-switch ovsdb-tool:openvswitch-switch ovs-vsctl:openvswitch-common ovs-appctl:openvswitch-common) ;;
esac
for t in "${tools[@]}"; do
  command -v "${t%%:*}" >/dev/null && continue
  echo "installing ${t#*:} (for ${t%%:*})" >&2
  if ! { apt-get -o DPkg::Lock::Timeout=300 update -q &&
         DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q "${t#*:}"; }; then
    echo "could not install ${t#*:} (for ${t%%:*})" >&2; exit 1
  fi
  command -v "${t%%:*}" >/dev/null || { echo "${t%%:*} is still missing after installing ${t#*:}" >&2; exit 1; }
done
# Both Teamster entries run the same binary.
case " $SWITCHES $FAILOVER " in *" teamster "*|*" teamster-kernel "*)
  [ -x "$TEAMSTER" ] || cargo build -q --release -p teamster --manifest-path "$REPO/Cargo.toml"
  [ -x "$TEAMSTER" ] || { echo "no teamster binary at $TEAMSTER" >&2; exit 1; } ;;
esac

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CHILD=""
on_signal() {
  if [ -n "$CHILD" ]; then kill -TERM "$CHILD" 2>/dev/null || true; wait "$CHILD" 2>/dev/null || true; fi
  echo "compare.sh: stopped" >&2
  exit 130
}
trap on_signal INT TERM

waited=""
if [ -n "$WAIT_LOAD" ]; then
  start=$(date +%s)
  while :; do
    l1=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$l1" -v m="$WAIT_LOAD" 'BEGIN {exit !(l < m)}'; then waited="load $l1 < $WAIT_LOAD after $(( $(date +%s) - start )) s"; break; fi
    if [ $(( $(date +%s) - start )) -ge "$WAIT_MAX_S" ]; then
      waited="load never fell below $WAIT_LOAD in $WAIT_MAX_S s (last $l1): ran anyway"; echo "compare.sh: $waited" >&2; break
    fi
    echo "compare.sh: load $l1, waiting for < $WAIT_LOAD" >&2
    sleep 30 & CHILD=$!; wait "$CHILD" || true; CHILD=""
  done
fi

{
  echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: $(for v in ROUNDS OFFLOADS SWITCHES FAILOVER FAILOVER_OFFLOAD UPLINK_RATE DURATION RAMP PPS PPS_S IDLE_PINGS FAIL_TOTAL FAIL_AT FAIL_HOLD UDP_RATE WORKERS; do printf '%s=%q ' "$v" "${!v}"; done)$0 $OUT"
  echo "wait_load: ${waited:-not asked}"
  echo "host: $(nproc) CPUs, kernel $(uname -r), $(ovs-vswitchd --version 2>/dev/null | head -1 || echo 'no OVS'), iperf3 $(iperf3 --version | head -1 | awk '{print $2}')"
  if [ -x "$TEAMSTER" ]; then
    echo "teamster: $TEAMSTER, built $(date -u -r "$TEAMSTER" +%Y-%m-%dT%H:%M:%SZ), tree at $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo '?')"
  fi
} > "$OUT/run-info.txt"
cat "$OUT/run-info.txt"
: > "$OUT/runs.jsonl"

failed=0
# One run of run.sh: round, index in the round, switch name (as above), offload, mode.
one_run() {
  local round=$1 idx=$2 sw=$3 off=$4 mode=$5 dir load st0 st1 t0 t1 rc limit rsw dp
  dir=$OUT/r$round/$sw-$off-$mode
  # The name to run.sh's SWITCH and DATAPATH (empty: not a Teamster, run.sh ignores it).
  case "$sw" in
    teamster-kernel) rsw=teamster; dp=kernel ;;
    teamster) rsw=teamster; dp=userspace ;;
    *) rsw=$sw; dp="" ;;
  esac
  mkdir -p "$dir"
  if [ "$mode" = bond ]; then
    limit=$((DURATION + 4 * RAMP + IDLE_PINGS / 100 + (PPS == 1 ? 4 * (PPS_S + 5) : 0) + 120))
  else
    limit=$((FAIL_TOTAL + 120))
  fi
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  st0=$(head -1 /proc/stat); t0=$(date +%s.%N)
  echo "== round $round #$idx: $sw offload $off $mode (load $load)" >&2
  timeout -k 30 "$limit" env SWITCH="$rsw" DATAPATH="$dp" OFFLOAD="$off" MODE="$mode" UPLINK_RATE="$UPLINK_RATE" \
    DURATION="$DURATION" RAMP="$RAMP" PPS="$PPS" PPS_S="$PPS_S" IDLE_PINGS="$IDLE_PINGS" \
    FAIL_TOTAL="$FAIL_TOTAL" FAIL_AT="$FAIL_AT" FAIL_HOLD="$FAIL_HOLD" UDP_RATE="$UDP_RATE" \
    WORKERS="$WORKERS" TEAMSTER="$TEAMSTER" "$HERE/run.sh" "$dir" > "$dir/run.log" 2>&1 &
  CHILD=$!
  rc=0; wait "$CHILD" || rc=$?
  CHILD=""
  st1=$(head -1 /proc/stat); t1=$(date +%s.%N)
  if [ "$rc" != 0 ]; then
    failed=$((failed + 1))
    echo "!! round $round: $sw offload $off $mode FAILED (exit $rc$([ "$rc" = 124 ] && echo ", timed out after $limit s")); last lines of $dir/run.log:" >&2
    tail -5 "$dir/run.log" >&2 || true
  fi
  python3 - "$round" "$idx" "$sw" "$off" "$mode" "$load" "$st0" "$st1" "$t0" "$t1" "$rc" "$dir" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
rnd, idx, sw, off, mode, load, st0, st1, t0, t1, rc, d = sys.argv[1:]
a, b = [list(map(int, x.split()[1:9])) for x in (st0, st1)]
dd = [y - x for x, y in zip(a, b)]
tot = max(1, sum(dd))
print(json.dumps({"round": int(rnd), "index": int(idx), "switch": sw, "offload": off, "mode": mode,
                  "loadavg_start": load.split(), "busy_pct_run": round(100 * (tot - dd[3] - dd[4]) / tot, 1),
                  "steal_pct_run": round(100 * dd[7] / tot, 1), "seconds": round(float(t1) - float(t0), 1),
                  "rc": int(rc), "dir": d}))
PY
}

for round in $(seq 1 "$ROUNDS"); do
  plan=()
  for off in $OFFLOADS; do for sw in $SWITCHES; do plan+=("$sw $off bond"); done; done
  for sw in $FAILOVER; do for off in $FAILOVER_OFFLOAD; do plan+=("$sw $off failover-udp"); done; done
  if [ $((round % 2)) = 0 ]; then
    rev=(); for ((k = ${#plan[@]} - 1; k >= 0; k--)); do rev+=("${plan[k]}"); done; plan=("${rev[@]}")
  fi
  idx=0
  for p in "${plan[@]}"; do
    idx=$((idx + 1))
    read -r sw off mode <<< "$p"
    one_run "$round" "$idx" "$sw" "$off" "$mode"
  done
done

python3 "$HERE/compare_report.py" "$OUT"
if [ "$failed" -gt 0 ]; then echo "compare.sh: $failed run(s) failed; see runs.jsonl and each run.log" >&2; exit 1; fi
