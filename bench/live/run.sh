#!/usr/bin/env bash
# Teamster's side of the live comparison with the Open vSwitch peer (shared/peers/ovs/run.sh):
# the same topology and parameters, with `teamster run`, Open vSwitch or a Linux bridge as the switch.
#
#   tmb-vm1..4 --veth--> switch (root namespace): ports tmb-v1..4, uplinks tmb-u0/tmb-u1
#                         tmb-u0/u1 --veth--> tmb-psw: Linux bridge pbr (STP off), htb RATE both
#                         directions on the pswitch side (egress htb, ingress via ifb), QLEN queue
#                         pbr --veth--> tmb-peer1..4 (iperf3 -s)
#
# SWITCH picks what sits in the root namespace on the veths tmb-v1..4 and tmb-u0/u1:
#   teamster  `teamster run` (policy POLICY, default load-based), both uplinks; DATAPATH=kernel
#             runs its kernel fast path (a tcx BPF program switches the frames), DATAPATH=userspace
#             its user-space data plane;
#   ovs       Open vSwitch, userspace datapath (bridge tmb-ovs, datapath_type=netdev, the VMs'
#             veths as `system` ports, bond0 = tmb-u0 + tmb-u1 in balance-slb, rebalance every
#             10 s), as the OVS peer runs it; ovsdb-server and ovs-vswitchd (--disable-system:
#             no kernel module) run from the private directory OVS_DIR (default /tmp/tmb-ovs) and
#             are stopped and removed on exit; other_config:userspace-tso-enable is OVS_TSO,
#             which defaults to true with OFFLOAD=on (OVS at its best with super-frames: without
#             it OVS mishandles partial checksums) and false with OFFLOAD=off;
#   bridge    a Linux bridge tmb-br on the VMs' veths and tmb-u0 only (a bridge does not team).
#
# Modes:
#   bond          IDLE_PINGS pings vm1 -> peer1 5 ms apart on the idle switch (p50/p99); with
#                 PPS=1, packets per second vm1 <-> peer1 (64 B and 1500 B frames, both
#                 directions, PPS_S s each, counted at the receiving interface; PPS_GEN=xdp, the
#                 default: the kernel's XDP live-frames generator, xdpgen.py, on CPU 0 with the
#                 switch's side on CPU 1 (5.8 Mpps into a bare veth here, 15x what a namespace
#                 takes); PPS_GEN=iperf3: iperf3 UDP unthrottled, one stream, bound by its own
#                 system calls at about 100 kpps); then the TCP ramp: VM i starts iperf3 TCP at
#                 (i-1)*RAMP s, all run together DURATION s (steady window = the last
#                 DURATION-3 s), vm1 pinging its peer every 10 ms through the steady window.
#   failover-udp  UDP_RATE per VM; at FAIL_AT s the pswitch side of the uplink carrying most VMs
#                 (from the physical switch's MAC table) goes down for FAIL_HOLD s; receiver
#                 inter-arrival gaps from captures at each peer. Not for SWITCH=bridge.
#   compare       bond, then failover-udp (the default).
#   soak          every VM's TCP stream for SOAK_S seconds (default 600), the switch process's
#                 RSS every 30 s into OUTDIR/soak.json (teamster or ovs).
# Writes OUTDIR/summary.json and prints it; its "switch" is the run's name: teamster-kernel for
# SWITCH=teamster DATAPATH=kernel, else SWITCH (bench/live/compare.sh files runs by that name).
# CPU per Gbit: the switch process's user + system time from /proc/PID/stat (teamster,
# ovs-vswitchd; none for the bridge, whose work is softirq time in other processes' contexts; for
# teamster-kernel only the daemon's own work, the BPF program's being softirq time as the
# bridge's) and the whole machine's busy time (host_cpu_s_per_gbit, which includes iperf3 and
# anything else running).
# OFFLOAD=off (default, as the OVS peer's harness sets them) turns checksum/TSO/GSO/GRO off on
# every veth; OFFLOAD=on leaves them on, as a virtio-net guest has them (super-frames).
# Runs as root; one run at a time (lock /run/lock/tmb-bench-live.lock); removes everything it
# made (names tmb-*, the OVS directory and processes, anything left in its namespaces) on exit,
# Ctrl-C and TERM. Every phase is bounded in time.
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
IDLE_PINGS=${IDLE_PINGS:-500}
PPS=${PPS:-0}
PPS_S=${PPS_S:-3}
PPS_GEN=${PPS_GEN:-xdp}
# WORKERS sets Teamster's data-plane threads (workers in switch.toml; default: one per core).
WORKERS=${WORKERS:-}
# DATAPATH sets Teamster's data plane (datapath in switch.toml: kernel or userspace; default the
# switch's own default). The kernel path runs one thread: WORKERS is then ignored.
DATAPATH=${DATAPATH:-}
case "$DATAPATH" in ""|kernel|userspace) ;; *) echo "DATAPATH must be kernel or userspace, not $DATAPATH" >&2; exit 2 ;; esac
[ "$DATAPATH" = kernel ] && WORKERS=
SWITCH=${SWITCH:-teamster}
# The run's name in summary.json and params.txt: which switch, and for Teamster which data plane
# (teamster: user space; teamster-kernel: the kernel path, also the switch's own default where it
# can run, which DATAPATH left empty leaves to the switch: named teamster-default).
LABEL=$SWITCH
[ "$SWITCH" = teamster ] && [ "$DATAPATH" = kernel ] && LABEL=teamster-kernel
[ "$SWITCH" = teamster ] && [ -z "$DATAPATH" ] && LABEL=teamster-default
OVS_DIR=${OVS_DIR:-/tmp/tmb-ovs}
OVS_BOND_MODE=${OVS_BOND_MODE:-balance-slb}
OVS_REBAL_MS=${OVS_REBAL_MS:-10000}
case "$OFFLOAD" in on) OVS_TSO=${OVS_TSO:-true} ;; off) OVS_TSO=${OVS_TSO:-false} ;; *) echo "OFFLOAD must be on or off, not $OFFLOAD" >&2; exit 2 ;; esac
case "$SWITCH" in
  teamster|ovs) ;;
  bridge) case "$MODE" in bond|compare) MODE=bond ;; *) echo "SWITCH=bridge does not team: MODE=bond only, not $MODE" >&2; exit 2 ;; esac ;;
  *) echo "SWITCH must be teamster, ovs or bridge, not $SWITCH" >&2; exit 2 ;;
