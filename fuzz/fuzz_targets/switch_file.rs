//! Fuzzes the `switch.toml` loader, the daemon's own code (`teamster::live::config`): any text
//! gives a checked switch or an error, never a panic. Interfaces are fakes: eth1 and eth2
//! (10 GbE), eth3 (no speed), vnet0 to vnet3. A file that checks must render and check again
//! (what the daemon saves, it can load).
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster::live::config;

struct Fake;

impl config::Interfaces for Fake {
    fn exists(&self, name: &str) -> bool {
        ["eth1", "eth2", "eth3", "vnet0", "vnet1", "vnet2", "vnet3"].contains(&name)
    }
    fn speed_mbps(&self, name: &str) -> Option<u64> {
        (name == "eth1" || name == "eth2").then_some(10_000)
    }
}

/// Parses and checks, as the daemon does at start.
fn load(text: &str) -> Result<config::SwitchPlan, String> {
    config::check(&config::parse_file(text)?, &Fake)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(plan) = load(text) {
        let again = config::render(&plan.file);
        if let Err(e) = load(&again) {
            panic!("a checked file did not load again: {e}\n{again}");
        }
    }
});
