//! Opening an [`AfXdp`]: the checks an interface must pass, then the socket, its UMEM and
//! rings, the bind (zero-copy if the driver can, else copy) and the program, in that order, so
//! the program never redirects to a socket that is not ready. Any failure closes what was
//! opened, and the interface is left as it was.

use super::prog;
use super::rings::{Mmap, Ring};
use super::{AfXdp, Options, BIND_RETRY, FRAME, MAX_MTU, RX_FRAMES, TX_FRAMES};
use crate::sockopt::check;
use crate::{RxDrops, TxTotals};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// setsockopt at the XDP level.
fn set_opt<T>(fd: RawFd, opt: libc::c_int, val: &T, what: &str, name: &str) -> io::Result<()> {
    crate::sockopt::set_opt(fd, libc::SOL_XDP, opt, val, what, name)
}

/// getsockopt into a plain-data `T`; returns it and the length the kernel wrote.
pub(super) fn get_opt<T: Copy>(fd: RawFd, opt: libc::c_int, mut val: T) -> io::Result<(T, usize)> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `val` is a live `T` of `len` bytes that the kernel fills.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_XDP, opt, (&mut val as *mut T).cast(), &mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((val, len as usize))
}

/// Refuses what this backend cannot carry on `name`: more than one receive queue, or an MTU
/// over [`MAX_MTU`].
pub fn check_interface(name: &str) -> io::Result<()> {
    let queues = crate::iface::rx_queues(name)?;
    if queues > 1 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{name}: {queues} receive queues; AF_XDP binds queue 0 only, and frames on the \
                 others would bypass the switch: set one (`ethtool -L {name} combined 1`, or create \
                 the veth with numrxqueues 1), or use backend = \"af_packet\""
            ),
        ));
    }
    let mtu = crate::iface::mtu(name)?;
    if mtu > MAX_MTU {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{name}: MTU {mtu} is more than one AF_XDP frame holds (MTU {MAX_MTU} at most; \
                 multi-buffer AF_XDP for jumbo frames is not used): lower the MTU or use \
                 backend = \"af_packet\""
            ),
        ));
    }
    Ok(())
}

impl AfXdp {
    /// Opens interface `name` with the default [`Options`].
    pub fn open(name: &str) -> io::Result<AfXdp> {
        Self::open_with(name, Options::default())
    }

    /// Opens interface `name`: checks it, maps and registers the UMEM, maps the rings, fills the
    /// fill ring, binds to queue 0 (zero-copy if the driver can, else copy), and attaches the
    /// program. Any failure closes what was opened; the interface is left as it was.
    pub fn open_with(name: &str, options: Options) -> io::Result<AfXdp> {
        let ifindex = crate::iface::index(name)?;
        check_interface(name)?;
        // SAFETY: plain socket creation; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            let hint = match e.raw_os_error() {
                Some(libc::EAFNOSUPPORT) => " (this kernel has no AF_XDP: CONFIG_XDP_SOCKETS)",
                Some(libc::EPERM) => " (needs CAP_NET_RAW)",
                _ => "",
            };
            return Err(io::Error::new(e.kind(), format!("{name}: AF_XDP socket: {e}{hint}")));
        }
        // SAFETY: `raw` is a fresh descriptor owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem = Mmap::anonymous(FRAME * (RX_FRAMES + TX_FRAMES) as usize)
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: UMEM: {e}")))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.as_ptr() as u64,
            len: umem.len() as u64,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        set_opt(
            raw,
            libc::XDP_UMEM_REG,
            &reg,
            "registering the UMEM (pinned memory: needs CAP_IPC_LOCK or a large enough RLIMIT_MEMLOCK)",
            name,
        )?;
        for (opt, size) in [
            (libc::XDP_UMEM_FILL_RING, RX_FRAMES),
            (libc::XDP_RX_RING, RX_FRAMES),
            (libc::XDP_UMEM_COMPLETION_RING, TX_FRAMES),
            (libc::XDP_TX_RING, TX_FRAMES),
        ] {
            set_opt(raw, opt, &size, "sizing a ring", name)?;
        }
        // SAFETY: xdp_mmap_offsets is plain data; zeroed is valid.
        let (off, len) = get_opt(raw, libc::XDP_MMAP_OFFSETS, unsafe {
            std::mem::zeroed::<libc::xdp_mmap_offsets>()
        })
        .map_err(|e| io::Error::new(e.kind(), format!("{name}: XDP_MMAP_OFFSETS: {e}")))?;
        if len < std::mem::size_of::<libc::xdp_mmap_offsets>() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{name}: this kernel's AF_XDP is too old (no ring flags; Linux 5.4 or later needed)"),
            ));
        }
        let ring_err = |e: io::Error| io::Error::new(e.kind(), format!("{name}: mapping a ring: {e}"));
        let mut fill =
            Ring::<u64>::map(raw, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING, RX_FRAMES, true).map_err(ring_err)?;
        let comp =
            Ring::<u64>::map(raw, &off.cr, libc::XDP_UMEM_PGOFF_COMPLETION_RING, TX_FRAMES, false).map_err(ring_err)?;
        let rx = Ring::<libc::xdp_desc>::map(raw, &off.rx, libc::XDP_PGOFF_RX_RING as u64, RX_FRAMES, false)
            .map_err(ring_err)?;
        let tx = Ring::<libc::xdp_desc>::map(raw, &off.tx, libc::XDP_PGOFF_TX_RING as u64, TX_FRAMES, true)
            .map_err(ring_err)?;
        for i in 0..u64::from(RX_FRAMES) {
            fill.push(i * FRAME as u64);
        }
        fill.publish();
        // No XDP_COPY or XDP_ZEROCOPY: the kernel tries zero-copy and falls back to copy mode.
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex as u32,
            sxdp_queue_id: 0,
            sxdp_shared_umem_fd: 0,
        };
        // A socket closed just before (a backend dropped and reopened) releases its hold on the
        // queue in deferred kernel work, a few milliseconds later: until then bind says EBUSY.
        let deadline = std::time::Instant::now() + BIND_RETRY;
        let r = loop {
            // SAFETY: `addr` is a valid sockaddr_xdp of the size passed.
            let r = unsafe {
                libc::bind(
                    raw,
                    (&addr as *const libc::sockaddr_xdp).cast(),
                    std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            let busy = r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY);
            if !busy || std::time::Instant::now() >= deadline {
                break r;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{name}: already has an AF_XDP socket on queue 0 (another process's, perhaps \
                     another switch on this interface)"
                ),
            ));
        }
        check(r, "binding the AF_XDP socket to queue 0", name)?;
        let zero_copy = get_opt(raw, libc::XDP_OPTIONS, libc::xdp_options { flags: 0 })
            .is_ok_and(|(o, _)| o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0);
        let prog = prog::attach(name, ifindex, raw)?;
        Ok(AfXdp {
            prog,
            rx,
            tx,
            fill,
            comp,
            fd,
            umem,
            tx_free: (u64::from(RX_FRAMES)..u64::from(RX_FRAMES + TX_FRAMES))
                .rev()
                .map(|i| i * FRAME as u64)
                .collect(),
            tx_len: vec![0; TX_FRAMES as usize],
            refill: Vec::with_capacity(RX_FRAMES as usize),
            spent: Vec::new(),
            unkicked: 0,
            zero_copy,
            options,
            tx_dropped: 0,
            sent: TxTotals::default(),
            rx_drops: RxDrops::default(),
            stats_seen: 0,
            name: name.to_string(),
            ifindex,
        })
    }
}
