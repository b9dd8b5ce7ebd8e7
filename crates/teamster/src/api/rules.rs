//! The port rules' task: turns netlink's interface news into matched ports (see
//! [`crate::live::port_rules`] for the rules), under the API's configuration lock, so a rule's
//! change and an operator's are serialised and each is checked against the other's result.
//!
//! At start, whenever news was lost, and every 10 s, every interface of the host is looked at;
//! otherwise only the ones netlink named. What each interface is (its MAC, its kernel link kind,
//! its lower device) comes from one netlink dump per look, so a rule takes a tap or a veth and
//! never, whatever its name, a macvlan or VLAN device on an uplink (see
//! [`crate::live::port_rules::vm_interface`]). An interface refused is checked again only when its
//! MAC or the configuration has changed since, so one that flaps costs nothing. Either way, a matched port whose interface is gone is removed.
//! Matched ports are not saved, so nothing is written to `switch.toml` here. A refusal (an
//! interface matching a rule whose port does not pass the checks) is noted in the event log
//! once per interface and reason, not at every netlink message about it. An interface another
//! Teamster serves ([`crate::live::claims`]) is noted once too, but looked at again at every
//! rescan, so it is attached within 10 s of that switch stopping.

use super::routes::{apply, check_running, claims, settle_claims};
use super::ApiState;
use crate::live::config::port_from;
use crate::live::config::{PortFile, PortOrigin, SwitchFile, SwitchPlan};
use crate::live::port_rules::{rule_for, taken, vm_interface, vm_mac};
use std::collections::HashMap;
use teamster_core::wire::MacAddr;
use teamster_dp::datapath::LinkNews;
use teamster_dp::netlink::LinkInfo;
use tokio::sync::mpsc::Receiver;

/// How many refusals are remembered (so each is noted once); past it the oldest are forgotten.
const REFUSALS_KEPT: usize = 1024;

/// How often every interface is looked at again, news or not: an interface refused for want of
/// room (a reservation, a MAC in use) is attached once an operator's change makes room.
const RESCAN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Why an interface was refused, against which configuration (so it is checked again only
/// when its MAC or the configuration changed, not at every netlink message about it).
struct Refusal {
    mac: MacAddr,
    config: u64,
    error: String,
}

/// The interfaces refused, and those another Teamster serves (with who: noted once per
/// holder, but looked at again every time, since that switch may stop).
#[derive(Default)]
struct Refused {
    checks: HashMap<String, Refusal>,
    elsewhere: HashMap<String, String>,
}

/// Runs the port rules until the loop stops sending news.
pub async fn run(state: ApiState, mut news: Receiver<LinkNews>) {
    let mut refused = Refused::default();
    reconcile(&state, None, &mut refused).await;
    let mut rescan = tokio::time::interval(RESCAN_EVERY);
    rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            n = news.recv() => {
                let Some(n) = n else { return };
                let names = (!n.lost).then_some(n.names);
                reconcile(&state, names, &mut refused).await;
            }
            _ = rescan.tick() => reconcile(&state, None, &mut refused).await,
        }
    }
}

/// A fingerprint of what decides whether a port fits: the file as it would be saved, and every
/// port's name, interface and MAC (matched ports included).
fn fingerprint(f: &SwitchFile) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    crate::live::config::render(f).hash(&mut h);
    for p in &f.ports {
        (&p.name, &p.interface, &p.mac).hash(&mut h);
    }
    h.finish()
}

/// The host's interfaces as the kernel shows them now, by name, in the order they were made.
struct Links(Vec<LinkInfo>, HashMap<String, usize>);

impl Links {
    /// One netlink dump of every link.
    fn now() -> Result<Links, String> {
        let mut all =
            teamster_dp::netlink::links().map_err(|e| format!("cannot list the interfaces (netlink): {e}"))?;
        all.sort_by_key(|l| l.ifindex);
        let by_name = all.iter().enumerate().map(|(i, l)| (l.name.clone(), i)).collect();
        Ok(Links(all, by_name))
    }

    fn get(&self, name: &str) -> Option<&LinkInfo> {
        self.1.get(name).map(|&i| &self.0[i])
    }

    /// Interface `name`'s MAC: None if it does not exist (or has no MAC).
    fn mac(&self, name: &str) -> Option<MacAddr> {
        self.get(name)?.mac.map(MacAddr)
    }

    /// Whether `name` exists and is a VM's kind of interface (see [`vm_interface`]).
    fn vm_interface(&self, name: &str, uplinks: &[(i32, &str)]) -> Result<(), String> {
        let link = self.get(name).ok_or_else(|| "it is gone".to_string())?;
        vm_interface(link, uplinks)
    }
}

