#!/usr/bin/env bash
# The controller at scale (issue 31, docs/cluster.md "Scale"): HOSTS simulated hosts, each from
# its own source address and with its own client certificate, register and report every second
# over the controller's real TLS API; VMS VMs are powered on through the API first, then one
# more is powered on and off every second and timed, for SECS s. The controller runs in the
# root namespace on 10.77.255.254, the generator (`teamster controller load`) in namespace
# tml-gen, which holds one address per host, over one veth. STORE is `embedded` (redb, the
# default) or `etcd` (one local member, whose write rates are sampled every 5 s).
#
#   [ tml-gen: 10.77.0.1 .. 10.77.x.y, teamster controller load ] --veth tml-gen0--> [ teamster controller ]
#
# Prints the generator's figures (reports/s asked and answered, report and power-on latency
# percentiles, the controller's CPU and memory, store writes/s), the store's totals from
# /metrics, and for etcd the rates of its last steady 5 s samples.
#
#   sudo bench/live/cluster-load.sh [HOSTS] [VMS] [SECS] [STORE]    (defaults 1000 30000 30 embedded)
set -euo pipefail
HOSTS=${1:-1000}
VMS=${2:-30000}
SECS=${3:-30}
STORE=${4:-embedded}
case "$STORE" in embedded | etcd) ;; *) echo "STORE must be embedded or etcd, not $STORE" >&2; exit 2 ;; esac
[ "$HOSTS" -ge 1 ] && [ "$HOSTS" -le 60000 ] || { echo "HOSTS must be 1 to 60000" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TEAMSTER=${TEAMSTER:-$REPO/target/release/teamster}
[ -x "$TEAMSTER" ] || cargo build -q --release -p teamster --manifest-path "$REPO/Cargo.toml"
D=$(mktemp -d /tmp/tml.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del tml-gen 2>/dev/null || true
  ip link del tml-gen0 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
ip netns del tml-gen 2>/dev/null || true
ip link del tml-gen0 2>/dev/null || true
ip netns add tml-gen
ip link add tml-gen0 type veth peer name lg0 netns tml-gen
ip addr add 10.77.255.254/16 dev tml-gen0
ip link set tml-gen0 up
ip -n tml-gen link set lg0 up
ip -n tml-gen link set lo up
for i in $(seq 1 "$HOSTS"); do echo "addr add 10.77.$((i / 256)).$((i % 256))/16 dev lg0"; done > "$D/addrs"
ip -n tml-gen -batch "$D/addrs"

"$TEAMSTER" controller ca init --dir "$D/ca" > /dev/null
"$TEAMSTER" controller ca issue-server ctl --address 10.77.255.254 --dir "$D/ca" > /dev/null
head -c 24 /dev/urandom | base64 > "$D/token"
chmod 600 "$D/token"
mkdir -m 700 "$D/state"
# Free loopback ports for etcd, asked of the kernel.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
STORE_ARGS=(--state "$D/state/state.redb")
if [ "$STORE" = etcd ]; then
  CLIENT=$(free_port); PEER=$(free_port); METRICS=$(free_port)
  etcd --name tml-etcd --data-dir "$D/etcd" \
    --listen-client-urls "http://127.0.0.1:$CLIENT" --advertise-client-urls "http://127.0.0.1:$CLIENT" \
    --listen-peer-urls "http://127.0.0.1:$PEER" --initial-advertise-peer-urls "http://127.0.0.1:$PEER" \
    --initial-cluster "tml-etcd=http://127.0.0.1:$PEER" --listen-metrics-urls "http://127.0.0.1:$METRICS" \
    > "$D/etcd.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$METRICS/health" > /dev/null && break; sleep 0.1; done
  (while sleep 5; do
    echo "T $(date +%s)"
    curl -s "http://127.0.0.1:$METRICS/metrics" |
      grep -E '^etcd_mvcc_(put|txn|delete|range)_total|^etcd_disk_wal_fsync_duration_seconds_count|^etcd_debugging_mvcc_db_total_size_in_bytes' || true
  done > "$D/etcd-metrics.log") &
  PIDS+=($!)
  STORE_ARGS=(--etcd "http://127.0.0.1:$CLIENT" --advertise https://10.77.255.254:9443)
fi
"$TEAMSTER" controller "${STORE_ARGS[@]}" --socket "$D/c.sock" --listen 10.77.255.254:9443 \
  --tls-cert "$D/ca/server-ctl.pem" --tls-key "$D/ca/server-ctl.key" --client-ca "$D/ca/ca.pem" \
  --token-file "$D/token" --host-timeout-s 120 > "$D/controller.log" 2>&1 &
CONTROLLER=$!
PIDS+=("$CONTROLLER")
for _ in $(seq 100); do [ -S "$D/c.sock" ] && break; sleep 0.1; done
ip netns exec tml-gen "$TEAMSTER" controller load --url https://10.77.255.254:9443 --ca-dir "$D/ca" \
  --token-file "$D/token" --hosts "$HOSTS" --vms "$VMS" --seconds "$SECS" --pid "$CONTROLLER" \
  --source-from 10.77.0.1 --concurrency 32
curl -s --cacert "$D/ca/ca.pem" -H "Authorization: Bearer $(cat "$D/token")" https://10.77.255.254:9443/metrics |
  grep -E 'store_(saves|records|save_seconds)_total'
if [ "$STORE" = etcd ]; then
  # Rates over the samples of the last 30 s (the generator's steady window).
  python3 - "$D/etcd-metrics.log" <<'PY'
import sys
rows = []
for block in open(sys.argv[1]).read().split("T ")[1:]:
    lines = block.strip().split("\n")
    values = dict(l.rsplit(" ", 1) for l in lines[1:])
    rows.append((int(lines[0]), {k: float(v) for k, v in values.items()}))
if len(rows) < 2:
    sys.exit("etcd: too few samples")
last = rows[-1]
first = next((r for r in rows if r[0] >= last[0] - 30), rows[0])
dt = max(last[0] - first[0], 1)
for k in sorted(last[1]):
    rate = (last[1][k] - first[1].get(k, 0)) / dt
    print(f"etcd {k}: {rate:.1f}/s over {dt} s, now {last[1][k]:.0f}")
PY
fi
