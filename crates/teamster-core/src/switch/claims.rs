//! A port's claim on its configured MAC: who owns an address that a port is given and a host
//! outside (behind an uplink or a remote VTEP) already uses.
//!
//! Model. A port's configured MAC comes from whoever made the port (the file, the API, the
//! libvirt hook with the tenant's domain XML, the cluster controller, a port rule), so it may
//! be any address, a gateway's included. The switch therefore never lets a port's MAC take an
//! address from a live host outside on the port's word alone:
//! - **Detached**: a port whose interface is absent owns nothing: no MAC-table entry, no
//!   announcement. Its entry is installed when it attaches and removed when it detaches.
//! - **Owned** at attach if no host outside uses the address in the port's VLAN (no entry
//!   behind an uplink or a remote VTEP, or one aged out): a static entry, announced with a RARP
//!   where the group notifies switches.
//! - **Waiting** otherwise: the address stays the outside host's; the port's frames from it are
//!   dropped (`mac_conflict`, so the physical switches never see the address move), and frames
//!   to it go on to the outside host. The port takes the address only once the host outside is
//!   gone: when the port sends from it and the host has not been heard from for [`MOVE_QUIET`],
//!   the switch asks the host (an RFC 5227 ARP probe, sent to its MAC alone, for the IPv4
//!   address it last gave in ARP on the uplinks) and the port takes the address if no answer
//!   came [`PROBE_WAIT`] later: a VM live-migrated here, whose source stopped. A host whose
//!   address ARP never showed cannot be asked: quiet for [`MOVE_QUIET`] is enough then. Without
//!   a frame from the port, the address is taken at the MAC table's sweep once the outside
//!   entry has aged out.
//! - A host outside heard on a port's address after the port took it: a frame with the port's
//!   MAC as source arrives on an uplink and cannot be one of the port's own frames reflected
//!   back by the physical network, because the port sent nothing out of an uplink in the last
//!   [`REFLECTION_WINDOW`], or the frame is unicast to another port's configured MAC (the switch
//!   delivers such frames locally, never out of an uplink) and that port attached at least
//!   [`REFLECTION_WINDOW`] ago. RARPs (the team's own announcements come back that way) are
//!   always reflections. Who keeps the address then depends on what the switch knew when the
//!   port took it:
//!   - in the switch's first [`SETTLE`] (after a start the MAC table is empty, so a port takes
//!     any address, a gateway's included, before the gateway is heard), the port **yields**:
//!     the frame is switched as any outside host's, and the port waits. A port that yielded is
//!     a duplicate of a host that is still there: it takes the address again only once the
//!     outside entry has aged out, never on a quiet spell or a probe;
//!   - later, the port took an address no host outside had used for a whole ageing time: its
//!     claim stands, as a secure MAC on a physical switch's port does, and the host outside is
//!     **refused** (its frames dropped on the uplink as `mac_conflict`, and a note): a host
//!     outside may not take a local port's MAC.
//! - **The operator's word**: a port whose `mac_takeover` is set owns its MAC at attach whatever
//!   is heard outside, never yields, and frames from the host outside with its address are
//!   dropped on the uplink (`mac_conflict`). Set on a port that waits, it takes the address at
//!   once: the remedy for a port a host outside keeps from its MAC (one that yielded in the
//!   first minute waits for as long as that host sends from the address once an ageing time).
//!
//! Every wait, claim, yield and takeover is reported ([`MacNote`]) for the event log.

use super::{DropReason, Location, Switch};
use crate::teaming::{PortId, UplinkId};
use crate::wire::{build_arp_probe, FlowKey, MacAddr, ETHERTYPE_RARP};
use crate::Instant;
use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use std::collections::HashMap;

/// A host outside heard from within this is there: a waiting port's frames are dropped without
/// asking it.
pub const MOVE_QUIET: Duration = Duration::from_secs(1);
/// How long a host outside has to answer the switch's ARP probe.
pub const PROBE_WAIT: Duration = Duration::from_millis(500);
/// The least time between two probes for one port.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// The longest a port's frame takes to come back from the physical network.
pub const REFLECTION_WINDOW: Duration = Duration::from_secs(1);
/// How long after its start (its clock's zero: the data plane and the simulator build their
/// switch at [`Instant::ZERO`]) the switch listens before a port's claim stands against a host
/// outside heard later: until then, hosts that simply had not spoken yet are not known.
pub const SETTLE: Duration = Duration::from_secs(60);
/// Notes kept until taken (older ones are dropped).
const NOTES_KEPT: usize = 1024;
/// Addresses whose ARP sender IPv4 address is remembered (past it, the memory starts afresh).
const ARP_SENDERS_KEPT: usize = 4096;
/// The most probes waiting to be sent.
const PROBES_QUEUED: usize = 64;

