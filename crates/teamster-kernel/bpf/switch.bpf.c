// SPDX-License-Identifier: Apache-2.0
/*
 * Teamster's kernel fast path: one tc program, attached (tcx ingress) to every VM port and uplink
 * of the switch, that switches each frame as the engine (teamster-core's Switch) would, from the
 * tables the engine writes (switch.h), and executes the decision with bpf_redirect,
 * bpf_redirect_peer and bpf_clone_redirect.
 *
 * The model, in the engine's words (core::switch): a VM port is an access port of its group's
 * VLAN; an uplink is a trunk. From a port, a frame is checked against its group's security
 * policy (forged transmits), its source learned (bounded per port and in all), then sent to the
 * port its destination is known behind, out of the uplink the team chooses for the port (and
 * flow), or flooded to the domain's ports that take it and to the port's uplink. From an uplink:
 * never to another uplink; our own frames reflected back dropped; a known destination delivered,
 * anything else flooded to the ports that take it from that uplink (their receive uplink).
 *
 * What the engine keeps: every decision that changes its state beyond the MAC table (a guest
 * changing its MAC, a port's claim on its MAC, LACPDUs, link-local frames a group asks for,
 * frames this parser cannot decide exactly) is punted: the frame goes to user space whole, with
 * where it came from, and the engine switches it there.
 *
 * The program records its decision on the last frame per CPU (`verdict`): the differential test
 * runs it under BPF_PROG_TEST_RUN beside the engine and compares the two, frame by frame.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "switch.h"
#include "parse.h"

_Static_assert(MAX_SLOTS == 1024, "mark_of masks with 1023");
_Static_assert(MAX_GROUP_UPLINKS == 8, "select_uplink masks with 7");

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct iface);
} ifaces SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct slot_info);
} slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct punt_bucket);
} punt_budget SEC(".maps");

/* By domain_index(): an array (one map page a read, where a hash takes two), a domain with no
 * members standing for none. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DOMAIN_INDEXES);
	__type(key, __u32);
	__type(value, struct domain);
} domains SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_GROUPS);
	__type(key, __u32);
	__type(value, struct group);
} groups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

/* The flowlet groups' buckets, by group * FLOWLET_BUCKETS + bucket: the program's part
 * (current member, times, bytes), and the engine's target (FLOWLET_HASHED, or its slot + 1;
 * 0: not placed yet, as an array starts). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_GROUPS * FLOWLET_BUCKETS);
	__type(key, __u32);
	__type(value, struct flowlet);
} flowlets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_GROUPS * FLOWLET_BUCKETS);
	__type(key, __u32);
	__type(value, __u32);
} flowlet_targets SEC(".maps");

/* The MAC table. Sized at load time (the configured total plus room for the ports' static
 * entries); the limits are enforced with the counts in `learned`, not by the map's size. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384 + MAX_SLOTS);
	__type(key, struct fdb_key);
	__type(value, struct fdb_entry);
} fdb SEC(".maps");

/* Learned entries per slot, and in all at index MAX_SLOTS. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS + 1);
	__type(key, __u32);
	__type(value, __u64);
} learned SEC(".maps");

/* When each port last sent a frame out of an uplink (ns), by slot: its frames coming back are
 * told from a host outside's by it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} sent_out SEC(".maps");

/* Our uplinks' own MACs: a frame from one of them on an uplink is our own, reflected. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SLOTS);
	__type(key, struct fdb_key);
	__type(value, __u32);
} own_macs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct verdict);
} verdict SEC(".maps");

/* The IPv4 address each (VLAN, MAC) last gave in ARP on an uplink, as far as the engine was
 * told: a note goes up only when it changes. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct fdb_key);
	__type(value, __u32);
} arp_seen SEC(".maps");

/* Per CPU, by slot: the verdict's seq when the slot was last made an output (so a copy is
 * never listed twice, without a search of the outputs). */
struct marks {
	__u64 seq[MAX_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct marks);
} marks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} punts SEC(".maps");

#define LEARN_KNOWN 0
#define LEARN_ADDED 1
#define LEARN_REFUSED 2

/* How long ago `then` was, 0 if it is later than `now`: a time another CPU wrote after this
 * program read the clock is the present, never the distant past an unsigned difference would
 * make of it (core's Instant subtraction saturates the same way). */
static __always_inline __u64 since(__u64 now, __u64 then)
{
	return now > then ? now - then : 0;
}

static __always_inline int is_group(const __u8 *mac)
{
	return mac[0] & 1;
}

static __always_inline int is_zero(const __u8 *mac)
{
	return !(mac[0] | mac[1] | mac[2] | mac[3] | mac[4] | mac[5]);
}

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] && a[5] == b[5];
}

static __always_inline struct fdb_key fdb_key(__u16 domain, const __u8 *mac)
{
	struct fdb_key k = { .domain = domain };
	__builtin_memcpy(k.mac, mac, 6);
	return k;
}

static __always_inline void count_add(__u32 index, __s64 by)
{
	__u64 *n = bpf_map_lookup_elem(&learned, &index);
	if (n)
		__sync_fetch_and_add(n, by);
}

static __always_inline __u64 count_of(__u32 index)
{
	__u64 *n = bpf_map_lookup_elem(&learned, &index);
	return n ? *n : 0;
}

