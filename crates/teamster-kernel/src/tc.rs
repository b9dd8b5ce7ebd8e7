//! Traffic control over rtnetlink: the HTB qdisc at an uplink's root, its classes, and their
//! `bfifo` leaf queues, as [`teamster_core::ioc::htb`] plans them; and the qdiscs an interface
//! has, with their queue statistics.
//!
//! Model. One netlink socket; every request carries `NLM_F_ACK` and waits for its answer, whose
//! error (with the kernel's extended-ack message, which names what it refused) becomes an
//! `io::Error`. Classes are created and changed with one request (`NLM_F_CREATE` without
//! `NLM_F_EXCL`: the kernel changes a class that exists). A leaf's queue has its class's minor
//! as its major (`m:` under class `7473:m`), so it can be changed in place, keeping what it
//! holds, rather than replaced.
//!
//! Why by hand: the netlink crates at hand either bring an async runtime (`rtnetlink`) or
//! type only fq_codel and ingress among the qdiscs (`netlink-packet-route`), so HTB's
//! attributes would be raw bytes there too; `teamster-dp`'s link watch reads rtnetlink the same
//! way. Not the `tc` binary: a process per change, text to parse, iproute2's version to depend
//! on, and statistics read every second would cost the CPU that NetIOC's cost is measured in.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use teamster_core::ioc::htb::{HtbClass, MAJOR};

const RTM_NEWQDISC: u16 = 36;
const RTM_DELQDISC: u16 = 37;
const RTM_GETQDISC: u16 = 38;
const RTM_NEWTCLASS: u16 = 40;
const RTM_DELTCLASS: u16 = 41;
const RTM_GETTCLASS: u16 = 42;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_MULTI: u16 = 2;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLM_F_ACK_TLVS: u16 = 0x200;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;
const NLA_F_NESTED: u16 = 0x8000;
const NETLINK_EXT_ACK: libc::c_int = 11;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NLMSGERR_ATTR_MSG: u16 = 1;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_STATS2: u16 = 7;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
const TCA_HTB_PARMS: u16 = 1;
const TCA_HTB_INIT: u16 = 2;
const TCA_HTB_DIRECT_QLEN: u16 = 5;
const TCA_HTB_RATE64: u16 = 6;
const TCA_HTB_CEIL64: u16 = 7;
const TC_LINKLAYER_ETHERNET: u8 = 1;
pub const TC_H_ROOT: u32 = 0xffff_ffff;
/// Frames HTB's direct queue holds (only what asks for the qdisc itself by priority).
const DIRECT_QLEN: u32 = 64;
/// nlmsghdr (16) and tcmsg (20).
const HEADERS: usize = 36;
const DUMP_TRIES: usize = 8;

/// A qdisc as the kernel reports it, with its queue's statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Qdisc {
    pub ifindex: u32,
    pub handle: u32,
    pub parent: u32,
    pub kind: String,
    pub bytes: u64,
    pub packets: u32,
    pub qlen: u32,
    pub backlog: u32,
    pub drops: u32,
}

impl Qdisc {
    /// True if this is the root qdisc Teamster puts on an uplink.
    pub fn is_ours(&self) -> bool {
        self.kind == "htb" && self.handle == u32::from(MAJOR) << 16
    }

    /// "htb 1:" as `tc` names it.
    pub fn describe(&self) -> String {
        format!("{} {:x}:", self.kind, self.handle >> 16)
    }
}

/// A netlink socket for traffic control; see the module documentation.
pub struct Tc {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl Tc {
    pub fn open() -> io::Result<Tc> {
        let fd = teamster_dp::netlink::route_socket(2)?;
        let one: libc::c_int = 1;
        // Best effort: without them an error has only its number.
        for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
            // SAFETY: the option's value is a c_int of the size passed.
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_NETLINK,
                    opt,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        Ok(Tc {
            fd,
            seq: 0,
            buf: vec![0; 64 << 10],
        })
    }

    /// Every qdisc of `ifindex`, the root's included.
    pub fn qdiscs(&mut self, ifindex: u32) -> io::Result<Vec<Qdisc>> {
        self.dump(RTM_GETQDISC, RTM_NEWQDISC, ifindex)
    }

