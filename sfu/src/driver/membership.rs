//! A node's place in a cluster (driver side): the shared secrets, the
//! migration engine's bookkeeping for the HTTP API and Prometheus, and the
//! directory of peers and stream origins learnt from the scheduler.
//!
//! Secrets live in one directory (`ferry dev` creates it): `cluster.key`
//! (32 random bytes, hex: authenticates relays and edge tunnels) and the
//! cluster CA (`ca.pem`, `ca-key.pem`) from which each node issues its own
//! migration (QUIC, mutual TLS) certificate at start.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_migrator::transport::{ClusterCa, NodeIdentity};
use ferry_migrator::{MigrationEvent, MigrationReport, Outcome, Phase};
use ferry_proto::api::{MigrationState, MigrationView, RoutingTable, SessionKind};
use ferry_proto::{MigrationId, NodeId, SessionId, StreamId};

use crate::cluster::relay::ClusterKey;
use crate::node::metrics::Histogram;

use opentelemetry::trace::Status;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use ferry_proto::trace::{parse_trace_parent, trace_parent};

/// A session event for its server-sent event stream: the event's name and its JSON data.
pub type SessionEvent = (&'static str, String);

/// Why the cluster secrets could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// File system.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// `cluster.key` is not 64 hex digits.
    #[error("{0}: not 64 hex digits")]
    BadKey(String),
    /// The CA or a certificate.
    #[error("cluster CA: {0}")]
    Tls(#[from] ferry_migrator::transport::tls::TlsError),
}

/// The cluster's shared secrets.
#[derive(Debug)]
pub struct ClusterSecrets {
    /// Relay and tunnel key material.
    pub key: [u8; 32],
    /// The CA migration certificates are issued from.
    pub ca: ClusterCa,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SecretsError + '_ {
    move |source| SecretsError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl ClusterSecrets {
    /// Reads the secrets in `dir`, creating any that are missing. Processes
    /// starting together agree: whoever creates a file first wins, the
    /// others read it.
    pub fn load_or_create(dir: &Path) -> Result<Self, SecretsError> {
        let mut tries = 0;
        loop {
            match Self::try_load_or_create(dir) {
                Err(SecretsError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists && tries < 5 =>
                {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                // A file half written by another process reads as garbage
                // for a moment.
                Err(SecretsError::BadKey(_) | SecretsError::Tls(_)) if tries < 5 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                r => return r,
            }
        }
    }

    fn try_load_or_create(dir: &Path) -> Result<Self, SecretsError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let key_path = dir.join("cluster.key");
        let key = match std::fs::read_to_string(&key_path) {
            Ok(text) => {
                let bytes = hex::decode(text.trim())
                    .map_err(|_| SecretsError::BadKey(key_path.display().to_string()))?;
                <[u8; 32]>::try_from(bytes.as_slice())
                    .map_err(|_| SecretsError::BadKey(key_path.display().to_string()))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key: [u8; 32] = rand::random();
                write_private(&key_path, &hex::encode(key))?;
                key
            }
            Err(e) => return Err(io_err(&key_path)(e)),
        };
        let (cert, priv_key) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
        let ca = match (
            std::fs::read_to_string(&cert),
            std::fs::read_to_string(&priv_key),
        ) {
            (Ok(c), Ok(k)) => ClusterCa::from_pem(&c, &k)?,
            _ => {
                let ca = ClusterCa::generate()?;
                write_private(&priv_key, &ca.key_pem())?;
                std::fs::write(&cert, ca.cert_pem()).map_err(io_err(&cert))?;
                ca
            }
        };
        Ok(Self { key, ca })
    }

    /// The relay/tunnel key.
    pub fn cluster_key(&self) -> ClusterKey {
        ClusterKey::new(&self.key)
    }

    /// A migration identity for `node`.
    pub fn identity(&self, node: &NodeId) -> Result<NodeIdentity, SecretsError> {
        Ok(self.ca.issue(node)?)
    }
}

fn write_private(path: &Path, text: &str) -> Result<(), SecretsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(text.as_bytes()).map_err(io_err(path))
}

/// What a node needs to take part in a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Relay/tunnel key material.
    pub key: [u8; 32],
    /// Migration certificate of this node.
    pub identity: Arc<NodeIdentity>,
    /// Where the migration transport (QUIC) listens.
    pub migration_listen: SocketAddr,
    /// The edge clients reach this node through (`None`: directly).
    pub edge: Option<SocketAddr>,
    /// Bearer token for the node's migration API (the cluster's API token).
    pub token: String,
    /// How often the directory is refreshed from the scheduler.
    pub directory_interval: Duration,
}

/// Why a migration request to this node failed (the HTTP status goes with it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct MigrationApiError {
    /// HTTP status.
    pub status: u16,
    /// Why.
    pub reason: String,
}

