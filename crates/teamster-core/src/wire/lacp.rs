//! Slow-protocol frames (IEEE 802.1AX): LACPDUs and Marker PDUs, parsed and built.
//!
//! A slow-protocol frame is untagged, sent to `01:80:c2:00:00:02` with EtherType `0x8809`; its
//! first byte is the subtype (1 LACP, 2 Marker) and its second the version. An LACPDU then
//! carries TLVs at fixed offsets: Actor information (type 1, length 20: system priority,
//! system MAC, key, port priority, port number, state, 3 reserved bytes), Partner information
//! (type 2, length 20, the same fields), Collector information (type 3, length 16: the maximum
//! collector delay and 12 reserved bytes) and the Terminator (type 0, length 0), then 50
//! reserved bytes: 110 bytes after the Ethernet header. A Marker PDU carries one Marker
//! (type 1) or Marker Response (type 2) TLV of length 16: requester port, requester system and
//! transaction ID, then 2 pad bytes, and the Terminator.
//!
//! Parsing is strict about what it reads (types and lengths must be the standard's; a version
//! above 1 is accepted, as the standard asks, its extra bytes ignored) and never panics; it is
//! fuzzed with the frame parser. Written by hand: no maintained crate decodes 802.1AX PDUs.

use super::MacAddr;

/// The slow-protocols multicast address LACPDUs and Marker PDUs are sent to.
pub const SLOW_PROTOCOLS_MAC: MacAddr = MacAddr([0x01, 0x80, 0xc2, 0x00, 0x00, 0x02]);
/// The slow-protocols EtherType.
pub const ETHERTYPE_SLOW: u16 = 0x8809;
/// Bytes of an LACPDU after the Ethernet header.
pub const LACPDU_LEN: usize = 110;

/// Actor state bits (802.1AX `Actor_State`, the same layout for the partner).
pub mod state {
    pub const ACTIVITY: u8 = 0x01;
    pub const TIMEOUT: u8 = 0x02;
    pub const AGGREGATION: u8 = 0x04;
    pub const SYNCHRONIZATION: u8 = 0x08;
    pub const COLLECTING: u8 = 0x10;
    pub const DISTRIBUTING: u8 = 0x20;
    pub const DEFAULTED: u8 = 0x40;
    pub const EXPIRED: u8 = 0x80;

    /// The bits set in `s`, by their short names, as `ovs-appctl lacp/show` lists them.
    pub fn names(s: u8) -> Vec<&'static str> {
        [
            (ACTIVITY, "activity"),
            (TIMEOUT, "timeout"),
            (AGGREGATION, "aggregation"),
            (SYNCHRONIZATION, "synchronized"),
            (COLLECTING, "collecting"),
            (DISTRIBUTING, "distributing"),
            (DEFAULTED, "defaulted"),
            (EXPIRED, "expired"),
        ]
        .into_iter()
        .filter(|(bit, _)| s & bit != 0)
        .map(|(_, n)| n)
        .collect()
    }
}

/// One side's information in an LACPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct LacpInfo {
    pub system_priority: u16,
    pub system: MacAddr,
    pub key: u16,
    pub port_priority: u16,
    pub port: u16,
    pub state: u8,
}

/// An LACPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lacpdu {
    pub actor: LacpInfo,
    pub partner: LacpInfo,
    /// Tens of microseconds (802.1AX `CollectorMaxDelay`).
    pub collector_max_delay: u16,
}

/// A Marker or Marker Response PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerPdu {
    pub response: bool,
    pub requester_port: u16,
    pub requester_system: MacAddr,
    pub transaction: u32,
}

/// A parsed slow-protocol frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowPdu {
    Lacp(Lacpdu),
    Marker(MarkerPdu),
}

/// Why a slow-protocol frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SlowError {
    #[error("not a slow-protocol frame")]
    NotSlow,
    #[error("truncated: {0} bytes")]
    Truncated(usize),
    #[error("unknown slow-protocol subtype {0}")]
    Subtype(u8),
    #[error("version 0")]
    Version,
    #[error("TLV at byte {at}: type {kind} length {len}, expected type {want_kind} length {want_len}")]
    Tlv {
        at: usize,
        kind: u8,
        len: u8,
        want_kind: u8,
        want_len: u8,
    },
}

