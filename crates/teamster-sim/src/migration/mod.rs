//! Migration mode: live migrations between hosts whose teams a physical switch joins.
//!
//! Model. Each VM's migration copies its memory once, as one TCP stream from an endpoint of the
//! source host to an endpoint of the destination host (the `k`th migration of a set uses each
//! host's endpoint `k mod endpoints`); no pages are dirtied, so a stream never pauses. A set of
//! migrations starts its first `concurrency` VMs at `start_s` and the next at the first step
//! after one finishes (a hand-off costs at most a step). Every clock step (1 ms by default):
//! 1. each host's team runs its timers (flowlet rebalancing, Load-Based Teaming, LACP), and
//!    LACPDUs cross to and from the switch ([`fabric`]);
//! 2. the source host's real team picks the member each stream leaves on
//!    ([`teamster_core::teaming::Team::select_frame`]: Hyper-V Port by endpoint, Address Hash
//!    by the stream's addresses and ports, Dynamic by flowlet), and the switch picks the member
//!    of the destination host it arrives on ([`fabric::SwitchSide::arrival`]);
//! 3. every stream crosses two links, its sending member and its receiving member, and gets its
//!    max-min fair rate over all links ([`crate::maxmin::progressive_fill`]) at the TCP
//!    goodput of a 1500-byte MTU ([`engine::GOODPUT`]); the switch itself never limits;
//! 4. what each stream carried is taken off what it has left and fed to both teams' meters.
//!
//! Not modelled: TCP's ramp-up and losses, the acknowledgements' traffic, CPU limits, pages
//! dirtied during the copy (pre-copy rounds), compression, and traffic other than migrations.

pub mod engine;
pub mod expect;
pub mod fabric;
pub mod scenario;
#[cfg(test)]
mod tests;

pub use engine::{run, MigrationRun};
pub use scenario::{MigrationFile, MigrationPlan};

/// Checks a migration scenario, its expectations included; errors carry the key path.
pub fn resolve(file: MigrationFile) -> Result<MigrationPlan, String> {
    let plan = scenario::resolve(file)?;
    for (i, x) in plan.file.expect.iter().enumerate() {
        expect::check(x, &plan).map_err(|e| format!("expect[{i}]: {e}"))?;
    }
    Ok(plan)
}
