//! The shared store: etcd, for several controllers of one cluster, exactly one of which acts.
//!
//! Model. Each controller holds an etcd lease of `ttl` seconds, kept alive every third of it,
//! and campaigns with it for the election `<prefix>/leader`; etcd makes one campaigner the
//! leader, and a leader whose lease lapses (the process killed, cut off from etcd) is one no
//! longer, so the next campaigner wins within `ttl`. Only the leader serves the API: the
//! others wait in the campaign. The state is records under `<prefix>/records/`
//! ([`super::records`]: `host/NAME`, `vm/NAME`, `cluster`), a change writing only its delta,
//! in transactions that hold only while the writer's election key still exists as it was when
//! it won: a deposed leader cannot overwrite its successor. A delta larger than one
//! transaction (etcd's 128 operations) is cut into several, hosts before VMs before the
//! cluster's record; a state in the earlier layout (one value under `<prefix>/state`) is read,
//! written whole as records at the first save, and then removed. A leader that loses its lease stops
//! acting at once (the process exits, its supervisor restarts it, and it campaigns again); a
//! new leader loads the stored state and goes on from there.
//!
//! The calls go through etcd's JSON gateway ([`super::etcd_gateway`]), which is asynchronous;
//! the controller's store is called from its request handlers as a blocking call, so the
//! client lives on a thread of its own with its own runtime, and the store's methods hand it
//! jobs and wait for the answer.

use super::etcd_gateway::{Gateway, Leadership};
use super::records::Delta;
use super::state::ClusterState;
use super::store::{SaveError, Store};
use std::sync::mpsc;
use std::time::Duration;

/// What the store's thread is asked: to load (the state, and whether it was in the earlier
/// layout), or to write (keys under the prefix: deletes, each of a key or of every key under
/// it, then puts).
enum Job {
    Load(mpsc::Sender<Result<(Option<ClusterState>, bool), String>>),
    Save(Writes, mpsc::Sender<Result<(), String>>),
}

/// One save's writes, keys in full, in the order they are to land.
struct Writes {
    ops: Vec<Op>,
}

/// A write: a key put, a key deleted, or every key under a prefix deleted.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Put(String, Vec<u8>),
    Delete(String),
    DeletePrefix(String),
}

/// The etcd store of a controller that leads.
pub struct EtcdStore {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    endpoints: String,
    prefix: String,
    /// The state was read from the earlier layout (`<prefix>/state`): written whole next.
    legacy: std::sync::atomic::AtomicBool,
}

/// A controller's campaign under way: its lease is granted, and it leads once [`Campaign::won`]
/// returns. Meanwhile it may tell who leads ([`Campaign::leader`]).
pub struct Campaign {
    ready: mpsc::Receiver<Result<(), String>>,
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    shown: String,
    client: Gateway,
    election: String,
    prefix: String,
}

