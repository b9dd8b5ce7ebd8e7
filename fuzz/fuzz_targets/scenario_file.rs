//! Fuzzes the fluid scenario loader: any text gives a checked scenario or an error naming the
//! key, never a panic. (A `csv` demand reads a file relative to the scenario's folder, here a
//! folder that does not exist.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = teamster_sim::Scenario::from_str(text, Path::new("/nonexistent/fuzz.toml"));
});
