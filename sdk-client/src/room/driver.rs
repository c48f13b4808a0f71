//! The room's tokio task: its sockets (see [`super::socket`]) and the flows around the pure
//! parts — joining, reconnecting through the gateway with backoff, moving to another node make
//! before break.
//!
//! One task owns everything; a flow (reconnect, move) awaits its steps through
//! [`Driver::run_until`], which keeps handling the room's frames and the app's commands
//! meanwhile, so a command made while reconnecting waits in the book and an answer on the old
//! socket still counts during a move.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use super::book::Book;
use super::frames::{self, Keys, ServerFrame};
use super::model::{JOIN_TIMEOUT, JoinOptions, Receipt, RoomEvent, RoomState};
use super::socket::{DialRequest, Dialed, Incoming, Ws, dial, read, refusal};
use super::view::RoomView;
use crate::error::SdkError;

type Reply = oneshot::Sender<Result<Receipt, SdkError>>;

/// Reconnect delays: this, doubling, up to [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_CAP: Duration = Duration::from_secs(5);
/// A frame that cannot be written in this long is given up on (the reader sees the socket go).
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The delay before reconnect `attempt` (1, 2, …): 250 ms doubling to 5 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    (BACKOFF_BASE * 2u32.pow(doublings)).min(BACKOFF_CAP)
}

/// What the room was asked to join.
#[derive(Debug)]
pub(crate) struct Setup {
    pub room: String,
    /// The gateway (or node) base URL.
    pub base: String,
    pub token: Option<String>,
    pub opts: JoinOptions,
}

/// From the [`super::Room`] handle.
#[derive(Debug)]
pub(crate) enum Msg {
    Command {
        frame: Value,
        reply: Reply,
    },
    Move {
        http: String,
        reply: oneshot::Sender<Result<(), SdkError>>,
    },
    Close {
        left: bool,
    },
}

/// What the handle reads without asking the task.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub view: RoomView,
    pub node: String,
    pub participant: String,
    pub state: RoomState,
}

/// One open socket (its reading half runs in `reader`).
struct Conn {
    sink: SplitSink<Ws, Message>,
    reader: JoinHandle<()>,
    /// The room no longer listens to it (moving away): its close is no loss.
    retired: bool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

struct Driver {
    setup: Setup,
    shared: Arc<Mutex<Shared>>,
    events: mpsc::UnboundedSender<RoomEvent>,
    msgs: mpsc::UnboundedReceiver<Msg>,
    inbox_tx: mpsc::UnboundedSender<(u64, Incoming)>,
    inbox: mpsc::UnboundedReceiver<(u64, Incoming)>,
    conns: HashMap<u64, Conn>,
    next_conn: u64,
    /// The socket whose events count.
    current: Option<u64>,
    /// Joined on `current`: commands go out at once.
    ready: bool,
    book: Book<Reply>,
    keys: Keys,
    /// This participant (from the first welcome on: reconnects keep it).
    participant: Option<String>,
    /// The HTTP base of the node the room is on.
    http: String,
    /// The current socket dropped unexpectedly: why (the main loop reconnects).
    lost: Option<String>,
    ended: bool,
    left: bool,
    failure: Option<SdkError>,
}

/// Runs the room: joins (the outcome to `joined`), then serves the handle until it closes, the
/// room is left, or the room gives up.
pub(crate) async fn run(
    setup: Setup,
    shared: Arc<Mutex<Shared>>,
    msgs: mpsc::UnboundedReceiver<Msg>,
    events: mpsc::UnboundedSender<RoomEvent>,
    joined: oneshot::Sender<Result<(), SdkError>>,
) {
    let (inbox_tx, inbox) = mpsc::unbounded_channel();
    let mut d = Driver {
        participant: setup.opts.participant.clone(),
        setup,
        shared,
        events,
        msgs,
        inbox_tx,
        inbox,
        conns: HashMap::new(),
        next_conn: 1,
        current: None,
        ready: false,
        book: Book::default(),
        keys: Keys::new(rand::random()),
        http: String::new(),
        lost: None,
        ended: false,
        left: false,
        failure: None,
    };
    let first = d.start().await;
    if let Err(e) = &first {
        d.failure = Some(e.clone());
        d.ended = true;
    }
    // `join` gave up waiting (its future was dropped): nobody holds the room.
    if joined.send(first).is_err() {
        d.ended = true;
    }
    while !d.ended {
        d.step().await;
    }
    d.finish().await;
}

impl Driver {
    fn gateway(&self) -> String {
        format!("{}/v1/rooms/{}/join", self.setup.base, self.setup.room)
    }

