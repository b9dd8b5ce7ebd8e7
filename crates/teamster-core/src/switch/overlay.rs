//! Overlay port groups in the switch: the VTEP's side of switching (see [`crate::overlay`] for
//! the model).
//!
//! An overlay segment is a flooding domain of its own, numbered past the VLANs in the MAC
//! table (segment `i` is domain 4096 + `i`), so its ports never meet a VLAN's. From an overlay
//! port, a frame for a local port of the segment is delivered as in a VLAN; one for a MAC
//! learned behind a remote VTEP is wrapped for that VTEP; a broadcast, multicast or unknown
//! unicast goes to the segment's other local ports that take it and, wrapped, to every remote
//! VTEP of the segment. Every wrapped copy of a frame leaves by the one uplink the team picks
//! for the port and flow, from that uplink's MAC. From an uplink, the VTEP takes ARP for its
//! address and VXLAN frames to its address on port 4789; it opens an accepted frame (from a
//! listed VTEP, with a segment's VNI, sent from the MAC ARP found that VTEP at), learns the
//! inner source behind the sending VTEP, and switches the inner frame within the segment, never
//! back into a tunnel (split horizon: every VTEP floods to every other itself). The underlay is
//! untagged.
//!
//! Who may speak for a remote VTEP. The switch cannot know which of its VLANs the physical
//! network joins to the underlay (a VLAN group on another uplink may be the underlay's VLAN on
//! that uplink's switch port), so any VM may be on the underlay's L2. A frame to the VTEP's
//! address (ARP or VXLAN) from the MAC of a local port, in any VLAN, is a VM speaking for a
//! remote: dropped (`tunnel_spoof`), never learned. A VXLAN frame from a listed remote's
//! address is taken only from the MAC ARP found that remote at, and never moves it (see
//! [`crate::overlay::neighbors`]): from another MAC it is dropped (`tunnel_spoof`), before the
//! remote is found it waits for ARP (`vtep_unresolved`). A VM whose group accepts forged
//! transmits can still send from a MAC the switch does not know as local: such a group on the
//! underlay's L2 is on the underlay, as any host there is (RFC 7348 §7).

use super::{DropReason, Egress, Forward, Ingress, Location, Switch, TagEdit, Tunnel};
use crate::offload::decapsulate;
use crate::overlay::{Heard, Overlay, VtepNeighbors};
use crate::teaming::{PortId, UplinkId};
use crate::wire::{FlowKey, MacAddr, VXLAN_PORT};
use crate::Instant;
use core::net::{IpAddr, Ipv4Addr};

/// The first MAC-table domain past the VLANs.
const FIRST_SEGMENT: u16 = 4096;
/// The most overlay segments a switch holds ([`crate::host`] refuses more overlay groups).
pub const MAX_SEGMENTS: usize = 1024;

/// The MAC-table domain of segment `i`.
pub(super) fn domain(i: usize) -> Option<u16> {
    Some(FIRST_SEGMENT + i as u16)
}

/// The segment a MAC-table domain is, if it is one.
pub(super) fn segment_of(domain: Option<u16>) -> Option<usize> {
    domain
        .filter(|d| *d >= FIRST_SEGMENT)
        .map(|d| usize::from(d - FIRST_SEGMENT))
}

impl Switch {
    /// Takes each port group's overlay (by group index): the segments, and the VTEP that
    /// carries them, listing every remote VTEP of every segment.
    pub(super) fn set_overlays(&mut self, overlays: Vec<Option<Overlay>>) {
        let mut remotes: Vec<Ipv4Addr> = Vec::new();
        let mut local = None;
        for o in &overlays {
            // (Past MAX_SEGMENTS only if the host's checks were skipped.)
            let Some(o) = o.as_ref().filter(|_| self.segments.len() < MAX_SEGMENTS) else {
                self.group_segments.push(None);
                continue;
            };
            local = Some(o.local);
            remotes.extend(o.remotes.iter().filter(|r| !remotes.contains(r)).collect::<Vec<_>>());
            self.group_segments.push(Some(self.segments.len()));
            self.segments.push(Some(o.clone()));
        }
        self.vtep = local.map(|l| VtepNeighbors::new(l, &remotes));
    }

    /// Forgets overlay group `g`'s segment (the group was removed): its VNI is no longer
    /// accepted, and the segment's learned addresses age out.
    pub(super) fn drop_segment(&mut self, g: usize) {
        if let Some(Some(seg)) = self.group_segments.get(g).copied() {
            self.segments[seg] = None;
        }
    }

