//! The drops a data plane makes outside the engine's switch (the engine counts its own by
//! DropReason): kept per port and per uplink, each drop on one interface (see
//! `crate::datapath`'s counting rules), by the user-space loop and by the kernel fast path alike.

/// Drops the data plane makes outside the core switch, kept per port and per uplink (each drop
/// on one interface: see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct ExtraDrops {
    /// From this port: its queue in an uplink's scheduler was full.
    pub queue_full: u64,
    /// To this interface: too large for its MTU and not a TCP frame that could be cut.
    pub oversize: u64,
    /// On this interface: the kernel's receive buffer was full before the loop read it; on the
    /// kernel path, past what the interface may hand up per second.
    pub ring_full: u64,
    /// To this interface: the kernel refused to send it.
    pub tx_error: u64,
    /// On this interface: longer on the wire than the kernel captured, so not forwarded.
    pub truncated: u64,
    /// On this interface: its offload request (virtio-net header) did not match the frame; or,
    /// to this interface: a partial checksum it cannot take could not be completed.
    pub bad_offload: u64,
    /// To this interface while it was detached (its interface missing).
    pub detached: u64,
    /// From or to this port: the queue between its port worker and the switching worker was
    /// full (the other thread had fallen behind by thousands of frames).
    pub handoff_full: u64,
    /// On this interface: dropped from the switch's receive queue, which held more than the
    /// switch forwarded (by CoDel, or over the queue's budget).
    pub backlog: u64,
}

impl ExtraDrops {
    /// Every reason with its count, in a stable order, for status and metrics.
    pub fn by_reason(&self) -> [(&'static str, u64); 9] {
        [
            ("queue_full", self.queue_full),
            ("oversize", self.oversize),
            ("ring_full", self.ring_full),
            ("tx_error", self.tx_error),
            ("truncated", self.truncated),
            ("bad_offload", self.bad_offload),
            ("detached", self.detached),
            ("handoff_full", self.handoff_full),
            ("backlog", self.backlog),
        ]
    }
}
