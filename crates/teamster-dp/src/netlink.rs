//! Link state from the kernel: an rtnetlink socket subscribed to link changes.
//!
//! Model. Every RTM_NEWLINK (a link appeared or changed) and RTM_DELLINK (it went away) is read
//! into a [`LinkMsg`]: the interface index, its name and MTU where the message carries them, and
//! whether it can carry traffic (IFF_LOWER_UP and IFF_RUNNING). Netlink is a datagram socket: if
//! the kernel produces messages faster than they are read, the socket's buffer overflows, the
//! messages that did not fit are lost, and the next read fails with ENOBUFS. [`LinkWatch::drain`]
//! reports that as [`Drained::overrun`], and the caller must then re-read the state of every
//! link it cares about, since any change may have been among those lost.
//!
//! Only the fixed headers and two attributes are needed, so they are read by hand (with every
//! length checked against the datagram) rather than through a general netlink crate.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const RTMGRP_LINK: u32 = 1;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const IFF_RUNNING: u32 = 0x40;
const IFF_LOWER_UP: u32 = 0x1_0000;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
/// nlmsghdr (16 bytes) then ifinfomsg (16 bytes).
const HEADERS: usize = 32;

/// A link message: what changed, on which interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkMsg {
    pub ifindex: i32,
    /// Its name, if the message carries it (the kernel's always do).
    pub name: Option<String>,
    /// Its MTU, if the message carries it.
    pub mtu: Option<u32>,
    /// Carrier and operationally up; false for a deleted link.
    pub up: bool,
    /// RTM_DELLINK: the interface no longer exists.
    pub deleted: bool,
}

/// What one [`LinkWatch::drain`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    pub msgs: Vec<LinkMsg>,
    /// The socket overflowed since the last read: some messages were lost.
    pub overrun: bool,
}

/// A netlink socket delivering link changes.
pub struct LinkWatch {
    fd: OwnedFd,
}

impl LinkWatch {
    /// Subscribes to link changes.
    pub fn open() -> io::Result<LinkWatch> {
        LinkWatch::open_with_rcvbuf(None)
    }

