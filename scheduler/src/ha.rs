//! Scheduler replicas on etcd (`--store etcd`, feature `etcd`): the cluster state in one key,
//! written only by the elected leader and fenced by its election key, so a deposed leader's write
//! is refused by etcd itself; followers watch the key and serve reads from their copy.
//!
//! - **Election**: every replica holds a lease (`lease_ttl`) and campaigns in the election
//!   `{prefix}/leader` with its advertised URL as value. The winner's leadership lasts as long as
//!   its lease: a replica that dies (or stops keeping its lease alive) loses it within the TTL,
//!   and the next campaigner wins.
//! - **Fencing**: the leader writes the state (`{prefix}/state`) in a transaction that compares
//!   the creation revision of its election key with the one it won with. A replica that lost its
//!   lease — paused, partitioned, slow — but still believes it leads has its write refused
//!   ([`StoreError::Fenced`]) and steps down.
//! - **Distribution**: followers watch `{prefix}/state` and reload on every change. The routing
//!   table's version is the etcd revision of the write that changed it, so every replica labels
//!   a table the same way, and a table a deposed leader failed to store is never published.
//! - **Node liveness**: every node has a key `{prefix}/nodes/{id}` bound to an etcd lease of
//!   its own (`node_lease_ttl`). The leader renews it on each of the node's heartbeats (a lease
//!   renewal, not a consensus write); when the node stops, etcd ends the lease and deletes the
//!   key, and the leader, watching `{prefix}/nodes/`, declares the node down. A new leader gives
//!   every node it holds as up a lease of its own, so a node that died while no replica led is
//!   down one lease after the takeover, and none is declared down for the election's gap.
//!
//! etcd runs on its own thread with its own runtime; the synchronous [`Store`] calls hand their
//! work to it and wait (a few milliseconds on a LAN).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::cluster::Persisted;
use crate::leadership::{Leadership, LeaseCommand, NodeLeaseTask, NodeLeases};
use crate::store::{Store, StoreError};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, Txn, TxnOp, WatchOptions,
};
use ferry_proto::NodeId;

/// Where etcd is and how this replica takes part.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// etcd client URLs (`http://10.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// Key prefix of this cluster (`/ferry`).
    pub prefix: String,
    /// Lease of this replica: a leader that stops renewing it is replaced within this.
    pub lease_ttl: Duration,
    /// This replica's base URL (what followers redirect writes to).
    pub advertise: String,
    /// Lease of each node's key: a node whose heartbeats stop for this long is down.
    pub node_lease_ttl: Duration,
}

/// The state key and the election, on a runtime of their own.
pub struct EtcdStore {
    rt: tokio::runtime::Handle,
    client: Client,
    key: String,
    leadership: Arc<Leadership>,
    leases: Arc<NodeLeases>,
    /// Revision of the state key as last loaded or written.
    revision: Option<u64>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("key", &self.key)
            .field("leader", &self.leadership.is_leader())
            .finish_non_exhaustive()
    }
}

/// Blocks on `f` run by `rt` (callable from inside another runtime).
fn wait<T: Send + 'static>(
    rt: &tokio::runtime::Handle,
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(f.await);
    });
    // The runtime outlives the store; a dropped sender only means it shut down.
    rx.recv()
        .unwrap_or_else(|_| panic!("the etcd runtime stopped"))
}

/// How long a store call keeps retrying while etcd is unreachable: a dead member's endpoint
/// fails fast and the client moves on to the next, a quorum lost for longer is an error.
const RETRY_FOR: Duration = Duration::from_secs(10);

/// Deadline of one read or write of the state.
const KV_TIMEOUT: Duration = Duration::from_millis(1500);

/// Whether `e` means "etcd did not answer" (worth another try, on another member) rather than
/// an answer.
fn unreachable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            tonic::Code::Unavailable
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Cancelled
                | tonic::Code::Unknown
        ),
        _ => false,
    }
}