/// Where a port stands with its configured MAC (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Its interface is absent: it owns nothing.
    Detached,
    /// It owns its MAC: a static MAC-table entry.
    Owned,
    /// A host outside uses its MAC: it waits, its frames from it dropped.
    Waiting,
}

impl Claim {
    /// A stable name for status and logs.
    pub fn name(self) -> &'static str {
        match self {
            Claim::Detached => "detached",
            Claim::Owned => "owned",
            Claim::Waiting => "waiting",
        }
    }
}

/// A port's hold on its configured MAC.
#[derive(Debug, Clone)]
pub(crate) struct PortClaim {
    pub state: Claim,
    /// The operator's word: the port takes its MAC over from any host outside.
    pub takeover: bool,
    pub attached_at: Instant,
    /// When the port last sent a frame out of an uplink.
    pub sent_out_at: Option<Instant>,
    /// When it last yielded to a host outside (it then waits for the host's entry to age out).
    pub yielded_at: Option<Instant>,
    /// When the switch last asked the host outside (an ARP probe) on its behalf.
    pub probed_at: Option<Instant>,
    /// When a host outside refused on its address was last reported.
    pub refused_noted_at: Option<Instant>,
}

impl PortClaim {
    /// A port that owns its MAC from `now` (one the switch was built with).
    pub fn owned(now: Instant) -> PortClaim {
        PortClaim {
            state: Claim::Owned,
            takeover: false,
            attached_at: now,
            sent_out_at: None,
            yielded_at: None,
            probed_at: None,
            refused_noted_at: None,
        }
    }
}

/// What happened to a port's claim on its MAC, for the event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacNote {
    pub port: PortId,
    pub mac: MacAddr,
    pub kind: MacNoteKind,
}

/// See [`MacNote`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacNoteKind {
    /// At attach: a host outside, last heard at this place, uses the MAC; the port waits.
    InUse(Location),
    /// At attach: the operator's word took the MAC over from the host outside at this place.
    TakenOver(Location),
    /// A waiting port took its MAC: the host outside did not answer, or its entry aged out.
    Claimed,
    /// A host outside was heard from on the port's MAC on this uplink: the port gave it up and
    /// waits until that host's entry ages out.
    Yielded(UplinkId),
    /// A host outside was heard from on the port's MAC on this uplink, after the port's claim
    /// stood (or by the operator's word): its frames are dropped (`mac_conflict`). Reported
    /// at most once per MAC ageing time.
    Refused(UplinkId),
}

/// What a frame from an uplink with a local port's configured MAC as its source is.
pub(super) enum UplinkSource {
    /// One of the port's own frames come back: drop it.
    Reflection,
    /// A host outside, whose address the port holds (by the operator's word, or a claim that
    /// stands): drop it.
    Refused,
    /// A host outside, to which the port has now yielded: switch it as any outside frame.
    Yielded,
}

/// The IPv4 address each MAC heard on the uplinks last gave as its own in ARP, per VLAN: what
/// the switch asks a host outside for before a port takes its MAC.
#[derive(Debug, Clone, Default)]
pub(super) struct ArpSenders(HashMap<(Option<u16>, MacAddr), Ipv4Addr>);

impl ArpSenders {
    /// Remembers `key`'s ARP sender address (an ARP frame from an uplink).
    pub fn note(&mut self, key: &FlowKey) {
        let (Some(_), Some(IpAddr::V4(ip))) = (key.arp_op, key.src_ip) else {
            return;
        };
        if ip.is_unspecified() || key.src_mac.is_multicast() {
            return;
        }
        if self.0.len() >= ARP_SENDERS_KEPT && !self.0.contains_key(&(key.vlan, key.src_mac)) {
            self.0.clear();
        }
        self.0.insert((key.vlan, key.src_mac), ip);
    }
}

impl Switch {
    /// Notes the ARP sender address in `frame`, an ARP frame heard on an uplink and switched
    /// elsewhere (the kernel fast path hands the engine a copy), as [`Switch::forward`] notes
    /// those it switches itself. Anything else is ignored.
    pub fn note_uplink_arp(&mut self, frame: &[u8]) {
        if let Ok(key) = crate::wire::parse(frame) {
            if key.arp_op.is_some() {
                self.arp_senders.note(&key);
            }
        }
    }

