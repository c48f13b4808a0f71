//! Rooms (docs/rooms.md, "Signalling: joining a room"; docs/sdk.md, "Rooms (Rust)"): one
//! WebSocket to the node hosting the participant, commands carrying idempotency keys and answered
//! by receipts, the room's state kept from the welcome and the `events` frames.
//!
//! The decisions are pure and tested without a network: [`view`] keeps the state and diffs a
//! welcome against it, [`frames`] builds and parses frames, [`book`] holds the commands waiting
//! for their answers. [`driver`] is the tokio task around them — reconnecting through the gateway
//! with backoff, moving to another node make before break — and [`socket`] opens its sockets: the
//! join endpoint (ureq, off the runtime), the WebSocket (tokio-tungstenite) and its welcome.
//!
//! ```no_run
//! # async fn demo() -> Result<(), ferry_sdk::SdkError> {
//! use ferry_sdk::{FerryClient, JoinOptions, MediaKind, RoomEvent};
//!
//! let client = FerryClient::new("http://127.0.0.1:8080").with_token("…");
//! let opts = JoinOptions {
//!     participant: Some("alice".into()),
//!     name: Some("Alice".into()),
//!     ..JoinOptions::default()
//! };
//! let mut room = client.join("standup", opts).await?;
//! room.set_muted(MediaKind::Audio, true).await?;
//! room.send_chat("hi").await?;
//! while let Some(event) = room.next_event().await {
//!     if let RoomEvent::Chat { participant, text, .. } = event {
//!         println!("{participant}: {text}");
//!     }
//! }
//! # Ok(()) }
//! ```
mod book;
mod driver;
mod frames;
mod model;
mod socket;
mod view;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::client::FerryClient;
use crate::error::SdkError;
use driver::{Msg, Setup, Shared, lock};
pub use model::{
    ChatMessage, JOIN_TIMEOUT, JoinOptions, MediaKind, Participant, Receipt, RegisterValue,
    RoomEvent, RoomState, Track,
};

/// Whether `s` is an id of the protocol (`[A-Za-z0-9._-]{1,64}`).
pub(crate) fn is_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl FerryClient {
    /// Joins `room`: asks the gateway where to connect (`POST {base}/v1/rooms/{room}/join`),
    /// opens that node's room WebSocket, reads its welcome, sends `join` and returns once its
    /// receipt came (within [`JOIN_TIMEOUT`]). The room then keeps itself connected: it
    /// reconnects through the gateway when its socket drops and resends what was not answered.
    pub async fn join(&self, room: &str, opts: JoinOptions) -> Result<Room, SdkError> {
        if !is_id(room) {
            return Err(SdkError::Invalid(format!(
                "room id {room:?}: 1-64 of A-Z a-z 0-9 . _ -"
            )));
        }
        if let Some(p) = opts.participant.as_deref().filter(|p| !is_id(p)) {
            return Err(SdkError::Invalid(format!(
                "participant id {p:?}: 1-64 of A-Z a-z 0-9 . _ -"
            )));
        }
        if let Some(bad) = opts
            .events
            .iter()
            .flatten()
            .find(|e| !frames::EVENT_TYPES.contains(&e.as_str()))
        {
            return Err(SdkError::Invalid(format!("unknown event type {bad:?}")));
        }
        if let Some(bad) = opts.participants.iter().flatten().find(|p| !is_id(p)) {
            return Err(SdkError::Invalid(format!(
                "participant id {bad:?} in participants"
            )));
        }
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (tx, rx) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        let (joined_tx, joined) = oneshot::channel();
        let setup = Setup {
            room: room.to_owned(),
            base: self.base.clone(),
            token: self.token.clone(),
            opts,
        };
        tokio::spawn(driver::run(setup, shared.clone(), rx, events_tx, joined_tx));
        joined.await.map_err(|_| SdkError::Closed)??;
        let participant = lock(&shared).participant.clone();
        Ok(Room {
            name: room.to_owned(),
            participant,
            tx,
            events,
            shared,
        })
    }
}

/// A joined room: its state ([`Room::participants`], [`Room::chat`], [`Room::reactions`]) kept
/// up to date, commands answered by receipts, events from [`Room::next_event`]. Dropping it
/// closes it without leaving, like [`Room::close`].
#[derive(Debug)]
pub struct Room {
    name: String,
    participant: String,
    tx: mpsc::UnboundedSender<Msg>,
    events: mpsc::UnboundedReceiver<RoomEvent>,
    shared: Arc<Mutex<Shared>>,
}

impl Room {
    /// The room id.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This participant's id.
    pub fn participant(&self) -> &str {
        &self.participant
    }

