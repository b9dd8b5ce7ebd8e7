#!/usr/bin/env bash
# Packets per second through the switch, next to a Linux bridge in the same run.
#
#   tmq-vm --veth--> [ teamster | Linux bridge tmq-br ] --veth tmq-u0--> tmq-psw bridge --> tmq-peer
#
# iperf3 UDP, unthrottled (-b 0), 64-byte frames (18-byte payload) and 1500-byte IP packets
# (1472-byte payload), VM to uplink and uplink to VM (-R), DURATION s each; the figure is the
# frames per second the receiving namespace's interface got (delivered by the path), next to
# what the sender's interface sent (offered) and what iperf3 itself received (a single iperf3
# receiver drops much of what it is delivered on this machine, so its own count measures it). Offloads off, no shaping; the Teamster uplink is
# configured at 100 Gbit/s so its pacer is not the limit. One iperf3 stream per run: on a
# 2-core machine the generator and the switch share the CPU, so read the ratios, not the absolutes.
# BACKENDS: the Teamster backends to measure, each in turn after the bridge in the same run
# (`backend =` on the port and the uplink): "af_packet" (the default), "af_xdp", or both.
# Each cell also prints the sender's and receiver's CPU as iperf3 reports it: a sender near
# 100% means the load generator, not the path, set the figure.
set -euo pipefail
DURATION=${DURATION:-5}
# Offered rate per cell, as iperf3's -b (0: unthrottled). At a fixed rate the figure to read is
# the daemon's CPU per packet, which a neighbour stealing CPU changes far less than throughput.
RATE=${RATE:-0}
# PPS=0 measures only the idle ping round trip; BUSY_POLL_US sets Teamster's busy_poll_us
# (default: the switch's own default, 50).
PPS=${PPS:-1}
BUSY_POLL_US=${BUSY_POLL_US:-}
# WORKERS sets Teamster's data-plane threads (default: one per core).
WORKERS=${WORKERS:-}
BACKENDS=${BACKENDS:-${BACKEND:-af_packet}}
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
switch_toml() {   # backend
  [ -n "$BUSY_POLL_US" ] && echo "busy_poll_us = $BUSY_POLL_US"
  [ -n "$WORKERS" ] && echo "workers = $WORKERS"
  cat <<TOML
[[uplinks]]
name = "up0"
interface = "tmq-u0"
capacity = "100G"
backend = "$1"
[[port_groups]]
name = "vms"
policy = "port-id"
active = ["up0"]
[[ports]]
name = "vm1"
interface = "tmq-v1"
mac = "$MAC"
group = "vms"
backend = "$1"
TOML
}
# The daemon's user + system CPU seconds so far, or "-" when no daemon runs (the bridge).
cpu_s() { if [ -n "${DAEMON:-}" ]; then awk '{print ($14 + $15) / 100}' "/proc/$DAEMON/stat"; else echo -; fi; }
# Frames the interface eth0 in namespace $1 has sent ($2 = tx) or received ($2 = rx).
frames() { ip netns exec "$1" cat "/sys/class/net/eth0/statistics/$2_packets"; }
measure() {   # label; prints "label dir bytes pps loss% [CPU per packet]"
  local label=$1 dir len args snd rcv
  for dir in vm-to-uplink uplink-to-vm; do
    for len in 18 1472; do
      args=(); snd=tmq-vm; rcv=tmq-peer
      [ "$dir" = uplink-to-vm ] && { args=(-R); snd=tmq-peer; rcv=tmq-vm; }
      timeout $((DURATION + 15)) ip netns exec tmq-peer iperf3 -s -1 >/dev/null 2>&1 &
      local server=$!
      sleep 0.4
      local c0 tx0 rx0 vm; c0=$(cpu_s); tx0=$(frames $snd tx); rx0=$(frames $rcv rx)
      vmstat 1 > "$OUT/vmstat-$label-$dir-$len.txt" & vm=$!
      timeout $((DURATION + 10)) ip netns exec tmq-vm iperf3 -c 198.18.1.2 -u -b "$RATE" -l "$len" -t "$DURATION" --connect-timeout 3000 "${args[@]}" -J > "$OUT/$label-$dir-$len.json" 2>/dev/null || true
      local c1 tx1 rx1; c1=$(cpu_s); tx1=$(frames $snd tx); rx1=$(frames $rcv rx)
      kill "$vm"; wait "$vm" 2>/dev/null || true
      wait "$server" || true
      python3 - "$OUT/$label-$dir-$len.json" "$label" "$dir" "$len" "$c0" "$c1" $((tx1 - tx0)) $((rx1 - rx0)) "$OUT/vmstat-$label-$dir-$len.txt" <<'PY'
import json, sys
path, label, d, ln, c0, c1, offered, delivered, vmstat = sys.argv[1:]
offered, delivered = int(offered), int(delivered)
try:
    end = json.load(open(path))["end"]
    s = end["sum"]
    secs = s["seconds"]
    got = (s["packets"] - s["lost_packets"]) / secs
    cpu = ""
    if c0 != "-" and delivered > 0:
        us = (float(c1) - float(c0)) * 1e6 / delivered
        cpu = f", switch CPU {us:.2f} us per frame delivered"
    u = end.get("cpu_utilization_percent", {})
    # -R: the local end (host) receives; else it sends.
    snd, rcv = ("remote_total", "host_total") if d == "uplink-to-vm" else ("host_total", "remote_total")
    gen = f", sender CPU {u.get(snd, 0):.0f}%, receiver CPU {u.get(rcv, 0):.0f}%"
    # vmstat: skip the header lines and the first sample (averages since boot).
    rows = [l.split() for l in open(vmstat) if l.split() and l.split()[0].isdigit()][1:]
    st = sum(int(r[16]) for r in rows) / max(len(rows), 1)
    idle = sum(int(r[14]) for r in rows) / max(len(rows), 1)
    print(f"{label} {d} {'64B' if ln == '18' else '1500B'} {delivered / secs / 1e3:.1f} kpps delivered "
          f"of {offered / secs / 1e3:.1f} offered (at the interfaces), iperf3 {got / 1e3:.1f} kpps received, "
          f"{s['lost_percent']:.1f}% lost{cpu}{gen}, steal {st:.1f}%, idle {idle:.0f}%")
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
# Teamster, once per backend.
for backend in $BACKENDS; do
  switch_toml "$backend" > "$OUT/switch-$backend.toml"
  "$TEAMSTER" run "$OUT/switch-$backend.toml" --status-file "$OUT/status-$backend.json" 2> "$OUT/teamster-$backend.log" &
  DAEMON=$!
  sleep 1.5
  kill -0 "$DAEMON" 2>/dev/null || { echo "teamster ($backend) did not start:"; cat "$OUT/teamster-$backend.log"; exit 1; }
  ip netns exec tmq-vm ping -c 1 -W 2 198.18.1.2 >/dev/null 2>&1 || true
  rtt "teamster-$backend"
  [ "$PPS" = 0 ] || measure "teamster-$backend" | tee -a "$OUT/pps.txt"
  kill "$DAEMON"; wait "$DAEMON" 2>/dev/null || true; DAEMON=""
done
