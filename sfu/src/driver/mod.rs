//! The driver: everything of the node that touches the world. Worker threads run the cores
//! ([`Node`]s) over their sockets (`cores.rs`, through `udp::serve`: read socket →
//! `handle_datagram` → drain `poll_transmit` → write socket; arm the timer from
//! `poll_timeout`); the control task serves commands from the HTTP layer ([`http`]) and drives
//! the migrator; beside them the edge's loop ([`edge`]), TLS ([`tls`]), the heartbeat and the
//! scheduler link, the cluster's secrets and directory ([`membership`]) and the recordings'
//! object writers ([`recording_writer`]).

// The driver reads the clock and gives the cores `now` (clippy.toml forbids it elsewhere).
#![allow(clippy::disallowed_methods)]

mod cores;
mod recordings;

pub mod edge;
pub mod heartbeat;
pub mod http;
pub mod membership;
pub mod recording_writer;
pub mod scheduler_link;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use ferry_proto::state::SessionSnapshot;
use ferry_proto::{SessionId, StreamId};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

use ferry_migrator::MigrationPlan;
use ferry_migrator::transport::{QuicTransport, Transport as _};
use ferry_proto::MigrationId;
use ferry_proto::api::MigrationView;

use crate::driver::membership::{
    ClusterOptions, Directory, MigrationApiError, MigrationBook, SessionEvents, SharedDirectory,
};
use crate::node::{Node, Requested};

use crate::node::signal::{PatchOutcome, SessionAnswer, SessionInfo, SessionKind, SignalError};
use cores::Cores;
use ferry_proto::api::TicketClaims;

type Reply<T> = oneshot::Sender<Result<T, SignalError>>;

enum Command {
    Idempotent(
        String,
        SessionKind,
        StreamId,
        String,
        Reply<Option<SessionAnswer>>,
    ),
    CheckTicket(String, SessionKind, StreamId, Reply<TicketClaims>),
    Create(Box<CreateRequest>, Reply<SessionAnswer>),
    Ticket(SessionId, Reply<Option<(String, u64)>>),
    SetVideo(SessionId, bool, Reply<()>),
    SetPreferences(
        SessionId,
        crate::media::adapt::prefs::Preferences,
        Reply<()>,
    ),
    Patch(SessionId, String, Option<String>, Reply<PatchOutcome>),
    Delete(SessionId, Reply<()>),
    Sessions(Reply<Vec<SessionInfo>>),
    SessionView(SessionId, Reply<crate::media::adapt::view::SessionView>),
    Metrics(Reply<String>),
    Snapshot(SessionId, Reply<SessionSnapshot>),
    Restore(Box<SessionSnapshot>, Reply<SessionId>),
    Report(Reply<NodeReport>),
    /// A migration order and the `traceparent` of the scheduler's span that sent it.
    Migrate(Box<MigrationView>, String, MigrationReply<MigrationView>),
    MigrationStatus(MigrationId, MigrationReply<MigrationView>),
    Directory(Box<Directory>),
    Recording(recordings::RecordingCommand),
    /// Brings a stream here if another node publishes it (a recording starts): whether it is
    /// here, once it came or [`crate::node::RELAY_WAIT`] passed.
    StreamHere(StreamId, Reply<bool>),
}

type MigrationReply<T> = oneshot::Sender<Result<T, MigrationApiError>>;

/// What a heartbeat reports of the node: its sessions, counters, and the streams it relays in
/// (with the cluster address each comes from).
pub type NodeReport = (
    Vec<SessionInfo>,
    crate::node::metrics::NodeMetrics,
    Vec<(StreamId, SocketAddr)>,
);

/// A WHIP/WHEP request, checked.
struct CreateRequest {
    kind: SessionKind,
    stream: StreamId,
    offer: String,
    key: Option<String>,
    ticket: Option<TicketClaims>,
}

