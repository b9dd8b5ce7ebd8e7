//! Running under systemd (`Type=notify`): readiness, the watchdog, reload and stop
//! notifications, and what a reload (`ExecReload`, SIGHUP) may change without a restart.
//!
//! Outside systemd (no `NOTIFY_SOCKET`) every notification is a no-op. The watchdog is fed by
//! the data plane's own loop (its control turn), so a switching thread that hangs stops
//! feeding it and systemd restarts the service; the API thread cannot keep a dead data plane
//! looking alive.

use super::config::{PortOrigin, SwitchFile};
use core::time::Duration;
use teamster_core::Instant;

/// Sends `state` to systemd's notification socket (`NOTIFY_SOCKET`), if there is one, without
/// ever waiting: the watchdog is fed from the data plane's thread, which must not block on a
/// busy or stuck receiver (a full socket loses the message; the next one follows). Written by
/// hand because the `sd-notify` crate sends on a blocking socket. A path starting with `@` is
/// in the abstract namespace, as sd_notify(3) defines.
pub fn notify(state: &str) {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let path = path.to_string_lossy().to_string();
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(&path),
    };
    let Ok(addr) = addr else { return };
    let Ok(sock) = UnixDatagram::unbound() else { return };
    if sock.set_nonblocking(true).is_ok() {
        let _ = sock.send_to_addr(state.as_bytes(), &addr);
    }
}

/// Tells systemd the switch is up (every interface attached, the API listening).
pub fn ready(status: &str) {
    let status: String = status.chars().filter(|c| *c != '\n').take(200).collect();
    notify(&format!("READY=1\nSTATUS={status}"));
}

/// Tells systemd a reload has begun (with the time, as `Type=notify-reload` wants it).
pub fn reloading() {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let usec = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}

/// Tells systemd the switch is stopping.
pub fn stopping() {
    notify("STOPPING=1");
}

/// Feeds systemd's watchdog at half its interval, if it has one.
pub struct Watchdog {
    every: Option<Duration>,
    next: Instant,
}

impl Watchdog {
    /// The watchdog systemd asked for (`WatchdogSec=`), if any.
    pub fn from_env() -> Watchdog {
        // As sd_watchdog_enabled(3) reads them: WATCHDOG_USEC, and WATCHDOG_PID if set must be
        // this process.
        let usec = std::env::var("WATCHDOG_USEC").ok().and_then(|s| s.parse::<u64>().ok());
        let ours = std::env::var("WATCHDOG_PID")
            .ok()
            .is_none_or(|p| p.parse::<u32>().ok() == Some(std::process::id()));
        let every = usec.filter(|&u| ours && u > 0).map(|u| Duration::from_micros(u / 2));
        Watchdog {
            every,
            next: Instant::ZERO,
        }
    }

    /// Feeds the watchdog if it is due at `now`.
    pub fn tick(&mut self, now: Instant) {
        let Some(every) = self.every else { return };
        if now >= self.next {
            self.next = now + every;
            notify("WATCHDOG=1");
        }
    }
}