impl MigrationApiError {
    pub(crate) fn new(status: u16, reason: impl Into<String>) -> Self {
        Self {
            status,
            reason: reason.into(),
        }
    }
}

/// Migrations this node took part in, as the API shows them, and their
/// Prometheus series.
#[derive(Debug, Default)]
pub struct MigrationBook {
    views: HashMap<MigrationId, MigrationView>,
    order: std::collections::VecDeque<MigrationId>,
    /// Finished migrations by (role, outcome).
    outcomes: BTreeMap<(&'static str, &'static str), u64>,
    /// Each phase's duration, seconds.
    phases: BTreeMap<&'static str, Histogram>,
    /// Blackouts of committed migrations (seconds), and the largest.
    blackout: Histogram,
    blackout_max: f64,
    snapshot_bytes: u64,
    wal_bytes: u64,
    wal_records: u64,
    /// Spans of running migrations (one trace per migration).
    spans: HashMap<MigrationId, tracing::Span>,
}

/// Views kept for `GET /v1/migrations/{id}`.
const BOOK_CAPACITY: usize = 10_000;

fn role_name(r: ferry_migrator::Role) -> &'static str {
    match r {
        ferry_migrator::Role::Source => "source",
        ferry_migrator::Role::Target => "target",
    }
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Committed => "committed",
        Outcome::Unconfirmed => "unconfirmed",
        Outcome::RolledBack => "rolled_back",
        Outcome::Refused => "refused",
        Outcome::Lost => "lost",
    }
}

impl MigrationBook {
    /// The view of migration `id`.
    pub fn get(&self, id: &MigrationId) -> Option<&MigrationView> {
        self.views.get(id)
    }

    /// Whether `session` is in a running migration.
    pub fn running_for(&self, session: &SessionId) -> Option<&MigrationId> {
        self.views
            .values()
            .find(|v| &v.session == session && v.state == MigrationState::Running)
            .map(|v| &v.id)
    }

    /// Whether migration `id` has a span here.
    pub fn is_traced(&self, id: &MigrationId) -> bool {
        self.spans.contains_key(id)
    }

    /// Opens the span that traces migration `view` on its source (before
    /// the migrator sends `Prepare`), a child of `parent` (the `traceparent`
    /// of the scheduler's span that ordered it, empty if none); returns its
    /// own `traceparent` for the target. A span already open for the ID is
    /// kept.
    pub fn trace_source(
        &mut self,
        view: &MigrationView,
        source: &NodeId,
        target: &NodeId,
        parent: &str,
    ) -> String {
        let span = self.spans.entry(view.id.clone()).or_insert_with(|| {
            let span = tracing::info_span!(
                "migration",
                otel.name = "migration.source",
                migration.id = %view.id,
                session.id = %view.session,
                migration.source = %source,
                migration.target = %target,
                migration.mode = ?view.mode,
            );
            ferry_proto::trace::set_parent(&span, parent);
            span
        });
        trace_parent(span)
    }

    /// Drops the span of a migration that did not start.
    pub fn untrace(&mut self, id: &MigrationId) {
        self.spans.remove(id);
    }

    /// Records a migration this node started (source side).
    pub fn started(&mut self, mut view: MigrationView, source: &NodeId, target: &NodeId) {
        view.state = MigrationState::Running;
        self.trace_source(&view, source, target, "");
        if let Some(span) = self.spans.get(&view.id) {
            span.in_scope(|| tracing::info!("migration started"));
        }
        self.insert(view);
    }

    /// Opens the target's span, a child of the source's when its trace
    /// context came along.
    fn trace_target(
        &mut self,
        me: &NodeId,
        id: MigrationId,
        session: &SessionId,
        source: &NodeId,
        mode: ferry_proto::api::CutoverMode,
        parent: &str,
    ) {
        let span = tracing::info_span!(
            "migration",
            otel.name = "migration.target",
            migration.id = %id,
            session.id = %session,
            migration.source = %source,
            migration.target = %me,
            migration.mode = ?mode,
        );
        // Only fails without an OpenTelemetry layer (nothing is exported then) or for a
        // malformed context, which leaves the span a root.
        ferry_proto::trace::set_parent(&span, parent);
        span.in_scope(|| tracing::info!("migration accepted"));
        self.spans.insert(id, span);
    }

