//! What clients ask for (`Command`) and what replicas exchange (`Op`).
//!
//! A replica turns a validated `Command` into exactly one `Op`: it stamps it with its HLC,
//! gives it the next dot and resolves removals into the dots it observed (observed-remove).
//! Every `Op` is a delta of the room state, so applying it is a join: order-independent and
//! idempotent.

use ferry_proto::ids::{StreamId, TrackId};
use serde::{Deserialize, Serialize};

use crate::context::Dot;
use crate::hlc::Hlc;
use crate::ids::{IdempotencyKey, ParticipantId, RoomId};

/// Longest participant name, bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest participant metadata, bytes.
pub const MAX_METADATA_BYTES: usize = 4096;
/// Longest custom attribute key, bytes.
pub const MAX_ATTRIBUTE_KEY_BYTES: usize = 64;
/// Longest custom attribute value, bytes.
pub const MAX_ATTRIBUTE_VALUE_BYTES: usize = 1024;
/// Most custom attributes one participant may hold.
pub const MAX_ATTRIBUTES: usize = 32;
/// Longest chat message, bytes.
pub const MAX_CHAT_BYTES: usize = 4096;
/// Largest reaction step of one command.
pub const MAX_REACTION_STEP: i64 = 1000;

/// A per-participant register (last writer wins by HLC).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum Register {
    /// Microphone muted (`Value::Flag`).
    AudioMuted,
    /// Camera off (`Value::Flag`).
    VideoMuted,
    /// Hand raised (`Value::Flag`).
    HandRaised,
    /// Preferred layout (`Value::Layout`).
    Layout,
    /// A custom attribute (`Value::Text`; `None` deletes it).
    Attribute(String),
}

/// A register value.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum Value {
    /// A boolean register.
    Flag(bool),
    /// The layout register.
    Layout(Layout),
    /// A custom attribute; `None` is a deletion.
    Text(Option<String>),
}

/// Layouts a participant can ask for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum Layout {
    /// Everyone in a grid.
    Grid,
    /// The active speaker large.
    Speaker,
    /// One pinned tile large, a strip beside it.
    Sidebar,
}

/// Kind of a published track.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum TrackKind {
    /// An audio track.
    Audio,
    /// A video track.
    Video,
}

/// A client's request, before a replica stamps it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Command {
    /// Enter the room (again: a rejoin refreshes name and metadata).
    Join {
        /// Who.
        participant: ParticipantId,
        /// Display name.
        name: String,
        /// Application metadata, opaque.
        metadata: String,
    },
    /// Leave the room: removes the participant, its tracks and its registers as observed.
    Leave {
        /// Who.
        participant: ParticipantId,
    },
    /// Write a register.
    Set {
        /// Whose register.
        participant: ParticipantId,
        /// Which.
        register: Register,
        /// The new value.
        value: Value,
    },
    /// Announce a published track (a WHIP stream of the participant).
    Publish {
        /// Who publishes.
        participant: ParticipantId,
        /// The track's id in the room.
        track: TrackId,
        /// The WHIP stream carrying it.
        stream: StreamId,
        /// Audio or video.
        kind: TrackKind,
    },
    /// Withdraw a published track.
    Unpublish {
        /// Who.
        participant: ParticipantId,
        /// Which track.
        track: TrackId,
    },
    /// Add (or, negative, take back) reactions.
    React {
        /// Who reacts.
        participant: ParticipantId,
        /// Step, non-zero, at most `MAX_REACTION_STEP` in size.
        delta: i64,
    },
    /// Post a chat message.
    Chat {
        /// Author.
        participant: ParticipantId,
        /// Text.
        text: String,
    },
}

impl Command {
    /// The participant the command acts for.
    pub fn participant(&self) -> &ParticipantId {
        match self {
            Command::Join { participant, .. }
            | Command::Leave { participant }
            | Command::Set { participant, .. }
            | Command::Publish { participant, .. }
            | Command::Unpublish { participant, .. }
            | Command::React { participant, .. }
            | Command::Chat { participant, .. } => participant,
        }
    }

    /// Checks sizes and register/value kinds.
    pub fn validate(&self) -> Result<(), CommandError> {
        fn limit(what: &'static str, len: usize, max: usize) -> Result<(), CommandError> {
            if len > max {
                return Err(CommandError::TooLarge { what, len, max });
            }
            Ok(())
        }
        match self {
            Command::Join { name, metadata, .. } => {
                limit("name", name.len(), MAX_NAME_BYTES)?;
                limit("metadata", metadata.len(), MAX_METADATA_BYTES)
            }
            Command::Set {
                register, value, ..
            } => match (register, value) {
                (
                    Register::AudioMuted | Register::VideoMuted | Register::HandRaised,
                    Value::Flag(_),
                )
                | (Register::Layout, Value::Layout(_)) => Ok(()),
                (Register::Attribute(key), Value::Text(text)) => {
                    if key.is_empty() {
                        return Err(CommandError::BadValue("empty attribute key"));
                    }
                    limit("attribute key", key.len(), MAX_ATTRIBUTE_KEY_BYTES)?;
                    limit(
                        "attribute value",
                        text.as_ref().map_or(0, String::len),
                        MAX_ATTRIBUTE_VALUE_BYTES,
                    )
                }
                _ => Err(CommandError::BadValue(
                    "value kind does not fit the register",
                )),
            },
            Command::React { delta, .. } => {
                if *delta == 0 || delta.unsigned_abs() > MAX_REACTION_STEP.unsigned_abs() {
                    return Err(CommandError::BadValue("reaction step out of range"));
                }
                Ok(())
            }
            Command::Chat { text, .. } => {
                if text.is_empty() {
                    return Err(CommandError::BadValue("empty chat message"));
                }
                limit("chat message", text.len(), MAX_CHAT_BYTES)
            }
            Command::Leave { .. } | Command::Publish { .. } | Command::Unpublish { .. } => Ok(()),
        }
    }
}