    /// Port `p`'s interface is attached (a tap appeared): it takes its MAC unless a host
    /// outside uses it (see the module documentation), announcing it if it does.
    pub fn attach_port(&mut self, p: PortId, now: Instant) {
        let Some(g) = self.guards.get_mut(&p) else { return };
        if g.claim.state != Claim::Detached {
            return;
        }
        g.claim.attached_at = now;
        let (vlan, mac, takeover) = (g.vlan, g.mac, g.claim.takeover);
        match self.heard_outside(vlan, mac, now) {
            None => self.own(p, true),
            Some((at, _)) if takeover => {
                self.own(p, true);
                self.note(p, mac, MacNoteKind::TakenOver(at));
            }
            Some((at, _)) => {
                self.claim_mut(p).state = Claim::Waiting;
                self.note(p, mac, MacNoteKind::InUse(at));
            }
        }
    }

    /// Port `p`'s interface went away: it owns nothing (its static entry and every address
    /// learned behind it are forgotten) until it attaches again, when its claim starts afresh
    /// (a yield or a probe of before does not carry over).
    pub fn detach_port(&mut self, p: PortId) {
        let Some(g) = self.guards.get_mut(&p) else { return };
        g.claim.state = Claim::Detached;
        g.claim.yielded_at = None;
        g.claim.probed_at = None;
        g.changed = None;
        self.macs.remove_port(p);
    }

    /// Sets port `p`'s `mac_takeover` (the operator's word, see the module documentation). Set
    /// on a port waiting for its MAC, it takes the MAC at once (announced, with a note): the
    /// operator's remedy for a port kept from its MAC by a host outside. Cleared, a port that
    /// owns its MAC keeps it.
    pub fn set_mac_takeover(&mut self, p: PortId, takeover: bool, now: Instant) {
        let Some(g) = self.guards.get_mut(&p) else { return };
        g.claim.takeover = takeover;
        if takeover && g.claim.state == Claim::Waiting {
            g.claim.yielded_at = None;
            g.claim.probed_at = None;
            let (vlan, mac) = (g.vlan, g.mac);
            let at = self.heard_outside(vlan, mac, now);
            self.own(p, true);
            match at {
                Some((at, _)) => self.note(p, mac, MacNoteKind::TakenOver(at)),
                None => self.note(p, mac, MacNoteKind::Claimed),
            }
        }
    }

    /// Where port `p` stands with its MAC.
    pub fn mac_claim(&self, p: PortId) -> Option<Claim> {
        self.guards.get(&p).map(|g| g.claim.state)
    }

    /// The next note about ports' claims on their MACs, for the event log.
    pub fn poll_mac_note(&mut self) -> Option<MacNote> {
        self.mac_notes.pop_front()
    }

    /// Decides whether waiting port `p` may send from its configured MAC now (see the module
    /// documentation): it takes the MAC if the host outside is gone (did not answer a probe,
    /// or cannot be asked and was quiet) unless the port yielded to it; else the frame is to
    /// be dropped (`mac_conflict`), and the host is asked if it is time.
    pub(super) fn send_while_waiting(&mut self, p: PortId, now: Instant) -> Result<(), DropReason> {
        let g = &self.guards[&p];
        let (vlan, mac, claim) = (g.vlan, g.mac, g.claim.clone());
        let Some((at, seen)) = self.heard_outside(vlan, mac, now) else {
            self.claim_waiting(p, false);
            return Ok(());
        };
        if claim.yielded_at.is_some() || now - seen < MOVE_QUIET {
            return Err(DropReason::MacConflict);
        }
        let ip = self.arp_senders.0.get(&(vlan, mac)).copied();
        let probe = match at {
            Location::Remote(u) => ip.zip(self.uplink_macs.get(u.0).copied().flatten()).map(|x| (u, x)),
            _ => None,
        };
        match (probe, claim.probed_at) {
            // Asked, and heard from since: there.
            (Some(_), Some(asked)) if seen >= asked => {}
            // Asked, no answer in time: gone.
            (Some(_), Some(asked)) if now - asked >= PROBE_WAIT && now - asked < PROBE_EVERY + PROBE_WAIT => {
                self.claim_waiting(p, false);
                return Ok(());
            }
            // Cannot be asked: quiet is all there is to go by.
            (None, _) => {
                self.claim_waiting(p, false);
                return Ok(());
            }
            _ => {}
        }
        if let (Some((u, (ip, from))), true) = (probe, claim.probed_at.is_none_or(|t| now - t >= PROBE_EVERY)) {
            if self.own_frames.len() < PROBES_QUEUED {
                self.own_frames.push_back((u, build_arp_probe(from, mac, ip, vlan)));
            }
            self.claim_mut(p).probed_at = Some(now);
        }
        Err(DropReason::MacConflict)
    }

