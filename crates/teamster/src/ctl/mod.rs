//! `teamster ctl`: the operator's view of a running switch, through its API.
//!
//! Every API endpoint has a command; each prints a table, or the API's JSON with `--json`.
//! Exit status: 0 on success, 1 if the switch refused (the API's message is printed), 2 if it
//! could not be reached or the arguments were wrong.

mod actions;
mod cluster;
mod tables;
mod whatif;

use crate::http::client::authorise;
pub use crate::http::client::{request, segment, Answer, Target, DEFAULT_SOCKET};
use crate::live::snapshot::{EventView, GroupView, NodeView, PortView, Snapshot, UplinkView};
use actions::{group_action, port_action, uplink_action, GroupAction, PortAction, UplinkAction};
use clap::{Args, Subcommand};
use http_body_util::Full;
use hyper::body::Bytes;
use serde_json::{json, Value};
use std::path::Path;
use std::process::ExitCode;
use tables::{event_rows, group_rows, lbt_text, netioc_rows, pct, port_rows, uplink_rows};

#[derive(Args)]
pub struct CtlArgs {
    #[command(flatten)]
    target: Target,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Subcommand)]
enum CtlCommand {
    /// Everything at once (JSON).
    Status,
    /// Uplinks: state, capacity, utilisation, counters.
    Uplinks,
    /// One uplink; with `up` or `down`, set its administrative state; `uplink add` and
    /// `uplink del` add and remove uplinks while the switch runs.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Uplink {
        #[command(subcommand)]
        action: Option<UplinkAction>,
        #[arg(required = true)]
        name: Option<String>,
        #[arg(value_parser = ["up", "down"])]
        admin: Option<String>,
    },
    /// Ports: uplink, allocation against reservation and limit, counters.
    Ports,
    /// One port; with options, change its NetIOC controls; `port add` and `port del` add and
    /// remove ports while the switch runs.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Port {
        #[command(subcommand)]
        action: Option<PortAction>,
        #[arg(required = true)]
        name: Option<String>,
        /// Minimum guaranteed send rate, e.g. 500M.
        #[arg(long)]
        reservation: Option<String>,
        /// 1-100, or low, normal, high.
        #[arg(long)]
        shares: Option<String>,
        /// Cap on the send rate, e.g. 1G, or `none` to remove it.
        #[arg(long)]
        limit: Option<String>,
        /// true: the port takes its MAC over from a host outside that uses it (at once, if it
        /// waits for it now); false: it waits for such a host to be gone.
        #[arg(long, value_name = "BOOL")]
        mac_takeover: Option<bool>,
    },
    /// Port groups: policy and failover order.
    Groups,
    /// One port group; with options, change its teaming; `group add` and `group del` add and
    /// remove groups while the switch runs.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Group {
        #[command(subcommand)]
        action: Option<GroupAction>,
        #[arg(required = true)]
        name: Option<String>,
        /// port-id, source-mac, ip-hash, ip-hash-l4, load-based, hyperv-port, address-hash,
        /// dynamic or lbt-dynamic.
        #[arg(long)]
        policy: Option<String>,
        /// Active uplinks in order, comma-separated.
        #[arg(long, value_delimiter = ',')]
        active: Option<Vec<String>>,
        /// Standby uplinks in order, comma-separated (an empty string for none).
        #[arg(long, value_delimiter = ',')]
        standby: Option<Vec<String>>,
        /// Return ports to their home uplink when it recovers.
        #[arg(long)]
        failback: Option<bool>,
        #[command(flatten)]
        teaming: actions::TeamingArgs,
    },
    /// Load-Based Teaming: utilisation per uplink, port map and the history of moves.
    Lbt,
    /// LACP, as `ovs-appctl lacp/show` shows a bond: actor and partner system, key, port
    /// state bits and counters, per member.
    Lacp,
    /// Receive queues: per uplink, each queue's thread, frames and rate; NetQueue's filters
    /// and loads; and the filters' recent moves between queues (packing and spreading).
    Rx,
    /// The NetIOC tree with live allocations.
    Netioc,
    /// The event log.
    Events {
        /// Only events from this sequence number on.
        #[arg(long)]
        since: Option<u64>,
    },
    /// The Prometheus metrics text.
    Metrics,
    /// The cluster controller's VMs: power on, change controls, power off (talks to
    /// the controller's socket, /run/teamster/controller.sock, unless --socket or --url).
    Vm {
        #[command(subcommand)]
        action: cluster::VmAction,
    },
    /// The cluster controller's view: hosts with each uplink's reservation headroom, VMs,
    /// faults and recent migrations.
    Cluster,
    /// What a change would do, answered by the simulator from the switch's own recent past
    /// (nothing changes on the switch): per port its measured, modelled and predicted rate,
    /// whether its reservation holds, its uplink; per uplink its load; the moves.
    Whatif(whatif::WhatifArgs),
    /// Follow the live stream: one line per snapshot (twice a second) with each uplink's load,
    /// and every new event; `--json` prints each snapshot as a JSON line. Ctrl-C stops.
    Watch {
        /// Stop after this many snapshots.
        #[arg(long)]
        count: Option<u64>,
    },
}

