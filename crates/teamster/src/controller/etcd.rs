//! The shared store: etcd, for several controllers of one cluster, exactly one of which acts.
//!
//! Model. Each controller holds an etcd lease of `ttl` seconds, kept alive every third of it,
//! and campaigns with it for the election `<prefix>/leader`; etcd makes one campaigner the
//! leader, and a leader whose lease lapses (the process killed, cut off from etcd) is one no
//! longer, so the next campaigner wins within `ttl`. Only the leader serves the API: the
//! others wait in the campaign. The state is one JSON value under `<prefix>/state`, written in
//! a transaction that holds only while the writer's election key still exists as it was when it
//! won: a deposed leader cannot overwrite its successor. A leader that loses its lease stops
//! acting at once (the process exits, its supervisor restarts it, and it campaigns again); a
//! new leader loads the stored state and goes on from there.
//!
//! The calls go through etcd's JSON gateway ([`super::etcd_gateway`]), which is asynchronous;
//! the controller's store is called from its request handlers as a blocking call, so the
//! client lives on a thread of its own with its own runtime, and the store's methods hand it
//! jobs and wait for the answer.

use super::etcd_gateway::{Gateway, Leadership};
use super::state::ClusterState;
use super::store::Store;
use std::sync::mpsc;
use std::time::Duration;

/// What the store's thread is asked.
enum Job {
    Load(mpsc::Sender<Result<Option<ClusterState>, String>>),
    Save(Vec<u8>, mpsc::Sender<Result<(), String>>),
}

/// The etcd store of a controller that leads.
pub struct EtcdStore {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    endpoints: String,
}

/// A controller's campaign under way: its lease is granted, and it leads once [`Campaign::won`]
/// returns. Meanwhile it may tell who leads ([`Campaign::leader`]).
pub struct Campaign {
    ready: mpsc::Receiver<Result<(), String>>,
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    shown: String,
    client: Gateway,
    election: String,
}

impl Campaign {
    /// Waits until this controller leads: its store.
    pub fn won(self) -> Result<EtcdStore, String> {
        match self.ready.recv() {
            Ok(Ok(())) => Ok(EtcdStore {
                jobs: self.jobs,
                endpoints: self.shown,
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
        let (gateway, election) = (client.clone(), format!("{prefix}/leader"));
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
                    let state_key = format!("{prefix}/state");
                    let mut lease_lost = std::pin::pin!(lease_lost);
                    loop {
                        tokio::select! {
                            why = &mut lease_lost => {
                                lost(why);
                                return;
                            }
                            job = todo.recv() => match job {
                                None => return,
                                Some(Job::Load(answer)) => {
                                    let _ = answer.send(load(&client, &state_key).await);
                                }
                                Some(Job::Save(bytes, answer)) => {
                                    let _ = answer.send(save(&client, &leader, &state_key, bytes).await);
                                }
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
        self.ask(Job::Load)
    }

    fn save(&self, state: &ClusterState) -> Result<(), String> {
        let bytes = serde_json::to_vec(state).map_err(|e| e.to_string())?;
        self.ask(|tx| Job::Save(bytes, tx))
    }

    fn describe(&self) -> String {
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
        let mut renewed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(every).await;
            loop {
                // Counted from when it was sent: etcd renewed the lease no sooner.
                let sent = tokio::time::Instant::now();
                // A call sent to a member whose leader just died is never answered: given a
                // third of the lease, then sent again.
                let answer = tokio::time::timeout(every, keeper.lease_keep_alive(lease)).await;
                match answer.unwrap_or_else(|_| Err(format!("no answer within {every:?}"))) {
                    Ok(left) if left > 0 => {
                        renewed = sent;
                        break;
                    }
                    Ok(_) => return "etcd lease expired".to_string(),
                    Err(e) if renewed.elapsed() >= ttl => return format!("etcd lease keep-alive failed: {e}"),
                    Err(_) => tokio::time::sleep(KEEP_ALIVE_RETRY).await,
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

async fn load(client: &Gateway, key: &str) -> Result<Option<ClusterState>, String> {
    match client.get(key).await? {
        None => Ok(None),
        Some(value) => serde_json::from_slice(&value)
            .map(Some)
            .map_err(|e| format!("etcd {key}: {e}")),
    }
}

/// How long a keep-alive that failed waits before it is tried again.
const KEEP_ALIVE_RETRY: Duration = Duration::from_millis(200);
/// How long a campaign that failed (its etcd member gone) waits before it is made again.
const CAMPAIGN_RETRY: Duration = Duration::from_millis(500);
/// How long one attempt to save may take before it is made again, and how many are made: a
/// write sent to a member whose leader just died is dropped by etcd, never answered, and the
/// same write sent again once a new leader is elected (a second or two) goes through.
const SAVE_ATTEMPT: Duration = Duration::from_millis(1500);
const SAVE_ATTEMPTS: u32 = 3;

/// Writes the state if this controller still leads (its election key as it won it). An
/// attempt that etcd does not answer in time is made again (the same value under the same
/// condition: writing it twice is writing it once).
async fn save(client: &Gateway, leader: &Leadership, key: &str, bytes: Vec<u8>) -> Result<(), String> {
    let mut why = String::new();
    for _ in 0..SAVE_ATTEMPTS {
        match tokio::time::timeout(SAVE_ATTEMPT, client.put_if_leading(leader, key, &bytes)).await {
            Ok(Ok(true)) => return Ok(()),
            Ok(Ok(false)) => return Err("this controller no longer leads; the change is not saved".into()),
            Ok(Err(e)) => {
                why = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(_) => why = format!("etcd {}: no answer to a write within {SAVE_ATTEMPT:?}", client.shown()),
        }
    }
    Err(format!("{why} ({SAVE_ATTEMPTS} attempts)"))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "controller".into())
}