    fn dial_request(&self, post_url: String) -> DialRequest {
        DialRequest {
            post_url,
            token: self.setup.token.clone(),
            participant: self.participant.clone(),
            name: self.setup.opts.name.clone(),
            events: self.setup.opts.events.clone(),
            participants: self.setup.opts.participants.clone(),
        }
    }

    fn emit(&self, ev: RoomEvent) {
        let _ = self.events.send(ev);
    }

    fn set_state(&self, state: RoomState) {
        lock(&self.shared).state = state;
    }

    fn node(&self) -> String {
        lock(&self.shared).node.clone()
    }

    /// The first join, through the gateway, within [`JOIN_TIMEOUT`].
    async fn start(&mut self) -> Result<(), SdkError> {
        let deadline = Instant::now() + JOIN_TIMEOUT;
        let req = self.dial_request(self.gateway());
        let dialed = self
            .run_until(dial(req, deadline))
            .await
            .ok_or(SdkError::Closed)??;
        self.adopt(dialed, false, deadline).await?;
        self.set_state(RoomState::Joined);
        self.emit(RoomEvent::Connected { node: self.node() });
        Ok(())
    }

    /// Joined and idle: one frame, message or reconnect.
    async fn step(&mut self) {
        if let Some(reason) = self.lost.take() {
            self.reconnect(reason).await;
            return;
        }
        tokio::select! {
            m = self.msgs.recv() => match m {
                Some(Msg::Move { http, reply }) => self.move_to(http, reply).await,
                other => self.handle_msg(other).await,
            },
            Some((id, incoming)) = self.inbox.recv() => self.handle_incoming(id, incoming).await,
        }
    }

    /// Awaits `fut` while handling frames and the handle's messages; `None` when the room ended
    /// meanwhile.
    async fn run_until<F: Future>(&mut self, fut: F) -> Option<F::Output> {
        tokio::pin!(fut);
        loop {
            if self.ended {
                return None;
            }
            tokio::select! {
                out = &mut fut => return Some(out),
                m = self.msgs.recv() => self.handle_msg(m).await,
                Some((id, incoming)) = self.inbox.recv() => {
                    self.handle_incoming(id, incoming).await;
                }
            }
        }
    }

    async fn handle_msg(&mut self, m: Option<Msg>) {
        match m {
            Some(Msg::Command { frame, reply }) => self.command(frame, reply).await,
            Some(Msg::Move { reply, .. }) => {
                let busy = "the room is connecting or moving: try again once it is joined";
                let _ = reply.send(Err(SdkError::Invalid(busy.into())));
            }
            Some(Msg::Close { left }) => {
                self.left = left;
                self.ended = true;
            }
            None => self.ended = true,
        }
    }

    async fn command(&mut self, frame: Value, reply: Reply) {
        let keys = &mut self.keys;
        match frames::keyed(frame, || keys.next_key()) {
            Err(e) => {
                let _ = reply.send(Err(e));
            }
            Ok((key, text)) => {
                self.book.push(key, text, reply);
                if self.ready
                    && let Some(id) = self.current
                {
                    for text in self.book.outgoing(id, false) {
                        self.write(id, text).await;
                    }
                }
            }
        }
    }

    async fn write(&mut self, id: u64, text: String) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let frame = match frames::binary(&text) {
            Ok(b) => Message::Binary(b.into()),
            Err(e) => {
                tracing::error!(error = %e, "room frame without a binary form not sent");
                return;
            }
        };
        match tokio::time::timeout(WRITE_TIMEOUT, c.sink.send(frame)).await {
            Ok(Ok(())) => {}
            // The reader sees the socket go; what was not answered goes again after reconnecting.
            Ok(Err(e)) => tracing::debug!(error = %e, "room frame not sent"),
            Err(_) => tracing::debug!("room frame not sent within {WRITE_TIMEOUT:?}"),
        }
    }