/// Follows `GET /api/v1/stream` (server-sent events), printing each snapshot as it comes.
async fn watch(ctl: &CtlArgs, count: Option<u64>) -> Result<String, (u8, String)> {
    let args = &ctl.target;
    use hyper::body::Body as _;
    let req = hyper::Request::builder()
        .uri("/api/v1/stream")
        .header("host", "teamster")
        .body(Full::new(Bytes::new()))
        .map_err(|e| (2, e.to_string()))?;
    let req = authorise(args, req).map_err(|e| (2, e))?;
    let stream = crate::http::client::connect(args).await.map_err(|e| (2, e))?;
    let mut body = open_stream(stream, req).await?;
    let (mut pending, mut seen, mut last_event) = (String::new(), 0u64, None::<u64>);
    while let Some(frame) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| (2, format!("stream: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        pending.push_str(&String::from_utf8_lossy(&data));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let Some(json) = event.lines().find_map(|l| l.strip_prefix("data:")) else {
                continue;
            };
            if ctl.json {
                println!("{}", json.trim());
            } else if let Ok(s) = serde_json::from_str::<Snapshot>(json.trim()) {
                let loads: Vec<String> = s
                    .uplinks
                    .iter()
                    .map(|u| format!("{} tx {} rx {}", u.name, pct(u.tx_utilisation), pct(u.rx_utilisation)))
                    .collect();
                println!("{:>9.1} s  {}", s.t_s, loads.join("  |  "));
                for e in s.events.iter().filter(|e| last_event.is_none_or(|l| e.seq > l)) {
                    println!("{:>9.1} s  {}: {}", e.t_s, e.kind, e.message);
                }
                last_event = s.events.last().map(|e| e.seq).or(last_event);
            }
            seen += 1;
            if count.is_some_and(|c| seen >= c) {
                return Ok(String::new());
            }
        }
    }
    Err((2, "the switch closed the stream".into()))
}

/// Opens a streaming exchange over a connected stream, checking the answer's status.
async fn open_stream(
    stream: Box<dyn crate::http::client::Stream>,
    req: hyper::Request<Full<Bytes>>,
) -> Result<hyper::body::Incoming, (u8, String)> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| (2, format!("API handshake: {e}")))?;
    tokio::spawn(conn);
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| (2, format!("API request: {e}")))?;
    if !res.status().is_success() {
        return Err((1, format!("refused ({})", res.status().as_u16())));
    }
    Ok(res.into_body())
}

/// Turns an answer into text (a table, or the JSON), or the API's error.
fn show(args: &CtlArgs, a: &Answer, render: &dyn Fn(&[u8]) -> Result<String, String>) -> Result<String, String> {
    if !(200..300).contains(&a.status) {
        let msg = serde_json::from_slice::<Value>(&a.body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&a.body).to_string());
        return Err(format!("refused ({}): {msg}", a.status));
    }
    if args.json && !a.body.is_empty() {
        let v: Value = serde_json::from_slice(&a.body).map_err(|e| format!("bad JSON from the API: {e}"))?;
        return Ok(serde_json::to_string_pretty(&v).unwrap_or_default() + "\n");
    }
    render(&a.body)
}

