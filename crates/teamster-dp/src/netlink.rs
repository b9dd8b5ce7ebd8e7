//! Link state from the kernel: an rtnetlink socket subscribed to link changes.
//!
//! Only the fixed headers are needed (the interface index and flags of RTM_NEWLINK), so they
//! are read by hand rather than through a general netlink crate.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const RTMGRP_LINK: u32 = 1;
const RTM_NEWLINK: u16 = 16;
const IFF_RUNNING: u32 = 0x40;
const IFF_LOWER_UP: u32 = 0x1_0000;

/// A link change: the interface index and whether it has carrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkChange {
    pub ifindex: i32,
    pub up: bool,
}

/// A netlink socket delivering link changes.
pub struct LinkWatch {
    fd: OwnedFd,
}

impl LinkWatch {
    /// Subscribes to link changes.
    pub fn open() -> io::Result<LinkWatch> {
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

    /// Every link change received so far.
    pub fn drain(&mut self) -> Vec<LinkChange> {
        let mut out = Vec::new();
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
            if n <= 0 {
                return out;
            }
            out.extend(parse(&buf[..n as usize]));
        }
    }
}

/// Reads the RTM_NEWLINK messages in a netlink datagram.
pub fn parse(mut buf: &[u8]) -> Vec<LinkChange> {
    let mut out = Vec::new();
    // nlmsghdr: len u32, type u16, flags u16, seq u32, pid u32 (16 bytes); ifinfomsg: family u8,
    // pad u8, type u16, index i32, flags u32, change u32 (16 bytes).
    while buf.len() >= 16 {
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if len < 16 || len > buf.len() {
            break;
        }
        if kind == RTM_NEWLINK && len >= 32 {
            let m = &buf[16..32];
            let ifindex = i32::from_ne_bytes([m[4], m[5], m[6], m[7]]);
            let flags = u32::from_ne_bytes([m[8], m[9], m[10], m[11]]);
            out.push(LinkChange {
                ifindex,
                up: flags & IFF_LOWER_UP != 0 && flags & IFF_RUNNING != 0,
            });
        }
        let step = (len + 3) & !3;
        buf = &buf[step.min(buf.len())..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u16, ifindex: i32, flags: u32) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&32u32.to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&[0, 0, 1, 0]);
        m.extend_from_slice(&ifindex.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m
    }

    #[test]
    fn reads_link_messages_and_survives_garbage() {
        let mut d = msg(RTM_NEWLINK, 7, IFF_LOWER_UP | IFF_RUNNING | 1);
        d.extend(msg(RTM_NEWLINK, 8, 1));
        d.extend(msg(17, 9, 0)); // RTM_DELLINK: ignored
        assert_eq!(
            parse(&d),
            [
                LinkChange { ifindex: 7, up: true },
                LinkChange { ifindex: 8, up: false }
            ]
        );
        assert!(parse(&[0xff; 40]).is_empty());
        assert!(parse(&[1, 2, 3]).is_empty());
    }
}