/// Brings the matched ports in line with the interfaces `names` (None: every interface), and
/// removes those whose interface is gone.
async fn reconcile(state: &ApiState, names: Option<Vec<String>>, all_refused: &mut Refused) {
    let Refused {
        checks: refused,
        elsewhere,
    } = all_refused;
    let mut config = state.config.lock().await;
    if config.port_rules.is_empty() {
        return;
    }
    let links = match Links::now() {
        Ok(l) => l,
        Err(e) => {
            apply(state, None, vec![format!("port rules: {e}; nothing changed")]).await;
            return;
        }
    };
    let uplinks: Vec<(i32, &str)> = (config.uplinks.iter())
        .filter_map(|u| Some((links.get(&u.interface)?.ifindex, u.name.as_str())))
        .collect();
    let mut new: SwitchFile = config.clone();
    let mut notes = Vec::new();
    new.ports.retain(|p| {
        let why = match p.origin {
            PortOrigin::Matched => links.vm_interface(&p.interface, &uplinks).err(),
            _ => None,
        };
        // A link missing from the dump is asked for by name before its port goes: a port is
        // never removed on a picture of the links that missed one.
        let why = why.filter(|_| {
            links.get(&p.interface).is_some()
                || matches!(teamster_dp::iface::index(&p.interface), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        });
        if let Some(why) = &why {
            notes.push(format!(
                "port {}: interface {}: {why}; the matched port is removed",
                p.name, p.interface
            ));
        }
        why.is_none()
    });
    let names = names.unwrap_or_else(|| links.0.iter().map(|l| l.name.clone()).collect());
    // The configuration's fingerprint, made again when a port is added or made again; and the
    // plan of the last check, while `new` is what it checked (so it is not checked twice).
    let mut fp: Option<u64> = None;
    let mut checked: Option<SwitchPlan> = None;
    for name in names {
        let Some(mac) = links.mac(&name) else {
            refused.remove(&name);
            elsewhere.remove(&name);
            continue;
        };
        // A matched port whose interface changed (libvirt sets a tap's MAC after creating it)
        // is made again from what the interface is now.
        if let Some(k) = new
            .ports
            .iter()
            .position(|p| p.origin == PortOrigin::Matched && p.interface == name)
        {
            let now = rule_for(&new, &name, mac).and_then(|(_, r)| {
                let vm = vm_mac(r, mac).ok()?;
                Some(port_from(r, &name, vm))
            });
            let same = now.is_some_and(|p| p.mac == new.ports[k].mac && p.group == new.ports[k].group);
            if same {
                continue;
            }
            notes.push(format!(
                "port {name}: interface {name} changed; the matched port is made again"
            ));
            new.ports.remove(k);
            fp = None;
            checked = None;
        }
        if taken(&new, &name) {
            continue;
        }
        let Some((i, rule)) = rule_for(&new, &name, mac).map(|(i, r)| (i, r.clone())) else {
            continue;
        };
        let held = claims(state).held_elsewhere(&name, &format!("port_rules[{i}]"));
        if let Some(e) = held {
            if elsewhere.get(&name) != Some(&e) {
                notes.push(format!(
                    "interface {name} matches port_rules[{i}] but is not attached: {e}"
                ));
                if elsewhere.len() >= REFUSALS_KEPT {
                    elsewhere.clear();
                }
                elsewhere.insert(name, e);
            }
            continue;
        }
        elsewhere.remove(&name);
        let config = *fp.get_or_insert_with(|| fingerprint(&new));
        if refused.get(&name).is_some_and(|r| r.mac == mac && r.config == config) {
            continue;
        }
        let rule = &rule;
        let outcome = links
            .vm_interface(&name, &uplinks)
            .and_then(|()| vm_mac(rule, mac))
            .and_then(|vm| {
                let mut trial = new.clone();
                trial.ports.push(port_from(rule, &name, vm));
                check_running(state, &trial).map(|plan| (trial, plan))
            });
        match outcome {
            Ok((trial, plan)) => {
                new = trial;
                checked = Some(plan);
                fp = None;
                refused.remove(&name);
                notes.push(format!(
                    "port {name}: interface {name} matched port_rules[{i}]; added to group {}",
                    rule.group
                ));
            }
            Err(e) => {
                if refused.get(&name).is_none_or(|r| r.error != e) {
                    notes.push(format!(
                        "interface {name} matches port_rules[{i}] but is not attached: {e}"
                    ));
                }
                if refused.len() >= REFUSALS_KEPT {
                    refused.clear();
                }
                refused.insert(name, Refusal { mac, config, error: e });
            }
        }
    }
    let key = |p: &PortFile| (p.name.clone(), p.interface.clone(), p.mac.clone(), p.group.clone());
    let changed =
        new.ports.len() != config.ports.len() || new.ports.iter().zip(&config.ports).any(|(a, b)| key(a) != key(b));
    if !changed {
        settle_claims(state);
        if !notes.is_empty() {
            apply(state, None, notes).await;
        }
        return;
    }
    match checked.map_or_else(|| check_running(state, &new), Ok) {
        Ok(plan) => {
            if apply(state, Some(plan), notes).await.is_some() {
                *config = new;
            }
        }
        // Each port was checked as it was added; a removal cannot make a file fail, but if it
        // does, nothing changes and the log says why.
        Err(e) => {
            settle_claims(state);
            notes.push(format!("port rules: the change is refused, nothing changed: {e}"));
            apply(state, None, notes).await;
        }
    }
}