/// True if `frame` is addressed as a slow-protocol frame (its EtherType, untagged).
pub fn is_slow(frame: &[u8]) -> bool {
    frame.get(12..14) == Some(&ETHERTYPE_SLOW.to_be_bytes())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn mac_at(b: &[u8], at: usize) -> MacAddr {
    let mut m = [0; 6];
    m.copy_from_slice(&b[at..at + 6]);
    MacAddr(m)
}

/// Checks the TLV header at `at` of PDU body `b`.
fn tlv(b: &[u8], at: usize, want_kind: u8, want_len: u8) -> Result<(), SlowError> {
    let (kind, len) = (b[at], b[at + 1]);
    if kind != want_kind || len != want_len {
        return Err(SlowError::Tlv {
            at,
            kind,
            len,
            want_kind,
            want_len,
        });
    }
    Ok(())
}

fn info_at(b: &[u8], at: usize) -> LacpInfo {
    LacpInfo {
        system_priority: u16_at(b, at),
        system: mac_at(b, at + 2),
        key: u16_at(b, at + 8),
        port_priority: u16_at(b, at + 10),
        port: u16_at(b, at + 12),
        state: b[at + 14],
    }
}

/// Parses a slow-protocol Ethernet frame (see the [module documentation](self)).
pub fn parse_slow(frame: &[u8]) -> Result<SlowPdu, SlowError> {
    if !is_slow(frame) {
        return Err(SlowError::NotSlow);
    }
    let b = &frame[14..];
    if b.len() < 2 {
        return Err(SlowError::Truncated(frame.len()));
    }
    if b[1] == 0 {
        return Err(SlowError::Version);
    }
    match b[0] {
        1 => {
            // Through the terminator; the reserved tail may be cut by a sloppy sender.
            if b.len() < 60 {
                return Err(SlowError::Truncated(frame.len()));
            }
            tlv(b, 2, 1, 20)?;
            tlv(b, 22, 2, 20)?;
            tlv(b, 42, 3, 16)?;
            // Version 2 (802.1AX-2014) puts more TLVs after the collector's: not read.
            if b[1] == 1 {
                tlv(b, 58, 0, 0)?;
            }
            Ok(SlowPdu::Lacp(Lacpdu {
                actor: info_at(b, 4),
                partner: info_at(b, 24),
                collector_max_delay: u16_at(b, 44),
            }))
        }
        2 => {
            if b.len() < 20 {
                return Err(SlowError::Truncated(frame.len()));
            }
            let kind = b[2];
            if kind != 1 && kind != 2 {
                tlv(b, 2, 1, 16)?;
            }
            tlv(b, 2, kind, 16)?;
            tlv(b, 18, 0, 0)?;
            Ok(SlowPdu::Marker(MarkerPdu {
                response: kind == 2,
                requester_port: u16_at(b, 4),
                requester_system: mac_at(b, 6),
                transaction: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            }))
        }
        other => Err(SlowError::Subtype(other)),
    }
}

/// The Ethernet header of a slow-protocol frame from `src`.
fn header(src: MacAddr) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + LACPDU_LEN);
    f.extend_from_slice(&SLOW_PROTOCOLS_MAC.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&ETHERTYPE_SLOW.to_be_bytes());
    f
}

fn put_info(f: &mut Vec<u8>, kind: u8, i: &LacpInfo) {
    f.extend_from_slice(&[kind, 20]);
    f.extend_from_slice(&i.system_priority.to_be_bytes());
    f.extend_from_slice(&i.system.0);
    f.extend_from_slice(&i.key.to_be_bytes());
    f.extend_from_slice(&i.port_priority.to_be_bytes());
    f.extend_from_slice(&i.port.to_be_bytes());
    f.push(i.state);
    f.extend_from_slice(&[0; 3]);
}

/// An LACPDU frame from `src`: 124 bytes (128 with the FCS the NIC adds).
pub fn build_lacpdu(src: MacAddr, pdu: &Lacpdu) -> Vec<u8> {
    let mut f = header(src);
    f.extend_from_slice(&[1, 1]);
    put_info(&mut f, 1, &pdu.actor);
    put_info(&mut f, 2, &pdu.partner);
    f.extend_from_slice(&[3, 16]);
    f.extend_from_slice(&pdu.collector_max_delay.to_be_bytes());
    f.extend_from_slice(&[0; 12]);
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&[0; 50]);
    f
}

