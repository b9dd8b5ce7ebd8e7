/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tables the engine writes and the fast path reads: one layout, shared by the BPF program
 * (switch.bpf.c) and user space (src/tables.rs mirrors every struct here with #[repr(C)], and a
 * unit test checks the sizes). Every field is naturally aligned and padding is explicit, so the
 * two sides cannot disagree on an offset.
 *
 * Names: a *slot* is the small index the engine gives every interface the switch owns (a VM
 * port or an uplink); the MAC table, the counters and the flood lists refer to interfaces by
 * slot, and only `ifaces` and `slots` know their ifindex. A *domain* is a broadcast domain:
 * a port group's VLAN, or DOMAIN_UNTAGGED.
 */
#ifndef TEAMSTER_SWITCH_H
#define TEAMSTER_SWITCH_H

#define MAX_SLOTS 1024        /* interfaces (ports and uplinks) one switch may own */
#define MAX_DOMAIN_PORTS 256  /* ports in one broadcast domain */
#define MAX_GROUPS 256        /* port groups */
#define MAX_GROUP_UPLINKS 8   /* uplinks in a group's active (and in its standby) list */
#define MAX_OUTPUTS (MAX_DOMAIN_PORTS * 2 + 2) /* a flood, the promiscuous copies, an uplink */
#define DOMAIN_UNTAGGED 0xffff
#define DOMAIN_INDEXES 4097   /* `domains`: VLANs 0-4095, then DOMAIN_UNTAGGED */
#define NO_SLOT 0xffffffffu

/* iface.kind */
#define KIND_PORT 1
#define KIND_UPLINK 2

/* iface.flags for a port */
#define PORT_PEER (1u << 0)         /* a veth whose peer is in another namespace: redirect_peer */
#define PORT_FORGED_OK (1u << 1)    /* forged transmits accepted */
#define PORT_MAC_CHANGES_OK (1u << 2) /* MAC changes accepted (also: learns, takes unknown unicast) */
#define PORT_PROMISCUOUS (1u << 3)  /* gets a copy of everything in its domain */
#define PORT_PUNT (1u << 4)         /* its claim on its MAC is not settled: user space decides */
#define PORT_REWRITES (1u << 5)     /* its group spreads ports over members with their own MACs */
#define PORT_CHANGED (1u << 6)      /* iface.changed holds the MAC its guest changed to */
#define PORT_SETTLED (1u << 7)      /* attached for a reflection window: its MAC is its own here */
#define PORT_PROMISCUOUS_PEERS (1u << 8) /* its domain has promiscuous ports: read it for every frame */
/* iface.flags for an uplink */
#define UPLINK_HAS_MAC (1u << 0)    /* iface.mac is the uplink's own MAC */
#define UPLINK_DISCARDS (1u << 1)   /* an LACP member outside the bundle: takes nothing */

/* group.policy: how a group's ports choose an uplink per frame */
#define POLICY_PORT 0     /* the port's current uplink (port ID, MAC hash, Hyper-V port, LBT, failover) */
#define POLICY_IP_L3 1    /* IP hash over the addresses */
#define POLICY_IP_L3L4 2  /* IP hash over addresses and ports */
#define POLICY_ADDRESS 3  /* Address Hash over group.fields (Windows' address hash) */
#define POLICY_FLOWLET 4  /* Dynamic's flowlet buckets (dynamic, lbt-dynamic): `flowlets` */

/* group.fields: core::teaming::HashFields */
#define FIELDS_TRANSPORT_PORTS 0
#define FIELDS_IP_ADDRESSES 1
#define FIELDS_MAC_ADDRESSES 2

/* A flowlet group's buckets (core::teaming::flowlet::BUCKETS): `flowlets` and `flowlet_targets`
 * hold MAX_GROUPS of them, the group's at group * FLOWLET_BUCKETS. */
#define FLOWLET_BUCKETS 256
/* `flowlet_targets`: 0, a bucket the engine has not placed; FLOWLET_OPEN, placed with no
 * target while an active member is live (core places its next flowlet on the least loaded
 * one): its burst goes on, its next flowlet goes to the engine; FLOWLET_HASHED, placed with no
 * target the program can use (no active member is live, or the target's uplink has no
 * interface here): its flowlets take active[bucket mod n] or its fallback, as core's do; else
 * the target's slot + 1. */