    async fn handle_incoming(&mut self, id: u64, incoming: Incoming) {
        match incoming {
            Incoming::Frame(ServerFrame::Receipt(r)) => {
                if let Some(reply) = self.book.answer(&r.key) {
                    let _ = reply.send(Ok(r));
                }
            }
            Incoming::Frame(ServerFrame::Error { key, code, message }) => {
                if let Some(reply) = key.as_deref().and_then(|k| self.book.answer(k)) {
                    let _ = reply.send(Err(SdkError::Refused { code, message }));
                } else if self.current == Some(id) {
                    self.emit(RoomEvent::Error { code, message, key });
                }
            }
            Incoming::Frame(ServerFrame::Events(events)) => {
                if self.current != Some(id) {
                    return;
                }
                let applied: Vec<RoomEvent> = {
                    let mut s = lock(&self.shared);
                    events.into_iter().filter(|ev| s.view.apply(ev)).collect()
                };
                for ev in applied {
                    self.emit(ev);
                }
            }
            Incoming::Frame(ServerFrame::Welcome(_) | ServerFrame::Other) => {}
            Incoming::Closed { code, reason } => {
                let Some(conn) = self.conns.remove(&id) else {
                    return;
                };
                let why = format!("closed ({}): {reason}", code.unwrap_or(1006));
                let refusal = refusal(code, &reason);
                for reply in self.book.closed(id) {
                    let e = refusal
                        .clone()
                        .unwrap_or_else(|| SdkError::Disconnected(why.clone()));
                    let _ = reply.send(Err(e));
                }
                if self.current != Some(id) {
                    return;
                }
                self.current = None;
                self.ready = false;
                let joined = lock(&self.shared).state == RoomState::Joined;
                match refusal {
                    // The node refuses the token: trying again cannot help.
                    Some(e) if joined => self.fail(e),
                    _ if joined && !conn.retired => self.lost = Some(why),
                    _ => {}
                }
            }
        }
    }

    /// Makes the welcomed socket the room's: the state resynchronised from its welcome (the
    /// difference emitted when `announce`), `join` sent (fresh key); once its receipt came, every
    /// command not answered goes (again) on it.
    async fn adopt(
        &mut self,
        dialed: Dialed,
        announce: bool,
        deadline: Instant,
    ) -> Result<Receipt, SdkError> {
        let Dialed {
            ws,
            welcome,
            answer,
        } = dialed;
        let id = self.install(ws);
        self.current = Some(id);
        self.ready = false;
        let participant = Some(welcome.participant)
            .filter(|p| !p.is_empty())
            .unwrap_or(answer.participant);
        let node = Some(welcome.node)
            .filter(|n| !n.is_empty())
            .unwrap_or(answer.node);
        self.http = answer.http.trim_end_matches('/').to_owned();
        self.participant = Some(participant.clone());
        let changes = {
            let mut s = lock(&self.shared);
            s.participant.clone_from(&participant);
            s.node = node;
            s.view.resync(&welcome.state)
        };
        if announce {
            for ev in changes.into_iter().filter(|ev| self.wanted(ev)) {
                self.emit(ev);
            }
        }
        let name = self.setup.opts.name.clone().unwrap_or(participant);
        let key = self.keys.next_key();
        let join = frames::join(&name, &self.setup.opts.metadata);
        let (_, text) = frames::keyed(join, || key.clone())?;
        let (tx, rx) = oneshot::channel();
        self.book.push_join(key.clone(), text.clone(), id, tx);
        self.write(id, text).await;
        let receipt = match self.run_until(tokio::time::timeout_at(deadline, rx)).await {
            None => return Err(SdkError::Closed),
            Some(Err(_)) => {
                self.book.remove(&key);
                return Err(SdkError::Timeout(JOIN_TIMEOUT));
            }
            Some(Ok(Err(_))) => return Err(SdkError::Closed),
            Some(Ok(Ok(r))) => r?,
        };
        if self.current != Some(id) {
            return Err(SdkError::Disconnected("the room connection closed".into()));
        }
        self.ready = true;
        for text in self.book.outgoing(id, true) {
            self.write(id, text).await;
        }
        Ok(receipt)
    }