fn parse<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, String> {
    serde_json::from_slice(b).map_err(|e| format!("unexpected answer from the API: {e}"))
}

/// Runs `teamster ctl`.
pub fn run(args: CtlArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = rt.block_on(async {
        if matches!(args.command, CtlCommand::Metrics) && args.json {
            return Err((2, "metrics are text; --json does not apply".into()));
        }
        if let CtlCommand::Watch { count } = args.command {
            return watch(&args, count).await;
        }
        let (method, path, body): (&str, String, Option<Value>) = match &args.command {
            CtlCommand::Status => ("GET", "/api/v1/status".into(), None),
            CtlCommand::Uplinks => ("GET", "/api/v1/uplinks".into(), None),
            CtlCommand::Uplink {
                action: Some(action), ..
            } => uplink_action(action),
            CtlCommand::Uplink {
                action: None,
                name,
                admin,
            } => {
                let path = format!("/api/v1/uplinks/{}", segment(name.as_deref().unwrap_or_default()));
                match admin {
                    None => ("GET", path, None),
                    Some(a) => ("PATCH", path, Some(json!({ "admin": a }))),
                }
            }
            CtlCommand::Ports => ("GET", "/api/v1/ports".into(), None),
            CtlCommand::Port {
                action: Some(action), ..
            } => port_action(action),
            CtlCommand::Port {
                action: None,
                name,
                reservation,
                shares,
                limit,
                mac_takeover,
            } => {
                let name = name.as_deref().unwrap_or_default();
                let mut change = serde_json::Map::new();
                if let Some(t) = mac_takeover {
                    change.insert("mac_takeover".into(), json!(t));
                }
                if let Some(r) = reservation {
                    change.insert("reservation".into(), json!(r));
                }
                if let Some(s) = shares {
                    change.insert("shares".into(), json!(s));
                }
                if let Some(l) = limit {
                    let v = if l == "none" { Value::Null } else { json!(l) };
                    change.insert("limit".into(), v);
                }
                if change.is_empty() {
                    ("GET", format!("/api/v1/ports/{}", segment(name)), None)
                } else {
                    (
                        "PATCH",
                        format!("/api/v1/ports/{}", segment(name)),
                        Some(Value::Object(change)),
                    )
                }
            }
            CtlCommand::Groups => ("GET", "/api/v1/port-groups".into(), None),
            CtlCommand::Group {
                action: Some(action), ..
            } => group_action(action),
            CtlCommand::Group {
                action: None,
                name,
                policy,
                active,
                standby,
                failback,
                teaming,
            } => {
                let name = name.as_deref().unwrap_or_default();
                let mut change = serde_json::Map::new();
                if let Some(p) = policy {
                    change.insert("policy".into(), json!(p));
                }
                let list = |v: &Vec<String>| json!(v.iter().filter(|s| !s.is_empty()).collect::<Vec<_>>());
                if let Some(a) = active {
                    change.insert("active".into(), list(a));
                }
                if let Some(s) = standby {
                    change.insert("standby".into(), list(s));
                }
                if let Some(f) = failback {
                    change.insert("failback".into(), json!(f));
                }
                teaming.insert_into(&mut change);
                if change.is_empty() {
                    ("GET", format!("/api/v1/port-groups/{}", segment(name)), None)
                } else {
                    (
                        "PATCH",
                        format!("/api/v1/port-groups/{}", segment(name)),
                        Some(Value::Object(change)),
                    )
                }
            }
            // The port map and uplink loads come with the status; --json shows the LBT part.
            CtlCommand::Lbt if args.json => ("GET", "/api/v1/lbt".into(), None),
            CtlCommand::Lbt => ("GET", "/api/v1/status".into(), None),
            CtlCommand::Netioc => ("GET", "/api/v1/netioc".into(), None),
            CtlCommand::Lacp => ("GET", "/api/v1/lacp".into(), None),
            CtlCommand::Rx => ("GET", "/api/v1/rx".into(), None),
            CtlCommand::Events { since } => (
                "GET",
                since.map_or("/api/v1/events".into(), |s| format!("/api/v1/events?since={s}")),
                None,
            ),
            CtlCommand::Metrics => ("GET", "/metrics".into(), None),
            CtlCommand::Vm { action } => cluster::vm_request(action).map_err(|e| (2u8, e))?,
            CtlCommand::Cluster => ("GET", "/api/v1/cluster".into(), None),
            CtlCommand::Whatif(w) => (
                "POST",
                "/api/v1/whatif".into(),
                Some(whatif::body(w).map_err(|e| (2u8, e))?),
            ),
            CtlCommand::Watch { .. } => unreachable!("handled above"),
        };
        let mut target = args.target.clone();
        if matches!(args.command, CtlCommand::Vm { .. } | CtlCommand::Cluster)
            && target.socket == Path::new(DEFAULT_SOCKET)
        {
            target.socket = crate::controller::DEFAULT_SOCKET.into();
        }
        let answer = request(&target, method, &path, body).await.map_err(|e| (2u8, e))?;
        // The scenario a what-if ran, kept where --save says (with --json too).
        if let (CtlCommand::Whatif(w), true) = (&args.command, (200..300).contains(&answer.status)) {
            let v = parse::<Value>(&answer.body).map_err(|e| (1u8, e))?;
            whatif::save(w, &v).map_err(|e| (1u8, e))?;
        }
        let render = |b: &[u8]| -> Result<String, String> {
            match &args.command {
                CtlCommand::Status => Ok(String::from_utf8_lossy(b).to_string() + "\n"),
                CtlCommand::Uplinks => parse::<Vec<UplinkView>>(b).map(|v| uplink_rows(&v)),
                CtlCommand::Uplink {
                    action: Some(UplinkAction::Del { name }),
                    ..
                } => Ok(format!("uplink {name} removed\n")),
                CtlCommand::Uplink { .. } => parse::<UplinkView>(b).map(|v| uplink_rows(&[v])),
                CtlCommand::Ports => parse::<Vec<PortView>>(b).map(|v| port_rows(&v)),
                CtlCommand::Port {
                    action: Some(PortAction::Del { name }),
                    ..
                } => Ok(format!("port {name} removed\n")),
                CtlCommand::Port { .. } => parse::<PortView>(b).map(|v| port_rows(&[v])),
                CtlCommand::Groups => parse::<Vec<GroupView>>(b).map(|v| group_rows(&v)),
                CtlCommand::Group {
                    action: Some(GroupAction::Del { name }),
                    ..
                } => Ok(format!("port group {name} removed\n")),
                CtlCommand::Group { .. } => parse::<GroupView>(b).map(|v| group_rows(&[v])),
                CtlCommand::Lbt => parse::<Snapshot>(b).map(|s| lbt_text(&s.lbt, &s)),
                CtlCommand::Netioc => parse::<Vec<NodeView>>(b).map(|v| netioc_rows(&v)),
                CtlCommand::Lacp => parse::<Vec<crate::live::lacp_view::LacpMemberView>>(b)
                    .map(|v| crate::live::lacp_view::lacp_text(&v)),
                CtlCommand::Rx => parse::<crate::live::rx_view::RxView>(b).map(|v| crate::live::rx_view::rx_text(&v)),
                CtlCommand::Events { .. } => parse::<Vec<EventView>>(b).map(|v| event_rows(&v)),
                CtlCommand::Metrics => Ok(String::from_utf8_lossy(b).to_string()),
                CtlCommand::Vm { .. } => parse::<Value>(b).map(|v| cluster::outcome_text(&v)),
                CtlCommand::Cluster => parse::<Value>(b).map(|v| cluster::cluster_text(&v)),
                CtlCommand::Whatif(_) => parse::<Value>(b).map(|v| whatif::text(&v)),
                CtlCommand::Watch { .. } => Ok(String::new()),
            }
        };
        show(&args, &answer, &render).map_err(|e| (1, e))
    });
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err((code, e)) => {
            eprintln!("error: {e}");
            ExitCode::from(code)
        }
    }
}
