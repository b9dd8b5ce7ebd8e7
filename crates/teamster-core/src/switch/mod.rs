//! The switch: ports, port groups, VLANs, the MAC table, forwarding, loop prevention and port
//! security, over a NIC team.
//!
//! Model. VM ports are access ports: their frames are untagged, and the port group's VLAN (if
//! any) is the frame's broadcast domain. Uplinks are trunks: a frame carries its group's VLAN
//! tag there. A frame from a port is first checked against its group's [`SecurityPolicy`]
//! (forged transmits: its source MAC must be the port's effective MAC, see [`security`]); then
//! it is:
//! - delivered to a local port if its destination MAC is known there (same VLAN);
//! - sent out of the uplink the team selects for the port and flow if the destination is known
//!   to be remote;
//! - flooded, if broadcast, multicast or unknown, to the other local ports of its VLAN that take
//!   it (every port takes broadcast and multicast; unknown unicast only ports whose group
//!   accepts MAC address changes, since the others own no address the switch does not know) and
//!   to the sending port's home uplink only (so physical switches see each MAC on one uplink).
//!
//! A frame from an uplink is never sent to another uplink. It is dropped if its source MAC is a
//! local port's (our own frame reflected back by the physical network), or, if it cannot be
//! one of ours, from a host outside using the port's configured MAC (counted `mac_conflict`),
//! unless the port took the address before the switch could know that host: then the port
//! yields ([`claims`]: a port owns its MAC only while attached, and never takes it from a live
//! host outside without the operator's word). A known unicast
//! destination behind a local port is delivered from any uplink. Broadcast, multicast and
//! unknown unicast go to the ports that take them as above, each port taking them in from one
//! uplink only in a switch-independent group (its policy's receive uplink: the group's first
//! live uplink in failover order, or under Hyper-V Port and Dynamic the port's own), since a
//! physical switch floods them to every team member; in a switch-dependent group (static or
//! LACP) from any live member, since the switch sends each frame into the bundle once.
//!
//! Ports whose group accepts promiscuous mode also get a copy of every frame switched in their
//! VLAN. Learning is bounded ([`MacLimits`]): past a limit the frame is switched but its source
//! not learned, and counted as `mac_limit` on the interface it came from.
//!
//! Every frame in is counted per port and per uplink; every drop is counted with its
//! [`DropReason`], on the interface the frame came in on. Frames out are counted when whoever
//! drives the devices says they went ([`Switch::count_sent`]): the switch only decides where a
//! frame goes, and a frame can still be cut into segments, queued or dropped after that.
//! Malformed frames are dropped and counted, never a panic. Slow-protocol frames (LACP) are
//! never switched: from an uplink that runs LACP they go to the team's LACP members, anything
//! else is dropped (`slow_protocol`), so no VM speaks for the team to the physical switch.
//! Link-control frames ([`crate::wire::LinkControl`]: 802.1D's reserved group addresses
//! `01:80:c2:00:00:00`-`0f` tagged or not, MAC control, Cisco's PVST+ and CDP/VTP/DTP) are never
//! forwarded either: a VM's are dropped (`link_control`), so no VM can trip BPDU guard on the
//! physical switch, pause the host's receive or authenticate for the link; an uplink's are
//! dropped too (they describe that one link, and 802.1D never forwards them), except LLDP, which
//! goes to the ports of groups whose security asks for it ([`LinkLocal`]).

mod claims;
mod counters;
mod mac_mirror;
mod mac_table;
mod overlay;
pub mod security;
mod view;

#[cfg(test)]
mod claims_tests;
#[cfg(test)]
mod link_control_tests;
#[cfg(test)]
mod overlay_tests;
#[cfg(test)]
mod security_tests;
#[cfg(test)]
mod spread_tests;
#[cfg(test)]
mod tests;

pub use claims::{Claim, MacNote, MacNoteKind, MOVE_QUIET, PROBE_EVERY, PROBE_WAIT, REFLECTION_WINDOW, SETTLE};
pub use counters::{Counters, DropReason};
pub use mac_table::{Journal, Learned, Location, MacChange, MacLimits, MacTable};
pub use overlay::MAX_SEGMENTS;
pub use security::{LinkLocal, LinkLocalProtocol, SecurityPolicy, Verdict};
pub use view::{EntryAt, MacEntry, PortSwitching};

use security::{PortGuard, Source};

use crate::offload::{TunnelEnds, Vni};
use crate::overlay::{Overlay, VtepNeighbors};
use crate::teaming::{
    Direction, Effect, GroupId, PortGroupSpec, PortId, PortSpec, Team, TeamError, UplinkId, UplinkSpec,
};
use crate::wire::{parse, FlowKey, MacAddr};
use crate::Instant;
use core::net::Ipv4Addr;
use core::time::Duration;
use std::collections::HashMap;

/// Where a frame came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ingress {
    Port(PortId),
    Uplink(UplinkId),
}

/// Where a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Egress {
    Port(PortId),
    Uplink(UplinkId),
}