    /// The node the room's socket is on.
    pub fn node(&self) -> String {
        lock(&self.shared).node.clone()
    }

    /// Where the room is.
    pub fn state(&self) -> RoomState {
        lock(&self.shared).state
    }

    /// The participants by id (this one included), as last told.
    pub fn participants(&self) -> BTreeMap<String, Participant> {
        lock(&self.shared).view.participants.clone()
    }

    /// The chat, in the order the room learned of it.
    pub fn chat(&self) -> Vec<ChatMessage> {
        lock(&self.shared).view.chat.clone()
    }

    /// The reactions counter.
    pub fn reactions(&self) -> i64 {
        lock(&self.shared).view.reactions
    }

    /// The next event (`None` once the room has ended and every event was read).
    pub async fn next_event(&mut self) -> Option<RoomEvent> {
        self.events.recv().await
    }

    /// An event, if one is waiting.
    pub fn try_event(&mut self) -> Option<RoomEvent> {
        self.events.try_recv().ok()
    }

    /// Sends a command frame (`{"type": …}`; a `key` is filled in when missing, one of its own
    /// is kept) and returns the node's receipt, or [`SdkError::Refused`] with its code. A command
    /// the socket dropped before it was answered goes again with its same key after the
    /// reconnect (a command the node had applied comes back `duplicate: true`).
    /// [`SdkError::Invalid`], before anything is sent, for what is not a command or has no
    /// protobuf form (an unknown field, a register value that is not a flag, text or null).
    pub async fn send(&self, frame: Value) -> Result<Receipt, SdkError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Msg::Command { frame, reply })
            .map_err(|_| SdkError::Closed)?;
        answer.await.map_err(|_| SdkError::Closed)?
    }

    /// Mutes or unmutes this participant's audio or video (the register; the media is the app's).
    pub async fn set_muted(&self, kind: MediaKind, muted: bool) -> Result<Receipt, SdkError> {
        self.send(frames::set_muted(kind, muted)).await
    }

    /// Raises (or lowers) this participant's hand.
    pub async fn raise_hand(&self, raised: bool) -> Result<Receipt, SdkError> {
        self.send(frames::raise_hand(raised)).await
    }

    /// Sets a custom attribute (`None` deletes it).
    pub async fn set_attribute(
        &self,
        name: &str,
        value: Option<&str>,
    ) -> Result<Receipt, SdkError> {
        self.send(frames::set_attribute(name, value)).await
    }

    /// Sends a chat message.
    pub async fn send_chat(&self, text: &str) -> Result<Receipt, SdkError> {
        self.send(frames::chat(text)).await
    }

    /// Adds `delta` (±1..1000) to the reactions counter.
    pub async fn react(&self, delta: i64) -> Result<Receipt, SdkError> {
        self.send(frames::react(delta)).await
    }

    /// Announces the WHIP `stream` as this participant's `track` (the `publish` command only:
    /// the media is published separately, e.g. with [`FerryClient::publish`]).
    pub async fn publish_track(
        &self,
        track: &str,
        stream: &str,
        kind: MediaKind,
    ) -> Result<Receipt, SdkError> {
        self.send(frames::publish(track, stream, kind)).await
    }

    /// Withdraws `track`.
    pub async fn unpublish_track(&self, track: &str) -> Result<Receipt, SdkError> {
        self.send(frames::unpublish(track)).await
    }

    /// Leaves the room (tracks and registers go with the participant), then closes the socket.
    pub async fn leave(&self) -> Result<Receipt, SdkError> {
        let receipt = self.send(frames::leave()).await?;
        let _ = self.tx.send(Msg::Close { left: true });
        Ok(receipt)
    }

    /// Stops without leaving: the node keeps the participant for its grace period (10 s).
    pub fn close(self) {
        let _ = self.tx.send(Msg::Close { left: false });
    }

    /// Moves the room's socket to the node at `http_base` (`http://host:port`), make before
    /// break: `POST {http_base}/v1/rooms/{room}/join` (same participant), its socket's welcome
    /// (diffed against the state, the difference emitted), `join`, the unanswered commands again;
    /// then the old socket closes and [`RoomEvent::Moved`] is emitted. When the new node cannot
    /// be joined the old socket goes on (the error is returned).
    pub async fn move_to(&self, http_base: &str) -> Result<(), SdkError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Msg::Move {
                http: http_base.trim_end_matches('/').to_owned(),
                reply,
            })
            .map_err(|_| SdkError::Closed)?;
        answer.await.map_err(|_| SdkError::Closed)?
    }
}
