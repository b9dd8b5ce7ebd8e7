//! Teamster's top floor as a library: the live switch's daemon and its API, the cluster
//! controller, the `ctl` client, the libvirt hook, and the commands that script the engine.
//! The `teamster` binary (`main.rs`) parses the command line and calls into these; the fuzz
//! targets link them too.

pub mod api;
pub mod bench_cmd;
pub mod controller;
pub mod ctl;
pub mod http;
pub mod identity;
pub mod ioc_cmd;
pub mod libvirt_hook;
pub mod live;
pub mod rss_cmd;