    /// Every class of `ifindex`'s qdiscs (as [`Qdisc`]s: handle, parent, kind; `parent` is
    /// `TC_H_ROOT` for a class at the top of its qdisc).
    pub fn classes(&mut self, ifindex: u32) -> io::Result<Vec<Qdisc>> {
        self.dump(RTM_GETTCLASS, RTM_NEWTCLASS, ifindex)
    }

    /// A dump of `ask` answered with `answer` messages, kept to `ifindex`, taken again while
    /// the kernel says it was interrupted.
    fn dump(&mut self, ask: u16, answer: u16, ifindex: u32) -> io::Result<Vec<Qdisc>> {
        let mut last = None;
        for _ in 0..DUMP_TRIES {
            match self.dump_once(ask, answer, ifindex) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => last = Some(e),
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no dump taken")))
    }

    /// The root qdisc of `ifindex`; None for the kernel's default (handle 0: `noqueue` on a
    /// veth, `mq` or `pfifo_fast` on a NIC), which is there when nobody set one.
    pub fn root(&mut self, ifindex: u32) -> io::Result<Option<Qdisc>> {
        Ok(root_of(&self.qdiscs(ifindex)?).cloned())
    }

    /// Puts a fresh HTB qdisc `7473:` at the root of `ifindex`, replacing what was there (with
    /// its queues), with `default` the class of what carries no class's priority.
    pub fn replace_root(&mut self, ifindex: u32, default: u16) -> io::Result<()> {
        let mut m = Request::new(RTM_NEWQDISC, NLM_F_CREATE | NLM_F_REPLACE, ifindex);
        m.tcmsg(u32::from(MAJOR) << 16, TC_H_ROOT);
        m.attr(TCA_KIND, b"htb\0");
        let nest = m.nest(TCA_OPTIONS);
        // tc_htb_glob: version 3, rate2quantum 10, defcls, debug 0, direct_pkts 0.
        let mut glob = Vec::with_capacity(20);
        for v in [3u32, 10, u32::from(default), 0, 0] {
            glob.extend_from_slice(&v.to_ne_bytes());
        }
        m.attr(TCA_HTB_INIT, &glob);
        m.attr(TCA_HTB_DIRECT_QLEN, &DIRECT_QLEN.to_ne_bytes());
        m.end(nest);
        self.ask(m)
    }

    /// Deletes the root qdisc of `ifindex` if it is still Teamster's (the kernel puts its
    /// default back). Nothing to do if the interface or the qdisc is gone.
    pub fn delete_root(&mut self, ifindex: u32) -> io::Result<()> {
        match self.root(ifindex) {
            Ok(Some(q)) if q.is_ours() => {}
            Ok(_) => return Ok(()),
            Err(e) if errno(&e) == Some(libc::ENODEV) => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut m = Request::new(RTM_DELQDISC, 0, ifindex);
        m.tcmsg(u32::from(MAJOR) << 16, TC_H_ROOT);
        match self.ask(m) {
            Err(e) if matches!(errno(&e), Some(libc::ENODEV) | Some(libc::ENOENT)) => Ok(()),
            other => other,
        }
    }

    /// Creates class `c` under the qdisc of `ifindex`, or changes it if it exists.
    pub fn put_class(&mut self, ifindex: u32, c: &HtbClass) -> io::Result<()> {
        let mut m = Request::new(RTM_NEWTCLASS, NLM_F_CREATE, ifindex);
        m.tcmsg(class_id(c.minor), class_id(c.parent));
        m.attr(TCA_KIND, b"htb\0");
        let nest = m.nest(TCA_OPTIONS);
        m.attr(TCA_HTB_PARMS, &htb_opt(c));
        if c.rate > u64::from(u32::MAX) {
            m.attr(TCA_HTB_RATE64, &c.rate.to_ne_bytes());
        }
        if c.ceil > u64::from(u32::MAX) {
            m.attr(TCA_HTB_CEIL64, &c.ceil.to_ne_bytes());
        }
        m.end(nest);
        self.ask(m)
    }

    /// Deletes class `minor` (with its queue); gone already is not an error.
    pub fn delete_class(&mut self, ifindex: u32, minor: u16) -> io::Result<()> {
        let mut m = Request::new(RTM_DELTCLASS, 0, ifindex);
        m.tcmsg(class_id(minor), 0);
        match self.ask(m) {
            Err(e) if matches!(errno(&e), Some(libc::ENODEV) | Some(libc::ENOENT)) => Ok(()),
            other => other,
        }
    }

    /// Gives leaf class `minor` a `bfifo` of `limit` bytes (`create`: in place of the kernel's
    /// default queue), or sets the limit of the one it has, keeping what it holds.
    pub fn put_leaf_queue(&mut self, ifindex: u32, minor: u16, limit: u32, create: bool) -> io::Result<()> {
        let flags = if create { NLM_F_CREATE | NLM_F_REPLACE } else { 0 };
        let mut m = Request::new(RTM_NEWQDISC, flags, ifindex);
        m.tcmsg(u32::from(minor) << 16, class_id(minor));
        m.attr(TCA_KIND, b"bfifo\0");
        m.attr(TCA_OPTIONS, &limit.to_ne_bytes());
        self.ask(m)
    }

    /// Sends `m` and waits for its acknowledgement.
    fn ask(&mut self, mut m: Request) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        m.finish(seq, NLM_F_ACK);
        self.send(&m.buf)?;
        loop {
            let n = self.recv()?;
            let mut at = &self.buf[..n];
            while at.len() >= 16 {
                let len = (u32_at(at, 0) as usize).clamp(16, at.len());
                let (kind, got) = (u16_at(at, 4), u32_at(at, 8));
                if kind == NLMSG_ERROR && got == seq {
                    return ack(&at[..len], u16_at(at, 6));
                }
                at = &at[((len + 3) & !3).min(at.len())..];
            }
        }
    }

    /// One dump (see [`Tc::dump`]); an interrupted dump is `Interrupted`.
    fn dump_once(&mut self, ask: u16, answer: u16, ifindex: u32) -> io::Result<Vec<Qdisc>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut m = Request::new(ask, 0, ifindex);
        m.tcmsg(0, 0);
        m.finish(seq, NLM_F_DUMP);
        self.send(&m.buf)?;
        let mut out = Vec::new();
        let mut interrupted = false;
        loop {
            let n = self.recv()?;
            let mut at = &self.buf[..n];
            while at.len() >= 16 {
                let len = (u32_at(at, 0) as usize).clamp(16, at.len());
                let (kind, flags, got) = (u16_at(at, 4), u16_at(at, 6), u32_at(at, 8));
                let msg = &at[..len];
                at = &at[((len + 3) & !3).min(at.len())..];
                if got != seq {
                    continue;
                }
                interrupted |= flags & NLM_F_DUMP_INTR != 0;
                match kind {
                    NLMSG_DONE => {
                        if interrupted {
                            return Err(io::Error::new(io::ErrorKind::Interrupted, "dump interrupted"));
                        }
                        return Ok(out);
                    }
                    NLMSG_ERROR => ack(msg, flags)?,
                    k if k == answer => {
                        if let Some(q) = parse_qdisc(msg).filter(|q| q.ifindex == ifindex) {
                            out.push(q);
                        }
                    }
                    _ => {}
                }
                if flags & NLM_F_MULTI == 0 && kind != answer {
                    return Ok(out);
                }
            }
        }
    }

