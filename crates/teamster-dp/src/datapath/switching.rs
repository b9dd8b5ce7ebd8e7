//! Switching one received frame: the switch decides, the frame is copied or edited per place.
//!
//! Model. A frame taken from an interface's receive queue goes through
//! [`teamster_core::switch::Switch::forward`], which returns every place it goes ([`Forward`]:
//! a port or an uplink, and the tag edit for it). The frame then waits in [`Scratch::pending`]
//! until the end of the receive pass, when the `egress` submodule sends or queues it. Most
//! unicast frames go one place unedited and keep their buffer (no copy); every other place
//! gets a copy, edited, its offload request moved by the bytes the edit added or removed; a
//! frame with an offload request going into a VXLAN tunnel is completed once and each piece
//! wrapped. A place an edit cannot be made for is noted in [`Scratch::refused`] and counted
//! there as `bad_offload`.

use crate::pool::FramePool;
use crate::Frame;
use teamster_core::offload::Offload;
use teamster_core::switch::{Egress, Forward, Ingress, Switch, TagEdit};
use teamster_core::teaming::PortId;
use teamster_core::Instant;

/// A frame the switch decided to send, in its own buffer, waiting for the end of the receive
/// pass.
pub(super) struct Pending {
    /// The port it came from (None: an uplink).
    pub from: Option<PortId>,
    pub to: Egress,
    pub frame: Frame,
}

/// What a turn of the loop reuses from turn to turn.
#[derive(Default)]
pub(super) struct Scratch {
    /// Frames read this round, with the receive queue (ports then uplinks) they go to.
    pub received: Vec<(usize, Frame)>,
    pub pending: Vec<Pending>,
    pub forwards: Vec<Forward>,
    /// Places a frame could not be edited for (counted as `bad_offload` there).
    pub refused: Vec<Egress>,
    /// Frames taken from each receive queue this turn.
    pub taken: Vec<usize>,
    /// The receive queues whose interfaces are read this round.
    pub readable: Vec<usize>,
}

impl Scratch {
    /// Passes one received frame (in a pooled buffer) through the switch, counted at its wire
    /// length, and queues it for each place it goes: the buffer itself where it goes one place
    /// with its tags as they are (most unicast frames: no copy), else a copy per place, edited,
    /// its offload request moved by the tag the switch added or removed (or, into a tunnel, done
    /// first). Where an edit cannot be made, the place is added to `refused` (a `bad_offload`).
    pub(super) fn switch_frame(
        &mut self,
        switch: &mut Switch,
        pool: &mut FramePool,
        from: Ingress,
        frame: Frame,
        now: Instant,
    ) {
        let Scratch {
            pending,
            forwards,
            refused,
            ..
        } = self;
        let Frame { bytes: frame, offload } = frame;
        let port = match from {
            Ingress::Port(p) => Some(p),
            Ingress::Uplink(_) => None,
        };
        // A VXLAN frame from a sender on this host (a veth's peer) may come with its UDP checksum
        // left to the device: finish it, so that the VTEP can check it like any other.
        let (mut frame, mut offload) = (frame, offload);
        if port.is_none()
            && offload.csum.is_some()
            && offload.gso.is_none()
            && teamster_core::offload::vxlan::is_vxlan(&frame)
        {
            offload.finish_checksum(&mut frame);
        }
        let extra_wire = offload.wire_len(&frame) - frame.len();
        forwards.clear();
        switch.forward(from, &frame, extra_wire, now, forwards);
        // One place with no tag change (most unicast frames): the buffer itself goes, its source
        // MAC replaced in place if the switch says so.
        if let [f] = forwards[..] {
            if f.edit == TagEdit::Keep {
                let mut frame = frame;
                if let (Some(mac), Some(src)) = (f.source, frame.get_mut(6..12)) {
                    src.copy_from_slice(&mac.0);
                }
                pending.push(Pending {
                    from: port,
                    to: f.to,
                    frame: Frame::new(frame, offload),
                });
                return;
            }
        }
        // Into a tunnel, a frame with an offload request is completed once (cut at the sender's
        // segment size, checksummed: a packet socket's device cannot do that inside VXLAN), and
        // its pieces wrapped for each remote VTEP it goes to; whether they fit the uplink's MTU is
        // the fitting's to say.
        let mut pieces: Option<Option<Vec<Vec<u8>>>> = None;
        for f in forwards.iter() {
            match f.edit {
                TagEdit::Encap(t) if !offload.is_none() => {
                    let max_ip = u16::MAX as usize - teamster_core::offload::vxlan::overhead(false);
                    let done = pieces
                        .get_or_insert_with(|| teamster_core::offload::vxlan::complete_inner(&frame, offload, max_ip));
                    let Some(done) = done else {
                        refused.push(f.to);
                        continue;
                    };
                    for piece in done {
                        let mut buf = pool.take(piece.len() + teamster_core::offload::vxlan::overhead(false));
                        if t.wrap_into(piece, &mut buf) {
                            pending.push(Pending {
                                from: port,
                                to: f.to,
                                frame: Frame::complete(buf),
                            });
                        } else {
                            pool.give(buf);
                            refused.push(f.to);
                        }
                    }
                }
                // Out of a tunnel: the outer request (the UDP checksum) goes with the outer headers;
                // a super-frame of VXLAN frames cannot be opened as one.
                TagEdit::Strip(_) if offload.gso.is_some() => refused.push(f.to),
                _ => {
                    let delta = f.edit.len_delta();
                    let mut buf = pool.take((frame.len() as isize + delta) as usize);
                    f.apply_into(&frame, &mut buf);
                    let offload = match f.edit {
                        TagEdit::Strip(_) => Offload::NONE,
                        _ => offload.shifted(delta),
                    };
                    pending.push(Pending {
                        from: port,
                        to: f.to,
                        frame: Frame::new(buf, offload),
                    });
                }
            }
        }
        pool.give(frame);
    }
}