    fn insert(&mut self, view: MigrationView) {
        if !self.views.contains_key(&view.id) {
            self.order.push_back(view.id.clone());
        }
        self.views.insert(view.id.clone(), view);
        while self.order.len() > BOOK_CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.views.remove(&old);
            }
        }
    }

    /// Folds in what the migrator reported.
    pub fn event(&mut self, me: &NodeId, e: MigrationEvent) {
        match e {
            MigrationEvent::Phase { id, role, phase } => {
                if let Some(span) = self.spans.get(&id) {
                    span.in_scope(|| {
                        tracing::info!(
                            role = role_name(role),
                            phase = phase.name(),
                            "migration phase"
                        )
                    });
                } else {
                    tracing::info!(migration.id = %id, role = role_name(role), phase = phase.name(), "migration phase");
                }
            }
            MigrationEvent::Accepted {
                id,
                session,
                source,
                mode,
                trace_parent,
            } => self.trace_target(me, id, &session, &source, mode, &trace_parent),
            MigrationEvent::Finished(r) => self.finished(me, *r),
        }
    }

    fn finished(&mut self, me: &NodeId, r: MigrationReport) {
        let role = role_name(r.role);
        let outcome = outcome_name(r.outcome);
        *self.outcomes.entry((role, outcome)).or_default() += 1;
        for (phase, d) in [
            (Phase::Prepare, r.phases.prepare),
            (Phase::Snapshot, r.phases.snapshot),
            (Phase::Wal, r.phases.wal),
            (Phase::Cutover, r.phases.cutover),
            (Phase::Commit, r.phases.commit),
        ] {
            if let Some(d) = d {
                self.phases
                    .entry(phase.name())
                    .or_default()
                    .observe(d.as_secs_f64());
            }
        }
        if r.role == ferry_migrator::Role::Source {
            self.snapshot_bytes += r.snapshot_bytes;
            self.wal_bytes += r.wal_bytes;
            self.wal_records += r.wal_records;
            if let Some(b) = r.blackout {
                let s = b.as_secs_f64();
                self.blackout.observe(s);
                self.blackout_max = self.blackout_max.max(s);
            }
        }
        let span = self.spans.remove(&r.id);
        let log = || {
            tracing::info!(
                role,
                outcome,
                reason = r.reason.as_deref().unwrap_or(""),
                epoch = r.epoch,
                blackout_ms = r.blackout.map_or(-1.0, |b| b.as_secs_f64() * 1e3),
                snapshot_bytes = r.snapshot_bytes,
                wal_bytes = r.wal_bytes,
                "migration finished"
            )
        };
        match &span {
            Some(s) => {
                s.in_scope(log);
                s.set_attribute("migration.outcome", outcome);
                s.set_attribute("migration.epoch", r.epoch as i64);
                if let Some(b) = r.blackout {
                    s.set_attribute("migration.blackout_ms", b.as_secs_f64() * 1e3);
                }
                match r.outcome {
                    Outcome::Committed => s.set_status(Status::Ok),
                    _ => s.set_status(Status::error(
                        r.reason.clone().unwrap_or_else(|| outcome.to_owned()),
                    )),
                }
            }
            None => log(),
        }
        let (source, target) = match r.role {
            ferry_migrator::Role::Source => (me.clone(), Some(r.peer.clone())),
            ferry_migrator::Role::Target => (r.peer.clone(), Some(me.clone())),
        };
        let mut view = self.views.remove(&r.id).unwrap_or(MigrationView {
            id: r.id.clone(),
            session: r.session.clone(),
            source,
            target,
            mode: Default::default(),
            state: MigrationState::Running,
            phases_ms: BTreeMap::new(),
            blackout_ms: None,
            bytes: 0,
            error: None,
        });
        view.state = match r.outcome {
            Outcome::Refused | Outcome::Lost => MigrationState::Failed,
            o => o.state(),
        };
        view.phases_ms = r.phases.to_ms();
        view.blackout_ms = r.blackout.map(|b| b.as_secs_f64() * 1e3);
        view.bytes = r.snapshot_bytes + r.wal_bytes;
        view.error = r.reason.clone();
        self.insert(view);
    }

    /// Prometheus text of the migration series.
    pub fn to_prometheus(&self) -> String {
        let mut s = String::new();
        s.push_str("# HELP ferry_migrations_total Migrations finished on this node, by role and outcome.\n# TYPE ferry_migrations_total counter\n");
        for ((role, outcome), n) in &self.outcomes {
            s.push_str(&format!(
                "ferry_migrations_total{{role=\"{role}\",outcome=\"{outcome}\"}} {n}\n"
            ));
        }
        s.push_str("# HELP ferry_migration_phase_seconds Time spent in each migration phase.\n# TYPE ferry_migration_phase_seconds histogram\n");
        for (phase, h) in &self.phases {
            h.write(
                &mut s,
                "ferry_migration_phase_seconds",
                &format!("phase=\"{phase}\""),
            );
        }
        s.push_str("# HELP ferry_migration_blackout_seconds Media blackout of committed migrations (source side).\n# TYPE ferry_migration_blackout_seconds histogram\n");
        self.blackout
            .write(&mut s, "ferry_migration_blackout_seconds", "");
        s.push_str(&format!(
            "# HELP ferry_migration_blackout_max_seconds Largest blackout so far.\n# TYPE ferry_migration_blackout_max_seconds gauge\nferry_migration_blackout_max_seconds {}\n",
            self.blackout_max
        ));
        s.push_str(&format!(
            "# HELP ferry_migration_bytes_total State moved by migrations from this node.\n# TYPE ferry_migration_bytes_total counter\nferry_migration_bytes_total{{kind=\"snapshot\"}} {}\nferry_migration_bytes_total{{kind=\"wal\"}} {}\n# HELP ferry_migration_wal_records_total WAL records shipped.\n# TYPE ferry_migration_wal_records_total counter\nferry_migration_wal_records_total {}\n",
            self.snapshot_bytes, self.wal_bytes, self.wal_records
        ));
        s
    }
}