/// A frame to send, VLAN tag already added or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub to: Egress,
    pub frame: Vec<u8>,
}

/// How a frame changes on its way out: the switch edits frames in no other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagEdit {
    /// Sent as it came.
    Keep,
    /// An 802.1Q tag for this VLAN inserted after the MAC addresses (port to uplink).
    Push(u16),
    /// The outer tag removed (uplink to port; the parser has checked there is one).
    Pop,
    /// Wrapped in VXLAN for a remote VTEP (overlay port to uplink).
    Encap(Tunnel),
    /// The first this-many bytes removed: a VXLAN frame's outer headers (uplink to overlay
    /// port; [`crate::offload::decapsulate`] has checked them).
    Strip(u16),
}

/// The outer headers of a frame sent into an overlay's tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunnel {
    pub vni: Vni,
    /// The uplink's MAC (this VTEP's, on that uplink) and the remote VTEP's.
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
}

impl Tunnel {
    fn ends(&self) -> TunnelEnds {
        TunnelEnds {
            src_mac: self.src_mac,
            dst_mac: self.dst_mac,
            src_ip: self.src.into(),
            dst_ip: self.dst.into(),
            ttl: 64,
        }
    }

    /// Appends complete inner frame `piece` (see [`crate::offload::vxlan::complete_inner`]),
    /// wrapped, to `into`; false (nothing appended) if it is too long for a datagram.
    pub fn wrap_into(&self, piece: &[u8], into: &mut Vec<u8>) -> bool {
        crate::offload::vxlan::encapsulate_into(piece, self.vni, &self.ends(), into)
    }
}

impl TagEdit {
    /// The edit for a frame of port-group VLAN `vlan` leaving on an uplink.
    fn push(vlan: Option<u16>) -> TagEdit {
        vlan.map_or(TagEdit::Keep, TagEdit::Push)
    }

    /// The edit for a frame of VLAN `vlan` from an uplink leaving on a port.
    fn pop(vlan: Option<u16>) -> TagEdit {
        vlan.map_or(TagEdit::Keep, |_| TagEdit::Pop)
    }

    /// How many bytes longer (or shorter) the frame becomes.
    pub fn len_delta(self) -> isize {
        match self {
            TagEdit::Keep => 0,
            TagEdit::Push(_) => 4,
            TagEdit::Pop => -4,
            TagEdit::Encap(_) => crate::offload::vxlan::overhead(false) as isize,
            TagEdit::Strip(n) => -(n as isize),
        }
    }

    /// Appends `frame`, edited, to `into` (a buffer the caller reuses).
    pub fn apply_into(self, frame: &[u8], into: &mut Vec<u8>) {
        match self {
            TagEdit::Keep => into.extend_from_slice(frame),
            TagEdit::Push(v) => {
                into.extend_from_slice(&frame[..12]);
                into.extend_from_slice(&[0x81, 0x00, (v >> 8) as u8 & 0x0f, v as u8]);
                into.extend_from_slice(&frame[12..]);
            }
            TagEdit::Pop => {
                into.extend_from_slice(&frame[..12]);
                into.extend_from_slice(&frame[16..]);
            }
            TagEdit::Encap(t) => {
                // The switch never asks this of a frame too long for a datagram (it cannot
                // arrive: frames are at most 64 KiB and VXLAN's limit is near that); if one
                // did, nothing is appended and the caller sends an empty frame, which no
                // device takes.
                crate::offload::vxlan::encapsulate_into(frame, t.vni, &t.ends(), into);
            }
            TagEdit::Strip(n) => into.extend_from_slice(frame.get(usize::from(n)..).unwrap_or(&[])),
        }
    }
}

/// Where a frame goes, and how it changes on the way: the switch's decision, without a copy of
/// the frame (the caller builds each copy where it will be sent from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub to: Egress,
    pub edit: TagEdit,
    /// A new source MAC: the uplink's own, for a frame a switch-independent group sends on a
    /// member other than its port's (see [`crate::teaming::TeamingPolicy::rewrites_source`]).
    pub source: Option<MacAddr>,
}

impl Forward {
    /// True if the frame goes out as it came.
    pub fn unedited(&self) -> bool {
        self.edit == TagEdit::Keep && self.source.is_none()
    }

    /// Appends `frame`, edited (tag, then source MAC), to `into` (a buffer the caller reuses).
    pub fn apply_into(&self, frame: &[u8], into: &mut Vec<u8>) {
        let start = into.len();
        self.edit.apply_into(frame, into);
        if let (Some(mac), Some(src)) = (self.source, into.get_mut(start + 6..start + 12)) {
            src.copy_from_slice(&mac.0);
        }
    }
}

/// How a switch is set up beyond its team: MAC ageing and limits, and each port group's
/// security policy.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchConfig {
    pub ageing: Duration,
    pub mac_limits: MacLimits,
    /// Per port group, by [`GroupId`] index; a group past the end gets the default (all reject).
    pub security: Vec<SecurityPolicy>,
    /// Per port group, by [`GroupId`] index: its overlay segment, if it is one. Every overlay
    /// names the same local VTEP and a VNI of its own ([`crate::host`] checks it).
    pub overlays: Vec<Option<Overlay>>,
}