impl Campaign {
    /// Waits until this controller leads: its store.
    pub fn won(self) -> Result<EtcdStore, String> {
        match self.ready.recv() {
            Ok(Ok(())) => Ok(EtcdStore {
                jobs: self.jobs,
                endpoints: self.shown,
                prefix: self.prefix,
                legacy: Default::default(),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("etcd {}: the store's thread ended", self.shown)),
        }
    }

    /// Who tells where the election's leader is.
    pub fn leader(&self) -> Leader {
        Leader {
            client: self.client.clone(),
            election: self.election.clone(),
        }
    }
}

/// Finds where an election's leader is reached.
#[derive(Clone)]
pub struct Leader {
    client: Gateway,
    election: String,
}

impl Leader {
    /// The URL the leader advertised, if there is a leader and it said.
    pub async fn find(&self) -> Option<String> {
        let value = self.client.leader(&self.election).await.ok().flatten()?;
        let text = String::from_utf8(value).ok()?;
        let url = text.split_once(' ')?.1.trim();
        (!url.is_empty()).then(|| url.to_string())
    }
}

impl EtcdStore {
    /// Connects to etcd through `client`, takes a lease of `ttl_s` seconds and campaigns
    /// under `prefix`, as the controller reached at `advertise` (what followers tell hosts);
    /// returns once the lease is granted (the wait to lead is announced on standard output):
    /// [`Campaign::won`] waits for the leadership. `lost` is called if the lease lapses
    /// afterwards (leadership is gone).
    pub fn lead(
        client: Gateway,
        prefix: String,
        ttl_s: i64,
        advertise: Option<String>,
        lost: impl FnOnce(String) + Send + 'static,
    ) -> Result<Campaign, String> {
        let shown = client.shown().to_string();
        let (gateway, election, store_prefix) = (client.clone(), format!("{prefix}/leader"), prefix.clone());
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let (jobs, mut todo) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let who = format!(
            "{}-{} {}",
            hostname(),
            std::process::id(),
            advertise.unwrap_or_default()
        );
        std::thread::Builder::new()
            .name("teamster-etcd".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("etcd runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let (client, leader, lease_lost) = match campaign(client, &prefix, ttl_s, &who, &ready_tx).await {
                        Ok(x) => x,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let mut lease_lost = std::pin::pin!(lease_lost);
                    // The election key is looked at every third of the lease: a leader whose
                    // key is gone (another may lead) stops, whether or not it writes.
                    let mut look = tokio::time::interval(Duration::from_millis((ttl_s as u64 * 1000 / 3).max(100)));
                    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tokio::select! {
                            why = &mut lease_lost => {
                                lost(why);
                                return;
                            }
                            _ = look.tick() => {
                                if let Ok(false) = client.still_leads(&leader).await {
                                    lost(DEPOSED.to_string());
                                    return;
                                }
                            }
                            job = todo.recv() => match job {
                                None => return,
                                Some(Job::Load(answer)) => {
                                    let _ = answer.send(load(&client, &prefix).await);
                                }
                                // A save races the lease: one that lapses meanwhile ends
                                // the leadership at once, not when the write gives up.
                                Some(Job::Save(writes, answer)) => tokio::select! {
                                    saved = save(&client, &leader, writes) => {
                                        // A write that failed may have landed, in part or
                                        // whole (a timed-out transaction etcd applied, a batch
                                        // of several): what etcd holds is no longer known to
                                        // be the state in force, so this leader stops and the
                                        // next one reads it.
                                        let stop = match &saved {
                                            Err(e) if e == DEPOSED => Some(DEPOSED.to_string()),
                                            Err(e) => Some(format!("a write's outcome is unknown ({e}); stopping, so that the next leader reads what etcd holds")),
                                            Ok(()) => None,
                                        };
                                        let _ = answer.send(saved);
                                        if let Some(why) = stop {
                                            lost(why);
                                            return;
                                        }
                                    }
                                    why = &mut lease_lost => {
                                        lost(why);
                                        return;
                                    }
                                },
                            },
                        }
                    }
                });
            })
            .map_err(|e| format!("etcd thread: {e}"))?;
        // The first word: the lease is granted (or why not).
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Campaign {
                ready: ready_rx,
                jobs,
                shown,
                client: gateway,
                election,
                prefix: store_prefix,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("etcd {shown}: the store's thread ended")),
        }
    }

    fn ask<T>(&self, job: impl FnOnce(mpsc::Sender<Result<T, String>>) -> Job) -> Result<T, String> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(job(tx))
            .map_err(|_| format!("etcd {}: no longer the leader", self.endpoints))?;
        rx.recv()
            .map_err(|_| format!("etcd {}: no longer the leader", self.endpoints))?
    }
}

impl Store for EtcdStore {
    fn load(&self) -> Result<Option<ClusterState>, String> {
        let (state, legacy) = self.ask(Job::Load)?;
        self.legacy.store(legacy, std::sync::atomic::Ordering::Relaxed);
        Ok(state)
    }

    /// Every failure stops this controller (see the worker in [`Campaign`]): a
    /// [`SaveError::Stopping`].
    fn save(&self, state: &ClusterState, delta: &Delta) -> Result<(), SaveError> {
        self.write(state, delta).map_err(SaveError::Stopping)
    }

