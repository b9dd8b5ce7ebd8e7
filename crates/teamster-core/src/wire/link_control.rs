//! Link-control frames: the frames a link's two ends speak to each other, which a bridge
//! consumes or drops and never forwards.
//!
//! Model. IEEE 802.1Q (Table 8-1, after 802.1D) reserves the group addresses
//! `01:80:c2:00:00:00` to `01:80:c2:00:00:0f` for protocols confined to one link or one bridge:
//! `..00` the Spanning Tree's BPDUs (STP, RSTP, MSTP, TCN), `..01` MAC control (802.3x PAUSE,
//! 802.1Qbb PFC), `..02` the slow protocols (LACP, Marker, OAM), `..03` port authentication
//! (802.1X EAPOL) and LLDP to the nearest non-TPMR bridge, `..0e` LLDP to the nearest bridge,
//! and the rest reserved for future use. A bridge filters every one of them, tagged or not. MAC
//! control (EtherType `0x8808`) is link-local whatever its destination. Cisco's switches use
//! two addresses of their own, which an 802.1D bridge would flood as ordinary multicast:
//! `01:00:0c:cc:cc:cd` for PVST+ BPDUs (a spanning tree per VLAN) and `01:00:0c:cc:cc:cc` for
//! CDP, VTP, DTP, PAgP and UDLD (a VM speaking VTP or DTP can rewrite a physical switch's VLANs
//! or turn its port into a trunk). Teamster takes part in none of these protocols (LACP aside,
//! which [`super::lacp`] handles), so each such frame is either dropped or, where the operator
//! asked for it, delivered to a monitoring VM; never forwarded from one link to another.

/// A link-control frame's protocol, by its destination address (and EtherType for MAC
/// control and LLDP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkControl {
    /// To `01:80:c2:00:00:00`: a Spanning Tree BPDU (STP, RSTP, MSTP, TCN).
    SpanningTree,
    /// EtherType `0x8808` or to `01:80:c2:00:00:01`: 802.3x PAUSE, 802.1Qbb PFC.
    MacControl,
    /// To `01:80:c2:00:00:02`: LACP, Marker, OAM.
    SlowProtocol,
    /// LLDP (EtherType `0x88cc`) to `01:80:c2:00:00:00`, `..03` or `..0e`.
    Lldp,
    /// To `01:80:c2:00:00:03` and not LLDP: 802.1X EAPOL.
    PortAuthentication,
    /// To another address of the reserved block (`01:80:c2:00:00:04` to `..0f`).
    Reserved,
    /// To `01:00:0c:cc:cc:cd`: Cisco PVST+ BPDUs.
    Pvst,
    /// To `01:00:0c:cc:cc:cc`: Cisco CDP, VTP, DTP, PAgP, UDLD.
    CiscoControl,
}

/// The first five bytes of the 802.1D reserved block.
const RESERVED_PREFIX: [u8; 5] = [0x01, 0x80, 0xc2, 0x00, 0x00];
/// Cisco's Shared Spanning Tree Protocol address (PVST+).
const PVST: [u8; 6] = [0x01, 0x00, 0x0c, 0xcc, 0xcc, 0xcd];
/// Cisco's address for CDP, VTP, DTP, PAgP and UDLD.
const CISCO: [u8; 6] = [0x01, 0x00, 0x0c, 0xcc, 0xcc, 0xcc];
/// MAC control's EtherType.
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// LLDP's EtherType.
pub const ETHERTYPE_LLDP: u16 = 0x88cc;

impl LinkControl {
    /// A stable name for logs and tests.
    pub fn name(self) -> &'static str {
        match self {
            LinkControl::SpanningTree => "stp",
            LinkControl::MacControl => "mac_control",
            LinkControl::SlowProtocol => "slow_protocol",
            LinkControl::Lldp => "lldp",
            LinkControl::PortAuthentication => "eapol",
            LinkControl::Reserved => "reserved",
            LinkControl::Pvst => "pvst",
            LinkControl::CiscoControl => "cisco",
        }
    }
}

