//! Fuzzes the cluster scenario loader (parse and resolve, not the run): any text gives a
//! cluster plan or an error naming the key, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster_sim::cluster::{resolve, ClusterFile};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(f) = teamster_core::host::parse_toml::<ClusterFile>(text) {
        let _ = resolve(f);
    }
});
