//! The capabilities the data plane needs: CAP_NET_RAW (packet sockets) and CAP_NET_ADMIN
//! (promiscuous mode, link state). Checked before anything is opened, so a missing one is one
//! clear error rather than a failure halfway through attaching interfaces. An interface on
//! AF_XDP also needs CAP_BPF (or CAP_SYS_ADMIN, which implied it before Linux 5.8) to load its
//! XDP program.

const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// Which of the needed capabilities the effective set `cap_eff` lacks.
pub fn missing_from(cap_eff: u64) -> Vec<&'static str> {
    [(CAP_NET_RAW, "CAP_NET_RAW"), (CAP_NET_ADMIN, "CAP_NET_ADMIN")]
        .into_iter()
        .filter(|(bit, _)| cap_eff & (1u64 << bit) == 0)
        .map(|(_, name)| name)
        .collect()
}

/// Whether the effective set `cap_eff` may load an XDP program.
pub fn can_load_bpf(cap_eff: u64) -> bool {
    cap_eff & ((1u64 << CAP_BPF) | (1u64 << CAP_SYS_ADMIN)) != 0
}

/// Checks that this process may load an XDP program (for an interface on AF_XDP).
pub fn check_xdp() -> Result<(), String> {
    if can_load_bpf(effective()?) {
        Ok(())
    } else {
        Err(
            "AF_XDP needs CAP_BPF (or CAP_SYS_ADMIN) to load its XDP program: run as root, grant \
             cap_bpf with setcap, or use backend = \"af_packet\""
                .to_string(),
        )
    }
}

/// This process's effective capabilities (from /proc/self/status).
fn effective() -> Result<u64, String> {
    let status =
        std::fs::read_to_string("/proc/self/status").map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .ok_or_else(|| "no CapEff line in /proc/self/status".to_string())
}

/// Checks this process's effective capabilities.
pub fn check() -> Result<(), String> {
    let missing = missing_from(effective()?);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "teamster run needs {} (run as root, or grant them with `setcap cap_net_raw,cap_net_admin+ep` on the binary)",
            missing.join(" and ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_is_missing() {
        assert_eq!(missing_from(0), ["CAP_NET_RAW", "CAP_NET_ADMIN"]);
        assert_eq!(missing_from(1 << 13), ["CAP_NET_ADMIN"]);
        assert!(missing_from((1 << 12) | (1 << 13)).is_empty());
        assert!(!can_load_bpf((1 << 12) | (1 << 13)));
        assert!(can_load_bpf(1 << 39) && can_load_bpf(1 << 21));
    }
}
