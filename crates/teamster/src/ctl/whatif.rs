//! `teamster ctl whatif`: asks the switch what a change would do (`POST /api/v1/whatif`) and
//! prints the answer as a table, or the JSON; `--save FILE` keeps the scenario it ran, for
//! `teamster simulate`.

use clap::Args;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The changes and the window, as flags; any number of changes of each kind.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("control").multiple(true)))]
#[command(group(clap::ArgGroup::new("target").args(["port", "node"])))]
pub struct WhatifArgs {
    /// Seconds of the switch's past the changes are applied to (default 600, at most 3600).
    #[arg(long)]
    window: Option<u64>,
    /// A port whose NetIOC controls change (with --reservation, --shares, --limit).
    #[arg(long, requires = "control", conflicts_with = "node")]
    port: Option<String>,
    /// A traffic class (vm, nfs, ...) or pool whose NetIOC controls change (with
    /// --reservation, --shares, --limit).
    #[arg(long, requires = "control")]
    node: Option<String>,
    /// Its new reservation, e.g. 500M.
    #[arg(long, group = "control", requires = "target")]
    reservation: Option<String>,
    /// Its new shares: 1-100, or low, normal, high.
    #[arg(long, group = "control", requires = "target")]
    shares: Option<String>,
    /// Its new limit, e.g. 1G, or `none`.
    #[arg(long, group = "control", requires = "target")]
    limit: Option<String>,
    /// An uplink down for the whole window.
    #[arg(long, value_name = "UPLINK")]
    uplink_down: Vec<String>,
    /// An uplink at another capacity: UPLINK=RATE, e.g. uplink2=1G.
    #[arg(long, value_name = "UPLINK=RATE")]
    uplink_capacity: Vec<String>,
    /// A port group's teaming policy: GROUP=POLICY, e.g. vms=load-based.
    #[arg(long, value_name = "GROUP=POLICY")]
    policy: Vec<String>,
    /// A port group's failover order: GROUP=ACTIVE,...[/STANDBY,...], e.g.
    /// vms=uplink2/uplink1.
    #[arg(long, value_name = "GROUP=ACTIVE[/STANDBY]")]
    order: Vec<String>,
    /// A port added: NAME,GROUP,RATE[,RESERVATION], sending RATE all along, or a profile
    /// instead of RATE: on-off:RATE:ON_S:OFF_S, ramp:FROM:TO:START_S:END_S or
    /// step:BEFORE:AFTER:AT_S (seconds from the window's start).
    #[arg(long, value_name = "NAME,GROUP,RATE[,RESERVATION]")]
    add_port: Vec<String>,
    /// A port removed.
    #[arg(long, value_name = "PORT")]
    remove_port: Vec<String>,
    /// The model: fluid (rates a second, the whole window) or packet (queues and TCP's windows,
    /// each port at its mean demand, at most 10 s simulated).
    #[arg(long, value_parser = ["fluid", "packet"])]
    fidelity: Option<String>,
    /// Write the scenario with the change to FILE (a new file), for `teamster simulate`.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
}

