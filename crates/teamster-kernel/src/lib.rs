//! Teamster's kernel fast path: the engine decides, the kernel executes.
//!
//! Model. One BPF program (`bpf/switch.bpf.c`), attached to the tcx ingress of every VM port and
//! uplink of a switch, switches each frame as [`teamster_core::switch::Switch::forward`] would:
//! port security, learning (bounded per port and in all, with ageing), known-unicast delivery,
//! flooding within a VLAN to the ports that take it, the switch-independent team's loop
//! prevention (no uplink to uplink, floods taken from each port's receive uplink only, our own
//! frames reflected back dropped), VLAN push and pop, and the team's uplink choice per port or
//! per flow. It reads everything it decides from maps that the engine writes ([`tables`]): the
//! engine stays the one place where policy lives, and a failover or a Load-Based Teaming move
//! is a map update.
//!
//! Dynamic's flowlet buckets are split the same way ([`flowlet_sync`]): the engine places each
//! bucket's first flowlet and moves targets, the program keeps the rest and is read back.
//!
//! What would change the engine's own state (a guest taking a new MAC, a port's claim on its
//! MAC, LACPDUs, link-local frames a group asks for, frames the program's parser cannot decide
//! exactly) is *punted*: handed to user space whole with where it came from, for the engine to
//! switch.
//!
//! NetIOC runs beside it on the uplinks' HTB qdiscs ([`shaping`], programmed over rtnetlink by
//! [`tc`]): the engine plans each uplink's classes from its tree, and the program marks each
//! port's frames with its class.
//!
//! The program records its decision on the last frame (output slots, VLAN edit, source rewrite,
//! drop reason, punt reason) per CPU; the differential test (`tests/differential.rs`) runs
//! thousands of random frames through the engine and through the program under
//! BPF_PROG_TEST_RUN and compares each verdict and the MAC tables.
//!
//! Why C and a committed object: the program is C built with Debian's clang (`bpf/build.sh`,
//! byte-reproducible, checked by CI), loaded with aya, a pure-Rust loader; so building Teamster
//! needs Rust alone, and the program is ordinary C that the kernel's own samples and every BPF
//! tool read. (aya's Rust BPF programs would need a nightly toolchain and bpf-linker.)

pub mod abi;
pub mod checksum;
pub mod flowlet_sync;
mod kernel_path;
pub mod mac_sync;
pub mod pins;
mod program;
pub mod shaping;
pub mod tables;
pub mod tc;

pub use kernel_path::KernelPath;
pub use program::{monotonic_ns, tcx_ingress_programs, Error, SwitchProgram, Target};
pub use tables::{Binding, Interfaces, Slots, Tables, Unsupported};
