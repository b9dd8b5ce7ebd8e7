#!/usr/bin/env bash
# Packets per second through the switch, next to a Linux bridge in the same run.
#
#   tmq-vm --veth--> [ teamster | Linux bridge tmq-br ] --veth tmq-u0--> tmq-psw bridge --> tmq-peer
#
# iperf3 UDP, unthrottled (-b 0), 64-byte frames (18-byte payload) and 1500-byte IP packets
# (1472-byte payload), VM to uplink and uplink to VM (-R), DURATION s each; the figure is the
# packets the receiver got per second. Offloads off, no shaping; the Teamster uplink is
# configured at 100 Gbit/s so its pacer is not the limit. One iperf3 stream per run: on a
# 2-core machine the generator and the switch share the CPU, so read the ratios, not the absolutes.
set -euo pipefail
DURATION=${DURATION:-5}
# Offered rate per cell, as iperf3's -b (0: unthrottled). At a fixed rate the figure to read is
# the daemon's CPU per packet, which a neighbour stealing CPU changes far less than throughput.
RATE=${RATE:-0}
# PPS=0 measures only the idle ping round trip; BUSY_POLL_US sets Teamster's busy_poll_us
# (default: the switch's own default, 50).
PPS=${PPS:-1}
BUSY_POLL_US=${BUSY_POLL_US:-}
OUT=${1:?usage: bench/live/pps.sh OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); : > "$OUT/pps.txt"
TEAMSTER=${TEAMSTER:-$REPO/target/release/teamster}
[ -x "$TEAMSTER" ] || cargo build -q --release -p teamster --manifest-path "$REPO/Cargo.toml"
DAEMON=""
cleanup() {
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null || true
  ip link del tmq-br 2>/dev/null || true
  for l in tmq-v1 tmq-u0; do ip link del "$l" 2>/dev/null || true; done
  for n in tmq-vm tmq-psw tmq-peer; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
off() { ethtool -K "$@" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true; }
for n in tmq-vm tmq-psw tmq-peer; do ip netns add "$n"; ip -n "$n" link set lo up; done
ip link add tmq-v1 type veth peer name eth0 netns tmq-vm; ip link set tmq-v1 up; off tmq-v1
ip -n tmq-vm addr add 198.18.1.1/24 dev eth0; ip -n tmq-vm link set eth0 up; ip netns exec tmq-vm bash -c "$(declare -f off); off eth0"
ip -n tmq-psw link add pbr type bridge stp_state 0; ip -n tmq-psw link set pbr up
ip link add tmq-u0 type veth peer name up0 netns tmq-psw; ip link set tmq-u0 up; off tmq-u0
ip -n tmq-psw link set up0 master pbr; ip -n tmq-psw link set up0 up
ip -n tmq-psw link add pe type veth peer name eth0 netns tmq-peer
ip -n tmq-psw link set pe master pbr; ip -n tmq-psw link set pe up
ip -n tmq-peer addr add 198.18.1.2/24 dev eth0; ip -n tmq-peer link set eth0 up
for ns in tmq-psw; do ip netns exec $ns bash -c "$(declare -f off); off up0; off pe"; done
ip netns exec tmq-peer bash -c "$(declare -f off); off eth0"
MAC=$(ip -n tmq-vm link show eth0 | awk '/ether/ {print $2}')
{ [ -n "$BUSY_POLL_US" ] && echo "busy_poll_us = $BUSY_POLL_US"; true; } > "$OUT/switch.toml"
cat >> "$OUT/switch.toml" <<TOML
[[uplinks]]
name = "up0"
interface = "tmq-u0"
capacity = "100G"
[[port_groups]]
name = "vms"
policy = "port-id"
active = ["up0"]
[[ports]]
name = "vm1"
interface = "tmq-v1"
mac = "$MAC"
group = "vms"
TOML
# The daemon's user + system CPU seconds so far, or "-" when no daemon runs (the bridge).
cpu_s() { if [ -n "${DAEMON:-}" ]; then awk '{print ($14 + $15) / 100}' "/proc/$DAEMON/stat"; else echo -; fi; }
measure() {   # label; prints "label dir bytes pps loss% [CPU per packet]"
  local label=$1 dir len args
  for dir in vm-to-uplink uplink-to-vm; do
    for len in 18 1472; do
      args=(); [ "$dir" = uplink-to-vm ] && args=(-R)
      timeout $((DURATION + 15)) ip netns exec tmq-peer iperf3 -s -1 >/dev/null 2>&1 &
      local server=$!
      sleep 0.4
      local c0; c0=$(cpu_s)
      timeout $((DURATION + 10)) ip netns exec tmq-vm iperf3 -c 198.18.1.2 -u -b "$RATE" -l "$len" -t "$DURATION" --connect-timeout 3000 "${args[@]}" -J > "$OUT/$label-$dir-$len.json" 2>/dev/null || true
      local c1; c1=$(cpu_s)
      wait "$server" || true
      python3 - "$OUT/$label-$dir-$len.json" "$label" "$dir" "$len" "$c0" "$c1" <<'PY'
import json, sys
path, label, d, ln, c0, c1 = sys.argv[1:]
try:
    s = json.load(open(path))["end"]["sum"]
    got = (s["packets"] - s["lost_packets"]) / s["seconds"]
    cpu = ""
    if c0 != "-" and s["packets"] > s["lost_packets"]:
        us = (float(c1) - float(c0)) * 1e6 / (s["packets"] - s["lost_packets"])
        cpu = f", switch CPU {us:.2f} us per packet received"
    print(f"{label} {d} {'64B' if ln == '18' else '1500B'} {got / 1e3:.1f} kpps received, {s['lost_percent']:.1f}% lost{cpu}")
except Exception as e:
    print(f"{label} {d} {ln}: no result ({e})")
PY
    done
  done
}
# Idle round trip through the switch: 500 pings 5 ms apart, p50 / p99 / max in ms.
rtt() {   # label
  ip netns exec tmq-vm ping -n -c 500 -i 0.005 -W 1 198.18.1.2 2>/dev/null | tee "$OUT/ping-$1.txt" | python3 -c "
import re, sys
t = sorted(float(m) for m in re.findall(r'time=([0-9.]+) ms', sys.stdin.read()))
q = lambda p: t[min(len(t) - 1, int(p * len(t)))] if t else float('nan')
print(f'$1 idle ping RTT p50 {q(0.5):.3f} ms, p99 {q(0.99):.3f} ms, max {t[-1] if t else 0:.3f} ms, {len(t)} of 500 answered')
" | tee -a "$OUT/pps.txt"
}
ip netns exec tmq-vm ping -c 1 -W 2 198.18.1.2 >/dev/null 2>&1 || true
# Linux bridge baseline.
ip link add tmq-br type bridge stp_state 0; ip link set tmq-br up
ip link set tmq-v1 master tmq-br; ip link set tmq-u0 master tmq-br
sleep 1; ip netns exec tmq-vm ping -c 1 -W 2 198.18.1.2 >/dev/null 2>&1 || true
rtt linux-bridge
[ "$PPS" = 0 ] || measure linux-bridge | tee -a "$OUT/pps.txt"
ip link set tmq-v1 nomaster; ip link set tmq-u0 nomaster; ip link del tmq-br
# Teamster.
"$TEAMSTER" run "$OUT/switch.toml" --status-file "$OUT/status.json" 2> "$OUT/teamster.log" &
DAEMON=$!
sleep 1.5
kill -0 "$DAEMON" 2>/dev/null || { echo "teamster did not start:"; cat "$OUT/teamster.log"; exit 1; }
ip netns exec tmq-vm ping -c 1 -W 2 198.18.1.2 >/dev/null 2>&1 || true
rtt teamster
[ "$PPS" = 0 ] || measure teamster | tee -a "$OUT/pps.txt"