/// Peers and stream origins as the scheduler's routing table shows them.
#[derive(Debug, Default, Clone)]
pub struct Directory {
    /// Node → (cluster UDP address, migration address).
    pub peers: HashMap<NodeId, (Option<SocketAddr>, Option<SocketAddr>)>,
    /// Node → base URL of its HTTP API (where a migrated client goes).
    pub http: HashMap<NodeId, String>,
    /// Stream → the cluster address of the node holding its publisher.
    pub origins: HashMap<StreamId, SocketAddr>,
    /// Cluster addresses of nodes the scheduler declared down.
    pub down: std::collections::HashSet<SocketAddr>,
    /// Routing-table version it was built from.
    pub version: u64,
}

impl Directory {
    /// Builds the directory from a routing table, leaving out `me`.
    pub fn from_routing(me: &NodeId, t: &RoutingTable) -> Self {
        let mut d = Directory {
            version: t.version,
            ..Default::default()
        };
        for n in &t.nodes {
            if &n.id == me {
                continue;
            }
            if n.state == ferry_proto::api::NodeState::Down {
                if let Ok(addr) = n.cluster.parse() {
                    d.down.insert(addr);
                }
                continue;
            }
            d.peers.insert(
                n.id.clone(),
                (n.cluster.parse().ok(), n.migration.parse().ok()),
            );
            d.http.insert(n.id.clone(), n.http.clone());
        }
        for s in &t.sessions {
            if s.kind != SessionKind::Publish || &s.node == me {
                continue;
            }
            if let Some((Some(addr), _)) = d.peers.get(&s.node) {
                d.origins.insert(s.stream.clone(), *addr);
            }
        }
        d
    }
}

