#!/usr/bin/env bash
# Receive scaling, live: one uplink's received traffic spread over data-plane threads by RSS
# (or not), and Dynamic NetQueue packing at low load, each configuration in turn in every round.
#
#   tmr-peer --veth--> tmr-psw bridge --veth tmr-u0--> teamster --veth tmr-v1..4--> tmr-vm1..4
#
# Throughput (MODE=throughput): the peer sends to the VMs with iperf3 TCP (the VMs run the
# servers, the peer the clients with -R off: the peer is the sender), 8 flows into one VM and
# 8 flows into four VMs (2 each), DURATION s each, under three configurations of the switch:
#   w1      workers = 1 (one thread does everything)
#   w2      workers = 2, rx.queues = 1 (a port worker does the VMs' I/O; the switching worker
#           reads the uplink)
#   w2-rss  workers = 2, rx.queues = 2, RSS (the uplink's receiving split over both threads)
# The figure is the receivers' goodput (iperf3's sum_received), with the daemon's CPU seconds
# per Gbit and the machine's idle time. OFFLOADS=off turns TSO/GSO/GRO off on every veth (one
# frame per packet: the switch's per-frame costs dominate), on keeps the veth defaults.
#
# CPU at low load (MODE=packing): the peer sends RATE (default 20M) of UDP to each of the four
# VMs for DURATION s, under workers = 3 and rx.queues = 4 with NetQueue's filters spread one
# per queue (steering = "netqueue", queues 1-3 over two port workers) or packed by Dynamic
# NetQueue (steering = "dynamic_netqueue": all four filters on one queue at this load); the
# figure is the daemon's CPU seconds over the run, and each thread's; `one-thread` is the same
# load on `workers = 1` (no queues), for reference.
#
# ROUNDS rounds (default 3), configurations interleaved within each. On a 2-core machine the
# senders, the receivers and the switch share the CPU: read the ratios within a round.
set -euo pipefail
MODE=${MODE:-throughput}
DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
OFFLOADS=${OFFLOADS:-off}
RATE=${RATE:-20M}
# BUSY_POLL_US sets the switch's busy_poll_us (its default, 50, unless given).
BUSY_POLL_US=${BUSY_POLL_US:-}
OUT=${1:?usage: bench/live/rx.sh OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); : > "$OUT/rx.txt"
TEAMSTER=${TEAMSTER:-$REPO/target/release/teamster}
[ -x "$TEAMSTER" ] || cargo build -q --release -p teamster --manifest-path "$REPO/Cargo.toml"
VMS=4
DAEMON=""
cleanup() {
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null || true
  ip link del tmr-u0 2>/dev/null || true
  for i in $(seq 1 $VMS); do ip link del "tmr-v$i" 2>/dev/null || true; done
  for n in tmr-psw tmr-peer $(seq -f "tmr-vm%g" 1 $VMS); do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
off() { [ "$OFFLOADS" = off ] && ethtool -K "$@" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true; }
for n in tmr-psw tmr-peer; do ip netns add "$n"; ip -n "$n" link set lo up; done
ip -n tmr-psw link add pbr type bridge stp_state 0; ip -n tmr-psw link set pbr up
ip link add tmr-u0 type veth peer name up0 netns tmr-psw; ip link set tmr-u0 up; off tmr-u0
ip -n tmr-psw link set up0 master pbr; ip -n tmr-psw link set up0 up
ip -n tmr-psw link add pe type veth peer name eth0 netns tmr-peer
ip -n tmr-psw link set pe master pbr; ip -n tmr-psw link set pe up
ip -n tmr-peer addr add 198.19.0.100/24 dev eth0; ip -n tmr-peer link set eth0 up
ip netns exec tmr-psw bash -c "$(declare -f off); OFFLOADS=$OFFLOADS; off up0; off pe"
ip netns exec tmr-peer bash -c "$(declare -f off); OFFLOADS=$OFFLOADS; off eth0"
PORTS=""
for i in $(seq 1 $VMS); do
  ip netns add "tmr-vm$i"; ip -n "tmr-vm$i" link set lo up
  ip link add "tmr-v$i" type veth peer name eth0 netns "tmr-vm$i"; ip link set "tmr-v$i" up; off "tmr-v$i"
  ip -n "tmr-vm$i" link set eth0 address "02:00:00:00:01:0$i"
  ip -n "tmr-vm$i" addr add "198.19.0.$i/24" dev eth0; ip -n "tmr-vm$i" link set eth0 up
  ip netns exec "tmr-vm$i" bash -c "$(declare -f off); OFFLOADS=$OFFLOADS; off eth0"
  PORTS+="
[[ports]]
name = \"vm$i\"
interface = \"tmr-v$i\"
mac = \"02:00:00:00:01:0$i\"
group = \"vms\""
done
switch_toml() {   # head lines
  [ -n "$BUSY_POLL_US" ] && echo "busy_poll_us = $BUSY_POLL_US"
  printf '%s\n' "$1"
  cat <<TOML
[[uplinks]]
name = "up0"
interface = "tmr-u0"
capacity = "100G"
backend = "af_packet"
[[port_groups]]
name = "vms"
policy = "port-id"
active = ["up0"]
$PORTS
TOML
}
cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$DAEMON/stat"; }
# Each thread's name and CPU seconds so far.
threads() { for t in /proc/$DAEMON/task/*; do awk '{gsub(/[()]/, "", $2); printf "%s=%.2f ", $2, ($14 + $15) / 100}' "$t/stat"; done; }
start() {   # label, head lines
  switch_toml "$2" > "$OUT/switch-$1.toml"
  rm -f "$OUT/api.sock"
  "$TEAMSTER" run "$OUT/switch-$1.toml" --status-file "$OUT/status-$1.json" --api-socket "$OUT/api.sock" 2> "$OUT/teamster-$1.log" &
  DAEMON=$!
  sleep 1.5
  kill -0 "$DAEMON" 2>/dev/null || { echo "teamster ($1) did not start:"; cat "$OUT/teamster-$1.log"; exit 1; }
  for i in $(seq 1 $VMS); do ip netns exec tmr-peer ping -c 1 -W 2 "198.19.0.$i" >/dev/null 2>&1 || true; done
}
stop() { kill "$DAEMON"; wait "$DAEMON" 2>/dev/null || true; DAEMON=""; }
# Runs iperf3 servers in VMs 1..$1 and $2 flows in all from the peer (split evenly), with
# iperf3 options $3; prints the summed goodput in Gbit/s.
traffic() {   # vms flows options label
  local vms=$1 flows=$2 opts=$3 label=$4 pids=() servers=() i
  for i in $(seq 1 "$vms"); do
    timeout $((DURATION + 15)) ip netns exec "tmr-vm$i" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
    servers+=($!)
  done
  for i in $(seq 1 "$vms"); do
    until ip netns exec "tmr-vm$i" ss -ltn 2>/dev/null | grep -q ':5201'; do sleep 0.05; done
  done
  for i in $(seq 1 "$vms"); do
    timeout $((DURATION + 10)) ip netns exec tmr-peer iperf3 -c "198.19.0.$i" -p 5201 -t "$DURATION" \
      -P $((flows / vms)) $opts -J > "$OUT/$label-vm$i.json" 2>/dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}" "${servers[@]}"; do wait "$p" || true; done
  python3 - "$OUT" "$label" "$vms" <<'PY'
import json, sys
out, label, vms = sys.argv[1], sys.argv[2], int(sys.argv[3])
total = 0.0
for i in range(1, vms + 1):
    try:
        end = json.load(open(f"{out}/{label}-vm{i}.json"))["end"]
        total += end.get("sum_received", end.get("sum", {})).get("bits_per_second", 0)
    except Exception:
        pass
print(f"{total / 1e9:.3f}")
PY
}
idle_pct() { awk '/^cpu / {print $5 + $6}' /proc/stat; }
total_jiffies() { awk '/^cpu / {s = 0; for (i = 2; i <= NF; i++) s += $i; print s}' /proc/stat; }
if [ "$MODE" = throughput ]; then
  echo "throughput, offloads $OFFLOADS, ${DURATION}s per cell, $ROUNDS rounds, $(nproc) CPUs" | tee -a "$OUT/rx.txt"
  for round in $(seq 1 "$ROUNDS"); do
    for cfg in w1 w2 w2-rss; do
      case $cfg in
        w1) head="workers = 1" ;;
        w2) head="workers = 2" ;;
        w2-rss) head=$'workers = 2\n[rx]\nqueues = 2\nsteering = "rss"' ;;
      esac
      # [rx] must come after the top-level keys: it goes last in the head.
      start "$cfg" "$head"
      for shape in "1 8" "4 8"; do
        set -- $shape
        label="r$round-$cfg-${1}vm"
        c0=$(cpu_s); i0=$(idle_pct); t0=$(total_jiffies)
        gbps=$(traffic "$1" "$2" "" "$label")
        c1=$(cpu_s); i1=$(idle_pct); t1=$(total_jiffies)
        python3 -c "
g, c, idle = $gbps, $c1 - $c0, 100 * ($i1 - $i0) / max($t1 - $t0, 1)
per = f'{c / (g * $DURATION):.2f}' if g > 0 else '-'
print(f'round $round  $cfg  $2 flows into $1 VM(s): {g:.3f} Gbit/s, switch CPU {c:.2f} s ({per} s per Gbit), machine idle {idle:.0f}%')
" | tee -a "$OUT/rx.txt"
      done
      grep -h '"rx"' "$OUT/teamster-$cfg.log" | head -2 >> "$OUT/rx-events.txt" || true
      stop
    done
  done
else
  echo "packing, $RATE UDP to each of $VMS VMs, ${DURATION}s per cell, $ROUNDS rounds, $(nproc) CPUs" | tee -a "$OUT/rx.txt"
  for round in $(seq 1 "$ROUNDS"); do
    for cfg in spread packed one-thread; do
      steering=netqueue; [ $cfg = packed ] && steering=dynamic_netqueue
      if [ $cfg = one-thread ]; then
        start "$cfg" "workers = 1"
        steering="none, workers = 1"
      else
        start "$cfg" $'workers = 3\n[rx]\nqueues = 4\nsteering = "'$steering'"'
      fi
      # Let the filters be placed (one round of the MAC table) and packed.
      sleep 3
      c0=$(cpu_s); th0=$(threads)
      pids=()
      for i in $(seq 1 $VMS); do
        timeout $((DURATION + 15)) ip netns exec "tmr-vm$i" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
        pids+=($!)
      done
      for i in $(seq 1 $VMS); do
        until ip netns exec "tmr-vm$i" ss -lun 2>/dev/null | grep -q ':5201' || ip netns exec "tmr-vm$i" ss -ltn 2>/dev/null | grep -q ':5201'; do sleep 0.05; done
      done
      for i in $(seq 1 $VMS); do
        timeout $((DURATION + 10)) ip netns exec tmr-peer iperf3 -c "198.19.0.$i" -u -b "$RATE" -t "$DURATION" -J > "$OUT/p$round-$cfg-vm$i.json" 2>/dev/null &
        pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p" || true; done
      c1=$(cpu_s); th1=$(threads)
      used=$("$TEAMSTER" ctl --socket "$OUT/api.sock" --json rx 2>/dev/null </dev/null | python3 -c "
import json, sys
v = json.load(sys.stdin)
u = v['uplinks'][0]
print(sorted({f['queue'] for f in u['filters']}))" 2>/dev/null || echo '?')
      echo "round $round  $cfg ($steering): switch CPU $(python3 -c "print(f'{$c1 - $c0:.2f}')") s over ${DURATION}s; filters on queues $used; threads before: $th0; after: $th1" | tee -a "$OUT/rx.txt"
      stop
    done
  done
fi
