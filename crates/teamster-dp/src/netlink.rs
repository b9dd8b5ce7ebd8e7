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
//! [`links`] dumps every link (RTM_GETLINK) with what tells a VM's interface from the others: the
//! hardware type, the kernel's link kind (IFLA_INFO_KIND: `tun` for taps, `veth`, `macvlan`, ...;
//! none for a physical NIC) and the lower device (IFLA_LINK: a macvlan's or VLAN's parent, a
//! veth's peer), with whether that index is in another namespace (IFLA_LINK_NETNSID).
//!
//! Only the fixed headers and a handful of attributes are needed, so they are read by hand (with
//! every length checked against the datagram) rather than through a general netlink crate.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const RTMGRP_LINK: u32 = 1;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const IFF_RUNNING: u32 = 0x40;
const IFF_LOWER_UP: u32 = 0x1_0000;
const RTM_GETLINK: u16 = 18;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
/// Set on a dump's messages when the table changed while it was being dumped: what was read is
/// not one consistent picture.
const NLM_F_DUMP_INTR: u16 = 0x10;
/// How many times a link dump is taken again when the kernel says a change interrupted it.
const DUMP_TRIES: usize = 8;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINK: u16 = 5;
const IFLA_LINKINFO: u16 = 18;
const IFLA_LINK_NETNSID: u16 = 37;
/// Within IFLA_LINKINFO.
const IFLA_INFO_KIND: u16 = 1;
/// The hardware type of Ethernet-like links (taps, veths, NICs), as `ifi_type` gives it.
pub const ARPHRD_ETHER: u16 = 1;
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

/// A link as a dump shows it (see [`links`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    pub ifindex: i32,
    pub name: String,
    /// The hardware type (`ifi_type`): [`ARPHRD_ETHER`] for a tap, a veth or a NIC; a tun
    /// (layer 3) device has none.
    pub hw_type: u16,
    /// The kernel's link kind (IFLA_INFO_KIND): `tun` (tun and tap devices), `veth`,
    /// `macvlan`, `vlan`, `bridge`, ...; None for a physical NIC (and loopback).
    pub kind: Option<String>,
    /// The lower device's index (IFLA_LINK): a macvlan's or VLAN's parent, a veth's peer.
    pub link: Option<i32>,
    /// `link` is an index in another network namespace (IFLA_LINK_NETNSID), not this one's.
    pub link_elsewhere: bool,
    /// Its MAC (IFLA_ADDRESS), for an Ethernet-like link.
    pub mac: Option<[u8; 6]>,
}

/// Every link of this network namespace, from one RTM_GETLINK dump on a socket of its own
/// (bounded to a second per read, so a kernel that does not answer is an error, not a hang).
/// A dump the kernel marks as interrupted by a change (NLM_F_DUMP_INTR: a link may be missing
/// from it though it exists) is taken again, up to [`DUMP_TRIES`] times, then is an error: a
/// caller must never conclude from such a dump that a link is gone.
pub fn links() -> io::Result<Vec<LinkInfo>> {
    let mut last = None;
    for _ in 0..DUMP_TRIES {
        match dump_links() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => last = Some(e),
            other => return other,
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no link dump taken")))
}

/// A rtnetlink socket whose reads give up after `timeout_s` seconds (the kernel answers at
/// once; a read that waits longer would hang the caller).
pub fn route_socket(timeout_s: i64) -> io::Result<OwnedFd> {
    // SAFETY: plain socket creation, checked below.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let timeout = libc::timeval {
        tv_sec: timeout_s,
        tv_usec: 0,
    };
    // SAFETY: `timeout` is a timeval of the size passed.
    let r = unsafe {
        libc::setsockopt(
            raw,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// One RTM_GETLINK dump (see [`links`]); an interrupted dump is an `Interrupted` error.
fn dump_links() -> io::Result<Vec<LinkInfo>> {
    let fd = route_socket(1)?;
    let raw = fd.as_raw_fd();
    // nlmsghdr then an empty ifinfomsg (AF_UNSPEC: every link).
    let mut req = [0u8; HEADERS];
    req[0..4].copy_from_slice(&(HEADERS as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // SAFETY: sending a buffer we own, of the length passed, to the kernel (the socket's
    // default destination on a netlink socket is the kernel).
    let n = unsafe { libc::send(raw, req.as_ptr().cast(), req.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        // SAFETY: reading into a buffer we own, of the length passed.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "netlink dump ended early"));
        }
        match parse_dump(&buf[..n as usize], &mut out)? {
            true => return Ok(out),
            false => continue,
        }
    }
}

/// Reads one datagram of a link dump into `out`; true once the dump is done. A message marked
/// NLM_F_DUMP_INTR makes the whole dump an `Interrupted` error (it is not one picture).
pub fn parse_dump(mut buf: &[u8], out: &mut Vec<LinkInfo>) -> io::Result<bool> {
    while buf.len() >= 16 {
        let len = u32_at(buf, 0) as usize;
        let kind = u16_at(buf, 4);
        if len < 16 || len > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a malformed netlink message",
            ));
        }
        if u16_at(buf, 6) & NLM_F_DUMP_INTR != 0 {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the link table changed during the dump (NLM_F_DUMP_INTR)",
            ));
        }
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = if len >= 20 { u32_at(buf, 16) as i32 } else { 0 };
                return Err(io::Error::from_raw_os_error(errno.checked_neg().unwrap_or(libc::EIO)));
            }
            RTM_NEWLINK if len >= HEADERS => {
                let a = attributes(&buf[HEADERS..len]);
                if let Some(name) = a.name {
                    out.push(LinkInfo {
                        ifindex: u32_at(buf, 20) as i32,
                        name,
                        hw_type: u16_at(buf, 18),
                        kind: a.kind,
                        link: a.link,
                        link_elsewhere: a.link_netnsid,
                        mac: a.mac,
                    });
                }
            }
            _ => {}
        }
        let step = (len + 3) & !3;
        buf = &buf[step.min(buf.len())..];
    }
    Ok(false)
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
            let Attributes { name, mtu, .. } = attributes(&buf[HEADERS..len]);
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