#define FLOWLET_HASHED 0xffffffffu
#define FLOWLET_OPEN 0xfffffffeu

/* out.edit */
#define EDIT_KEEP 0
#define EDIT_PUSH 1
#define EDIT_POP 2

/* Drop reasons: core::switch::DropReason::ALL's order, from 1 (0: not dropped). */
#define DROP_MALFORMED 1
#define DROP_REFLECTION 2
#define DROP_NOT_RECEIVE_UPLINK 3
#define DROP_NO_UPLINK 4
#define DROP_TAGGED_ON_ACCESS_PORT 5
#define DROP_UNKNOWN_VLAN 6
#define DROP_UNKNOWN_PORT 7
#define DROP_HAIRPIN 8
#define DROP_FORGED_TRANSMIT 9
#define DROP_SLOW_PROTOCOL 10
#define DROP_LINK_CONTROL 13
#define DROP_REASONS 16

/* Why a frame went to user space (0: it did not). */
#define PUNT_PORT_UNSETTLED 1   /* PORT_PUNT */
#define PUNT_MAC_CHANGE 2       /* a guest changes (or returns to) its MAC: the engine's state */
#define PUNT_SLOW_PROTOCOL 3    /* an LACPDU (or marker) for the team */
#define PUNT_LINK_LOCAL 4       /* LLDP & co. from an uplink, with a group that asks for it */
#define PUNT_CLAIM 5            /* an uplink frame from a port's configured MAC (claims) */
#define PUNT_VXLAN 6            /* UDP to 4789: the engine parses the inner frame */
#define PUNT_PARSER 7           /* a frame beyond what this parser decides exactly */
#define PUNT_NOT_YET 8          /* from an interface attached but not in the tables yet */
#define PUNT_FLOWLET 10         /* the first frame of a flowlet bucket without a target: the
                                 * engine places it (on its least loaded member) */
/* Not a punt: a copy of an ARP frame from an uplink whose sender gave a new address (the frame
 * itself is switched here), for the engine's claims (core ArpSenders). */
#define NOTE_ARP 9
#define NOTE_BYTES 64             /* what of the frame a note carries */

struct iface {                /* key: ifindex (u32) */
	__u32 slot;
	__u32 id;                 /* PortId or UplinkId */
	__u8 kind;
	__u8 policy;              /* port: its group's policy (POLICY_), so a port's own uplink needs no group */
	__u16 flags;
	__u16 domain;             /* port: its broadcast domain */
	__u8 mac[6];              /* port: its configured MAC; uplink: its own (UPLINK_HAS_MAC) */
	__u8 changed[6];          /* port: the MAC its guest changed to (PORT_CHANGED) */
	__u16 pad2;
	__u32 group;              /* port: its group (index into `groups`) */
	__u32 uplink;             /* port: the slot of its current uplink, or NO_SLOT */
	__u32 priority;           /* port: skb->priority on the way out of an uplink (HTB class) */
	__u32 pad1;
};

/* What a frame needs of an interface it goes to or names by slot: a copy of its iface's kind,
 * flags and MAC, so one array read does where a slot, then an ifindex, then a hash would. Cold,
 * each map page a frame touches costs about a microsecond (benches/cold_run.rs). */
struct slot_info {            /* `slots`, by slot */
	__u32 ifindex;            /* 0: free */
	__u8 kind;
	__u8 pad0;
	__u16 flags;
	__u8 mac[6];
	__u16 pad1;
};

struct member {               /* one port of a domain's flood list */
	__u32 ifindex;
	__u32 slot;
	__u64 rx_uplinks;         /* bit u: takes flooded frames arriving on uplink id u */
	__u16 flags;              /* the port's iface.flags */
	__u16 pad0;
	__u32 pad1;
};

struct domain {               /* key: domain (u32) */
	__u32 count;
	__u32 promiscuous;        /* members with PORT_PROMISCUOUS: none, no walk for them */
	struct member members[MAX_DOMAIN_PORTS];
};

struct group_uplink {
	__u64 salt;               /* rendezvous salt (core::teaming::hash::uplink_salt) */
	__u32 slot;
	__u32 id;                 /* UplinkId: rendezvous ties go to the lower */
	__u8 up;
	__u8 pad[7];
};