/// A session event for its server-sent event stream: the event's name and its JSON data.
pub type SessionEvent = (&'static str, String);

/// The node's side of migrations in a cluster, owned by the control task: the transport,
/// which core runs each migration, and the book the HTTP API reads. The migrations
/// themselves run on the cores ([`cores::CoreState::migrator`]).
struct Migrations {
    transport: QuicTransport,
    routes: cores::MigrationRoutes,
    book: MigrationBook,
}

impl Migrations {
    /// What a core reported.
    fn report(&mut self, me: &ferry_proto::NodeId, r: cores::Report) {
        match r {
            cores::Report::Migration(e) => {
                if let ferry_migrator::MigrationEvent::Finished(r) = &e {
                    self.routes.ended(&r.id);
                }
                self.book.event(me, e);
            }
        }
    }
}

/// A cheap, cloneable handle to a running node.
#[derive(Clone, Debug)]
pub struct NodeHandle {
    tx: mpsc::Sender<Command>,
    udp: SocketAddr,
    token: Option<Arc<str>>,
    events: SessionEvents,
    /// The scheduler that records used tickets cluster-wide.
    scheduler: Option<crate::driver::heartbeat::SchedulerLink>,
    /// This node's id.
    id: ferry_proto::NodeId,
    /// `/readyz`.
    ready: Arc<crate::driver::scheduler_link::Readiness>,
}

impl NodeHandle {
    /// Whether the node should get new traffic (`/readyz`).
    pub fn readiness(&self) -> &crate::driver::scheduler_link::Readiness {
        &self.ready
    }

    /// Sends `event` to `session`'s event stream; whether anyone listened.
    pub fn send_event(&self, session: &SessionId, event: SessionEvent) -> bool {
        self.events.send(session, event)
    }

    /// The scheduler this node reports to, if any.
    pub fn scheduler_link(&self) -> Option<&crate::driver::heartbeat::SchedulerLink> {
        self.scheduler.as_ref()
    }

    /// How this node's HTTP client reaches its peers (the scheduler link's TLS settings).
    pub fn peer_tls(&self) -> ureq::tls::TlsConfig {
        self.scheduler
            .as_ref()
            .map(|s| s.tls.clone())
            .unwrap_or_default()
    }

    /// The node's media address.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, SignalError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(make(tx))
            .await
            .map_err(|_| SignalError::Unavailable)?;
        rx.await.map_err(|_| SignalError::Unavailable)?
    }

    /// This node's id.
    pub fn id(&self) -> &ferry_proto::NodeId {
        &self.id
    }

    /// WHIP: a publisher's offer.
    pub async fn publish(
        &self,
        stream: StreamId,
        offer: String,
    ) -> Result<SessionAnswer, SignalError> {
        self.create(SessionKind::Publish, stream, offer, None, None)
            .await
    }

    /// WHEP: a viewer's offer. A stream published on another node of the
    /// cluster is relayed here first (its origin from the directory): the core answers once
    /// the relay is offered ([`crate::node::Requested::Waiting`]).
    pub async fn view(
        &self,
        stream: StreamId,
        offer: String,
    ) -> Result<SessionAnswer, SignalError> {
        self.create(SessionKind::View, stream, offer, None, None)
            .await
    }

    /// WHIP/WHEP with the SDK's extras: `key` (`Idempotency-Key`) returns an earlier answer to
    /// the same request; `ticket` (`Ferry-Ticket`) resumes the session it names — checked here,
    /// its generation consumed at the scheduler (cluster-wide single use), the session made
    /// anew under its id if it is not on this node.
    pub async fn create(
        &self,
        kind: SessionKind,
        stream: StreamId,
        offer: String,
        key: Option<String>,
        ticket: Option<String>,
    ) -> Result<SessionAnswer, SignalError> {
        if let Some(k) = &key {
            let cached = self
                .call(|r| Command::Idempotent(k.clone(), kind, stream.clone(), offer.clone(), r))
                .await?;
            if let Some(a) = cached {
                return Ok(a);
            }
        }
        let claims = match ticket {
            Some(t) => {
                let c = self
                    .call(|r| Command::CheckTicket(t, kind, stream.clone(), r))
                    .await?;
                self.consume_at_scheduler(&c).await?;
                Some(c)
            }
            None => None,
        };
        let req = CreateRequest {
            kind,
            stream,
            offer,
            key,
            ticket: claims,
        };
        self.call(|r| Command::Create(Box::new(req), r)).await
    }

    /// Records the use of a ticket's generation at the scheduler: a second use anywhere in the
    /// cluster is a replay. Without an answer from the scheduler the node's own record decides
    /// (a scheduler outage must not stop clients from recovering).
    async fn consume_at_scheduler(&self, c: &TicketClaims) -> Result<(), SignalError> {
        let Some(link) = self.scheduler.clone() else {
            return Ok(());
        };
        let body = ferry_proto::api::TicketUse {
            session: c.sid.clone(),
            generation: c.r#gen,
            expires: c.exp,
        };
        let outcome = tokio::task::spawn_blocking(move || {
            let body = serde_json::to_value(&body).map_err(|e| e.to_string())?;
            link.call(
                "/v1/tickets/consume",
                Some(&body),
                std::time::Duration::from_secs(1),
            )
            .map(|a| a.status)
            .map_err(|e| e.to_string())
        })
        .await;
        match outcome {
            Ok(Ok(200..=299)) => Ok(()),
            Ok(Ok(409)) => Err(SignalError::BadTicket(crate::node::TicketError::Replayed)),
            other => {
                tracing::warn!(?other, session = %c.sid, "the scheduler did not record the ticket's use; trusting this node's record");
                Ok(())
            }
        }
    }

    /// A fresh ticket for `session` and its expiry (Unix seconds).
    pub async fn ticket(&self, session: SessionId) -> Result<Option<(String, u64)>, SignalError> {
        self.call(|r| Command::Ticket(session, r)).await
    }

    /// Turns video to viewer `session` off or on (degraded mode).
    pub async fn set_video(&self, session: SessionId, enabled: bool) -> Result<(), SignalError> {
        self.call(|r| Command::SetVideo(session, enabled, r)).await
    }

    /// Caps a viewer's layers (`POST {session}/layer`).
    pub async fn set_preferences(
        &self,
        session: SessionId,
        prefs: crate::media::adapt::prefs::Preferences,
    ) -> Result<(), SignalError> {
        self.call(|r| Command::SetPreferences(session, prefs, r))
            .await
    }

    /// A `migrate` event of `session` that nobody heard here (its client reconnects late).
    pub fn unheard_event(&self, session: &SessionId) -> Option<SessionEvent> {
        self.events.unheard(session)
    }

    /// The events of `session` from now on (migrations, ticket refreshes, its end).
    pub fn session_events(
        &self,
        session: &SessionId,
    ) -> tokio::sync::broadcast::Receiver<SessionEvent> {
        self.events.subscribe(session)
    }

    /// Whether `bearer` is the cluster's token (migration API).
    pub fn authorized(&self, bearer: Option<&str>) -> bool {
        match (&self.token, bearer) {
            (Some(t), Some(b)) if !t.is_empty() => {
                use subtle::ConstantTimeEq;
                t.as_bytes().ct_eq(b.as_bytes()).into()
            }
            _ => false,
        }
    }

    async fn migration_call<T>(
        &self,
        make: impl FnOnce(MigrationReply<T>) -> Command,
    ) -> Result<T, MigrationApiError> {
        let unavailable = || MigrationApiError::new(503, "node is shutting down");
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).await.map_err(|_| unavailable())?;
        rx.await.map_err(|_| unavailable())?
    }

    /// Starts migrating a session away from this node (idempotent per id). The migration's
    /// span joins the trace of `trace_parent` (W3C; empty when the caller is not traced).
    pub async fn migrate(
        &self,
        view: MigrationView,
        trace_parent: String,
    ) -> Result<MigrationView, MigrationApiError> {
        self.migration_call(|r| Command::Migrate(Box::new(view), trace_parent, r))
            .await
    }

    /// Where migration `id` is, as this node saw it.
    pub async fn migration(&self, id: MigrationId) -> Result<MigrationView, MigrationApiError> {
        self.migration_call(|r| Command::MigrationStatus(id, r))
            .await
    }

    /// Trickle or ICE restart.
    pub async fn patch(
        &self,
        session: SessionId,
        frag: String,
        if_match: Option<String>,
    ) -> Result<PatchOutcome, SignalError> {
        self.call(|r| Command::Patch(session, frag, if_match, r))
            .await
    }

    /// Ends a session.
    pub async fn delete(&self, session: SessionId) -> Result<(), SignalError> {
        self.call(|r| Command::Delete(session, r)).await
    }

    /// Lists sessions.
    pub async fn sessions(&self) -> Result<Vec<SessionInfo>, SignalError> {
        self.call(Command::Sessions).await
    }

    /// One session, with a viewer's adaptation (`GET /v1/sessions/{id}`).
    pub async fn session_view(
        &self,
        session: SessionId,
    ) -> Result<crate::media::adapt::view::SessionView, SignalError> {
        self.call(|r| Command::SessionView(session, r)).await
    }

    /// Prometheus text of the node's counters.
    pub async fn metrics_text(&self) -> Result<String, SignalError> {
        self.call(Command::Metrics).await
    }

    /// Sessions, counters and relays, for heartbeats.
    pub async fn report(&self) -> Result<NodeReport, SignalError> {
        self.call(Command::Report).await
    }

    /// Exports a session's state.
    pub async fn snapshot(&self, session: SessionId) -> Result<SessionSnapshot, SignalError> {
        self.call(|r| Command::Snapshot(session, r)).await
    }

    /// Installs a session from a snapshot.
    pub async fn restore(&self, snapshot: SessionSnapshot) -> Result<SessionId, SignalError> {
        self.call(|r| Command::Restore(Box::new(snapshot), r)).await
    }
}

