#!/usr/bin/env bash
# Does adding and removing ports disturb another port's traffic? One VM runs iperf3 TCP to a
# remote host through the switch for 2*PHASE s, reporting every 100 ms; for the first PHASE s
# nothing else happens (the baseline), for the second COUNT ports are added and removed in a
# loop through `teamster ctl` (every tenth on an interface that exists, so sockets are opened
# and closed too). Prints, per phase, the 100 ms throughput intervals (min / p5 / median), how
# many fell under half the baseline median, TCP retransmits, and the switch's drops.
#
#   tmc-vm --veth tmc-v1--> [ teamster ] --veth tmc-u0--> tmc-psw bridge --> tmc-peer
#
# Offloads as the veths have them (on); one data-plane thread unless WORKERS says otherwise.
set -euo pipefail
PHASE=${PHASE:-10}
COUNT=${COUNT:-100}
WORKERS=${WORKERS:-1}
OUT=${1:?usage: bench/live/churn.sh OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
TEAMSTER=${TEAMSTER:-$REPO/target/release/teamster}
[ -x "$TEAMSTER" ] || cargo build -q --release -p teamster --manifest-path "$REPO/Cargo.toml"
DAEMON=""
cleanup() {
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null || true
  for l in tmc-v1 tmc-u0; do ip link del "$l" 2>/dev/null || true; done
  for k in $(seq 0 10 $((COUNT - 1))); do ip link del "tmc-x$k" 2>/dev/null || true; done
  for n in tmc-vm tmc-psw tmc-peer; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
for n in tmc-vm tmc-psw tmc-peer; do ip netns add "$n"; ip -n "$n" link set lo up; done
ip link add tmc-v1 type veth peer name eth0 netns tmc-vm
ip -n tmc-vm link set eth0 address 02:00:00:00:0c:01
ip -n tmc-vm addr add 10.78.0.1/24 dev eth0; ip -n tmc-vm link set eth0 up; ip link set tmc-v1 up
ip -n tmc-psw link add br0 type bridge; ip -n tmc-psw link set br0 up
ip link add tmc-u0 type veth peer name p0 netns tmc-psw
ip link set tmc-u0 up; ip -n tmc-psw link set p0 master br0; ip -n tmc-psw link set p0 up
ip -n tmc-psw link add r0 type veth peer name eth0 netns tmc-peer
ip -n tmc-psw link set r0 master br0; ip -n tmc-psw link set r0 up
ip -n tmc-peer addr add 10.78.0.100/24 dev eth0; ip -n tmc-peer link set eth0 up
cat > "$OUT/switch.toml" <<TOML
workers = $WORKERS
[[uplinks]]
name = "uplink1"
interface = "tmc-u0"
capacity = "100G"
[[port_groups]]
name = "vms"
policy = "port-id"
active = ["uplink1"]
[[ports]]
name = "vm1"
interface = "tmc-v1"
mac = "02:00:00:00:0c:01"
group = "vms"
TOML
SOCK="$OUT/api.sock"
"$TEAMSTER" run "$OUT/switch.toml" --status-file "$OUT/status.json" --api-socket "$SOCK" 2> "$OUT/daemon.log" &
DAEMON=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
ip netns exec tmc-peer iperf3 -s -1 -D -I "$OUT/iperf3.pid"
sleep 0.5
ip netns exec tmc-vm ping -c 3 -i 0.2 -W 1 10.78.0.100 >/dev/null
ip netns exec tmc-vm iperf3 -c 10.78.0.100 -t $((2 * PHASE)) -i 0.1 --json > "$OUT/iperf3.json" &
CLIENT=$!
sleep "$PHASE"
start=$(date +%s.%N)
for k in $(seq 0 $((COUNT - 1))); do
  if [ $((k % 10)) -eq 0 ]; then
    ip link add "tmc-x$k" type veth peer name "tmc-y$k"; ip link set "tmc-x$k" up
  fi
  "$TEAMSTER" ctl --socket "$SOCK" port add "extra$k" --interface "tmc-x$k" --group vms \
    --mac "$(printf '02:00:00:00:0d:%02x' "$k")" >/dev/null
  "$TEAMSTER" ctl --socket "$SOCK" port del "extra$k" >/dev/null
done
end=$(date +%s.%N)
wait "$CLIENT"
"$TEAMSTER" ctl --socket "$SOCK" --json ports > "$OUT/ports.json"
"$TEAMSTER" ctl --socket "$SOCK" --json uplinks > "$OUT/uplinks.json"
python3 - "$OUT" "$PHASE" "$start" "$end" "$COUNT" <<'PY'
import json, statistics, sys
out, phase, start, end, count = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
j = json.load(open(out + "/iperf3.json"))
iv = [(i["sum"]["start"], i["sum"]["bits_per_second"] / 1e9, i["sum"].get("retransmits", 0)) for i in j["intervals"]]
churn_s = end - start
base = [g for t, g, _ in iv if 0.5 <= t < phase]
during = [g for t, g, _ in iv if phase <= t < phase + churn_s]
def q(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(p * len(v)))]
med = statistics.median(base)
ports = json.load(open(out + "/ports.json")) + json.load(open(out + "/uplinks.json"))
drops = {f'{p["name"]} {k}': v for p in ports for k, v in p["counters"]["drops"].items() if v}
applied = [int(l.split("applied in ")[1].split(" us")[0]) for l in open(out + "/daemon.log") if "applied in " in l]
if applied:
    applied.sort()
    print(f"data plane stopped per change: median {applied[len(applied) // 2]} us, max {applied[-1]} us ({len(applied)} changes)")
for name, v in (("baseline", base), ("during churn", during)):
    low = sum(1 for g in v if g < med / 2)
    print(f"{name:13s} {len(v):4d} x 100 ms: min {min(v):6.2f}  p5 {q(v, .05):6.2f}  median {statistics.median(v):6.2f} Gbit/s; under half the baseline median: {low}")
print(f"churn: {2 * count} changes in {churn_s:.2f} s ({churn_s / (2 * count) * 1000:.1f} ms each, ctl process included)")
print(f"TCP retransmits: baseline {sum(r for t, _, r in iv if t < phase)}, during churn {sum(r for t, _, r in iv if phase <= t < phase + churn_s)}")
print(f"drops in the switch (ports and uplinks): {drops or 'none'}")
PY
