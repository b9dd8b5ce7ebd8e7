//! What the controller shows: the cluster (hosts with each uplink's reservation headroom, VMs,
//! faults, recent migrations) and a host's assignments.

use super::state::{ClusterState, FaultRecord, MigrationRecord, VmRecord};
use serde::Serialize;
use teamster_core::units::Bandwidth;

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClusterView {
    pub hosts: Vec<HostView>,
    pub vms: Vec<VmView>,
    /// Reservations that cannot be kept now: VMs with a reservation on a host that does not
    /// admit its VMs.
    pub violated: usize,
    pub faults: Vec<FaultRecord>,
    pub migrations: Vec<MigrationRecord>,
    /// Pools' quotas over the cluster.
    #[schema(value_type = Object)]
    pub quotas: std::collections::BTreeMap<String, Bandwidth>,
    pub generation: u64,
    pub cluster_id: u64,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct HostView {
    pub name: String,
    pub uplinks: Vec<UplinkHeadroom>,
    pub vms: Vec<String>,
    pub reported_s: u64,
    /// Why the host does not admit its VMs, if it does not.
    pub violation: Option<String>,
    /// Why the host takes no new VMs, if it does not (it stopped reporting).
    pub unavailable: Option<String>,
    /// Since when the host is down (its VMs restarted elsewhere where they fit).
    pub down_since_s: Option<u64>,
}

/// An uplink's reservations: each VM's must fit on every uplink its port may fail over to.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct UplinkHeadroom {
    pub name: String,
    #[schema(value_type = String)]
    pub capacity: Bandwidth,
    pub up: bool,
    /// The reservation cap's share of it (zero when down).
    #[schema(value_type = String)]
    pub reservable: Bandwidth,
    #[schema(value_type = String)]
    pub reserved: Bandwidth,
    #[schema(value_type = String)]
    pub headroom: Bandwidth,
    /// Its measured send rate at the host's last report, bits/s.
    pub load_bps: Option<f64>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct VmView {
    pub name: String,
    pub host: String,
    pub pool: String,
    #[schema(value_type = String)]
    pub reservation: Bandwidth,
    pub shares: String,
    #[schema(value_type = Option<String>)]
    pub limit: Option<Bandwidth>,
    /// The source of a migration not yet confirmed by the destination.
    pub moving_from: Option<String>,
}

/// A VM a host should have attached, with its controls.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Assignment {
    pub vm: String,
    pub mac: Option<String>,
    pub group: Option<String>,
    pub pool: String,
    #[schema(value_type = String)]
    pub reservation: Bandwidth,
    #[schema(value_type = String)]
    pub shares: teamster_core::ioc::Shares,
    #[schema(value_type = Option<String>)]
    pub limit: Option<Bandwidth>,
    /// Where it comes from, while a migration brings it here.
    pub moving_from: Option<String>,
}

fn vm_view(name: &str, v: &VmRecord) -> VmView {
    VmView {
        name: name.to_string(),
        host: v.host.clone(),
        pool: v.pool.clone(),
        reservation: v.reservation,
        shares: v.shares.to_string(),
        limit: v.limit,
        moving_from: v.moving_from.clone(),
    }
}

/// The cluster as `ctl cluster` and `GET /api/v1/cluster` show it at `now_s`.
pub fn cluster(s: &ClusterState, now_s: u64) -> ClusterView {
    let placement = s.cluster(now_s).ok();
    // Each host's VMs, in one pass over them.
    let mut on: std::collections::BTreeMap<&str, Vec<(&String, &VmRecord)>> = Default::default();
    for (n, v) in &s.vms {
        on.entry(v.host.as_str()).or_default().push((n, v));
    }
    let hosts = (s.hosts.iter())
        .map(|(name, h)| {
            let here = on.get(name.as_str()).map_or(&[][..], Vec::as_slice);
            let vms: Vec<String> = here.iter().map(|(n, _)| (*n).clone()).collect();
            let reserved = Bandwidth::from_bps(here.iter().map(|(_, v)| v.reservation.bps()).sum());
            let cap = (h.shape.reservation_cap).unwrap_or_else(|| teamster_core::ioc::ReservationCap::default().get());
            let uplinks = (h.shape.uplinks.iter())
                .map(|u| {
                    let reservable = if u.up {
                        Bandwidth::from_bps_f64(u.capacity.bps_f64() * cap)
                    } else {
                        Bandwidth::ZERO
                    };
                    UplinkHeadroom {
                        name: u.name.clone(),
                        capacity: u.capacity,
                        up: u.up,
                        reservable,
                        reserved,
                        headroom: Bandwidth::from_bps(reservable.bps().saturating_sub(reserved.bps())),
                        load_bps: h.loads.get(&u.name).copied(),
                    }
                })
                .collect();
            let violation = (placement.as_ref())
                .and_then(|c| c.standing(name))
                .and_then(Result::err);
            HostView {
                name: name.clone(),
                uplinks,
                vms,
                reported_s: h.reported_s,
                violation,
                unavailable: s.silent(name, now_s).or_else(|| s.held_down(name, now_s)),
                down_since_s: h.down_since_s,
            }
        })
        .collect();
    ClusterView {
        hosts,
        vms: s.vms.iter().map(|(n, v)| vm_view(n, v)).collect(),
        violated: placement.map_or(0, |c| c.violated_reservations()),
        faults: s.faults.iter().cloned().collect(),
        migrations: s.migrations.iter().cloned().collect(),
        quotas: s.quotas.clone(),
        generation: s.generation,
        cluster_id: s.cluster_id,
    }
}

/// Each host's VMs, by name, kept in step with the state: a host's report is answered in
/// proportion to that host's VMs, not to the cluster's, and the index follows a change by the
/// difference of the VMs' maps (what changed, not every VM).
#[derive(Debug, Default)]
pub struct AssignmentIndex {
    /// The VMs the index was last brought in step with.
    vms: imbl::OrdMap<String, VmRecord>,
    by_host: std::collections::HashMap<String, std::collections::BTreeSet<String>>,
}

impl AssignmentIndex {
    /// Host `host`'s assignments in state `s`: what it should have attached.
    pub fn assignments(&mut self, s: &ClusterState, host: &str) -> Vec<Assignment> {
        use imbl::ordmap::DiffItem;
        for item in self.vms.diff(&s.vms) {
            let (gone, new) = match item {
                DiffItem::Add(name, v) => (None, Some((name, v))),
                DiffItem::Update { old, new } => (Some(old), Some(new)),
                DiffItem::Remove(name, v) => (Some((name, v)), None),
            };
            if let Some((name, v)) = gone {
                if let Some(on) = self.by_host.get_mut(&v.host) {
                    on.remove(name);
                    if on.is_empty() {
                        self.by_host.remove(&v.host);
                    }
                }
            }
            if let Some((name, v)) = new {
                self.by_host.entry(v.host.clone()).or_default().insert(name.clone());
            }
        }
        self.vms = s.vms.clone();
        let names = self.by_host.get(host);
        (names.into_iter().flatten())
            .filter_map(|n| Some((n, s.vms.get(n)?)))
            .filter(|(n, v)| v.host == host && s.may_attach(n, v))
            .map(|(name, v)| assignment(name, v))
            .collect()
    }
}

fn assignment(name: &str, v: &VmRecord) -> Assignment {
    Assignment {
        vm: name.to_string(),
        mac: v.mac.clone(),
        group: v.group.clone(),
        pool: v.pool.clone(),
        reservation: v.reservation,
        shares: v.shares,
        limit: v.limit,
        moving_from: v.moving_from.clone(),
    }
}
