//! `teamster rss hash`: the RSS hash (and queue) a NIC or the switch computes for a flow, so an
//! operator can check where a flow will land.

use std::net::IpAddr;
use std::process::ExitCode;
use teamster_core::rx::toeplitz::hex_bytes;
use teamster_core::rx::{HashInput, Indirection, RssKey, SYMMETRIC_KEY};

/// `teamster rss hash`'s arguments.
#[derive(clap::Args, Debug)]
pub struct HashArgs {
    /// The secret key as hex (40 or 52 bytes; `6d5a…` or `6d:5a:…` as `ethtool -x` prints it)
    /// [default: the RSS specification's verification key].
    #[arg(long, conflicts_with = "symmetric")]
    key: Option<String>,
    /// Use the symmetric key (6d:5a repeated), which hashes both directions of a flow alike.
    #[arg(long)]
    symmetric: bool,
    /// Source IP address (IPv4 or IPv6).
    #[arg(long, required_unless_present = "input", conflicts_with = "input")]
    src: Option<IpAddr>,
    /// Destination IP address, of the same version.
    #[arg(long, required_unless_present = "input", conflicts_with = "input")]
    dst: Option<IpAddr>,
    /// Source TCP/UDP port: with --dport, the 4-tuple is hashed; without, the 2-tuple.
    #[arg(long, requires = "dport", conflicts_with = "input")]
    sport: Option<u16>,
    /// Destination TCP/UDP port.
    #[arg(long, requires = "sport", conflicts_with = "input")]
    dport: Option<u16>,
    /// Hash these bytes (hex) as they are, instead of addresses and ports.
    #[arg(long)]
    input: Option<String>,
    /// Also print the queue, for a 128-entry round-robin table over this many queues (with
    /// --table: the queue count its entries must stay below).
    #[arg(long)]
    queues: Option<usize>,
    /// Also print the queue, for this indirection table (comma-separated queue numbers, as
    /// `ethtool -x` lists them).
    #[arg(long, value_delimiter = ',')]
    table: Option<Vec<u16>>,
    /// Print {"hash":"0x51ccc178","queue":N} (queue only with --queues or --table).
    #[arg(long)]
    json: bool,
}

/// Runs `teamster rss hash`.
pub fn hash_cmd(args: &HashArgs) -> ExitCode {
    match hash(args) {
        Ok((h, queue)) => {
            if args.json {
                let mut v = serde_json::json!({ "hash": format!("{h:#010x}") });
                if let Some(q) = queue {
                    v["queue"] = q.into();
                }
                println!("{v}");
            } else {
                match queue {
                    Some(q) => println!("hash {h:#010x} queue {q}"),
                    None => println!("hash {h:#010x}"),
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("teamster rss hash: {e}");
            ExitCode::from(2)
        }
    }
}

/// The hash and, if a table was given, its queue.
fn hash(args: &HashArgs) -> Result<(u32, Option<u16>), String> {
    let key = match (&args.key, args.symmetric) {
        (Some(hex), _) => RssKey::parse_hex(hex).map_err(|e| format!("--key: {e}"))?,
        (None, true) => RssKey::new(&SYMMETRIC_KEY).expect("40 bytes"),
        (None, false) => RssKey::default(),
    };
    let h = match (&args.input, args.src, args.dst) {
        (Some(hex), ..) => {
            let bytes = hex_bytes(hex).map_err(|e| format!("--input: {e}"))?;
            if bytes.len() + 4 > key.bytes().len() {
                return Err(format!(
                    "--input: {} bytes is more than a {}-byte key covers ({} bytes)",
                    bytes.len(),
                    key.bytes().len(),
                    key.bytes().len() - 4
                ));
            }
            key.hash(&bytes)
        }
        (None, Some(src), Some(dst)) => {
            let ports = args.sport.zip(args.dport);
            let input = HashInput::tuple(src, dst, ports)
                .ok_or_else(|| format!("--src {src} and --dst {dst}: one is IPv4, the other IPv6"))?;
            key.hash(input.as_bytes())
        }
        _ => return Err("give --src and --dst, or --input".into()),
    };
    let table = match (&args.table, args.queues) {
        (Some(entries), queues) => {
            let queues = queues.unwrap_or_else(|| entries.iter().map(|q| usize::from(*q) + 1).max().unwrap_or(1));
            Some(Indirection::new(entries.clone(), queues).map_err(|e| format!("--table: {e}"))?)
        }
        (None, Some(q)) => Some(
            Indirection::round_robin(teamster_core::rx::rss::DEFAULT_TABLE, q).map_err(|e| format!("--queues: {e}"))?,
        ),
        (None, None) => None,
    };
    Ok((h, table.map(|t| t.queue(h))))
}