impl Default for SwitchConfig {
    fn default() -> SwitchConfig {
        SwitchConfig {
            ageing: MacTable::DEFAULT_AGEING,
            mac_limits: MacLimits::default(),
            security: Vec::new(),
            overlays: Vec::new(),
        }
    }
}

/// A switch over a team; see the module documentation.
#[derive(Debug, Clone)]
pub struct Switch {
    team: Team,
    macs: MacTable,
    /// VLAN (or none) -> the ports in it, with their group.
    domains: HashMap<Option<u16>, Vec<(PortId, GroupId)>>,
    /// Per port: its VLAN, configured and effective MAC, and security policy.
    guards: HashMap<PortId, PortGuard>,
    /// VLAN -> its promiscuous ports (VLANs with none are absent).
    promiscuous: HashMap<Option<u16>, Vec<PortId>>,
    ports: HashMap<PortId, Counters>,
    uplinks: Vec<Counters>,
    /// Each uplink's own MAC, if the driver told it ([`Switch::set_uplink_mac`]).
    uplink_macs: Vec<Option<MacAddr>>,
    /// Each port group's security policy (by [`GroupId`] index), for ports added later.
    security: Vec<SecurityPolicy>,
    /// Frames from interfaces the switch does not know.
    unattributed: Counters,
    next_sweep: Instant,
    /// Overlay segments (None once their group is removed); segment `i` is MAC-table domain
    /// 4096 + `i`.
    segments: Vec<Option<Overlay>>,
    /// Each port group's segment (by [`GroupId`] index), if it is an overlay.
    group_segments: Vec<Option<usize>>,
    /// This host's VTEP, if any group is an overlay.
    vtep: Option<VtepNeighbors>,
    /// Frames the VTEP sends (ARP), with their uplink, until taken by [`Switch::poll_effect`].
    own_frames: std::collections::VecDeque<(UplinkId, Vec<u8>)>,
    /// What happened to ports' claims on their MACs, until taken by [`Switch::poll_mac_note`].
    mac_notes: std::collections::VecDeque<MacNote>,
    /// The IPv4 address each MAC heard on the uplinks last gave in ARP (see [`claims`]).
    arp_senders: claims::ArpSenders,
}

impl Switch {
    /// A switch over `team` with MAC ageing `ageing`, default MAC limits and the default
    /// security policy (all rejected) on every group.
    pub fn new(team: Team, ageing: Duration) -> Switch {
        Switch::with_config(
            team,
            SwitchConfig {
                ageing,
                ..SwitchConfig::default()
            },
        )
    }

    /// A switch over `team`, whose ports' MACs become static MAC-table entries (its ports are
    /// attached: the table is empty, so each owns its MAC; see [`claims`]).
    pub fn with_config(team: Team, config: SwitchConfig) -> Switch {
        let mut switch = Switch {
            uplinks: vec![Counters::default(); team.uplink_count()],
            uplink_macs: vec![None; team.uplink_count()],
            macs: MacTable::with_limits(config.ageing, config.mac_limits),
            domains: HashMap::new(),
            guards: HashMap::new(),
            promiscuous: HashMap::new(),
            ports: HashMap::new(),
            security: config.security,
            unattributed: Counters::default(),
            next_sweep: Instant::ZERO + config.ageing / 10,
            segments: Vec::new(),
            group_segments: Vec::new(),
            vtep: None,
            own_frames: Default::default(),
            mac_notes: Default::default(),
            arp_senders: Default::default(),
            team,
        };
        switch.set_overlays(config.overlays);
        let specs: Vec<PortSpec> = switch.team.ports().cloned().collect();
        for p in &specs {
            switch.admit_port(p, true);
        }
        switch
    }

    /// Gives a port of the team its switch state: its VLAN's flooding domain, its guard (its
    /// group's security policy, its claim on its MAC: owned, a static entry, if `attached`,
    /// else detached) and its counters.
    fn admit_port(&mut self, p: &PortSpec, attached: bool) {
        let vlan = match self.group_segments.get(p.group.0).copied().flatten() {
            Some(segment) => overlay::domain(segment),
            None => self.team.group(p.group).and_then(|g| g.vlan),
        };
        let mut claim = claims::PortClaim::owned(Instant::ZERO);
        if attached {
            self.macs.add_static(vlan, p.mac, p.id);
        } else {
            claim.state = Claim::Detached;
        }
        self.domains.entry(vlan).or_default().push((p.id, p.group));
        let policy = self.security.get(p.group.0).copied().unwrap_or_default();
        if policy.promiscuous.accepts() {
            self.promiscuous.entry(vlan).or_default().push(p.id);
        }
        self.guards.insert(
            p.id,
            PortGuard {
                vlan,
                mac: p.mac,
                policy,
                changed: None,
                claim,
            },
        );
        self.ports.insert(p.id, Counters::default());
    }