/// Runs `op` on the etcd runtime and waits, retrying for [`RETRY_FOR`] while etcd is
/// unreachable.
fn call<T, F, Fut>(rt: &tokio::runtime::Handle, mut op: F) -> Result<T, etcd_client::Error>
where
    T: Send + 'static,
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>> + Send,
{
    wait(rt, async move {
        let deadline = Instant::now() + RETRY_FOR;
        loop {
            match op().await {
                Err(e) if unreachable(&e) && Instant::now() < deadline => {
                    tracing::debug!(error = %e, "etcd unreachable, retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                r => return r,
            }
        }
    })
}

impl EtcdStore {
    /// Connects, starts campaigning and watching; returns the store and this replica's view of
    /// the leadership.
    pub fn connect(cfg: EtcdConfig) -> Result<(EtcdStore, Arc<Leadership>), StoreError> {
        let key = state_key(&cfg);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("etcd".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(StoreError::Invalid(format!("etcd runtime: {e}"))));
                        return;
                    }
                };
                let handle = rt.handle().clone();
                rt.block_on(async move {
                    // The store's reads and writes get a deadline of their own: a request
                    // caught by a dying etcd leader fails in a second and is retried (on the
                    // new raft leader) instead of waiting out etcd's own 7 s. The election,
                    // its lease and the watch use a client without one (they wait on purpose).
                    let options = ConnectOptions::new()
                        .with_timeout(KV_TIMEOUT)
                        .with_connect_timeout(KV_TIMEOUT);
                    let clients = async {
                        let client = Client::connect(&cfg.endpoints, None).await?;
                        let kv = Client::connect(&cfg.endpoints, Some(options)).await?;
                        Ok::<_, etcd_client::Error>((client, kv))
                    };
                    let (client, kv) = match clients.await {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = tx.send(Err(StoreError::Invalid(format!(
                                "connecting to etcd {:?}: {e}",
                                cfg.endpoints
                            ))));
                            return;
                        }
                    };
                    let leadership = Leadership::follower();
                    let (leases, lease_task) = NodeLeases::channel();
                    let _ = tx.send(Ok((handle, kv.clone(), leadership.clone(), leases)));
                    tokio::spawn(watch_state(client.clone(), cfg.clone(), leadership.clone()));
                    tokio::spawn(node_leases(
                        kv,
                        client.clone(),
                        cfg.clone(),
                        leadership.clone(),
                        lease_task,
                    ));
                    tokio::spawn(follow_leader(
                        client.clone(),
                        cfg.clone(),
                        leadership.clone(),
                    ));
                    campaign_forever(client, cfg, leadership).await;
                });
            })
            .map_err(|e| StoreError::Invalid(format!("etcd thread: {e}")))?;
        let (rt, client, leadership, leases) = rx
            .recv()
            .map_err(|_| StoreError::Invalid("the etcd thread stopped".into()))??;
        let store = EtcdStore {
            rt,
            client,
            key,
            leadership: leadership.clone(),
            leases,
            revision: None,
        };
        Ok((store, leadership))
    }

    /// The node leases this store keeps (hand them to the scheduler).
    pub fn node_leases(&self) -> Arc<NodeLeases> {
        self.leases.clone()
    }

    /// The rooms' snapshots, beside the state: `{prefix}/rooms/{room}/{node}`. Any replica
    /// writes them (each node's key is its own and a snapshot is a CRDT state, merged on
    /// restore, so a write needs no fencing).
    pub fn room_snapshots(&self) -> EtcdRoomSnapshots {
        EtcdRoomSnapshots {
            rt: self.rt.clone(),
            client: self.client.clone(),
            prefix: format!(
                "{}/rooms/",
                self.key.strip_suffix("/state").unwrap_or(&self.key)
            ),
        }
    }
}

/// [`crate::room_snapshots::RoomSnapshots`] in etcd.
#[derive(Clone)]
pub struct EtcdRoomSnapshots {
    rt: tokio::runtime::Handle,
    client: Client,
    prefix: String,
}

impl std::fmt::Debug for EtcdRoomSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdRoomSnapshots")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdRoomSnapshots {
    fn values(&self, prefix: String) -> Result<Vec<Vec<u8>>, StoreError> {
        let client = self.client.clone();
        let got = call(&self.rt, move || {
            let (mut client, prefix) = (client.clone(), prefix.clone());
            async move {
                client
                    .get(prefix, Some(GetOptions::new().with_prefix()))
                    .await
            }
        })
        .map_err(|e| StoreError::Invalid(format!("etcd get: {e}")))?;
        Ok(got.kvs().iter().map(|kv| kv.value().to_vec()).collect())
    }
}

impl crate::room_snapshots::RoomSnapshots for EtcdRoomSnapshots {
    fn put(
        &self,
        room: &ferry_room::RoomId,
        node: &NodeId,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        let key = format!("{}{room}/{node}", self.prefix);
        let client = self.client.clone();
        call(&self.rt, move || {
            let (mut client, key, value) = (client.clone(), key.clone(), value.clone());
            async move { client.put(key, value, None).await }
        })
        .map(|_| ())
        .map_err(|e| StoreError::Invalid(format!("etcd put: {e}")))
    }

