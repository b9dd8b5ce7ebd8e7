//! What the running switch shows of itself: a [`Snapshot`] the poll loop publishes a few times a
//! second, which the API, the metrics, the dashboard and the status file all read. It is a copy,
//! so readers never hold up the data plane. Rates are means over the Load-Based Teaming window;
//! counters count from start.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

pub use super::config::PortOrigin;

/// The whole switch at one instant.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct Snapshot {
    /// Seconds since the daemon started.
    pub t_s: f64,
    /// The wall-clock time of `t_s`, in milliseconds since the Unix epoch (0 in a snapshot made
    /// before the switch ran), so that times since start can be shown as times of day.
    #[serde(default)]
    pub unix_ms: u64,
    pub uplinks: Vec<UplinkView>,
    pub ports: Vec<PortView>,
    pub port_groups: Vec<GroupView>,
    pub lbt: LbtView,
    /// The NetIOC tree, parents before children.
    pub netioc: Vec<NodeView>,
    /// The most recent events, oldest first.
    pub events: Vec<EventView>,
    /// Times an uplink in use went out of use (carrier lost or set administratively down).
    pub failovers: u64,
    /// The LACP members of the port groups whose mode is `lacp`.
    #[serde(default)]
    pub lacp: Vec<super::lacp_view::LacpMemberView>,
    /// This host's VTEP, if a port group is an overlay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtep: Option<VtepView>,
    /// The uplinks' receive queues.
    #[serde(default)]
    pub rx: super::rx_view::RxView,
    /// Which data plane switches the frames: `kernel` (the tcx fast path) or `userspace`.
    #[serde(default)]
    pub data_plane: String,
}

/// This host's VTEP: its address and the remote VTEPs the overlays list.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct VtepView {
    pub address: String,
    pub remotes: Vec<RemoteVtepView>,
}

/// A remote VTEP and the MAC ARP found for it (null until it answers or sends).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RemoteVtepView {
    pub address: String,
    pub mac: Option<String>,
}

