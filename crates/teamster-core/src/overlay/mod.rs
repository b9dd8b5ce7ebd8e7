//! Overlay networks: a port group carried over VXLAN between tunnel end points (VTEPs).
//!
//! Model. An overlay port group is one VXLAN segment: its VNI, this host's VTEP address on the
//! underlay (the network the uplinks reach), and the remote VTEPs that carry the same segment.
//! The remote list is the segment's flood list: a broadcast, a multicast or a frame for a MAC
//! not yet learned goes to every remote VTEP, one unicast copy each (head-end replication, as
//! VMware's unicast mode and Linux's static FDB do), and a frame for a MAC learned behind a
//! remote VTEP goes to that VTEP alone. VXLAN frames are accepted only from listed VTEPs, to
//! this host's VTEP address, with a VNI of a local overlay group: nothing else on the underlay
//! can inject frames into a segment (RFC 7348 §7 leaves this to the implementation).
//!
//! The VTEP answers ARP for its own address on the underlay and finds each remote VTEP's MAC by
//! ARP ([`neighbors`]). VTEPs are IPv4 for now (IPv6 would need neighbour discovery).

pub mod neighbors;

pub use neighbors::{Heard, VtepNeighbors};

use crate::offload::Vni;
use core::net::Ipv4Addr;

/// The most remote VTEPs a segment lists (each flooded frame is sent once to each).
pub const MAX_REMOTES: usize = 256;

/// One overlay port group's segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlay {
    pub vni: Vni,
    pub local: Ipv4Addr,
    pub remotes: Vec<Ipv4Addr>,
}

impl Overlay {
    /// The segment, checked; each error names its key (`vni`, `local_vtep`, `remote_vteps[i]`).
    pub fn new(vni: u64, local: Ipv4Addr, remotes: Vec<Ipv4Addr>) -> Result<Overlay, String> {
        let vni = Vni::new(vni).map_err(|e| format!("vni: {e}"))?;
        if !usable(local) {
            return Err(format!("local_vtep = {local}: expected a unicast address"));
        }
        if remotes.is_empty() || remotes.len() > MAX_REMOTES {
            return Err(format!(
                "remote_vteps: {} listed, expected 1 to {MAX_REMOTES}",
                remotes.len()
            ));
        }
        for (i, r) in remotes.iter().enumerate() {
            if !usable(*r) {
                return Err(format!("remote_vteps[{i}] = {r}: expected a unicast address"));
            }
            if *r == local {
                return Err(format!("remote_vteps[{i}] = {r}: this host's own VTEP"));
            }
            if remotes[..i].contains(r) {
                return Err(format!("remote_vteps[{i}] = {r}: listed twice"));
            }
        }
        Ok(Overlay { vni, local, remotes })
    }

    /// Whether a VXLAN frame from `remote` to `local` belongs to this segment's tunnels.
    pub fn accepts(&self, remote: Ipv4Addr, local: Ipv4Addr) -> bool {
        local == self.local && self.remotes.contains(&remote)
    }
}

/// An address a VTEP can have: not unspecified, the limited broadcast, multicast or loopback.
fn usable(ip: Ipv4Addr) -> bool {
    !(ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn a_segment_is_checked_key_by_key() {
        let ok = Overlay::new(5001, ip("192.0.2.1"), vec![ip("192.0.2.2"), ip("192.0.2.3")]).unwrap();
        assert_eq!(ok.vni.get(), 5001);
        assert!(ok.accepts(ip("192.0.2.3"), ip("192.0.2.1")));
        assert!(!ok.accepts(ip("192.0.2.9"), ip("192.0.2.1")), "an unlisted VTEP");
        assert!(!ok.accepts(ip("192.0.2.2"), ip("192.0.2.7")), "not to this VTEP");
        let err = |vni, local: &str, remotes: &[&str]| {
            Overlay::new(vni, ip(local), remotes.iter().map(|r| ip(r)).collect()).unwrap_err()
        };
        assert_eq!(
            err(1 << 24, "192.0.2.1", &["192.0.2.2"]),
            "vni: VNI 16777216 is out of range 0-16777215"
        );
        assert!(err(1, "0.0.0.0", &["192.0.2.2"]).starts_with("local_vtep = 0.0.0.0"));
        assert!(err(1, "192.0.2.1", &[]).starts_with("remote_vteps: 0 listed"));
        assert!(err(1, "192.0.2.1", &["224.0.0.5"]).starts_with("remote_vteps[0] = 224.0.0.5"));
        assert!(err(1, "192.0.2.1", &["192.0.2.1"]).contains("own VTEP"));
        assert!(
            err(1, "192.0.2.1", &["192.0.2.2", "192.0.2.2"]).starts_with("remote_vteps[1] = 192.0.2.2: listed twice")
        );
        let many: Vec<Ipv4Addr> = (0..=MAX_REMOTES as u32)
            .map(|i| Ipv4Addr::from(0x0a00_0100 + i))
            .collect();
        assert!(Overlay::new(1, ip("192.0.2.1"), many)
            .unwrap_err()
            .contains("expected 1 to 256"));
    }
}
