//! The handle the HTTP layer, the heartbeat and the tests hold on a running node
//! ([`NodeHandle`]), and the commands it sends the control task (`control.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use ferry_proto::api::{MigrationView, TicketClaims};
use ferry_proto::state::SessionSnapshot;
use ferry_proto::{MigrationId, RecordingId, SessionId, StreamId};
use ferry_record::RecorderState;
use tokio::sync::{mpsc, oneshot};

use crate::driver::membership::{Directory, MigrationApiError, SessionEvent, SessionEvents};
use crate::driver::recording_writer::{RecordingApiError, RecordingView};
use crate::driver::scheduler_link::{Readiness, SchedulerLink};
use crate::node::signal::{PatchOutcome, SessionAnswer, SessionInfo, SessionKind, SignalError};

pub(super) type Reply<T> = oneshot::Sender<Result<T, SignalError>>;

pub(super) enum Command {
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
    Recording(RecordingCommand),
    /// Brings a stream here if another node publishes it (a recording starts): whether it is
    /// here, once it came or [`crate::node::RELAY_WAIT`] passed.
    StreamHere(StreamId, Reply<bool>),
}

pub(super) type MigrationReply<T> = oneshot::Sender<Result<T, MigrationApiError>>;

/// What a heartbeat reports of the node: its sessions, counters, and the streams it relays in
/// (with the cluster address each comes from).
pub type NodeReport = (
    Vec<SessionInfo>,
    crate::node::metrics::NodeMetrics,
    Vec<(StreamId, SocketAddr)>,
);

/// A WHIP/WHEP request, checked.
pub(super) struct CreateRequest {
    pub(super) kind: SessionKind,
    pub(super) stream: StreamId,
    pub(super) offer: String,
    pub(super) key: Option<String>,
    pub(super) ticket: Option<TicketClaims>,
}

/// A cheap, cloneable handle to a running node.
#[derive(Clone, Debug)]
pub struct NodeHandle {
    pub(super) tx: mpsc::Sender<Command>,
    pub(super) udp: SocketAddr,
    pub(super) token: Option<Arc<str>>,
    pub(super) events: SessionEvents,
    /// The scheduler that records used tickets cluster-wide.
    pub(super) scheduler: Option<SchedulerLink>,
    /// This node's id.
    pub(super) id: ferry_proto::NodeId,
    /// `/readyz`.
    pub(super) ready: Arc<Readiness>,
}

impl NodeHandle {
    /// Whether the node should get new traffic (`/readyz`).
    pub fn readiness(&self) -> &Readiness {
        &self.ready
    }

    /// Sends `event` to `session`'s event stream; whether anyone listened.
    pub fn send_event(&self, session: &SessionId, event: SessionEvent) -> bool {
        self.events.send(session, event)
    }

    /// The scheduler this node reports to, if any.
    pub fn scheduler_link(&self) -> Option<&SchedulerLink> {
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

    pub(super) async fn call<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Command,
    ) -> Result<T, SignalError> {
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

pub(super) type RecordingReply<T> = oneshot::Sender<Result<T, RecordingApiError>>;

/// A handed-over state and a barrier that resolves once the objects before it are stored.
pub(super) type Handed = (Box<RecorderState>, oneshot::Receiver<()>);

/// What the control task does for a recording.
pub(super) enum RecordingCommand {
    /// Starts one (under the scheduler's id, if it gave one).
    Start(
        Option<RecordingId>,
        StreamId,
        Option<String>,
        RecordingReply<RecordingView>,
    ),
    /// Continues one from a stored state (after its node died) or from a hand-over.
    Resume(
        RecordingId,
        StreamId,
        Box<RecorderState>,
        bool,
        RecordingReply<RecordingView>,
    ),
    /// Target of a move: waits for the source's state.
    Await(RecordingId, StreamId, String, RecordingReply<RecordingView>),
    /// Target of a move: the source's state is in.
    ResumeAwaiting(
        RecordingId,
        Box<RecorderState>,
        RecordingReply<RecordingView>,
    ),
    /// Source of a move: hand over at the next keyframe.
    BeginHandover(RecordingId, RecordingReply<()>),
    /// Source of a move: the state it handed over, once it has, and a barrier that resolves
    /// when its last objects are stored.
    HandedOver(RecordingId, RecordingReply<Option<Handed>>),
    /// Source of a move: hand over now (no keyframe came).
    Export(RecordingId, RecordingReply<Handed>),
    /// Stops one; the answer comes once its last objects are stored. A recording waiting for a
    /// hand-over is dropped.
    Stop(
        RecordingId,
        RecordingReply<oneshot::Receiver<RecordingView>>,
    ),
    List(RecordingReply<Vec<RecordingView>>),
    Show(RecordingId, RecordingReply<RecordingView>),
}