    fn describe(&self) -> String {
        self.describe_etcd()
    }
}

impl EtcdStore {
    /// [`Store::save`]'s writes.
    fn write(&self, state: &ClusterState, delta: &Delta) -> Result<(), String> {
        let records = records_prefix(&self.prefix);
        let legacy = self.legacy.load(std::sync::atomic::Ordering::Relaxed);
        if legacy {
            // Written anew: whatever records a half-made earlier move left go first (in a
            // transaction of their own: etcd refuses one that deletes a range and puts in it).
            let clear = Writes {
                ops: vec![Op::DeletePrefix(records.clone())],
            };
            self.ask(|tx| Job::Save(clear, tx))?;
        }
        let delta = delta.or_whole(state, legacy)?;
        if delta.is_empty() {
            return Ok(());
        }
        let writes = Writes {
            ops: ordered(&records, &delta, legacy.then(|| format!("{}/state", self.prefix))),
        };
        self.ask(|tx| Job::Save(writes, tx))?;
        self.legacy.store(false, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn describe_etcd(&self) -> String {
        format!("etcd store {} (leader)", self.endpoints)
    }
}

/// Takes and keeps a lease, and campaigns until this controller leads: the client, the
/// leadership, and a future that ends (with why) when the lease lapses.
async fn campaign(
    client: Gateway,
    prefix: &str,
    ttl_s: i64,
    who: &str,
    granted: &mpsc::Sender<Result<(), String>>,
) -> Result<(Gateway, Leadership, impl std::future::Future<Output = String>), String> {
    let shown = client.shown().to_string();
    // The lease runs from no sooner than its grant was asked for.
    let mut renewed = tokio::time::Instant::now();
    let lease = client.lease_grant(ttl_s).await?;
    let _ = granted.send(Ok(()));
    let every = Duration::from_millis((ttl_s as u64 * 1000 / 3).max(100));
    // Kept alive from now on, while campaigning too; ends when the lease lapses.
    let keeper = client.clone();
    // A keep-alive that fails (its member killed mid-call, an election under way) is tried
    // again, through whichever member answers, until the lease's time has passed since the
    // last one etcd answered: only then may another controller have taken the lead.
    let kept = async move {
        let ttl = Duration::from_secs(ttl_s as u64);
        loop {
            tokio::time::sleep(every).await;
            loop {
                // Each attempt ends by the lease's end at the latest: past it, another
                // controller may lead, and this one must stop.
                let left = (renewed + ttl).saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return "etcd lease keep-alive failed: no renewal within the lease".to_string();
                }
                // Counted from when it was sent: etcd renewed the lease no sooner.
                let sent = tokio::time::Instant::now();
                // A call sent to a member whose leader just died is never answered: given a
                // third of the lease, then sent again.
                let answer = tokio::time::timeout(every.min(left), keeper.lease_keep_alive(lease)).await;
                match answer {
                    Ok(Ok(ttl_left)) if ttl_left > 0 => {
                        renewed = sent;
                        break;
                    }
                    Ok(Ok(_)) => return "etcd lease expired".to_string(),
                    Ok(Err(_)) => tokio::time::sleep(KEEP_ALIVE_RETRY.min(left)).await,
                    Err(_) => {}
                }
            }
        }
    };
    let (lapsed_tx, mut lapsed_rx) = tokio::sync::oneshot::channel::<String>();
    tokio::spawn(async move {
        let _ = lapsed_tx.send(kept.await);
    });
    println!("teamster controller: waiting to lead {prefix} at etcd {shown}");
    // A lease that lapses while this controller waits ends the wait: its campaign could never
    // win, and a follower stuck in it would go on answering as if it could.
    // A campaign whose etcd member goes away (killed, cut off) is made again, on the lease it
    // had, through whichever member answers: campaigning again with the same lease finds the
    // same election key, so nothing is duplicated; the wait ends only when the lease lapses.
    let election = format!("{prefix}/leader");
    let leader = loop {
        tokio::select! {
            won = client.campaign(&election, who, lease) => match won {
                Ok(leader) => break leader,
                Err(e) => {
                    eprintln!("teamster controller: {e}; campaigning again");
                    tokio::time::sleep(CAMPAIGN_RETRY).await;
                }
            },
            why = &mut lapsed_rx => {
                let why = why.unwrap_or_else(|_| "the lease keeper stopped".to_string());
                return Err(format!("etcd {shown}: {why} while waiting to lead"));
            }
        }
    };
    println!("teamster controller: leading {prefix} as {}", who.trim_end());
    let lapsed = async move {
        lapsed_rx
            .await
            .unwrap_or_else(|_| "the lease keeper stopped".to_string())
    };
    Ok((client, leader, lapsed))
}

/// Where the records are kept under the prefix.
fn records_prefix(prefix: &str) -> String {
    format!("{prefix}/records/")
}

/// The state under `prefix`: its records, or else the earlier layout's one value (`<prefix>/state`,
/// said with `true`: to be written anew), or none.
async fn load(client: &Gateway, prefix: &str) -> Result<(Option<ClusterState>, bool), String> {
    let records = records_prefix(prefix);
    let all = client.range_prefix(&records).await?;
    let read = (all.iter()).map(|(k, v)| (k.strip_prefix(records.as_str()).unwrap_or(k), v.as_slice()));
    if let Some(state) = ClusterState::from_records(read).map_err(|e| format!("etcd {records}: {e}"))? {
        return Ok((Some(state), false));
    }
    let key = format!("{prefix}/state");
    match client.get(&key).await? {
        None => Ok((None, false)),
        Some(value) => serde_json::from_slice(&value)
            .map(|s| (Some(s), true))
            .map_err(|e| format!("etcd {key}: {e}")),
    }
}

/// How many operations one transaction holds at most (etcd's `--max-txn-ops` is 128 unless
/// raised), and how many bytes of values (its `--max-request-bytes` is 1.5 MiB, and the
/// gateway's base64 makes four bytes of three).
const TXN_OPS: usize = 128;
const TXN_BYTES: usize = 768 * 1024;

/// `delta`'s writes under `records`, in the order that leaves the store readable whatever
/// transaction a controller dies after: records put (hosts, then VMs), VM records deleted,
/// host records deleted (no VM record names a host whose record is gone), the earlier layout's
/// value removed (`legacy`), and the cluster's record last.
fn ordered(records: &str, delta: &Delta, legacy: Option<String>) -> Vec<Op> {
    let key = |k: &str| format!("{records}{k}");
    let (cluster, puts): (Vec<_>, Vec<_>) = (delta.puts.iter()).partition(|(k, _)| k == super::records::CLUSTER);
    let mut ops: Vec<Op> = puts.into_iter().map(|(k, v)| Op::Put(key(k), v.clone())).collect();
    let (vms, hosts): (Vec<_>, Vec<_>) = (delta.deletes.iter()).partition(|k| k.starts_with("vm/"));
    ops.extend(vms.into_iter().chain(hosts).map(|k| Op::Delete(key(k))));
    ops.extend(legacy.map(Op::Delete));
    ops.extend(cluster.into_iter().map(|(k, v)| Op::Put(key(k), v.clone())));
    ops
}

/// Cuts `writes` into transactions under etcd's limits, keeping their order.
fn batches(writes: Writes) -> Vec<Vec<Op>> {
    let mut out: Vec<Vec<Op>> = vec![Vec::new()];
    let mut bytes = 0;
    for op in writes.ops {
        let size = match &op {
            Op::Put(k, v) => k.len() + v.len(),
            Op::Delete(k) | Op::DeletePrefix(k) => k.len(),
        };
        let last = out.last().expect("one");
        if last.len() >= TXN_OPS || (bytes + size > TXN_BYTES && !last.is_empty()) {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        out.last_mut().expect("one").push(op);
    }
    out
}

/// What a write says when etcd refused it because another controller leads now: this one
/// stops at once.
const DEPOSED: &str = "this controller no longer leads (its election key is gone); the change is not saved";
/// How long a keep-alive that failed waits before it is tried again.
const KEEP_ALIVE_RETRY: Duration = Duration::from_millis(200);
/// How long a campaign that failed (its etcd member gone) waits before it is made again.
const CAMPAIGN_RETRY: Duration = Duration::from_millis(500);
/// How long one attempt to write may take before it is made again, and how many are made: a
/// write sent to a member whose leader just died is dropped by etcd, never answered, and the
/// same write sent again once a new leader is elected (a second or two) goes through.
const SAVE_ATTEMPT: Duration = Duration::from_millis(1500);
const SAVE_ATTEMPTS: u32 = 3;

/// Writes `writes` if this controller still leads (its election key as it won it), in as many
/// transactions as etcd's limits need (a change that moves hundreds of VMs): each record is
/// whole in one, hosts before VMs before the cluster's record, so a controller killed between
/// two finds every VM on one host. An attempt that etcd does not answer in time is made again
/// (the same values under the same condition: writing them twice is writing them once).
async fn save(client: &Gateway, leader: &Leadership, writes: Writes) -> Result<(), String> {
    for batch in batches(writes) {
        let mut puts = Vec::new();
        let mut deletes = Vec::new();
        for op in batch {
            match op {
                Op::Put(k, v) => puts.push((k, v)),
                Op::Delete(k) => deletes.push((k, false)),
                Op::DeletePrefix(k) => deletes.push((k, true)),
            }
        }
        let mut why = String::new();
        let mut done = false;
        for _ in 0..SAVE_ATTEMPTS {
            let attempt = client.txn_if_leading(leader, &puts, &deletes);
            match tokio::time::timeout(SAVE_ATTEMPT, attempt).await {
                Ok(Ok(true)) => {
                    done = true;
                    break;
                }
                Ok(Ok(false)) => return Err(DEPOSED.into()),
                Ok(Err(e)) => {
                    why = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(_) => why = format!("etcd {}: no answer to a write within {SAVE_ATTEMPT:?}", client.shown()),
            }
        }
        if !done {
            return Err(format!("{why} ({SAVE_ATTEMPTS} attempts)"));
        }
    }
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "controller".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delta larger than etcd takes in one transaction is cut in order: deletes first, puts
    /// after, none over 128 operations or about 768 KiB of values, the last put (the
    /// cluster's record) in the last.
    #[test]
    fn a_large_delta_is_cut_under_etcds_limits_in_order() {
        let puts: Vec<(String, Vec<u8>)> = (0..300)
            .map(|i| (format!("vm/{i:03}"), vec![0; 10]))
            .chain([("cluster".to_string(), vec![1])])
            .collect();
        let delta = Delta {
            puts,
            deletes: vec!["host/gone".into(), "vm/gone".into()],
        };
        let ops = ordered("p/", &delta, Some("p-old".into()));
        // Puts, the VM's delete, the host's, the old value, the cluster's record last.
        assert_eq!(ops[299], Op::Put("p/vm/299".into(), vec![0; 10]));
        assert_eq!(
            ops[300..],
            [
                Op::Delete("p/vm/gone".into()),
                Op::Delete("p/host/gone".into()),
                Op::Delete("p-old".into()),
                Op::Put("p/cluster".into(), vec![1])
            ]
        );
        let out = batches(Writes { ops: ops.clone() });
        assert!(out.iter().all(|b| b.len() <= TXN_OPS));
        assert_eq!(out.len(), 3);
        assert_eq!(out.concat(), ops, "every write once, in order");
        // Large values: cut by bytes.
        let big: Vec<Op> = (0..4)
            .map(|i| Op::Put(format!("p/host/{i}"), vec![0; 300 * 1024]))
            .collect();
        let out = batches(Writes { ops: big });
        assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2]);
        // One value larger than the limit still goes, alone.
        let huge = batches(Writes {
            ops: vec![Op::Put("p/host/x".into(), vec![0; TXN_BYTES + 1])],
        });
        assert_eq!(huge.len(), 1);
    }
}