    /// The uplinks an overlay group may use: the only ones the VTEP listens and answers on.
    fn vtep_uplink(&self, u: UplinkId) -> bool {
        self.group_segments.iter().enumerate().any(|(g, seg)| {
            seg.is_some()
                && self
                    .team
                    .group(crate::teaming::GroupId(g))
                    .is_some_and(|spec| spec.order.active.contains(&u) || spec.order.standby.contains(&u))
        })
    }

    /// The uplink the VTEP answers broadcast ARP on: the first usable one of the first overlay
    /// group's order (a physical switch floods a request to every team member; one answer).
    fn vtep_home(&self) -> Option<UplinkId> {
        let g = self.group_segments.iter().position(|s| s.is_some())?;
        let spec = self.team.group(crate::teaming::GroupId(g))?;
        spec.order
            .active
            .iter()
            .chain(&spec.order.standby)
            .copied()
            .find(|u| self.team.uplink_usable(*u))
    }

    /// This host's VTEP, if it has overlay groups.
    pub fn vtep(&self) -> Option<&VtepNeighbors> {
        self.vtep.as_ref()
    }

    /// Moves what the VTEP wants sent into the switch's own frames, on uplink `u`; past
    /// [`crate::overlay::neighbors::MAX_QUEUED`] waiting, frames are dropped (and counted).
    fn drain_vtep(&mut self, u: UplinkId) {
        if let Some(v) = self.vtep.as_mut() {
            while let Some(f) = v.poll_transmit() {
                if self.own_frames.len() >= crate::overlay::neighbors::MAX_QUEUED {
                    v.dropped += 1;
                } else {
                    self.own_frames.push_back((u, f));
                }
            }
        }
    }

    /// The VTEP's ARP refreshes, sent on the first usable uplink whose MAC is known.
    pub(super) fn vtep_timers(&mut self, now: Instant) {
        let Some(next) = self.vtep.as_ref().and_then(VtepNeighbors::poll_at) else {
            return;
        };
        if next > now {
            return;
        }
        let usable = (0..self.uplink_macs.len())
            .map(UplinkId)
            .find(|u| self.team.uplink_usable(*u) && self.uplink_macs[u.0].is_some());
        match (usable, self.vtep.as_mut()) {
            (Some(u), Some(v)) => {
                v.handle_timeout(self.uplink_macs[u.0].expect("found with a MAC"), now);
                self.drain_vtep(u);
            }
            // Nowhere to ask from: the round is spent all the same (no busy loop), its
            // requests not sent.
            (None, Some(v)) => {
                v.handle_timeout(MacAddr::default(), now);
                while v.poll_transmit().is_some() {}
            }
            _ => {}
        }
    }

