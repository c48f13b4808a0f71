//! The scheduler process around the pure [`Cluster`] core: shared state
//! for the HTTP handlers, the tick loop (liveness, weights, drains),
//! persistence through a [`Store`], and migrations carried out through the
//! [`Migrations`] seam.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferry_proto::api::{MigrationView, NodeState};
use ferry_proto::{MigrationId, NodeId};
use tokio::sync::{Notify, watch};

use crate::cluster::{Action, Cluster, ClusterConfig, Liveness, Persisted};
use crate::drain::Migrations;
use crate::leadership::{Leadership, LeaseCommand, NodeLeases};
use crate::store::{Store, StoreError};

mod recordings;
mod transcodes;
pub use recordings::RecordingRequestError;

/// Milliseconds since the Unix epoch (the service is the driver: it may
/// read the clock).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub use crate::cluster::STATUS_SILENCE;

struct Inner {
    cluster: Cluster,
    config: ClusterConfig,
    store: Box<dyn Store<Persisted>>,
    dirty: bool,
    /// The core's routing counter when the published version was taken (a store that versions
    /// its writes labels a table with the revision that stored it).
    routing_counter: u64,
    /// The routing version published to watchers.
    routing_version: u64,
    /// The table published with it (`GET /v1/routing`).
    routing_table: ferry_proto::api::RoutingTable,
}

impl Inner {
    /// After a load or save: the version to publish, when the routing table changed since the
    /// last one published (a store that versions its writes labels it with the revision).
    fn stored(&mut self) -> Option<u64> {
        let counter = self.cluster.routing_version();
        let version = self.store.revision().unwrap_or(counter);
        if counter == self.routing_counter {
            return None;
        }
        self.routing_counter = counter;
        // Never backwards (a store that does not version repeats the counter).
        self.routing_version = version.max(self.routing_version);
        self.routing_table = self.table();
        Some(self.routing_version)
    }

    /// The core's routing table under the published version.
    fn table(&self) -> ferry_proto::api::RoutingTable {
        let mut t = self.cluster.routing();
        t.version = self.routing_version;
        t
    }
}

/// A running scheduler.
pub struct Scheduler {
    inner: Mutex<Inner>,
    token: String,
    routing: watch::Sender<u64>,
    wake: Notify,
    migrations: Arc<dyn Migrations>,
    /// The trace span of each migration ordered and not ended (it ends with the migration).
    migration_spans: Mutex<HashMap<MigrationId, tracing::Span>>,
    /// Recent probes of nodes clients reported unreachable: node → (when, alive).
    probes: Mutex<HashMap<NodeId, (Instant, bool)>>,
    /// Where recent WHIP/WHEP requests were sent, by idempotency key.
    redirects: Mutex<HashMap<String, (String, Instant)>>,
    /// Whether this replica leads (always, with the embedded store).
    leadership: Arc<Leadership>,
    /// TLS settings of the calls to nodes' `https://` URLs (health probes).
    node_tls: std::sync::OnceLock<ureq::tls::TlsConfig>,
    /// Node liveness by the store's leases (etcd), when it keeps them.
    leases: Option<Arc<NodeLeases>>,
    /// The TURN relays handed out, when configured.
    turn: std::sync::OnceLock<Mutex<crate::turn::TurnFleet>>,
    /// Calls to nodes for recordings (made on first use, with the node TLS settings then set).
    task_client: std::sync::OnceLock<crate::task_client::TaskClient>,
    /// Where the rooms' snapshots are kept (in memory unless set).
    room_snapshots: std::sync::OnceLock<Arc<dyn crate::room_snapshots::RoomSnapshots>>,
}

/// Why a TURN operator request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurnApiError {
    /// No relays are configured (503).
    #[error("no TURN relays are configured (FERRY_TURN_URIS, FERRY_TURN_SECRET)")]
    NoFleet,
    /// No relay has this id or URI (404).
    #[error("no TURN relay {0:?} (give its id or URI, see GET /v1/turn/relays)")]
    NotFound(String),
    /// The relay has no drain to cancel (404).
    #[error("TURN relay {0} has no drain")]
    NoDrain(String),
    /// An unusable relay spec (400).
    #[error("{0}")]
    BadRelay(String),
    /// The relay is in the fleet already (409).
    #[error("TURN relay {0} is in the fleet already")]
    Exists(String),
    /// The relay still takes or holds users (409).
    #[error(
        "TURN relay {0} is {1}: drain it first (POST /v1/turn/relays/{0}/drain) so its users move"
    )]
    InService(String, String),
}

