//! Which connections the API's listeners keep, so that idle, slow, many or churning clients
//! cannot starve it.
//!
//! The model. Each listener keeps at most [`MAX_CONNECTIONS`] at once (a controller's TLS
//! listener on the network [`MAX_NETWORK_CONNECTIONS`], for its hosts), counted separately, so
//! a flood on one never touches the other: the unix socket, root's alone, stays usable while
//! the TCP one is full, and the two caps together stay far below the usual limit of 1024 open
//! files. On the unix socket a newcomer that finds it full is refused.
//!
//! On TCP every request must carry the token, but a connection is taken before its first
//! request comes, so until one of its requests has carried the right token it is *unproven*,
//! and anyone on the host may hold unproven connections. Each connection has a *peer*, the
//! local user owning the client's socket ([`super::peer`]), and the slots are shared between
//! peers as a fair queue shares a link, so whoever churns connections churns their own:
//!
//! - a peer holds at most [`MAX_UNPROVEN_PER_PEER`] unproven connections; its next one evicts
//!   its own oldest unproven connection that has had [`GRACE`] to present the token, or, if
//!   none has, is refused;
//! - a newcomer that finds the listener full evicts the oldest unproven connection of the peer
//!   holding the most, if that peer holds at least two more than the newcomer's peer does
//!   (each eviction then moves the shares toward equal, never back and forth); failing that,
//!   the oldest unproven connection of anyone that has had its grace; failing that, it is
//!   refused.
//!
//! So one user without the token holds at most 16 of the 64 slots however fast it reconnects,
//! a client with the token always finds a slot at once, and its connection, proven by its
//! first request, is never evicted; several users colluding each hold fewer as more come, and
//! a newcomer of a user holding fewer evicts theirs. Every refusal and eviction is counted by
//! reason ([`Tally`], in `/metrics`).

use super::peer::Peer;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Connections kept at once per listener (the unix socket's, the loopback TCP one's).
pub const MAX_CONNECTIONS: usize = 64;
/// Connections kept at once by a TLS listener on the network, which serves every host of a
/// cluster (each reporting every second on a connection of its own).
pub const MAX_NETWORK_CONNECTIONS: usize = 1024;
/// Unproven TCP connections one peer may hold at once.
pub const MAX_UNPROVEN_PER_PEER: usize = 16;
/// How long a TCP connection may take to present its token before its own peer's newcomers,
/// or anyone's once the listener is full, may evict it.
pub const GRACE: Duration = Duration::from_secs(1);

/// A connection's standing, shared by its task, its listener and the token check (which finds
/// it in the request's extensions).
#[derive(Debug)]
pub struct Standing {
    pub(super) opened: Instant,
    pub(super) peer: Peer,
    proven: AtomicBool,
    pub(super) evict: Notify,
}

impl Standing {
    pub(super) fn new(opened: Instant, peer: Peer) -> Standing {
        Standing {
            opened,
            peer,
            proven: AtomicBool::new(false),
            evict: Notify::new(),
        }
    }

    /// Marks the connection as having presented the right token: it is not evicted.
    pub fn prove(&self) {
        self.proven.store(true, Ordering::Relaxed);
    }

    fn unproven(&self) -> bool {
        !self.proven.load(Ordering::Relaxed)
    }
}

/// Which rules a listener keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    /// The unix socket: only its owner can connect; a cap, nothing more.
    Owner,
    /// TCP with a bearer token: peers, their shares and eviction.
    Token,
    /// TLS on the network: as `Token`, with room for a cluster's hosts
    /// ([`MAX_NETWORK_CONNECTIONS`]).
    Network,
}

impl Rules {
    /// How many connections a listener under these rules keeps at once.
    pub fn capacity(self) -> usize {
        match self {
            Rules::Owner | Rules::Token => MAX_CONNECTIONS,
            Rules::Network => MAX_NETWORK_CONNECTIONS,
        }
    }
}

/// Where a newcomer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Take,
    /// Taken in place of the connection at this index, closed for this reason.
    Evict(usize, Eviction),
    Refuse(Refusal),
}

/// Why a connection was evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// Its peer opened another past its share.
    OwnPeer,
    /// The listener was full and its peer held the most.
    Heaviest,
    /// The listener was full and it had had its grace.
    PastGrace,
}

/// Why a newcomer was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its peer holds its share, none of it past its grace.
    PeerLimit,
    /// The listener is full and nothing may be evicted.
    Full,
    /// Its client had closed its socket already.
    Gone,
}

