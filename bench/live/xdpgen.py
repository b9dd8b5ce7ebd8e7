#!/usr/bin/env python3
"""A packet generator that is not the bottleneck: the kernel's XDP "live frames" test mode.

    xdpgen.py IFNAME DST_MAC SRC_MAC SRC_IP DST_IP LEN SECONDS

Run inside the sender's network namespace. It loads a four-instruction XDP program
(`return bpf_redirect(IFINDEX, 0)`) and calls BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES
and a large repeat count, over and over for SECONDS: the kernel builds each frame from the given
bytes in a page pool and redirects it out of IFNAME through the driver's ndo_xdp_xmit, a batch at
a time, with no socket, no syscall and no skb per frame on the sending side (the mechanism
xdp-trafficgen uses; its Debian build needs a tracepoint this kernel lacks). For a veth, the
peer must have NAPI (GRO on, or an XDP program), and the frames are taken there by its NAPI
poll, which runs on another CPU when it is threaded. Frames: Ethernet + IPv4 + UDP (ports 9 ->
9, a valid header checksum, UDP checksum 0), LEN bytes in all without the FCS (60 at least).
Prints one JSON line: frames offered, seconds, offered kpps. Written by hand because no packaged
generator runs here: the kernel has no pktgen, xdp-trafficgen fails to load, and trafgen and
iperf3 are bound by their own system calls at about 200 and 100 kpps on this machine.
"""
import ctypes
import json
import os
import socket
import struct
import sys
import time

SYS_BPF = 321  # x86_64
BPF_PROG_LOAD = 5
BPF_PROG_TEST_RUN = 10
BPF_PROG_TYPE_XDP = 6
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1
BPF_FUNC_REDIRECT = 23
REPEAT = 1 << 20

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def bpf(cmd, attr):
    r = libc.syscall(SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return r


def insn(code, dst, src, off, imm):
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(ifindex):
    return b"".join([
        insn(0xB7, 1, 0, 0, ifindex),  # r1 = ifindex
        insn(0xB7, 2, 0, 0, 0),  # r2 = 0 (flags)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT),  # r0 = bpf_redirect(r1, r2)
        insn(0x95, 0, 0, 0, 0),  # return r0
    ])


class ProgLoad(ctypes.Structure):
    _fields_ = [("prog_type", ctypes.c_uint32), ("insn_cnt", ctypes.c_uint32),
                ("insns", ctypes.c_uint64), ("license", ctypes.c_uint64),
                ("log_level", ctypes.c_uint32), ("log_size", ctypes.c_uint32),
                ("log_buf", ctypes.c_uint64), ("kern_version", ctypes.c_uint32),
                ("prog_flags", ctypes.c_uint32), ("prog_name", ctypes.c_char * 16)]


class TestRun(ctypes.Structure):
    _fields_ = [("prog_fd", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("data_in", ctypes.c_uint64), ("data_out", ctypes.c_uint64),
                ("repeat", ctypes.c_uint32), ("duration", ctypes.c_uint32),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_uint64), ("ctx_out", ctypes.c_uint64),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32), ("_pad", ctypes.c_uint32)]


def checksum(b):
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def frame(dst_mac, src_mac, src_ip, dst_ip, length):
    mac = lambda m: bytes(int(x, 16) for x in m.split(":"))
    payload = b"\0" * max(0, length - 14 - 20 - 8)
    udp = struct.pack("!HHHH", 9, 9, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return mac(dst_mac) + mac(src_mac) + b"\x08\x00" + ip + udp


def main():
    ifname, dst_mac, src_mac, src_ip, dst_ip, length, seconds = sys.argv[1:8]
    length, seconds = max(60, int(length)), float(seconds)
    ifindex = socket.if_nametoindex(ifname)
    code = program(ifindex)
    insns = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(b"GPL")
    pl = ProgLoad(prog_type=BPF_PROG_TYPE_XDP, insn_cnt=len(code) // 8,
                  insns=ctypes.addressof(insns), license=ctypes.addressof(lic),
                  prog_name=b"tmb_xdpgen")
    fd = bpf(BPF_PROG_LOAD, pl)
    data = frame(dst_mac, src_mac, src_ip, dst_ip, length)
    buf = ctypes.create_string_buffer(data, len(data))
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        tr = TestRun(prog_fd=fd, data_size_in=len(data), data_in=ctypes.addressof(buf),
                     repeat=REPEAT, flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=64)
        bpf(BPF_PROG_TEST_RUN, tr)
        sent += REPEAT
    secs = time.monotonic() - start
    print(json.dumps({"offered": sent, "seconds": round(secs, 3),
                      "offered_kpps": round(sent / secs / 1e3, 1), "len": length}))


if __name__ == "__main__":
    main()
