//! A frame in flight through the data plane.
//!
//! Model. A [`Frame`] is the bytes of one Ethernet frame, in a buffer the data plane owns (taken
//! from and given back to its [`crate::pool::FramePool`]), together with the [`Offload`] request
//! it carries: a checksum left to the device, or a super-frame to be cut into segments (TSO/GSO).
//! It travels as one value from the interface it arrived on, through the switch's receive queue,
//! the NetIOC scheduler and the fitting to the interface it leaves by, so the request can never
//! part from its bytes. Its wire length ([`Frame::wire_len`]) is what it costs on the wire: a
//! super-frame's segments with their headers repeated.

use teamster_core::offload::Offload;

/// One frame and its offload request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame from its destination MAC on, without an FCS.
    pub bytes: Vec<u8>,
    /// What is left for a device to do to it (nothing: [`Offload::NONE`]).
    pub offload: Offload,
}

impl Frame {
    /// `bytes` with the offload request `offload`.
    pub fn new(bytes: Vec<u8>, offload: Offload) -> Frame {
        Frame { bytes, offload }
    }

    /// A complete frame: nothing left for a device to do.
    pub fn complete(bytes: Vec<u8>) -> Frame {
        Frame::new(bytes, Offload::NONE)
    }

    /// Bytes it takes on the wire: a super-frame counts as its segments.
    pub fn wire_len(&self) -> usize {
        self.offload.wire_len(&self.bytes)
    }

    /// Its buffer, for the pool.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}
