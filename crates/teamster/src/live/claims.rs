//! One Teamster per interface: a switch claims every interface it serves, so a second
//! instance (another configuration file, another socket, the same interfaces) is refused
//! instead of switching every frame a second time.
//!
//! The model. A claim is an exclusive `flock` on a file in [`CLAIMS_DIR`], a directory root
//! makes 0700 (checked as every trusted directory is, [`super::safe_file`]): no other user may
//! open a claim file, so no one without privilege can squat an interface and keep the switch
//! from starting (an abstract unix socket per interface, the other lock the kernel drops with
//! its holder, could be bound by any user of the network namespace first). The kernel drops a
//! claim when its holder dies, so a crash leaves none behind (its file stays, unlocked, and is
//! taken again by the next claim). A released claim's file is removed while still locked, and a
//! claim is taken by locking and then checking that the name still names the file locked
//! ([`TrustedDir::claim`]), so a claim is never taken on a file just released.
//!
//! A claim is keyed by the network namespace (the inode of `/proc/self/ns/net`: the same names
//! in two namespaces are two interfaces) and the interface's name. By name rather than by
//! ifindex, because a switch serves an interface by name: it waits for one that is missing and
//! attaches again when it is made again, so its claim must stand while the interface is absent
//! (keyed by ifindex, two switches would race for each new incarnation). The one case a name
//! misses is an interface renamed under a running switch. Daemons in separate mount namespaces
//! with separate `/run` do not see each other's claims.
//!
//! A switch claims every uplink and port interface at start, before any is touched; every
//! later change (the API, a reload, the port rules, the controller's assignments) claims the
//! interfaces it adds when it is checked, and refuses the change if one is held; a change
//! that drops an interface releases its claim once the data plane has applied it.

use super::config::SwitchPlan;
use super::safe_file::TrustedDir;
use nix::fcntl::Flock;
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Where every Teamster of the host keeps its claims.
pub const CLAIMS_DIR: &str = "/run/teamster/interfaces";

/// The interfaces this switch has claimed.
pub struct Claims {
    dir: TrustedDir,
    /// The network namespace's identity, the first part of every claim's name.
    netns: u64,
    held: HashMap<String, Flock<File>>,
    /// The interfaces the running switch serves; claims on others are a check's whose change
    /// has not (yet) been applied.
    in_force: Vec<String>,
}

impl Claims {
    /// Opens the claims' directory at `dir` (made 0700 if missing).
    pub fn open(dir: &Path) -> Result<Claims, String> {
        let netns = std::fs::metadata("/proc/self/ns/net")
            .map_err(|e| format!("interface claims: cannot tell this network namespace: {e}"))?
            .ino();
        let dir = TrustedDir::open_or_make(dir, "interface claims directory", 0o700)?;
        Ok(Claims {
            dir,
            netns,
            held: HashMap::new(),
            in_force: Vec::new(),
        })
    }

    fn file_name(&self, interface: &str) -> OsString {
        OsString::from(format!("{}.{interface}", self.netns))
    }

    /// Claims every interface of `wanted` (interface, what serves it: "uplink uplink1") not
    /// claimed yet; all or none: on a refusal, those claimed by this call are released, and the
    /// error names the interface, what it was for, and the process holding it.
    pub fn claim<'a>(&mut self, wanted: impl IntoIterator<Item = (&'a str, String)>) -> Result<(), String> {
        let mut new: Vec<String> = Vec::new();
        for (interface, what) in wanted {
            if self.held.contains_key(interface) {
                continue;
            }
            let name = self.file_name(interface);
            let subject = format!("interface {interface} ({what}) is served by");
            match self.dir.claim(&name, &subject) {
                Ok(lock) => {
                    self.held.insert(interface.to_string(), lock);
                    new.push(interface.to_string());
                }
                Err(e) => {
                    for i in new {
                        self.release(&i);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Whether `interface`, wanted for `what`, is claimed by another process now, and by whom
    /// (a test: nothing is kept).
    pub fn held_elsewhere(&mut self, interface: &str, what: &str) -> Option<String> {
        if self.held.contains_key(interface) {
            return None;
        }
        match self.claim([(interface, what.to_string())]) {
            Ok(()) => {
                self.release(interface);
                None
            }
            Err(e) => Some(e),
        }
    }

    /// Records the interfaces the running switch now serves, and releases every other claim.
    pub fn in_force(&mut self, interfaces: Vec<String>) {
        self.in_force = interfaces;
        self.settle();
    }

    /// Releases the claims of checks whose change was not applied: all but those in force.
    pub fn settle(&mut self) {
        let gone: Vec<String> = (self.held.keys())
            .filter(|i| !self.in_force.contains(i))
            .cloned()
            .collect();
        for i in gone {
            self.release(&i);
        }
    }

    fn release(&mut self, interface: &str) {
        if let Some(lock) = self.held.remove(interface) {
            self.dir.release(&self.file_name(interface), lock);
        }
    }

    /// The interfaces claimed, sorted.
    #[cfg(test)]
    pub fn held(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.held.keys().map(String::as_str).collect();
        v.sort();
        v
    }
}

impl Drop for Claims {
    fn drop(&mut self) {
        self.in_force(Vec::new());
    }
}

/// The names of the interfaces `plan` serves.
pub fn names(plan: &SwitchPlan) -> Vec<String> {
    interfaces(plan).into_iter().map(|(i, _)| i.to_string()).collect()
}

/// Every interface `plan` serves, with what serves it: its uplinks', then its ports'.
pub fn interfaces(plan: &SwitchPlan) -> Vec<(&str, String)> {
    let planned = &plan.datapath;
    let uplinks = (planned.uplinks.iter()).map(|u| (u.interface.as_str(), format!("uplink {}", u.name)));
    let ports = (planned.ports.iter()).map(|p| (p.interface.as_str(), format!("port {}", p.name)));
    uplinks.chain(ports).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_all_or_nothing_exclusive_and_released_without_a_trace() {
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("interfaces");
        let mut mine = Claims::open(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        mine.claim([
            ("eth1", "uplink uplink1".to_string()),
            ("vnet0", "port vm1".to_string()),
        ])
        .unwrap();
        // Another switch in this process stands for another process: flock is per open file.
        let mut other = Claims::open(&dir).unwrap();
        let e = other
            .claim([("vnet9", "port vm9".to_string()), ("eth1", "uplink u".to_string())])
            .unwrap_err();
        assert!(
            e.contains("interface eth1 (uplink u)") && e.contains("served by another teamster"),
            "{e}"
        );
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        assert!(other.held().is_empty(), "all or nothing: vnet9 was released");
        assert!(other
            .held_elsewhere("vnet0", "port_rules[0]")
            .unwrap()
            .contains("(port_rules[0])"));
        assert_eq!(other.held_elsewhere("vnet9", "port_rules[0]"), None);
        // Released: the file goes, and the other may claim it.
        mine.in_force(vec!["vnet0".into()]);
        assert_eq!(mine.held(), ["vnet0"]);
        other.claim([("eth1", "uplink u".to_string())]).unwrap();
        drop(other);
        let mut left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left.len(), 1);
        assert!(left[0].ends_with(".vnet0"), "{left:?}");
        let mode = std::fs::metadata(dir.join(&left[0])).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