    /// Adds a port group while the switch runs, with its security policy; its ID is the next
    /// index.
    pub fn add_group(&mut self, spec: PortGroupSpec, security: SecurityPolicy) -> Result<GroupId, TeamError> {
        let g = self.team.add_group(spec)?;
        self.security.resize(g.0, SecurityPolicy::default());
        self.security.insert(g.0, security);
        Ok(g)
    }

    /// Removes port group `g`, which must have no ports; later groups move down one index.
    pub fn remove_group(&mut self, g: GroupId) -> Result<PortGroupSpec, TeamError> {
        let spec = self.team.remove_group(g)?;
        if g.0 < self.security.len() {
            self.security.remove(g.0);
        }
        self.drop_segment(g.0);
        if g.0 < self.group_segments.len() {
            self.group_segments.remove(g.0);
        }
        for members in self.domains.values_mut() {
            for (_, group) in members.iter_mut() {
                if group.0 > g.0 {
                    *group = GroupId(group.0 - 1);
                }
            }
        }
        Ok(spec)
    }

    /// Adds a port while the switch runs, attached (a VM's tap appeared): the team places it,
    /// it claims its MAC ([`Switch::attach_port`]: announced on its uplink with a RARP, if its
    /// group notifies switches, unless a host outside uses it), and it switches from the next
    /// frame on. Refused, changing nothing, if its ID or MAC is taken or its group unknown.
    pub fn add_port(&mut self, spec: PortSpec, now: Instant) -> Result<(), TeamError> {
        self.add_detached_port(spec.clone())?;
        self.attach_port(spec.id, now);
        Ok(())
    }

    /// Adds a port while the switch runs, detached (its interface is not there yet): placed by
    /// the team, owning no MAC until [`Switch::attach_port`]. Refused as [`Switch::add_port`].
    pub fn add_detached_port(&mut self, spec: PortSpec) -> Result<(), TeamError> {
        self.team.add_port(spec.clone())?;
        self.admit_port(&spec, false);
        Ok(())
    }

    /// Removes a port while the switch runs (its VM went away): its MAC-table entries, its
    /// flooding and promiscuous membership, its guard and counters go with it, so nothing is
    /// forwarded to it and its ID may be given to a new port. Returns what it was.
    pub fn remove_port(&mut self, id: PortId) -> Result<PortSpec, TeamError> {
        let spec = self.team.remove_port(id)?;
        self.macs.remove_port(id);
        for members in self.domains.values_mut() {
            members.retain(|(p, _)| *p != id);
        }
        self.domains.retain(|_, m| !m.is_empty());
        for members in self.promiscuous.values_mut() {
            members.retain(|p| *p != id);
        }
        self.promiscuous.retain(|_, m| !m.is_empty());
        self.guards.remove(&id);
        self.ports.remove(&id);
        Ok(spec)
    }

    /// Adds an uplink after the others (see [`Team::add_uplink`]), with its own counters.
    pub fn add_uplink(&mut self, spec: UplinkSpec) -> Result<UplinkId, TeamError> {
        let u = self.team.add_uplink(spec)?;
        self.uplinks.push(Counters::default());
        self.uplink_macs.push(None);
        Ok(u)
    }

    /// Removes uplink `u`, which no group may use (see [`Team::remove_uplink`]): its counters
    /// and the addresses learned on it go, and the uplinks after it move down one index.
    pub fn remove_uplink(&mut self, u: UplinkId) -> Result<UplinkSpec, TeamError> {
        let spec = self.team.remove_uplink(u)?;
        if u.0 < self.uplinks.len() {
            self.uplinks.remove(u.0);
        }
        if u.0 < self.uplink_macs.len() {
            self.uplink_macs.remove(u.0);
        }
        self.macs.remove_uplink(u);
        self.own_frames.retain(|(v, _)| *v != u);
        for (v, _) in self.own_frames.iter_mut() {
            if v.0 > u.0 {
                *v = UplinkId(v.0 - 1);
            }
        }
        Ok(spec)
    }

    /// Switches one frame that arrived at `from`, returning what to send where.
    pub fn ingress(&mut self, from: Ingress, frame: &[u8], now: Instant) -> Vec<Output> {
        self.ingress_elided(from, frame, 0, now)
    }

    /// Switches one frame that arrived at `from` (standing for `elided` bytes more on the wire,
    /// as in [`Switch::ingress_elided`]), appending where it goes and how it changes to `out`;
    /// no copy of the frame is made.
    pub fn forward(&mut self, from: Ingress, frame: &[u8], elided: usize, now: Instant, out: &mut Vec<Forward>) {
        match from {
            Ingress::Port(p) => self.ingress_port(p, frame, elided, now, out),
            Ingress::Uplink(u) => self.ingress_uplink(u, frame, elided, now, out),
        }
    }

