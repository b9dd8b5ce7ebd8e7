/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fast path's frame parser: what the engine's parser (core::wire::parse, which slices with
 * etherparse's strict rules) reads and rejects, decided the same way, or handed to user space
 * where this parser would have to guess (PUNT_PARSER: MACsec, more than MAX_V6_EXTS IPv6
 * extension headers; PUNT_VXLAN: the inner frame of UDP to port 4789).
 *
 * The frame is read through a *virtual* offset: at tc ingress the kernel may already have taken
 * the outer 802.1Q tag off the data and into skb->vlan_tci (a live uplink), or not
 * (BPF_PROG_TEST_RUN, a tap); the parser sees the frame as it was on the wire either way.
 */
#ifndef TEAMSTER_PARSE_H
#define TEAMSTER_PARSE_H

#define MAX_TAGS 3       /* etherparse's LINK_EXTS_CAP: a 4th tag ends the walk */
#define MAX_V6_EXTS 8    /* more IPv6 extension headers than this: punted */

#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88a8
#define ETH_P_QINQ_ 0x9100
#define ETH_P_MACSEC_ 0x88e5
#define ETH_P_IPV4_ 0x0800
#define ETH_P_IPV6_ 0x86dd
#define ETH_P_ARP_ 0x0806
#define ETH_P_RARP_ 0x8035
#define ETH_P_SLOW_ 0x8809
#define ETH_P_MAC_CONTROL_ 0x8808
#define ETH_P_LLDP_ 0x88cc
#define VXLAN_PORT_ 4789

struct frame {
	/* The outer tag the kernel took off the data, if any: it sits at virtual offset 12. */
	__u32 shift;             /* 4 if it did, else 0 */
	__u16 meta_proto;
	__u16 meta_tci;
	__u32 len;               /* the frame's length on the wire (skb->len + shift) */
};

struct key {
	__u8 dst[6];
	__u8 src[6];
	__u16 at12;              /* the two bytes at offset 12: core's is_slow() test */
	__u16 nl_type;           /* core::wire::network_layer's ether type (up to 2 tags of 0x8100/0x88a8) */
	__u8 nl_found;
	__u8 tags;               /* VLAN tags walked (up to MAX_TAGS) */
	__u16 vlan;              /* the first tag's VID, if tags > 0 */
	__u16 ether_type;        /* after the tags */
	__u8 has_ip;             /* src_fold/dst_fold are set (IPv4, IPv6, or ARP/RARP with 4-byte addresses) */
	__u8 has_ports;
	__u16 sport;
	__u16 dport;
	__u16 hdr_end;           /* where a TCP or UDP header ends: what each segment of a super-frame repeats */
	__u32 src_fold;          /* core::teaming::hash::ip_fold of each address */
	__u32 dst_fold;
};

/* Reads `n` bytes at virtual offset `voff` (past the MAC addresses: >= 12) into `to`. */
static __always_inline int vload(struct __sk_buff *skb, const struct frame *f, __u32 voff, void *to, __u32 n)
{
	if (f->shift && voff < 16) {
		/* Only the tag itself lives there; callers read it as one 4-byte unit at 12 or as 2 at 12/14. */
		__u8 *b = to;
		if (voff == 12 && n >= 2) {
			b[0] = f->meta_proto >> 8;
			b[1] = f->meta_proto;
			if (n == 4) {
				b[2] = f->meta_tci >> 8;
				b[3] = f->meta_tci;
			}
			return n == 2 || n == 4 ? 0 : -1;
		}
		if (voff == 14 && n == 2) {
			b[0] = f->meta_tci >> 8;
			b[1] = f->meta_tci;
			return 0;
		}
		return -1;
	}
	return bpf_skb_load_bytes(skb, voff - f->shift, to, n);
}

static __always_inline __u16 be16_at(const __u8 *b)
{
	return ((__u16)b[0] << 8) | b[1];
}

static __always_inline __u32 be32_at(const __u8 *b)
{
	return ((__u32)b[0] << 24) | ((__u32)b[1] << 16) | ((__u32)b[2] << 8) | b[3];
}

/* ARP (and RARP) at `at`, `avail` bytes on: etherparse checks only the lengths; the engine
 * keeps the protocol addresses when they are 4 bytes. 0 ok, DROP_MALFORMED. */
static __always_inline int parse_arp(struct __sk_buff *skb, const struct frame *f, __u32 at, __u32 avail, struct key *k)
{
	__u8 h[8];
	if (avail < 8 || vload(skb, f, at, h, 8))
		return DROP_MALFORMED;
	__u32 hl = h[4], pl = h[5];
	if (avail < 8 + 2 * hl + 2 * pl)
		return DROP_MALFORMED;
	if (pl == 4) {
		__u8 a[4];
		if (vload(skb, f, at + 8 + hl, a, 4))
			return DROP_MALFORMED;
		k->src_fold = be32_at(a);
		if (vload(skb, f, at + 8 + 2 * hl + 4, a, 4))
			return DROP_MALFORMED;
		k->dst_fold = be32_at(a);
		k->has_ip = 1;
	}
	return 0;
}

/* The transport header at `at`, `avail` bytes long (what the IP length fields leave it), as
 * etherparse checks it; the ports of TCP and UDP. Returns 0, DROP_MALFORMED or PUNT_VXLAN. */
static __always_inline int parse_transport(struct __sk_buff *skb, const struct frame *f, __u8 proto, __u32 at,
					   __u32 avail, struct key *k)
{
	__u8 t[20];
	switch (proto) {
	case 6: /* TCP */
		if (avail < 20 || vload(skb, f, at, t, 20))
			return DROP_MALFORMED;
		if ((t[12] >> 4) < 5 || avail < (__u32)(t[12] >> 4) * 4)
			return DROP_MALFORMED;
		k->sport = be16_at(t);
		k->dport = be16_at(t + 2);
		k->has_ports = 1;
		k->hdr_end = at + (t[12] >> 4) * 4;
		return 0;
	case 17: { /* UDP */
		if (avail < 8 || vload(skb, f, at, t, 8))
			return DROP_MALFORMED;
		__u32 ul = be16_at(t + 4);
		if (avail < ul || (ul >= 1 && ul <= 7))
			return DROP_MALFORMED;
		k->sport = be16_at(t);
		k->dport = be16_at(t + 2);
		k->has_ports = 1;
		k->hdr_end = at + 8;
		return k->dport == VXLAN_PORT_ ? PUNT_VXLAN : 0;
	}
	case 1: /* ICMP */
		if (avail < 8 || vload(skb, f, at, t, 2))
			return DROP_MALFORMED;
		if ((t[0] == 13 || t[0] == 14) && t[1] == 0 && avail != 20)
			return DROP_MALFORMED;
		return 0;
	case 58: /* ICMPv6 */
		return avail < 8 ? DROP_MALFORMED : 0;
	case 2: /* IGMP */
		if (avail < 8 || vload(skb, f, at, t, 12 > avail ? 8 : 12))
			return DROP_MALFORMED;
		if (t[0] == 0x11 && avail != 8) {
			if (avail < 12 || avail < 12 + 4 * (__u32)be16_at(t + 10))
				return DROP_MALFORMED;
		}
		return 0;
	}
	return 0;
}

/* An authentication header at `at` (`avail` bytes): its length, or 0 if malformed. */
static __always_inline __u32 auth_header(struct __sk_buff *skb, const struct frame *f, __u32 at, __u32 avail, __u8 *next)
{
	__u8 a[2];
	if (avail < 12 || vload(skb, f, at, a, 2) || a[1] == 0)
		return 0;
	__u32 n = ((__u32)a[1] + 2) * 4;
	if (avail < n)
		return 0;
	*next = a[0];
	return n;
}

static __always_inline int parse_ipv4(struct __sk_buff *skb, const struct frame *f, __u32 at, __u32 avail, struct key *k)
{
	__u8 h[20];
	if (avail < 20 || vload(skb, f, at, h, 20))
		return DROP_MALFORMED;
	if ((h[0] >> 4) != 4 || (h[0] & 0x0f) < 5)
		return DROP_MALFORMED;
	__u32 ihl = (h[0] & 0x0f) * 4, total = be16_at(h + 2);
	if (avail < ihl || total < ihl || avail < total)
		return DROP_MALFORMED;
	k->src_fold = be32_at(h + 12);
	k->dst_fold = be32_at(h + 16);
	k->has_ip = 1;
	__u8 proto = h[9];
	__u32 off = at + ihl, rest = total - ihl;
	if (proto == 51) {
		__u32 n = auth_header(skb, f, off, rest, &proto);
		if (!n)
			return DROP_MALFORMED;
		off += n;
		rest -= n;
	}
	int fragmented = (h[6] & 0x20) || (((h[6] & 0x1f) << 8) | h[7]);
	if (fragmented)
		return 0;
	return parse_transport(skb, f, proto, off, rest, k);
}

static __always_inline int parse_ipv6(struct __sk_buff *skb, const struct frame *f, __u32 at, __u32 avail, struct key *k)
{
	__u8 h[40];
	if (avail < 40 || vload(skb, f, at, h, 40))
		return DROP_MALFORMED;
	if ((h[0] >> 4) != 6)
		return DROP_MALFORMED;
	__u32 pl = be16_at(h + 4), rest;
	if (pl == 0)
		rest = avail - 40;
	else if (avail < 40 + pl)
		return DROP_MALFORMED;
	else
		rest = pl;
	k->src_fold = be32_at(h + 8) ^ be32_at(h + 12) ^ be32_at(h + 16) ^ be32_at(h + 20);
	k->dst_fold = be32_at(h + 24) ^ be32_at(h + 28) ^ be32_at(h + 32) ^ be32_at(h + 36);
	k->has_ip = 1;
	__u8 nh = h[6];
	__u32 off = at + 40;
	int fragmented = 0;
	for (int i = 0; i <= MAX_V6_EXTS; i++) {
		__u8 e[4];
		if (nh == 0 && i > 0)
			return DROP_MALFORMED; /* hop-by-hop not first */
		if (nh == 0 || nh == 43 || nh == 60) {
			if (rest < 8 || vload(skb, f, off, e, 2))
				return DROP_MALFORMED;
			__u32 n = ((__u32)e[1] + 1) * 8;
			if (rest < n)
				return DROP_MALFORMED;
			nh = e[0];
			off += n;
			rest -= n;
		} else if (nh == 44) {
			if (rest < 8 || vload(skb, f, off, e, 4))
				return DROP_MALFORMED;
			if ((e[3] & 1) || (be16_at(e + 2) >> 3))
				fragmented = 1;
			nh = e[0];
			off += 8;
			rest -= 8;
		} else if (nh == 51) {
			__u32 n = auth_header(skb, f, off, rest, &nh);
			if (!n)
				return DROP_MALFORMED;
			off += n;
			rest -= n;
		} else {
			if (fragmented)
				return 0;
			return parse_transport(skb, f, nh, off, rest, k);
		}
	}
	return PUNT_PARSER;
}

/* Parses the frame as the engine does. Returns 0 (switch it), DROP_MALFORMED, or a PUNT_ reason
 * as a negative number. */
static __always_inline int parse(struct __sk_buff *skb, const struct frame *f, struct key *k)
{
	__u8 eth[14];
	if (f->len < 14 || bpf_skb_load_bytes(skb, 0, eth, 12))
		return DROP_MALFORMED;
	__builtin_memcpy(k->dst, eth, 6);
	__builtin_memcpy(k->src, eth + 6, 6);
	__u8 b[4];
	if (vload(skb, f, 12, b, 2))
		return DROP_MALFORMED;
	k->at12 = be16_at(b);

	/* core::wire::network_layer: up to two tags of 0x8100 or 0x88a8. */
	__u32 off = 12;
	__u16 et = k->at12;
	for (int i = 0; i < 2; i++) {
		if (et == ETH_P_8021Q_ || et == ETH_P_8021AD_) {
			off += 4;
			if (off + 2 > f->len || vload(skb, f, off, b, 2))
				break;
			et = be16_at(b);
		}
	}
	k->nl_found = off + 2 <= f->len;
	k->nl_type = et;

	/* etherparse's walk: up to three tags of 0x8100, 0x88a8 or 0x9100. */
	off = 12;
	et = k->at12;
	for (int i = 0; i < MAX_TAGS; i++) {
		if (et != ETH_P_8021Q_ && et != ETH_P_8021AD_ && et != ETH_P_QINQ_)
			break;
		if (off + 2 + 4 > f->len || vload(skb, f, off, b, 4))
			return DROP_MALFORMED;
		if (k->tags == 0)
			k->vlan = be16_at(b + 2) & 0x0fff;
		k->tags++;
		off += 4;
		if (vload(skb, f, off, b, 2))
			return DROP_MALFORMED;
		et = be16_at(b);
	}
	k->ether_type = et;
	__u32 at = off + 2, avail = f->len - at;
	if (k->tags == MAX_TAGS && (et == ETH_P_8021Q_ || et == ETH_P_8021AD_ || et == ETH_P_QINQ_))
		return 0; /* a 4th tag: etherparse stops there, without a network layer */
	int r = 0;
	switch (et) {
	case ETH_P_IPV4_:
		r = parse_ipv4(skb, f, at, avail, k);
		break;
	case ETH_P_IPV6_:
		r = parse_ipv6(skb, f, at, avail, k);
		break;
	case ETH_P_ARP_:
	case ETH_P_RARP_:
		r = parse_arp(skb, f, at, avail, k);
		break;
	case ETH_P_MACSEC_:
		r = PUNT_PARSER;
		break;
	}
	if (r == PUNT_PARSER || r == PUNT_VXLAN)
		return -r;
	return r;
}

#endif
