//! The state as a store keeps it: one record per host, one per VM, and one for the cluster's
//! own (quotas, the recent migrations and faults, its identity and generation), each a JSON
//! value under its key (`host/NAME`, `vm/NAME`, `cluster`).
//!
//! Model. A change is written as its [`Delta`]: the records it made or changed, and the keys of
//! those it removed, so a store writes in proportion to the change, not to the cluster. The
//! delta is found by comparing each record of the new state with the old one's on what is
//! stored (a host's report time and measured rates move in memory with every report and are
//! written only with a record that changed for another reason: a controller that takes over
//! counts silence from its own start anyway). The cluster's record changes with every change
//! (its generation), so every delta holds it, written last: a store that must split a large
//! delta (etcd's limit on a transaction's operations) writes hosts, then VMs, then it.
//!
//! Names are checked port-name prefixes (no `/`), so a key names one record.

use super::state::{ClusterState, FaultRecord, HostRecord, MigrationRecord, VmRecord};
use imbl::ordmap::DiffItem;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use teamster_core::units::Bandwidth;

/// The key of the cluster's own record.
pub const CLUSTER: &str = "cluster";
const HOST: &str = "host/";
const VM: &str = "vm/";

/// What a change writes: records put (key, JSON), in the order to write them, and keys removed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delta {
    pub puts: Vec<(String, Vec<u8>)>,
    pub deletes: Vec<String>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.puts.is_empty() && self.deletes.is_empty()
    }

    /// What a store writes for `state`: this delta, or every record of `state` when the store
    /// is written anew (`whole`: it held the earlier layout).
    pub fn or_whole<'a>(&'a self, state: &ClusterState, whole: bool) -> Result<std::borrow::Cow<'a, Delta>, String> {
        match whole {
            true => state.records().map(std::borrow::Cow::Owned),
            false => Ok(std::borrow::Cow::Borrowed(self)),
        }
    }
}

/// The cluster's own record, as written (borrowed from the state).
#[derive(Serialize)]
struct ClusterOut<'a> {
    quotas: &'a BTreeMap<String, Bandwidth>,
    migrations: &'a VecDeque<MigrationRecord>,
    faults: &'a VecDeque<FaultRecord>,
    generation: u64,
    cluster_id: u64,
    adoption_until_s: u64,
    host_timeout_given_s: u64,
}

/// The cluster's own record, as read.
#[derive(Deserialize)]
struct ClusterIn {
    #[serde(default)]
    quotas: BTreeMap<String, Bandwidth>,
    #[serde(default)]
    migrations: VecDeque<MigrationRecord>,
    #[serde(default)]
    faults: VecDeque<FaultRecord>,
    generation: u64,
    cluster_id: u64,
    #[serde(default)]
    adoption_until_s: u64,
    #[serde(default)]
    host_timeout_given_s: u64,
}

fn json<T: Serialize>(key: &str, v: &T) -> Result<(String, Vec<u8>), String> {
    serde_json::to_vec(v)
        .map(|bytes| (key.to_string(), bytes))
        .map_err(|e| format!("record {key}: {e}"))
}

/// Whether two host records store the same (a report's time and rates aside).
fn same_host(a: &HostRecord, b: &HostRecord) -> bool {
    a.shape == b.shape
        && a.registered_s == b.registered_s
        && a.down_since_s == b.down_since_s
        && a.up_again_s == b.up_again_s
        && a.departing == b.departing
        && a.departing_macs == b.departing_macs
}

impl ClusterState {
    fn cluster_record(&self) -> Result<(String, Vec<u8>), String> {
        json(
            CLUSTER,
            &ClusterOut {
                quotas: &self.quotas,
                migrations: &self.migrations,
                faults: &self.faults,
                generation: self.generation,
                cluster_id: self.cluster_id,
                adoption_until_s: self.adoption_until_s,
                host_timeout_given_s: self.host_timeout_given_s,
            },
        )
    }

    /// Every record of the state (a store written anew).
    pub fn records(&self) -> Result<Delta, String> {
        self.delta(&ClusterState {
            generation: self.generation.wrapping_add(1),
            ..ClusterState::default()
        })
    }

    /// The records that differ from `was`'s, and the keys of those gone since: from the
    /// difference of the two states' maps, which skips what they share, so in proportion to
    /// what changed when `self` was made from a copy of `was`.
    pub fn delta(&self, was: &ClusterState) -> Result<Delta, String> {
        let mut d = Delta::default();
        let mut gone_vms = Vec::new();
        for item in was.hosts.diff(&self.hosts) {
            match item {
                DiffItem::Add(name, h) => d.puts.push(json(&format!("{HOST}{name}"), h)?),
                DiffItem::Update {
                    old: (_, w),
                    new: (name, h),
                } if !same_host(w, h) => d.puts.push(json(&format!("{HOST}{name}"), h)?),
                DiffItem::Remove(name, _) => d.deletes.push(format!("{HOST}{name}")),
                DiffItem::Update { .. } => {}
            }
        }
        for item in was.vms.diff(&self.vms) {
            match item {
                DiffItem::Add(name, v) | DiffItem::Update { new: (name, v), .. } => {
                    d.puts.push(json(&format!("{VM}{name}"), v)?)
                }
                DiffItem::Remove(name, _) => gone_vms.push(format!("{VM}{name}")),
            }
        }
        d.deletes.extend(gone_vms);
        let same_cluster = self.quotas == was.quotas
            && self.migrations == was.migrations
            && self.faults == was.faults
            && self.generation == was.generation
            && self.cluster_id == was.cluster_id
            && self.adoption_until_s == was.adoption_until_s
            && self.host_timeout_given_s == was.host_timeout_given_s;
        if !same_cluster {
            d.puts.push(self.cluster_record()?);
        }
        Ok(d)
    }