    /// Switches a frame that stands for `elided` bytes more on the wire than `headers` holds, and
    /// counts and meters it at that length: the simulator's packet mode passes only the headers
    /// (everything the switch reads) and the outputs carry those; the live data plane passes a
    /// super-frame, whose segments each repeat its headers on the wire.
    pub fn ingress_elided(&mut self, from: Ingress, headers: &[u8], elided: usize, now: Instant) -> Vec<Output> {
        let mut out = Vec::new();
        self.forward(from, headers, elided, now, &mut out);
        out.into_iter()
            .map(|f| {
                let mut frame = Vec::with_capacity((headers.len() as isize + f.edit.len_delta()) as usize);
                f.apply_into(headers, &mut frame);
                Output { to: f.to, frame }
            })
            .collect()
    }

    /// A frame from local port `p`.
    fn ingress_port(&mut self, p: PortId, frame: &[u8], elided: usize, now: Instant, out: &mut Vec<Forward>) {
        let Some(vlan) = self.guards.get(&p).map(|g| g.vlan) else {
            self.unattributed.rx(frame.len() + elided);
            self.unattributed.drop(DropReason::UnknownPort);
            return;
        };
        self.port(p).rx(frame.len() + elided);
        if crate::wire::lacp::is_slow(frame) {
            return self.dropped(Ingress::Port(p), DropReason::SlowProtocol);
        }
        if crate::wire::link_control(frame).is_some() {
            return self.dropped(Ingress::Port(p), DropReason::LinkControl);
        }
        let key = match parse(frame) {
            Ok(k) => k,
            Err(_) => return self.dropped(Ingress::Port(p), DropReason::Malformed),
        };
        if key.vlan.is_some() {
            return self.dropped(Ingress::Port(p), DropReason::TaggedOnAccessPort);
        }
        if let Err(why) = self.admit_source(p, vlan, key.src_mac, now) {
            return self.dropped(Ingress::Port(p), why);
        }
        let known = self.destination(vlan, key.dst_mac, now);
        if let Some(segment) = overlay::segment_of(vlan) {
            return self.overlay_out(p, segment, &key, frame, elided, now, known, out);
        }
        let first = out.len();
        let keep = |q: PortId| Forward {
            to: Egress::Port(q),
            edit: TagEdit::Keep,
            source: None,
        };
        let tagged = |u: UplinkId, source: Option<MacAddr>| Forward {
            to: Egress::Uplink(u),
            edit: TagEdit::push(vlan),
            source,
        };
        match known {
            Some(Location::Port(q)) if q == p => return self.dropped(Ingress::Port(p), DropReason::Hairpin),
            Some(Location::Port(q)) => out.push(keep(q)),
            // (A tunnel's MACs live only in overlay segments, switched above.)
            Some(Location::Remote(_) | Location::Tunnel(_)) => {
                match self.team.select_frame(p, Some(&key), frame.len() + elided, now) {
                    Some(u) => {
                        let (u, source) = self.spread_to(p, u);
                        out.push(tagged(u, source))
                    }
                    None => return self.dropped(Ingress::Port(p), DropReason::NoUplink),
                }
            }
            None => {
                self.flood_from_port(p, vlan, key.dst_mac, out);
                // A spreading policy's broadcasts and multicasts go on the port's own member, with
                // its own MAC: only there does the physical switch know it.
                let u = if key.dst_mac.is_multicast() && self.team.rewrites_source(p) {
                    self.team.port_uplink(p)
                } else {
                    self.team.select_frame(p, Some(&key), frame.len() + elided, now)
                };
                if let Some(u) = u {
                    let (u, source) = self.spread_to(p, u);
                    out.push(tagged(u, source));
                }
            }
        }
        self.copy_to_promiscuous(vlan, Some(p), TagEdit::Keep, out, first);
        self.account_sent(&out[first..], frame.len() + elided, now, p);
    }

    /// Where a frame of port `p` the team put on uplink `u` goes, and its new source MAC: if
    /// `p`'s group spreads a port over its members in switch-independent mode and `u` is not
    /// the port's own member, `u` with `u`'s own MAC (Windows' rule: the physical switch then
    /// never sees the port's MAC on two ports, and every reply comes back on the port's own
    /// member), or the port's own member if `u`'s MAC is unknown; else `u`, unchanged.
    fn spread_to(&self, p: PortId, u: UplinkId) -> (UplinkId, Option<MacAddr>) {
        let own = self.team.port_uplink(p);
        if !self.team.rewrites_source(p) || own == Some(u) {
            return (u, None);
        }
        match (self.uplink_macs.get(u.0).copied().flatten(), own) {
            (Some(mac), _) => (u, Some(mac)),
            (None, Some(own)) => (own, None),
            (None, None) => (u, None),
        }
    }

    /// Tells the switch uplink `u`'s own MAC (the data plane reads it from the interface): the
    /// source of what a spreading policy sends there for another member's port.
    pub fn set_uplink_mac(&mut self, u: UplinkId, mac: Option<MacAddr>) {
        if let Some(m) = self.uplink_macs.get_mut(u.0) {
            *m = mac;
        }
    }