    fn get(&self, room: &ferry_room::RoomId) -> Result<Vec<Vec<u8>>, StoreError> {
        self.values(format!("{}{room}/", self.prefix))
    }

    fn delete(&self, room: &ferry_room::RoomId, node: &NodeId) -> Result<bool, StoreError> {
        let key = format!("{}{room}/{node}", self.prefix);
        let client = self.client.clone();
        let r = call(&self.rt, move || {
            let (mut client, key) = (client.clone(), key.clone());
            async move { client.delete(key, None).await }
        })
        .map_err(|e| StoreError::Invalid(format!("etcd delete: {e}")))?;
        Ok(r.deleted() > 0)
    }

    fn all(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        self.values(self.prefix.clone())
    }
}

impl Store<Persisted> for EtcdStore {
    fn load(&mut self) -> Result<Option<Persisted>, StoreError> {
        let (client, key) = (self.client.clone(), self.key.clone());
        let got = call(&self.rt, move || {
            let (mut client, key) = (client.clone(), key.clone());
            async move { client.get(key, None).await }
        })
        .map_err(|e| StoreError::Invalid(format!("etcd get: {e}")))?;
        let Some(kv) = got.kvs().first() else {
            return Ok(None);
        };
        self.leadership.saw_revision(kv.mod_revision());
        self.revision = u64::try_from(kv.mod_revision()).ok();
        serde_json::from_slice(kv.value())
            .map(Some)
            .map_err(|e| StoreError::Invalid(format!("the state in etcd does not parse: {e}")))
    }

    fn save(&mut self, state: &Persisted) -> Result<(), StoreError> {
        let Some((fence_key, rev)) = self.leadership.fence() else {
            return Err(StoreError::Fenced(
                "this scheduler is not the leader".into(),
            ));
        };
        let value = serde_json::to_vec(state)
            .map_err(|e| StoreError::Invalid(format!("encoding the state: {e}")))?;
        let txn = Txn::new()
            .when([Compare::create_revision(fence_key, CompareOp::Equal, rev)])
            .and_then([TxnOp::put(self.key.clone(), value, None)]);
        let client = self.client.clone();
        // A retried transaction that had gone through is the same write again: harmless.
        let r = call(&self.rt, move || {
            let (mut client, txn) = (client.clone(), txn.clone());
            async move { client.txn(txn).await }
        })
        .map_err(|e| StoreError::Invalid(format!("etcd txn: {e}")))?;
        if !r.succeeded() {
            // Another replica leads now: our election key is gone.
            self.leadership.lost();
            return Err(StoreError::Fenced(format!(
                "the leadership this scheduler won at revision {rev} is over"
            )));
        }
        if let Some(h) = r.header() {
            self.leadership.saw_revision(h.revision());
            self.revision = u64::try_from(h.revision()).ok();
        }
        Ok(())
    }

    fn revision(&self) -> Option<u64> {
        self.revision
    }
}

fn state_key(cfg: &EtcdConfig) -> String {
    format!("{}/state", cfg.prefix.trim_end_matches('/'))
}

fn nodes_prefix(cfg: &EtcdConfig) -> String {
    format!("{}/nodes/", cfg.prefix.trim_end_matches('/'))
}

fn election(cfg: &EtcdConfig) -> String {
    format!("{}/leader", cfg.prefix.trim_end_matches('/'))
}

