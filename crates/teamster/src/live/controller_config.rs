//! The `[controller]` section: the cluster controller this switch's host belongs to.
//!
//! ```toml
//! [controller]
//! url = "http://127.0.0.1:9190"    # the controller's loopback TCP API, or
//! socket = "/run/teamster/controller.sock"   # its unix socket (the default)
//! token_file = "/etc/teamster/controller.token"  # the bearer token for url
//! endpoints = ["/run/teamster/c1.sock", "http://127.0.0.1:9191"]  # or several controllers
//! ca = "/etc/teamster/ca.pem"     # for https:// controllers: the cluster's CA certificate,
//! cert = "/etc/teamster/host-host1.pem"  # this host's certificate (`ca issue-host`),
//! key = "/etc/teamster/host-host1.key"   # and its key (0600)
//! host = "host1"                  # this host's name in the cluster
//! interface = "{vm}"              # the interface of a VM's port: {vm} is the VM's name
//! group = "vms"                   # the port group of VMs the controller gives no group
//! derived = ["vm"]                # classes and pools reserving what their VMs reserve
//! interval_ms = 1000              # how often the host reports and is told its VMs
//! isolation = "detach"            # cut off from the controller: "detach" or "keep" its VMs
//! ```
//!
//! `teamster run switch.toml --controller URL|SOCKET` names the controller when the section
//! gives neither `url` nor `socket` (nor `endpoints`).
//!
//! `endpoints` names every controller of a cluster that runs several behind etcd (each a
//! loopback URL, an https:// URL or a unix socket path; at most 16), instead of `url` or `socket`: only the
//! leader serves, and the host reports to the one that answered last, trying the others in
//! turn when it does not (within the same report's time), so it follows the leader by itself.
//!
//! A controller on the network is reached over TLS only: `https://HOST:PORT` (an IP address or
//! a DNS name its certificate names), with `ca`, the cluster's CA certificate that signed the
//! controller's, and `cert` and `key`, this host's certificate (`teamster controller ca
//! issue-host NAME`), which proves the host is `host` and no other; then `host` must be one
//! lowercase DNS label. A plain `http://` URL must be on loopback (the single machine's
//! default, with `token_file`).
//!
//! With it, the switch registers its shape (uplinks, traffic classes, pools, reservation cap,
//! `derived`) under `host`, reports its uplinks' link states and the VMs whose ports it has
//! attached, and attaches a port for each VM the controller assigns to it (named after the VM,
//! on `interface`, with the VM's MAC and controls), detaching those it no longer does. Those
//! ports are not saved: the controller holds them. Every error names its key.
//!
//! `isolation` is what the host does when no report has been answered for nearly the
//! controller's host timeout: "detach" (the default) detaches the VMs assigned to it, since the
//! controller is about to restart them elsewhere, so that no VM is active on two hosts;
//! "keep" keeps forwarding for them, and the controller, told so at registration, then never
//! restarts them elsewhere (the host's failure is a fault instead): the VMs stay reachable
//! through a controller outage, and a real host failure leaves them down until an operator
//! acts.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The `[controller]` section as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    pub host: String,
    #[serde(default = "default_interface")]
    pub interface: String,
    pub group: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub derived: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Isolation::is_default")]
    pub isolation: Isolation,
}

/// What a host cut off from its controller does with its VMs (see the module documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    #[default]
    Detach,
    Keep,
}

impl Isolation {
    pub fn is_default(&self) -> bool {
        *self == Isolation::Detach
    }
}

fn default_interface() -> String {
    "{vm}".into()
}

/// The controller named on the command line (`teamster run --controller URL|SOCKET`).
static ENDPOINT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Names the controller from the command line: every `[controller]` section read from now on
/// (at start and at each reload) that gives neither `url` nor `socket` reaches it there.
pub fn set_endpoint(endpoint: &str) {
    let _ = ENDPOINT.set(endpoint.to_string());
}

/// Fills `section`'s endpoint from the command line, if the file gives none.
pub fn fill(section: &mut ControllerSection) {
    if !section.endpoints.is_empty() {
        return;
    }
    if let (None, None, Some(e)) = (&section.url, &section.socket, ENDPOINT.get()) {
        if is_url(e) {
            section.url = Some(e.clone());
        } else {
            section.socket = Some(PathBuf::from(e));
        }
    }
}

/// The most controllers a host is given.
pub const MAX_ENDPOINTS: usize = 16;

/// Whether `e` names a controller by URL (not by its socket's path).
pub fn is_url(e: &str) -> bool {
    e.starts_with("http://") || e.starts_with("https://")
}

/// Checks that `url` is a loopback http://IP:PORT, or an https://HOST:PORT.
fn check_url(key: &str, url: &str) -> Result<(), String> {
    if let Some(rest) = url.strip_prefix("https://") {
        let rest = rest.trim_end_matches('/');
        let port = rest.rsplit_once(':').and_then(|(h, p)| (!h.is_empty()).then_some(p));
        if !port.is_some_and(|p| p.parse::<u16>().is_ok_and(|p| p > 0)) || rest.contains('/') {
            return Err(format!("{key} = \"{url}\": expected https://HOST:PORT"));
        }
        return Ok(());
    }
    let rest = url.strip_prefix("http://").unwrap_or("");
    let addr: Option<std::net::SocketAddr> = rest.trim_end_matches('/').parse().ok();
    if !addr.is_some_and(|a| a.ip().is_loopback()) {
        return Err(format!(
            "{key} = \"{url}\": expected http://IP:PORT on loopback, or https://HOST:PORT for a controller on the network"
        ));
    }
    Ok(())
}