/// Binds the media socket and starts the node's task.
pub async fn spawn(node: Node, udp_bind: SocketAddr) -> std::io::Result<NodeHandle> {
    let socket = crate::udp::bind(udp_bind)?;
    spawn_on(node, socket)
}

/// Starts the node's task on an already bound socket.
pub fn spawn_on(node: Node, socket: UdpSocket) -> std::io::Result<NodeHandle> {
    let udp = socket.local_addr()?;
    let (tx, rx) = mpsc::channel(256);
    let id = node.id().clone();
    let events = SessionEvents::default();
    let (cores, workers, reports) =
        Cores::new(vec![node], vec![socket], events.clone(), id.clone(), None);
    run(cores, workers, reports, &[], rx, None)?;
    Ok(NodeHandle {
        tx,
        udp,
        token: None,
        events,
        scheduler: None,
        id,
        ready: Arc::default(),
    })
}

/// The next migration message from a peer node (never, outside a cluster).
async fn migration_message(
    cluster: &mut Option<Migrations>,
) -> Result<
    (ferry_proto::NodeId, ferry_migrator::wire::Message),
    ferry_migrator::transport::TransportError,
> {
    match cluster {
        Some(c) => c.transport.recv().await,
        None => std::future::pending().await,
    }
}

/// Starts the workers (a thread each, worker `i` on `cpus[i]` when given) and the control task.
fn run(
    cores: Arc<Cores>,
    workers: Vec<cores::Worker>,
    reports: mpsc::UnboundedReceiver<cores::Report>,
    cpus: &[usize],
    rx: mpsc::Receiver<Command>,
    cluster: Option<Migrations>,
) -> std::io::Result<()> {
    for (i, w) in workers.into_iter().enumerate() {
        cores::start_worker(cores.clone(), w, cpus.get(i).copied())?;
    }
    tokio::spawn(control(cores, reports, rx, cluster));
    Ok(())
}