    fn send(&self, buf: &[u8]) -> io::Result<()> {
        // SAFETY: sending a buffer we own, of the length passed, to the kernel.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn recv(&mut self) -> io::Result<usize> {
        loop {
            // SAFETY: reading into a buffer we own, of the length passed.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), self.buf.as_mut_ptr().cast(), self.buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if e.kind() == io::ErrorKind::WouldBlock {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "the kernel did not answer"));
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "netlink socket closed"));
            }
            return Ok(n as usize);
        }
    }
}

/// The root qdisc in a dump of one interface's qdiscs, unless it is the kernel's default
/// (handle 0).
pub fn root_of(qdiscs: &[Qdisc]) -> Option<&Qdisc> {
    qdiscs.iter().find(|q| q.parent == TC_H_ROOT && q.handle != 0)
}

/// The class ID `7473:minor`.
fn class_id(minor: u16) -> u32 {
    u32::from(MAJOR) << 16 | u32::from(minor)
}

/// `struct tc_htb_opt` for `c`: rate and ceil as Ethernet link-layer rate specs (no rate tables
/// needed), rates past 32 bits saturated (the 64-bit attributes carry them), the bursts in the
/// kernel's 64 ns ticks.
fn htb_opt(c: &HtbClass) -> Vec<u8> {
    let spec = |rate: u64| {
        let mut s = [0u8; 12];
        s[1] = TC_LINKLAYER_ETHERNET;
        s[8..12].copy_from_slice(&(rate.min(u64::from(u32::MAX)) as u32).to_ne_bytes());
        s
    };
    let ticks = |bytes: u32, rate: u64| {
        let ns = u128::from(bytes) * 1_000_000_000 / u128::from(rate.max(1));
        (ns / 64).min(u128::from(u32::MAX)) as u32
    };
    let mut o = Vec::with_capacity(44);
    o.extend_from_slice(&spec(c.rate));
    o.extend_from_slice(&spec(c.ceil));
    for v in [
        ticks(c.burst, c.rate),
        ticks(c.cburst, c.ceil),
        c.quantum,
        0, // level: the kernel's to set
        0, // prio
    ] {
        o.extend_from_slice(&v.to_ne_bytes());
    }
    o
}