/// Holds a lease and campaigns; while it leads, keeps the lease alive; when the lease ends,
/// steps down and starts over.
async fn campaign_forever(mut client: Client, cfg: EtcdConfig, l: Arc<Leadership>) {
    let ttl = cfg.lease_ttl.as_secs().max(1) as i64;
    loop {
        let lease = match client.lease_grant(ttl, None).await {
            Ok(r) => r.id(),
            Err(e) => {
                tracing::warn!(error = %e, "etcd lease grant failed");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        // The lease is alive while renewals are acknowledged; this replica counts it over a
        // little before etcd would (a renewal stuck in a partition never answers), so it stops
        // acting as leader before another replica can win. A keep-alive stream that breaks (its
        // etcd member died) is opened again, on another member.
        let granted = Instant::now();
        let acked = Arc::new(AtomicU64::new(0));
        let alive = Arc::new(AtomicBool::new(true));
        let (flag, last) = (alive.clone(), acked.clone());
        // Renewed often (a tenth of the TTL, at most every 500 ms): a renewal that was due just
        // before etcd stalls (its raft leader died) must not eat into the margin.
        let every = Duration::from_millis(((ttl as u64 * 1000) / 10).min(500));
        let mut renewer = client.clone();
        let keep = tokio::spawn(async move {
            let mut stream = None;
            loop {
                let (keeper, acks) = match stream.as_mut() {
                    Some(s) => s,
                    None => match renewer.lease_keep_alive(lease).await {
                        Ok(s) => stream.insert(s),
                        Err(e) => {
                            tracing::debug!(error = %e, "etcd lease keep-alive stream failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                let sent = granted.elapsed().as_millis() as u64;
                let answer = match keeper.keep_alive().await {
                    Ok(()) => acks.message().await,
                    Err(e) => Err(e),
                };
                match answer {
                    Ok(Some(r)) if r.ttl() > 0 => {
                        last.store(sent, Ordering::SeqCst);
                        tokio::time::sleep(every).await;
                    }
                    // etcd says the lease is gone.
                    Ok(Some(_)) => break,
                    Ok(None) | Err(_) => stream = None,
                }
            }
            flag.store(false, Ordering::SeqCst);
        });
        let margin = (ttl as u64 * 1000) * 3 / 4;
        let alive = move || {
            alive.load(Ordering::SeqCst)
                && (granted.elapsed().as_millis() as u64)
                    .saturating_sub(acked.load(Ordering::SeqCst))
                    < margin
        };
        let won = tokio::select! {
            r = client.campaign(election(&cfg), cfg.advertise.clone(), lease) => r,
            () = async {
                while alive() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            } => {
                keep.abort();
                continue;
            }
        };
        match won.ok().and_then(|r| r.leader().cloned()) {
            Some(k) => {
                tracing::info!(rev = k.rev(), "this scheduler leads");
                l.won(k.key().to_vec(), k.rev(), &cfg.advertise);
            }
            None => {
                keep.abort();
                let _ = client.lease_revoke(lease).await;
                continue;
            }
        }
        // Lead until the lease ends (or a fenced write made us step down).
        while alive() && l.is_leader() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        keep.abort();
        l.lost();
        let _ = client.lease_revoke(lease).await;
    }
}

/// Keeps `leader_url` current on followers.
async fn follow_leader(mut client: Client, cfg: EtcdConfig, l: Arc<Leadership>) {
    loop {
        if !l.is_leader() {
            let url = client
                .leader(election(&cfg))
                .await
                .ok()
                .and_then(|r| r.kv().and_then(|kv| kv.value_str().ok().map(str::to_owned)));
            l.set_leader_url(url);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Watches the state key: every change wakes the followers (they reload).
async fn watch_state(mut client: Client, cfg: EtcdConfig, l: Arc<Leadership>) {
    let key = state_key(&cfg);
    loop {
        let Ok(mut stream) = client.watch(key.clone(), None).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        while let Ok(Some(resp)) = stream.message().await {
            for ev in resp.events() {
                if let Some(kv) = ev.kv() {
                    l.saw_revision(kv.mod_revision());
                }
            }
            l.state_changed.notify_waiters();
            l.state_changed.notify_one();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long one node's lease renewal is retried while etcd does not answer (within a heartbeat
/// interval, so the next heartbeat finds the task free).
const LEASE_RETRY_FOR: Duration = Duration::from_millis(1000);

/// A node's lease as this replica holds it.
struct HeldLease {
    keeper: LeaseKeeper,
    acks: LeaseKeepAliveStream,
}

/// Renews `held`; whether etcd still knows the lease.
async fn renew(held: &mut HeldLease) -> bool {
    let answer = tokio::time::timeout(KV_TIMEOUT, async {
        held.keeper.keep_alive().await?;
        held.acks.message().await
    })
    .await;
    matches!(answer, Ok(Ok(Some(r))) if r.ttl() > 0)
}

/// Keeps node `id`'s lease: renews the one held, else takes over the one its key is bound to
/// (another leader made it), else grants a new one and binds the key to it.
async fn keep_node(
    kv: &mut Client,
    leases: &mut Client,
    cfg: &EtcdConfig,
    held: &mut std::collections::HashMap<NodeId, HeldLease>,
    id: &NodeId,
) -> Result<(), etcd_client::Error> {
    if let Some(h) = held.get_mut(id) {
        if renew(h).await {
            return Ok(());
        }
        held.remove(id);
    }
    let key = format!("{}{id}", nodes_prefix(cfg));
    let existing = kv
        .get(key.as_str(), None)
        .await?
        .kvs()
        .first()
        .map(|k| k.lease())
        .filter(|&l| l != 0);
    if let Some(lease) = existing {
        let (keeper, acks) = leases.lease_keep_alive(lease).await?;
        let mut h = HeldLease { keeper, acks };
        if renew(&mut h).await {
            held.insert(id.clone(), h);
            return Ok(());
        }
    }
    let ttl = cfg.node_lease_ttl.as_secs_f64().ceil().max(1.0) as i64;
    let lease = kv.lease_grant(ttl, None).await?.id();
    kv.put(key, id.as_str(), Some(PutOptions::new().with_lease(lease)))
        .await?;
    let (keeper, acks) = leases.lease_keep_alive(lease).await?;
    tracing::debug!(node = %id, lease, "node lease granted");
    held.insert(id.clone(), HeldLease { keeper, acks });
    Ok(())
}

/// Serves [`NodeLeases`]: renews on heartbeats, adopts on a takeover, and reports the nodes
/// whose key etcd deleted (their lease ended) while this replica leads and no new lease was
/// given since.
async fn node_leases(
    mut kv: Client,
    mut leases: Client,
    cfg: EtcdConfig,
    l: Arc<Leadership>,
    mut task: NodeLeaseTask,
) {
    let prefix = nodes_prefix(&cfg);
    let (deleted_tx, mut deleted) = tokio::sync::mpsc::unbounded_channel::<NodeId>();
    // Streams go through the client without a request deadline.
    let mut watcher = leases.clone();
    let watched = prefix.clone();
    tokio::spawn(async move {
        loop {
            let options = WatchOptions::new().with_prefix();
            let Ok(mut stream) = watcher.watch(watched.as_str(), Some(options)).await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            while let Ok(Some(resp)) = stream.message().await {
                for ev in resp.events() {
                    let gone = (ev.event_type() == EventType::Delete)
                        .then(|| ev.kv())
                        .flatten()
                        .and_then(|kv| kv.key_str().ok())
                        .and_then(|k| k.strip_prefix(watched.as_str()))
                        .and_then(|id| NodeId::new(id.to_owned()).ok());
                    if let Some(id) = gone
                        && deleted_tx.send(id).is_err()
                    {
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut held = std::collections::HashMap::new();
    loop {
        tokio::select! {
            command = task.commands.recv() => {
                let Some(command) = command else { return };
                // What queued up while etcd was slow is served once per node.
                let mut ids = std::collections::BTreeSet::new();
                let mut next = Some(command);
                while let Some(c) = next {
                    match c {
                        LeaseCommand::Renew(id) => {
                            ids.insert(id);
                        }
                        LeaseCommand::Adopt(all) => ids.extend(all),
                    }
                    next = task.commands.try_recv().ok();
                }
                for id in ids {
                    // A dead member or an etcd election costs a retry, not the node's lease.
                    let deadline = Instant::now() + LEASE_RETRY_FOR;
                    loop {
                        match keep_node(&mut kv, &mut leases, &cfg, &mut held, &id).await {
                            Ok(()) => break,
                            Err(e) if unreachable(&e) && Instant::now() < deadline => {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            Err(e) => {
                                tracing::warn!(node = %id, error = %e, "keeping the node's etcd lease");
                                break;
                            }
                        }
                    }
                }
            }
            Some(id) = deleted.recv() => {
                held.remove(&id);
                if !l.is_leader() {
                    continue;
                }
                // Checked on the side (a dead etcd member can take a while to route around);
                // a key given again since (a heartbeat, a takeover) means the node lives.
                let (mut kv, l, expired) = (kv.clone(), l.clone(), task.expired.clone());
                let key = format!("{prefix}{id}");
                tokio::spawn(async move {
                    let deadline = Instant::now() + RETRY_FOR;
                    let again = loop {
                        let options = GetOptions::new().with_count_only();
                        match kv.get(key.as_str(), Some(options)).await {
                            Err(e) if unreachable(&e) && Instant::now() < deadline => {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            r => break r.map(|r| r.count() > 0),
                        }
                    };
                    match again {
                        Ok(false) if l.is_leader() => {
                            tracing::warn!(node = %id, "the node's etcd lease expired: down");
                            let _ = expired.send(id);
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(node = %id, error = %e, "reading the node's key"),
                    }
                });
            }
        }
    }
}
