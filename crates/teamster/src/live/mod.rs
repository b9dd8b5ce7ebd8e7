//! `teamster run switch.toml`: the live switch on real interfaces.
//!
//! [`config`] checks the file before anything is attached; [`daemon`] opens one AF_PACKET
//! backend per port and uplink and runs the poll loop: received frames go through the core
//! switch; frames for an uplink wait in that uplink's NetIOC scheduler and leave at its
//! capacity through a pacer; carrier changes from netlink fail over within one loop turn
//! (at most 10 ms); team-originated frames (notify-switch RARPs) go straight out. SIGTERM or
//! SIGINT stop it; interfaces are left as they were (promiscuous mode ends with the sockets).
//!
//! The loop publishes a [`snapshot::Snapshot`] twice a second (built in [`view`]) and takes
//! checked configuration changes from the control plane between packets; [`persist`] saves
//! those changes so they survive a restart.

pub mod config;
pub mod daemon;
pub mod persist;
pub mod snapshot;
mod view;