/* A learned entry at `slot` left the table: its counts go down. */
static __always_inline void forget(__u32 slot, int behind_port)
{
	count_add(MAX_SLOTS, -1);
	if (behind_port && slot < MAX_SLOTS)
		count_add(slot, -1);
}

/* The interface in `slot`, or 0 if the slot is free. */
static __always_inline struct slot_info *slot_of(__u32 slot)
{
	struct slot_info *s = bpf_map_lookup_elem(&slots, &slot);
	return s && s->ifindex ? s : 0;
}

/* The domain `dom` (a VLAN or DOMAIN_UNTAGGED), or 0 if no port is in it. */
static __always_inline struct domain *domain_of(__u16 dom)
{
	__u32 i = dom == DOMAIN_UNTAGGED ? DOMAIN_INDEXES - 1 : dom;
	struct domain *d = bpf_map_lookup_elem(&domains, &i);
	return d && d->count ? d : 0;
}

static __always_inline int slot_is_port(__u32 slot)
{
	struct slot_info *s = slot_of(slot);
	return s && s->kind == KIND_PORT;
}

/* Where `mac` lives in `domain`, if known and not expired (core MacTable::lookup): a slot, or
 * NO_SLOT. `statik` says whether it is a configured port MAC. */
static __always_inline __u32 lookup(const struct config *c, __u16 domain, const __u8 *mac, __u64 now, int *statik)
{
	struct fdb_key k = fdb_key(domain, mac);
	struct fdb_entry *e = bpf_map_lookup_elem(&fdb, &k);
	*statik = 0;
	if (!e)
		return NO_SLOT;
	if (e->flags & FDB_STATIC) {
		*statik = 1;
		return e->slot;
	}
	if (since(now, e->seen) >= c->ageing_ns)
		return NO_SLOT;
	return e->slot;
}

/* Records that `mac` was heard at `slot` within the limits (core MacTable::learn): a static
 * entry is never overwritten, group and zero addresses never learned; an entry that moves is
 * forgotten first, and a move into a port at its limit leaves it forgotten. */
static __always_inline int learn(const struct config *c, __u16 domain, const __u8 *mac, __u32 slot, int at_port,
				 __u64 now)
{
	if (is_group(mac) || is_zero(mac))
		return LEARN_KNOWN;
	struct fdb_key k = fdb_key(domain, mac);
	struct fdb_entry *e = bpf_map_lookup_elem(&fdb, &k);
	if (e) {
		if (e->flags & FDB_STATIC)
			return LEARN_KNOWN;
		if (e->slot == slot) {
			e->seen = now;
			return LEARN_KNOWN;
		}
		__u32 old = e->slot;
		if (bpf_map_delete_elem(&fdb, &k) == 0)
			forget(old, slot_is_port(old));
	}
	if (at_port && count_of(slot) >= c->limit_per_port)
		return LEARN_REFUSED;
	if (count_of(MAX_SLOTS) >= c->limit_total)
		return LEARN_REFUSED;
	struct fdb_entry n = { .seen = now, .slot = slot };
	long err = bpf_map_update_elem(&fdb, &k, &n, BPF_NOEXIST);
	if (err == -17 /* EEXIST: another CPU learned it just now */)
		return LEARN_KNOWN;
	if (err)
		return LEARN_REFUSED;
	count_add(MAX_SLOTS, 1);
	if (at_port)
		count_add(slot, 1);
	return LEARN_ADDED;
}

static __always_inline struct stats *stats_of(__u32 slot)
{
	return bpf_map_lookup_elem(&stats, &slot);
}

static __always_inline int dropped(struct verdict *v, __u32 slot, __u16 why)
{
	struct stats *s = stats_of(slot);
	if (s && why < DROP_REASONS)
		s->drops[why]++;
	v->drop = why;
	return TC_ACT_SHOT;
}

/* Puts the first `len` bytes of the frame, after a punt_meta saying where it came from and why,
 * on this CPU's ring for user space (the punt reader). */
static __always_inline void hand_up(struct __sk_buff *skb, __u16 why, __u64 len)
{
	struct punt_meta m = {
		.ifindex = skb->ifindex,
		.len = len,
		.reason = why,
		.vlan_tci = skb->vlan_tci,
		.vlan_proto = bpf_ntohs(skb->vlan_proto),
		.vlan_present = skb->vlan_present,
	};
	bpf_perf_event_output(skb, &punts, BPF_F_CURRENT_CPU | (len << 32), &m, sizeof(m));
}

/* True if interface `slot` may hand one more frame or note up now: a token bucket of
 * config.punt_rate a second, PUNT_BURST deep, so that no VM and no host outside can keep the
 * engine (and the per-CPU rings the uplinks' LACPDUs share) busy. Updated without a lock: two
 * CPUs racing may let a frame or two more through, never fewer. */