    /// Decides whether port `p` may send from `src` under its group's policy and its claim on
    /// its MAC (why not, if not), learning the address behind the port where the policy lets
    /// the port receive on it.
    fn admit_source(&mut self, p: PortId, vlan: Option<u16>, src: MacAddr, now: Instant) -> Result<(), DropReason> {
        let g = &self.guards[&p];
        let (source, changed, learns, claim) = (g.source(src), g.changed, g.learns(), g.claim.state);
        let learn = match source {
            Source::Configured => {
                if claim == Claim::Waiting {
                    self.send_while_waiting(p, now)?;
                }
                if let Some(old) = changed {
                    self.change_mac(p, vlan, old, None);
                }
                return Ok(());
            }
            Source::Changed => true,
            Source::Forged => return Err(DropReason::ForgedTransmit),
            // Never to another port's configured MAC.
            Source::Change if self.macs.static_port(vlan, src).is_some() => return Err(DropReason::ForgedTransmit),
            Source::Change => {
                if let Some(old) = changed {
                    self.change_mac(p, vlan, old, Some(src));
                }
                self.guards.get_mut(&p).expect("looked up above").changed = Some(src);
                true
            }
            Source::Other => learns,
        };
        if learn && self.macs.learn(vlan, src, Location::Port(p), now) == Learned::Refused {
            self.port(p).mac_limit += 1;
        }
        Ok(())
    }

    /// Records that port `p`'s guest moved its effective MAC from `old` (forgotten) to `new`
    /// (None: back to the configured MAC).
    fn change_mac(&mut self, p: PortId, vlan: Option<u16>, old: MacAddr, new: Option<MacAddr>) {
        self.macs.unlearn(vlan, old, p);
        self.guards.get_mut(&p).expect("a known port").changed = new;
    }

    /// Adds a copy (changed by `edit`) for every promiscuous port of `vlan` that is neither the
    /// sender nor already a destination among `out[first..]`.
    fn copy_to_promiscuous(
        &self,
        vlan: Option<u16>,
        sender: Option<PortId>,
        edit: TagEdit,
        out: &mut Vec<Forward>,
        first: usize,
    ) {
        let Some(listeners) = self.promiscuous.get(&vlan) else {
            return;
        };
        for q in listeners {
            let listed = out[first..].iter().any(|f| f.to == Egress::Port(*q));
            if Some(*q) != sender && !listed {
                out.push(Forward {
                    to: Egress::Port(*q),
                    edit,
                    source: None,
                });
            }
        }
    }

    /// A frame from uplink `u`.
    fn ingress_uplink(&mut self, u: UplinkId, frame: &[u8], elided: usize, now: Instant, out: &mut Vec<Forward>) {
        if u.0 >= self.uplinks.len() {
            self.unattributed.rx(frame.len() + elided);
            self.unattributed.drop(DropReason::UnknownPort);
            return;
        }
        self.uplinks[u.0].rx(frame.len() + elided);
        if crate::wire::lacp::is_slow(frame) {
            // LACP's, never switched; one not sent to the slow-protocols address (a forgery from
            // anywhere in the VLAN), or on an uplink that runs no LACP, is dropped.
            let taken = crate::wire::lacp::is_slow_to_us(frame) && self.team.receive_slow(u, frame, now);
            if !taken {
                self.dropped(Ingress::Uplink(u), DropReason::SlowProtocol);
            }
            return;
        }
        if let Some(protocol) = crate::wire::link_control(frame) {
            return self.link_local_in(u, protocol, frame, out);
        }
        // An LACP member outside the bundle (detached or waiting: another key, another switch, no
        // partner) discards what it receives. One still attached whose partner went quiet
        // keeps taking frames: a partner such as Open vSwitch goes on sending on it as long as
        // our LACPDUs reach it, and dropping them would only black-hole its flows.
        if self.team.lacp().member(u).is_some_and(|m| !m.attached()) && !self.team.uplink_usable(u) {
            return self.dropped(Ingress::Uplink(u), DropReason::NotReceiveUplink);
        }
        let key: FlowKey = match parse(frame) {
            Ok(k) => k,
            Err(_) => return self.dropped(Ingress::Uplink(u), DropReason::Malformed),
        };
        if self.underlay_in(u, &key, frame, elided, now, out) {
            return;
        }
        let vlan = key.vlan;
        if !self.domains.contains_key(&vlan) {
            return self.dropped(Ingress::Uplink(u), DropReason::UnknownVlan);
        }
        if self.uplink_macs.contains(&Some(key.src_mac)) {
            return self.dropped(Ingress::Uplink(u), DropReason::Reflection);
        }
        if let Some(Location::Port(p)) = self.macs.lookup(vlan, key.src_mac, now) {
            // Our own frame come back, unless it is a host outside with a port's configured
            // MAC (see [`claims`]).
            let configured = self.guards.get(&p).is_some_and(|g| g.mac == key.src_mac);
            match configured.then(|| self.heard_on_uplink(p, u, &key, now)) {
                Some(claims::UplinkSource::Yielded) => {}
                Some(claims::UplinkSource::Refused) => {
                    return self.dropped(Ingress::Uplink(u), DropReason::MacConflict)
                }
                _ => return self.dropped(Ingress::Uplink(u), DropReason::Reflection),
            }
        }
        if key.arp_op.is_some() {
            self.arp_senders.note(&key);
        }
        let known = self.destination(vlan, key.dst_mac, now);
        // A frame for a local port arrives once; anything else the physical switch floods to
        // every team member, so each group takes it from its receive uplink only.
        let first = out.len();
        let edit = TagEdit::pop(vlan);
        self.receivers(u, vlan, key.dst_mac, known, edit, true, out);
        if self.macs.learn(vlan, key.src_mac, Location::Remote(u), now) == Learned::Refused {
            self.uplinks[u.0].mac_limit += 1;
        }
        if out.len() == first {
            return self.dropped(Ingress::Uplink(u), DropReason::NotReceiveUplink);
        }
        self.account_received(u, vlan, known, edit, frame.len() + elided, now, out, first);
    }