/// The control task: commands from the HTTP layer, each sent to the core it concerns;
/// migration messages from peers to the core of their migration; what the cores report.
async fn control(
    cores: Arc<Cores>,
    mut reports: mpsc::UnboundedReceiver<cores::Report>,
    mut rx: mpsc::Receiver<Command>,
    mut cluster: Option<Migrations>,
) {
    // Until every core's worker is gone (each holds a sender).
    let mut reporting = true;
    loop {
        tokio::select! {
            cmd = rx.recv() => {
                let Some(cmd) = cmd else { break };
                command(&cores, cluster.as_mut(), cmd);
            }
            r = reports.recv(), if reporting => match (r, cluster.as_mut()) {
                (Some(r), Some(c)) => c.report(cores.id(), r),
                (Some(_), None) => {}
                (None, _) => reporting = false,
            },
            m = migration_message(&mut cluster) => {
                let (Ok((from, msg)), Some(c)) = (m, cluster.as_mut()) else { continue };
                tracing::debug!(migration = %msg.id, body = msg.body.name(), %from, "migration message in");
                let i = c.routes.route(&cores, &msg);
                cores.post(i, move |core| {
                    let Some((m, _)) = core.migrator.as_mut() else { return };
                    let t = Instant::now();
                    let what = msg.body.name();
                    m.handle_message(t, &mut core.node, &from, msg);
                    let took = t.elapsed();
                    if took > std::time::Duration::from_millis(2) {
                        tracing::warn!(?took, what, "slow migration step");
                    }
                });
            }
        }
    }
}