    /// A frame from overlay port `p` of segment `segment`, its destination `known` (or not):
    /// delivered locally, wrapped for the VTEP behind it, or flooded to both.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn overlay_out(
        &mut self,
        p: PortId,
        segment: usize,
        key: &FlowKey,
        frame: &[u8],
        elided: usize,
        now: Instant,
        known: Option<Location>,
        out: &mut Vec<Forward>,
    ) {
        let dom = domain(segment);
        let first = out.len();
        let keep = |q: PortId| Forward {
            to: Egress::Port(q),
            edit: TagEdit::Keep,
            source: None,
        };
        match known {
            Some(Location::Port(q)) if q == p => return self.dropped(Ingress::Port(p), DropReason::Hairpin),
            Some(Location::Port(q)) => out.push(keep(q)),
            Some(Location::Tunnel(r)) => self.wrap_for(p, segment, key, frame.len() + elided, now, &[r], out),
            _ => {
                self.flood_from_port(p, dom, key.dst_mac, out);
                let remotes = self.segments[segment]
                    .as_ref()
                    .map(|o| o.remotes.clone())
                    .unwrap_or_default();
                self.wrap_for(p, segment, key, frame.len() + elided, now, &remotes, out);
            }
        }
        self.copy_to_promiscuous(dom, Some(p), TagEdit::Keep, out, first);
        self.account_sent(&out[first..], frame.len() + elided, now, p);
    }

    /// Adds a wrapped copy of port `p`'s frame for each of `remotes`, all on the uplink the
    /// team picks for the port and flow; a VTEP whose MAC is not known yet is asked for and
    /// counted as not reached.
    #[allow(clippy::too_many_arguments)]
    fn wrap_for(
        &mut self,
        p: PortId,
        segment: usize,
        key: &FlowKey,
        len: usize,
        now: Instant,
        remotes: &[Ipv4Addr],
        out: &mut Vec<Forward>,
    ) {
        let Some(u) = self.team.select_frame(p, Some(key), len, now) else {
            return self.dropped(Ingress::Port(p), DropReason::NoUplink);
        };
        let Some(src_mac) = self.uplink_macs.get(u.0).copied().flatten() else {
            return self.dropped(Ingress::Port(p), DropReason::VtepUnresolved);
        };
        let Some((vni, local)) = self.segments[segment].as_ref().map(|o| (o.vni, o.local)) else {
            return;
        };
        let mut unreached = false;
        for r in remotes {
            let dst = self.vtep.as_mut().and_then(|v| v.resolve(*r, src_mac, now));
            match dst {
                Some(dst_mac) => out.push(Forward {
                    to: Egress::Uplink(u),
                    edit: TagEdit::Encap(Tunnel {
                        vni,
                        src_mac,
                        dst_mac,
                        src: local,
                        dst: *r,
                    }),
                    source: None,
                }),
                None => unreached = true,
            }
        }
        // Once per frame, however many VTEPs it did not reach.
        if unreached {
            self.dropped(Ingress::Port(p), DropReason::VtepUnresolved);
        }
        self.drain_vtep(u);
    }

    /// Takes what uplink `u` received for this host's VTEP: ARP for its address, and VXLAN
    /// frames to it, which are opened and switched into their segment or dropped. False if
    /// the frame is not the VTEP's (it is switched as any other).
    pub(super) fn underlay_in(
        &mut self,
        u: UplinkId,
        key: &FlowKey,
        frame: &[u8],
        elided: usize,
        now: Instant,
        out: &mut Vec<Forward>,
    ) -> bool {
        if self.vtep.is_none() || key.vlan.is_some() || !self.vtep_uplink(u) {
            return false;
        }
        let Some(mac) = self.uplink_macs.get(u.0).copied().flatten() else {
            return false;
        };
        let for_vtep = key.dst_ip == Some(IpAddr::V4(self.vtep.as_ref().expect("checked").local()));
        if for_vtep && self.uplink_macs.contains(&Some(key.src_mac)) {
            // Our own request or frame come back from the physical network.
            self.dropped(Ingress::Uplink(u), DropReason::Reflection);
            return true;
        }
        if for_vtep && self.behind_local_port(key.src_mac, now) {
            // A VM speaking for a remote VTEP: its group's network reaches the underlay.
            self.dropped(Ingress::Uplink(u), DropReason::TunnelSpoof);
            return true;
        }
        let home = self.vtep_home();
        let vtep = self.vtep.as_mut().expect("checked above");
        let local = vtep.local();
        if key.arp_op.is_some() {
            // A broadcast request is answered on one uplink only; a unicast one where it came.
            if key.dst_mac.is_multicast() && home != Some(u) {
                return key.dst_ip == Some(IpAddr::V4(local));
            }
            let taken = vtep.handle_arp(key, mac, now);
            self.drain_vtep(u);
            return taken;
        }
        if key.dst_ip != Some(IpAddr::V4(local)) {
            return false;
        }
        let tunnel = Ingress::Uplink(u);
        if key.fragment {
            // VXLAN is never fragmented (RFC 7348 §4.3) and the VTEP does not reassemble.
            self.dropped(tunnel, DropReason::Tunnel);
            return true;
        }
        if key.dst_port != Some(VXLAN_PORT) {
            return false;
        }
        // Only a frame sent to this uplink's MAC: a flooded copy arrives on every member.
        if key.dst_mac != mac {
            self.dropped(tunnel, DropReason::Tunnel);
            return true;
        }
        // Opened, from a listed VTEP, with a segment's VNI, untagged inside, and nothing after
        // the datagram (the inner frame is delivered by cutting the outer headers off).
        let accepted = decapsulate(frame).ok().and_then(|d| {
            let IpAddr::V4(remote) = d.remote else { return None };
            let at = frame.len().checked_sub(d.inner.len())?;
            let ends_frame = d.inner.as_ptr_range().end == frame.as_ptr_range().end;
            let segment = self
                .segments
                .iter()
                .position(|o| o.as_ref().is_some_and(|o| o.vni == d.vni && o.accepts(remote, local)))?;
            ends_frame.then_some((remote, segment, at as u16))
        });
        let inner = key.vxlan.as_ref().map(|v| &v.inner);
        let (Some((remote, segment, at)), Some(inner)) = (accepted, inner) else {
            self.dropped(tunnel, DropReason::Tunnel);
            return true;
        };
        let heard = self.vtep.as_mut().map(|v| v.heard(remote, key.src_mac, mac, now));
        self.drain_vtep(u);
        match heard {
            Some(Heard::Confirmed) => {}
            Some(Heard::Unresolved) => {
                self.dropped(tunnel, DropReason::VtepUnresolved);
                return true;
            }
            _ => {
                self.dropped(tunnel, DropReason::TunnelSpoof);
                return true;
            }
        }
        if inner.vlan.is_some() {
            self.dropped(tunnel, DropReason::Tunnel);
            return true;
        }
        // A remote VM's BPDUs, PAUSE or LLDP: the segment is a bridge, which forwards none.
        if crate::wire::link_control(&frame[usize::from(at)..]).is_some() {
            self.dropped(tunnel, DropReason::LinkControl);
            return true;
        }
        self.overlay_in(u, segment, remote, inner, at, frame.len() + elided, now, out);
        true
    }

    /// Whether `mac` is behind a local port in a VLAN (or the untagged network), configured or
    /// learned: a frame from it that arrives on an uplink comes from one of this switch's VMs,
    /// through a physical network its group shares with the underlay. Overlay segments are not
    /// looked at (their ports' frames reach the underlay wrapped, from the uplink's MAC).
    fn behind_local_port(&self, mac: MacAddr, now: Instant) -> bool {
        self.domains
            .keys()
            .any(|d| segment_of(*d).is_none() && matches!(self.macs.lookup(*d, mac, now), Some(Location::Port(_))))
    }

    /// Switches an opened frame (inner key `inner`, its outer headers `at` bytes long) from
    /// `remote` within `segment`: to the local port of its destination, or flooded to the
    /// segment's local ports that take it; never into a tunnel.
    #[allow(clippy::too_many_arguments)]
    fn overlay_in(
        &mut self,
        u: UplinkId,
        segment: usize,
        remote: Ipv4Addr,
        inner: &FlowKey,
        at: u16,
        wire: usize,
        now: Instant,
        out: &mut Vec<Forward>,
    ) {
        let dom = domain(segment);
        let tunnel = Ingress::Uplink(u);
        if matches!(self.macs.lookup(dom, inner.src_mac, now), Some(Location::Port(_))) {
            return self.dropped(tunnel, DropReason::Reflection);
        }
        let known = self.destination(dom, inner.dst_mac, now);
        let first = out.len();
        let edit = TagEdit::Strip(at);
        // A tunnel delivers each frame once: every port takes it from whatever uplink.
        self.receivers(u, dom, inner.dst_mac, known, edit, false, out);
        if out.len() == first {
            return self.dropped(tunnel, DropReason::Tunnel);
        }
        if self.macs.learn(dom, inner.src_mac, Location::Tunnel(remote), now) == super::Learned::Refused {
            self.uplinks[u.0].mac_limit += 1;
        }
        self.account_received(u, dom, known, edit, wire, now, out, first);
    }

    /// Whether `frame` is a RARP announcing the configured MAC of an overlay port (in a
    /// segment), or of a port that does not own it (see [`super::claims`]).
    pub(super) fn announces_unowned(&self, frame: &[u8]) -> bool {
        if crate::wire::network_layer(frame).map(|(et, _)| et) != Some(crate::wire::ETHERTYPE_RARP) {
            return false;
        }
        let src = MacAddr(frame[6..12].try_into().expect("6 bytes"));
        self.guards
            .values()
            .any(|g| g.mac == src && (segment_of(g.vlan).is_some() || g.claim.state != super::Claim::Owned))
    }

    /// Each remote VTEP the switch knows of, with the MAC it is reached at (for status).
    pub fn vtep_neighbors(&self) -> Vec<(Ipv4Addr, Option<MacAddr>)> {
        self.vtep.as_ref().map(VtepNeighbors::known).unwrap_or_default()
    }
}
