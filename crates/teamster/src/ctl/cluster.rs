//! `teamster ctl vm ...` and `teamster ctl cluster`: the controller's commands. They talk to
//! the controller's socket (`/run/teamster/controller.sock`) unless `--socket` or `--url` says
//! otherwise.

use super::segment;
use clap::Subcommand;
use serde_json::{json, Map, Value};

#[derive(Subcommand, Clone, Debug)]
pub enum VmAction {
    /// Power a VM on: placement chooses its host (`--host auto`, the default) where its
    /// reservation passes admission, or the host named if it admits it.
    PowerOn {
        name: String,
        /// A host's name, or auto.
        #[arg(long, default_value = "auto")]
        host: String,
        /// Its network resource pool (default the vm class).
        #[arg(long)]
        pool: Option<String>,
        /// The VM's MAC, which its host's port uses.
        #[arg(long)]
        mac: Option<String>,
        /// Its port group on the host.
        #[arg(long)]
        group: Option<String>,
        /// Minimum guaranteed send rate, e.g. 500M.
        #[arg(long)]
        reservation: Option<String>,
        /// 1-100, or low, normal, high.
        #[arg(long)]
        shares: Option<String>,
        /// Cap on the send rate, e.g. 1G.
        #[arg(long)]
        limit: Option<String>,
    },
    /// Change a VM's controls; if its host can no longer hold its reservation, VMs migrate
    /// (the answer lists them); a reservation no host can hold is refused.
    Set {
        name: String,
        #[arg(long)]
        reservation: Option<String>,
        #[arg(long)]
        shares: Option<String>,
        /// Cap on the send rate, or `none`.
        #[arg(long)]
        limit: Option<String>,
    },
    /// Power a VM off: its host detaches its port.
    Off { name: String },
}

/// The request a `vm` command makes.
pub fn vm_request(action: &VmAction) -> Result<(&'static str, String, Option<Value>), String> {
    let controls = |reservation: &Option<String>, shares: &Option<String>, limit: &Option<String>| {
        let mut m = Map::new();
        for (key, v) in [("reservation", reservation), ("shares", shares), ("limit", limit)] {
            match v.as_deref() {
                Some("none") if key == "limit" => m.insert(key.into(), Value::Null),
                Some(v) => m.insert(key.into(), json!(v)),
                None => None,
            };
        }
        m
    };
    Ok(match action {
        VmAction::PowerOn {
            name,
            host,
            pool,
            mac,
            group,
            reservation,
            shares,
            limit,
        } => {
            let mut body = controls(reservation, shares, limit);
            body.insert("name".into(), json!(name));
            body.insert("host".into(), json!(host));
            for (key, v) in [("pool", pool), ("mac", mac), ("group", group)] {
                if let Some(v) = v {
                    body.insert(key.into(), json!(v));
                }
            }
            ("POST", "/api/v1/vms".into(), Some(Value::Object(body)))
        }
        VmAction::Set {
            name,
            reservation,
            shares,
            limit,
        } => {
            let body = controls(reservation, shares, limit);
            if body.is_empty() {
                return Err("vm set: give --reservation, --shares or --limit".into());
            }
            (
                "PATCH",
                format!("/api/v1/vms/{}", segment(name)),
                Some(Value::Object(body)),
            )
        }
        VmAction::Off { name } => ("DELETE", format!("/api/v1/vms/{}", segment(name)), None),
    })
}

/// An accepted change: where a VM went and the migrations it set off.
pub fn outcome_text(v: &Value) -> String {
    let mut out = String::new();
    if let Some(h) = v["placed"].as_str() {
        out.push_str(&format!("placed on {h}\n"));
        for pair in v["considered"].as_array().into_iter().flatten() {
            let (host, why) = (pair[0].as_str().unwrap_or("?"), pair[1].as_str().unwrap_or(""));
            out.push_str(&format!("  {host}: {why}\n"));
        }
    }
    for m in v["migrations"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "migrating {} {} -> {} ({}): {}\n",
            m["vm"].as_str().unwrap_or("?"),
            m["from"].as_str().unwrap_or("?"),
            m["to"].as_str().unwrap_or("?"),
            m["reservation"].as_str().unwrap_or("?"),
            m["why"].as_str().unwrap_or("")
        ));
    }
    if out.is_empty() {
        out.push_str("done\n");
    }
    out
}

/// `ctl cluster`: hosts with each uplink's headroom, VMs, faults, recent migrations.
pub fn cluster_text(v: &Value) -> String {
    let s = |x: &Value| x.as_str().unwrap_or("-").to_string();
    let mut out = String::from("HOST      UPLINK     UP    RESERVABLE  RESERVED  HEADROOM  LOAD      VMS\n");
    for h in v["hosts"].as_array().into_iter().flatten() {
        let vms: Vec<String> = h["vms"].as_array().into_iter().flatten().map(s).collect();
        for (i, u) in h["uplinks"].as_array().into_iter().flatten().enumerate() {
            let (host, list) = if i == 0 {
                (s(&h["name"]), vms.join(","))
            } else {
                (String::new(), String::new())
            };
            let load = u["load_bps"]
                .as_f64()
                .map_or("-".to_string(), |b| format!("{:.1}M", b / 1e6));
            out.push_str(&format!(
                "{host:<9} {:<10} {:<5} {:>10}  {:>8}  {:>8}  {load:<8}  {list}\n",
                s(&u["name"]),
                if u["up"].as_bool() == Some(true) { "up" } else { "down" },
                s(&u["reservable"]),
                s(&u["reserved"]),
                s(&u["headroom"]),
            ));
        }
        if let Some(why) = h["unavailable"].as_str() {
            out.push_str(&format!(
                "  ! {} takes no VMs: {why}
",
                s(&h["name"])
            ));
        }
        if let Some(why) = h["violation"].as_str() {
            out.push_str(&format!(
                "  ! {} cannot hold its VMs' reservations: {why}\n",
                s(&h["name"])
            ));
        }
    }
    out.push_str("\nVM        HOST      POOL       RESERVATION  SHARES  LIMIT   MOVING FROM\n");
    for m in v["vms"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<9} {:<9} {:<10} {:>11}  {:<6}  {:<6}  {}\n",
            s(&m["name"]),
            s(&m["host"]),
            s(&m["pool"]),
            s(&m["reservation"]),
            s(&m["shares"]),
            s(&m["limit"]),
            s(&m["moving_from"]),
        ));
    }
    out.push_str(&format!("\nreservations that cannot be kept: {}\n", v["violated"]));
    let faults = v["faults"].as_array().cloned().unwrap_or_default();
    for f in faults.iter().rev().take(5) {
        out.push_str(&format!(
            "fault at {}: {}: {}\n",
            f["at_s"],
            s(&f["host"]),
            s(&f["why"])
        ));
    }
    let moves = v["migrations"].as_array().cloned().unwrap_or_default();
    for m in moves.iter().rev().take(10) {
        out.push_str(&format!(
            "migration at {}: {} {} -> {} ({})\n",
            m["at_s"],
            s(&m["vm"]),
            s(&m["from"]),
            s(&m["to"]),
            s(&m["reservation"])
        ));
    }
    out
}