fn migrate(
    cores: &Cores,
    cluster: Option<&mut Migrations>,
    now: Instant,
    view: MigrationView,
    parent: &str,
) -> Result<MigrationView, MigrationApiError> {
    let Some(c) = cluster else {
        return Err(MigrationApiError::new(
            503,
            "this node is not part of a cluster (no --cluster-dir)",
        ));
    };
    if let Some(v) = c.book.get(&view.id) {
        return if v.session == view.session && v.target == view.target {
            Ok(v.clone())
        } else {
            Err(MigrationApiError::new(
                409,
                format!("migration {} exists for another session or target", view.id),
            ))
        };
    }
    let Some(target) = view.target.clone() else {
        return Err(MigrationApiError::new(400, "a target node is required"));
    };
    if &target == cores.id() {
        return Err(MigrationApiError::new(
            400,
            "the target is the node the session is on",
        ));
    }

    let missing = || {
        MigrationApiError::new(
            404,
            format!("no session {} on {}", view.session, cores.id()),
        )
    };
    let shard = cores.of_session(&view.session).ok_or_else(missing)?;
    let (session, peer, me) = (view.session.clone(), target.clone(), cores.id().clone());
    let (stream, publisher, epoch) = cores
        .drive(shard, move |node| {
            let s = node.session(&session).ok_or(None)?;
            if !s.active {
                return Err(Some(MigrationApiError::new(
                    409,
                    format!("session {session} is migrating"),
                )));
            }
            if !node.has_peer(&peer) {
                return Err(Some(MigrationApiError::new(
                    503,
                    format!("target {peer} is not known to {me} yet"),
                )));
            }
            Ok((
                s.stream.clone(),
                matches!(s.role, crate::node::session::Role::Publisher(_)),
                s.epoch,
            ))
        })
        .map_err(|e| e.unwrap_or_else(missing))?;
    let me = cores.id().clone();
    // The span opens before `Prepare` leaves, which carries its context.
    let fresh = !c.book.is_traced(&view.id);
    let trace_parent = c.book.trace_source(&view, &me, &target, parent);
    let plan = MigrationPlan {
        id: view.id.clone(),
        session: view.session.clone(),
        stream,
        publisher,
        target: target.clone(),
        epoch,
        mode: view.mode,
        trace_parent,
    };
    // The session's core notes what the client will be told at the commit and runs the
    // migration.
    let (session, mode) = (view.session.clone(), view.mode);
    let started = cores
        .drive_core(shard, move |core| {
            let Some((m, _)) = core.migrator.as_mut() else {
                return Err(None);
            };
            core.node
                .plan_move(&session, &plan.target, mode)
                .map_err(|_| None)?;
            m.start(now, &mut core.node, plan).map_err(|e| {
                core.node.move_abandoned(&session);
                Some(e)
            })
        })
        .map_err(|e| {
            if fresh {
                c.book.untrace(&view.id);
            }
            match e {
                None => missing(),
                Some(e) => {
                    let status = match e {
                        ferry_migrator::StartError::SelfTarget => 400,
                        _ => 409,
                    };
                    MigrationApiError::new(status, e.to_string())
                }
            }
        });
    started?;
    c.routes.insert(view.id.clone(), shard);
    let id = view.id.clone();
    c.book.started(view, &me, &target);
    c.book
        .get(&id)
        .cloned()
        .ok_or_else(|| MigrationApiError::new(500, "migration not recorded"))
}