/// Packets, bytes and drops (by reason) seen by the switch on one port or uplink.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CountersView {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Frames its device took (segments, not super-frames; nothing later dropped).
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames dropped, by reason (`malformed`, `reflection`, `queue_full`, ...), each on one
    /// interface: where it arrived for receive-side reasons, the sending port for `queue_full`,
    /// the interface that could not send it for `oversize`, `tx_error` and `detached`.
    pub drops: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct UplinkView {
    pub name: String,
    pub interface: String,
    /// Whether its interface exists and is attached (false after it disappeared; it is
    /// re-attached when an interface of that name returns).
    pub attached: bool,
    /// How frames move while attached: `af_packet`, or `af_xdp` with its XDP mode (native or
    /// generic) and copy or zero-copy mode; null while detached.
    pub backend: Option<String>,
    /// Carrier as the kernel reports it: `up` or `down`.
    pub link: String,
    /// Administrative state set by the operator: `up` or `down`.
    pub admin: String,
    /// Whether the team uses it: carrier up and administratively up.
    pub in_use: bool,
    pub capacity_bps: u64,
    /// Mean send utilisation over the LBT window, 0-1: what the ports offered to this uplink
    /// (before NetIOC queueing), so an oversubscribed uplink shows above 1.
    pub tx_utilisation: f64,
    /// Mean receive utilisation over the LBT window, 0-1.
    pub rx_utilisation: f64,
    /// Frames waiting in the uplink's NetIOC scheduler.
    pub queue_depth: u64,
    /// Their bytes on the wire.
    pub queue_bytes: u64,
    /// What the uplink's queue holds before it refuses frames of ports over their fair part:
    /// 5 ms at its capacity (at least 16 full-size frames); see `teamster_core::ioc::queue_limit`.
    pub queue_budget_bytes: u64,
    /// Frames queued with an ECN Congestion Experienced mark set by the switch (its queue was
    /// over its budget), since start.
    pub ecn_marked: u64,
    pub counters: CountersView,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct PortView {
    pub name: String,
    pub interface: String,
    /// Whether its interface exists and is attached: false while it is missing (a stopped VM's
    /// tap), when frames for it are dropped as `detached`; it attaches when the interface
    /// appears.
    pub attached: bool,
    /// How frames move while attached: `af_packet`, or `af_xdp` with its XDP mode (native or
    /// generic) and copy or zero-copy mode; null while detached.
    pub backend: Option<String>,
    /// The data-plane thread receiving and sending its frames while attached: 0 is the
    /// switching worker, 1 and up the port workers (`workers` in `switch.toml`).
    pub worker: Option<usize>,
    pub mac: String,
    /// Where it stands with its MAC: `owned` (a MAC-table entry), `waiting` (a host outside
    /// uses the address: the port's frames from it are dropped as `mac_conflict`) or
    /// `detached` (its interface is absent: it owns no MAC).
    #[serde(default)]
    pub mac_claim: String,
    pub group: String,
    /// Where it came from: `configured` (switch.toml), `api` (added through the API since the
    /// start), `matched` (its interface matched a port rule; not saved), `assigned` (the
    /// cluster controller's) or `libvirt` (the libvirt hook's, for domain `owner`).
    #[serde(default)]
    pub origin: PortOrigin,
    /// The libvirt domain whose port it is (origin `libvirt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The uplink carrying its traffic now.
    pub uplink: Option<String>,
    /// Where it returns on failback.
    pub home: Option<String>,
    pub reservation_bps: u64,
    pub shares: u32,
    pub limit_bps: Option<u64>,
    /// What NetIOC gives it at the measured demands, in bits/s.
    pub allocation_bps: f64,
    /// Mean offered send rate over the LBT window, bits/s.
    pub tx_bps: f64,
    /// Mean receive rate over the LBT window, bits/s.
    pub rx_bps: f64,
    /// Send and receive rates over the LBT window's last complete bucket (a second at the
    /// default window), bits/s: what the history keeps for a what-if.
    #[serde(default)]
    pub tx_last_bps: f64,
    #[serde(default)]
    pub rx_last_bps: f64,
    /// Frames from this port marked ECN Congestion Experienced in the switch's receive queue
    /// (held too long while the switch was short of CPU), since start.
    #[serde(default)]
    pub ecn_marked: u64,
    /// Frames its NetIOC queues took, nanoseconds they held its frames, wire bytes they turned
    /// away, and frames they marked Congestion Experienced, since it was added (the user-space
    /// data plane counts these; on the kernel path they stay 0).
    #[serde(default)]
    pub queue_taken: u64,
    #[serde(default)]
    pub queue_backlog_ns: u64,
    #[serde(default)]
    pub queue_dropped_bytes: u64,
    #[serde(default)]
    pub queue_marked: u64,
    /// Frames it offered to its NetIOC queues that carried TCP, since it was added.
    #[serde(default)]
    pub queue_tcp: u64,
    pub counters: CountersView,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct GroupView {
    pub name: String,
    pub policy: String,
    pub active: Vec<String>,
    pub standby: Vec<String>,
    pub failback: bool,
    pub vlan: Option<u16>,
    /// The uplink that receives the group's broadcast and multicast (switch independent; in a
    /// static or LACP bundle every live member does).
    pub receive_uplink: Option<String>,
    /// switch-independent, static or lacp.
    #[serde(default)]
    pub mode: String,
    /// What address-hash and the flowlet policies hash.
    #[serde(default)]
    pub hash_fields: String,
    /// The flowlet gap in µs (dynamic, lbt-dynamic).
    #[serde(default)]
    pub flowlet_gap_us: u64,
    /// The flowlet rebalancing interval in ms (dynamic, lbt-dynamic).
    #[serde(default)]
    pub rebalance_ms: u64,
    /// Receive queues (VMQs) the team offers the group: the sum of its active members' where
    /// each VM receives on one known member, else the smallest (None if a member's count is
    /// unknown).
    #[serde(default)]
    pub vmq_queues: Option<u32>,
    /// Flowlet policies: per member, the flowlet buckets that sent within the last interval
    /// and their load.
    #[serde(default)]
    pub flowlets: Vec<FlowletShareView>,
    /// Flowlet policies: flowlets that started on another member than their last one.
    #[serde(default)]
    pub flowlet_moves: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct FlowletShareView {
    pub uplink: String,
    /// Flowlet buckets (each one or more flows) sending on it.
    pub buckets: u32,
    /// Their recent send rate, decayed, in bits/s.
    pub bps: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct LbtView {
    /// Utilisation (0-1) above which a port is moved.
    pub threshold: f64,
    pub window_s: f64,
    /// At most one move per this many seconds.
    pub period_s: f64,
    pub last_move_s: Option<f64>,
    /// The earliest the next move may happen.
    pub next_move_allowed_s: Option<f64>,
    /// The most recent port moves (any reason), oldest first.
    pub moves: Vec<MoveView>,
    /// Port moves since start by reason (its first word: `load-based`, `failover`, ...),
    /// counted whatever `moves` no longer shows.
    #[serde(default)]
    pub moves_by_reason: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct MoveView {
    pub t_s: f64,
    pub port: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// `link down`, `link up`, `failback`, `policy change` or `load-based: ...`.
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct NodeView {
    pub name: String,
    pub parent: Option<String>,
    /// `root`, `class`, `pool` or `port`.
    pub kind: String,
    pub reservation_bps: u64,
    pub shares: u32,
    pub limit_bps: Option<u64>,
    /// What NetIOC gives it at the measured demands, summed over uplinks, bits/s.
    pub allocation_bps: f64,
    /// Offered send rate of the ports under it, bits/s.
    pub demand_bps: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct EventView {
    /// Increases by one per event since start.
    pub seq: u64,
    pub t_s: f64,
    /// `link`, `attach`, `move`, `config` or `start`.
    pub kind: String,
    pub message: String,
}

impl From<&teamster_dp::datapath::Event> for EventView {
    fn from(e: &teamster_dp::datapath::Event) -> EventView {
        EventView {
            seq: e.seq,
            t_s: e.at.as_secs_f64(),
            kind: e.kind.to_string(),
            message: e.message.clone(),
        }
    }
}
