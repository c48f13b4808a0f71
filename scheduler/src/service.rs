//! The scheduler process around the pure [`Cluster`] core: shared state
//! for the HTTP handlers, the tick loop (liveness, weights, drains),
//! persistence through a [`Store`], and migrations carried out through the
//! [`Migrations`] seam.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ferry_proto::NodeId;
use ferry_proto::api::{MigrationState, MigrationView, NodeState};
use tokio::sync::{Notify, watch};

use crate::cluster::{Action, Cluster, ClusterConfig, Persisted};
use crate::drain::Migrations;
use crate::store::{Store, StoreError};

/// Milliseconds since the Unix epoch (the service is the driver: it may
/// read the clock).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How long a running migration may go without a status from its source
/// node before the scheduler records it as failed.
pub const STATUS_SILENCE: Duration = Duration::from_secs(10);

struct Inner {
    cluster: Cluster,
    store: Box<dyn Store<Persisted>>,
    dirty: bool,
}

/// A running scheduler.
pub struct Scheduler {
    inner: Mutex<Inner>,
    token: String,
    routing: watch::Sender<u64>,
    wake: Notify,
    migrations: Arc<dyn Migrations>,
    /// Recent probes of nodes clients reported unreachable: node → (when, alive).
    probes: Mutex<HashMap<NodeId, (Instant, bool)>>,
    /// Where recent WHIP/WHEP requests were sent, by idempotency key.
    redirects: Mutex<HashMap<String, (String, Instant)>>,
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
    /// Opens the store and restores what it holds.
    pub fn open(
        config: ClusterConfig,
        mut store: Box<dyn Store<Persisted>>,
        token: String,
        migrations: Arc<dyn Migrations>,
    ) -> Result<Arc<Self>, StoreError> {
        let now = Instant::now();
        let cluster = match store.load()? {
            Some(p) => Cluster::restore(config, p, now, unix_ms()),
            None => Cluster::new(config, now).map_err(|e| e.to_string()),
        }
        .map_err(StoreError::Invalid)?;
        let (routing, _) = watch::channel(cluster.routing_version());
        Ok(Arc::new(Self {
            inner: Mutex::new(Inner {
                cluster,
                store,
                dirty: false,
            }),
            token,
            routing,
            wake: Notify::new(),
            migrations,
            probes: Mutex::default(),
            redirects: Mutex::default(),
        }))
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

    /// Changes the cluster; marks it for saving and publishes a new
    /// routing version to watchers.
    pub fn mutate<R>(&self, f: impl FnOnce(&mut Cluster) -> R) -> R {
        let (r, version) = {
            let mut inner = self.lock();
            let r = f(&mut inner.cluster);
            inner.dirty = true;
            (r, inner.cluster.routing_version())
        };
        self.routing.send_if_modified(|v| {
            let changed = *v != version;
            *v = version;
            changed
        });
        r
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
                let alive = tokio::task::spawn_blocking(move || {
                    ureq::get(&url)
                        .config()
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

    /// Saves now if anything changed.
    pub fn flush(&self) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.dirty {
            let p = inner.cluster.persisted(Instant::now(), unix_ms());
            inner.store.save(&p)?;
            inner.dirty = false;
        }
        Ok(())
    }

    /// Hands a planned migration to its source node through the migrator
    /// and follows it until it ends, recording every state it reports.
    ///
    /// The migration fails at once, with the reason recorded, when it has no
    /// target, when its source node is unknown, or when the source refuses
    /// it; it also fails when the source gives no status for
    /// [`STATUS_SILENCE`], so a vanished node cannot hold a drain forever.
    pub fn start_migration(self: &Arc<Self>, m: MigrationView) {
        let s = self.clone();
        tokio::spawn(async move {
            let fail = |reason: String| {
                let mut failed = m.clone();
                failed.state = MigrationState::Failed;
                failed.error = Some(reason);
                s.mutate(|c| c.update_migration(failed));
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
            if let Err(reason) = s.migrations.start(m.clone(), source_http.clone()).await {
                return fail(reason);
            }
            let mut last_heard = Instant::now();
            // Most migrations end within tens of milliseconds: poll soon, then
            // back off to every 100 ms.
            let mut wait = Duration::from_millis(10);
            loop {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(100));
                let Some(view) = s.migrations.status(m.id.clone(), source_http.clone()).await
                else {
                    if last_heard.elapsed() >= STATUS_SILENCE {
                        return fail(format!(
                            "source node {} gave no status for {} s",
                            m.source,
                            STATUS_SILENCE.as_secs()
                        ));
                    }
                    continue;
                };
                last_heard = Instant::now();
                // What the node may change: progress, never identity.
                let mut next = m.clone();
                next.state = view.state;
                next.phases_ms = view.phases_ms;
                next.blackout_ms = view.blackout_ms;
                next.bytes = view.bytes;
                next.error = view.error;
                let done = !matches!(
                    next.state,
                    MigrationState::Planned | MigrationState::Running
                );
                s.mutate(|c| c.update_migration(next));
                if done {
                    s.wake();
                    return;
                }
            }
        });
    }

    /// Runs liveness, weights, drains and persistence until the process ends.
    pub async fn run(self: Arc<Self>) {
        loop {
            let now = Instant::now();
            let actions = self.mutate(|c| c.tick(now));
            for a in actions {
                match a {
                    Action::StartMigration(m) => self.start_migration(m),
                }
            }
            if let Err(e) = self.flush() {
                tracing::error!(error = %e, "saving scheduler state");
            }
            let next = self.with(|c| c.poll_timeout(Instant::now()));
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                () = self.wake.notified() => {}
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
                "Nodes declared down after missed heartbeats.",
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
            "# HELP ferry_scheduler_routing_version Routing-table version.\n# TYPE ferry_scheduler_routing_version gauge\nferry_scheduler_routing_version {}",
            c.routing_version()
        );
        s
    }
}