    /// A link-control frame from uplink `u`: delivered as it came to the ports of every group
    /// that asks for `protocol` and has `u` in its failover order (a monitoring VM sees each
    /// uplink's neighbour), if it is untagged (link-local protocols are); else dropped and
    /// counted. Never to another uplink.
    fn link_local_in(&mut self, u: UplinkId, protocol: crate::wire::LinkControl, frame: &[u8], out: &mut Vec<Forward>) {
        let first = out.len();
        let untagged = crate::wire::network_layer(frame).is_some_and(|(_, at)| at == 14);
        if untagged && self.security.iter().any(|s| s.link_local.allows(protocol)) {
            let on_u = |g: GroupId| {
                self.team
                    .group(g)
                    .is_some_and(|spec| spec.order.active.contains(&u) || spec.order.standby.contains(&u))
            };
            for members in self.domains.values() {
                out.extend(
                    members
                        .iter()
                        .filter(|(q, g)| self.guards[q].policy.link_local.allows(protocol) && on_u(*g))
                        .map(|(q, _)| Forward {
                            to: Egress::Port(*q),
                            edit: TagEdit::Keep,
                            source: None,
                        }),
                );
            }
        }
        if out.len() == first {
            self.dropped(Ingress::Uplink(u), DropReason::LinkControl);
        }
    }

    /// Appends, unedited, the other local ports of domain `dom` that a frame from port `p` for
    /// group or unknown `dst` floods to.
    fn flood_from_port(&self, p: PortId, dom: Option<u16>, dst: MacAddr, out: &mut Vec<Forward>) {
        let members = self.domains.get(&dom).map(Vec::as_slice).unwrap_or(&[]);
        out.extend(
            members
                .iter()
                .filter(|(q, _)| *q != p && self.guards[q].takes_flood(dst))
                .map(|(q, _)| Forward {
                    to: Egress::Port(*q),
                    edit: TagEdit::Keep,
                    source: None,
                }),
        );
    }

    /// Appends (with `edit`) the local ports of domain `dom` that a frame from uplink `u` for
    /// `dst` goes to: the port `dst` is known behind; else the ports that take it (promiscuous
    /// ones always, the others a group or unknown destination they take), each only from its
    /// receive uplink where `per_uplink` (the physical switch floods to every team member).
    #[allow(clippy::too_many_arguments)]
    fn receivers(
        &self,
        u: UplinkId,
        dom: Option<u16>,
        dst: MacAddr,
        known: Option<Location>,
        edit: TagEdit,
        per_uplink: bool,
        out: &mut Vec<Forward>,
    ) {
        let to = |q: PortId| Forward {
            to: Egress::Port(q),
            edit,
            source: None,
        };
        if let Some(Location::Port(q)) = known {
            return out.push(to(q));
        }
        let members = self.domains.get(&dom).map(Vec::as_slice).unwrap_or(&[]);
        out.extend(
            members
                .iter()
                .filter(|(q, _)| {
                    let guard = &self.guards[q];
                    let takes = guard.promiscuous() || (known.is_none() && guard.takes_flood(dst));
                    takes && (!per_uplink || self.team.takes_flood(*q, u))
                })
                .map(|(q, _)| to(*q)),
        );
    }

    /// Feeds the team's meters with what uplink `u` delivered to ports (`out[first..]`, `wire`
    /// bytes each) and, for a destination known behind a port, copies the frame to the
    /// domain's promiscuous ports (copies do not cross the uplink again: not metered).
    #[allow(clippy::too_many_arguments)]
    fn account_received(
        &mut self,
        u: UplinkId,
        dom: Option<u16>,
        known: Option<Location>,
        edit: TagEdit,
        wire: usize,
        now: Instant,
        out: &mut Vec<Forward>,
        first: usize,
    ) {
        for f in &out[first..] {
            if let Egress::Port(q) = f.to {
                self.team.account(q, u, Direction::Rx, wire as u64, now);
            }
        }
        if matches!(known, Some(Location::Port(_))) {
            self.copy_to_promiscuous(dom, None, edit, out, first);
        }
    }