/// What a link message's attributes say, of what is read here.
#[derive(Debug, Default)]
struct Attributes {
    name: Option<String>,
    mtu: Option<u32>,
    mac: Option<[u8; 6]>,
    link: Option<i32>,
    link_netnsid: bool,
    kind: Option<String>,
}

/// A NUL-terminated string attribute.
fn c_string(data: &[u8]) -> Option<String> {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    std::str::from_utf8(&data[..end]).ok().map(str::to_string)
}

/// Calls `each(type, data)` for every attribute in `a` (rtattr: len u16, type u16, data, padded
/// to 4 bytes); an attribute longer than what holds it ends the walk.
fn each_attribute(mut a: &[u8], mut each: impl FnMut(u16, &[u8])) {
    while a.len() >= 4 {
        let len = u16_at(a, 0) as usize;
        let kind = u16_at(a, 2) & 0x3fff; // without NLA_F_NESTED / NLA_F_NET_BYTEORDER
        if len < 4 || len > a.len() {
            break;
        }
        each(kind, &a[4..len]);
        let step = (len + 3) & !3;
        a = &a[step.min(a.len())..];
    }
}

/// The attributes of a link message that are read here.
fn attributes(a: &[u8]) -> Attributes {
    let mut out = Attributes::default();
    each_attribute(a, |kind, data| match kind {
        IFLA_IFNAME => out.name = c_string(data),
        IFLA_MTU if data.len() >= 4 => out.mtu = Some(u32_at(data, 0)),
        IFLA_ADDRESS if data.len() == 6 => out.mac = data.try_into().ok(),
        IFLA_LINK if data.len() >= 4 => out.link = Some(u32_at(data, 0) as i32),
        IFLA_LINK_NETNSID => out.link_netnsid = true,
        IFLA_LINKINFO => each_attribute(data, |k, d| {
            if k == IFLA_INFO_KIND {
                out.kind = c_string(d);
            }
        }),
        _ => {}
    });
    out
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

    #[test]
    fn a_link_dump_reads_kind_lower_device_and_mac() {
        let mut linkinfo = attr(IFLA_INFO_KIND, b"macvlan\0");
        linkinfo.extend(attr(2, &[0; 8])); // IFLA_INFO_DATA: skipped
        let mut d = msg(
            RTM_NEWLINK,
            12,
            0,
            &[
                attr(IFLA_IFNAME, b"vnet99\0"),
                attr(IFLA_ADDRESS, &[0xfe, 0, 0, 0, 0, 9]),
                attr(IFLA_LINK, &7i32.to_ne_bytes()),
                attr(IFLA_LINKINFO | 0x8000, &linkinfo),
            ],
        );
        d.extend(msg(
            RTM_NEWLINK,
            13,
            0,
            &[
                attr(IFLA_IFNAME, b"tmt-v1\0"),
                attr(IFLA_LINK, &2i32.to_ne_bytes()),
                attr(IFLA_LINK_NETNSID, &0i32.to_ne_bytes()),
                attr(IFLA_LINKINFO, &attr(IFLA_INFO_KIND, b"veth\0")),
            ],
        ));
        d.extend(msg(RTM_NEWLINK, 1, 0, &[attr(IFLA_IFNAME, b"eth0\0")]));
        let mut out = Vec::new();
        assert!(!parse_dump(&d, &mut out).unwrap(), "no NLMSG_DONE yet");
        assert_eq!(
            out[0],
            LinkInfo {
                ifindex: 12,
                name: "vnet99".into(),
                hw_type: ARPHRD_ETHER,
                kind: Some("macvlan".into()),
                link: Some(7),
                link_elsewhere: false,
                mac: Some([0xfe, 0, 0, 0, 0, 9]),
            }
        );
        assert_eq!(
            (out[1].kind.as_deref(), out[1].link, out[1].link_elsewhere),
            (Some("veth"), Some(2), true)
        );
        assert_eq!((out[2].kind.as_deref(), out[2].link), (None, None));
        let mut done = msg(NLMSG_DONE, 0, 0, &[]);
        assert!(parse_dump(&done, &mut out).unwrap());
        // An error answer carries a negative errno where the ifinfomsg would be.
        done[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        done[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        assert_eq!(
            parse_dump(&done, &mut out).unwrap_err().raw_os_error(),
            Some(libc::EPERM)
        );
        assert!(parse_dump(&[0xff; 40], &mut out).is_err());
        // A dump the kernel marks as interrupted by a change is no picture of the links.
        let mut intr = msg(RTM_NEWLINK, 1, 0, &[attr(IFLA_IFNAME, b"eth0\0")]);
        intr[6..8].copy_from_slice(&NLM_F_DUMP_INTR.to_ne_bytes());
        assert_eq!(
            parse_dump(&intr, &mut out).unwrap_err().kind(),
            io::ErrorKind::Interrupted
        );
    }

    /// Every namespace has a loopback device, which is no tap, veth or NIC kind of link.
    #[test]
    fn the_kernel_dumps_this_namespaces_links() {
        let all = links().unwrap();
        let lo = all.iter().find(|l| l.name == "lo").expect("lo");
        assert_eq!((lo.kind.as_deref(), lo.link), (None, None));
    }
}