fn command(cores: &Cores, cluster: Option<&mut Migrations>, cmd: Command) {
    let now = Instant::now();
    let of_stream = |stream: &StreamId| cores.of_stream(stream);
    // Commands about a session go to the core that has it, or knows where it went (an unknown
    // session: any core answers "not found").
    let of_session = |id: &SessionId| {
        cores
            .of_session(id)
            .or_else(|| cores.moved_from(now, id))
            .unwrap_or(0)
    };
    // A dropped reply only means the HTTP client went away.
    match cmd {
        Command::Idempotent(key, kind, stream, offer, r) => {
            let answer = cores.drive(of_stream(&stream), move |n| {
                n.idempotent_answer(now, &key, kind, &stream, &offer)
            });
            let _ = r.send(answer);
        }
        Command::CheckTicket(ticket, kind, stream, r) => {
            let checked = cores.drive(of_stream(&stream), move |n| {
                let checked = n.check_ticket(now, &ticket, &stream, kind);
                if checked.is_err() {
                    n.metrics_mut().signal_rejected += 1;
                }
                checked
            });
            let _ = r.send(checked.map_err(SignalError::BadTicket));
        }
        Command::Create(req, r) => {
            let CreateRequest {
                kind,
                stream,
                offer,
                key,
                ticket,
            } = *req;
            let shard = of_stream(&stream);
            // The core admits it against the node's limit, which its cores share.
            cores.drive_core(shard, move |c| {
                let requested = c.node.request_session(
                    now,
                    kind,
                    &stream,
                    &offer,
                    key.as_deref(),
                    ticket.as_ref(),
                );
                match requested {
                    Ok(Requested::Answer(a)) => {
                        let _ = r.send(Ok(a));
                    }
                    // A viewer waiting for its stream's relay: the core answers it.
                    Ok(Requested::Waiting(id)) => c.await_answer(id, cores::Waiter::Session(r)),
                    Err(e) => {
                        let _ = r.send(Err(e));
                    }
                }
            });
        }
        Command::Ticket(id, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| match n.session(&id) {
                Some(_) => Ok(n.issue_ticket(now, &id)),
                None => Err(SignalError::SessionNotFound(id.to_string())),
            }));
        }
        Command::SetVideo(id, enabled, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| n.set_video(now, &id, enabled)));
        }
        Command::SetPreferences(id, prefs, r) => {
            let _ =
                r.send(cores.drive(of_session(&id), move |n| n.set_preferences(now, &id, prefs)));
        }
        Command::Patch(id, frag, if_match, r) => {
            let result = cores.drive(of_session(&id), move |n| {
                n.patch(now, &id, &frag, if_match.as_deref())
            });
            let _ = r.send(result);
        }
        Command::Delete(id, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| n.delete(now, &id)));
        }
        Command::Sessions(r) => {
            let _ = r.send(Ok(cores.sessions()));
        }
        Command::SessionView(id, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| n.session_view(now, &id)));
        }
        Command::Metrics(r) => {
            let mut text = cores.metrics().to_prometheus();
            text.push_str(&cores.overload_prometheus());
            text.push_str(&cores.prometheus());
            let active = cores.active_recordings();
            let counters = cores.recording_counters();
            text.push_str(
                &cores
                    .writers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .prometheus(active, counters),
            );
            if let Some(c) = &cluster {
                text.push_str(&c.book.to_prometheus());
            }
            let _ = r.send(Ok(text));
        }
        Command::Snapshot(id, r) => {
            let _ = r.send(cores.drive(of_session(&id), move |n| n.snapshot_session(now, &id)));
        }
        Command::Restore(snap, r) => {
            let shard = StreamId::new(snap.stream.clone()).map_or(0, |s| of_stream(&s));
            let _ = r.send(cores.drive(shard, move |n| n.restore_session(now, *snap)));
        }
        Command::Report(r) => {
            let _ = r.send(Ok((
                cores.sessions(),
                cores.metrics(),
                cores.relay_sources(),
            )));
        }
        Command::Migrate(view, parent, r) => {
            let _ = r.send(migrate(cores, cluster, now, *view, &parent));
        }
        Command::MigrationStatus(id, r) => {
            let found = cluster.and_then(|c| c.book.get(&id).cloned());
            let _ = r.send(found.ok_or_else(|| {
                MigrationApiError::new(404, format!("no migration {id} on this node"))
            }));
        }
        Command::Directory(d) => {
            for (id, (_, quic)) in &d.peers {
                if let (Some(quic), Some(c)) = (quic, cluster.as_ref()) {
                    c.transport.add_peer(id.clone(), *quic);
                }
            }
            let d = Arc::new(d);
            cores.drive_all(move |node| {
                for (id, base) in &d.http {
                    node.set_peer_http(id.clone(), base.clone());
                }
                for (id, (udp, _)) in &d.peers {
                    if let Some(udp) = udp {
                        node.set_peer(id.clone(), *udp);
                    }
                }
                node.repoint_relays(now, &d.origins, &d.down);
            });
        }
        Command::Recording(cmd) => recordings::handle(cores, now, cmd),
        Command::StreamHere(stream, r) => {
            let shard = of_stream(&stream);
            cores.drive_core(shard, move |c| match c.node.request_stream(now, &stream) {
                Some(id) => c.await_answer(id, cores::Waiter::Stream(r)),
                None => {
                    let _ = r.send(Ok(c.node.has_stream(&stream)));
                }
            });
        }
    }
}

