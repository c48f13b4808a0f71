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
mod socket;
mod view;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::client::{FerryClient, SdkError};
use driver::{Msg, Setup, Shared};

/// The first join (POST, WebSocket, welcome, receipt), and each later connection, get this long.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Options of [`FerryClient::join`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinOptions {
    /// The participant id (`[A-Za-z0-9._-]{1,64}`, stable across reconnects); `None`: the join
    /// endpoint makes one up.
    pub participant: Option<String>,
    /// Display name (`None`: the participant id).
    pub name: Option<String>,
    /// Opaque metadata carried by the join.
    pub metadata: String,
    /// The connection's initial subscription: which event types it gets (`joined`, `left`,
    /// `register`, `published`, `unpublished`, `chat`, `reactions`; `None`: all). It also cuts
    /// the welcome: participants only with `joined` (or named in `participants`), chat only with
    /// `chat`.
    pub events: Option<Vec<String>>,
    /// Whose `register` events the connection gets (`None`: everyone's).
    pub participants: Option<Vec<String>>,
}

/// `audio` or `video`: a mute register, a track's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaKind {
    /// Microphone.
    Audio,
    /// Camera.
    Video,
}

impl MediaKind {
    /// The protocol's name.
    pub fn as_str(self) -> &'static str {
        match self {
            MediaKind::Audio => "audio",
            MediaKind::Video => "video",
        }
    }
}

/// One participant as the room last told: the welcome's `STATE` entry, kept up to date by events.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Participant {
    /// Display name (of the latest join).
    pub name: String,
    /// Metadata (of the latest join).
    pub metadata: String,
    /// Microphone muted.
    pub audio_muted: bool,
    /// Camera off.
    pub video_muted: bool,
    /// Hand raised.
    pub hand_raised: bool,
    /// `grid`, `speaker` or `sidebar`, if set.
    pub layout: Option<String>,
    /// Custom attributes.
    pub attributes: BTreeMap<String, String>,
    /// Published tracks by track id.
    pub tracks: BTreeMap<String, Track>,
}

/// A published track.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Track {
    /// The WHIP stream carrying it.
    pub stream: String,
    /// `audio` or `video`.
    pub kind: String,
}

/// One chat message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatMessage {
    /// Author.
    pub participant: String,
    /// Text.
    pub text: String,
    /// Its stamp (`wall.logical.replica`: unique, sortable by wall clock).
    pub stamp: String,
    /// Wall-clock ms of the stamp.
    pub at: u64,
}

/// A command's answer: the node applied it (or it was a retry of a key it had applied).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Receipt {
    /// The command's idempotency key.
    pub key: String,
    /// A retry: the first receipt again, nothing changed.
    pub duplicate: bool,
    /// The stamp of the op the command made.
    pub stamp: String,
}

/// A register written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterValue {
    /// `audio_muted`.
    AudioMuted(bool),
    /// `video_muted`.
    VideoMuted(bool),
    /// `hand_raised`.
    HandRaised(bool),
    /// `layout` (`None`: unset).
    Layout(Option<String>),
    /// A custom attribute (`None`: deleted).
    Attribute {
        /// Its name.
        name: String,
        /// Its value.
        value: Option<String>,
    },
}

/// Something that happened in the room or to its connection.
///
/// The first seven are the server's events with its fields; `resync` marks those the SDK found
/// by diffing a new connection's welcome against what it had (after a reconnect or a move).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RoomEvent {
    /// A participant entered (or refreshed its name/metadata by joining again).
    Joined {
        /// Who.
        participant: String,
        /// Display name.
        name: String,
        /// Metadata.
        metadata: String,
        /// Found by diffing a welcome.
        resync: bool,
    },
    /// A participant left (or its grace period after a lost connection ran out).
    Left {
        /// Who.
        participant: String,
        /// Found by diffing a welcome.
        resync: bool,
    },
    /// A register changed.
    Register {
        /// Whose.
        participant: String,
        /// Which, and its value now.
        value: RegisterValue,
        /// Found by diffing a welcome.
        resync: bool,
    },
    /// A track was announced.
    Published {
        /// Whose.
        participant: String,
        /// Track id.
        track: String,
        /// WHIP stream.
        stream: String,
        /// `audio` or `video`.
        kind: String,
        /// Found by diffing a welcome.
        resync: bool,
    },
    /// A track was withdrawn.
    Unpublished {
        /// Whose.
        participant: String,
        /// Track id.
        track: String,
        /// Found by diffing a welcome.
        resync: bool,
    },
    /// A chat message.
    Chat {
        /// Author.
        participant: String,
        /// Text.
        text: String,
        /// Its stamp.
        stamp: String,
        /// Wall-clock ms of the stamp.
        at: u64,
        /// Found by diffing a welcome.
        resync: bool,
    },
    /// The reactions counter.
    Reactions {
        /// Its total now.
        total: i64,
        /// Found by diffing a welcome.
        resync: bool,
    },
    /// Joined on `node` again (after a reconnect or a move).
    Connected {
        /// The node the socket is on.
        node: String,
    },
    /// The socket dropped (or a try failed); the next try comes after `delay`.
    Reconnecting {
        /// Why.
        reason: String,
        /// 1, 2, …
        attempt: u32,
        /// Backoff before this try.
        delay: Duration,
    },
    /// [`Room::move_to`] made its move.
    Moved {
        /// The node before.
        from: String,
        /// The node now.
        to: String,
    },
    /// An error frame no command waited for, or what ended the room.
    Error {
        /// The protocol's code (or the SDK's: `unauthorized`, `join-refused`, …).
        code: String,
        /// For people.
        message: String,
        /// The key of the command it is about, if any.
        key: Option<String>,
    },
}

/// Where a room is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RoomState {
    /// Connecting for the first time.
    #[default]
    Joining,
    /// Joined: commands go out at once.
    Joined,
    /// The socket dropped: connecting again (commands wait).
    Reconnecting,
    /// [`Room::leave`] was answered.
    Left,
    /// Closed without leaving (the node keeps the participant for its grace period).
    Closed,
    /// Given up (the last [`RoomEvent::Error`] says why).
    Failed,
}

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

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
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