/// Decides where a newcomer from `peer` goes at `now`, given `table`, the listener's
/// connections oldest first (see the module documentation for the rules and why).
pub fn admit(table: &[Arc<Standing>], peer: Peer, rules: Rules, now: Instant) -> Admission {
    if rules == Rules::Owner {
        return match table.len() < rules.capacity() {
            true => Admission::Take,
            false => Admission::Refuse(Refusal::Full),
        };
    }
    let past_grace = |c: &Standing| now.duration_since(c.opened) >= GRACE;
    let held = table.iter().filter(|c| c.peer == peer && c.unproven()).count();
    if held >= MAX_UNPROVEN_PER_PEER {
        return match table
            .iter()
            .position(|c| c.peer == peer && c.unproven() && past_grace(c))
        {
            Some(i) => Admission::Evict(i, Eviction::OwnPeer),
            None => Admission::Refuse(Refusal::PeerLimit),
        };
    }
    if table.len() < rules.capacity() {
        return Admission::Take;
    }
    if let Some((heaviest, n)) = heaviest(table) {
        if n >= held + 2 {
            if let Some(i) = table.iter().position(|c| c.peer == heaviest && c.unproven()) {
                return Admission::Evict(i, Eviction::Heaviest);
            }
        }
    }
    match table.iter().position(|c| c.unproven() && past_grace(c)) {
        Some(i) => Admission::Evict(i, Eviction::PastGrace),
        None => Admission::Refuse(Refusal::Full),
    }
}

/// The peer holding the most unproven connections, and how many (on a tie, the one whose
/// unproven connection is oldest).
fn heaviest(table: &[Arc<Standing>]) -> Option<(Peer, usize)> {
    let mut counts: HashMap<Peer, usize> = HashMap::new();
    for c in table.iter().filter(|c| c.unproven()) {
        *counts.entry(c.peer).or_default() += 1;
    }
    let mut best: Option<(Peer, usize)> = None;
    for c in table.iter().filter(|c| c.unproven()) {
        let n = counts[&c.peer];
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((c.peer, n));
        }
    }
    best
}

/// What the TCP listener turned away or evicted, by reason, since start.
#[derive(Debug, Default)]
pub struct Tally {
    refused: [AtomicU64; 3],
    evicted: [AtomicU64; 3],
}

/// The TCP listener's tally (a process serves one TCP API, the switch's or the controller's).
pub static TCP_TALLY: Tally = Tally {
    refused: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
    evicted: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
};