    /// Subscribes to link changes, with the socket's receive buffer set to `rcvbuf` bytes if
    /// given (the kernel doubles it, and keeps a floor of about 2 KiB): tests make it tiny to
    /// force an overrun.
    pub fn open_with_rcvbuf(rcvbuf: Option<usize>) -> io::Result<LinkWatch> {
        // SAFETY: plain socket creation, checked below.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        if let Some(bytes) = rcvbuf {
            let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
            // SAFETY: `v` is a c_int of the size passed.
            let r = unsafe {
                libc::setsockopt(
                    raw,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    (&v as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: sockaddr_nl is plain data; zeroed is valid and the fields are set below.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = RTMGRP_LINK;
        // SAFETY: `addr` is a valid sockaddr_nl of the size passed.
        let r = unsafe {
            libc::bind(
                raw,
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(LinkWatch { fd })
    }

    /// The descriptor to poll.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Every link message received so far, and whether any were lost (ENOBUFS).
    pub fn drain(&mut self) -> Drained {
        let mut out = Drained::default();
        let mut buf = [0u8; 16384];
        loop {
            // SAFETY: reading into a buffer we own, of the length passed.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                out.msgs.extend(parse(&buf[..n as usize]));
                continue;
            }
            if n == 0 {
                return out;
            }
            match io::Error::last_os_error().raw_os_error() {
                // Messages were dropped; the socket goes on delivering the ones after.
                Some(libc::ENOBUFS) => out.overrun = true,
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => return out,
                // Anything else: what we hold may be stale too, so have the caller re-read.
                _ => {
                    out.overrun = true;
                    return out;
                }
            }
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads the link messages in a netlink datagram; anything malformed ends the datagram.
pub fn parse(mut buf: &[u8]) -> Vec<LinkMsg> {
    let mut out = Vec::new();
    // nlmsghdr: len u32, type u16, flags u16, seq u32, pid u32 (16 bytes); ifinfomsg: family u8,
    // pad u8, type u16, index i32, flags u32, change u32 (16 bytes); then rtattrs.
    while buf.len() >= 16 {
        let len = u32_at(buf, 0) as usize;
        let kind = u16_at(buf, 4);
        if len < 16 || len > buf.len() {
            break;
        }
        if (kind == RTM_NEWLINK || kind == RTM_DELLINK) && len >= HEADERS {
            let ifindex = u32_at(buf, 20) as i32;
            let flags = u32_at(buf, 24);
            let (name, mtu) = attributes(&buf[HEADERS..len]);
            let deleted = kind == RTM_DELLINK;
            out.push(LinkMsg {
                ifindex,
                name,
                mtu,
                up: !deleted && flags & IFF_LOWER_UP != 0 && flags & IFF_RUNNING != 0,
                deleted,
            });
        }
        let step = (len + 3) & !3;
        buf = &buf[step.min(buf.len())..];
    }
    out
}

/// The name and MTU among a link message's attributes (rtattr: len u16, type u16, data, padded
/// to 4 bytes).
fn attributes(mut a: &[u8]) -> (Option<String>, Option<u32>) {
    let (mut name, mut mtu) = (None, None);
    while a.len() >= 4 {
        let len = u16_at(a, 0) as usize;
        let kind = u16_at(a, 2) & 0x3fff; // without NLA_F_NESTED / NLA_F_NET_BYTEORDER
        if len < 4 || len > a.len() {
            break;
        }
        let data = &a[4..len];
        match kind {
            IFLA_IFNAME => {
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                name = std::str::from_utf8(&data[..end]).ok().map(str::to_string);
            }
            IFLA_MTU if data.len() >= 4 => mtu = Some(u32_at(data, 0)),
            _ => {}
        }
        let step = (len + 3) & !3;
        a = &a[step.min(a.len())..];
    }
    (name, mtu)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&(4 + data.len() as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(data);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn msg(kind: u16, ifindex: i32, flags: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = attrs.concat();
        let mut m = Vec::new();
        m.extend_from_slice(&(32 + body.len() as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&[0, 0, 1, 0]);
        m.extend_from_slice(&ifindex.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend(body);
        m
    }

    #[test]
    fn reads_link_messages_and_survives_garbage() {
        let up = IFF_LOWER_UP | IFF_RUNNING | 1;
        let mut d = msg(
            RTM_NEWLINK,
            7,
            up,
            &[attr(IFLA_IFNAME, b"tmt-u1\0"), attr(IFLA_MTU, &1500u32.to_ne_bytes())],
        );
        d.extend(msg(RTM_NEWLINK, 8, 1, &[]));
        d.extend(msg(RTM_DELLINK, 9, up, &[attr(IFLA_IFNAME, b"vnet0\0")]));
        d.extend(msg(20, 10, 0, &[])); // RTM_NEWADDR: ignored
        let got = parse(&d);
        assert_eq!(
            got,
            [
                LinkMsg {
                    ifindex: 7,
                    name: Some("tmt-u1".into()),
                    mtu: Some(1500),
                    up: true,
                    deleted: false
                },
                LinkMsg {
                    ifindex: 8,
                    name: None,
                    mtu: None,
                    up: false,
                    deleted: false
                },
                LinkMsg {
                    ifindex: 9,
                    name: Some("vnet0".into()),
                    mtu: None,
                    up: false,
                    deleted: true
                },
            ]
        );
        assert!(parse(&[0xff; 40]).is_empty());
        assert!(parse(&[1, 2, 3]).is_empty());
        // An attribute longer than its message ends the attributes, not the program.
        let mut bad = msg(RTM_NEWLINK, 11, up, &[attr(IFLA_IFNAME, b"x\0")]);
        bad[32] = 200;
        assert_eq!(parse(&bad)[0].name, None);
    }
}
