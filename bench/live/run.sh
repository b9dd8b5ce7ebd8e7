#!/usr/bin/env bash
# Teamster's side of the live comparison with the Open vSwitch peer (shared/peers/ovs/run.sh):
# the same topology and parameters, with `teamster run` as the switch.
#
#   tmb-vm1..4 --veth--> teamster (root namespace): ports tmb-v1..4, uplinks tmb-u0/tmb-u1
#                         tmb-u0/u1 --veth--> tmb-psw: Linux bridge pbr (STP off), htb RATE both
#                         directions on the pswitch side (egress htb, ingress via ifb), QLEN queue
#                         pbr --veth--> tmb-peer1..4 (iperf3 -s)
#
# Scenarios: `bond` (VM i starts iperf3 TCP at (i-1)*RAMP s, all run together DURATION s;
# steady window = the last DURATION-2.5 s), `failover-udp` (UDP_RATE per VM; at FAIL_AT s the
# pswitch side of the uplink carrying most VMs goes down for FAIL_HOLD s; receiver inter-arrival
# gaps from captures at each peer). Writes OUTDIR/summary.json and prints a summary.
# MODE=soak instead runs every VM's TCP stream for SOAK_S seconds (default 600) and samples the
# daemon's RSS every 30 s into OUTDIR/soak.json; MODE=bond runs the TCP ramp only.
# OFFLOAD=off (default, as the OVS peer's harness sets them) turns checksum/TSO/GSO/GRO off on
# every veth; OFFLOAD=on leaves them on, as a virtio-net guest has them (super-frames).
# Runs as root; removes everything it made (names tmb-*) on exit.
set -euo pipefail
UPLINK_RATE=${UPLINK_RATE:-100mbit}
# Teamster's configured uplink capacity, which its pacer sends at: by default the shaped rate (so
# its NetIOC queues, not the physical switch's, hold the excess). CAPACITY=10gbit turns pacing
# off in effect, as the OVS peer (no QoS) runs; LBT then sees utilisation against 10 Gbit/s.
# With UPLINK_RATE=none (no shaping) it defaults to 100gbit: nothing to pace to.
if [ "$UPLINK_RATE" = none ]; then CAPACITY=${CAPACITY:-100gbit}; else CAPACITY=${CAPACITY:-$UPLINK_RATE}; fi
QLEN=${QLEN:-300}
NVM=${NVM:-4}
DURATION=${DURATION:-20}
RAMP=${RAMP:-5}
UDP_RATE=${UDP_RATE:-20M}
FAIL_AT=${FAIL_AT:-8}
FAIL_HOLD=${FAIL_HOLD:-10}
FAIL_TOTAL=${FAIL_TOTAL:-30}
POLICY=${POLICY:-load-based}
MODE=${MODE:-compare}
SOAK_S=${SOAK_S:-600}
OFFLOAD=${OFFLOAD:-off}
# WORKERS sets Teamster's data-plane threads (workers in switch.toml; default: one per core).
WORKERS=${WORKERS:-}
# SWITCH=bridge puts a Linux bridge (tmb-br, root namespace) where Teamster runs, on the same
# veths: the VMs' ports and uplink tmb-u0 only (a bridge does not team). MODE=bond only.
SWITCH=${SWITCH:-teamster}
case "$SWITCH" in teamster) ;; bridge) MODE=bond ;; *) echo "SWITCH must be teamster or bridge" >&2; exit 2 ;; esac
case "$OFFLOAD" in on|off) ;; *) echo "OFFLOAD must be on or off, not $OFFLOAD" >&2; exit 2 ;; esac
OUT=${1:?usage: bench/live/run.sh OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TEAMSTER=${TEAMSTER:-$REPO/target/release/teamster}
[ -x "$TEAMSTER" ] || cargo build -q --release -p teamster --manifest-path "$REPO/Cargo.toml"
for t in ip:iproute2 tc:iproute2 iperf3:iperf3 ping:iputils-ping ethtool:ethtool; do
  command -v "${t%%:*}" >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${t#*:}"; }
done
NS=(tmb-psw); for i in $(seq 1 "$NVM"); do NS+=("tmb-vm$i" "tmb-peer$i"); done
DAEMON=""
cleanup() {
  [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null || true
  ip link del tmb-br 2>/dev/null || true
  for i in $(seq 1 "$NVM"); do ip link del "tmb-v$i" 2>/dev/null || true; done
  ip link del tmb-u0 2>/dev/null || true; ip link del tmb-u1 2>/dev/null || true
  for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
vm_ip() { echo "198.18.0.$((10 + $1))"; }
peer_ip() { echo "198.18.0.$((100 + $1))"; }
offload_off() {   # ns dev (ns "" = the root namespace)
  [ "$OFFLOAD" = on ] && return 0
  if [ -z "$1" ]; then ethtool -K "$2" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
  else ip netns exec "$1" ethtool -K "$2" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true; fi
}
for n in "${NS[@]}"; do ip netns add "$n"; ip -n "$n" link set lo up; done
ip -n tmb-psw link add pbr type bridge stp_state 0; ip -n tmb-psw link set pbr up
shape() {   # dev in tmb-psw: htb both directions on the pswitch side, as the peer does
  local dev=$1 ifb=ifb-$1 d
  ip -n tmb-psw link add "$ifb" type ifb; ip -n tmb-psw link set "$ifb" up
  for d in "$dev" "$ifb"; do
    ip netns exec tmb-psw tc qdisc add dev "$d" root handle 1: htb default 10
    ip netns exec tmb-psw tc class add dev "$d" parent 1: classid 1:10 htb rate "$UPLINK_RATE" ceil "$UPLINK_RATE" quantum 60000
    ip netns exec tmb-psw tc qdisc add dev "$d" parent 1:10 handle 10: pfifo limit "$QLEN"
  done
  ip netns exec tmb-psw tc qdisc add dev "$dev" handle ffff: ingress
  ip netns exec tmb-psw tc filter add dev "$dev" parent ffff: protocol all u32 match u32 0 0 action mirred egress redirect dev "$ifb"
}
for j in 0 1; do
  ip link add "tmb-u$j" type veth peer name "up$j-p" netns tmb-psw
  ip link set "tmb-u$j" up; offload_off "" "tmb-u$j"
  ip -n tmb-psw link set "up$j-p" master pbr; ip -n tmb-psw link set "up$j-p" up; offload_off tmb-psw "up$j-p"
  [ "$UPLINK_RATE" = none ] || shape "up$j-p"
done
CONF=$OUT/switch.toml
{ [ -n "$WORKERS" ] && echo "workers = $WORKERS"; cat <<TOML
[[uplinks]]
name = "up0"
interface = "tmb-u0"
capacity = "${CAPACITY%bit}"
[[uplinks]]
name = "up1"
interface = "tmb-u1"
capacity = "${CAPACITY%bit}"
[[port_groups]]
name = "vms"
policy = "$POLICY"
active = ["up0", "up1"]
TOML
} > "$CONF"
for i in $(seq 1 "$NVM"); do
  ip link add "tmb-v$i" type veth peer name eth0 netns "tmb-vm$i"; ip link set "tmb-v$i" up
  offload_off "" "tmb-v$i"
  ip -n "tmb-vm$i" link set eth0 address "02:00:00:00:01:0$i"
  ip -n "tmb-vm$i" addr add "$(vm_ip "$i")/24" dev eth0; ip -n "tmb-vm$i" link set eth0 up; offload_off "tmb-vm$i" eth0
  ip -n tmb-psw link add "pe$i" type veth peer name eth0 netns "tmb-peer$i"
  ip -n tmb-psw link set "pe$i" master pbr; ip -n tmb-psw link set "pe$i" up; offload_off tmb-psw "pe$i"
  ip -n "tmb-peer$i" addr add "$(peer_ip "$i")/24" dev eth0; ip -n "tmb-peer$i" link set eth0 up; offload_off "tmb-peer$i" eth0
  printf '[[ports]]\nname = "vm%s"\nid = %s\ninterface = "tmb-v%s"\nmac = "02:00:00:00:01:0%s"\ngroup = "vms"\n' "$i" "$i" "$i" "$i" >> "$CONF"
done
ip -n tmb-psw link set dev ifb-up0-p up 2>/dev/null || true
up_bytes() { ip netns exec tmb-psw cat "/sys/class/net/up$1-p/statistics/rx_bytes"; }
if [ "$SWITCH" = bridge ]; then
  ip link add tmb-br type bridge stp_state 0; ip link set tmb-br up
  for l in tmb-u0 $(for i in $(seq 1 "$NVM"); do echo "tmb-v$i"; done); do ip link set "$l" master tmb-br; done
else
  "$TEAMSTER" run "$CONF" --status-file "$OUT/status.json" 2> "$OUT/teamster.log" &
  DAEMON=$!
fi
sleep 1.5
for i in $(seq 1 "$NVM"); do ip netns exec "tmb-vm$i" ping -c 1 -W 2 "$(peer_ip "$i")" >/dev/null || true; done
# The daemon's CPU seconds (0 for the bridge, whose work is the kernel's softirq time).
cpu_s() { if [ -n "$DAEMON" ]; then awk '{print ($14 + $15) / 100}' "/proc/$DAEMON/stat"; else echo 0; fi; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$DAEMON/status"; }

if [ "$MODE" = soak ]; then
  for i in $(seq 1 "$NVM"); do ip netns exec "tmb-peer$i" iperf3 -s -1 -B "$(peer_ip "$i")" >/dev/null 2>&1 & done
  sleep 0.5
  for i in $(seq 1 "$NVM"); do
    ip netns exec "tmb-vm$i" iperf3 -c "$(peer_ip "$i")" -t "$SOAK_S" -J > "$OUT/soak-vm$i.json" 2>/dev/null &
  done
  sleep 5
  samples="[$(date +%s),$(rss_kb),$(up_bytes 0),$(up_bytes 1)]"
  for _ in $(seq 1 $(( (SOAK_S - 10) / 30 ))); do
    sleep 30
    samples="$samples,[$(date +%s),$(rss_kb),$(up_bytes 0),$(up_bytes 1)]"
  done
  wait $(jobs -p | grep -v "^$DAEMON$") 2>/dev/null || true
  python3 - "$OUT" "$samples" <<'PY'
import json, sys
out, raw = sys.argv[1], json.loads("[" + sys.argv[2] + "]")
t0 = raw[0][0]
rows = [{"t_s": t - t0, "rss_kb": r, "mbps_since_last": None} for t, r, _, _ in raw]
for k in range(1, len(raw)):
    dt = raw[k][0] - raw[k - 1][0]
    rows[k]["mbps_since_last"] = round(((raw[k][2] - raw[k - 1][2]) + (raw[k][3] - raw[k - 1][3])) * 8 / dt / 1e6, 1)
s = {"rss_kb_first": rows[0]["rss_kb"], "rss_kb_last": rows[-1]["rss_kb"], "rss_kb_max": max(r["rss_kb"] for r in rows), "samples": rows}
json.dump(s, open(f"{out}/soak.json", "w"), indent=1)
print(json.dumps({k: v for k, v in s.items() if k != "samples"}), "mean Mbit/s", round(sum(r["mbps_since_last"] for r in rows[1:]) / max(1, len(rows) - 1), 1))
PY
  exit 0
fi

# ---- bond: TCP ramp ----
for i in $(seq 1 "$NVM"); do ip netns exec "tmb-peer$i" iperf3 -s -1 -B "$(peer_ip "$i")" >/dev/null 2>&1 & done
sleep 0.5
pids=()
for i in $(seq 1 "$NVM"); do
  ip netns exec "tmb-vm$i" iperf3 -c "$(peer_ip "$i")" -t $((DURATION + (NVM - i) * RAMP)) -J > "$OUT/iperf3-vm$i.json" 2>/dev/null &
  pids+=($!)
  [ "$i" -lt "$NVM" ] && sleep "$RAMP"
done
sleep 2.5
b0=$(up_bytes 0); b1=$(up_bytes 1); c0=$(cpu_s); t0=$(date +%s.%N); stat0=$(head -1 /proc/stat)
# Latency under load: vm1 pings its peer every 10 ms through the steady window.
ip netns exec tmb-vm1 ping -n -i 0.01 -W 1 -w $((DURATION - 3)) -c $(( (DURATION - 3) * 100 - 50 )) "$(peer_ip 1)" > "$OUT/ping-bond.txt" 2>&1 &
pinger=$!
sleep $((DURATION - 3))
b0e=$(up_bytes 0); b1e=$(up_bytes 1); c1=$(cpu_s); t1=$(date +%s.%N); stat1=$(head -1 /proc/stat)
for p in "${pids[@]}" "$pinger"; do wait "$p" || true; done
cp "$OUT/status.json" "$OUT/status-bond.json" 2>/dev/null || true
# Frames the physical switch's shapers dropped (root htb of each, which counts its leaf's
# drops) during the ramp: the queue past the uplink, where an unpaced switch's excess waits.
shaper_drops=$(for d in up0-p ifb-up0-p up1-p ifb-up1-p; do
  { ip netns exec tmb-psw tc -s qdisc show dev "$d" 2>/dev/null || true; } | awk '/dropped/ && !n++ {gsub(",", "", $7); s = $7} END {print s + 0}'
done | paste -sd+ | bc)

# ---- failover-udp ----
busiest=none; t_fail=0
if [ "$MODE" != bond ]; then
for i in $(seq 1 "$NVM"); do ip netns exec "tmb-peer$i" iperf3 -s -1 -B "$(peer_ip "$i")" >/dev/null 2>&1 & done
sleep 0.5
for i in $(seq 1 "$NVM"); do
  ip netns exec "tmb-peer$i" python3 "$HERE/arrivals.py" eth0 $((FAIL_TOTAL + 2)) "$OUT/arrivals-vm$i.txt" &
done
sleep 0.3
for i in $(seq 1 "$NVM"); do
  ip netns exec "tmb-vm$i" iperf3 -c "$(peer_ip "$i")" -u -b "$UDP_RATE" -t "$FAIL_TOTAL" -J > "$OUT/udp-vm$i.json" 2>/dev/null &
  ip netns exec "tmb-vm$i" ping -n -i 0.01 -W 1 -c $((FAIL_TOTAL * 100 - 200)) "$(peer_ip "$i")" > "$OUT/ping-vm$i.txt" 2>&1 &
done
sleep "$FAIL_AT"
busiest=$(python3 -c "
import json, collections
d = json.load(open('$OUT/status.json'))
c = collections.Counter(p['uplink'] for p in d['ports'])
print(max(['up0', 'up1'], key=lambda u: c[u])[-1])")
t_fail=$(date +%s.%N)
ip -n tmb-psw link set "up$busiest-p" down
sleep "$FAIL_HOLD"
ip -n tmb-psw link set "up$busiest-p" up
wait $(jobs -p | grep -v "^$DAEMON$") 2>/dev/null || true
fi
cp "$OUT/status.json" "$OUT/status-end.json" 2>/dev/null || true

python3 - "$OUT" "$b0" "$b0e" "$b1" "$b1e" "$c0" "$c1" "$t0" "$t1" "$UPLINK_RATE" "$NVM" "up$busiest" "$t_fail" "$CAPACITY" "$shaper_drops" "$stat0" "$stat1" "$SWITCH" "$OFFLOAD" <<'PY'
import json, re, sys
out, b0, b0e, b1, b1e, c0, c1, t0, t1, rate, nvm, failed, t_fail, capacity, shaper, stat0, stat1, switch, offload = sys.argv[1:]
# The machine over the steady window: busy and steal (time the hypervisor gave to others) as
# shares of all CPU time, from /proc/stat's cpu line (user nice system idle iowait irq softirq steal).
st0, st1 = [list(map(int, x.split()[1:9])) for x in (stat0, stat1)]
dst = [b - a for a, b in zip(st0, st1)]
machine = {"busy_pct": round(100 * (sum(dst) - dst[3] - dst[4]) / max(1, sum(dst)), 1), "steal_pct": round(100 * dst[7] / max(1, sum(dst)), 1)}
def drops(name):
    """Every frame the switch dropped (each drop is counted once, on one port or uplink), by
    reason, from a status snapshot: none inside the switch means every one of these is 0."""
    try:
        d = json.load(open(f"{out}/{name}"))
    except Exception:
        return None
    by = {}
    for x in d["ports"] + d["uplinks"]:
        for k, v in x["counters"]["drops"].items():
            by[k] = by.get(k, 0) + v
    return {"total": sum(by.values()), **{k: v for k, v in by.items() if v}}
t_fail = float(t_fail)
dt = float(t1) - float(t0)
up = [(int(b0e) - int(b0)) * 8 / dt / 1e6, (int(b1e) - int(b1)) * 8 / dt / 1e6]
# The shaped rate in Mbit/s, or None when the uplinks are not shaped (UPLINK_RATE=none).
cap = None if rate == "none" else float(re.sub(r"[a-z]+", "", rate)) * {"mbit": 1, "gbit": 1000}.get(re.sub(r"[0-9.]+", "", rate), 1)
gbit = sum(up) * dt / 1e3
gaps, lost = {}, {}
for i in range(1, int(nvm) + 1):
    try:
        seqs = [int(m) for m in re.findall(r"icmp_seq=(\d+)", open(f"{out}/ping-vm{i}.txt").read())]
    except OSError:  # MODE=bond: no failover run
        gaps[f"vm{i}"] = None
        continue
    gaps[f"vm{i}"] = max([(b - a - 1) * 10 for a, b in zip(seqs, seqs[1:])] or [0])
    try:
        s = json.load(open(f"{out}/udp-vm{i}.json"))["end"]["sum"]
        lost[f"vm{i}"] = s.get("lost_packets")
    except Exception:
        lost[f"vm{i}"] = None
def arrival_gaps(i):
    """Largest inter-arrival gap (ms) within 300 ms after the failure, and the noise floor: the
    largest gap in the 2 s before it."""
    try:
        ts = [float(x) for x in open(f"{out}/arrivals-vm{i}.txt").read().split()]
    except Exception:
        return None, None
    def biggest(a, b):
        sel = [t for t in ts if a <= t <= b]
        return round(max([(y - x) * 1e3 for x, y in zip(sel, sel[1:])] or [0.0]), 1)
    return biggest(t_fail - 0.05, t_fail + 0.3), biggest(t_fail - 2.0, t_fail - 0.05)

at_fail, floor = {}, {}
for i in range(1, int(nvm) + 1):
    at_fail[f"vm{i}"], floor[f"vm{i}"] = arrival_gaps(i)
retrans, vm = 0, {}
for i in range(1, int(nvm) + 1):
    try:
        retrans += json.load(open(f"{out}/iperf3-vm{i}.json"))["end"]["sum_sent"]["retransmits"]
    except Exception:
        pass
for i in range(1, int(nvm) + 1):
    try:
        ivs = json.load(open(f"{out}/iperf3-vm{i}.json"))["intervals"]
        vm[f"vm{i}"] = round(sum(x["sum"]["bits_per_second"] for x in ivs[-int(dt):]) / max(1, len(ivs[-int(dt):])) / 1e6, 1)
    except Exception:
        vm[f"vm{i}"] = None
def loaded_rtt():
    """p50 / p99 / max RTT (ms) and pings lost, from vm1's pings during the steady window."""
    try:
        text = open(f"{out}/ping-bond.txt").read()
    except OSError:
        return None
    t = sorted(float(m) for m in re.findall(r"time=([0-9.]+) ms", text))
    sent = re.search(r"(\d+) packets transmitted", text)
    q = lambda p: t[min(len(t) - 1, int(p * len(t)))] if t else None
    return {"p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": t[-1] if t else None,
            "lost": (int(sent.group(1)) - len(t)) if sent else None}
s = {
    "switch": switch,
    "ping_under_tcp_load": loaded_rtt(),
    "offload": offload,
    "machine_steady": machine,
    "aggregate_mbps_steady": round(sum(up), 1),
    "uplinks_mbps_steady": [round(u, 1) for u in up],
    "uplinks_util_steady": [round(u / cap, 3) for u in up] if cap else None,
    "vm_mbps_steady": vm,
    "teamster_cpu_s_per_gbit": round((float(c1) - float(c0)) / gbit, 2) if gbit > 0 and float(c1) > 0 else None,
    "tcp_retransmits": retrans,
    "capacity": capacity,
    "switch_drops_bond": drops("status-bond.json"),
    "pswitch_shaper_drops_bond": int(shaper),
    "switch_drops_whole_run": drops("status-end.json"),
    "failover_member": failed,
    "failover_max_interarrival_gap_ms_at_fail": at_fail,
    "failover_interarrival_noise_floor_ms": floor,
    "failover_longest_ping_gap_ms": gaps,
    "failover_udp_lost_packets": lost,
}
json.dump(s, open(f"{out}/summary.json", "w"), indent=1)
print(json.dumps(s, indent=1))
PY