/// The request body, or what is wrong with the flags.
pub fn body(a: &WhatifArgs) -> Result<Value, String> {
    let mut b = json!({});
    let target = match (&a.port, &a.node) {
        (Some(p), _) => Some(("ports", json!({ "port": p }))),
        (None, Some(n)) => Some(("nodes", json!({ "node": n }))),
        (None, None) => None,
    };
    if let Some((list, mut c)) = target {
        if let Some(r) = &a.reservation {
            c["reservation"] = json!(r);
        }
        if let Some(s) = &a.shares {
            c["shares"] = s.parse::<u64>().map_or_else(|_| json!(s), |n| json!(n));
        }
        if let Some(l) = &a.limit {
            c["limit"] = if l == "none" { Value::Null } else { json!(l) };
        }
        b[list] = json!([c]);
    }
    if !a.uplink_down.is_empty() {
        b["uplinks_down"] = json!(a.uplink_down);
    }
    let pair = |s: &str, what: &str| {
        s.split_once('=')
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .ok_or_else(|| format!("{what}: `{s}`: expected NAME=VALUE"))
    };
    let mut caps = Vec::new();
    for u in &a.uplink_capacity {
        let (uplink, capacity) = pair(u, "--uplink-capacity")?;
        caps.push(json!({ "uplink": uplink, "capacity": capacity }));
    }
    if !caps.is_empty() {
        b["uplink_capacities"] = json!(caps);
    }
    let mut policies = Vec::new();
    for p in &a.policy {
        let (group, policy) = pair(p, "--policy")?;
        policies.push(json!({ "group": group, "policy": policy }));
    }
    if !policies.is_empty() {
        b["policies"] = json!(policies);
    }
    let mut orders = Vec::new();
    for o in &a.order {
        let (group, order) = pair(o, "--order")?;
        let names = |s: &str| -> Vec<String> { s.split(',').filter(|n| !n.is_empty()).map(String::from).collect() };
        let mut c = match order.split_once('/') {
            Some((active, standby)) => json!({ "active": names(active), "standby": names(standby) }),
            None => json!({ "active": names(&order) }),
        };
        c["group"] = json!(group);
        orders.push(c);
    }
    if !orders.is_empty() {
        b["failover_orders"] = json!(orders);
    }
    let mut added = Vec::new();
    for p in &a.add_port {
        let parts: Vec<&str> = p.split(',').collect();
        let mut c = match parts.as_slice() {
            [name, group, tx] | [name, group, tx, _] => {
                let mut c = json!({ "name": name, "group": group });
                c["tx"] = profile(tx)
                    .map_err(|e| format!("--add-port: `{p}`: {e}"))?
                    .unwrap_or_else(|| json!(tx));
                c
            }
            _ => return Err(format!("--add-port: `{p}`: expected NAME,GROUP,RATE[,RESERVATION]")),
        };
        if let Some(r) = parts.get(3) {
            c["reservation"] = json!(r);
        }
        added.push(c);
    }
    if !added.is_empty() {
        b["add_ports"] = json!(added);
    }
    if !a.remove_port.is_empty() {
        b["remove_ports"] = json!(a.remove_port);
    }
    if let Some(f) = &a.save {
        if f.exists() {
            return Err(format!("--save: {} exists; give a new file", f.display()));
        }
    }
    if let Some(w) = a.window {
        b["window_s"] = json!(w);
    }
    if let Some(f) = &a.fidelity {
        b["fidelity"] = json!(f);
    }
    Ok(b)
}

/// A demand profile written as `on-off:RATE:ON_S:OFF_S`, `ramp:FROM:TO:START_S:END_S` or
/// `step:BEFORE:AFTER:AT_S`, as the API takes it; None for a plain rate.
fn profile(spec: &str) -> Result<Option<Value>, String> {
    let parts: Vec<&str> = spec.split(':').collect();
    let secs = |s: &str| {
        s.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("`{s}`: expected seconds"))
    };
    Ok(Some(match parts.as_slice() {
        [_] => return Ok(None),
        ["on-off", rate, on, off] => json!({ "kind": "on-off", "rate": rate, "on_s": secs(on)?, "off_s": secs(off)? }),
        ["ramp", from, to, start, end] => {
            json!({ "kind": "ramp", "from": from, "to": to, "start_s": secs(start)?, "end_s": secs(end)? })
        }
        ["step", before, after, at] => json!({ "kind": "step", "before": before, "after": after, "at_s": secs(at)? }),
        _ => {
            return Err(
                "expected a rate, or on-off:RATE:ON_S:OFF_S, ramp:FROM:TO:START_S:END_S or step:BEFORE:AFTER:AT_S"
                    .into(),
            )
        }
    }))
}

/// Writes the answer's scenario where `--save` says, if it does.
pub fn save(a: &WhatifArgs, answer: &Value) -> Result<(), String> {
    let Some(f) = &a.save else { return Ok(()) };
    let text = answer["scenario"].as_str().ok_or("the answer has no scenario")?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(f)
        .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()))
        .map_err(|e| format!("--save {}: {e}", f.display()))
}

fn rate(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |b| {
        if b >= 1e9 {
            format!("{:.2}G", b / 1e9)
        } else {
            format!("{:.0}M", b / 1e6)
        }
    })
}