/// The configuration a reload switches to: `file` (as read from disk) with the ports port rules
/// matched kept (those whose name and interface the file's ports and uplinks do not now use)
/// and the libvirt hook's ports kept (a file that takes one's name or interface is refused),
/// or why the reload
/// needs a restart instead (the parts a running switch cannot change: uplinks kept changed or
/// reordered, port groups' VLANs, overlays and security, overlay groups added or removed,
/// MAC-table and data-plane knobs, LBT, and port rules where there were none).
pub fn reloaded(running: &SwitchFile, mut file: SwitchFile) -> Result<SwitchFile, String> {
    let (was, now) = (running, &file);
    let differs: Vec<&str> = [
        (
            "uplinks kept (their order, interfaces, capacities, backends; new uplinks go after them)",
            !kept_in_order(&was.uplinks, &now.uplinks, |u| &u.name, same_uplink),
        ),
        (
            "port_groups kept (their order, VLANs, overlays, security, notify_switches; new groups go after them)",
            !kept_in_order(&was.port_groups, &now.port_groups, |g| &g.name, same_group),
        ),
        (
            "overlay groups (added or removed)",
            overlay_names(&was.port_groups) != overlay_names(&now.port_groups),
        ),
        ("lbt", was.lbt != now.lbt),
        ("mac_ageing_s", was.mac_ageing_s != now.mac_ageing_s),
        ("mac_limit", was.mac_limit != now.mac_limit),
        ("mac_limit_per_port", was.mac_limit_per_port != now.mac_limit_per_port),
        ("reservation_cap", was.reservation_cap != now.reservation_cap),
        ("busy_poll_us", was.busy_poll_us != now.busy_poll_us),
        ("workers", was.workers != now.workers),
        ("rx", was.rx != now.rx),
        ("controller", was.controller != now.controller),
        (
            "port_rules (where there were none)",
            was.port_rules.is_empty() && !now.port_rules.is_empty(),
        ),
    ]
    .into_iter()
    .filter_map(|(k, d)| d.then_some(k))
    .collect();
    if !differs.is_empty() {
        return Err(format!(
            "a reload cannot change {}: restart the switch for that; nothing changed",
            differs.join(", ")
        ));
    }
    // The libvirt hook's ports are not the file's: kept, and the file may not take their names
    // or interfaces (the hook never gives up a running VM's port for another's).
    for p in running.ports.iter().filter(|p| p.origin == PortOrigin::Libvirt) {
        if let Some(f) = (file.ports.iter()).find(|f| f.name == p.name || f.interface == p.interface) {
            return Err(format!(
                "port `{}` takes the name or interface of port `{}` (interface {}), which the libvirt hook made for domain `{}`: choose another; nothing changed",
                f.name,
                p.name,
                p.interface,
                p.owner.as_deref().unwrap_or("?")
            ));
        }
    }
    // Without rules nothing manages a matched port any more (the port rules' task stops at an
    // empty rule list): kept, it would outlive its interface and take over whatever tap next
    // gets that name (libvirt reuses vnetN), with the old VM's MAC and group. They go instead.
    let kept: Vec<_> = running
        .ports
        .iter()
        .filter(|p| {
            (p.origin == PortOrigin::Matched && !file.port_rules.is_empty())
                || (p.origin == PortOrigin::Assigned && file.controller.is_some())
                || p.origin == PortOrigin::Libvirt
        })
        .filter(|p| {
            !file
                .ports
                .iter()
                .any(|f| f.name == p.name || f.interface == p.interface)
                && !file.uplinks.iter().any(|u| u.interface == p.interface)
        })
        .cloned()
        .collect();
    file.ports.extend(kept);
    Ok(file)
}

/// Whether the objects `now` can replace `was` while the switch runs: those kept (by name) are
/// in the same order and `same` as before, and the new ones come after them (an object's ID
/// is its place, and the running switch appends).
fn kept_in_order<T>(was: &[T], now: &[T], name: impl Fn(&T) -> &String, same: impl Fn(&T, &T) -> bool) -> bool {
    let known = |x: &T, among: &[T]| among.iter().any(|y| name(y) == name(x));
    let kept_was: Vec<&T> = was.iter().filter(|x| known(x, now)).collect();
    let kept_now: Vec<&T> = now.iter().filter(|x| known(x, was)).collect();
    let new_after = now
        .iter()
        .position(|x| !known(x, was))
        .is_none_or(|first_new| now[first_new..].iter().all(|x| !known(x, was)));
    new_after
        && kept_was.len() == kept_now.len()
        && kept_was
            .iter()
            .zip(&kept_now)
            .all(|(a, b)| name(a) == name(b) && same(a, b))
}

/// A kept uplink the running switch can go on with: all but its administrative state alike.
fn same_uplink(a: &crate::live::config::UplinkFile, b: &crate::live::config::UplinkFile) -> bool {
    a.interface == b.interface && a.capacity == b.capacity && a.backend == b.backend
}

/// The names of the overlay groups, in order.
fn overlay_names(groups: &[teamster_core::host::GroupEntry]) -> Vec<&str> {
    groups
        .iter()
        .filter(|g| g.overlay.is_some())
        .map(|g| g.name.as_str())
        .collect()
}