/// The directory, shared between the refresh task and request handlers.
pub type SharedDirectory = Arc<Mutex<Directory>>;

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_proto::api::{NodeState, RouteEntry, RouteNode};

    #[allow(clippy::unwrap_used)]
    #[test]
    fn a_migrate_event_nobody_heard_waits_for_a_late_subscriber() {
        let events = SessionEvents::default();
        let s = SessionId::new("s1").unwrap();
        let migrate = ("migrate", r#"{"target":"node-b"}"#.to_owned());
        assert!(!events.send(&s, migrate.clone()), "nobody listens yet");
        assert!(!events.send(&s, ("ticket", "{}".to_owned())));
        assert_eq!(
            events.unheard(&s),
            Some(migrate.clone()),
            "kept: only a migrate"
        );
        let other = SessionId::new("s2").unwrap();
        assert_eq!(events.unheard(&other), None);
        let mut rx = events.subscribe(&other);
        assert!(events.send(&other, migrate.clone()), "heard");
        assert_eq!(rx.try_recv().unwrap(), migrate);
        assert_eq!(events.unheard(&other), None, "a heard event is not kept");
    }

    #[test]
    fn directory_knows_peers_and_publisher_origins() {
        let node = |id: &str, cluster: &str| RouteNode {
            id: NodeId::new(id).unwrap(),
            state: NodeState::Active,
            weight: 1.0,
            zone: String::new(),
            http: String::new(),
            media: String::new(),
            cluster: cluster.into(),
            migration: "127.0.0.1:9000".into(),
        };
        let entry = |s: &str, node: &str, kind| RouteEntry {
            session: SessionId::new(s).unwrap(),
            stream: StreamId::new("cam").unwrap(),
            node: NodeId::new(node).unwrap(),
            epoch: 1,
            kind,
        };
        let t = RoutingTable {
            version: 7,
            nodes: vec![node("a", "127.0.0.1:5000"), node("b", "")],
            sessions: vec![
                entry("v", "b", SessionKind::View),
                entry("p", "a", SessionKind::Publish),
            ],
        };
        let me = NodeId::new("b").unwrap();
        let d = Directory::from_routing(&me, &t);
        assert_eq!(d.version, 7);
        assert_eq!(d.peers.len(), 1, "not itself");
        let cam = StreamId::new("cam").unwrap();
        assert_eq!(d.origins[&cam], "127.0.0.1:5000".parse().unwrap());
        let d = Directory::from_routing(&NodeId::new("a").unwrap(), &t);
        assert!(
            d.origins.is_empty(),
            "its own publisher is no remote origin"
        );
    }

    #[allow(clippy::unwrap_used)]
    #[test]
    fn secrets_are_made_once_and_read_back() {
        let dir = std::env::temp_dir().join(format!("ferry-secrets-{}", rand::random::<u64>()));
        let a = ClusterSecrets::load_or_create(&dir).unwrap();
        let b = ClusterSecrets::load_or_create(&dir).unwrap();
        assert_eq!(a.key, b.key);
        assert_eq!(a.ca.cert_pem(), b.ca.cert_pem());
        std::fs::write(dir.join("cluster.key"), "zz").unwrap();
        assert!(matches!(
            ClusterSecrets::load_or_create(&dir),
            Err(SecretsError::BadKey(_))
        ));
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Per-session event streams (`GET …/{session}/events`, server-sent
/// events): a migrated session's client learns there where to go.
///
/// A `migrate` event nobody heard (the client's event stream was between nodes: it had just
/// moved here and not yet reconnected) is kept for [`UNHEARD_KEEP`], and a late subscriber gets
/// it — otherwise the client would go on through the source's forwarding pointer until that
/// expires, and then lose its media.
#[derive(Debug, Clone, Default)]
pub struct SessionEvents(Arc<Mutex<Streams>>);

#[derive(Debug, Default)]
struct Streams {
    live: HashMap<SessionId, tokio::sync::broadcast::Sender<SessionEvent>>,
    unheard: HashMap<SessionId, (std::time::Instant, SessionEvent)>,
}

/// Events a session's stream keeps for a slow reader.
const EVENT_BACKLOG: usize = 8;

/// How long an unheard `migrate` event waits for its client: the source's forwarding pointer
/// lasts as long.
pub const UNHEARD_KEEP: std::time::Duration = crate::node::FORWARD_GRACE;

/// Unheard events kept at most.
const MAX_UNHEARD: usize = 10_000;

impl SessionEvents {
    fn lock(&self) -> std::sync::MutexGuard<'_, Streams> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver of `session`'s events from now on.
    pub fn subscribe(&self, session: &SessionId) -> tokio::sync::broadcast::Receiver<SessionEvent> {
        let mut s = self.lock();
        s.live.retain(|_, tx| tx.receiver_count() > 0);
        s.live
            .entry(session.clone())
            .or_insert_with(|| tokio::sync::broadcast::channel(EVENT_BACKLOG).0)
            .subscribe()
    }

    /// Sends an event (its name and one JSON object) to `session`'s listeners; whether anyone
    /// listened. A `migrate` event nobody heard is kept for a late subscriber.
    pub fn send(&self, session: &SessionId, event: SessionEvent) -> bool {
        let mut s = self.lock();
        let heard = s
            .live
            .get(session)
            .is_some_and(|tx| tx.send(event.clone()).is_ok());
        if !heard && event.0 == "migrate" {
            let now = std::time::Instant::now();
            s.unheard
                .retain(|_, (at, _)| now.duration_since(*at) < UNHEARD_KEEP);
            if s.unheard.len() < MAX_UNHEARD {
                s.unheard.insert(session.clone(), (now, event));
            }
        }
        heard
    }

    /// The `migrate` event `session`'s client missed here, if it is recent.
    pub fn unheard(&self, session: &SessionId) -> Option<SessionEvent> {
        let s = self.lock();
        s.unheard
            .get(session)
            .filter(|(at, _)| at.elapsed() < UNHEARD_KEEP)
            .map(|(_, e)| e.clone())
    }
}