/// The answer to a request: Ok, or its error with the kernel's message.
fn ack(msg: &[u8], flags: u16) -> io::Result<()> {
    if msg.len() < 20 {
        return Err(io::Error::other("short netlink acknowledgement"));
    }
    let code = i32::from_ne_bytes(msg[16..20].try_into().expect("4 bytes"));
    if code == 0 {
        return Ok(());
    }
    let errno = -code;
    let base = io::Error::from_raw_os_error(errno);
    let mut said = None;
    if flags & NLM_F_ACK_TLVS != 0 && msg.len() >= 36 {
        // The request's header follows the code (capped: the header alone), then the TLVs.
        each_attribute(&msg[36..], |kind, data| {
            if kind == NLMSGERR_ATTR_MSG {
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                said = Some(String::from_utf8_lossy(&data[..end]).into_owned());
            }
        });
    }
    Err(match said {
        Some(said) => io::Error::new(base.kind(), Said { errno, said }),
        None => base,
    })
}

/// The kernel's refusal with its extended-ack message.
#[derive(Debug)]
struct Said {
    errno: i32,
    said: String,
}

impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", io::Error::from_raw_os_error(self.errno), self.said)
    }
}

impl std::error::Error for Said {}

/// The error number of a refusal, with or without the kernel's message.
pub fn errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
        .or_else(|| e.get_ref()?.downcast_ref::<Said>().map(|s| s.errno))
}

