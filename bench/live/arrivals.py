"""Records arrival times of UDP packets to port 5201 on an interface (run inside a namespace).

Usage: arrivals.py IFACE SECONDS OUTFILE. Writes one arrival time (seconds, CLOCK_REALTIME) per
line. Used by run.sh to measure the receivers' inter-arrival gap at a failover, as the Open
vSwitch peer does from tcpdump captures.
"""
import socket
import sys
import time

iface, secs, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.bind((iface, 0))
s.settimeout(0.1)
end = time.time() + secs
times = []
while time.time() < end:
    try:
        f = s.recv(2048)
    except socket.timeout:
        continue
    # IPv4, UDP (protocol 17), destination port 5201.
    if len(f) >= 38 and f[23] == 17 and f[36:38] == b"\x14\x51":
        times.append(time.time())
with open(out, "w") as w:
    w.write("\n".join(f"{t:.6f}" for t in times))
