//! The XDP program that hands an interface's received frames to an AF_XDP socket, and its
//! attachment.
//!
//! Model. The program is six BPF instructions assembled here: look up the frame's receive queue
//! in an XSKMAP and redirect the frame to the socket found there, or pass it to the kernel's
//! stack when no socket is bound to that queue (the lower bits of `bpf_redirect_map`'s flags
//! are its answer on a miss). It is loaded with bpf(2) and attached through a BPF link, never
//! through netlink: the kernel detaches a link's program when the link's last descriptor
//! closes, so dropping [`XdpAttach`], a clean exit and a crash (SIGKILL included) all leave the
//! interface as it was, and nothing is pinned in bpffs to outlive the process. A link is never
//! put over a program already on the interface (another process's link, or a program another
//! tool attached through netlink, perhaps left by a crashed tool): the kernel refuses with EBUSY
//! or EEXIST, and the error names the interface and the command that removes a stale one.
//!
//! Attach mode: native (driver) XDP first, generic (skb) XDP where the driver has none. veth has
//! native XDP of its own: with a program attached, frames its peer sends are received through
//! veth's NAPI and meet the program before any skb processing (no XDP on the peer or GRO is
//! needed for that; those matter only for frames redirected *into* a veth). Native XDP on veth
//! also turns off GSO on the peer while the program (single-buffer) is attached, so frames
//! arrive MTU-sized; generic XDP would meet unsegmented super-frames and the socket would drop
//! them.
//!
//! Why by hand: `aya` loads programs from ELF objects only, which would need clang targeting
//! BPF in the build (and on every CI machine) for six instructions; libxdp (`xsk-rs`,
//! `libxdp-sys`) builds a vendored libxdp 1.6 with clang and libelf, or needs Debian's 1.3,
//! and its dispatcher wants a mounted bpffs. Four bpf(2) commands with fixed layouts are less
//! to trust than either.

use crate::bpf_call::{bpf, bpf_fd};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_PROG_LOAD: u32 = 5;
const BPF_LINK_CREATE: u32 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_ATTACH_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `struct xdp_md`'s `rx_queue_index`.
const XDP_MD_RX_QUEUE: i16 = 16;

/// One BPF instruction, as `struct bpf_insn` lays it out.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    /// Destination register in the low nibble, source in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

/// The program: `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`.
fn program(map_fd: RawFd) -> [Insn; 6] {
    [
        // r2 = *(u32 *)(r1 + 16): the receive queue.
        insn(0x61, 2, 1, XDP_MD_RX_QUEUE, 0),
        // r1 = the map (a 64-bit load of the map's descriptor, resolved by the kernel).
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        // r3 = XDP_PASS: the action when the queue has no socket.
        insn(0xb7, 3, 0, 0, XDP_PASS),
        // r0 = bpf_redirect_map(r1, r2, r3); return r0.
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        insn(0x95, 0, 0, 0, 0),
    ]
}

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// Where the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver, before an skb exists.
    Native,
    /// In the kernel's receive path, on skbs (any device).
    Generic,
}

impl AttachMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        }
    }
}

/// The program attached to one interface, redirecting queue 0 to one socket. Dropping it
/// detaches the program.
pub struct XdpAttach {
    /// Declared first: dropped (the program detached) before the map and program go.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    pub mode: AttachMode,
}

/// Names what failed and, where the errno says it, what is missing.
fn explain(name: &str, what: &str, e: io::Error) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => " (needs CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN: run as root)",
        Some(libc::ENOSYS) => " (this kernel has no bpf(2): CONFIG_BPF_SYSCALL)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("{name}: {what}: {e}{hint}"))
}