/// What [`start`] needs to run one node.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Node id.
    pub id: ferry_proto::NodeId,
    /// HTTP (WHIP/WHEP) listen address.
    pub http: SocketAddr,
    /// Media UDP listen address.
    pub udp: SocketAddr,
    /// Address announced in candidates (default: the bound one; loopback if unspecified).
    pub announce: Option<std::net::IpAddr>,
    /// ICE servers for `Link` headers.
    pub ice_servers: Vec<crate::driver::http::IceServer>,
    /// NACK cache per stream.
    pub nack_cache: usize,
    /// Sessions accepted before answering 503.
    pub max_sessions: usize,
    /// Nodes a stream published here is relayed to directly before further ones are sent one
    /// level down (0: no limit; [`crate::node::RELAY_FANOUT`]).
    pub relay_fanout: usize,
    /// Extra text for `/metrics` from the embedding process.
    pub process_metrics: Option<crate::driver::http::ProcessMetrics>,
    /// The scheduler to report to, if any.
    pub scheduler: Option<crate::driver::heartbeat::SchedulerLink>,
    /// Cluster membership: relays, edge, migration (`None`: a lone node).
    pub cluster: Option<ClusterOptions>,
    /// More routes on the node's HTTP server (the binary adds the browser SDK's files).
    pub extra_routes: Option<axum::Router>,
    /// Checks the access tokens of WHIP/WHEP `POST`s (always on: without a token key, only the
    /// operator token it was given gets in).
    pub tokens: Arc<ferry_proto::auth::Verifier>,
    /// Requests one client address may make on the HTTP listener
    /// ([`crate::driver::http::limits`]).
    pub http_limit: crate::driver::http::limits::RateLimit,
    /// Serve HTTPS with this certificate (and advertise `https://` URLs).
    pub tls: Option<Arc<crate::driver::tls::ServerTls>>,
    /// Where recordings without a target go (`{dir}/{id}`); `None`: a target is required.
    pub recordings_dir: Option<std::path::PathBuf>,
    /// Cores forwarding media, each with its own worker thread and socket (at least 1).
    pub workers: usize,
    /// Each worker thread on a CPU of its own ([`cores::worker_cpus`]): when there are several
    /// and the process may run on at least as many CPUs (off by default: `ferry node
    /// --pin-workers`).
    pub pin_workers: bool,
    /// The cluster directory to keep up to date (shared with the embedding process, e.g. the
    /// room server finding the other nodes); `None`: the node's own.
    pub directory: Option<SharedDirectory>,
}

/// A node started by [`start`].
#[derive(Debug)]
pub struct RunningNode {
    /// Handle to the node task.
    pub handle: NodeHandle,
    /// Where HTTP listens.
    pub http: SocketAddr,
    /// Where media listens.
    pub udp: SocketAddr,
    /// The announced candidate.
    pub candidate: SocketAddr,
    /// The HTTP server task.
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Where the migration transport listens (in a cluster).
    pub migration: Option<SocketAddr>,
}