    /// Whether the initial subscription lets `ev` through (for the events the SDK makes up).
    fn wanted(&self, ev: &RoomEvent) -> bool {
        let (kind, who) = match ev {
            RoomEvent::Joined { participant, .. } => ("joined", participant),
            RoomEvent::Left { participant, .. } => ("left", participant),
            RoomEvent::Register { participant, .. } => ("register", participant),
            RoomEvent::Published { participant, .. } => ("published", participant),
            RoomEvent::Unpublished { participant, .. } => ("unpublished", participant),
            RoomEvent::Chat { participant, .. } => ("chat", participant),
            RoomEvent::Reactions { .. } => return self.wants_kind("reactions"),
            _ => return true,
        };
        if !self.wants_kind(kind) {
            return false;
        }
        kind != "register"
            || self
                .setup
                .opts
                .participants
                .as_ref()
                .is_none_or(|ps| ps.contains(who))
    }

    fn wants_kind(&self, kind: &str) -> bool {
        self.setup
            .opts
            .events
            .as_ref()
            .is_none_or(|e| e.iter().any(|x| x == kind))
    }

    fn install(&mut self, ws: Ws) -> u64 {
        let id = self.next_conn;
        self.next_conn += 1;
        let (sink, stream) = ws.split();
        let reader = tokio::spawn(read(id, stream, self.inbox_tx.clone()));
        self.conns.insert(
            id,
            Conn {
                sink,
                reader,
                retired: false,
            },
        );
        id
    }

    /// Closes socket `id` (a close frame, then the TCP connection); a join waiting on it fails.
    async fn close_conn(&mut self, id: u64) {
        if let Some(mut c) = self.conns.remove(&id) {
            let _ = tokio::time::timeout(Duration::from_secs(1), c.sink.close()).await;
        }
        for reply in self.book.closed(id) {
            let _ = reply.send(Err(SdkError::Disconnected(
                "the room connection was closed".into(),
            )));
        }
        if self.current == Some(id) {
            self.current = None;
            self.ready = false;
        }
    }

    /// The socket dropped: connect again through the gateway, with backoff, until joined (or
    /// refused for good).
    async fn reconnect(&mut self, mut reason: String) {
        self.set_state(RoomState::Reconnecting);
        self.ready = false;
        if let Some(id) = self.current.take() {
            self.close_conn(id).await;
        }
        for attempt in 1u32.. {
            let delay = backoff(attempt);
            self.emit(RoomEvent::Reconnecting {
                reason: reason.clone(),
                attempt,
                delay,
            });
            if self.run_until(tokio::time::sleep(delay)).await.is_none() {
                return;
            }
            let deadline = Instant::now() + JOIN_TIMEOUT;
            let req = self.dial_request(self.gateway());
            let Some(dialed) = self.run_until(dial(req, deadline)).await else {
                return;
            };
            let joined = match dialed {
                Ok(d) => self.adopt(d, true, deadline).await,
                Err(e) => Err(e),
            };
            match joined {
                Ok(_) => {
                    self.set_state(RoomState::Joined);
                    self.emit(RoomEvent::Connected { node: self.node() });
                    return;
                }
                Err(e) => {
                    if let Some(id) = self.current.take() {
                        self.close_conn(id).await;
                    }
                    if self.ended {
                        return;
                    }
                    if fatal(&e) {
                        self.fail(e);
                        return;
                    }
                    reason = e.to_string();
                }
            }
        }
    }

