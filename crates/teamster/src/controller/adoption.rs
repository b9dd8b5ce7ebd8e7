//! Adoption: a controller whose state was lost (made anew, so its cluster identity changed)
//! takes the VMs that hosts run as they report them, instead of having the hosts detach them.
//!
//! Model. A host's agent that finds the controller's cluster identity changed sends the VMs it
//! has attached, each with what its port was given (MAC, group, pool, controls), to
//! `POST /api/v1/hosts/{name}/adopt`. Each VM the controller does not know is recorded as
//! running on that host, as a fact (without admission: it runs there already; a host it
//! overloads is mended by migrations, or is a fault). A VM the controller knows already (on
//! this or another host) is left as the controller has it, and one whose name or MAC is bad
//! or taken, or whose pool the host does not have, is refused; each refusal is named in the
//! answer. Not checked yet: the pools' cluster-wide quotas (an adopted VM is a fact).
//!
//! Adoption records VMs without admission, so it is open only while a state is new: for
//! [`ADOPTION_WINDOW_S`] after the controller made it (its hosts find the new identity on
//! their next report, within seconds). Afterwards a host offering VMs is refused (409), and
//! those VMs are detached as any the controller does not assign: a host, even one holding a
//! valid certificate, cannot record VMs of its choosing in a cluster that is running. A host
//! may adopt for itself only: it names itself in the path, and on the TLS listener its
//! certificate must prove that name ([`super::access`]).

use super::state::{ClusterState, Outcome, Refusal, VmRecord, MAX_VMS};
use super::view::Assignment;
use serde::Deserialize;
use teamster_core::host;
use teamster_core::wire::MacAddr;

/// How long adoption stays open after a state is made anew, in seconds.
pub const ADOPTION_WINDOW_S: u64 = 600;

/// What a host asks to be adopted.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Adopt {
    /// The cluster identity the host was answered with (the new one): an adoption meant for
    /// another state is refused.
    pub cluster_id: u64,
    pub vms: Vec<Assignment>,
}

impl ClusterState {
    /// Adopts the VMs of `req` on host `host` (see the module documentation); the outcome's
    /// events name each VM adopted or refused.
    pub fn adopt(&mut self, host: &str, req: &Adopt, now_s: u64) -> Result<Outcome, Refusal> {
        if !self.hosts.contains_key(host) {
            return Err(Refusal::Unknown(format!("no host {host}: register it first")));
        }
        if now_s > self.adoption_until_s {
            return Err(Refusal::Conflict(format!(
                "adoption is closed: it is open for {ADOPTION_WINDOW_S} s after a controller makes its state anew"
            )));
        }
        if req.cluster_id != self.cluster_id {
            return Err(Refusal::Conflict(format!(
                "cluster_id {:x} is not this cluster's ({:x})",
                req.cluster_id, self.cluster_id
            )));
        }
        if req.vms.len() > MAX_VMS {
            return Err(Refusal::Bad(format!("vms: more than {MAX_VMS}")));
        }
        let mut next = self.clone();
        let mut out = Outcome::default();
        let shape = &self.hosts[host].shape;
        let has_pool = |p: &str| {
            p == "vm" || shape.pools.iter().any(|x| x.name == p) || shape.traffic_classes.iter().any(|c| c.class == p)
        };
        for a in &req.vms {
            let checked = next.adoptable(a).and_then(|()| match has_pool(&a.pool) {
                true => Ok(()),
                false => Err(format!("host {host} has no class or pool `{}`", a.pool)),
            });
            match checked {
                Ok(()) if next.vms.len() < MAX_VMS => {
                    let record = VmRecord {
                        mac: a.mac.clone(),
                        group: a.group.clone(),
                        pool: a.pool.clone(),
                        reservation: a.reservation,
                        shares: a.shares,
                        limit: a.limit,
                        host: host.to_string(),
                        moving_from: None,
                    };
                    next.vms.insert(a.vm.clone(), record);
                    out.events.push(format!("{host}: adopted VM {}", a.vm));
                }
                Ok(()) => out
                    .events
                    .push(format!("{host}: VM {} not adopted: the cluster is full", a.vm)),
                Err(why) => out.events.push(format!("{host}: VM {} not adopted: {why}", a.vm)),
            }
        }
        if next.vms.len() == self.vms.len() {
            // Nothing adopted: nothing to save, but the refusals are still told.
            return Ok(Outcome { unchanged: true, ..out });
        }
        next.commit(now_s, out, self, true)
    }

    /// Why VM `a` cannot be adopted, if it cannot: a bad name or MAC, a controller that knows
    /// it already, or its MAC another VM's.
    fn adoptable(&mut self, a: &Assignment) -> Result<(), String> {
        host::check_name("name", &a.vm)?;
        if let Some(v) = self.vms.get(&a.vm) {
            return Err(format!("the controller has it on {}", v.host));
        }
        if let Some(g) = &a.group {
            host::check_name("group", g)?;
        }
        host::check_name("pool", &a.pool)?;
        let spec = teamster_core::ioc::NodeSpec {
            name: a.vm.clone(),
            reservation: a.reservation,
            shares: a.shares,
            limit: a.limit,
        };
        teamster_core::ioc::admission::check_controls("vm", &spec)?;
        if let Some(m) = &a.mac {
            let mac: MacAddr = m.parse().map_err(|e| format!("mac: {e}"))?;
            if mac.is_multicast() || mac == MacAddr([0; 6]) {
                return Err(format!("mac: {mac} is not a unicast address"));
            }
            if let Some(other) = self.mac_owner(mac)? {
                return Err(format!("mac: {mac} is VM {other}'s"));
            }
        }
        Ok(())
    }
}
