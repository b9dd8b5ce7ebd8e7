//! `teamster ioc allocate FILE` and `teamster ioc admit FILE`: the NetIOC allocator and
//! admission control, scriptable. FILE is JSON (`.json`) or TOML (`.toml`) in the shape of
//! [`teamster_core::ioc::spec`].

use serde_json::{json, Map, Value};
use std::path::Path;
use std::process::ExitCode;
use teamster_core::ioc::admission::admit;
use teamster_core::ioc::spec::{Built, TreeFile};
use teamster_core::ioc::{allocate, NodeId};
use teamster_core::units::Bandwidth;

/// Reads and checks a tree file; errors name the file, the node (key path and name) and the key.
pub fn load(path: &Path) -> Result<Built, String> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{file}: cannot read: {e}"))?;
    let value: Value = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => serde_json::from_str(&text).map_err(|e| format!("{file}: {e}"))?,
        Some("toml") => toml::from_str(&text).map_err(|e| format!("{file}: {}", e.to_string().trim_end()))?,
        _ => return Err(format!("{file}: unknown file type: expected a .json or .toml file")),
    };
    let tree: TreeFile = serde_path_to_error::deserialize(&value).map_err(|e| {
        let at = describe(&value, e.path());
        format!("{file}: {at}: {}", e.into_inner())
    })?;
    tree.build().map_err(|e| format!("{file}: {e}"))
}

/// The key path of a deserialisation error, with the name of the node it is in.
fn describe(root: &Value, path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut at = root;
    let mut name = None;
    for seg in path.iter() {
        let next = match seg {
            Segment::Seq { index } => at.get(index),
            Segment::Map { key } => at.get(key.as_str()),
            _ => None,
        };
        let Some(next) = next else { break };
        if let Some(n) = next.get("name").and_then(Value::as_str) {
            name = Some(n.to_string());
        }
        at = next;
    }
    match name {
        Some(n) => format!("{path} (in node `{n}`)"),
        None => path.to_string(),
    }
}

/// Allocates the file's capacity over its tree and prints every node's share.
pub fn allocate_cmd(path: &Path, json_out: bool) -> ExitCode {
    let b = match load(path) {
        Ok(b) => b,
        Err(e) => return fail(&e),
    };
    let x = allocate(&b.tree, b.capacity.bps_f64(), &b.demand);
    if json_out {
        let mut allocations = Map::new();
        for id in b.tree.ids().skip(1) {
            allocations.insert(b.tree.node(id).spec.name.clone(), json!(x.get(id).round() as u64));
        }
        println!("{}", json!({ "allocations": allocations }));
    } else {
        println!(
            "{:<28} {:>12} {:>7} {:>12} {:>12} {:>14}",
            "node", "reservation", "shares", "limit", "demand", "allocation"
        );
        print_rows(&b, NodeId::ROOT, 0, &|id| format!("{:>14}", fmt_bps(x.get(id))));
        println!("capacity {}: allocated {}", b.capacity, fmt_bps(x.get(NodeId::ROOT)));
    }
    ExitCode::SUCCESS
}

/// Checks the file's tree against admission control: exit 0 if admitted, 1 if rejected.
pub fn admit_cmd(path: &Path, json_out: bool) -> ExitCode {
    let b = match load(path) {
        Ok(b) => b,
        Err(e) => return fail(&e),
    };
    let verdict = admit(&b.tree, b.capacity, b.cap);
    if json_out {
        let v = match &verdict {
            Ok(()) => json!({ "admitted": true }),
            Err(e) => json!({ "admitted": false, "error": e.to_string() }),
        };
        println!("{v}");
    } else {
        match &verdict {
            Ok(()) => {
                let reserved: u64 = b
                    .tree
                    .node(NodeId::ROOT)
                    .children
                    .iter()
                    .map(|c| b.tree.node(*c).spec.reservation.bps())
                    .sum();
                println!(
                    "admitted: {} reserved of {} allowed ({:.0}% of {})",
                    Bandwidth::from_bps(reserved),
                    Bandwidth::from_bps_f64(b.capacity.bps_f64() * b.cap.get()),
                    b.cap.get() * 100.0,
                    b.capacity
                );
            }
            Err(e) => eprintln!("rejected: {e}"),
        }
    }
    if verdict.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_rows(b: &Built, id: NodeId, depth: usize, last: &dyn Fn(NodeId) -> String) {
    for &c in &b.tree.node(id).children {
        let s = &b.tree.node(c).spec;
        let name = format!("{}{}", "  ".repeat(depth), s.name);
        let limit = s.limit.map_or("-".to_string(), |l| l.to_string());
        let demand = b.demand[c.0].map_or("-".to_string(), fmt_bps);
        println!(
            "{name:<28} {:>12} {:>7} {limit:>12} {demand:>12} {}",
            s.reservation.to_string(),
            s.shares.to_string(),
            last(c)
        );
        print_rows(b, c, depth + 1, last);
    }
}

fn fmt_bps(bps: f64) -> String {
    format!("{:.3} Gbps", bps / 1e9)
}

fn fail(e: &str) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(2)
}