/// What link-control protocol `frame` carries, if any (see the module documentation); a frame
/// too short for an Ethernet header is none (the parser refuses it). The destination decides,
/// and the EtherType after up to two VLAN tags: a tag does not make such a frame forwardable.
pub fn link_control(frame: &[u8]) -> Option<LinkControl> {
    let dst: &[u8; 6] = frame.get(..6)?.try_into().ok()?;
    let ether_type = super::network_layer(frame).map(|(et, _)| et);
    if ether_type == Some(ETHERTYPE_MAC_CONTROL) {
        return Some(LinkControl::MacControl);
    }
    if dst[..5] == RESERVED_PREFIX && dst[5] <= 0x0f {
        let lldp = ether_type == Some(ETHERTYPE_LLDP);
        return Some(match dst[5] {
            0x00 | 0x03 | 0x0e if lldp => LinkControl::Lldp,
            0x00 => LinkControl::SpanningTree,
            0x01 => LinkControl::MacControl,
            0x02 => LinkControl::SlowProtocol,
            0x03 => LinkControl::PortAuthentication,
            _ => LinkControl::Reserved,
        });
    }
    match *dst {
        PVST => Some(LinkControl::Pvst),
        CISCO => Some(LinkControl::CiscoControl),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: [u8; 6], tags: &[u16], ether_type: u16) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
        for vid in tags {
            f.extend_from_slice(&[0x81, 0x00]);
            f.extend_from_slice(&vid.to_be_bytes());
        }
        f.extend_from_slice(&ether_type.to_be_bytes());
        f.resize(64, 0);
        f
    }

    fn reserved(last: u8) -> [u8; 6] {
        [0x01, 0x80, 0xc2, 0, 0, last]
    }

    #[test]
    fn every_reserved_address_and_cisco_protocol_is_link_control() {
        use LinkControl::*;
        let llc = 0x0026; // an 802.3 length field, as BPDUs carry
        let cases = [
            (frame(reserved(0), &[], llc), SpanningTree),
            (frame(reserved(0), &[100], llc), SpanningTree),
            (frame(reserved(1), &[], ETHERTYPE_MAC_CONTROL), MacControl),
            (frame([2, 0, 0, 0, 0, 9], &[], ETHERTYPE_MAC_CONTROL), MacControl),
            (frame(reserved(1), &[], 0x0800), MacControl),
            (frame(reserved(2), &[], 0x8809), SlowProtocol),
            (frame(reserved(3), &[], 0x888e), PortAuthentication),
            (frame(reserved(3), &[], ETHERTYPE_LLDP), Lldp),
            (frame(reserved(0x0e), &[], ETHERTYPE_LLDP), Lldp),
            (frame(reserved(0), &[], ETHERTYPE_LLDP), Lldp),
            (frame(reserved(0x0e), &[], 0x0800), Reserved),
            (frame(reserved(0x0f), &[7, 8], 0x0800), Reserved),
            (frame(reserved(0x08), &[], 0x88f5), Reserved),
            (frame(PVST, &[10], llc), Pvst),
            (frame(CISCO, &[], llc), CiscoControl),
        ];
        for (f, want) in cases {
            assert_eq!(link_control(&f), Some(want), "{:02x?}", &f[..18]);
        }
    }

    #[test]
    fn other_frames_are_not() {
        for dst in [
            reserved(0x10),
            [0x01, 0x80, 0xc2, 0, 0x01, 0x00],
            [0x01, 0x00, 0x5e, 0, 0, 1],
            [0xff; 6],
            [2, 0, 0, 0, 0, 2],
            [0x01, 0x00, 0x0c, 0xcc, 0xcc, 0xce],
        ] {
            assert_eq!(link_control(&frame(dst, &[], 0x0800)), None, "{dst:02x?}");
        }
        // An LLDP EtherType to an ordinary address is an ordinary frame.
        assert_eq!(link_control(&frame([2, 0, 0, 0, 0, 2], &[], ETHERTYPE_LLDP)), None);
        assert_eq!(link_control(&[0x01, 0x80, 0xc2]), None, "too short");
    }
}