    /// Decides what a frame (`key`) from uplink `u` whose source is port `p`'s configured MAC
    /// is (see [`UplinkSource`] and the module documentation), yielding the address if a host
    /// outside sent it.
    pub(super) fn heard_on_uplink(&mut self, p: PortId, u: UplinkId, key: &FlowKey, now: Instant) -> UplinkSource {
        let g = &self.guards[&p];
        if key.ether_type == ETHERTYPE_RARP || g.claim.state != Claim::Owned {
            return UplinkSource::Reflection;
        }
        let quiet = g.claim.sent_out_at.is_none_or(|t| now - t >= REFLECTION_WINDOW);
        let to_settled_port = !key.dst_mac.is_multicast()
            && self.macs.static_port(g.vlan, key.dst_mac).is_some_and(|q| {
                q != p
                    && self
                        .guards
                        .get(&q)
                        .is_some_and(|h| now - h.claim.attached_at >= REFLECTION_WINDOW)
            });
        if !(quiet || to_settled_port) {
            return UplinkSource::Reflection;
        }
        let (vlan, mac) = (g.vlan, g.mac);
        if g.claim.takeover || now >= Instant::ZERO + SETTLE {
            let ageing = self.macs.ageing();
            let claim = self.claim_mut(p);
            if claim.refused_noted_at.is_none_or(|t| now - t >= ageing) {
                claim.refused_noted_at = Some(now);
                self.note(p, mac, MacNoteKind::Refused(u));
            }
            return UplinkSource::Refused;
        }
        self.macs.remove_static(vlan, mac, p);
        let claim = self.claim_mut(p);
        claim.state = Claim::Waiting;
        claim.yielded_at = Some(now);
        self.note(p, mac, MacNoteKind::Yielded(u));
        UplinkSource::Yielded
    }

    /// Records that port `p` sent a frame out of an uplink at `now` (so its frames coming
    /// back are told from a host outside's).
    pub(super) fn sent_out(&mut self, p: PortId, now: Instant) {
        if let Some(g) = self.guards.get_mut(&p) {
            g.claim.sent_out_at = Some(now);
        }
    }

    /// Gives each waiting port whose address no host outside holds any more (its entry aged
    /// out) its MAC, announced: run at each sweep of the MAC table.
    pub(super) fn claim_freed(&mut self, now: Instant) {
        let waiting: Vec<PortId> = (self.guards.iter())
            .filter(|(_, g)| g.claim.state == Claim::Waiting)
            .map(|(p, _)| *p)
            .collect();
        for p in waiting {
            let (vlan, mac) = (self.guards[&p].vlan, self.guards[&p].mac);
            if self.heard_outside(vlan, mac, now).is_none() {
                self.claim_waiting(p, true);
            }
        }
    }

    /// Where a host outside was last heard from on `mac` in `vlan` (behind an uplink or a
    /// remote VTEP), and when, if its entry has not aged out.
    fn heard_outside(&self, vlan: Option<u16>, mac: MacAddr, now: Instant) -> Option<(Location, Instant)> {
        match self.macs.heard(vlan, mac, now)? {
            (at @ (Location::Remote(_) | Location::Tunnel(_)), Some(seen)) => Some((at, seen)),
            _ => None,
        }
    }

    /// Waiting port `p` takes its MAC (the host outside is gone), announced with `announce`,
    /// and starts afresh.
    fn claim_waiting(&mut self, p: PortId, announce: bool) {
        let claim = self.claim_mut(p);
        claim.yielded_at = None;
        claim.probed_at = None;
        self.own(p, announce);
        let mac = self.guards[&p].mac;
        self.note(p, mac, MacNoteKind::Claimed);
    }

    /// Port `p` owns its MAC: a static entry (replacing what was learned there), announced
    /// with `announce`.
    fn own(&mut self, p: PortId, announce: bool) {
        let g = self.guards.get_mut(&p).expect("a known port");
        g.claim.state = Claim::Owned;
        let (vlan, mac) = (g.vlan, g.mac);
        self.macs.add_static(vlan, mac, p);
        if announce {
            self.team.announce(p);
        }
    }

    fn claim_mut(&mut self, p: PortId) -> &mut PortClaim {
        &mut self.guards.get_mut(&p).expect("a known port").claim
    }

    fn note(&mut self, port: PortId, mac: MacAddr, kind: MacNoteKind) {
        if self.mac_notes.len() == NOTES_KEPT {
            self.mac_notes.pop_front();
        }
        self.mac_notes.push_back(MacNote { port, mac, kind });
    }
}