    /// [`super::Room::move_to`]: make before break.
    async fn move_to(&mut self, http: String, reply: oneshot::Sender<Result<(), SdkError>>) {
        let Some(old) = self
            .current
            .filter(|_| lock(&self.shared).state == RoomState::Joined)
        else {
            let _ = reply.send(Err(SdkError::Invalid("the room is not joined".into())));
            return;
        };
        if http == self.http {
            let _ = reply.send(Ok(()));
            return;
        }
        let from = self.node();
        let deadline = Instant::now() + JOIN_TIMEOUT;
        let req = self.dial_request(format!("{http}/v1/rooms/{}/join", self.setup.room));
        let dialed = match self.run_until(dial(req, deadline)).await {
            None => {
                let _ = reply.send(Err(SdkError::Closed));
                return;
            }
            // The old socket goes on.
            Some(Err(e)) => {
                let _ = reply.send(Err(e));
                return;
            }
            Some(Ok(d)) => d,
        };
        // From here on the new socket's events count; the old one still answers what was sent
        // on it until it closes.
        if let Some(c) = self.conns.get_mut(&old) {
            c.retired = true;
        }
        match self.adopt(dialed, true, deadline).await {
            Ok(_) => {
                self.lost = None;
                self.close_conn(old).await;
                let to = self.node();
                self.emit(RoomEvent::Moved { from, to });
                self.emit(RoomEvent::Connected { node: self.node() });
                let _ = reply.send(Ok(()));
            }
            Err(e) => {
                // Not joined there: start over through the gateway.
                self.close_conn(old).await;
                if let Some(id) = self.current.take() {
                    self.close_conn(id).await;
                }
                if !self.ended && self.lost.is_none() {
                    self.lost = Some(format!("moving to {http}: {e}"));
                }
                let _ = reply.send(Err(e));
            }
        }
    }

    fn fail(&mut self, e: SdkError) {
        self.emit(RoomEvent::Error {
            code: code(&e).to_owned(),
            message: e.to_string(),
            key: None,
        });
        self.failure = Some(e);
        self.ended = true;
    }

    /// The end: sockets closed, waiting commands answered.
    async fn finish(&mut self) {
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for id in ids {
            self.close_conn(id).await;
        }
        let err = self.failure.clone().unwrap_or(SdkError::Closed);
        for reply in self.book.drain() {
            let _ = reply.send(Err(err.clone()));
        }
        self.set_state(if self.failure.is_some() {
            RoomState::Failed
        } else if self.left {
            RoomState::Left
        } else {
            RoomState::Closed
        });
    }
}

/// An error after which trying again cannot help: refused credentials, a gateway that will not
/// place this participant, a node refusing the join.
fn fatal(e: &SdkError) -> bool {
    match e {
        SdkError::Unauthorized(_) | SdkError::Forbidden(_) | SdkError::Invalid(_) => true,
        SdkError::JoinFailed { status, .. } => matches!(status, 400 | 401 | 403 | 404),
        SdkError::Refused { code, .. } => code != "overloaded",
        _ => false,
    }
}

/// The code of a [`RoomEvent::Error`] for `e`.
fn code(e: &SdkError) -> &str {
    match e {
        SdkError::Refused { code, .. } => code.as_str(),
        SdkError::Unauthorized(_) => "unauthorized",
        SdkError::Forbidden(_) => "forbidden",
        SdkError::JoinFailed { .. } => "join-refused",
        SdkError::Timeout(_) => "timeout",
        SdkError::Disconnected(_) | SdkError::Closed => "closed",
        _ => "failed",
    }
}

pub(super) fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_250_ms_to_5_s() {
        let ms: Vec<u128> = (1..=8).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(ms, [250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
        assert_eq!(backoff(u32::MAX), BACKOFF_CAP);
    }

    #[test]
    fn fatal_errors_end_the_room() {
        assert!(fatal(&SdkError::JoinFailed {
            status: 404,
            message: String::new()
        }));
        assert!(!fatal(&SdkError::JoinFailed {
            status: 503,
            message: String::new()
        }));
        assert!(!fatal(&SdkError::Refused {
            code: "overloaded".into(),
            message: String::new()
        }));
        assert!(fatal(&SdkError::Refused {
            code: "bad_request".into(),
            message: String::new()
        }));
        assert!(!fatal(&SdkError::Disconnected(String::new())));
    }
}