/// Why a replica refused a command. Nothing was applied and the key was not consumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// A field is over its size limit.
    #[error("{what} is {len} bytes, at most {max} allowed")]
    TooLarge {
        /// Which field.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value does not make sense.
    #[error("bad value: {0}")]
    BadValue(&'static str),
    /// The participant is not in the room (as this replica sees it).
    #[error("participant is not in the room")]
    NotInRoom,
    /// The participant already holds `MAX_ATTRIBUTES` custom attributes.
    #[error("too many custom attributes")]
    TooManyAttributes,
    /// No such track is published by the participant.
    #[error("no such track")]
    UnknownTrack,
    /// The idempotency key was used before for a different command.
    #[error("idempotency key reused for a different command")]
    KeyReused,
    /// The idempotency store is full of keys younger than its retention: retry later.
    #[error("too many operations in flight, retry in {retry_after_ms} ms")]
    Overloaded {
        /// When a slot frees up.
        retry_after_ms: u64,
    },
}

/// One stamped operation, as replicas exchange it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Op {
    /// The room it belongs to.
    pub room: RoomId,
    /// Its identity.
    pub dot: Dot,
    /// Its HLC stamp (orders LWW writes and chat).
    pub stamp: Hlc,
    /// The client's idempotency key.
    pub key: IdempotencyKey,
    /// What it does.
    pub kind: OpKind,
}

/// The effect of an operation.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum OpKind {
    /// Adds a join entry for the participant (OR-Set add).
    Join {
        /// Who.
        participant: ParticipantId,
        /// Display name.
        name: String,
        /// Metadata.
        metadata: String,
    },
    /// Removes the observed join entries, tracks and registers of the participant.
    Leave {
        /// Who.
        participant: ParticipantId,
        /// The dots it observed.
        removed: Vec<Dot>,
    },
    /// Writes a register.
    Set {
        /// Whose.
        participant: ParticipantId,
        /// Which.
        register: Register,
        /// Value.
        value: Value,
    },
    /// Adds a track entry (OR-Set add).
    Publish {
        /// Who.
        participant: ParticipantId,
        /// Track id.
        track: TrackId,
        /// WHIP stream.
        stream: StreamId,
        /// Audio or video.
        kind: TrackKind,
    },
    /// Removes the observed entries of one track.
    Unpublish {
        /// Whose.
        participant: ParticipantId,
        /// Which track.
        track: TrackId,
        /// The dots it observed.
        removed: Vec<Dot>,
    },
    /// The origin replica's reaction totals after this operation (a PN-counter delta).
    React {
        /// Who reacted.
        participant: ParticipantId,
        /// All increments stamped by the origin replica so far.
        up: u64,
        /// All decrements stamped by the origin replica so far.
        down: u64,
    },
    /// Appends a chat message.
    Chat {
        /// Author.
        participant: ParticipantId,
        /// Text.
        text: String,
    },
}

impl OpKind {
    /// The command that made this operation, where the operation tells it (a reaction's op
    /// carries running totals, not the step: `None`).
    pub fn command(&self) -> Option<Command> {
        Some(match self.clone() {
            OpKind::Join {
                participant,
                name,
                metadata,
            } => Command::Join {
                participant,
                name,
                metadata,
            },
            OpKind::Leave { participant, .. } => Command::Leave { participant },
            OpKind::Set {
                participant,
                register,
                value,
            } => Command::Set {
                participant,
                register,
                value,
            },
            OpKind::Publish {
                participant,
                track,
                stream,
                kind,
            } => Command::Publish {
                participant,
                track,
                stream,
                kind,
            },
            OpKind::Unpublish {
                participant, track, ..
            } => Command::Unpublish { participant, track },
            OpKind::React { .. } => return None,
            OpKind::Chat { participant, text } => Command::Chat { participant, text },
        })
    }

    /// The participant the operation concerns.
    pub fn participant(&self) -> &ParticipantId {
        match self {
            OpKind::Join { participant, .. }
            | OpKind::Leave { participant, .. }
            | OpKind::Set { participant, .. }
            | OpKind::Publish { participant, .. }
            | OpKind::Unpublish { participant, .. }
            | OpKind::React { participant, .. }
            | OpKind::Chat { participant, .. } => participant,
        }
    }
}