/// A qdisc message's interface, handle, parent, kind and queue statistics.
fn parse_qdisc(msg: &[u8]) -> Option<Qdisc> {
    if msg.len() < HEADERS {
        return None;
    }
    let mut q = Qdisc {
        ifindex: u32_at(msg, 20),
        handle: u32_at(msg, 24),
        parent: u32_at(msg, 28),
        ..Qdisc::default()
    };
    each_attribute(&msg[HEADERS..], |kind, data| match kind {
        TCA_KIND => {
            let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            q.kind = String::from_utf8_lossy(&data[..end]).into_owned();
        }
        TCA_STATS2 => each_attribute(data, |k, d| match k {
            TCA_STATS_BASIC if d.len() >= 12 => {
                q.bytes = u64::from_ne_bytes(d[0..8].try_into().expect("8 bytes"));
                q.packets = u32_at(d, 8);
            }
            TCA_STATS_QUEUE if d.len() >= 12 => {
                q.qlen = u32_at(d, 0);
                q.backlog = u32_at(d, 4);
                q.drops = u32_at(d, 8);
            }
            _ => {}
        }),
        _ => {}
    });
    Some(q)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Calls `each(type, data)` for every attribute in `a`; one longer than what holds it ends the
/// walk.
fn each_attribute(mut a: &[u8], mut each: impl FnMut(u16, &[u8])) {
    while a.len() >= 4 {
        let len = u16_at(a, 0) as usize;
        let kind = u16_at(a, 2) & 0x3fff;
        if len < 4 || len > a.len() {
            break;
        }
        each(kind, &a[4..len]);
        a = &a[((len + 3) & !3).min(a.len())..];
    }
}

/// A request being written: nlmsghdr, tcmsg, attributes.
struct Request {
    buf: Vec<u8>,
}

impl Request {
    fn new(kind: u16, flags: u16, ifindex: u32) -> Request {
        let mut buf = vec![0u8; HEADERS];
        buf[4..6].copy_from_slice(&kind.to_ne_bytes());
        buf[6..8].copy_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        // tcmsg: family AF_UNSPEC, padding, ifindex.
        buf[20..24].copy_from_slice(&ifindex.to_ne_bytes());
        Request { buf }
    }

    fn tcmsg(&mut self, handle: u32, parent: u32) {
        self.buf[24..28].copy_from_slice(&handle.to_ne_bytes());
        self.buf[28..32].copy_from_slice(&parent.to_ne_bytes());
    }

    fn attr(&mut self, kind: u16, data: &[u8]) {
        let len = 4 + data.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize((self.buf.len() + 3) & !3, 0);
    }

    /// Opens a nested attribute; returns where its header is, for [`Request::end`].
    fn nest(&mut self, kind: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        at
    }

    fn end(&mut self, at: usize) {
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn finish(&mut self, seq: u32, flags: u16) {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        let f = u16_at(&self.buf, 6) | flags;
        self.buf[6..8].copy_from_slice(&f.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn htb_options_are_laid_out_as_the_kernel_reads_them() {
        let c = HtbClass {
            name: "vm1".into(),
            minor: 5,
            parent: 1,
            rate: 1_250_000,
            ceil: 5_000_000_000,
            quantum: 60_000,
            burst: 3036,
            cburst: 10_000_000,
            queue: Some(68_572),
        };
        let o = htb_opt(&c);
        assert_eq!(o.len(), 44, "sizeof(struct tc_htb_opt)");
        assert_eq!((o[1], u32_at(&o, 8)), (TC_LINKLAYER_ETHERNET, 1_250_000));
        assert_eq!(u32_at(&o, 20), u32::MAX, "past 32 bits: TCA_HTB_CEIL64 carries it");
        // 3036 B at 1.25 MB/s: 2.4288 ms, 37,950 ticks of 64 ns.
        assert_eq!(u32_at(&o, 24), 37_950);
        assert_eq!(u32_at(&o, 32), 60_000);
    }

    #[test]
    fn an_error_carries_the_kernels_message() {
        let mut msg = vec![0u8; 36];
        msg[16..20].copy_from_slice(&(-libc::EINVAL).to_ne_bytes());
        let text = b"Specified qdisc kind is unknown\0";
        msg.extend_from_slice(&((4 + text.len()) as u16).to_ne_bytes());
        msg.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        msg.extend_from_slice(text);
        let e = ack(&msg, NLM_F_ACK_TLVS).unwrap_err();
        assert_eq!(errno(&e), Some(libc::EINVAL));
        assert!(e.to_string().contains("qdisc kind is unknown"), "{e}");
        assert!(ack(&msg[..20], 0).unwrap_err().raw_os_error() == Some(libc::EINVAL));
        let mut ok = vec![0u8; 36];
        ok[16..20].copy_from_slice(&0i32.to_ne_bytes());
        ack(&ok, 0).unwrap();
        assert!(ack(&ok[..10], 0).is_err());
    }

    #[test]
    fn garbage_in_a_qdisc_message_is_survived() {
        for n in 0..80 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let _ = parse_qdisc(&junk);
        }
    }
}
