//! The underlay's ARP as a VTEP needs it: answering for this host's VTEP address, and finding
//! the MAC each remote VTEP is reached at.
//!
//! Model. The VTEP owns one IPv4 address on the underlay and answers ARP requests for it (from
//! the MAC of the uplink the request arrived on). For each listed remote VTEP it keeps the MAC
//! found by ARP: the source of an ARP request or reply addressed to this VTEP from that address
//! (the switch hands over no ARP from a local port's MAC: see [`crate::switch`]). A VXLAN frame
//! never moves it: a frame from a listed remote's address is taken only from the MAC that
//! remote was found at ([`VtepNeighbors::heard`]), and confirms it; one from another MAC, or
//! before the remote is found, is refused and makes the VTEP ask (so a remote whose MAC really
//! changed is found again within [`RETRY`], by its own answer). A remote with no MAC yet is
//! asked (a broadcast ARP request) when a frame needs it, at most once a second; a known MAC is
//! used until replaced, and asked again when nothing has confirmed it for [`REFRESH`] (a MAC
//! that changed answers then; one whose host went away keeps being asked, once per
//! [`REFRESH`]). Only listed remotes are learned, so the table is bounded by the
//! configuration, and at most [`MAX_QUEUED`] frames wait to be sent: a flood of requests for the
//! VTEP's address cannot grow it.

use crate::wire::{build_arp_reply, build_arp_request, FlowKey, MacAddr};
use crate::Instant;
use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use std::collections::{HashMap, VecDeque};

/// How long a remote VTEP's MAC is used without confirmation before it is asked again.
pub const REFRESH: Duration = Duration::from_secs(60);
/// The least time between two requests for one remote VTEP.
pub const RETRY: Duration = Duration::from_secs(1);
/// The most frames waiting to be sent; more are dropped (and counted).
pub const MAX_QUEUED: usize = 64;

#[derive(Debug, Clone, Copy, Default)]
struct Neighbor {
    mac: Option<MacAddr>,
    /// When the MAC was last heard from.
    confirmed: Option<Instant>,
    /// When it was last asked for.
    asked: Option<Instant>,
}

/// What a VXLAN frame's outer source says of the remote VTEP it claims to come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// From the MAC the remote was found at: take the frame.
    Confirmed,
    /// The remote's MAC is not known yet (it is being asked for): the frame cannot be checked.
    Unresolved,
    /// From another MAC than the remote's: someone else uses its address.
    Other,
}

/// ARP state of one VTEP.
#[derive(Debug, Clone)]
pub struct VtepNeighbors {
    local: Ipv4Addr,
    remotes: HashMap<Ipv4Addr, Neighbor>,
    queued: VecDeque<Vec<u8>>,
    /// Frames not queued because [`MAX_QUEUED`] were waiting.
    pub dropped: u64,
}

impl VtepNeighbors {
    /// The VTEP at `local`, knowing nothing yet of `remotes`.
    pub fn new(local: Ipv4Addr, remotes: &[Ipv4Addr]) -> VtepNeighbors {
        VtepNeighbors {
            local,
            remotes: remotes.iter().map(|r| (*r, Neighbor::default())).collect(),
            queued: VecDeque::new(),
            dropped: 0,
        }
    }

    pub fn local(&self) -> Ipv4Addr {
        self.local
    }

    fn queue(&mut self, frame: Vec<u8>) {
        if self.queued.len() >= MAX_QUEUED {
            self.dropped += 1;
        } else {
            self.queued.push_back(frame);
        }
    }

    /// Takes an ARP frame from the underlay (parsed as `key`, arrived on an uplink whose MAC
    /// is `our_mac`): learns a listed remote VTEP's MAC from it, and answers a request for the
    /// VTEP's address. Returns whether the frame was for this VTEP (and so is not to be
    /// switched further).
    pub fn handle_arp(&mut self, key: &FlowKey, our_mac: MacAddr, now: Instant) -> bool {
        let (Some(op), Some(IpAddr::V4(sender)), Some(IpAddr::V4(target))) = (key.arp_op, key.src_ip, key.dst_ip)
        else {
            return false;
        };
        if key.src_mac.is_multicast() || target != self.local {
            return false;
        }
        // Learned only from ARP addressed to this VTEP (a request for it, a reply to it): an
        // unsolicited announcement on the underlay does not move a remote VTEP.
        if let Some(n) = self.remotes.get_mut(&sender) {
            n.mac = Some(key.src_mac);
            n.confirmed = Some(now);
        }
        if op == 1 && sender != self.local && !sender.is_unspecified() {
            self.queue(build_arp_reply(our_mac, self.local, key.src_mac, sender));
        }
        true
    }