/// Binds sockets, makes a certificate and starts the node and its HTTP API.
pub async fn start(opts: NodeOptions) -> std::io::Result<RunningNode> {
    use rand::RngExt;

    let workers = opts.workers.max(1);
    let sockets = crate::udp::bind_shared(opts.udp, workers)?;
    let udp = sockets[0].local_addr()?;
    let ip = match (opts.announce, udp.ip()) {
        (Some(ip), _) => ip,
        (None, ip) if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
        (None, ip) => ip,
    };
    let candidate = SocketAddr::new(ip, udp.port());
    let mut rng = rand::rng();
    let cert = loop {
        if let Ok(c) = crate::cert::generate(rng.random()) {
            break c;
        }
    };
    let now = Instant::now();
    let wall = crate::time::WallClock {
        base: now,
        unix_at_base: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    };
    let candidates = match opts.cluster.as_ref().and_then(|c| c.edge) {
        Some(edge) => vec![edge],
        None => vec![candidate],
    };
    let mut config = crate::node::NodeConfig::new(opts.id.clone(), candidates, rng.random(), wall);
    config.nack_cache = opts.nack_cache;
    config.max_sessions = opts.max_sessions;
    config.relay_fanout = opts.relay_fanout;
    let mut runtime = None;
    let migrations = ferry_migrator::Config::default();
    let mut migration = None;
    let directory: SharedDirectory = opts.directory.clone().unwrap_or_default();
    let events = SessionEvents::default();
    if let Some(c) = &opts.cluster {
        config.cluster_key = Some(crate::cluster::relay::ClusterKey::new(&c.key));
        config.cluster_addr = Some(candidate);
        config.edge = c.edge;
        let transport =
            QuicTransport::bind(&c.identity, c.migration_listen).map_err(std::io::Error::other)?;
        let quic = transport.local_addr().map_err(std::io::Error::other)?;
        // Advertise the address the migration listener is bound to; a wildcard bind is
        // reached at the media address's IP.
        let quic_ip = if quic.ip().is_unspecified() {
            ip
        } else {
            quic.ip()
        };
        migration = Some(SocketAddr::new(quic_ip, quic.port()));
        runtime = Some(Migrations {
            transport,
            routes: cores::MigrationRoutes::new(migrations.finished_capacity),
            book: MigrationBook::default(),
        });
    }
    let cert = Arc::new(cert);
    let id = config.node_id.clone();
    let nodes = (0..workers)
        .map(|i| {
            let mut config = config.clone();
            // Each core draws its own ICE credentials and session ids.
            config.seed[0] ^= i as u8;
            let mut node = Node::new(config, cert.clone(), now);
            node.set_recordings_dir(
                opts.recordings_dir
                    .as_ref()
                    .map(|d| d.to_string_lossy().into_owned()),
            );
            node
        })
        .collect();
    let (cores, shards, reports) = Cores::new(
        nodes,
        sockets,
        events.clone(),
        id,
        runtime
            .as_ref()
            .map(|m: &Migrations| (migrations.clone(), m.transport.sender())),
    );
    tracing::info!(workers, %udp, "media workers started");
    let (tx, rx) = mpsc::channel(256);
    let cpus = if opts.pin_workers {
        cores::worker_cpus(workers)
    } else {
        Vec::new()
    };
    run(cores, shards, reports, &cpus, rx, runtime)?;
    let handle = NodeHandle {
        tx,
        udp,
        token: opts.cluster.as_ref().map(|c| Arc::from(c.token.as_str())),
        events,
        scheduler: opts.scheduler.clone(),
        id: opts.id.clone(),
        ready: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind(opts.http).await?;
    let http = listener.local_addr()?;
    let scheme = crate::driver::tls::scheme(opts.tls.is_some());
    if opts.scheduler.is_some() {
        handle.readiness().wait_for_scheduler();
    }
    let access = crate::driver::http::Access {
        tokens: opts.tokens,
        scheme,
    };
    let limits = crate::driver::http::limits::HttpLimits::new(opts.http_limit).trusting({
        let (node, tokens) = (handle.clone(), access.tokens.clone());
        move |bearer| node.authorized(Some(bearer)) || tokens.is_operator_token(bearer)
    });
    let mut app = crate::driver::http::router(
        handle.clone(),
        opts.ice_servers,
        opts.process_metrics,
        access,
        limits.clone(),
    );
    if let Some(extra) = opts.extra_routes {
        app = app.merge(extra);
    }
    // Every route counts, the embedding process's too (room joins, the SDK's files).
    let app = limits.apply(app);
    let server = tokio::spawn(crate::driver::tls::serve(listener, opts.tls, app));
    if let Some(link) = opts.scheduler {
        let mut hb = crate::driver::heartbeat::Reporter::new(
            link.clone(),
            opts.id.clone(),
            format!("{scheme}://{http}"),
            candidates_media(&opts.cluster, candidate),
            opts.max_sessions as u64,
        )
        .with_workers(workers);
        if let (Some(c), Some(m)) = (&opts.cluster, migration) {
            hb = hb.with_cluster(candidate.to_string(), m.to_string());
            tokio::spawn(refresh_directory(
                link,
                opts.id.clone(),
                c.directory_interval,
                directory,
                handle.clone(),
            ));
        }
        tokio::spawn(hb.run(handle.clone()));
    }
    Ok(RunningNode {
        handle,
        http,
        udp,
        candidate,
        server,
        migration,
    })
}

/// The media address clients are told: the edge's when behind one.
fn candidates_media(cluster: &Option<ClusterOptions>, candidate: SocketAddr) -> String {
    cluster
        .as_ref()
        .and_then(|c| c.edge)
        .unwrap_or(candidate)
        .to_string()
}

/// Keeps the directory (peers, stream origins) in step with the
/// scheduler's routing table, long-polling for changes.
async fn refresh_directory(
    link: crate::driver::heartbeat::SchedulerLink,
    me: ferry_proto::NodeId,
    interval: std::time::Duration,
    directory: SharedDirectory,
    node: NodeHandle,
) {
    let mut version = 0u64;
    loop {
        let link = link.clone();
        let table = tokio::task::spawn_blocking(move || {
            let path = format!("/v1/routing?since={version}&timeout_s=5");
            let a = link
                .call(&path, None, std::time::Duration::from_secs(10))
                .map_err(|e| e.to_string())?;
            if a.status != 200 {
                return Err(format!("{} {}", a.status, a.body.trim()));
            }
            serde_json::from_str::<ferry_proto::api::RoutingTable>(&a.body)
                .map_err(|e| e.to_string())
        })
        .await;
        match table {
            Ok(Ok(t)) => {
                version = t.version;
                let d = Directory::from_routing(&me, &t);
                tracing::debug!(
                    version,
                    peers = d.peers.len(),
                    origins = d.origins.len(),
                    "directory updated"
                );
                *directory.lock().unwrap_or_else(|e| e.into_inner()) = d.clone();
                if node.tx.send(Command::Directory(Box::new(d))).await.is_err() {
                    return;
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "routing table not read");
                tokio::time::sleep(interval).await;
            }
            Err(_) => return,
        }
    }
}