/// A kept port group the running switch can go on with: teaming may differ, not its VLAN,
/// overlay, security or switch notification.
fn same_group(a: &teamster_core::host::GroupEntry, b: &teamster_core::host::GroupEntry) -> bool {
    a.vlan == b.vlan && a.overlay == b.overlay && a.security == b.security && a.notify_switches == b.notify_switches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::config::{parse_file, ONE_PORT};

    /// A reload may add uplinks after the others and remove ones no order lists, not change
    /// or reorder the uplinks kept (other than their administrative state).
    /// Overlays are set at start: a reload may not add, remove or change one.
    #[test]
    fn a_reload_refuses_overlay_changes() {
        let overlay = |vni: u32| {
            ONE_PORT.replace(
                "active = [\"uplink1\"]",
                &format!(
                    "active = [\"uplink1\"]\noverlay = {{ vni = {vni}, local_vtep = \"192.0.2.1\", remote_vteps = [\"192.0.2.2\"] }}"
                ),
            )
        };
        let plain = parse_file(ONE_PORT).unwrap();
        let with = parse_file(&overlay(5001)).unwrap();
        for (from, to) in [
            (&plain, overlay(5001)),
            (&with, overlay(5002)),
            (&with, ONE_PORT.to_string()),
        ] {
            let e = reloaded(from, parse_file(&to).unwrap()).unwrap_err();
            assert!(e.contains("overlay"), "{e}");
        }
        let extra = format!(
            "{}\n[[port_groups]]\nname = \"t2\"\npolicy = \"port-id\"\nactive = [\"uplink1\"]\noverlay = {{ vni = 7, local_vtep = \"192.0.2.1\", remote_vteps = [\"192.0.2.2\"] }}\n",
            overlay(5001)
        );
        let e = reloaded(&with, parse_file(&extra).unwrap()).unwrap_err();
        assert!(e.contains("overlay groups (added or removed)"), "{e}");
        assert!(
            reloaded(&with, parse_file(&overlay(5001)).unwrap()).is_ok(),
            "unchanged"
        );
    }

    #[test]
    fn a_reload_adds_and_removes_uplinks_in_order() {
        let running = parse_file(ONE_PORT).unwrap();
        let uplink = |name: &str, ifname: &str| format!("[[uplinks]]\nname = \"{name}\"\ninterface = \"{ifname}\"\n");
        let more = format!("{}\n{ONE_PORT}", uplink("uplink2", "eth2"));
        // Before uplink1 in the file: uplink1 would change index.
        let e = reloaded(&running, parse_file(&more).unwrap()).unwrap_err();
        assert!(e.contains("uplinks kept"), "{e}");
        let at = ONE_PORT.find("[[port_groups]]").unwrap();
        let after = format!("{}{}{}", &ONE_PORT[..at], uplink("uplink2", "eth2"), &ONE_PORT[at..]);
        let added = reloaded(&running, parse_file(&after).unwrap()).unwrap();
        assert_eq!(added.uplinks.len(), 2);
        let back = reloaded(&added, parse_file(ONE_PORT).unwrap()).unwrap();
        assert_eq!(back.uplinks.len(), 1, "an uplink goes");
        let down = ONE_PORT.replace("capacity = \"10G\"", "capacity = \"10G\"\nadmin = \"down\"");
        assert!(
            reloaded(&running, parse_file(&down).unwrap()).is_ok(),
            "admin is a run-time change"
        );
    }

    #[test]
    fn a_reload_changes_ports_and_teaming_but_not_the_uplinks_kept() {
        let running = parse_file(ONE_PORT).unwrap();
        let more = format!(
            "{}\n[[ports]]\nname = \"vm2\"\ninterface = \"vnet1\"\nmac = \"52:54:00:00:00:02\"\ngroup = \"vms\"\n",
            ONE_PORT.replace("policy = \"port-id\"", "policy = \"load-based\"")
        );
        let new = reloaded(&running, parse_file(&more).unwrap()).unwrap();
        assert_eq!(new.ports.len(), 2);
        let e = reloaded(
            &running,
            parse_file(&ONE_PORT.replace("capacity = \"10G\"", "capacity = \"1G\"")).unwrap(),
        )
        .unwrap_err();
        assert!(e.contains("uplinks") && e.contains("restart"), "{e}");
        let e = reloaded(&running, parse_file(&format!("workers = 2\n{ONE_PORT}")).unwrap()).unwrap_err();
        assert!(e.contains("workers"), "{e}");
        // A port a rule matched stays, unless the file now uses its name or interface.
        let rules = format!("{ONE_PORT}\n[[port_rules]]\nmatch = \"vnet*\"\ngroup = \"vms\"\n");
        let mut with_matched = parse_file(&rules).unwrap();
        let mut m = with_matched.ports[0].clone();
        (m.name, m.interface, m.origin) = ("vnet5".into(), "vnet5".into(), PortOrigin::Matched);
        with_matched.ports.push(m);
        let new = reloaded(&with_matched, parse_file(&rules).unwrap()).unwrap();
        assert!(new
            .ports
            .iter()
            .any(|p| p.name == "vnet5" && p.origin == PortOrigin::Matched));
        // An uplink the file adds on its interface takes it (the check then judges the file).
        let at = rules.find("[[port_groups]]").unwrap();
        let uplink = format!(
            "{}[[uplinks]]\nname = \"u5\"\ninterface = \"vnet5\"\n{}",
            &rules[..at],
            &rules[at..]
        );
        let new = reloaded(&with_matched, parse_file(&uplink).unwrap()).unwrap();
        assert!(new.ports.iter().all(|p| p.name != "vnet5"), "{:?}", new.ports);
    }

    #[test]
    fn a_reload_that_removes_every_port_rule_removes_the_ports_they_matched() {
        let rules = format!("{ONE_PORT}\n[[port_rules]]\nmatch = \"vnet*\"\ngroup = \"vms\"\n");
        let mut running = parse_file(&rules).unwrap();
        let mut m = running.ports[0].clone();
        (m.name, m.interface, m.origin) = ("vnet5".into(), "vnet5".into(), PortOrigin::Matched);
        running.ports.push(m);
        // The rules stay: the matched port stays.
        let new = reloaded(&running, parse_file(&rules).unwrap()).unwrap();
        assert!(new.ports.iter().any(|p| p.name == "vnet5"));
        // The rules go: nothing would ever remove it, so it goes now.
        let new = reloaded(&running, parse_file(ONE_PORT).unwrap()).unwrap();
        assert!(new.ports.iter().all(|p| p.name != "vnet5"), "{:?}", new.ports);
    }

    /// The libvirt hook's ports are not the file's: a reload keeps them, and refuses a file
    /// that takes one's name or interface.
    #[test]
    fn a_reload_keeps_the_hooks_ports_and_never_takes_them() {
        let mut running = parse_file(ONE_PORT).unwrap();
        let mut h = running.ports[0].clone();
        (h.name, h.interface, h.mac) = ("web1-0".into(), "vnet7".into(), Some("52:54:00:00:00:07".into()));
        (h.origin, h.owner) = (PortOrigin::Libvirt, Some("web1".into()));
        running.ports.push(h);
        let new = reloaded(&running, parse_file(ONE_PORT).unwrap()).unwrap();
        assert!(new
            .ports
            .iter()
            .any(|p| p.name == "web1-0" && p.owner.as_deref() == Some("web1")));
        for taken in [
            ONE_PORT.replace("name = \"vm1\"", "name = \"web1-0\""),
            ONE_PORT.replace("vnet0", "vnet7"),
        ] {
            let e = reloaded(&running, parse_file(&taken).unwrap()).unwrap_err();
            assert!(e.contains("domain `web1`") && e.contains("nothing changed"), "{e}");
        }
    }

    /// A reload may add port groups after the others and remove unused ones, not reorder the
    /// groups kept or change their VLANs.
    #[test]
    fn a_reload_adds_and_removes_port_groups_in_order() {
        let running = parse_file(ONE_PORT).unwrap();
        let group =
            |name: &str| format!("[[port_groups]]\nname = \"{name}\"\npolicy = \"port-id\"\nactive = [\"uplink1\"]\n");
        let more = format!("{ONE_PORT}\n{}", group("storage"));
        let added = reloaded(&running, parse_file(&more).unwrap()).unwrap();
        assert_eq!(added.port_groups.len(), 2);
        let back = reloaded(&added, parse_file(ONE_PORT).unwrap()).unwrap();
        assert_eq!(back.port_groups.len(), 1, "an unused group goes");
        // Reordered: "storage" before "vms".
        let at = ONE_PORT.find("[[port_groups]]").unwrap();
        let reordered = format!("{}{}{}", &ONE_PORT[..at], group("storage"), &ONE_PORT[at..]);
        let e = reloaded(&added, parse_file(&reordered).unwrap()).unwrap_err();
        assert!(e.contains("port_groups"), "{e}");
        let vlan = more.replacen(
            "policy = \"port-id\"\nactive",
            "vlan = 7\npolicy = \"port-id\"\nactive",
            1,
        );
        assert!(
            reloaded(&added, parse_file(&vlan).unwrap()).is_err(),
            "a VLAN change needs a restart"
        );
    }
}
