//! Fuzzes VXLAN decapsulation: any bytes go in; nothing panics, and a frame that opens gives an
//! inner frame inside it that, sent back through the tunnel it came from, opens again to the
//! same VNI and inner bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster_core::offload::{decapsulate, encapsulate, TunnelEnds};
use teamster_core::wire::MacAddr;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = decapsulate(data) else { return };
    assert!(d.inner.len() >= 14 && d.inner.len() <= data.len());
    let Ok(ends) = TunnelEnds::new(
        MacAddr([2, 0, 0, 0, 0, 1]),
        MacAddr([2, 0, 0, 0, 0, 2]),
        d.local,
        d.remote,
    ) else {
        return;
    };
    let again = encapsulate(d.inner, d.vni, &ends).expect("an inner frame that arrived fits a datagram");
    let back = decapsulate(&again).expect("what the switch wraps opens");
    assert_eq!((back.vni, back.inner), (d.vni, d.inner));
});
