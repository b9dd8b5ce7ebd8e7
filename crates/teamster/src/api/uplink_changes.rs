//! The changes an operator may make to a running switch's uplinks: an administrative state, an
//! uplink added (a NIC joining the team) and one removed (taken out for maintenance).
//!
//! An uplink is added after the others and carries nothing until a port group's failover order
//! names it. An uplink leaves only when no group's order names it: the operator changes the
//! orders first (`ctl group GROUP --active ...`), so that which ports move, and when, is their decision,
//! not a side effect of a removal. As every change, each edits a copy of the configuration,
//! which is checked whole (the interface must exist and be no port's, no port rule may match
//! it, admission control against the smallest uplink) before anything is saved or applied.

use super::changes::{bandwidth_schema, named, some, ChangeError};
use crate::live::config::{AdminState, BackendSetting, SwitchFile, UplinkFile};
use serde::Deserialize;
use teamster_core::units::Bandwidth;
use utoipa::ToSchema;

/// An uplink's administrative state.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UplinkChange {
    /// "down" takes the uplink out of use (its ports fail over); "up" returns it.
    pub admin: AdminState,
}

/// An uplink to add to the running switch (as an `[[uplinks]]` entry of `switch.toml`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UplinkAdd {
    /// Unique among uplinks: 1-64 characters, no `/`.
    pub name: String,
    /// The physical interface (it must exist, and be no port's or other uplink's).
    pub interface: String,
    /// Its capacity, e.g. "10G" (default: the link speed the interface reports, followed as it
    /// changes).
    #[serde(default, deserialize_with = "some")]
    #[schema(schema_with = bandwidth_schema, required = false)]
    pub capacity: Option<Bandwidth>,
    /// "up" (default) or "down": added out of use.
    #[serde(default)]
    #[schema(nullable = false, required = false)]
    pub admin: AdminState,
    /// af_packet (default), af_xdp or auto.
    #[serde(default, deserialize_with = "some")]
    #[schema(nullable = false, required = false)]
    pub backend: Option<BackendSetting>,
}

/// The configuration with uplink `name`'s administrative state changed.
pub fn change_uplink(f: &SwitchFile, name: &str, c: &UplinkChange) -> Result<SwitchFile, ChangeError> {
    let mut new = f.clone();
    let uplink = &mut new.uplinks[named(&f.uplinks, name, |u| &u.name, "uplink")?];
    uplink.admin = c.admin;
    Ok(new)
}

/// The configuration with uplink `u` added after the others.
pub fn add_uplink(f: &SwitchFile, u: &UplinkAdd) -> Result<SwitchFile, ChangeError> {
    if f.uplinks.iter().any(|o| o.name == u.name) {
        return Err(ChangeError::Conflict(format!("an uplink named `{}` exists", u.name)));
    }
    let mut new = f.clone();
    new.uplinks.push(UplinkFile {
        name: u.name.clone(),
        interface: u.interface.clone(),
        capacity: u.capacity,
        admin: u.admin,
        backend: u.backend.unwrap_or_default(),
    });
    Ok(new)
}

/// The configuration without uplink `name`, which no port group's failover order may list.
pub fn remove_uplink(f: &SwitchFile, name: &str) -> Result<SwitchFile, ChangeError> {
    let i = named(&f.uplinks, name, |u| &u.name, "uplink")?;
    let users: Vec<&str> = f
        .port_groups
        .iter()
        .filter(|g| g.active.iter().chain(&g.standby).any(|u| u == name))
        .map(|g| g.name.as_str())
        .collect();
    if !users.is_empty() {
        return Err(ChangeError::Conflict(format!(
            "uplink `{name}` is in the failover order of port group {}: take it out of the order first (`teamster ctl group GROUP --active ... --standby ...`)",
            users.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    if f.uplinks.len() == 1 {
        return Err(ChangeError::Conflict(format!(
            "uplink `{name}` is the switch's last: a team needs one"
        )));
    }
    let mut new = f.clone();
    new.uplinks.remove(i);
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::config::{parse_file, render, ONE_PORT as FILE};

    #[test]
    fn the_rendered_file_reads_back_the_same() {
        let f = parse_file(FILE).unwrap();
        let f = change_uplink(
            &f,
            "uplink1",
            &UplinkChange {
                admin: AdminState::Down,
            },
        )
        .unwrap();
        let text = render(&f);
        let back = parse_file(&text).unwrap();
        assert_eq!(back.uplinks[0].admin, AdminState::Down);
        assert_eq!(render(&back), text);
    }

    /// An uplink is added after the others and saved; it leaves only once no group's order
    /// names it, and the last one stays.
    #[test]
    fn uplinks_are_added_and_removed_by_name() {
        let f = parse_file(FILE).unwrap();
        let add: UplinkAdd =
            serde_json::from_str(r#"{"name": "uplink2", "interface": "eth2", "capacity": "25G"}"#).unwrap();
        let new = add_uplink(&f, &add).unwrap();
        assert_eq!(new.uplinks.len(), 2);
        assert_eq!(new.uplinks[1].capacity, Some(Bandwidth::from_gbps(25)));
        assert_eq!(new.uplinks[1].admin, AdminState::Up);
        let text = render(&new);
        assert!(
            text.contains("name = \"uplink2\"") && text.contains("interface = \"eth2\""),
            "{text}"
        );
        assert_eq!(
            add_uplink(&new, &add).unwrap_err(),
            ChangeError::Conflict("an uplink named `uplink2` exists".into())
        );
        let e = remove_uplink(&new, "uplink1").unwrap_err();
        assert!(
            matches!(&e, ChangeError::Conflict(m) if m.contains("port group `vms`") && m.contains("uplink `uplink1`")),
            "{e:?}"
        );
        let back = remove_uplink(&new, "uplink2").unwrap();
        assert_eq!(render(&back), render(&f));
        assert!(matches!(remove_uplink(&back, "uplink2"), Err(ChangeError::NotFound(_))));
        let mut alone = f.clone();
        alone.port_groups.clear();
        alone.ports.clear();
        assert!(matches!(remove_uplink(&alone, "uplink1"), Err(ChangeError::Conflict(m)) if m.contains("last")));
        for bad in [
            r#"{"name": "x"}"#,
            r#"{"name": "x", "interface": "eth2", "speed": "1G"}"#,
            r#"{"name": "x", "interface": "eth2", "capacity": "1GB"}"#,
            r#"{"name": "x", "interface": "eth2", "capacity": null}"#,
            r#"{"name": "x", "interface": "eth2", "admin": "sideways"}"#,
        ] {
            assert!(serde_json::from_str::<UplinkAdd>(bad).is_err(), "{bad}");
        }
    }
}