    /// The state the records `records` (key, JSON) hold; None if they hold no cluster record
    /// (a store never written). A record that does not read is an error naming its key.
    pub fn from_records<'a>(
        records: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Option<ClusterState>, String> {
        let mut s = ClusterState::default();
        let mut cluster = None;
        for (key, bytes) in records {
            let bad = |e: serde_json::Error| format!("record {key}: {e}");
            if key == CLUSTER {
                cluster = Some(serde_json::from_slice::<ClusterIn>(bytes).map_err(bad)?);
            } else if let Some(name) = key.strip_prefix(HOST) {
                s.hosts
                    .insert(name.to_string(), serde_json::from_slice(bytes).map_err(bad)?);
            } else if let Some(name) = key.strip_prefix(VM) {
                s.vms.insert(
                    name.to_string(),
                    serde_json::from_slice::<VmRecord>(bytes).map_err(bad)?,
                );
            } else {
                return Err(format!("record {key}: not a record of the cluster's state"));
            }
        }
        let Some(c) = cluster else {
            return Ok(None);
        };
        s.quotas = c.quotas;
        s.migrations = c.migrations;
        s.faults = c.faults;
        s.generation = c.generation;
        s.cluster_id = c.cluster_id;
        s.adoption_until_s = c.adoption_until_s;
        s.host_timeout_given_s = c.host_timeout_given_s;
        Ok(Some(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::state::{HostShape, PowerOn};

    fn state() -> ClusterState {
        let mut s = ClusterState::default();
        let shape: HostShape = serde_json::from_value(serde_json::json!({
            "uplinks": [{"name": "uplink1", "capacity": "10G"}],
            "traffic_classes": [{"class": "vm", "reservation": "5G"}],
        }))
        .unwrap();
        for h in ["h1", "h2"] {
            s.register(h, shape.clone(), 1).unwrap();
        }
        for v in ["a", "b", "c"] {
            let p: PowerOn = serde_json::from_value(serde_json::json!({"name": v, "reservation": "1G"})).unwrap();
            s.power_on(p, 2).unwrap();
        }
        s
    }

    fn keys(d: &Delta) -> Vec<&str> {
        d.puts.iter().map(|(k, _)| k.as_str()).collect()
    }

    /// The records of a state read back as the same state; no cluster record, no state.
    #[test]
    fn records_read_back_as_the_state() {
        let s = state();
        let all = s.records().unwrap();
        assert_eq!(all.puts.len(), 2 + 3 + 1);
        assert_eq!(all.puts.last().unwrap().0, CLUSTER, "the cluster's record last");
        let back = ClusterState::from_records(all.puts.iter().map(|(k, v)| (k.as_str(), v.as_slice()))).unwrap();
        assert_eq!(back, Some(s));
        let none = ClusterState::from_records([("host/h1", &b"{}"[..])]);
        assert!(none.is_err(), "a host record that does not read");
        assert_eq!(ClusterState::from_records([]).unwrap(), None);
        let e = ClusterState::from_records([("other", &b"{}"[..])]).unwrap_err();
        assert!(e.contains("record other"), "{e}");
    }

    /// A change writes what it changed: a power-on its VM and the cluster's record; a report
    /// that only moves times writes nothing; a power-off deletes its VM's key (and writes its
    /// host's, which holds the VM until it reports it detached).
    #[test]
    fn a_delta_holds_what_changed_and_no_more() {
        let was = state();
        let mut s = was.clone();
        let p: PowerOn = serde_json::from_value(serde_json::json!({"name": "d", "host": "h2"})).unwrap();
        s.power_on(p, 3).unwrap();
        assert_eq!(keys(&s.delta(&was).unwrap()), ["vm/d", CLUSTER]);
        let mut heard = s.clone();
        heard.heard("h1", &Default::default(), 9);
        assert!(
            heard.delta(&s).unwrap().is_empty(),
            "a report's time is not written alone"
        );
        let mut off = s.clone();
        off.power_off("a", 4).unwrap();
        let d = off.delta(&s).unwrap();
        // And its host's record: the VM stays in its departing set until it reports it gone.
        assert_eq!(
            (keys(&d), &d.deletes),
            (vec!["host/h1", CLUSTER], &vec!["vm/a".to_string()])
        );
        let mut gone = off.clone();
        let e = gone.clone().remove_host("h1", 5).unwrap_err();
        assert!(e.message().contains("is heard"), "{e:?}");
        gone.heard("h2", &Default::default(), 100);
        gone.remove_host("h1", 100).unwrap();
        let d = gone.delta(&off).unwrap();
        assert!(d.deletes.contains(&"host/h1".to_string()), "{d:?}");
        assert!(keys(&d).iter().all(|k| k.starts_with("vm/") || *k == CLUSTER), "{d:?}");
    }
}