/// The answer as tables: ports, uplinks, moves, notes.
pub fn text(a: &Value) -> String {
    let mut out = format!(
        "what if, over the last {} s ({} model):\n\n",
        a["window_s"].as_f64().unwrap_or(0.0),
        a["fidelity"].as_str().unwrap_or("fluid")
    );
    out += &format!(
        "{:<16} {:>9} {:>9} {:>9} {:>11} {:>5}  {}\n",
        "PORT", "MEASURED", "MODEL", "PREDICTED", "RESERVATION", "HOLDS", "UPLINK (MODEL -> PREDICTED)"
    );
    for p in a["ports"].as_array().into_iter().flatten() {
        let holds = match p["reservation_holds"].as_bool() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        let name = format!(
            "{}{}",
            p["name"].as_str().unwrap_or("?"),
            if p["may_want_more"].as_bool() == Some(true) {
                " *"
            } else {
                ""
            }
        );
        out += &format!(
            "{:<16} {:>9} {:>9} {:>9} {:>11} {:>5}  {} -> {}\n",
            name,
            rate(&p["measured_bps"]),
            rate(&p["baseline_bps"]),
            rate(&p["predicted_bps"]),
            rate(&p["reservation_bps"]),
            holds,
            p["uplink_before"].as_str().unwrap_or("-"),
            p["uplink_after"].as_str().unwrap_or("-"),
        );
    }
    let estimated: Vec<&Value> = a["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["demand"]["how"].as_str().is_some_and(|h| h != "measured"))
        .collect();
    if !estimated.is_empty() {
        out += &format!(
            "\n{:<16} {:>9} {:>9} {:>9} {:>11}  {}\n",
            "DEMAND OF", "ESTIMATE", "LOW", "HIGH", "TURNED AWAY", "HOW"
        );
        for p in estimated {
            let d = &p["demand"];
            out += &format!(
                "{:<16} {:>9} {:>9} {:>9} {:>11}  {} ({} s held)\n",
                p["name"].as_str().unwrap_or("?"),
                rate(&d["estimate_bps"]),
                rate(&d["low_bps"]),
                rate(&d["high_bps"]),
                rate(&d["turned_away_bps"]),
                d["how"].as_str().unwrap_or("?"),
                d["held_s"].as_u64().unwrap_or(0),
            );
        }
    }
    out += &format!("\n{:<16} {:>7} {:>9}\n", "UPLINK", "MODEL", "PREDICTED");
    for u in a["uplinks"].as_array().into_iter().flatten() {
        let pct = |v: &Value| format!("{:.0}%", v.as_f64().unwrap_or(0.0) * 100.0);
        out += &format!(
            "{:<16} {:>7} {:>9}\n",
            u["name"].as_str().unwrap_or("?"),
            pct(&u["baseline_utilisation"]),
            pct(&u["predicted_utilisation"])
        );
    }
    let moves = a["moves"].as_array().cloned().unwrap_or_default();
    if !moves.is_empty() {
        out += "\nmoves:\n";
        for m in moves {
            out += &format!(
                "  {:>6.0} s  {} {} -> {} ({})\n",
                m["t_s"].as_f64().unwrap_or(0.0),
                m["port"].as_str().unwrap_or("?"),
                m["from"].as_str().unwrap_or("-"),
                m["to"].as_str().unwrap_or("-"),
                m["reason"].as_str().unwrap_or(""),
            );
        }
    }
    out += "\n";
    for n in a["notes"].as_array().into_iter().flatten() {
        out += &format!("note: {}\n", n.as_str().unwrap_or(""));
    }
    out += "(* may have wanted more than it got: see the notes)\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: WhatifArgs,
    }

    fn parse(args: &[&str]) -> Result<Value, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("whatif").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        body(&cli.a)
    }

    #[test]
    fn flags_become_the_request() {
        let b = parse(&[
            "--node",
            "gold",
            "--limit",
            "none",
            "--order",
            "vms=uplink2/uplink1",
            "--order",
            "db=uplink1",
            "--fidelity",
            "packet",
            "--window",
            "60",
        ])
        .unwrap();
        assert_eq!(
            b,
            json!({
                "nodes": [{ "node": "gold", "limit": null }],
                "failover_orders": [
                    { "group": "vms", "active": ["uplink2"], "standby": ["uplink1"] },
                    { "group": "db", "active": ["uplink1"] },
                ],
                "fidelity": "packet",
                "window_s": 60,
            })
        );
        let b = parse(&["--add-port", "vm9,vms,on-off:2G:5:10,500M", "--add-port", "vm8,vms,1G"]).unwrap();
        assert_eq!(
            b["add_ports"],
            json!([
                { "name": "vm9", "group": "vms", "reservation": "500M",
                  "tx": { "kind": "on-off", "rate": "2G", "on_s": 5.0, "off_s": 10.0 } },
                { "name": "vm8", "group": "vms", "tx": "1G" },
            ])
        );
        for bad in ["vm9,vms,on-off:2G:5", "vm9,vms,step:0:1G:-1", "vm9,vms,wave:1G:2:3"] {
            assert!(parse(&["--add-port", bad]).is_err(), "{bad}");
        }
        let b = parse(&["--port", "vm1", "--shares", "high", "--reservation", "1G"]).unwrap();
        assert_eq!(
            b,
            json!({ "ports": [{ "port": "vm1", "shares": "high", "reservation": "1G" }] })
        );
    }

    #[test]
    fn controls_need_one_port_or_node() {
        assert!(parse(&["--reservation", "1M"]).is_err());
        assert!(parse(&["--port", "vm1"]).is_err(), "a port with no control");
        assert!(parse(&["--port", "vm1", "--node", "gold", "--limit", "1M"]).is_err());
        assert!(parse(&["--fidelity", "exact"]).is_err());
        let e = parse(&["--order", "vms"]).unwrap_err();
        assert!(e.contains("--order"), "{e}");
    }
}