esac
case "$MODE" in bond|failover-udp|compare|soak) ;; *) echo "MODE must be bond, failover-udp, compare or soak, not $MODE" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "run.sh must run as root" >&2; exit 1; }
OUT=${1:?usage: bench/live/run.sh OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TEAMSTER=${TEAMSTER:-$REPO/target/release/teamster}
if [ "$SWITCH" = teamster ] && [ ! -x "$TEAMSTER" ]; then
  cargo build -q --release -p teamster --manifest-path "$REPO/Cargo.toml"
fi
# Every tool the run needs, installed from Debian if missing; a tool still missing stops the run.
tools=(ip:iproute2 bridge:iproute2 tc:iproute2 iperf3:iperf3 ping:iputils-ping ethtool:ethtool python3:python3 timeout:coreutils flock:util-linux)
[ "$SWITCH" = ovs ] && tools+=(ovs-vswitchd:openvswitch-switch ovsdb-server:openvswitch-switch ovsdb-tool:openvswitch-switch ovs-vsctl:openvswitch-common ovs-appctl:openvswitch-common)
for t in "${tools[@]}"; do
  command -v "${t%%:*}" >/dev/null && continue
  if ! { apt-get -o DPkg::Lock::Timeout=300 update -q &&
         DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q "${t#*:}"; }; then
    echo "could not install ${t#*:} (for ${t%%:*})" >&2; exit 1
  fi
  command -v "${t%%:*}" >/dev/null || { echo "${t%%:*} is still missing after installing ${t#*:}" >&2; exit 1; }
done
if [ "$SWITCH" = ovs ] && [ ! -r /usr/share/openvswitch/vswitch.ovsschema ]; then
  echo "missing /usr/share/openvswitch/vswitch.ovsschema (openvswitch-common)" >&2; exit 1
fi
# One run at a time: the names below are fixed, and a run removes what an earlier one left.
exec 9>/run/lock/tmb-bench-live.lock
flock -w "${LOCK_WAIT:-900}" 9 || { echo "another bench/live run holds /run/lock/tmb-bench-live.lock" >&2; exit 1; }
CLK_TCK=$(getconf CLK_TCK)
NS=(tmb-psw); for i in $(seq 1 "$NVM"); do NS+=("tmb-vm$i" "tmb-peer$i"); done
DAEMON=""   # teamster, our child
SWPID=""    # the switch process whose CPU time is counted (teamster or ovs-vswitchd)
VSCTL=(ovs-vsctl "--db=unix:$OVS_DIR/db.sock" --timeout=20)
# Stops the OVS processes that run from OVS_DIR (pid files, then any process whose command line
# names OVS_DIR, e.g. one killed before writing its pid file) and removes the directory.
ovs_stop() {
  local f pid p pids=()
  for f in ovs-vswitchd ovsdb-server; do
    [ -r "$OVS_DIR/$f.pid" ] && pids+=("$(cat "$OVS_DIR/$f.pid" 2>/dev/null || true)")
  done
  for p in /proc/[0-9]*; do
    case "$(cat "$p/comm" 2>/dev/null || true)" in ovs-vswitchd|ovsdb-server) ;; *) continue ;; esac
    tr '\0' ' ' 2>/dev/null < "$p/cmdline" | grep -qF "$OVS_DIR/" && pids+=("${p#/proc/}")
  done
  for pid in "${pids[@]}"; do
    if [ -z "$pid" ] || [ ! -d "/proc/$pid" ]; then continue; fi
    tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -qF "$OVS_DIR/" || continue
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    [ -d "/proc/$pid" ] && { echo "warning: $pid ignored TERM, killing" >&2; kill -9 "$pid" 2>/dev/null || true; }
  done
  rm -rf "$OVS_DIR"
  ip link del tmb-ovs 2>/dev/null || true
}
cleanup() {
  local p n
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  if [ -n "$DAEMON" ]; then kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; fi
  DAEMON=""
  ovs_stop
  # Anything still running inside our namespaces was started by this script.
  for n in "${NS[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null || true); do kill "$p" 2>/dev/null || true; done
  done
  ip link del tmb-br 2>/dev/null || true
  for i in $(seq 1 "$NVM"); do ip link del "tmb-v$i" 2>/dev/null || true; done
  ip link del tmb-u0 2>/dev/null || true; ip link del tmb-u1 2>/dev/null || true
  for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
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
{ [ -n "$WORKERS" ] && echo "workers = $WORKERS"; [ -n "$DATAPATH" ] && echo "datapath = \"$DATAPATH\""; cat <<TOML
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
case "$SWITCH" in
  bridge)
    ip link add tmb-br type bridge stp_state 0; ip link set tmb-br up
    for l in tmb-u0 $(for i in $(seq 1 "$NVM"); do echo "tmb-v$i"; done); do ip link set "$l" master tmb-br; done ;;
  ovs)
    mkdir -p "$OVS_DIR"
    # Every OVS runtime file (db, pid files, control sockets, logs) stays in OVS_DIR.
    export OVS_RUNDIR=$OVS_DIR OVS_DBDIR=$OVS_DIR OVS_LOGDIR=$OVS_DIR OVS_SYSCONFDIR=$OVS_DIR
    ovsdb-tool create "$OVS_DIR/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    ovsdb-server "$OVS_DIR/conf.db" --remote="punix:$OVS_DIR/db.sock" --pidfile="$OVS_DIR/ovsdb-server.pid" \
      --unixctl="$OVS_DIR/ovsdb-server.ctl" --log-file="$OVS_DIR/ovsdb-server.log" --detach --no-chdir 9>&-
    "${VSCTL[@]}" --no-wait init
    # Read once at start-up: set before ovs-vswitchd starts.
    "${VSCTL[@]}" --no-wait set Open_vSwitch . other_config:userspace-tso-enable="$OVS_TSO"
    ovs-vswitchd "unix:$OVS_DIR/db.sock" --pidfile="$OVS_DIR/ovs-vswitchd.pid" --unixctl="$OVS_DIR/ovs-vswitchd.ctl" \
      --log-file="$OVS_DIR/ovs-vswitchd.log" --detach --no-chdir --disable-system -vconsole:off 9>&-
    SWPID=$(cat "$OVS_DIR/ovs-vswitchd.pid")
    "${VSCTL[@]}" add-br tmb-ovs -- set bridge tmb-ovs datapath_type=netdev fail_mode=standalone
    for i in $(seq 1 "$NVM"); do "${VSCTL[@]}" add-port tmb-ovs "tmb-v$i"; done
    "${VSCTL[@]}" add-bond tmb-ovs bond0 tmb-u0 tmb-u1 bond_mode="$OVS_BOND_MODE" other_config:bond-rebalance-interval="$OVS_REBAL_MS"
    ;;
  teamster)
    "$TEAMSTER" run "$CONF" --status-file "$OUT/status.json" 2> "$OUT/teamster.log" 9>&- &
    DAEMON=$!; SWPID=$DAEMON ;;
