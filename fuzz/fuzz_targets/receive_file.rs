//! Fuzzes the receive-mode scenario loader (parse, merge the variants, check; not the run): any
//! text gives a plan or an error naming the key, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = teamster_sim::receive::resolve(text);
});
