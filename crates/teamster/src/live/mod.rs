//! `teamster run switch.toml`: the live switch on real interfaces.
//!
//! [`config`] checks the file before anything is attached; [`daemon`] hands the checked plan to
//! the data plane's poll loop (`teamster_dp::datapath`: AF_PACKET per port and uplink, the core
//! switch, a NetIOC scheduler and pacer per uplink, netlink failover within one loop turn) and
//! takes the control plane's turn in it: checked configuration changes from the API applied
//! between packets, a [`snapshot::Snapshot`] (built in [`view`]) published twice a second, the
//! status file. [`persist`] saves changes so they survive a restart. SIGTERM or SIGINT stop it;
//! interfaces are left as they were (promiscuous mode ends with the sockets).

pub mod claims;
pub mod config;
pub mod controller_config;
pub mod daemon;
pub mod data_plane;
mod dir_walk;
pub mod domain_ports;
pub mod event_log;
mod glob;
pub mod heap;
pub mod lacp_view;
pub mod persist;
pub mod port_rules;
pub mod rx_config;
pub mod rx_view;
pub mod safe_file;
pub mod service;
pub mod snapshot;
mod snapshot_thread;
pub mod status_writer;
mod view;