esac
sleep 1.5
if [ -n "$SWPID" ] && ! [ -d "/proc/$SWPID" ]; then
  echo "$LABEL did not start:" >&2; cat "$OUT/teamster.log" "$OVS_DIR/ovs-vswitchd.log" 2>/dev/null >&2 || true; exit 1
fi
# Every VM must reach its peer before anything is measured.
for i in $(seq 1 "$NVM"); do
  ok=0
  for _ in $(seq 1 10); do
    ip netns exec "tmb-vm$i" ping -c 1 -W 1 "$(peer_ip "$i")" >/dev/null 2>&1 && { ok=1; break; }
    sleep 0.5
  done
  [ "$ok" = 1 ] || { echo "vm$i cannot reach peer$i through $LABEL" >&2; exit 1; }
done
# The switch process's CPU ticks (user + system, all threads; 0 for the bridge).
cpu_ticks() {
  local s
  if [ -n "$SWPID" ] && s=$(cat "/proc/$SWPID/stat" 2>/dev/null); then
    s=${s##*) }; awk '{print $12 + $13}' <<< "$s"
  else echo 0; fi
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$SWPID/status"; }
start_servers() {   # seconds the servers may wait
  local i
  for i in $(seq 1 "$NVM"); do timeout "$1" ip netns exec "tmb-peer$i" iperf3 -s -1 -B "$(peer_ip "$i")" >/dev/null 2>&1 & done
  sleep 0.5
}
{ cat /proc/loadavg; } > "$OUT/loadavg-start.txt"
{
  echo "switch=$SWITCH label=$LABEL mode=$MODE offload=$OFFLOAD uplink_rate=$UPLINK_RATE capacity=$CAPACITY policy=$POLICY workers=${WORKERS:-default} datapath=${DATAPATH:-default} ovs_tso=$OVS_TSO ovs_bond=$OVS_BOND_MODE"
  [ "$SWITCH" = ovs ] && ovs-vswitchd --version | head -1
  [ "$SWITCH" = teamster ] && echo "teamster $TEAMSTER ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "kernel $(uname -r), $(nproc) CPUs, iperf3 $(iperf3 --version | head -1 | awk '{print $2}')"
} > "$OUT/params.txt"

if [ "$MODE" = soak ]; then
  start_servers $((SOAK_S + 60))
  for i in $(seq 1 "$NVM"); do
    timeout $((SOAK_S + 30)) ip netns exec "tmb-vm$i" iperf3 -c "$(peer_ip "$i")" -t "$SOAK_S" -J > "$OUT/soak-vm$i.json" 2>/dev/null &
  done
  sleep 5
  samples="[$(date +%s),$(rss_kb),$(up_bytes 0),$(up_bytes 1)]"
  for _ in $(seq 1 $(( (SOAK_S - 10) / 30 ))); do
    sleep 30
    samples="$samples,[$(date +%s),$(rss_kb),$(up_bytes 0),$(up_bytes 1)]"
  done
  for p in $(jobs -p); do [ "$p" = "$DAEMON" ] || wait "$p" 2>/dev/null || true; done
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

b0=""; b0e=""; b1=""; b1e=""; c0=""; c1=""; t0=""; t1=""; stat0=""; stat1=""; shaper_drops=0
if [ "$MODE" != failover-udp ]; then
# ---- idle ping: vm1 -> peer1, 5 ms apart, nothing else running ----
if [ "$IDLE_PINGS" -gt 0 ]; then
  ip netns exec tmb-vm1 ping -n -i 0.005 -W 1 -c "$IDLE_PINGS" -w $((IDLE_PINGS / 100 + 10)) "$(peer_ip 1)" > "$OUT/ping-idle.txt" 2>&1 || true
fi
# ---- packets per second: vm1 <-> peer1 (the XDP generator, or one iperf3 UDP stream) ----
frames() { ip netns exec "$1" cat "/sys/class/net/eth0/statistics/$2_packets"; }
if [ "$PPS" = 1 ] && [ "$PPS_GEN" = xdp ]; then
  # The kernel's XDP live-frames generator (bench/live/xdpgen.py) on CPU 0 sends out of the
  # sender's eth0; the veth that takes its frames (tmb-v1, or pe1 on the physical switch) gets
  # GRO (veth's NAPI, which XDP frames need) in a NAPI thread of its own on CPU 1, and everything
  # after it runs there: the switch, the physical switch's bridge, the receiver. Frames of 60 and
  # 1514 bytes (64 and 1518 on the wire with the FCS), counted at the receiving eth0. They are
  # addressed to the receiver's MAC and to an IP address nobody has (198.18.0.254), so the
  # receiver drops each at its routing lookup instead of running UDP and ICMP for it: its cost
  # would dilute the switches' difference (the same for every switch).
  : > "$OUT/pps.txt"
  mac_of() { ip netns exec "$1" cat /sys/class/net/eth0/address; }
  for dir in vm-to-uplink uplink-to-vm; do
    snd=tmb-vm1; rcv=tmb-peer1; land_ns=""; land=tmb-v1; src=$(vm_ip 1)
    [ "$dir" = uplink-to-vm ] && { snd=tmb-peer1; rcv=tmb-vm1; land_ns=tmb-psw; land=pe1; src=$(peer_ip 1); }
    in_land() { if [ -z "$land_ns" ]; then "$@"; else ip netns exec "$land_ns" "$@"; fi; }
    gro_was=$(in_land ethtool -k "$land" | awk '/^generic-receive-offload:/ {print $2}')
    in_land ethtool -K "$land" gro on >/dev/null
    in_land sh -c "echo 1 > /sys/class/net/$land/threaded"
    for t in $(pgrep -f "^napi/$land-"); do taskset -pc 1 "$t" >/dev/null; done
    for len in 60 1514; do
      pc0=$(cpu_ticks); rx0=$(frames "$rcv" rx)
      timeout $((PPS_S + 15)) ip netns exec "$snd" taskset -c 0 python3 "$HERE/xdpgen.py" eth0 \
        "$(mac_of "$rcv")" "$(mac_of "$snd")" "$src" 198.18.0.254 "$len" "$PPS_S" > "$OUT/pps-$dir-$len.json" 2>"$OUT/pps-$dir-$len.err" || true
      pc1=$(cpu_ticks); rx1=$(frames "$rcv" rx)
      offered=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["offered"])' "$OUT/pps-$dir-$len.json" 2>/dev/null || echo 0)
      echo "$dir $len $offered $((rx1 - rx0)) $((pc1 - pc0))" >> "$OUT/pps.txt"
      sleep 0.5
    done
    in_land sh -c "echo 0 > /sys/class/net/$land/threaded"
    in_land ethtool -K "$land" gro "${gro_was:-off}" >/dev/null
  done
  sleep 1
elif [ "$PPS" = 1 ]; then
  : > "$OUT/pps.txt"
  for dir in vm-to-uplink uplink-to-vm; do
    for len in 18 1472; do
      args=(); snd=tmb-vm1; rcv=tmb-peer1
      [ "$dir" = uplink-to-vm ] && { args=(-R); snd=tmb-peer1; rcv=tmb-vm1; }
      timeout $((PPS_S + 20)) ip netns exec tmb-peer1 iperf3 -s -1 -B "$(peer_ip 1)" >/dev/null 2>&1 &
      server=$!
      sleep 0.4
      pc0=$(cpu_ticks); tx0=$(frames "$snd" tx); rx0=$(frames "$rcv" rx)
      timeout $((PPS_S + 15)) ip netns exec tmb-vm1 iperf3 -c "$(peer_ip 1)" -u -b 0 -l "$len" -t "$PPS_S" --connect-timeout 3000 "${args[@]}" -J > "$OUT/pps-$dir-$len.json" 2>/dev/null || true
      pc1=$(cpu_ticks); tx1=$(frames "$snd" tx); rx1=$(frames "$rcv" rx)
      wait "$server" 2>/dev/null || true
      echo "$dir $len $((tx1 - tx0)) $((rx1 - rx0)) $((pc1 - pc0))" >> "$OUT/pps.txt"
      sleep 0.5
    done
  done
  sleep 1
fi

# ---- bond: TCP ramp ----
start_servers $((DURATION + NVM * RAMP + 30))
pids=()
for i in $(seq 1 "$NVM"); do
  timeout $((DURATION + (NVM - i) * RAMP + 15)) ip netns exec "tmb-vm$i" iperf3 -c "$(peer_ip "$i")" -t $((DURATION + (NVM - i) * RAMP)) -J > "$OUT/iperf3-vm$i.json" 2>/dev/null &
  pids+=($!)
  [ "$i" -lt "$NVM" ] && sleep "$RAMP"
done
sleep 2.5
b0=$(up_bytes 0); b1=$(up_bytes 1); c0=$(cpu_ticks); t0=$(date +%s.%N); stat0=$(head -1 /proc/stat)
# Latency under load: vm1 pings its peer every 10 ms through the steady window.
ip netns exec tmb-vm1 ping -n -i 0.01 -W 1 -w $((DURATION - 3)) -c $(( (DURATION - 3) * 100 - 50 )) "$(peer_ip 1)" > "$OUT/ping-bond.txt" 2>&1 &
pinger=$!
sleep $((DURATION - 3))
b0e=$(up_bytes 0); b1e=$(up_bytes 1); c1=$(cpu_ticks); t1=$(date +%s.%N); stat1=$(head -1 /proc/stat)
for p in "${pids[@]}" "$pinger"; do wait "$p" || true; done
cp "$OUT/status.json" "$OUT/status-bond.json" 2>/dev/null || true
[ "$SWITCH" = ovs ] && { "${VSCTL[@]}" --format=csv --columns=name,statistics list interface > "$OUT/ovs-iface-stats-bond.csv" 2>&1 || true; }
# Frames the physical switch's shapers dropped (root htb of each, which counts its leaf's
# drops) during the ramp: the queue past the uplink, where an unpaced switch's excess waits.
shaper_drops=$(for d in up0-p ifb-up0-p up1-p ifb-up1-p; do
  { ip netns exec tmb-psw tc -s qdisc show dev "$d" 2>/dev/null || true; } | awk '/dropped/ && !n++ {gsub(",", "", $7); s = $7} END {print s + 0}'
done | awk '{s += $1} END {print s + 0}')
fi

# ---- failover-udp ----
busiest=none; t_fail=0; fdb_counts=""
if [ "$MODE" = failover-udp ] || [ "$MODE" = compare ]; then
start_servers $((FAIL_TOTAL + 30))
fpids=()
for i in $(seq 1 "$NVM"); do
  timeout $((FAIL_TOTAL + 20)) ip netns exec "tmb-peer$i" python3 "$HERE/arrivals.py" eth0 $((FAIL_TOTAL + 2)) "$OUT/arrivals-vm$i.txt" &
  fpids+=($!)
done
sleep 0.3
for i in $(seq 1 "$NVM"); do
  timeout $((FAIL_TOTAL + 15)) ip netns exec "tmb-vm$i" iperf3 -c "$(peer_ip "$i")" -u -b "$UDP_RATE" -t "$FAIL_TOTAL" -J > "$OUT/udp-vm$i.json" 2>/dev/null &
  fpids+=($!)
  ip netns exec "tmb-vm$i" ping -n -i 0.01 -W 1 -w $((FAIL_TOTAL + 5)) -c $((FAIL_TOTAL * 100 - 200)) "$(peer_ip "$i")" > "$OUT/ping-vm$i.txt" 2>&1 &
  fpids+=($!)
done
sleep "$FAIL_AT"
# The uplink carrying most VMs: where the physical switch has learnt the VMs' MACs (the same
# for every switch: it is where each VM's frames arrive).
bridge -n tmb-psw fdb show br pbr > "$OUT/psw-fdb-before-fail.txt" 2>&1 || true
fdb_counts=$(awk '/^02:00:00:00:01:/ {for (k = 1; k < NF; k++) if ($k == "dev") c[$(k + 1)]++}
  END {printf "%d %d", c["up0-p"], c["up1-p"]}' "$OUT/psw-fdb-before-fail.txt")
if [ "${fdb_counts#* }" -gt "${fdb_counts% *}" ]; then busiest=1; else busiest=0; fi
[ "$SWITCH" = ovs ] && { ovs-appctl -t "$OVS_DIR/ovs-vswitchd.ctl" bond/show bond0 > "$OUT/bondshow-before-fail.txt" 2>&1 || true; }
t_fail=$(date +%s.%N)
ip -n tmb-psw link set "up$busiest-p" down
sleep "$FAIL_HOLD"
ip -n tmb-psw link set "up$busiest-p" up
for p in "${fpids[@]}"; do wait "$p" 2>/dev/null || true; done
fi
cp "$OUT/status.json" "$OUT/status-end.json" 2>/dev/null || true
if [ "$SWITCH" = ovs ]; then cp "$OVS_DIR/ovs-vswitchd.log" "$OUT/" 2>/dev/null || true; fi

python3 - "$OUT" "$b0" "$b0e" "$b1" "$b1e" "$c0" "$c1" "$t0" "$t1" "$UPLINK_RATE" "$NVM" "up$busiest" "$t_fail" "$CAPACITY" "$shaper_drops" "$stat0" "$stat1" "$SWITCH" "$OFFLOAD" "$MODE" "$CLK_TCK" "$OVS_TSO" "$fdb_counts" "$PPS_S" "$LABEL" "$DATAPATH" <<'PY'
import json, re, sys
(out, b0, b0e, b1, b1e, c0, c1, t0, t1, rate, nvm, failed, t_fail, capacity, shaper, stat0, stat1,
 switch, offload, mode, clk_tck, ovs_tso, fdb_counts, pps_s, label, datapath) = sys.argv[1:]
clk_tck = float(clk_tck)
nvm = int(nvm)
bond = b0 != ""
proc = {"teamster": "teamster", "ovs": "ovs-vswitchd"}.get(switch)
machine, up, dt, gbit, host_cpu_s = None, None, None, 0, None
if bond:
    # The machine over the steady window: busy and steal (time the hypervisor gave to others) as
    # shares of all CPU time, from /proc/stat's cpu line (user nice system idle iowait irq softirq steal).
    st0, st1 = [list(map(int, x.split()[1:9])) for x in (stat0, stat1)]
    dst = [b - a for a, b in zip(st0, st1)]
    busy = sum(dst) - dst[3] - dst[4]
    machine = {"busy_pct": round(100 * busy / max(1, sum(dst)), 1), "steal_pct": round(100 * dst[7] / max(1, sum(dst)), 1)}
    host_cpu_s = busy / clk_tck
    dt = float(t1) - float(t0)
    up = [(int(b0e) - int(b0)) * 8 / dt / 1e6, (int(b1e) - int(b1)) * 8 / dt / 1e6]
    gbit = sum(up) * dt / 1e3
def drops(name):
    """Every frame Teamster dropped (each drop is counted once, on one port or uplink), by
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
# The shaped rate in Mbit/s, or None when the uplinks are not shaped (UPLINK_RATE=none).
cap = None if rate == "none" else float(re.sub(r"[a-z]+", "", rate)) * {"mbit": 1, "gbit": 1000}.get(re.sub(r"[0-9.]+", "", rate), 1)
gaps, lost = {}, {}
for i in range(1, nvm + 1):
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
for i in range(1, nvm + 1):
    at_fail[f"vm{i}"], floor[f"vm{i}"] = arrival_gaps(i) if t_fail else (None, None)
retrans, vm = 0, {}
for i in range(1, nvm + 1):
    try:
        retrans += json.load(open(f"{out}/iperf3-vm{i}.json"))["end"]["sum_sent"]["retransmits"]
    except Exception:
        pass
for i in range(1, nvm + 1):
    try:
        ivs = json.load(open(f"{out}/iperf3-vm{i}.json"))["intervals"]
        vm[f"vm{i}"] = round(sum(x["sum"]["bits_per_second"] for x in ivs[-int(dt):]) / max(1, len(ivs[-int(dt):])) / 1e6, 1)
    except Exception:
        vm[f"vm{i}"] = None
def rtt(name):
    """p50 / p99 / max RTT (ms) and pings lost, from a ping's output."""
    try:
        text = open(f"{out}/{name}").read()
    except OSError:
        return None
    t = sorted(float(m) for m in re.findall(r"time=([0-9.]+) ms", text))
    sent = re.search(r"(\d+) packets transmitted", text)
    q = lambda p: t[min(len(t) - 1, int(p * len(t)))] if t else None
    return {"p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": t[-1] if t else None,
            "lost": (int(sent.group(1)) - len(t)) if sent else None, "answered": len(t)}
def pps():
    """Frames per second vm1 <-> peer1 delivered at the receiving interface (and offered at the
    sender's), per direction and frame size, with the switch process's CPU per delivered frame."""
    try:
        lines = [l.split() for l in open(f"{out}/pps.txt") if l.strip()]
    except OSError:
        return None
    r = {}
    for d, ln, offered, delivered, ticks in lines:
        secs = float(pps_s)
        try:
            run = json.load(open(f"{out}/pps-{d}-{ln}.json"))
            secs = (run["seconds"] if "seconds" in run else run["end"]["sum"]["seconds"]) or secs
        except Exception:
            pass
        size = "64B" if ln in ("18", "60") else "1500B"
        r.setdefault(d, {})[size] = {
            "delivered_kpps": round(int(delivered) / secs / 1e3, 1),
            "offered_kpps": round(int(offered) / secs / 1e3, 1),
            "switch_us_per_frame": round(int(ticks) / clk_tck * 1e6 / int(delivered), 2) if proc and int(delivered) > 0 else None,
        }
    return r
switch_cpu = round((float(c1) - float(c0)) / clk_tck / gbit, 3) if bond and gbit > 0 and proc else None
def vals(d):
    v = [x for x in (d or {}).values() if x is not None]
    return v or None
s = {
    "switch": label,
    # Teamster's data plane as asked in switch.toml (None: the switch's default, or not Teamster).
    "datapath": (datapath or None) if switch == "teamster" else None,
    "mode": mode,
    "offload": offload,
    "ovs_userspace_tso": ovs_tso == "true" if switch == "ovs" else None,
    "loadavg_start": open(f"{out}/loadavg-start.txt").read().split()[:3],
    "ping_idle": rtt("ping-idle.txt") if bond else None,
    "ping_under_tcp_load": rtt("ping-bond.txt") if bond else None,
    "pps": pps() if bond else None,
    "machine_steady": machine,
    "aggregate_mbps_steady": round(sum(up), 1) if bond else None,
    "uplinks_mbps_steady": [round(u, 1) for u in up] if bond else None,
    "uplinks_util_steady": [round(u / cap, 3) for u in up] if cap and bond else None,
    "vm_mbps_steady": vm if bond else None,
    "switch_process": proc,
    "switch_cpu_s_per_gbit": switch_cpu,
    "teamster_cpu_s_per_gbit": switch_cpu if switch == "teamster" else None,
    "host_cpu_s_per_gbit": round(host_cpu_s / gbit, 3) if bond and gbit > 0 else None,
    "tcp_retransmits": retrans if bond else None,
    "capacity": capacity if switch == "teamster" else None,
    "switch_drops_bond": drops("status-bond.json"),
    "pswitch_shaper_drops_bond": int(shaper) if bond else None,
    "switch_drops_whole_run": drops("status-end.json"),
    "failover_member": failed if t_fail else None,
    "failover_vms_per_uplink_before": [int(x) for x in fdb_counts.split()] if fdb_counts else None,
    "failover_max_interarrival_gap_ms_at_fail": at_fail,
    "failover_interarrival_noise_floor_ms": floor,
    "failover_gap_ms_max": max(vals(at_fail)) if vals(at_fail) else None,
    "failover_noise_floor_ms_max": max(vals(floor)) if vals(floor) else None,
    "failover_longest_ping_gap_ms": gaps,
    "failover_udp_lost_packets": lost,
}
json.dump(s, open(f"{out}/summary.json", "w"), indent=1)
print(json.dumps(s, indent=1))
PY