static __always_inline int may_hand_up(__u32 slot)
{
	__u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&config, &zero);
	struct punt_bucket *b = bpf_map_lookup_elem(&punt_budget, &slot);
	if (!c || !b || !c->punt_rate)
		return 1;
	__u64 now = bpf_ktime_get_ns();
	__u64 elapsed = since(now, b->last_ns);
	if (elapsed > 1000000000ULL)
		elapsed = 1000000000ULL;
	__u64 credit = b->credit + elapsed * c->punt_rate / 1000000;
	if (credit > PUNT_BURST * 1000ULL)
		credit = PUNT_BURST * 1000ULL;
	if (now > b->last_ns)
		b->last_ns = now;
	if (credit < 1000) {
		b->credit = credit;
		struct stats *s = stats_of(slot);
		if (s)
			s->punt_limited++;
		return 0;
	}
	b->credit = credit - 1000;
	return 1;
}

/* Hands the frame to user space whole, with where it came from, and drops it here (past the
 * interface's punt rate, only drops it). */
static __always_inline int punted(struct __sk_buff *skb, struct verdict *v, __u32 slot, __u8 why)
{
	struct stats *s = stats_of(slot);
	v->punt = why;
	if (!may_hand_up(slot))
		return TC_ACT_SHOT;
	if (s)
		s->punted++;
	if (skb->len <= 0xff00)
		hand_up(skb, why, skb->len);
	else if (s)
		s->drops[0]++; /* too long to hand over: counted, never silent */
	return TC_ACT_SHOT;
}

/* The program's working state for one frame. */
struct turn {
	struct __sk_buff *skb;
	struct verdict *v;
	struct marks *marks;
};

/* The mark of `slot` (< MAX_SLOTS): masked in a way clang cannot fold away, so the verifier
 * sees the bound on the register that indexes. */
static __always_inline __u64 *mark_of(const struct turn *t, __u32 slot)
{
	__u64 i = slot;
	asm volatile("%0 &= 1023" : "+r"(i));
	return &t->marks->seq[i];
}

static __always_inline void add_out(struct turn *t, __u32 slot, __u8 edit, __u16 vid, __u8 rewrite)
{
	struct verdict *v = t->v;
	__u32 n = v->count;
	if (n >= MAX_OUTPUTS)
		return;
	v->outs[n].slot = slot;
	v->outs[n].edit = edit;
	v->outs[n].vid = vid;
	v->outs[n].rewrite = rewrite;
	v->count = n + 1;
	if (slot < MAX_SLOTS)
		*mark_of(t, slot) = v->seq;
}

static __always_inline int listed(const struct turn *t, __u32 slot)
{
	return slot < MAX_SLOTS && *mark_of(t, slot) == t->v->seq;
}

/* A walk over a domain's ports (bpf_loop's context): which of them a frame goes to. */
#define WALK_FLOOD 0       /* from port `sender`: the others that take `dst` */
#define WALK_RECEIVERS 1   /* from an uplink (bit `bit`): those that take it from there */
#define WALK_PROMISCUOUS 2 /* the promiscuous ones, but `sender` and those already listed */
struct walk {
	struct turn *t;
	struct domain *d;
	__u64 bit;
	__u32 sender;
	__u8 mode;
	__u8 group_dst;
	__u8 unknown;      /* WALK_RECEIVERS: the destination is not known anywhere */
	__u8 edit;
};

static long walk_member(__u64 i, void *ctx)
{
	struct walk *w = ctx;
	struct domain *d = w->d;
	if (i >= MAX_DOMAIN_PORTS || i >= d->count)
		return 1;
	const struct member *m = &d->members[i];
	int takes;
	switch (w->mode) {
	case WALK_FLOOD:
		takes = m->slot != w->sender && (w->group_dst || (m->flags & PORT_MAC_CHANGES_OK));
		break;
	case WALK_RECEIVERS:
		takes = ((m->flags & PORT_PROMISCUOUS) ||
			 (w->unknown && (w->group_dst || (m->flags & PORT_MAC_CHANGES_OK)))) &&
			(m->rx_uplinks & w->bit);
		break;
	default:
		takes = (m->flags & PORT_PROMISCUOUS) && m->slot != w->sender && !listed(w->t, m->slot);
	}
	if (takes)
		add_out(w->t, m->slot, w->edit, 0, 0);
	return 0;
}

static __always_inline void walk(struct turn *t, struct domain *d, __u8 mode, __u32 sender, __u8 edit, __u8 group_dst,
				 __u8 unknown, __u64 bit)
{
	struct walk w = {
		.t = t, .d = d, .bit = bit, .sender = sender, .mode = mode,
		.group_dst = group_dst, .unknown = unknown, .edit = edit,
	};
	bpf_loop(MAX_DOMAIN_PORTS, walk_member, &w, 0);
}