/// A probe's result is reused this long (clients of one dead node all report it at once).
const PROBE_REUSE: Duration = Duration::from_millis(500);
/// A node that does not answer its health check within this is unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);
/// Redirects remembered for retried requests.
const REDIRECT_TTL: Duration = Duration::from_secs(60);
/// Redirects remembered at most.
const MAX_REDIRECTS: usize = 10_000;

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").finish_non_exhaustive()
    }
}

impl Scheduler {
    /// Opens the store and restores what it holds; the only replica, so it leads.
    pub fn open(
        config: ClusterConfig,
        store: Box<dyn Store<Persisted>>,
        token: String,
        migrations: Arc<dyn Migrations>,
    ) -> Result<Arc<Self>, StoreError> {
        Self::open_replica(config, store, token, migrations, Leadership::sole(), None)
    }

    /// One of several replicas sharing `store` (etcd): it acts — ticks, drains, migrates,
    /// takes writes — only while `leadership` says it leads, and follows the store otherwise.
    /// With `leases`, nodes are down when their lease in the store ends (not by the core's
    /// count of missed heartbeats).
    pub fn open_replica(
        mut config: ClusterConfig,
        mut store: Box<dyn Store<Persisted>>,
        token: String,
        migrations: Arc<dyn Migrations>,
        leadership: Arc<Leadership>,
        leases: Option<Arc<NodeLeases>>,
    ) -> Result<Arc<Self>, StoreError> {
        if leases.is_some() {
            config.liveness = Liveness::Leases;
        }
        let now = Instant::now();
        let cluster = match store.load()? {
            Some(p) => Cluster::restore(config.clone(), p, now, unix_ms()),
            None => Cluster::new(config.clone(), now),
        }
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let counter = cluster.routing_version();
        let version = store.revision().unwrap_or(counter);
        let (routing, _) = watch::channel(version);
        let mut inner = Inner {
            routing_table: cluster.routing(),
            cluster,
            config,
            store,
            dirty: false,
            routing_counter: counter,
            routing_version: version,
        };
        inner.routing_table = inner.table();
        Ok(Arc::new(Self {
            inner: Mutex::new(inner),
            token,
            routing,
            wake: Notify::new(),
            migrations,
            migration_spans: Mutex::default(),
            probes: Mutex::default(),
            redirects: Mutex::default(),
            leadership,
            node_tls: std::sync::OnceLock::new(),
            leases,
            turn: std::sync::OnceLock::new(),
            task_client: std::sync::OnceLock::new(),
            room_snapshots: std::sync::OnceLock::new(),
        }))
    }

    /// Sets the TLS settings (trusted roots) of this scheduler's calls to nodes that serve
    /// HTTPS; the first call wins. Without it, the public web roots are trusted.
    pub fn set_node_tls(&self, tls: ureq::tls::TlsConfig) {
        let _ = self.node_tls.set(tls);
    }

    /// Keeps the rooms' snapshots in `store`; the first call wins (before it, and without it,
    /// they are kept in memory).
    pub fn set_room_snapshots(&self, store: Arc<dyn crate::room_snapshots::RoomSnapshots>) {
        let _ = self.room_snapshots.set(store);
    }

    /// Where the rooms' snapshots are kept.
    pub fn room_snapshots(&self) -> Arc<dyn crate::room_snapshots::RoomSnapshots> {
        self.room_snapshots
            .get_or_init(|| Arc::new(crate::room_snapshots::MemorySnapshots::default()))
            .clone()
    }

    /// Hands out the relays of `fleet` (`POST /v1/turn/credentials`); the first call wins.
    pub fn set_turn(&self, fleet: crate::turn::TurnFleet) {
        let _ = self.turn.set(Mutex::new(fleet));
    }

