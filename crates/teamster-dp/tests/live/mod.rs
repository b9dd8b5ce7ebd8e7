//! What the live tests share: whether they may run here. The `teamster` crate's live tests
//! include this file too (`#[path]`), so both crates skip, or fail under CI, the same way.

/// Whether this process runs as root.
pub fn running_as_root() -> bool {
    // SAFETY: getuid(2) has no preconditions and cannot fail.
    unsafe { libc::getuid() == 0 }
}

/// Whether a live test may run: true if `have`; else a skip with a message, or, when
/// `TEAMSTER_REQUIRE_LIVE=1` (as CI sets), a failure, so a live test can never pass there by
/// skipping.
pub fn skip_unless(have: bool, needs: &str) -> bool {
    if !have {
        assert!(
            std::env::var("TEAMSTER_REQUIRE_LIVE").as_deref() != Ok("1"),
            "TEAMSTER_REQUIRE_LIVE=1, but this live test cannot run: it needs {needs}"
        );
        eprintln!("skipped: needs {needs}");
    }
    have
}

/// True if this process runs as root; else a skip (or, under CI, a failure) saying so.
pub fn as_root() -> bool {
    skip_unless(running_as_root(), "root for veth and AF_PACKET")
}