/// The Marker Response to `m` (the same fields, TLV type 2), from `src`, padded to the
/// minimum frame.
pub fn build_marker_response(src: MacAddr, m: &MarkerPdu) -> Vec<u8> {
    let mut f = header(src);
    f.extend_from_slice(&[2, 1, 2, 16]);
    f.extend_from_slice(&m.requester_port.to_be_bytes());
    f.extend_from_slice(&m.requester_system.0);
    f.extend_from_slice(&m.transaction.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    // The Marker PDU is 110 bytes after the header, like an LACPDU (reserved bytes to the end).
    f.resize(14 + LACPDU_LEN, 0);
    f
}

/// True if `frame` is a slow-protocol frame sent to the slow-protocols address (the only ones
/// LACP takes: a unicast 0x8809 frame could come from anywhere in the VLAN).
pub fn is_slow_to_us(frame: &[u8]) -> bool {
    is_slow(frame) && frame.get(..6) == Some(&SLOW_PROTOCOLS_MAC.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn info(n: u8) -> LacpInfo {
        LacpInfo {
            system_priority: 0x8000 + u16::from(n),
            system: MacAddr([2, 0, 0, 0, 0, n]),
            key: 0x0100 + u16::from(n),
            port_priority: 0x00ff,
            port: u16::from(n) + 1,
            state: state::ACTIVITY | state::AGGREGATION | n,
        }
    }

    #[test]
    fn an_lacpdu_has_the_standard_layout_and_round_trips() {
        let pdu = Lacpdu {
            actor: info(1),
            partner: info(2),
            collector_max_delay: 5,
        };
        let f = build_lacpdu(MacAddr([2, 0, 0, 0, 0, 9]), &pdu);
        assert_eq!(f.len(), 14 + LACPDU_LEN);
        assert_eq!(&f[..6], &SLOW_PROTOCOLS_MAC.0);
        assert_eq!(&f[12..16], &[0x88, 0x09, 1, 1]);
        // Actor TLV at 16, partner at 36, collector at 56, terminator at 72.
        assert_eq!(&f[16..18], &[1, 20]);
        assert_eq!(&f[20..26], &[2, 0, 0, 0, 0, 1]);
        assert_eq!(&f[36..38], &[2, 20]);
        assert_eq!(&f[56..58], &[3, 16]);
        assert_eq!(&f[72..74], &[0, 0]);
        assert_eq!(parse_slow(&f), Ok(SlowPdu::Lacp(pdu)));
        // A later version's PDU is read as version 1, whatever follows the collector's TLV.
        let mut v2 = f.clone();
        v2[15] = 2;
        v2[72] = 4;
        assert_eq!(parse_slow(&v2), Ok(SlowPdu::Lacp(pdu)));
        assert!(is_slow_to_us(&f));
        let mut unicast = f.clone();
        unicast[0] = 2;
        assert!(is_slow(&unicast) && !is_slow_to_us(&unicast));
    }

    #[test]
    fn a_marker_is_answered_with_its_own_fields() {
        let m = MarkerPdu {
            response: false,
            requester_port: 7,
            requester_system: MacAddr([2, 0, 0, 0, 0, 7]),
            transaction: 0xdead_beef,
        };
        let mut req = header(MacAddr([2, 0, 0, 0, 0, 7]));
        req.extend_from_slice(&[2, 1, 1, 16, 0, 7, 2, 0, 0, 0, 0, 7, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0]);
        req.resize(60, 0);
        assert_eq!(parse_slow(&req), Ok(SlowPdu::Marker(m)));
        let resp = build_marker_response(MacAddr([2, 0, 0, 0, 0, 1]), &m);
        assert_eq!(
            parse_slow(&resp),
            Ok(SlowPdu::Marker(MarkerPdu { response: true, ..m }))
        );
    }

    #[test]
    fn bad_pdus_are_refused() {
        let f = build_lacpdu(MacAddr([2, 0, 0, 0, 0, 9]), &Lacpdu::default());
        assert_eq!(parse_slow(&f[..40]), Err(SlowError::Truncated(40)));
        let mut bad = f.clone();
        bad[37] = 19;
        assert!(matches!(parse_slow(&bad), Err(SlowError::Tlv { at: 22, .. })));
        let mut bad = f.clone();
        bad[14] = 3;
        assert_eq!(parse_slow(&bad), Err(SlowError::Subtype(3)));
        let mut bad = f.clone();
        bad[15] = 0;
        assert_eq!(parse_slow(&bad), Err(SlowError::Version));
        let mut bad = f;
        bad[12] = 0x08;
        assert_eq!(parse_slow(&bad), Err(SlowError::NotSlow));
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_fail_without_panicking(tail in proptest::collection::vec(any::<u8>(), 0..140)) {
            let mut f = header(MacAddr([2, 0, 0, 0, 0, 1]));
            f.extend_from_slice(&tail);
            let _ = parse_slow(&f);
            let _ = parse_slow(&tail);
        }

        #[test]
        fn any_lacpdu_round_trips(a in any::<[u8; 15]>(), p in any::<[u8; 15]>(), d in any::<u16>()) {
            let info = |b: [u8; 15]| LacpInfo {
                system_priority: u16::from_be_bytes([b[0], b[1]]),
                system: MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]]),
                key: u16::from_be_bytes([b[8], b[9]]),
                port_priority: u16::from_be_bytes([b[10], b[11]]),
                port: u16::from_be_bytes([b[12], b[13]]),
                state: b[14],
            };
            let pdu = Lacpdu { actor: info(a), partner: info(p), collector_max_delay: d };
            prop_assert_eq!(parse_slow(&build_lacpdu(MacAddr::default(), &pdu)), Ok(SlowPdu::Lacp(pdu)));
        }
    }
}
