//! Fuzzes the slow-protocol parser (LACPDUs, Marker PDUs): any byte string must give a PDU or an
//! error, never a panic, and a parsed LACPDU must build back to a frame that parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster_core::wire::lacp::{build_lacpdu, parse_slow, SlowPdu};
use teamster_core::wire::MacAddr;

fuzz_target!(|data: &[u8]| {
    if let Ok(SlowPdu::Lacp(pdu)) = parse_slow(data) {
        let again = build_lacpdu(MacAddr::default(), &pdu);
        assert_eq!(parse_slow(&again), Ok(SlowPdu::Lacp(pdu)));
    }
});