    /// Checks a VXLAN frame from listed remote `remote` sent from outer source `mac` (see
    /// [`Heard`]): the remote's known MAC is confirmed; a frame that cannot be checked, or
    /// from another MAC, makes the VTEP ask for the remote (from `our_mac`, at most once per
    /// [`RETRY`]) and never moves it. An unlisted remote is [`Heard::Other`].
    pub fn heard(&mut self, remote: Ipv4Addr, mac: MacAddr, our_mac: MacAddr, now: Instant) -> Heard {
        let Some(n) = self.remotes.get_mut(&remote) else {
            return Heard::Other;
        };
        let heard = match n.mac {
            Some(known) if known == mac => {
                n.confirmed = Some(now);
                return Heard::Confirmed;
            }
            Some(_) => Heard::Other,
            None => Heard::Unresolved,
        };
        if n.asked.is_none_or(|t| now.saturating_duration_since(t) >= RETRY) {
            self.ask(remote, our_mac, now);
        }
        heard
    }

    /// The MAC to send to `remote` at, if known; asks for it (from `our_mac`) if it is not
    /// known and was not asked for in the last [`RETRY`]. None for an unlisted remote.
    pub fn resolve(&mut self, remote: Ipv4Addr, our_mac: MacAddr, now: Instant) -> Option<MacAddr> {
        let n = *self.remotes.get(&remote)?;
        if n.mac.is_none() && n.asked.is_none_or(|t| now.saturating_duration_since(t) >= RETRY) {
            self.ask(remote, our_mac, now);
        }
        n.mac
    }

    fn ask(&mut self, remote: Ipv4Addr, our_mac: MacAddr, now: Instant) {
        self.remotes.get_mut(&remote).expect("a listed remote").asked = Some(now);
        self.queue(build_arp_request(our_mac, self.local, remote));
    }

    /// When a known MAC next needs asking again.
    pub fn poll_at(&self) -> Option<Instant> {
        self.remotes
            .values()
            .filter_map(|n| {
                let since = n.confirmed?.max(n.asked.unwrap_or(Instant::ZERO));
                Some(since + REFRESH)
            })
            .min()
    }

    /// Asks again for every known MAC unconfirmed for [`REFRESH`] (and not asked in as long).
    pub fn handle_timeout(&mut self, our_mac: MacAddr, now: Instant) {
        let due: Vec<Ipv4Addr> = self
            .remotes
            .iter()
            .filter(|(_, n)| {
                n.confirmed.is_some_and(|c| {
                    let since = c.max(n.asked.unwrap_or(Instant::ZERO));
                    now.saturating_duration_since(since) >= REFRESH
                })
            })
            .map(|(r, _)| *r)
            .collect();
        for r in due {
            self.ask(r, our_mac, now);
        }
    }

