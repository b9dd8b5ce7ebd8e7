//! Who is at the other end of a connection to the API's TCP listener.
//!
//! The model. The listener is on loopback, so every client is a process of this host, and
//! every local user connects from the same 127.0.0.1: the address tells users apart no more
//! than it tells a monitoring agent from someone flooding the port. What does tell them apart
//! is the user owning the client's socket, which the kernel records when the socket is made
//! (a user namespace does not change it; passing the descriptor on would be the owner's own
//! doing). TCP has no SO_PEERCRED, but on loopback the client's socket is in this host's own
//! TCP table, and sock_diag (the netlink family `ss` uses) looks it up by its four-tuple in
//! one request and answers with its owner's uid and its inode.
//!
//! A client of the TLS listener on the network that is not in this host's table is on another
//! machine: its peer is its address.
//!
//! A peer is therefore the uid owning the client's socket. A client socket no process holds
//! any more (closed: an orphan or a TIME-WAIT entry, inode 0, which sock_diag reports as
//! uid 0) is not root's: the connection is [`Found::Gone`] and is closed at once, since no one
//! is left to read an answer. Where the table cannot answer (no netlink, an error, a client
//! not in this namespace's table) the peer is its address: per-address limits still hold.

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::{Socket, SocketAddr as NetlinkAddr};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How long a lookup waits for the kernel's answer (it comes at once; this only bounds a
/// kernel that never answers, so the listener cannot hang).
const ANSWER_WAIT: Duration = Duration::from_millis(100);
/// An answer is one message of a few hundred bytes.
const ANSWER_BUFFER: usize = 8192;

/// A connection's peer: the local user owning its client socket, or its address if that
/// cannot be told, or the owner of the unix socket (who alone may connect to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    User(u32),
    Address(IpAddr),
    SocketOwner,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::User(uid) => write!(f, "uid {uid}"),
            Peer::Address(ip) => write!(f, "{ip}"),
            Peer::SocketOwner => write!(f, "the socket's owner"),
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Peer(Peer),
    /// The client has closed its socket already.
    Gone,
}

/// Looks peers up in the kernel's TCP table; one netlink socket, kept for every lookup.
pub struct PeerFinder {
    socket: Option<Socket>,
    sequence: u32,
    buffer: Vec<u8>,
}

impl PeerFinder {
    /// A finder; without a netlink socket (none could be made) every peer is its address.
    pub fn new() -> PeerFinder {
        let socket = Socket::new(NETLINK_SOCK_DIAG).ok().and_then(|mut s| {
            s.bind_auto().ok()?;
            s.connect(&NetlinkAddr::new(0, 0)).ok()?;
            let wait = nix::sys::time::TimeVal::new(0, ANSWER_WAIT.as_micros() as nix::sys::time::suseconds_t);
            nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::ReceiveTimeout, &wait).ok()?;
            Some(s)
        });
        PeerFinder {
            socket,
            sequence: 0,
            buffer: vec![0; ANSWER_BUFFER],
        }
    }

    /// The peer of the connection accepted on `local` from `remote` (see the module
    /// documentation for what is decided when).
    pub fn find(&mut self, local: SocketAddr, remote: SocketAddr) -> Found {
        match self.owner(local, remote) {
            Some(Lookup::Owner { uid, inode }) if inode != 0 => Found::Peer(Peer::User(uid)),
            Some(Lookup::Owner { .. }) => Found::Gone,
            // On loopback the client must be in this table; from another address (the TLS
            // listener on the network) it is on another machine, and its address is its peer.
            Some(Lookup::NoSuchSocket) if remote.ip().is_loopback() => Found::Gone,
            Some(Lookup::NoSuchSocket) | None => Found::Peer(Peer::Address(remote.ip())),
        }
    }

    /// Asks the kernel for the client socket `remote` -> `local`; None when it cannot say.
    fn owner(&mut self, local: SocketAddr, remote: SocketAddr) -> Option<Lookup> {
        let socket = self.socket.as_ref()?;
        self.sequence = self.sequence.wrapping_add(1);
        let family = match remote {
            SocketAddr::V4(_) => AF_INET,
            SocketAddr::V6(_) => AF_INET6,
        };
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST;
        header.sequence_number = self.sequence;
        // The client's socket: its source is the peer's address, its destination ours. No
        // cookie (all ones), so the four-tuple alone finds it.
        let mut request = NetlinkMessage::new(
            header,
            SockDiagMessage::InetRequest(InetRequest {
                family,
                protocol: IPPROTO_TCP,
                extensions: ExtensionFlags::empty(),
                states: StateFlags::all(),
                socket_id: SocketId {
                    source_port: remote.port(),
                    destination_port: local.port(),
                    source_address: remote.ip(),
                    destination_address: local.ip(),
                    interface_id: 0,
                    cookie: [0xff; 8],
                },
            })
            .into(),
        );
        request.finalize();
        let mut bytes = vec![0; request.buffer_len()];
        request.serialize(&mut bytes);
        socket.send(&bytes, 0).ok()?;
        // Answers to earlier lookups that timed out may still be queued: skip them.
        loop {
            let n = socket.recv(&mut &mut self.buffer[..], 0).ok()?;
            let answer = NetlinkMessage::<SockDiagMessage>::deserialize(&self.buffer[..n]).ok()?;
            if answer.header.sequence_number != self.sequence {
                continue;
            }
            return match answer.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => Some(Lookup::Owner {
                    uid: r.header.uid,
                    inode: r.header.inode,
                }),
                NetlinkPayload::Error(e) if e.raw_code() == -libc::ENOENT => Some(Lookup::NoSuchSocket),
                _ => None,
            };
        }
    }
}

impl Default for PeerFinder {
    fn default() -> Self {
        PeerFinder::new()
    }
}

/// The kernel's answer about a client socket.
enum Lookup {
    Owner { uid: u32, inode: u32 },
    NoSuchSocket,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel names this process's own user as the owner of a client socket it made, and
    /// says a closed one is gone.
    #[test]
    fn a_loopback_client_is_its_owner_and_a_closed_one_is_gone() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(local).unwrap();
        let (_server, remote) = listener.accept().unwrap();
        let mut finder = PeerFinder::new();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(finder.find(local, remote), Found::Peer(Peer::User(me)));
        drop(client);
        // The client's side is an orphan or TIME-WAIT entry now, or gone altogether.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while finder.find(local, remote) != Found::Gone {
            assert!(std::time::Instant::now() < deadline, "still found after close");
            std::thread::sleep(Duration::from_millis(10));
        }
        // A port no one uses.
        let nowhere = SocketAddr::from(([127, 0, 0, 1], 9));
        assert_eq!(finder.find(local, nowhere), Found::Gone);
    }
}
