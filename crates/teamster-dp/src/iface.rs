//! What the kernel says about one interface, by name: its index, MTU and whether it can carry
//! traffic.
//!
//! Model. A name is first checked to be one Linux could have given an interface (1-15 bytes, not
//! `.` or `..`, no `/`, `:`, NUL or whitespace), so it can never walk out of `/sys/class/net`.
//! Then every read either answers or is an error naming the interface and what could not be
//! read; nothing falls back to a made-up value. A missing interface is
//! [`io::ErrorKind::NotFound`], so a caller can tell "not there (yet)" from "broken". An
//! interface can carry traffic when it has carrier and its operational state is `up` or
//! `unknown` (what IFF_LOWER_UP and IFF_RUNNING say over netlink); reading `carrier` of an
//! interface that is administratively down fails with EINVAL, which means "no".

use std::ffi::CString;
use std::io;
use std::path::PathBuf;

/// Longest interface name Linux accepts (IFNAMSIZ less the NUL).
const NAME_MAX: usize = 15;

/// Checks that `name` is a name Linux could give an interface.
pub fn check_name(name: &str) -> io::Result<()> {
    let bad = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{name}`: not an interface name ({why})"),
        ))
    };
    if name.is_empty() || name.len() > NAME_MAX {
        return bad("1 to 15 bytes");
    }
    if name == "." || name == ".." {
        return bad("`.` and `..` are not allowed");
    }
    // Linux refuses `/`, `:` and whitespace; control characters it would take are refused too,
    // since the name ends up in logs and sysfs paths.
    if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b.is_ascii_control() || b.is_ascii_whitespace())
    {
        return bad("no `/`, `:`, control characters or whitespace");
    }
    Ok(())
}

/// Whether `name` now names the interface with index `ifindex`.
pub fn is_index(name: &str, ifindex: i32) -> bool {
    index(name).is_ok_and(|i| i == ifindex)
}

/// The interface's index now, or NotFound.
pub fn index(name: &str) -> io::Result<i32> {
    check_name(name)?;
    let cname = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
    // SAFETY: `cname` is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(cname.as_ptr()) } {
        0 => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{name}: no such interface"),
        )),
        i => i32::try_from(i).map_err(|_| io::Error::other(format!("{name}: interface index {i} out of range"))),
    }
}

fn sysfs_path(name: &str, file: &str) -> io::Result<PathBuf> {
    check_name(name)?;
    Ok(PathBuf::from("/sys/class/net").join(name).join(file))
}

/// Reads one sysfs attribute of the interface, trimmed; the error names the file.
fn read(name: &str, file: &str) -> io::Result<String> {
    let path = sysfs_path(name, file)?;
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("{name}: cannot read {}: {e}", path.display())))
}

/// The interface's MAC address.
pub fn mac(name: &str) -> io::Result<teamster_core::wire::MacAddr> {
    let text = read(name, "address")?;
    text.parse()
        .map_err(|_| io::Error::other(format!("{name}: address `{text}` is not a MAC")))
}

/// The interface's MTU.
pub fn mtu(name: &str) -> io::Result<usize> {
    let text = read(name, "mtu")?;
    text.parse()
        .map_err(|_| io::Error::other(format!("{name}: mtu `{text}` is not a number")))
}

/// How many receive queues the interface has (the `rx-N` entries under `queues` in sysfs).
pub fn rx_queues(name: &str) -> io::Result<usize> {
    let path = sysfs_path(name, "queues")?;
    let entries = std::fs::read_dir(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{name}: cannot read {}: {e}", path.display())))?;
    let mut n = 0;
    for e in entries {
        let e = e.map_err(|e| io::Error::new(e.kind(), format!("{name}: cannot read {}: {e}", path.display())))?;
        n += usize::from(e.file_name().to_string_lossy().starts_with("rx-"));
    }
    Ok(n)
}

/// The link speed the interface reports, in Mbit/s; None when it reports none (sysfs gives -1,
/// or refuses, while the carrier is down).
pub fn speed_mbps(name: &str) -> Option<u64> {
    read(name, "speed")
        .ok()?
        .parse::<i64>()
        .ok()
        .filter(|v| *v > 0)
        .map(|v| v as u64)
}

/// The interface's driver (`veth`, `tun`, `ixgbe`...), as ethtool's ETHTOOL_GDRVINFO reports it.
pub fn driver(name: &str) -> io::Result<String> {
    check_name(name)?;
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_GDRVINFO: u32 = 0x3;
    // struct ethtool_drvinfo: cmd, then driver[32] and the rest we do not read.
    let mut info = [0u8; 196];
    info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    // SAFETY: ifreq is plain data; zeroed is valid, and the name and data pointer are set below.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = info.as_mut_ptr().cast();
    // SAFETY: a plain datagram socket, closed by OwnedFd.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is ours.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: `req` names the interface and points at `info`, which outlives the call and is
    // as large as the kernel writes.
    let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&fd), SIOCETHTOOL, &mut req) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{name}: ETHTOOL_GDRVINFO: {e}")));
    }
    let driver = &info[4..36];
    let end = driver.iter().position(|b| *b == 0).unwrap_or(driver.len());
    Ok(String::from_utf8_lossy(&driver[..end]).into_owned())
}

/// The index of the interface's link (for a veth, its peer's index, in the peer's namespace).
pub fn iflink(name: &str) -> io::Result<u32> {
    read(name, "iflink")?
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{name}: iflink: {e}")))
}

/// Whether the interface can carry traffic now: carrier, and operationally up (or unknown).
pub fn link_up(name: &str) -> io::Result<bool> {
    let path = sysfs_path(name, "carrier")?;
    let carrier = match std::fs::read_to_string(&path) {
        Ok(s) => s.trim() == "1",
        // The kernel refuses to say while the interface is administratively down.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => false,
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("{name}: cannot read {}: {e}", path.display()),
            ))
        }
    };
    Ok(carrier && matches!(read(name, "operstate")?.as_str(), "up" | "unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_leave_sysfs_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "../etc",
            "a/b",
            "eth0:1",
            "has space",
            "sixteen-bytes-xx",
        ] {
            let e = check_name(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
            assert!(index(bad).is_err() && mtu(bad).is_err() && link_up(bad).is_err());
        }
        for good in ["lo", "eth0", "vnet12", "tmt-u1", "fifteen-bytes-x"] {
            check_name(good).unwrap();
        }
    }

    #[test]
    fn a_missing_interface_is_not_found_and_named() {
        let e = index("tmt-nowhere").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("tmt-nowhere"), "{e}");
        let e = mtu("tmt-nowhere").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("/sys/class/net/tmt-nowhere/mtu"), "{e}");
        assert_eq!(link_up("tmt-nowhere").unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn loopback_is_read() {
        assert!(index("lo").unwrap() > 0);
        assert!(mtu("lo").unwrap() >= 1500);
        assert_eq!(rx_queues("lo").unwrap(), 1);
    }
}