impl Tally {
    pub fn refused(&self, why: Refusal) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn evicted(&self, why: Eviction) {
        self.evicted[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The refusals by reason label: `peer_limit`, `full`, `gone`.
    pub fn refusals(&self) -> [(&'static str, u64); 3] {
        let n = |i: usize| self.refused[i].load(Ordering::Relaxed);
        [("peer_limit", n(0)), ("full", n(1)), ("gone", n(2))]
    }

    /// The evictions by reason label: `own_peer`, `heaviest_peer`, `past_grace`.
    pub fn evictions(&self) -> [(&'static str, u64); 3] {
        let n = |i: usize| self.evicted[i].load(Ordering::Relaxed);
        [("own_peer", n(0)), ("heaviest_peer", n(1)), ("past_grace", n(2))]
    }

    /// The two counters in the Prometheus text format, for a `/metrics` written by hand.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (name, help, values) in [
            (
                "teamster_api_tcp_connections_refused_total",
                "TCP API connections closed at once, by reason.",
                self.refusals(),
            ),
            (
                "teamster_api_tcp_connections_evicted_total",
                "TCP API connections without the token closed for a newcomer, by reason.",
                self.evictions(),
            ),
        ] {
            let family = name.trim_end_matches("_total");
            out.push_str(&format!("# HELP {family} {help}\n# TYPE {family} counter\n"));
            for (reason, v) in values {
                out.push_str(&format!("{name}{{reason=\"{reason}\"}} {v}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: Peer = Peer::User(1000);
    const MALLORY: Peer = Peer::User(65534);

    fn table(t0: Instant, who: &[(Peer, u64, bool)]) -> Vec<Arc<Standing>> {
        who.iter()
            .map(|&(peer, ms, proven)| {
                let c = Arc::new(Standing::new(t0 + Duration::from_millis(ms), peer));
                if proven {
                    c.prove();
                }
                c
            })
            .collect()
    }

    #[test]
    fn the_unix_socket_is_capped_and_nothing_more() {
        let t0 = Instant::now();
        let full = table(t0, &[(Peer::SocketOwner, 0, false); MAX_CONNECTIONS]);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(
            admit(&full, Peer::SocketOwner, Rules::Owner, later),
            Admission::Refuse(Refusal::Full)
        );
        assert_eq!(
            admit(&full[1..], Peer::SocketOwner, Rules::Owner, later),
            Admission::Take
        );
    }

    #[test]
    fn a_peer_past_its_share_evicts_its_own_oldest_past_grace_or_is_refused() {
        let t0 = Instant::now();
        let mut who = vec![(ALICE, 0, false)];
        who.extend((0..MAX_UNPROVEN_PER_PEER as u64).map(|i| (MALLORY, 100 + i * 100, false)));
        let t = table(t0, &who);
        // Mallory's oldest opened at 0.1 s: within its grace until 1.1 s.
        assert_eq!(
            admit(&t, MALLORY, Rules::Token, t0 + Duration::from_millis(1000)),
            Admission::Refuse(Refusal::PeerLimit)
        );
        assert_eq!(
            admit(&t, MALLORY, Rules::Token, t0 + Duration::from_millis(1100)),
            Admission::Evict(1, Eviction::OwnPeer)
        );
        // Alice is not held back by Mallory's share, nor is her connection the one evicted.
        assert_eq!(
            admit(&t, ALICE, Rules::Token, t0 + Duration::from_secs(60)),
            Admission::Take
        );
        // A proven connection does not count against its peer's share.
        t[1].prove();
        assert_eq!(admit(&t, MALLORY, Rules::Token, t0), Admission::Take);
    }

    #[test]
    fn a_full_listener_evicts_from_the_heaviest_peer_then_past_grace_then_refuses() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_millis(500);
        // 48 proven, Alice's 2 unproven, and 14 unproven of each of... one heavier peer.
        let mut who: Vec<(Peer, u64, bool)> = (0..48).map(|_| (Peer::User(0), 0, true)).collect();
        who.extend([(ALICE, 10, false), (ALICE, 20, false)]);
        who.extend((0..14).map(|i| (MALLORY, 30 + i, false)));
        let t = table(t0, &who);
        assert_eq!(t.len(), MAX_CONNECTIONS);
        // Anyone holding fewer than 13 evicts Mallory's oldest, within its grace or not.
        assert_eq!(
            admit(&t, Peer::User(7), Rules::Token, now),
            Admission::Evict(50, Eviction::Heaviest)
        );
        assert_eq!(
            admit(&t, ALICE, Rules::Token, now),
            Admission::Evict(50, Eviction::Heaviest)
        );
        // Mallory itself evicts nothing of Alice's within its grace: refused.
        assert_eq!(admit(&t, MALLORY, Rules::Token, now), Admission::Refuse(Refusal::Full));
        // Past the grace, the oldest unproven of anyone.
        assert_eq!(
            admit(&t, MALLORY, Rules::Token, t0 + Duration::from_secs(2)),
            Admission::Evict(48, Eviction::PastGrace)
        );
        // Two peers one apart: no eviction back and forth.
        let mut who: Vec<(Peer, u64, bool)> = (0..56).map(|_| (Peer::User(0), 0, true)).collect();
        who.extend((0..4).map(|i| (ALICE, i, false)));
        who.extend((0..4).map(|i| (MALLORY, 10 + i, false)));
        let t = table(t0, &who);
        assert_eq!(admit(&t, ALICE, Rules::Token, now), Admission::Refuse(Refusal::Full));
        assert_eq!(
            admit(&t, Peer::User(7), Rules::Token, now),
            Admission::Evict(56, Eviction::Heaviest)
        );
    }

    #[test]
    fn the_tally_counts_by_reason() {
        let t = Tally::default();
        t.refused(Refusal::Gone);
        t.refused(Refusal::PeerLimit);
        t.refused(Refusal::PeerLimit);
        t.evicted(Eviction::Heaviest);
        assert_eq!(t.refusals(), [("peer_limit", 2), ("full", 0), ("gone", 1)]);
        let text = t.text();
        assert!(
            text.contains("teamster_api_tcp_connections_evicted_total{reason=\"heaviest_peer\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE teamster_api_tcp_connections_refused counter"),
            "{text}"
        );
    }
}
