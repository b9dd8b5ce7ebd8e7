//! Restoring a received frame as it was on the wire, with its offload request.
//!
//! Model. A packet socket hands over each frame with the kernel's metadata: the VLAN tag it
//! moved out of the frame (VLAN offload; `tpacket_auxdata`'s `tp_vlan_tci`, with
//! `TP_STATUS_VLAN_VALID`, and the TPID where `TP_STATUS_VLAN_TPID_VALID` says it is given), and
//! the virtio-net header ([`crate::vnet`]) with what the sender left to the hardware. The tag is
//! put back after the MAC addresses, so the switch sees what was on the wire, and the offload
//! request's offsets move with the payload; the request is checked against the frame first, and
//! a frame whose request does not match it is refused (the caller counts it) rather than
//! forwarded with offsets that point elsewhere. Partial checksums are not completed here: the
//! frame leaves with its request where the egress interface takes it, and is finished in
//! software only where it does not.

use crate::vnet;
use teamster_core::offload::OffloadError;

const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// The kernel's per-frame metadata from `tpacket_auxdata`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuxData {
    pub status: u32,
    pub vlan_tci: u16,
    pub vlan_tpid: u16,
}

/// Hands one received frame (in its own buffer) to `sink` with its offload request, its VLAN
/// tag put back where the kernel took it out. A request that does not match the frame is
/// refused and the buffer given back.
pub fn deliver(
    mut frame: Vec<u8>,
    vnet_hdr: &[u8; vnet::LEN],
    aux: AuxData,
    sink: &mut dyn FnMut(crate::Frame),
) -> Result<(), (OffloadError, Vec<u8>)> {
    let offload = match vnet::parse(vnet_hdr, &frame) {
        Ok(o) => o,
        Err(e) => return Err((e, frame)),
    };
    if aux.status & TP_STATUS_VLAN_VALID == 0 || frame.len() < 12 {
        sink(crate::Frame::new(frame, offload));
        return Ok(());
    }
    let tpid = if aux.status & TP_STATUS_VLAN_TPID_VALID != 0 {
        aux.vlan_tpid
    } else {
        0x8100
    };
    let [t0, t1] = tpid.to_be_bytes();
    let [v0, v1] = aux.vlan_tci.to_be_bytes();
    frame.splice(12..12, [t0, t1, v0, v1]);
    sink(crate::Frame::new(frame, offload.shifted(4)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_core::offload::{Offload, PartialChecksum};

    /// An IPv4 UDP frame with 8 bytes of payload.
    fn udp4() -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend([0x45, 0, 0, 36, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend([0, 53, 0, 53, 0, 16, 0, 0]);
        f.extend([9u8; 8]);
        f
    }

    fn got(data: &[u8], h: [u8; vnet::LEN], aux: AuxData) -> Result<(Vec<u8>, Offload), OffloadError> {
        let mut out = None;
        deliver(data.to_vec(), &h, aux, &mut |f| out = Some((f.bytes, f.offload))).map_err(|(e, _)| e)?;
        Ok(out.expect("delivered"))
    }

    #[test]
    fn a_frame_without_metadata_passes_as_it_is() {
        let f = udp4();
        assert_eq!(got(&f, [0; 10], AuxData::default()), Ok((f.clone(), Offload::NONE)));
    }

    #[test]
    fn the_vlan_tag_is_put_back_and_the_checksum_start_moves_with_it() {
        let f = udp4();
        // Partial UDP checksum: start 34 (after Ethernet and IPv4), field at +6.
        let h = [1, 0, 0, 0, 0, 0, 34, 0, 6, 0];
        let aux = AuxData {
            status: TP_STATUS_VLAN_VALID,
            vlan_tci: 42,
            vlan_tpid: 0,
        };
        let (frame, o) = got(&f, h, aux).unwrap();
        assert_eq!(&frame[12..16], &[0x81, 0x00, 0, 42]);
        assert_eq!(frame.len(), f.len() + 4);
        assert_eq!(o.csum, Some(PartialChecksum { start: 38, offset: 6 }));
        assert_eq!(o.check(&frame), Ok(()));
        // An 802.1ad TPID is restored as given.
        let aux = AuxData {
            status: TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID,
            vlan_tci: 7,
            vlan_tpid: 0x88a8,
        };
        assert_eq!(&got(&f, [0; 10], aux).unwrap().0[12..16], &[0x88, 0xa8, 0, 7]);
    }

    #[test]
    fn a_request_pointing_outside_the_frame_is_refused() {
        let f = udp4();
        let h = [1, 0, 0, 0, 0, 0, 200, 0, 6, 0];
        assert_eq!(got(&f, h, AuxData::default()), Err(OffloadError::ChecksumOutside));
    }
}