    /// Feeds the team's meters with what port `p` sends to uplinks, at the frame's length on
    /// the wire after its edit (`wire` is its length as it came).
    fn account_sent(&mut self, out: &[Forward], wire: usize, now: Instant, p: PortId) {
        let mut sent_out = false;
        for f in out {
            if let Egress::Uplink(u) = f.to {
                let len = (wire as isize + f.edit.len_delta()) as u64;
                self.team.account(p, u, Direction::Tx, len, now);
                sent_out = true;
            }
        }
        if sent_out {
            self.sent_out(p, now);
        }
    }

    /// Counts `packets` frames of `bytes` in total that `to`'s device took: its `tx_*`
    /// counters, told by whoever hands frames to the devices (after segmentation, and only
    /// what was not dropped).
    pub fn count_sent(&mut self, to: Egress, packets: u64, bytes: u64) {
        match to {
            // A port removed since the frames were handed over is not brought back.
            Egress::Port(q) => {
                if let Some(c) = self.ports.get_mut(&q) {
                    c.sent(packets, bytes);
                }
            }
            Egress::Uplink(u) => {
                if let Some(c) = self.uplinks.get_mut(u.0) {
                    c.sent(packets, bytes);
                }
            }
        }
    }

    fn dropped(&mut self, at: Ingress, why: DropReason) {
        match at {
            Ingress::Port(p) => self.port(p).drop(why),
            Ingress::Uplink(u) => self.uplinks[u.0].drop(why),
        }
    }

    /// Where unicast `dst` lives in `domain`, if known (never for a group address).
    fn destination(&self, domain: Option<u16>, dst: MacAddr, now: Instant) -> Option<Location> {
        if dst.is_multicast() {
            None
        } else {
            self.macs.lookup(domain, dst, now)
        }
    }

    fn port(&mut self, p: PortId) -> &mut Counters {
        self.ports.entry(p).or_default()
    }

    /// The next time [`Switch::handle_timeout`] has work: the team's timers or a MAC-table sweep.
    pub fn poll_at(&self) -> Instant {
        let t = self.team.poll_at().map_or(self.next_sweep, |t| t.min(self.next_sweep));
        self.vtep
            .as_ref()
            .and_then(VtepNeighbors::poll_at)
            .map_or(t, |v| v.min(t))
    }

    /// Runs the timers due at `now`: Load-Based Teaming, the VTEP's ARP refreshes, and ageing
    /// of the MAC table.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.team.handle_timeout(now);
        self.vtep_timers(now);
        if now >= self.next_sweep {
            self.macs.expire(now);
            self.claim_freed(now);
            self.next_sweep = now + self.macs.ageing() / 10;
        }
    }

    /// The next frame the team asks to send (notify-switch RARPs, LACPDUs) or port move. A
    /// slow-protocol frame leaves from its uplink's own MAC where the switch knows it, as
    /// 802.1AX asks (the team sends from the LACP system ID, the same on every member).
    pub fn poll_effect(&mut self) -> Option<Effect> {
        if let Some((uplink, frame)) = self.own_frames.pop_front() {
            return Some(Effect::Transmit { uplink, frame });
        }
        let mut effect = self.team.poll_effect()?;
        // An overlay port's MAC lives in its segment, not on the underlay, and a port that does
        // not own its MAC (detached, or waiting for a host outside) announces nothing: no RARP.
        while let Effect::Transmit { frame, .. } = &effect {
            if !self.announces_unowned(frame) {
                break;
            }
            effect = self.team.poll_effect()?;
        }
        if let Effect::Transmit { uplink, frame } = &mut effect {
            let own = self.uplink_macs.get(uplink.0).copied().flatten();
            if let (true, Some(mac), Some(src)) = (crate::wire::lacp::is_slow(frame), own, frame.get_mut(6..12)) {
                src.copy_from_slice(&mac.0);
            }
        }
        Some(effect)
    }

    /// The team, for link state and policy changes.
    pub fn team_mut(&mut self) -> &mut Team {
        &mut self.team
    }

    /// The team.
    pub fn team(&self) -> &Team {
        &self.team
    }

    /// A port's counters.
    pub fn port_counters(&self, p: PortId) -> Option<&Counters> {
        self.ports.get(&p)
    }

    /// An uplink's counters.
    pub fn uplink_counters(&self, u: UplinkId) -> Option<&Counters> {
        self.uplinks.get(u.0)
    }

    /// Frames from ports or uplinks the switch does not know (all dropped).
    pub fn unattributed_counters(&self) -> &Counters {
        &self.unattributed
    }

    /// The MAC table.
    pub fn mac_table(&self) -> &MacTable {
        &self.macs
    }
}