/* core::teaming::hash. */
static __always_inline __u64 mix(__u64 z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static __always_inline __u32 ip_hash(const struct key *k, int l4)
{
	__u32 a = k->src_fold ^ k->dst_fold;
	if (l4 && k->has_ports)
		a ^= ((__u32)k->sport << 16) | k->dport;
	a ^= a >> 16;
	a ^= a >> 8;
	return a;
}

/* core PolicyView::fallback: the live active uplink rendezvous hashing on `key` picks, else the
 * first live standby. A slot or NO_SLOT. */
static __always_inline __u32 fallback(const struct group *g, __u64 key)
{
	__u32 best = NO_SLOT, best_id = 0;
	__u64 best_score = 0;
	for (int i = 0; i < MAX_GROUP_UPLINKS; i++) {
		if (i >= g->active_count)
			break;
		const struct group_uplink *u = &g->active[i];
		if (!u->up)
			continue;
		__u64 score = mix(key ^ (u->salt * 0x9e3779b97f4a7c15ULL));
		if (best == NO_SLOT || score > best_score || (score == best_score && u->id < best_id)) {
			best = u->slot;
			best_id = u->id;
			best_score = score;
		}
	}
	if (best != NO_SLOT)
		return best;
	for (int i = 0; i < MAX_GROUP_UPLINKS; i++) {
		if (i >= g->standby_count)
			break;
		if (g->standby[i].up)
			return g->standby[i].slot;
	}
	return NO_SLOT;
}

/* core's hashed_uplink: active[h mod n] if it is up, else the rendezvous fallback on `h`. */
static __always_inline __u32 hashed(const struct group *g, __u32 h, __u32 otherwise)
{
	__u32 n = g->active_count;
	if (n == 0 || n > MAX_GROUP_UPLINKS)
		return otherwise;
	__u64 i = h % n;
	asm volatile("%0 &= 7" : "+r"(i)); /* (i < n <= 8 already; the verifier needs to see it) */
	if (g->active[i].up)
		return g->active[i].slot;
	return fallback(g, h);
}

/* core::teaming::hash::mac_pair_hash: FNV-1a (32-bit) over both MACs, folded. */
static __always_inline __u32 mac_pair_hash(const __u8 *src, const __u8 *dst)
{
	__u32 h = 0x811c9dc5;
	for (int i = 0; i < 6; i++) {
		h ^= src[i];
		h *= 0x01000193;
	}
	for (int i = 0; i < 6; i++) {
		h ^= dst[i];
		h *= 0x01000193;
	}
	h ^= h >> 16;
	h ^= h >> 8;
	return h;
}

/* core::teaming::address_hash over `fields`, with Windows' fallbacks (the 2-tuple without
 * ports, the MACs without IP): 1 and the hash in *h, or 0 for ARP and RARP, which take the
 * port's own uplink. */
static __always_inline int address_hash(const struct key *k, __u8 fields, __u32 *h)
{
	if (k->ether_type == ETH_P_ARP_ || k->ether_type == ETH_P_RARP_)
		return 0;
	__u64 key;
	if (k->has_ip && fields != FIELDS_MAC_ADDRESSES) {
		key = ((__u64)k->src_fold << 32) | k->dst_fold;
		if (k->has_ports && fields == FIELDS_TRANSPORT_PORTS) {
			__u64 ports = ((__u64)k->sport << 16) | k->dport;
			key ^= ((ports << 24) | (ports >> 40)) ^ 0x4e34;
		}
	} else {
		key = 0x4d41430000000000ULL | mac_pair_hash(k->src, k->dst);
	}
	*h = mix(key) >> 32;
	return 1;
}

/* True if `slot` is one of the group's live active uplinks, or (with `standby`) live standby. */
static __always_inline int member_up(const struct group *g, __u32 slot, int standby)
{
	for (int i = 0; i < MAX_GROUP_UPLINKS; i++) {
		if (i < g->active_count && g->active[i].slot == slot && g->active[i].up)
			return 1;
		if (standby && i < g->standby_count && g->standby[i].slot == slot && g->standby[i].up)
			return 1;
	}
	return 0;
}

/* select_uplink's answer for a frame the engine must place: a flowlet bucket's first. */
#define SELECT_PUNT 0xfffffffeu

/* core Flowlets::send for the bucket of Address Hash `h` in group `gi`: a frame within a burst
 * takes the bucket's current member while it is live and in the group; the first after an
 * idle gap (a new flowlet), or one whose member is gone, takes the bucket's target while that
 * is a live active member, else active[bucket mod n] (or its fallback). A bucket the engine
 * has not placed has not sent yet: its first frame goes to the engine, which places it (core
 * sets a first flowlet's target to the least loaded member, a sum over every bucket) and writes
 * its state and target here; so does the next flowlet of a bucket placed without a target
 * (FLOWLET_OPEN). While the engine is gone (killed, or not started again), such a frame goes
 * to active[bucket mod n] (or its fallback) instead of to nobody, and the bucket stays as it
 * was. Two
 * CPUs sending in one bucket may both start a flowlet; the bytes are added atomically, the rest
 * is last-writer-wins, as good as the engine needs for its rebalance. */
static __always_inline __u32 flowlet_uplink(const struct config *c, const struct group *g, __u32 gi, __u32 h,
					    __u32 len, __u64 now)
{
	__u32 b = mix(h) & (FLOWLET_BUCKETS - 1);
	__u32 idx = gi * FLOWLET_BUCKETS + b;
	__u32 *target = bpf_map_lookup_elem(&flowlet_targets, &idx);
	struct flowlet *e = bpf_map_lookup_elem(&flowlets, &idx);
	if (!target || !e)
		return SELECT_PUNT;
	int engine = since(now, c->engine_ns) < ENGINE_GONE_NS;
	if (!*target)
		return engine ? SELECT_PUNT : hashed(g, b, NO_SLOT);
	int idle = !e->last_seen || since(now, e->last_seen) >= g->gap_ns;
	__u32 cur = e->current;
	if (idle || cur == NO_SLOT || !member_up(g, cur, 1)) {
		/* A new flowlet, or its member gone: where core's next_member puts it. */
		__u32 t = *target - 1;
		if (*target == FLOWLET_OPEN && engine)
			return SELECT_PUNT;
		if (*target == FLOWLET_OPEN || *target == FLOWLET_HASHED || !member_up(g, t, 0))
			cur = hashed(g, b, NO_SLOT);
		else
			cur = t;
		e->current = cur;
	}
	if (idle)
		e->flowlet_at = now;
	e->last_seen = now;
	__sync_fetch_and_add(&e->bytes, len);
	return cur;
}

/* core's Census for the hash policies (IP hash, Address Hash): the member and bytes of the
 * frame's bucket (its Address Hash over the group's fields), kept in `flowlets` at the group's
 * buckets and read back by the engine, so `ctl group` shows how the flows spread on this path
 * too. (ARP and RARP have no bucket, as in core.) */
static __always_inline void census(const struct group *g, __u32 gi, const struct key *k, __u32 u, __u32 len, __u64 now)
{
	__u32 h;
	if (u == NO_SLOT || !address_hash(k, g->fields, &h))
		return;
	__u32 idx = gi * FLOWLET_BUCKETS + (mix(h) & (FLOWLET_BUCKETS - 1));
	struct flowlet *e = bpf_map_lookup_elem(&flowlets, &idx);
	if (!e)
		return;
	e->current = u;
	e->last_seen = now;
	__sync_fetch_and_add(&e->bytes, len);
}

/* The uplink (slot) for a frame of `len` bytes of port `p` (core Team::select_frame), or
 * SELECT_PUNT. */
static __always_inline __u32 select_uplink(const struct config *c, const struct iface *p, const struct key *k, __u32 len,
					   __u64 now)
{
	if (p->policy == POLICY_PORT)
		return p->uplink;
	__u32 gi = p->group;
	struct group *g = bpf_map_lookup_elem(&groups, &gi);
	if (!g)
		return p->uplink;
	__u32 h, u;
	if (p->policy == POLICY_IP_L3 || p->policy == POLICY_IP_L3L4)
		u = k->has_ip ? hashed(g, ip_hash(k, p->policy == POLICY_IP_L3L4), p->uplink) : p->uplink;
	else if (!address_hash(k, g->fields, &h))
		return p->uplink;
	else if (p->policy == POLICY_FLOWLET)
		return flowlet_uplink(c, g, gi, h, len, now);
	else
		u = hashed(g, h, p->uplink);
	census(g, gi, k, u, len, now);
	return u;
}

/* core Switch::spread_to: a spreading policy's frame on a member other than the port's own
 * leaves with that member's MAC, or on the port's own member if that MAC is unknown. */
static __always_inline void to_uplink(struct turn *t, const struct iface *p, __u32 u)
{
	__u8 edit = p->domain == DOMAIN_UNTAGGED ? EDIT_KEEP : EDIT_PUSH;
	__u16 vid = p->domain == DOMAIN_UNTAGGED ? 0 : p->domain;
	if (!(p->flags & PORT_REWRITES) || p->uplink == u)
		return add_out(t, u, edit, vid, 0);
	struct slot_info *up = slot_of(u);
	if (up && (up->flags & UPLINK_HAS_MAC))
		return add_out(t, u, edit, vid, 1);
	add_out(t, p->uplink != NO_SLOT ? p->uplink : u, edit, vid, 0);
}

/* core::wire::link_control: MAC control (any tags), 802.1D's reserved group addresses,
 * Cisco's PVST+ and CDP/VTP/DTP. */
static __always_inline int link_control(const struct key *k)
{
	const __u8 *d = k->dst;
	if (k->nl_found && k->nl_type == ETH_P_MAC_CONTROL_)
		return 1;
	if (d[0] == 0x01 && d[1] == 0x80 && d[2] == 0xc2 && d[3] == 0 && d[4] == 0 && d[5] <= 0x0f)
		return 1;
	return d[0] == 0x01 && d[1] == 0x00 && d[2] == 0x0c && d[3] == 0xcc && d[4] == 0xcc &&
	       (d[5] == 0xcc || d[5] == 0xcd);
}

static __always_inline int from_port(struct turn *t, struct __sk_buff *skb, struct verdict *v, const struct config *c,
				     const struct iface *p, const struct frame *f, __u64 now)
{
	__u32 slot = p->slot;
	if (p->flags & PORT_PUNT)
		return punted(skb, v, slot, PUNT_PORT_UNSETTLED);
	struct key k = {};
	int r = parse(skb, f, &k);
	v->hdr = k.hdr_end;
	/* core: slow protocols first, then link control, then what the parser found. */
	if (k.at12 == ETH_P_SLOW_)
		return dropped(v, slot, DROP_SLOW_PROTOCOL);
	if (link_control(&k))
		return dropped(v, slot, DROP_LINK_CONTROL);
	if (r > 0)
		return dropped(v, slot, DROP_MALFORMED);
	if (r < 0)
		return punted(skb, v, slot, -r);
	if (k.tags)
		return dropped(v, slot, DROP_TAGGED_ON_ACCESS_PORT);

	/* core Switch::admit_source. */
	__u16 dom = p->domain;
	int learns;
	if (mac_eq(k.src, p->mac)) {
		if (p->flags & PORT_CHANGED)
			return punted(skb, v, slot, PUNT_MAC_CHANGE); /* back to its configured MAC */
		learns = 0;
	} else if ((p->flags & PORT_CHANGED) && mac_eq(k.src, p->changed)) {
		learns = 1;
	} else if (p->flags & PORT_FORGED_OK) {
		learns = p->flags & PORT_MAC_CHANGES_OK;
	} else if ((p->flags & PORT_MAC_CHANGES_OK) && !is_group(k.src) && !is_zero(k.src)) {
		int statik;
		lookup(c, dom, k.src, now, &statik);
		if (statik)
			return dropped(v, slot, DROP_FORGED_TRANSMIT); /* another port's configured MAC */
		return punted(skb, v, slot, PUNT_MAC_CHANGE);
	} else {
		return dropped(v, slot, DROP_FORGED_TRANSMIT);
	}
	if (learns) {
		v->learned = learn(c, dom, k.src, slot, 1, now);
		if (v->learned == LEARN_REFUSED) {
			struct stats *s = stats_of(slot);
			if (s)
				s->mac_limit++;
		}
	}

	int statik;
	__u32 known = is_group(k.dst) ? NO_SLOT : lookup(c, dom, k.dst, now, &statik);
	/* The domain's flood list, for a flood or its promiscuous ports' copies; a known unicast in
	 * a domain without promiscuous ports needs none (one map page less, cold). */
	struct domain *d = known == NO_SLOT || (p->flags & PORT_PROMISCUOUS_PEERS) ?
				   domain_of(dom) : 0;
	__u32 u = NO_SLOT;
	if (known != NO_SLOT) {
		if (known == slot)
			return dropped(v, slot, DROP_HAIRPIN);
		if (slot_is_port(known)) {
			add_out(t, known, EDIT_KEEP, 0, 0);
		} else {
			u = select_uplink(c, p, &k, f->len, now);
			if (u == SELECT_PUNT)
				return punted(skb, v, slot, PUNT_FLOWLET);
			if (u == NO_SLOT)
				return dropped(v, slot, DROP_NO_UPLINK);
		}
	} else {
		/* A spreading policy's group frames go on the port's own member, with its own MAC. */
		u = (is_group(k.dst) && (p->flags & PORT_REWRITES)) ? p->uplink : select_uplink(c, p, &k, f->len, now);
		if (u == SELECT_PUNT)
			return punted(skb, v, slot, PUNT_FLOWLET);
		if (d)
			walk(t, d, WALK_FLOOD, slot, EDIT_KEEP, is_group(k.dst), 0, 0);
	}
	if (d && d->promiscuous)
		walk(t, d, WALK_PROMISCUOUS, slot, EDIT_KEEP, 0, 0, 0);
	/* The uplink's output last: execute() edits the frame for it after the ports' copies left. */
	if (u != NO_SLOT)
		to_uplink(t, p, u);
	return TC_ACT_OK;
}

/* core Switch::heard_on_uplink, as far as it needs no state of the engine's: a frame from port
 * `at`'s configured MAC is our own come back if it is a RARP (our announcement), if the port
 * does not own its MAC, or if the port sent out within the reflection window, unless it is for
 * another port settled here (which our port would have reached directly). Otherwise a host
 * outside may be using the MAC: the engine decides. */
static __always_inline int reflected(const struct config *c, const struct key *k, __u16 dom, __u32 at, __u64 now)
{
	struct slot_info *p = slot_of(at);
	if (!p || (p->flags & PORT_PUNT) || k->ether_type == ETH_P_RARP_)
		return 1;
	__u64 *sent = bpf_map_lookup_elem(&sent_out, &at);
	int quiet = !sent || !*sent || since(now, *sent) >= c->reflection_ns;
	int to_settled = 0;
	if (!is_group(k->dst)) {
		int statik;
		__u32 q = lookup(c, dom, k->dst, now, &statik);
		struct slot_info *qi = statik && q != at ? slot_of(q) : 0;
		to_settled = qi && (qi->flags & PORT_SETTLED);
	}
	return !(quiet || to_settled);
}

/* Tells the engine an ARP sender's address on an uplink when it is new or changed (core
 * Switch's ArpSenders, which its claims ask before a port takes a MAC a host outside used). */
static __always_inline void note_arp(struct __sk_buff *skb, __u32 slot, __u16 dom, const struct key *k)
{
	struct fdb_key key = fdb_key(dom, k->src);
	__u32 *ip = bpf_map_lookup_elem(&arp_seen, &key);
	if (ip && *ip == k->src_fold)
		return;
	if (!may_hand_up(slot))
		return; /* not recorded as seen: the next one may be noted */
	__u32 sender = k->src_fold;
	bpf_map_update_elem(&arp_seen, &key, &sender, BPF_ANY);
	hand_up(skb, NOTE_ARP, skb->len < NOTE_BYTES ? skb->len : NOTE_BYTES);
}

static __always_inline int from_uplink(struct turn *t, struct __sk_buff *skb, struct verdict *v, const struct config *c,
				       const struct iface *up, const struct frame *f, __u64 now)
{
	__u32 slot = up->slot;
	struct key k = {};
	int r = parse(skb, f, &k);
	v->hdr = k.hdr_end;
	if (k.at12 == ETH_P_SLOW_) {
		static const __u8 slow[6] = { 0x01, 0x80, 0xc2, 0x00, 0x00, 0x02 };
		if (mac_eq(k.dst, slow))
			return punted(skb, v, slot, PUNT_SLOW_PROTOCOL);
		return dropped(v, slot, DROP_SLOW_PROTOCOL);
	}
	if (link_control(&k)) {
		if (c->link_local)
			return punted(skb, v, slot, PUNT_LINK_LOCAL);
		return dropped(v, slot, DROP_LINK_CONTROL);
	}
	if (up->flags & UPLINK_DISCARDS)
		return dropped(v, slot, DROP_NOT_RECEIVE_UPLINK);
	if (r > 0)
		return dropped(v, slot, DROP_MALFORMED);
	if (r < 0)
		return punted(skb, v, slot, -r);
	/* An outer 0x9100 tag in the data: the kernel's vlan_pop takes only 802.1Q and 802.1ad. */
	if (k.tags && !f->shift && k.at12 == ETH_P_QINQ_)
		return punted(skb, v, slot, PUNT_PARSER);
	__u16 dom = k.tags ? k.vlan : DOMAIN_UNTAGGED;
	struct domain *d = domain_of(dom);
	if (!d)
		return dropped(v, slot, DROP_UNKNOWN_VLAN);
	struct fdb_key own = fdb_key(0, k.src);
	if (bpf_map_lookup_elem(&own_macs, &own))
		return dropped(v, slot, DROP_REFLECTION);
	int statik;
	__u32 at = lookup(c, dom, k.src, now, &statik);
	if (at != NO_SLOT && slot_is_port(at)) {
		if (statik && !reflected(c, &k, dom, at, now))
			return punted(skb, v, slot, PUNT_CLAIM); /* maybe a host outside: the engine's claims */
		return dropped(v, slot, DROP_REFLECTION);
	}
	if ((k.ether_type == ETH_P_ARP_ || k.ether_type == ETH_P_RARP_) && k.has_ip && k.src_fold && !is_group(k.src))
		note_arp(skb, up->slot, dom, &k);
	__u32 known = is_group(k.dst) ? NO_SLOT : lookup(c, dom, k.dst, now, &statik);
	__u8 edit = k.tags ? EDIT_POP : EDIT_KEEP;
	__u64 bit = up->id < 64 ? 1ULL << up->id : 0;
	int to_port = known != NO_SLOT && slot_is_port(known);
	if (to_port)
		add_out(t, known, edit, 0, 0);
	else
		walk(t, d, WALK_RECEIVERS, NO_SLOT, edit, is_group(k.dst), known == NO_SLOT, bit);
	v->learned = learn(c, dom, k.src, slot, 0, now);
	if (v->learned == LEARN_REFUSED) {
		struct stats *s = stats_of(slot);
		if (s)
			s->mac_limit++;
	}
	if (v->count == 0)
		return dropped(v, slot, DROP_NOT_RECEIVE_UPLINK);
	if (to_port && d->promiscuous)
		walk(t, d, WALK_PROMISCUOUS, NO_SLOT, edit, 0, 0, 0);
	return TC_ACT_OK;
}

static __always_inline __u32 ifindex_of_slot(__u32 slot)
{
	struct slot_info *s = slot_of(slot);
	return s ? s->ifindex : 0;
}

/* The bytes `len` (a frame, or a super-frame's whole) stands for on a wire. */
static __always_inline __u64 wire_bytes(const struct verdict *v, __u32 len)
{
	return len + (__u64)(v->segs - 1) * v->hdr;
}

static __always_inline void count_tx(const struct verdict *v, __u32 slot, __u32 len)
{
	struct stats *s = stats_of(slot);
	if (s) {
		s->tx_packets += v->segs;
		s->tx_bytes += wire_bytes(v, len);
	}
}

/* bpf_loop's context for the copies: every output but the last. */
struct copies {
	struct __sk_buff *skb;
	struct verdict *v;
	__u32 last;
	__u8 from_uplink;
};

/* Counts a frame sent to `slot`, and for the team's meters a port's traffic to or from uplinks. */
static __always_inline void count_out(const struct verdict *v, __u32 slot, __u32 len, __u32 port_slot, int to_uplink,
				      int from_uplink)
{
	count_tx(v, slot, len);
	struct stats *s = stats_of(port_slot);
	if (!s)
		return;
	if (to_uplink)
		s->to_uplinks += wire_bytes(v, len);
	if (from_uplink)
		s->from_uplinks += wire_bytes(v, len);
}

/* True if the frame fits `ifindex`'s MTU (a super-frame is cut to it on the way, and fits);
 * else counts it `oversize` on `slot`, as the engine's data plane does. */
static __always_inline int fits(struct __sk_buff *skb, __u32 ifindex, __u32 slot)
{
	__u32 mtu = 0;
	if (bpf_check_mtu(skb, ifindex, &mtu, 0, 0) == 0)
		return 1;
	struct stats *s = stats_of(slot);
	if (s)
		s->oversize++;
	return 0;
}

static long copy_one(__u64 i, void *ctx)
{
	struct copies *c = ctx;
	if (i >= c->last || i >= MAX_OUTPUTS)
		return 1;
	__u32 slot = c->v->outs[i].slot;
	__u32 ifindex = ifindex_of_slot(slot);
	if (!ifindex || !fits(c->skb, ifindex, slot))
		return 0;
	if (bpf_clone_redirect(c->skb, ifindex, 0) == 0) {
		count_out(c->v, slot, c->skb->len, slot, 0, c->from_uplink);
	} else {
		struct stats *s = stats_of(slot);
		if (s)
			s->tx_error++;
	}
	return 0;
}

/* A frame the kernel would not let us edit: dropped, counted on its way in as "other". */
static __always_inline int edit_failed(const struct iface *in)
{
	struct stats *s = stats_of(in->slot);
	if (s)
		s->drops[0]++;
	return TC_ACT_SHOT;
}

/* Sends the frame where the verdict says: every output but the last a clone, the last the
 * frame itself. Only the last can be an uplink's from a port (the only output that pushes a
 * tag or rewrites the source), so the frame is edited once, after the copies left; from an
 * uplink every output pops the same tag, taken off first. */
static __always_inline int execute(struct __sk_buff *skb, struct verdict *v, const struct iface *in)
{
	__u32 n = v->count;
	if (n == 0 || n > MAX_OUTPUTS)
		return TC_ACT_SHOT;
	/* An edit the kernel refuses (no memory) drops the frame, counted as "other". */
	if (v->outs[0].edit == EDIT_POP && bpf_skb_vlan_pop(skb))
		return edit_failed(in);
	struct copies c = { .skb = skb, .v = v, .last = n - 1, .from_uplink = in->kind == KIND_UPLINK };
	if (n > 1)
		bpf_loop(MAX_OUTPUTS, copy_one, &c, 0);
	__u32 i = n - 1;
	if (i >= MAX_OUTPUTS)
		return TC_ACT_SHOT;
	struct out o = v->outs[i];
	struct slot_info *to = slot_of(o.slot);
	if (!to)
		return TC_ACT_SHOT;
	__u32 ifindex = to->ifindex;
	if (o.edit == EDIT_PUSH && bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q_), o.vid))
		return edit_failed(in);
	if (o.rewrite && bpf_skb_store_bytes(skb, 6, to->mac, 6, 0))
		return edit_failed(in);
	if (to->kind == KIND_UPLINK && in->kind == KIND_PORT)
		skb->priority = in->priority;
	if (!fits(skb, ifindex, o.slot))
		return TC_ACT_SHOT;
	if (to->kind == KIND_UPLINK) {
		count_out(v, o.slot, skb->len, in->slot, 1, 0);
		__u32 from = in->slot;
		__u64 t = bpf_ktime_get_ns();
		bpf_map_update_elem(&sent_out, &from, &t, BPF_ANY);
	}
	else
		count_out(v, o.slot, skb->len, o.slot, 0, in->kind == KIND_UPLINK);
	if (to->kind == KIND_PORT && (to->flags & PORT_PEER) && n == 1)
		return bpf_redirect_peer(ifindex, 0);
	return bpf_redirect(ifindex, 0);
}