struct group {                /* `groups`, by GroupId */
	__u8 policy;
	__u8 active_count;
	__u8 standby_count;
	__u8 fields;              /* POLICY_ADDRESS, POLICY_FLOWLET: what is hashed (FIELDS_) */
	__u8 pad[4];
	struct group_uplink active[MAX_GROUP_UPLINKS];
	struct group_uplink standby[MAX_GROUP_UPLINKS];
	__u64 gap_ns;             /* POLICY_FLOWLET: the idle gap that starts a new flowlet */
};

/* A flowlet bucket as the program keeps it (`flowlets`; core::teaming::flowlet's Bucket but its
 * target, which the engine keeps and writes in `flowlet_targets`). The engine writes a bucket
 * here only while it is unplaced (0 in `flowlet_targets`), when the program leaves it alone,
 * and reads them all back. */
struct flowlet {
	__u64 last_seen;          /* bpf_ktime_get_ns() of its last frame; 0: never */
	__u64 flowlet_at;         /* when its last flowlet started */
	__u64 bytes;              /* sent through it, ever (the engine takes differences) */
	__u32 current;            /* the slot its frames take until the next flowlet, or NO_SLOT */
	__u32 pad;
};

struct config {               /* `config`, key 0 */
	__u64 ageing_ns;
	__u64 limit_total;
	__u64 limit_per_port;
	__u64 reflection_ns;      /* how long a port's frame takes to come back (core REFLECTION_WINDOW) */
	__u32 link_local;         /* some group asks for LLDP & co.: punt them from uplinks */
	__u32 punt_rate;          /* frames and notes each interface may hand up per second (0: no
	                           * bound), PUNT_BURST at once */
	__u64 engine_ns;          /* bpf_ktime_get_ns() when the engine last wrote the tables */
};

/* The engine is taken as gone (killed, or not yet started again) when it has not written the
 * tables for this long: what the program would hand it, it then decides alone where it can. */
#define ENGINE_GONE_NS 1000000000ULL

struct punt_bucket {          /* `punt_budget`, by slot: what the interface may still hand up */
	__u64 last_ns;
	__u64 credit;             /* in thousandths of a frame */
};

/* Frames an interface may hand up at once, past its rate. */
#define PUNT_BURST 256

struct fdb_key {
	__u16 domain;
	__u8 mac[6];
};

#define FDB_STATIC 1
struct fdb_entry {
	__u64 seen;               /* bpf_ktime_get_ns() when last heard; 0 for a static entry */
	__u32 slot;
	__u32 flags;
};

struct out {
	__u32 slot;
	__u8 edit;
	__u8 rewrite;             /* 1: the source MAC becomes the uplink's own */
	__u16 vid;                /* EDIT_PUSH's VLAN */
};

/* The decision on the last frame, per CPU: the plan the program executed, and what the
 * differential test compares with the engine's. */
struct verdict {
	__u64 seq;
	__u16 drop;
	__u8 punt;
	__u8 learned;             /* 0 known, 1 added, 2 refused */
	__u32 count;
	/* A super-frame (GSO) is counted as the segments it becomes on a wire: `segs` of them, each
	 * repeating the `hdr` bytes of headers. */
	__u32 segs;
	__u32 hdr;
	struct out outs[MAX_OUTPUTS];
};

struct stats {                /* per CPU, by slot */
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 tx_packets;
	__u64 tx_bytes;
	__u64 mac_limit;
	__u64 punted;
	__u64 to_uplinks;         /* port: bytes it sent out of uplinks (the team's meters) */
	__u64 from_uplinks;       /* port: bytes it received from uplinks */
	__u64 oversize;           /* to this interface: longer than its MTU (and not a super-frame) */
	__u64 tx_error;           /* to this interface: the kernel refused a copy */
	__u64 punt_limited;       /* from this interface: past its punt_rate, dropped (or a note
	                           * not sent) */
	__u64 drops[DROP_REASONS]; /* by DROP_ reason; [0]: other (an edit the kernel refused, a
	                            * frame too long to hand to user space): shown as tx_error */
};

struct punt_meta {            /* before each punted frame in the perf buffer */
	__u32 ifindex;
	__u32 len;                /* the frame's length (the sample carries it whole) */
	__u16 reason;
	__u16 vlan_tci;           /* the tag the kernel had taken off, if vlan_present */
	__u16 vlan_proto;
	__u16 vlan_present;
};

#endif
