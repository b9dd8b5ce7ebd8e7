//! The host model: what a host is made of, as `switch.toml` and scenario files write it.
//!
//! Model. A host has uplinks (a name and a capacity), port groups (a teaming policy, an explicit
//! failover order, failback, notify-switches and an optional VLAN), Network I/O Control's traffic
//! classes and resource pools, and ports (a name, a virtual port ID, a MAC, a group, a place in
//! the NetIOC tree and its reservation, shares and limit), plus the Load-Based Teaming knobs
//! (`[lbt]`) and the reservation cap. The live switch, the fluid and the packet simulator and the
//! control-plane API all read and check this one model, through [`build`]; each adds only what is
//! its own (an interface name, a workload, a traffic source).
//!
//! The entries here are the files' serde shapes; [`build`] checks every name, number and rule and
//! turns them into the engine's objects: the [`Team`](crate::teaming::Team) with its groups and
//! ports, the NetIOC [`Tree`](crate::ioc::Tree) with a leaf per port, passed through admission
//! control against the smallest uplink. Every error names the key path (`ports[2].mac`) and what
//! was expected; nothing is half-built.
//!
//! A file's port entry is declared with [`port_entry!`](crate::port_entry), which writes the shared fields once
//! (serde's `flatten` cannot be combined with `deny_unknown_fields`, and unknown keys must stay
//! errors) and lets each file add its own.

mod build;
mod entries;
mod netioc;
mod text;

pub use build::{build, failover_order, overlays, uplink_index, Host, HostPort, HostSpec, UplinkDesc};
pub use build::{check_capacity, check_name, MAX_CAPACITY, MIN_CAPACITY};
pub use entries::{ClassEntry, GroupEntry, LacpEntry, LbtSection, OverlayEntry, PoolEntry, PortCommon, PortEntry};
pub use netioc::{build_tree, PortControls};
pub use text::parse_toml;

/// Declares a file's `[[ports]]` entry: the fields every host file shares (`name`, `id`, `mac`,
/// `group`, `pool`, `class`, `reservation`, `shares`, `limit`) followed by the file's own, with
/// unknown keys refused, and implements [`PortEntry`] for it. The calling crate needs `serde`.
#[macro_export]
macro_rules! port_entry {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// Unique among traffic classes, pools and ports.
            pub name: String,
            /// Virtual port ID (what originating-port-ID hashes); default 1 + the port's index.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub id: Option<u32>,
            /// The port's MAC (unicast, not all-zero).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub mac: Option<String>,
            /// Its port group.
            pub group: String,
            /// Its network resource pool (a VM port), or
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub pool: Option<String>,
            /// its traffic class (system traffic such as NFS); neither: under the `vm` class.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub class: Option<String>,
            /// Minimum guaranteed send rate.
            #[serde(default)]
            pub reservation: $crate::units::Bandwidth,
            /// Share of the excess (default normal).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub shares: Option<$crate::ioc::Shares>,
            /// Cap on the send rate.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub limit: Option<$crate::units::Bandwidth>,
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $crate::host::PortEntry for $name {
            fn common(&self) -> $crate::host::PortCommon<'_> {
                $crate::host::PortCommon {
                    name: &self.name,
                    id: self.id,
                    mac: self.mac.as_deref(),
                    group: &self.group,
                    pool: self.pool.as_deref(),
                    class: self.class.as_deref(),
                    reservation: self.reservation,
                    shares: self.shares,
                    limit: self.limit,
                }
            }
        }
    };
}

#[cfg(test)]
mod tests;