/// Creates the XSKMAP, puts `xsk` at queue 0, loads the program and attaches it to `ifindex`:
/// native mode first, generic mode if the driver has no native XDP. Refuses an interface that
/// already has a program.
pub fn attach(name: &str, ifindex: i32, xsk: RawFd) -> io::Result<XdpAttach> {
    let mut mc = MapCreate {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: 1,
        ..Default::default()
    };
    mc.map_name[..8].copy_from_slice(b"tmt_xsks");
    // SAFETY: `mc` is BPF_MAP_CREATE's attribute, holding no addresses.
    let map = unsafe { bpf_fd(BPF_MAP_CREATE, &mut mc) }.map_err(|e| {
        let e = if e.raw_os_error() == Some(libc::EINVAL) {
            io::Error::new(e.kind(), "no XSKMAP in this kernel (CONFIG_XDP_SOCKETS)")
        } else {
            e
        };
        explain(name, "creating the XSKMAP", e)
    })?;
    let (key, value) = (0u32, xsk as u32);
    let mut mu = MapUpdate {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..Default::default()
    };
    // SAFETY: `mu` is BPF_MAP_UPDATE_ELEM's attribute; its key and value point at the two u32
    // above, which outlive the call.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut mu) }.map_err(|e| explain(name, "adding the socket to the XSKMAP", e))?;
    let prog = load(name, map.as_raw_fd())?;
    let mut mode = AttachMode::Native;
    let link = loop {
        let mut lc = LinkCreate {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex as u32,
            attach_type: BPF_ATTACH_XDP,
            flags: match mode {
                AttachMode::Native => XDP_FLAGS_DRV_MODE,
                AttachMode::Generic => XDP_FLAGS_SKB_MODE,
            },
        };
        // SAFETY: `lc` is BPF_LINK_CREATE's attribute, holding no addresses.
        match unsafe { bpf_fd(BPF_LINK_CREATE, &mut lc) } {
            Ok(fd) => break fd,
            // The driver has no native XDP: the generic hook works on every device.
            Err(e) if mode == AttachMode::Native && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                mode = AttachMode::Generic;
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EEXIST)) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "{name}: already has an XDP program (another process's, or one a tool left \
                         behind); see `ip -d link show dev {name}`, and remove a stale one with \
                         `ip link set dev {name} xdp off` (or `xdpgeneric off`)"
                    ),
                ));
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                return Err(explain(
                    name,
                    &format!(
                        "attaching {} XDP (the driver refused: on veth, the peer's MTU must fit one \
                         page, and the interface needs at least as many receive queues as its peer \
                         has transmit queues)",
                        mode.as_str()
                    ),
                    e,
                ))
            }
            Err(e) => return Err(explain(name, &format!("attaching {} XDP", mode.as_str()), e)),
        }
    };
    Ok(XdpAttach {
        _link: link,
        _prog: prog,
        _map: map,
        mode,
    })
}

/// Loads the program for `map_fd`; if the verifier refuses it, loads it again with a log so the
/// error says why.
fn load(name: &str, map_fd: RawFd) -> io::Result<OwnedFd> {
    let insns = program(map_fd);
    let license = b"Apache-2.0\0";
    let mut log = vec![0u8; 0];
    for attempt in 0..2 {
        if attempt == 1 {
            log = vec![0u8; 16 << 10];
        }
        let mut pl = ProgLoad {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: u32::from(attempt == 1),
            log_size: log.len() as u32,
            log_buf: if log.is_empty() { 0 } else { log.as_mut_ptr() as u64 },
            ..Default::default()
        };
        pl.prog_name[..8].copy_from_slice(b"tmt_xsk\0");
        // SAFETY: `pl` is BPF_PROG_LOAD's attribute; its instructions, licence and log buffer
        // (of the length given) outlive the call.
        match unsafe { bpf_fd(BPF_PROG_LOAD, &mut pl) } {
            Ok(fd) => return Ok(fd),
            Err(e) if attempt == 0 && e.raw_os_error() == Some(libc::EINVAL) => continue,
            Err(e) => {
                let text = String::from_utf8_lossy(&log);
                let text = text.trim_end_matches('\0').trim();
                let what = if text.is_empty() {
                    "loading the XDP program".to_string()
                } else {
                    format!("loading the XDP program (verifier: {text})")
                };
                return Err(explain(name, &what, e));
            }
        }
    }
    unreachable!("the second attempt returns")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoding the kernel expects: opcode, registers, the map's descriptor in the wide load.
    #[test]
    fn the_program_is_the_six_instructions_intended() {
        let p = program(7);
        let bytes: Vec<[u8; 8]> = p
            .iter()
            .map(|i| {
                let mut b = [0u8; 8];
                b[0] = i.code;
                b[1] = i.regs;
                b[2..4].copy_from_slice(&i.off.to_le_bytes());
                b[4..8].copy_from_slice(&i.imm.to_le_bytes());
                b
            })
            .collect();
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!(bytes[0], [0x61, 0x12, 16, 0, 0, 0, 0, 0]);
        assert_eq!(bytes[1], [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(bytes[2], [0; 8]);
        assert_eq!(bytes[3], [0xb7, 0x03, 0, 0, 2, 0, 0, 0]);
        assert_eq!(bytes[4], [0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(bytes[5], [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    /// Attribute layouts match `union bpf_attr` (offsets read from linux/bpf.h).
    #[test]
    fn attribute_layouts_match_the_kernel() {
        assert_eq!(std::mem::size_of::<ProgLoad>(), 72);
        assert_eq!(std::mem::offset_of!(ProgLoad, prog_flags), 44);
        assert_eq!(std::mem::offset_of!(ProgLoad, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoad, expected_attach_type), 68);
        assert_eq!(std::mem::offset_of!(MapCreate, map_name), 28);
        assert_eq!(std::mem::offset_of!(LinkCreate, flags), 12);
        assert_eq!(std::mem::size_of::<MapUpdate>(), 32);
    }
}