    /// The next ARP frame to send on the underlay.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.queued.pop_front()
    }

    /// What is known of each remote VTEP: its address and MAC, sorted by address.
    pub fn known(&self) -> Vec<(Ipv4Addr, Option<MacAddr>)> {
        let mut v: Vec<_> = self.remotes.iter().map(|(r, n)| (*r, n.mac)).collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{build_gratuitous_arp, parse};

    const US: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const THEM: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn vtep() -> VtepNeighbors {
        VtepNeighbors::new(ip("192.0.2.1"), &[ip("192.0.2.2")])
    }

    fn at(s: u64) -> Instant {
        Instant::from_secs(s)
    }

    #[test]
    fn answers_for_its_address_and_learns_the_asker() {
        let mut v = vtep();
        let ask = parse(&build_arp_request(THEM, ip("192.0.2.2"), ip("192.0.2.1"))).unwrap();
        assert!(v.handle_arp(&ask, US, at(1)));
        let reply = parse(&v.poll_transmit().expect("a reply")).unwrap();
        assert_eq!((reply.arp_op, reply.src_mac, reply.dst_mac), (Some(2), US, THEM));
        assert_eq!(
            (reply.src_ip, reply.dst_ip),
            (Some(ip("192.0.2.1").into()), Some(ip("192.0.2.2").into()))
        );
        assert_eq!(v.resolve(ip("192.0.2.2"), US, at(1)), Some(THEM));
        assert!(v.poll_transmit().is_none(), "known: nothing asked");
    }

    #[test]
    fn other_arp_is_not_its_business_and_unlisted_senders_are_not_learned() {
        let mut v = vtep();
        let other = parse(&build_arp_request(THEM, ip("192.0.2.9"), ip("192.0.2.7"))).unwrap();
        assert!(!v.handle_arp(&other, US, at(1)));
        let unlisted = parse(&build_arp_request(THEM, ip("192.0.2.9"), ip("192.0.2.1"))).unwrap();
        assert!(v.handle_arp(&unlisted, US, at(1)), "answered: it asks for our address");
        assert_eq!(v.known(), vec![(ip("192.0.2.2"), None)]);
        // Its own address announced by someone else (a gratuitous ARP) gets no reply.
        let garp = parse(&build_gratuitous_arp(THEM, ip("192.0.2.1"), None)).unwrap();
        v.poll_transmit();
        assert!(v.handle_arp(&garp, US, at(1)));
        assert!(v.poll_transmit().is_none());
    }

    #[test]
    fn an_unknown_remote_is_asked_once_a_second_until_it_answers() {
        let mut v = vtep();
        assert_eq!(v.resolve(ip("192.0.2.2"), US, at(10)), None);
        let ask = parse(&v.poll_transmit().unwrap()).unwrap();
        assert_eq!(
            (ask.arp_op, ask.dst_mac, ask.dst_ip),
            (Some(1), MacAddr::BROADCAST, Some(ip("192.0.2.2").into()))
        );
        assert_eq!(v.resolve(ip("192.0.2.2"), US, Instant::from_millis(10_500)), None);
        assert!(v.poll_transmit().is_none(), "not again within a second");
        v.resolve(ip("192.0.2.2"), US, at(11));
        assert!(v.poll_transmit().is_some());
        let answer = parse(&build_arp_reply(THEM, ip("192.0.2.2"), US, ip("192.0.2.1"))).unwrap();
        assert!(v.handle_arp(&answer, US, at(11)));
        assert_eq!(v.resolve(ip("192.0.2.2"), US, at(12)), Some(THEM));
        assert_eq!(v.resolve(ip("192.0.2.99"), US, at(12)), None, "unlisted");
    }

    /// Teaches `v` that 192.0.2.2 is at THEM, by its ARP request for our address at `t`.
    fn learn_them(v: &mut VtepNeighbors, t: Instant) {
        let ask = parse(&build_arp_request(THEM, ip("192.0.2.2"), ip("192.0.2.1"))).unwrap();
        assert!(v.handle_arp(&ask, US, t));
        v.poll_transmit().expect("our answer");
    }

    #[test]
    fn a_known_mac_is_asked_again_when_unconfirmed_and_traffic_confirms_it() {
        let mut v = vtep();
        learn_them(&mut v, at(0));
        assert_eq!(v.poll_at(), Some(at(60)));
        assert_eq!(v.heard(ip("192.0.2.2"), THEM, US, at(30)), Heard::Confirmed);
        v.handle_timeout(US, at(60));
        assert!(v.poll_transmit().is_none(), "confirmed 30 s ago");
        assert_eq!(v.poll_at(), Some(at(90)));
        v.handle_timeout(US, at(90));
        assert!(v.poll_transmit().is_some());
        assert_eq!(v.poll_at(), Some(at(150)), "asked at 90: next at 150");
        assert_eq!(
            v.resolve(ip("192.0.2.2"), US, at(91)),
            Some(THEM),
            "still used while asked"
        );
    }

    /// A VXLAN frame never moves a remote: before ARP found it, or from another MAC, it is
    /// refused and the remote asked for (at most once a second); the remote's own answer
    /// decides.
    #[test]
    fn vxlan_from_a_remotes_address_is_taken_only_from_the_mac_arp_found() {
        let mut v = vtep();
        let (remote, thief) = (ip("192.0.2.2"), MacAddr([2, 0, 0, 0, 0, 0x66]));
        assert_eq!(v.heard(remote, thief, US, at(1)), Heard::Unresolved);
        let ask = parse(&v.poll_transmit().expect("asked")).unwrap();
        assert_eq!((ask.arp_op, ask.dst_ip), (Some(1), Some(remote.into())));
        assert_eq!(v.known(), vec![(remote, None)], "not learned from VXLAN");
        learn_them(&mut v, at(2));
        assert_eq!(v.heard(remote, thief, US, at(3)), Heard::Other);
        assert!(v.poll_transmit().is_some(), "a different MAC: asked again");
        assert_eq!(v.heard(remote, thief, US, Instant::from_millis(3_500)), Heard::Other);
        assert!(v.poll_transmit().is_none(), "not again within a second");
        assert_eq!(v.resolve(remote, US, at(4)), Some(THEM), "still the remote's own MAC");
        assert_eq!(v.heard(remote, THEM, US, at(4)), Heard::Confirmed);
        assert_eq!(v.heard(ip("192.0.2.9"), THEM, US, at(4)), Heard::Other, "unlisted");
        // A remote whose MAC really changed answers the question, and is then taken.
        let moved = MacAddr([2, 0, 0, 0, 0, 0x22]);
        assert_eq!(v.heard(remote, moved, US, at(6)), Heard::Other);
        let answer = parse(&build_arp_reply(moved, remote, US, ip("192.0.2.1"))).unwrap();
        assert!(v.handle_arp(&answer, US, at(6)));
        assert_eq!(v.heard(remote, moved, US, at(6)), Heard::Confirmed);
    }

    #[test]
    fn a_request_flood_cannot_grow_the_queue() {
        let mut v = vtep();
        let ask = parse(&build_arp_request(THEM, ip("192.0.2.2"), ip("192.0.2.1"))).unwrap();
        for _ in 0..10_000 {
            v.handle_arp(&ask, US, at(1));
        }
        assert_eq!(v.queued.len(), MAX_QUEUED);
        assert_eq!(v.dropped, 10_000 - MAX_QUEUED as u64);
    }
}
