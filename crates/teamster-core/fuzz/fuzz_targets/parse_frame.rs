//! Fuzzes the frame parser: any byte string must give a key or an error, never a panic.
//! A parsed VXLAN frame's inner key must not itself claim a second VXLAN layer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster_core::wire::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = parse(data) {
        if let Some(vx) = &key.vxlan {
            assert!(vx.inner.vxlan.is_none(), "VXLAN decoded more than one level deep");
            assert!(vx.vni < (1 << 24));
        }
    }
});