/// The default interval between reports.
pub const DEFAULT_INTERVAL_MS: u64 = 1000;

impl ControllerSection {
    /// Checks the section against the switch's port groups, classes and pools.
    pub fn check(&self, groups: &[String], nodes: &[String]) -> Result<(), String> {
        teamster_core::host::check_name("controller.host", &self.host)?;
        if self.url.is_some() && self.socket.is_some() {
            return Err("controller: give url or socket, not both".into());
        }
        if !self.endpoints.is_empty() && (self.url.is_some() || self.socket.is_some()) {
            return Err("controller: give endpoints, or url or socket, not both".into());
        }
        if self.endpoints.len() > MAX_ENDPOINTS {
            return Err(format!("controller.endpoints: more than {MAX_ENDPOINTS}"));
        }
        if let Some(url) = &self.url {
            check_url("controller.url", url)?;
        }
        for (i, e) in self.endpoints.iter().enumerate() {
            if is_url(e) {
                check_url(&format!("controller.endpoints[{i}]"), e)?;
            } else if !e.starts_with('/') {
                return Err(format!(
                    "controller.endpoints[{i}] = \"{e}\": expected http://IP:PORT on loopback, https://HOST:PORT or an absolute socket path"
                ));
            }
        }
        self.check_tls()?;
        if !self.interface.contains("{vm}") {
            return Err(format!(
                "controller.interface = \"{}\": expected a name with {{vm}} in it (each VM's port needs its own interface)",
                self.interface
            ));
        }
        if !groups.contains(&self.group) {
            return Err(format!("controller.group: no port group named `{}`", self.group));
        }
        for (i, d) in self.derived.iter().enumerate() {
            if !nodes.contains(d) {
                return Err(format!("controller.derived[{i}]: no traffic class or pool named `{d}`"));
            }
        }
        match self.interval_ms {
            Some(ms) if !(100..=60_000).contains(&ms) => {
                Err(format!("controller.interval_ms = {ms}: expected 100 to 60000"))
            }
            _ => Ok(()),
        }
    }

    /// Checks `ca`, `cert` and `key`: an https:// controller needs `ca`; `cert` and `key` come
    /// together, and then `host` must be a name a certificate can prove.
    fn check_tls(&self) -> Result<(), String> {
        let https = self
            .url
            .iter()
            .chain(&self.endpoints)
            .any(|e| e.starts_with("https://"));
        if https && self.ca.is_none() {
            return Err("controller.ca: an https:// controller needs the cluster's CA certificate".into());
        }
        match (&self.cert, &self.key) {
            (Some(_), None) => return Err("controller.key: controller.cert needs its key".into()),
            (None, Some(_)) => return Err("controller.cert: controller.key needs its certificate".into()),
            (Some(_), Some(_)) if !https => {
                return Err("controller.cert: a certificate is for https:// controllers only".into());
            }
            (Some(_), Some(_)) => {
                crate::identity::host_label(&self.host).map_err(|e| format!("controller.host: {e}"))?;
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// The interface of VM `vm`'s port.
    pub fn interface_of(&self, vm: &str) -> String {
        self.interface.replace("{vm}", vm)
    }

    /// How often to report.
    pub fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(extra: &str) -> Result<ControllerSection, String> {
        let text = format!("host = \"h1\"\ngroup = \"vms\"\n{extra}");
        let s: ControllerSection = toml::from_str(&text).map_err(|e| e.to_string())?;
        s.check(&["vms".into()], &[]).map(|()| s)
    }

    /// Several controllers are tried in the order given; each must be a loopback URL or an
    /// absolute socket path, and they do not mix with `url` or `socket`.
    #[test]
    fn endpoints_name_every_controller_and_bad_ones_are_refused_by_key() {
        let s = section("endpoints = [\"/run/c1.sock\", \"http://127.0.0.1:9191\"]").unwrap();
        assert_eq!(s.endpoints.len(), 2);
        section("socket = \"/run/c.sock\"").unwrap();
        for (extra, key) in [
            ("endpoints = [\"http://10.0.0.1:9191\"]", "controller.endpoints[0]"),
            ("endpoints = [\"/a.sock\", \"c.sock\"]", "controller.endpoints[1]"),
            ("endpoints = [\"/a.sock\"]\nsocket = \"/b.sock\"", "not both"),
            ("url = \"http://192.0.2.1:1\"", "controller.url"),
            ("url = \"https://192.0.2.1\"", "controller.url"),
            ("url = \"https://192.0.2.1:1\"", "controller.ca"),
            (
                "url = \"https://192.0.2.1:1\"\nca = \"/c\"\ncert = \"/x\"",
                "controller.key",
            ),
            (
                "url = \"http://127.0.0.1:1\"\nca = \"/c\"\ncert = \"/x\"\nkey = \"/k\"",
                "https:// controllers only",
            ),
        ] {
            let e = section(extra).unwrap_err();
            assert!(e.contains(key), "{extra}: {e}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("\"/c{i}.sock\"")).collect();
        let e = section(&format!("endpoints = [{}]", many.join(", "))).unwrap_err();
        assert!(e.contains("more than 16"), "{e}");
    }
}
