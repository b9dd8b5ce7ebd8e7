#!/usr/bin/env python3
"""NetIOC's own cost, as the NetIOC white paper's Experiment 3 measures it (issue 30, item 10).

For N VM ports (default 1, 10, 25, 50, 100) on each data plane (kernel, userspace), with NetIOC
on (class `vm` reserving 75% of the uplinks' capacity, each port an equal part of it) and off
(no controls), every VM sends one TCP stream (iperf3, offloads on, as a virtio-net guest) to a
remote host behind two uplinks for SECS seconds, and the harness records:

  - the traffic carried (the receivers' sum), Gbit/s;
  - the whole machine's busy CPU (all cores, /proc/stat) per Gbit/s carried;
  - ping from vm1 to the remote, 10 ms apart, under the load: p50 and p99 (and idle, before).

The paper's figures: CPU within 4-5% of the default scheduler up to 25 VMs, about 12% more at
100; 4-5 us more TCP_RR latency. Here NetIOC's on/off figures are compared per data plane, in
the same round, configurations interleaved, medians over ROUNDS rounds.

Topology (names tmc-*): tmc-vm1..N --veth--> switch ports tmc-v1..N (root namespace); uplinks
tmc-u1/u2 --veth--> tmc-phys (a Linux bridge) --veth--> tmc-remote (10.78.0.250, iperf3
servers). The capacity is 100G, so neither data plane paces (what is measured is the
scheduler's cost, not a rate limit): NetIOC's rates hold, and HTB or hClock run on every frame.

Runs as root; removes everything named tmc-* on exit. Writes --out (JSON) and prints a table.
Usage: bench/live/netioc_cost.py [--ports 1,10,25,50,100] [--planes kernel,userspace]
       [--rounds 2] [--secs 8] [--teamster target/release/teamster] [--out FILE]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PREFIX = "tmc"
REMOTE = "10.78.0.250"
BASE_PORT = 5301


def sh(*args, ns=None, check=True, quiet=True):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def clean():
    for line in sh("ip", "-o", "link", "show", check=False).splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(f"{PREFIX}-"):
            sh("ip", "link", "del", name, check=False)
    for ns in sh("ip", "netns", "list", check=False).split():
        if ns.startswith(f"{PREFIX}-"):
            sh("ip", "netns", "pids", ns, check=False)
            for pid in sh("ip", "netns", "pids", ns, check=False).split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", ns, check=False)


def vm_addr(i):
    return f"10.78.{i // 200}.{i % 200 + 1}"


def topology(n):
    clean()
    for ns in ("phys", "remote"):
        sh("ip", "netns", "add", f"{PREFIX}-{ns}")
        sh("ip", "link", "set", "lo", "up", ns=f"{PREFIX}-{ns}")
    phys, remote = f"{PREFIX}-phys", f"{PREFIX}-remote"
    sh("ip", "link", "add", "br0", "type", "bridge", "stp_state", "0", ns=phys)
    sh("ip", "link", "set", "br0", "up", ns=phys)
    sh("ip", "link", "add", "r0", "type", "veth", "peer", "name", "eth0", "netns", remote, ns=phys)
    sh("ip", "link", "set", "r0", "master", "br0", ns=phys)
    sh("ip", "link", "set", "r0", "up", ns=phys)
    sh("ip", "addr", "add", f"{REMOTE}/16", "dev", "eth0", ns=remote)
    sh("ip", "link", "set", "eth0", "up", ns=remote)
    for u in (1, 2):
        sh("ip", "link", "add", f"{PREFIX}-u{u}", "type", "veth", "peer", "name", f"p{u}", "netns", phys)
        sh("ip", "link", "set", f"{PREFIX}-u{u}", "up")
        sh("ip", "link", "set", f"p{u}", "master", "br0", ns=phys)
        sh("ip", "link", "set", f"p{u}", "up", ns=phys)
    for i in range(1, n + 1):
        ns = f"{PREFIX}-vm{i}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", f"{PREFIX}-v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", "eth0", "address", mac(i), ns=ns)
        sh("ip", "addr", "add", f"{vm_addr(i)}/16", "dev", "eth0", ns=ns)
        sh("ip", "link", "set", "eth0", "up", ns=ns)
        sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "link", "set", f"{PREFIX}-v{i}", "up")


def mac(i):
    return f"02:00:00:01:{i // 256:02x}:{i % 256:02x}"


def config(n, plane, netioc):
    lines = [f'datapath = "{plane}"', "workers = 1"]
    for u in (1, 2):
        lines += ["[[uplinks]]", f'name = "uplink{u}"', f'interface = "{PREFIX}-u{u}"', 'capacity = "100G"']
    lines += ["[[port_groups]]", 'name = "vms"', 'policy = "port-id"', 'active = ["uplink1", "uplink2"]']
    if netioc:
        lines += ["[[traffic_classes]]", 'class = "vm"', 'reservation = "75G"']
    for i in range(1, n + 1):
        lines += ["[[ports]]", f'name = "vm{i}"', f'interface = "{PREFIX}-v{i}"', f'mac = "{mac(i)}"', 'group = "vms"']
        if netioc:
            lines.append(f'reservation = "{75000 // n}M"')
    return "\n".join(lines) + "\n"


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]) - idle, sum(v[:8])


def pings(ns, count, interval):
    out = sh("timeout", str(count * interval + 5), "ping", "-c", str(count), "-i", str(interval), REMOTE, ns=ns, check=False)
    rtts = sorted(float(t.split("time=")[1].split()[0]) for t in out.splitlines() if "time=" in t)
    return rtts, count


def pct(v, p):
    return v[min(len(v) - 1, int(p * len(v)))] if v else None


def run_one(teamster, n, plane, netioc, secs, workdir):
    path = os.path.join(workdir, "switch.toml")
    with open(path, "w") as f:
        f.write(config(n, plane, netioc))
    status = os.path.join(workdir, "status.json")
    if os.path.exists(status):
        os.remove(status)
    log = open(os.path.join(workdir, "daemon.log"), "w")
    daemon = subprocess.Popen([teamster, "run", path, "--status-file", status, "--no-api"], stderr=log, stdout=log)
    try:
        deadline = time.time() + 20
        while not os.path.exists(status):
            if daemon.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the switch did not start: {open(log.name).read()}")
            time.sleep(0.1)
        # Every VM reaches the remote (ARP resolved, ports attached).
        for i in range(1, n + 1):
            sh("ping", "-c", "1", "-W", "2", REMOTE, ns=f"{PREFIX}-vm{i}", check=False)
        idle, _ = pings(f"{PREFIX}-vm1", 50, 0.01)
        clients = []
        for i in range(1, n + 1):
            clients.append(subprocess.Popen(
                ["ip", "netns", "exec", f"{PREFIX}-vm{i}", "iperf3", "-c", REMOTE, "-p", str(BASE_PORT + i - 1),
                 "-t", str(secs + 2), "-J"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        time.sleep(1.5)
        b0, t0 = busy_jiffies()
        loaded, count = pings(f"{PREFIX}-vm1", int(secs * 100 * 0.8), 0.01)
        b1, t1 = busy_jiffies()
        outs = [c.communicate(timeout=secs + 30)[0] for c in clients]
        gbit = 0.0
        for o in outs:
            try:
                gbit += json.loads(o)["end"]["sum_received"]["bits_per_second"] / 1e9
            except (ValueError, KeyError):
                pass
        busy_cores = (b1 - b0) / max(1, t1 - t0) * os.cpu_count()
        return {
            "ports": n, "plane": plane, "netioc": netioc, "gbit": gbit,
            "busy_cores": busy_cores, "cpu_per_gbit": busy_cores / gbit if gbit > 0 else None,
            "idle_p50_ms": pct(idle, 0.5), "loaded_p50_ms": pct(loaded, 0.5), "loaded_p99_ms": pct(loaded, 0.99),
            "pings_lost": count - len(loaded),
        }
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--ports", default="1,10,25,50,100")
    a.add_argument("--planes", default="kernel,userspace")
    a.add_argument("--rounds", type=int, default=2)
    a.add_argument("--secs", type=float, default=8)
    a.add_argument("--teamster", default="target/release/teamster")
    a.add_argument("--out", default="bench/live/netioc-cost.json")
    args = a.parse_args()
    if os.geteuid() != 0:
        sys.exit("netioc_cost.py must run as root")
    for tool in ("iperf3", "ping", "ip"):
        if not shutil.which(tool):
            sys.exit(f"needs {tool}")
    ports = [int(p) for p in args.ports.split(",")]
    planes = args.planes.split(",")
    topology(max(ports))
    remote = f"{PREFIX}-remote"
    servers = [subprocess.Popen(["ip", "netns", "exec", remote, "iperf3", "-s", "-p", str(BASE_PORT + i)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(max(ports))]
    time.sleep(1)
    results = []
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for r in range(args.rounds):
                for n in ports:
                    for plane in planes:
                        # On and off back to back: the pair sees the same machine.
                        for netioc in ((False, True) if r % 2 == 0 else (True, False)):
                            res = run_one(args.teamster, n, plane, netioc, args.secs, workdir)
                            res["round"] = r
                            results.append(res)
                            print(json.dumps(res), flush=True)
    finally:
        for s in servers:
            s.kill()
        clean()
    table = []
    for n in ports:
        for plane in planes:
            def med(netioc, key):
                v = [x[key] for x in results if x["ports"] == n and x["plane"] == plane and x["netioc"] == netioc and x[key] is not None]
                return statistics.median(v) if v else None
            # The ratio per round (same round, same machine), then the median.
            ratios = []
            for r in range(args.rounds):
                on = [x for x in results if x["round"] == r and x["ports"] == n and x["plane"] == plane and x["netioc"]]
                off = [x for x in results if x["round"] == r and x["ports"] == n and x["plane"] == plane and not x["netioc"]]
                if on and off and on[0]["cpu_per_gbit"] and off[0]["cpu_per_gbit"]:
                    ratios.append(on[0]["cpu_per_gbit"] / off[0]["cpu_per_gbit"])
            table.append({
                "ports": n, "plane": plane,
                "gbit_off": med(False, "gbit"), "gbit_on": med(True, "gbit"),
                "cpu_per_gbit_off": med(False, "cpu_per_gbit"), "cpu_per_gbit_on": med(True, "cpu_per_gbit"),
                "cpu_overhead": (statistics.median(ratios) - 1) if ratios else None,
                "loaded_p50_ms_off": med(False, "loaded_p50_ms"), "loaded_p50_ms_on": med(True, "loaded_p50_ms"),
                "idle_p50_ms_off": med(False, "idle_p50_ms"), "idle_p50_ms_on": med(True, "idle_p50_ms"),
            })
    with open(args.out, "w") as f:
        json.dump({"runs": results, "table": table, "rounds": args.rounds, "secs": args.secs,
                   "load": open("/proc/loadavg").read().strip(), "cpus": os.cpu_count()}, f, indent=1)
    print(f"\n{'ports':>5} {'plane':>9} {'Gbit/s off/on':>15} {'CPU/Gbit off/on':>17} {'overhead':>8} {'ping p50 ms off/on (load)':>26}")
    for t in table:
        f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
        print(f"{t['ports']:>5} {t['plane']:>9} {f(t['gbit_off'],1):>7}/{f(t['gbit_on'],1):<7} "
              f"{f(t['cpu_per_gbit_off'],3):>8}/{f(t['cpu_per_gbit_on'],3):<8} "
              f"{'-' if t['cpu_overhead'] is None else format(t['cpu_overhead'] * 100, '+.1f') + '%':>8} "
              f"{f(t['loaded_p50_ms_off'],3):>12}/{f(t['loaded_p50_ms_on'],3):<12}")


if __name__ == "__main__":
    main()
