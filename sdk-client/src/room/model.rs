//! The room as an app sees it: its participants, tracks, registers and chat, the events it
//! reports, its state, and the options and time limits of joining.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
