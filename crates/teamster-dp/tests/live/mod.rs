//! What the data plane's live tests share: whether they may run here.

/// True if this process runs as root; else a skip with a message, or, when
/// `TEAMSTER_REQUIRE_LIVE=1` (as CI sets), a failure, so a live test never passes there by
/// skipping.
pub fn as_root() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        assert!(
            std::env::var("TEAMSTER_REQUIRE_LIVE").as_deref() != Ok("1"),
            "TEAMSTER_REQUIRE_LIVE=1, but this live test needs root for veth and AF_PACKET"
        );
        eprintln!("skipped: needs root for veth and AF_PACKET");
    }
    root
}
