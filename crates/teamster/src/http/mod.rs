//! The HTTP plumbing the switch's API ([`crate::api`]) and the cluster controller's
//! ([`crate::controller`]) share, serving and asking:
//! - [`listen`]: the listeners (a unix socket made 0600, a loopback TCP address), each with a
//!   cap on its connections and timeouts for idle and slow ones;
//! - [`admission`] and [`peer`]: on TCP, connections that have not yet presented the token are
//!   shared fairly between the local users holding them (found with sock_diag);
//! - [`auth`]: the bearer token every TCP request must carry;
//! - [`body`]: a request body is one JSON object of bounded size, read within a time limit;
//! - [`error`]: the error answer, a status and `{"error": "..."}`;
//! - [`tls`]: TLS and certificate identities (the controller's listener on the network, its
//!   hosts, its etcd);
//! - [`client`]: the asking side, one request to an API over its socket or TCP (`teamster ctl`
//!   and the switch's agent of the controller use it).
//!
//! It knows nothing of either API's resources: the dependencies point from the APIs to it.

pub mod admission;
pub mod auth;
pub mod body;
pub mod client;
pub mod error;
pub mod listen;
pub mod peer;
pub mod tls;