    /// TURN relays and a credential for `req` (`None`: no relays are configured).
    pub fn turn_credentials(
        &self,
        req: &ferry_proto::api::TurnCredentialsRequest,
    ) -> Option<Result<ferry_proto::api::TurnCredentialsResponse, crate::turn::TurnError>> {
        let fleet = self.turn.get()?;
        let drains = self.turn_drain_ids();
        let mut fleet = fleet.lock().unwrap_or_else(PoisonError::into_inner);
        fleet.apply_drains(&drains);
        Some(fleet.credentials(unix_ms() / 1000, req))
    }

    /// The relays with a drain stored (running or ended): they take no new users.
    fn turn_drain_ids(&self) -> std::collections::BTreeSet<NodeId> {
        self.with(|c| {
            c.turn_drains()
                .keys()
                .filter_map(|k| NodeId::new(k.clone()).ok())
                .collect()
        })
    }

    /// The fleet, with the relays added or removed and the drains stored for the cluster.
    fn turn_fleet(&self) -> Option<MutexGuard<'_, crate::turn::TurnFleet>> {
        let fleet = self.turn.get()?;
        let drains = self.turn_drain_ids();
        let registry = self.with(|c| c.turn_registry().clone());
        let mut f = fleet.lock().unwrap_or_else(PoisonError::into_inner);
        f.apply_registry(&registry);
        f.apply_drains(&drains);
        Some(f)
    }

    /// Adds TURN relay `spec` (`turn:host:port[?transport=…][;zone=Z][;isp=I][;weight=W]`) to
    /// the fleet (scale-out): it ramps in, bounded loads sending it users as they ask.
    pub fn add_turn_relay(
        &self,
        spec: &str,
    ) -> Result<ferry_proto::api::TurnRelayView, TurnApiError> {
        if self.turn.get().is_none() {
            return Err(TurnApiError::NoFleet);
        }
        let parsed = ferry_proto::turn::TurnServerSpec::parse(spec)
            .map_err(|e| TurnApiError::BadRelay(e.to_string()))?;
        let id = crate::turn::TurnFleet::id_of(&parsed.uri);
        {
            let f = self.turn_fleet().ok_or(TurnApiError::NoFleet)?;
            if f.uri_of(&id).is_some() {
                return Err(TurnApiError::Exists(id.to_string()));
            }
            // What the fleet would refuse when applying it is refused now.
            f.can_add(&parsed)
                .map_err(|e| TurnApiError::BadRelay(e.to_string()))?;
        }
        self.mutate(|c| c.set_turn_relay(id.as_str(), Some(spec.trim().to_owned())));
        tracing::info!(relay = %parsed.uri, "TURN relay added");
        self.turn_relay_views()
            .and_then(|v| v.into_iter().find(|r| r.id == id.as_str()))
            .ok_or_else(|| TurnApiError::NotFound(id.to_string()))
    }

    /// Removes TURN relay `key` (id or URI) from the fleet (scale-in): only once it is drained
    /// or down, else its users would lose their relay.
    pub fn remove_turn_relay(&self, key: &str) -> Result<(), TurnApiError> {
        let id = self.turn_relay_id(key)?;
        let state = self
            .turn_relay_views()
            .and_then(|v| v.into_iter().find(|r| r.id == id.as_str()))
            .map(|r| r.state)
            .unwrap_or_default();
        if state != "drained" && state != "down" {
            return Err(TurnApiError::InService(id.to_string(), state));
        }
        self.mutate(|c| c.set_turn_relay(id.as_str(), None));
        tracing::info!(relay = %id, "TURN relay removed");
        drop(self.turn_fleet());
        Ok(())
    }

    /// `GET /v1/turn/relays` (`None`: no relays are configured).
    pub fn turn_relay_views(&self) -> Option<Vec<ferry_proto::api::TurnRelayView>> {
        let drains = self.with(|c| c.turn_drains().clone());
        let f = self.turn_fleet()?;
        Some(
            f.servers()
                .map(|(id, spec, load, _)| {
                    let drain = drains.get(id.as_str()).cloned();
                    let state = match &drain {
                        Some(d) if d.done_unix_ms.is_some() => "drained",
                        Some(_) => "draining",
                        None if !f.is_up(id) => "down",
                        None => "active",
                    };
                    ferry_proto::api::TurnRelayView {
                        id: id.to_string(),
                        uri: spec.uri.clone(),
                        zone: spec.zone.clone(),
                        isp: spec.isp.clone(),
                        weight: spec.weight,
                        state: state.into(),
                        allocations: load,
                        drain,
                    }
                })
                .collect(),
        )
    }

    /// The fleet's id of relay `key` (its id or its URI).
    fn turn_relay_id(&self, key: &str) -> Result<NodeId, TurnApiError> {
        let f = self.turn_fleet().ok_or(TurnApiError::NoFleet)?;
        f.uris()
            .into_iter()
            .find(|(id, uri)| id.as_str() == key || uri == key)
            .map(|(id, _)| id)
            .ok_or_else(|| TurnApiError::NotFound(key.to_owned()))
    }

    /// Starts draining TURN relay `key` (id or URI): no new users; nodes tell the clients on it
    /// to move; drained when it holds no allocations or after `deadline_s`.
    pub fn start_turn_drain(
        &self,
        key: &str,
        deadline_s: u64,
    ) -> Result<ferry_proto::api::TurnDrain, TurnApiError> {
        let id = self.turn_relay_id(key)?;
        let d = self.mutate(|c| c.start_turn_drain(id.as_str(), unix_ms(), deadline_s));
        tracing::info!(relay = %id, deadline_s, "TURN relay draining");
        drop(self.turn_fleet());
        Ok(d)
    }

    /// Ends TURN relay `key`'s drain: it takes users again. What the drain was.
    pub fn cancel_turn_drain(
        &self,
        key: &str,
    ) -> Result<ferry_proto::api::TurnDrain, TurnApiError> {
        let id = self.turn_relay_id(key)?;
        let d = self
            .mutate(|c| c.cancel_turn_drain(id.as_str()))
            .ok_or_else(|| TurnApiError::NoDrain(id.to_string()))?;
        tracing::info!(relay = %id, "TURN relay drain cancelled: back in the rotation");
        drop(self.turn_fleet());
        Ok(d)
    }

    /// The leader ends running TURN drains whose relay holds no allocations (`empty`) or whose
    /// deadline passed (`deadline`).
    pub fn check_turn_drains(&self) {
        if !self.is_leader() {
            return;
        }
        let now = unix_ms();
        let running: Vec<(String, u64)> = self.with(|c| {
            c.turn_drains()
                .iter()
                .filter(|(_, d)| d.done_unix_ms.is_none())
                .map(|(id, d)| (id.clone(), d.deadline_unix_ms))
                .collect()
        });
        if running.is_empty() {
            return;
        }
        let Some(f) = self.turn_fleet() else { return };
        let done: Vec<(String, &str)> = running
            .into_iter()
            .filter_map(|(id, deadline)| {
                let load = NodeId::new(id.clone()).map_or(0, |n| f.load(&n));
                if load == 0 {
                    Some((id, "empty"))
                } else if now >= deadline {
                    Some((id, "deadline"))
                } else {
                    None
                }
            })
            .collect();
        drop(f);
        for (id, reason) in done {
            if self.mutate(|c| c.finish_turn_drain(&id, now, reason)) {
                tracing::info!(relay = %id, reason, "TURN relay drained");
            }
        }
    }

    /// The URIs of the relays with a drain (nodes tell their clients on them to move).
    pub fn turn_draining_uris(&self) -> Vec<String> {
        self.turn_fleet()
            .map_or_else(Vec::new, |f| f.draining_uris())
    }

    /// The TURN relays' ids and URIs (none without a fleet).
    pub fn turn_relays(&self) -> Vec<(NodeId, String)> {
        self.turn_fleet().map_or_else(Vec::new, |f| f.uris())
    }

    /// Records a TURN relay's health probe outcome; whether its state changed.
    pub fn set_turn_relay_up(&self, id: &NodeId, up: bool) -> bool {
        self.turn.get().is_some_and(|f| {
            f.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set_up(id, up)
        })
    }

    /// Whether this replica leads (takes writes, runs drains and migrations).
    pub fn is_leader(&self) -> bool {
        self.leadership.is_leader()
    }

    /// The leading replica's base URL, if known.
    pub fn leader_url(&self) -> Option<String> {
        self.leadership.leader_url()
    }

    /// Replaces the in-memory cluster with the stored one (a follower's copy, or a new
    /// leader's start) and wakes routing watchers.
    fn reload(&self) -> Result<(), StoreError> {
        let version = {
            let mut inner = self.lock();
            let Some(p) = inner.store.load()? else {
                return Ok(());
            };
            let c = Cluster::restore(inner.config.clone(), p, Instant::now(), unix_ms())
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            inner.cluster = c;
            inner.dirty = false;
            inner.stored()
        };
        self.publish(version);
        Ok(())
    }

    /// Publishes routing version `version` to watchers (when it is new).
    fn publish(&self, version: Option<u64>) {
        let Some(version) = version else { return };
        self.routing.send_if_modified(|v| {
            let changed = *v != version;
            *v = version;
            changed
        });
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The API token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Reads the cluster.
    pub fn with<R>(&self, f: impl FnOnce(&Cluster) -> R) -> R {
        f(&self.lock().cluster)
    }

    /// Changes the cluster; marks it for saving and publishes a new routing version to
    /// watchers — at once with the embedded store, once it is stored with a store that versions
    /// its writes (etcd: a table a deposed leader could not store is never seen).
    pub fn mutate<R>(&self, f: impl FnOnce(&mut Cluster) -> R) -> R {
        let (r, version, unsaved) = {
            let mut inner = self.lock();
            let r = f(&mut inner.cluster);
            inner.dirty = true;
            let counter = inner.cluster.routing_version();
            if inner.store.revision().is_none() {
                let changed = counter != inner.routing_counter;
                if changed {
                    inner.routing_counter = counter;
                    inner.routing_version = counter;
                    inner.routing_table = inner.table();
                }
                (r, changed.then_some(counter), false)
            } else {
                (r, None, counter != inner.routing_counter)
            }
        };
        self.publish(version);
        if unsaved {
            // The tick loop saves it (and then publishes it) now.
            self.wake();
        }
        r
    }

    /// The routing table under the published version: the live one, unless it holds changes
    /// not stored yet in a store that versions its writes (then the one last published).
    pub fn routing_table(&self) -> ferry_proto::api::RoutingTable {
        let inner = self.lock();
        if inner.dirty && inner.store.revision().is_some() {
            inner.routing_table.clone()
        } else {
            inner.table()
        }
    }

    /// A node's heartbeat: recorded by the core, and its lease renewed. The node's state.
    pub fn heartbeat(
        &self,
        id: &NodeId,
        hb: ferry_proto::api::Heartbeat,
    ) -> Result<Option<NodeState>, crate::cluster::ClusterError> {
        let state = self.mutate(|c| {
            c.heartbeat(Instant::now(), id, hb)?;
            Ok::<_, crate::cluster::ClusterError>(c.node_state(id))
        })?;
        if let Some(l) = &self.leases {
            l.send(LeaseCommand::Renew(id.clone()));
        }
        Ok(state)
    }

    /// A client could not reach node `id`: probe its health check and, when it does not
    /// answer either, declare it down at once (its sessions are re-placed by their clients).
    /// Probes of one node are shared for [`PROBE_REUSE`].
    pub async fn check_reported_node(&self, id: &NodeId) {
        let Some((http, true)) = self.with(|c| c.node_http(id)) else {
            return;
        };
        let recent = {
            let probes = self.probes.lock().unwrap_or_else(PoisonError::into_inner);
            probes
                .get(id)
                .filter(|(at, _)| at.elapsed() < PROBE_REUSE)
                .map(|(_, alive)| *alive)
        };
        let alive = match recent {
            Some(alive) => alive,
            None => {
                let url = format!("{}/healthz", http.trim_end_matches('/'));
                let tls = self.node_tls.get().cloned().unwrap_or_default();
                let alive = tokio::task::spawn_blocking(move || {
                    ureq::get(&url)
                        .config()
                        .tls_config(tls)
                        .timeout_global(Some(PROBE_TIMEOUT))
                        .build()
                        .call()
                        .is_ok()
                })
                .await
                .unwrap_or(false);
                self.probes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(id.clone(), (Instant::now(), alive));
                alive
            }
        };
        if !alive && self.mutate(|c| c.node_unreachable(id)) {
            tracing::warn!(node = %id, "a client reported the node unreachable and it does not answer: down");
            self.wake();
        }
    }

    /// Where a request with idempotency key `key` was sent, if recently.
    pub fn remembered_redirect(&self, key: &str) -> Option<String> {
        let map = self
            .redirects
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(key)
            .filter(|(_, at)| at.elapsed() < REDIRECT_TTL)
            .map(|(url, _)| url.clone())
    }

    /// Remembers where a request with idempotency key `key` was sent.
    pub fn remember_redirect(&self, key: String, base: String) {
        let mut map = self
            .redirects
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_REDIRECTS {
            map.retain(|_, (_, at)| at.elapsed() < REDIRECT_TTL);
            if map.len() >= MAX_REDIRECTS {
                map.clear();
            }
        }
        map.insert(key, (base, Instant::now()));
    }

    /// A receiver of routing-table versions.
    pub fn routing_watch(&self) -> watch::Receiver<u64> {
        self.routing.subscribe()
    }

    /// Asks the tick loop to run now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Saves now if anything changed (only the leader writes).
    pub fn flush(&self) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if !self.leadership.is_leader() {
            // A follower's changes are its own view; the leader's state replaces them.
            inner.dirty = false;
            return Ok(());
        }
        if inner.dirty {
            let p = inner.cluster.persisted(Instant::now(), unix_ms());
            inner.store.save(&p)?;
            inner.dirty = false;
            let version = inner.stored();
            drop(inner);
            self.publish(version);
        }
        Ok(())
    }

    /// Hands a planned migration to its source node through the migrator; the cluster then
    /// follows it ([`Cluster::migration_ordered`], [`Action::AskMigration`]).
    ///
    /// The migration fails at once, with the reason recorded, when it has no target, when
    /// its source node is unknown, or when the source refuses it; it also fails when the
    /// source gives no status for [`STATUS_SILENCE`], so a vanished node cannot hold a drain
    /// forever.
    pub fn start_migration(self: &Arc<Self>, m: MigrationView) {
        let s = self.clone();
        // Its span, until it ends: a child of the API call that created it, if any; its
        // context goes with the order to the source node.
        let span = crate::trace::migration_span(&m);
        self.lock_spans().insert(m.id.clone(), span.clone());
        let task = async move {
            let fail = |reason: String| {
                s.mutate(|c| c.migration_refused(&m.id, reason));
                s.wake();
            };
            if m.target.is_none() {
                return fail("no active node other than the source can take the session".into());
            }
            let source_http = match s.with(|c| c.node(Instant::now(), &m.source)) {
                Ok(n) => n.http,
                Err(_) => {
                    return fail(format!(
                        "source node {} is unknown to the scheduler",
                        m.source
                    ));
                }
            };
            if let Err(refused) = s.migrations.start(m.clone(), source_http).await {
                return fail(refused.to_string());
            }
            s.mutate(|c| c.migration_ordered(Instant::now(), &m.id));
            s.wake();
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
    }

    fn lock_spans(&self) -> std::sync::MutexGuard<'_, HashMap<MigrationId, tracing::Span>> {
        self.migration_spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the source of migration `id` how it goes, for the cluster.
    fn ask_migration(self: &Arc<Self>, id: MigrationId, source_http: String) {
        let s = self.clone();
        let span = self
            .lock_spans()
            .get(&id)
            .cloned()
            .unwrap_or_else(tracing::Span::none);
        let task = async move {
            let status = s.migrations.status(id.clone(), source_http).await;
            s.mutate(|c| c.migration_status(Instant::now(), &id, status));
            s.wake();
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
    }

    /// A migration the cluster followed ended: its span records how, and closes.
    fn migration_ended(&self, m: &MigrationView) {
        if let Some(span) = self.lock_spans().remove(&m.id) {
            span.in_scope(|| crate::trace::record_end(m));
        }
    }

    /// Runs liveness, weights, drains and persistence until the process ends. A follower
    /// (etcd) only reloads the leader's state as it changes; a replica that becomes leader
    /// reloads it once more and picks up the migrations in flight.
    pub async fn run(self: Arc<Self>) {
        let mut leading = self.leadership.is_leader();
        loop {
            if !self.leadership.is_leader() {
                leading = false;
                if let Err(e) = self.reload() {
                    tracing::warn!(error = %e, "reloading the scheduler state");
                }
                tokio::select! {
                    () = self.leadership.changed.notified() => {}
                    () = self.leadership.state_changed.notified() => {}
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
            if !leading {
                leading = true;
                if let Err(e) = self.reload() {
                    tracing::error!(error = %e, "loading the state as the new leader");
                }
                if let Some(l) = &self.leases {
                    l.send(LeaseCommand::Adopt(self.with(Cluster::nodes_up)));
                }
                let in_flight = self.with(Cluster::migrations_in_flight);
                tracing::info!(
                    migrations = in_flight.len(),
                    "leading: following the migrations in flight"
                );
                for m in in_flight {
                    self.start_migration(m);
                }
            }
            let now = Instant::now();
            let actions = self.mutate(|c| c.tick(now));
            // Recorded before the orders go out: a leader that dies right after leaves its
            // successor the migrations it ordered (which it then follows).
            let saved = self.flush();
            if let Err(e) = &saved {
                tracing::error!(error = %e, "saving scheduler state");
            }
            if matches!(saved, Err(StoreError::Fenced(_))) {
                // Deposed: the orders are the new leader's to give.
                continue;
            }
            for a in actions {
                match a {
                    Action::StartMigration(m) => self.start_migration(m),
                    Action::AskMigration { id, source_http } => self.ask_migration(id, source_http),
                    Action::MigrationEnded(m) => self.migration_ended(&m),
                    Action::Recording(o) => self.carry_out_recording(o),
                    Action::Transcode(o) => self.carry_out_transcode(o),
                }
            }
            let next = self.with(|c| c.poll_timeout(Instant::now()));
            let expired = async {
                match &self.leases {
                    Some(l) => l.next_expired().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                () = self.wake.notified() => {}
                () = self.leadership.changed.notified() => {}
                id = expired => {
                    self.mutate(|c| c.lease_expired(&id));
                }
            }
        }
    }

    /// Prometheus text.
    pub fn metrics_text(&self) -> String {
        let inner = self.lock();
        let c = &inner.cluster;
        let m = c.metrics();
        let mut s = String::new();
        for (name, help, v) in [
            ("heartbeats_total", "Heartbeats accepted.", m.heartbeats),
            ("placements_total", "Placements answered.", m.placements),
            (
                "placements_failed_total",
                "Placements refused: no eligible node.",
                m.placements_failed,
            ),
            (
                "nodes_down_total",
                "Nodes declared down (missed heartbeats, an expired etcd lease, or a client report and a failed probe).",
                m.nodes_down,
            ),
            (
                "migrations_created_total",
                "Migrations created.",
                m.migrations_created,
            ),
            ("drains_started_total", "Drains started.", m.drains_started),
            (
                "tickets_consumed_total",
                "Session ticket generations used (sessions resumed).",
                m.tickets_consumed,
            ),
            (
                "tickets_replayed_total",
                "Session tickets refused as replays.",
                m.tickets_replayed,
            ),
            (
                "nodes_reported_down_total",
                "Nodes a client reported unreachable that did not answer the scheduler's probe.",
                m.nodes_reported_down,
            ),
        ] {
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            let _ = writeln!(
                s,
                "# HELP ferry_scheduler_{name} {help}\n# TYPE ferry_scheduler_{name} {kind}\nferry_scheduler_{name} {v}"
            );
        }
        s.push_str(&c.recording_metrics());
        let nodes = c.nodes(Instant::now());
        let _ = writeln!(
            s,
            "# HELP ferry_scheduler_nodes Nodes by state.\n# TYPE ferry_scheduler_nodes gauge"
        );
        for st in [
            NodeState::Active,
            NodeState::Draining,
            NodeState::Drained,
            NodeState::Down,
        ] {
            let n = nodes.iter().filter(|v| v.state == st).count();
            let label = serde_json::to_string(&st).unwrap_or_default();
            let _ = writeln!(s, "ferry_scheduler_nodes{{state={label}}} {n}");
        }
        let _ = writeln!(
            s,
            "# HELP ferry_scheduler_sessions Sessions in the cluster.\n# TYPE ferry_scheduler_sessions gauge\nferry_scheduler_sessions {}",
            c.sessions().len()
        );
        let _ = writeln!(
            s,
            "# HELP ferry_scheduler_hot_streams Streams whose viewers spill beyond their origin node (--hot-stream-viewers).\n# TYPE ferry_scheduler_hot_streams gauge\nferry_scheduler_hot_streams {}",
            c.streams().iter().filter(|v| v.hot).count()
        );
        let _ = writeln!(
            s,
            "# HELP ferry_scheduler_placement_skew Largest ratio of an active node's sessions to its weighted share of the active nodes' sessions (1 = every node carries its share, 0 = no sessions).\n# TYPE ferry_scheduler_placement_skew gauge\nferry_scheduler_placement_skew {}",
            c.placement_skew()
        );
        let _ = writeln!(
            s,
            "# HELP ferry_scheduler_routing_version Routing-table version published (with etcd: the revision that stored it).\n# TYPE ferry_scheduler_routing_version gauge\nferry_scheduler_routing_version {}",
            inner.routing_version
        );
        if let Some(fleet) = self.turn.get() {
            let f = fleet.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = writeln!(
                s,
                "# HELP ferry_turn_credentials_issued_total TURN credentials handed out.\n# TYPE ferry_turn_credentials_issued_total counter\nferry_turn_credentials_issued_total {}",
                f.issued
            );
            let _ = writeln!(
                s,
                "# HELP ferry_turn_credentials_live Live TURN credentials this replica handed out, per relay they name as primary (what placement balances; not the relay's own allocation count).\n# TYPE ferry_turn_credentials_live gauge"
            );
            for (id, _, load, _) in f.servers() {
                let _ = writeln!(s, "ferry_turn_credentials_live{{relay=\"{id}\"}} {load}");
            }
            let _ = writeln!(
                s,
                "# HELP ferry_turn_relay_draining Whether the relay takes no new users.\n# TYPE ferry_turn_relay_draining gauge"
            );
            for (id, _, _, draining) in f.servers() {
                let _ = writeln!(
                    s,
                    "ferry_turn_relay_draining{{relay=\"{id}\"}} {}",
                    u8::from(draining)
                );
            }
            let _ = writeln!(
                s,
                "# HELP ferry_turn_reallocations_total Users whose primary relay changed: relay-left (it drains, is down or was removed: the theoretical minimum of a scale event) or rebalanced (their relay stayed).\n# TYPE ferry_turn_reallocations_total counter\nferry_turn_reallocations_total{{reason=\"relay-left\"}} {}\nferry_turn_reallocations_total{{reason=\"rebalanced\"}} {}",
                f.reallocations_needed, f.reallocations_rebalanced
            );
            let _ = writeln!(
                s,
                "# HELP ferry_turn_load_cv Coefficient of variation of the weight-normalised users per relay in service (goal < 0.15).\n# TYPE ferry_turn_load_cv gauge\nferry_turn_load_cv {:.4}",
                f.load_cv()
            );
            let now = unix_ms();
            let _ = writeln!(
                s,
                "# HELP ferry_turn_drain_seconds How long the relay's drain ran (still running: so far).\n# TYPE ferry_turn_drain_seconds gauge"
            );
            for (id, d) in c.turn_drains() {
                let end = d.done_unix_ms.unwrap_or(now);
                let _ = writeln!(
                    s,
                    "ferry_turn_drain_seconds{{relay=\"{id}\"}} {:.3}",
                    end.saturating_sub(d.since_unix_ms) as f64 / 1000.0
                );
            }
            let _ = writeln!(
                s,
                "# HELP ferry_turn_relay_up Whether the relay answers its STUN health probes.\n# TYPE ferry_turn_relay_up gauge"
            );
            for (id, _, _, _) in f.servers() {
                let _ = writeln!(
                    s,
                    "ferry_turn_relay_up{{relay=\"{id}\"}} {}",
                    u8::from(f.is_up(id))
                );
            }
        }
        s
    }
}