SEC("classifier")
int teamster_switch(struct __sk_buff *skb)
{
	__u32 zero = 0, ifindex = skb->ifindex;
	struct verdict *v = bpf_map_lookup_elem(&verdict, &zero);
	struct config *c = bpf_map_lookup_elem(&config, &zero);
	struct marks *mk = bpf_map_lookup_elem(&marks, &zero);
	if (!v || !c || !mk)
		return TC_ACT_SHOT;
	struct turn t = { .skb = skb, .v = v, .marks = mk };
	v->seq++;
	v->drop = 0;
	v->punt = 0;
	v->learned = 0;
	v->count = 0;
	v->segs = skb->gso_segs > 1 ? skb->gso_segs : 1;
	v->hdr = 0;
	struct iface *in = bpf_map_lookup_elem(&ifaces, &ifindex);
	if (!in) {
		/* Attached, not in the tables yet (until the engine's next turn): the engine switches it.
		 * (Never to the host's stack.) */
		v->punt = PUNT_NOT_YET;
		if (skb->len <= 0xff00)
			hand_up(skb, PUNT_NOT_YET, skb->len);
		return TC_ACT_SHOT;
	}
	struct frame f = { .len = skb->len };
	if (skb->vlan_present) {
		f.shift = 4;
		f.meta_proto = bpf_ntohs(skb->vlan_proto);
		f.meta_tci = skb->vlan_tci;
		f.len += 4;
	}
	__u64 now = bpf_ktime_get_ns();
	int r = in->kind == KIND_PORT ? from_port(&t, skb, v, c, in, &f, now) : from_uplink(&t, skb, v, c, in, &f, now);
	/* A punted frame is the engine's to count, as it switches it. */
	struct stats *s = stats_of(in->slot);
	if (s && !v->punt) {
		s->rx_packets++;
		s->rx_bytes += wire_bytes(v, f.len);
	}
	if (r != TC_ACT_OK)
		return r;
	return execute(skb, v, in);
}
