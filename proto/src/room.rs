//! The room WebSocket's binary frames (docs/rooms.md, "Signalling"): protobuf messages, one per
//! WebSocket binary frame, that carry exactly what the JSON text frames carry.
//!
//! Both forms are one model: every frame converts from its JSON form (`from_json`) and back
//! (`to_json`) without loss, so the node and the SDKs keep one frame model and choose the
//! encoding per connection. Field tags only ever grow; a decoder ignores fields it does not know.
//! Decoding never panics: arbitrary bytes or JSON give a [`WireError`].

use std::collections::BTreeMap;

use prost::Message as _;
use serde_json::{Map, Value, json};

/// Event types a subscription may name (`subscribe`'s `events`).
pub const EVENT_TYPES: [&str; 7] = [
    "joined",
    "left",
    "register",
    "published",
    "unpublished",
    "chat",
    "reactions",
];

/// `format` of the WebSocket URL that asks for JSON text frames.
pub const FORMAT_JSON: &str = "json";
/// `format` of the WebSocket URL that asks for protobuf binary frames (the default).
pub const FORMAT_PROTOBUF: &str = "protobuf";

/// A frame that is not a room frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The bytes are not a protobuf frame.
    #[error("not a protobuf room frame: {0}")]
    Decode(String),
    /// A protobuf frame with no frame in it (or one of a newer version).
    #[error("a frame of no known type")]
    Empty,
    /// The JSON form is not a frame: which frame (or field) and why.
    #[error("{0}")]
    Json(String),
}

fn bad(why: impl Into<String>) -> WireError {
    WireError::Json(why.into())
}

/// Strict reader of one JSON frame object: every field it does not ask for is an error.
struct Fields<'a> {
    what: &'a str,
    map: &'a Map<String, Value>,
    taken: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    fn new(v: &'a Value, what: &'a str) -> Result<Self, WireError> {
        let map = v
            .as_object()
            .ok_or_else(|| bad(format!("{what} is not a JSON object")))?;
        Ok(Fields {
            what,
            map,
            taken: vec!["type"],
        })
    }

    fn get(&mut self, name: &'static str) -> Option<&'a Value> {
        self.taken.push(name);
        self.map.get(name).filter(|v| !v.is_null())
    }

    fn wrong(&self, name: &str, want: &str) -> WireError {
        bad(format!("{}: {name} must be {want}", self.what))
    }

    fn opt_str(&mut self, name: &'static str) -> Result<Option<String>, WireError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.wrong(name, "a string")),
        }
    }

    /// A string field; missing is `""`.
    fn str(&mut self, name: &'static str) -> Result<String, WireError> {
        Ok(self.opt_str(name)?.unwrap_or_default())
    }

    fn bool(&mut self, name: &'static str) -> Result<bool, WireError> {
        match self.get(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.wrong(name, "true or false")),
        }
    }

    fn u64(&mut self, name: &'static str) -> Result<u64, WireError> {
        match self.get(name) {
            None => Ok(0),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| self.wrong(name, "a whole number ≥ 0")),
        }
    }

    fn i64(&mut self, name: &'static str) -> Result<i64, WireError> {
        match self.get(name) {
            None => Ok(0),
            Some(v) => v.as_i64().ok_or_else(|| self.wrong(name, "a whole number")),
        }
    }

    fn value(&mut self, name: &'static str) -> Result<Option<register::Value>, WireError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(register::Value::Flag(*b))),
            Some(Value::String(s)) => Ok(Some(register::Value::Text(s.clone()))),
            Some(_) => Err(self.wrong(name, "true, false, a string or null")),
        }
    }

    fn list(&mut self, name: &'static str) -> Result<Option<StringList>, WireError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let items = v.as_array().ok_or_else(|| self.wrong(name, "a list"))?;
        let items = items
            .iter()
            .map(|i| i.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| self.wrong(name, "a list of strings"))?;
        Ok(Some(StringList { items }))
    }

    fn object(&mut self, name: &'static str) -> Result<Option<&'a Map<String, Value>>, WireError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(self.wrong(name, "an object")),
        }
    }

    fn array(&mut self, name: &'static str) -> Result<&'a [Value], WireError> {
        match self.get(name) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(_) => Err(self.wrong(name, "a list")),
        }
    }

    /// Refuses the fields nobody asked for.
    fn done(self) -> Result<(), WireError> {
        match self.map.keys().find(|k| !self.taken.contains(&k.as_str())) {
            Some(k) => Err(bad(format!("{}: unknown field {k:?}", self.what))),
            None => Ok(()),
        }
    }
}

fn frame_type(v: &Value) -> Result<&str, WireError> {
    v.get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("a frame needs a string type"))
}

fn value_json(v: &Option<register::Value>) -> Value {
    match v {
        None => Value::Null,
        Some(register::Value::Flag(b)) => json!(b),
        Some(register::Value::Text(s)) => json!(s),
    }
}

fn list_json(l: &Option<StringList>) -> Value {
    l.as_ref().map_or(Value::Null, |l| json!(l.items))
}

/// A list of strings that may be absent (`null`) rather than empty.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringList {
    /// The strings.
    #[prost(string, repeated, tag = "1")]
    pub items: Vec<String>,
}

/// A register's value: a flag, a text, or none (`null`: no layout, a deleted attribute).
pub mod register {
    /// The value.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        /// `audio_muted`, `video_muted`, `hand_raised`.
        #[prost(bool, tag = "10")]
        Flag(bool),
        /// `layout`, `attribute`.
        #[prost(string, tag = "11")]
        Text(String),
    }
}

// ---------------------------------------------------------------------------------------------
// Client → node

/// A frame from a client.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClientFrame {
    /// What it asks.
    #[prost(oneof = "client_frame::Frame", tags = "1, 2, 3, 4, 5, 6, 7, 8")]
    pub frame: Option<client_frame::Frame>,
}

/// The client frames.
pub mod client_frame {
    use super::{StringList, register};

    /// One of the client frames.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Frame {
        /// `join`.
        #[prost(message, tag = "1")]
        Join(Join),
        /// `leave`.
        #[prost(message, tag = "2")]
        Leave(Leave),
        /// `set`.
        #[prost(message, tag = "3")]
        Set(Set),
        /// `publish`.
        #[prost(message, tag = "4")]
        Publish(Publish),
        /// `unpublish`.
        #[prost(message, tag = "5")]
        Unpublish(Unpublish),
        /// `react`.
        #[prost(message, tag = "6")]
        React(React),
        /// `chat`.
        #[prost(message, tag = "7")]
        Chat(Chat),
        /// `subscribe`.
        #[prost(message, tag = "8")]
        Subscribe(Subscribe),
    }

    /// Enter the room.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Join {
        /// Idempotency key.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
        /// Display name.
        #[prost(string, tag = "2")]
        pub name: String,
        /// Opaque metadata.
        #[prost(string, tag = "3")]
        pub metadata: String,
    }

    /// Leave the room.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Leave {
        /// Idempotency key.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
    }

    /// Write a register.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Set {
        /// Idempotency key.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
        /// `audio_muted`, `video_muted`, `hand_raised`, `layout`, `attribute`.
        #[prost(string, tag = "2")]
        pub register: String,
        /// The attribute's name (`attribute` only).
        #[prost(string, optional, tag = "3")]
        pub name: Option<String>,
        /// The value (none: `null`).
        #[prost(oneof = "register::Value", tags = "10, 11")]
        pub value: Option<register::Value>,
    }

    /// Announce a track.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Publish {
        /// Idempotency key.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
        /// Track id.
        #[prost(string, tag = "2")]
        pub track: String,
        /// WHIP stream.
        #[prost(string, tag = "3")]
        pub stream: String,
        /// `audio` / `video`.
        #[prost(string, tag = "4")]
        pub kind: String,
    }

    /// Withdraw a track.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Unpublish {
        /// Idempotency key.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
        /// Track id.
        #[prost(string, tag = "2")]
        pub track: String,
    }

    /// Step the reactions counter.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct React {
        /// Idempotency key.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
        /// Step.
        #[prost(sint64, tag = "2")]
        pub delta: i64,
    }

    /// A chat message.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Chat {
        /// Idempotency key.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
        /// Text.
        #[prost(string, tag = "2")]
        pub text: String,
    }

    /// Lazy subscription.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Subscribe {
        /// Echoed in the answer.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
        /// Event types wanted (none: all).
        #[prost(message, optional, tag = "2")]
        pub events: Option<StringList>,
        /// Whose register events (none: everyone's).
        #[prost(message, optional, tag = "3")]
        pub participants: Option<StringList>,
    }
}

impl ClientFrame {
    /// The frame of a JSON client frame (`{"type": "join", …}`).
    pub fn from_json(v: &Value) -> Result<Self, WireError> {
        use client_frame::*;
        let kind = frame_type(v)?;
        let mut f = Fields::new(v, kind)?;
        let frame = match kind {
            "join" => Frame::Join(Join {
                key: f.opt_str("key")?,
                name: f.str("name")?,
                metadata: f.str("metadata")?,
            }),
            "leave" => Frame::Leave(Leave {
                key: f.opt_str("key")?,
            }),
            "set" => Frame::Set(Set {
                key: f.opt_str("key")?,
                register: f.str("register")?,
                name: f.opt_str("name")?,
                value: f.value("value")?,
            }),
            "publish" => Frame::Publish(Publish {
                key: f.opt_str("key")?,
                track: f.str("track")?,
                stream: f.str("stream")?,
                kind: f.str("kind")?,
            }),
            "unpublish" => Frame::Unpublish(Unpublish {
                key: f.opt_str("key")?,
                track: f.str("track")?,
            }),
            "react" => Frame::React(React {
                key: f.opt_str("key")?,
                delta: f.i64("delta")?,
            }),
            "chat" => Frame::Chat(Chat {
                key: f.opt_str("key")?,
                text: f.str("text")?,
            }),
            "subscribe" => Frame::Subscribe(Subscribe {
                key: f.opt_str("key")?,
                events: f.list("events")?,
                participants: f.list("participants")?,
            }),
            other => return Err(bad(format!("unknown client frame type {other:?}"))),
        };
        f.done()?;
        Ok(ClientFrame { frame: Some(frame) })
    }

    /// The JSON form.
    pub fn to_json(&self) -> Result<Value, WireError> {
        use client_frame::Frame;
        let mut out = match self.frame.as_ref().ok_or(WireError::Empty)? {
            Frame::Join(j) => (
                &j.key,
                json!({"type": "join", "name": j.name, "metadata": j.metadata}),
            ),
            Frame::Leave(l) => (&l.key, json!({"type": "leave"})),
            Frame::Set(s) => {
                let mut v = json!({"type": "set", "register": s.register,
                                   "value": value_json(&s.value)});
                if let Some(n) = &s.name {
                    v["name"] = json!(n);
                }
                (&s.key, v)
            }
            Frame::Publish(p) => (
                &p.key,
                json!({"type": "publish", "track": p.track, "stream": p.stream, "kind": p.kind}),
            ),
            Frame::Unpublish(u) => (&u.key, json!({"type": "unpublish", "track": u.track})),
            Frame::React(r) => (&r.key, json!({"type": "react", "delta": r.delta})),
            Frame::Chat(c) => (&c.key, json!({"type": "chat", "text": c.text})),
            Frame::Subscribe(s) => (
                &s.key,
                json!({"type": "subscribe", "events": list_json(&s.events),
                       "participants": list_json(&s.participants)}),
            ),
        };
        if let Some(k) = out.0 {
            out.1["key"] = json!(k);
        }
        Ok(out.1)
    }
}

// ---------------------------------------------------------------------------------------------
// Node → client

/// A frame from the node.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerFrame {
    /// What it says.
    #[prost(oneof = "server_frame::Frame", tags = "1, 2, 3, 4, 5")]
    pub frame: Option<server_frame::Frame>,
}

/// The node's frames.
pub mod server_frame {
    use super::{Event, RoomState};

    /// One of the node's frames.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Frame {
        /// `welcome`.
        #[prost(message, tag = "1")]
        Welcome(Welcome),
        /// `receipt`.
        #[prost(message, tag = "2")]
        Receipt(Receipt),
        /// `error`.
        #[prost(message, tag = "3")]
        Error(Error),
        /// `events`.
        #[prost(message, tag = "4")]
        Events(Events),
        /// `subscribed`.
        #[prost(message, tag = "5")]
        Subscribed(Subscribed),
    }

    /// The first frame: the room as the node sees it.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Welcome {
        /// Room id.
        #[prost(string, tag = "1")]
        pub room: String,
        /// The connection's participant.
        #[prost(string, tag = "2")]
        pub participant: String,
        /// The node.
        #[prost(string, tag = "3")]
        pub node: String,
        /// Its merge window.
        #[prost(uint64, tag = "4")]
        pub window_ms: u64,
        /// The room.
        #[prost(message, optional, tag = "5")]
        pub state: Option<RoomState>,
    }

    /// A command was applied (or was a retry).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Receipt {
        /// Its idempotency key.
        #[prost(string, tag = "1")]
        pub key: String,
        /// A retry: nothing changed.
        #[prost(bool, tag = "2")]
        pub duplicate: bool,
        /// The operation's stamp.
        #[prost(string, tag = "3")]
        pub stamp: String,
    }

    /// A refused frame.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Error {
        /// The frame's key, if it had one.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
        /// Machine-readable.
        #[prost(string, tag = "2")]
        pub code: String,
        /// For people.
        #[prost(string, tag = "3")]
        pub message: String,
    }

    /// A merge window's events.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Events {
        /// In order.
        #[prost(message, repeated, tag = "1")]
        pub events: Vec<Event>,
    }

    /// A subscription took effect.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Subscribed {
        /// The request's key.
        #[prost(string, optional, tag = "1")]
        pub key: Option<String>,
    }
}

/// The room in a welcome.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RoomState {
    /// Participants by id (those the connection's subscription lists).
    #[prost(btree_map = "string, message", tag = "1")]
    pub participants: BTreeMap<String, ParticipantState>,
    /// How many are in the room.
    #[prost(uint64, tag = "2")]
    pub participant_count: u64,
    /// Chat, in order.
    #[prost(message, repeated, tag = "3")]
    pub chat: Vec<ChatEntry>,
    /// Reactions counter.
    #[prost(sint64, tag = "4")]
    pub reactions: i64,
}

/// A participant in a welcome.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ParticipantState {
    /// Display name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Metadata.
    #[prost(string, tag = "2")]
    pub metadata: String,
    /// Registers.
    #[prost(bool, tag = "3")]
    pub audio_muted: bool,
    /// Registers.
    #[prost(bool, tag = "4")]
    pub video_muted: bool,
    /// Registers.
    #[prost(bool, tag = "5")]
    pub hand_raised: bool,
    /// Layout (none: `null`).
    #[prost(string, optional, tag = "6")]
    pub layout: Option<String>,
    /// Custom attributes.
    #[prost(btree_map = "string, string", tag = "7")]
    pub attributes: BTreeMap<String, String>,
    /// Published tracks by id.
    #[prost(btree_map = "string, message", tag = "8")]
    pub tracks: BTreeMap<String, TrackInfo>,
}

/// A published track.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackInfo {
    /// WHIP stream.
    #[prost(string, tag = "1")]
    pub stream: String,
    /// `audio` / `video`.
    #[prost(string, tag = "2")]
    pub kind: String,
}

/// A chat message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChatEntry {
    /// Who.
    #[prost(string, tag = "1")]
    pub participant: String,
    /// What.
    #[prost(string, tag = "2")]
    pub text: String,
    /// Its stamp, `wall.logical.replica`.
    #[prost(string, tag = "3")]
    pub stamp: String,
    /// Its wall clock, ms.
    #[prost(uint64, tag = "4")]
    pub at: u64,
}

/// A change in the room.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// Which.
    #[prost(oneof = "event::Kind", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub kind: Option<event::Kind>,
}

/// The events.
pub mod event {
    use super::{ChatEntry, register};

    /// One of the events.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        /// `joined`.
        #[prost(message, tag = "1")]
        Joined(Joined),
        /// `left`.
        #[prost(message, tag = "2")]
        Left(Left),
        /// `register`.
        #[prost(message, tag = "3")]
        Register(Register),
        /// `published`.
        #[prost(message, tag = "4")]
        Published(Published),
        /// `unpublished`.
        #[prost(message, tag = "5")]
        Unpublished(Unpublished),
        /// `chat`.
        #[prost(message, tag = "6")]
        Chat(ChatEntry),
        /// `reactions`.
        #[prost(message, tag = "7")]
        Reactions(Reactions),
    }

    /// Someone joined (or changed name or metadata).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Joined {
        /// Who.
        #[prost(string, tag = "1")]
        pub participant: String,
        /// Display name.
        #[prost(string, tag = "2")]
        pub name: String,
        /// Metadata.
        #[prost(string, tag = "3")]
        pub metadata: String,
    }

    /// Someone left.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Left {
        /// Who.
        #[prost(string, tag = "1")]
        pub participant: String,
    }

    /// A register changed.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Register {
        /// Whose.
        #[prost(string, tag = "1")]
        pub participant: String,
        /// Which register.
        #[prost(string, tag = "2")]
        pub register: String,
        /// The attribute's name (`attribute` only).
        #[prost(string, optional, tag = "3")]
        pub name: Option<String>,
        /// The new value (none: `null`).
        #[prost(oneof = "register::Value", tags = "10, 11")]
        pub value: Option<register::Value>,
    }

    /// A track was announced.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Published {
        /// Whose.
        #[prost(string, tag = "1")]
        pub participant: String,
        /// Track id.
        #[prost(string, tag = "2")]
        pub track: String,
        /// WHIP stream.
        #[prost(string, tag = "3")]
        pub stream: String,
        /// `audio` / `video`.
        #[prost(string, tag = "4")]
        pub kind: String,
    }

    /// A track was withdrawn.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Unpublished {
        /// Whose.
        #[prost(string, tag = "1")]
        pub participant: String,
        /// Track id.
        #[prost(string, tag = "2")]
        pub track: String,
    }

    /// The reactions counter's total.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Reactions {
        /// Total.
        #[prost(sint64, tag = "1")]
        pub total: i64,
    }
}

fn chat_from(v: &Value, what: &str) -> Result<ChatEntry, WireError> {
    let mut f = Fields::new(v, what)?;
    let c = ChatEntry {
        participant: f.str("participant")?,
        text: f.str("text")?,
        stamp: f.str("stamp")?,
        at: f.u64("at")?,
    };
    f.done()?;
    Ok(c)
}

fn chat_json(c: &ChatEntry) -> Value {
    json!({"participant": c.participant, "text": c.text, "stamp": c.stamp, "at": c.at})
}

impl Event {
    /// The event of a JSON event (`{"type": "joined", …}`).
    pub fn from_json(v: &Value) -> Result<Self, WireError> {
        use event::*;
        let kind = frame_type(v)?;
        if kind == "chat" {
            return Ok(Event {
                kind: Some(Kind::Chat(chat_from(v, "chat event")?)),
            });
        }
        let mut f = Fields::new(v, kind)?;
        let k = match kind {
            "joined" => Kind::Joined(Joined {
                participant: f.str("participant")?,
                name: f.str("name")?,
                metadata: f.str("metadata")?,
            }),
            "left" => Kind::Left(Left {
                participant: f.str("participant")?,
            }),
            "register" => Kind::Register(Register {
                participant: f.str("participant")?,
                register: f.str("register")?,
                name: f.opt_str("name")?,
                value: f.value("value")?,
            }),
            "published" => Kind::Published(Published {
                participant: f.str("participant")?,
                track: f.str("track")?,
                stream: f.str("stream")?,
                kind: f.str("kind")?,
            }),
            "unpublished" => Kind::Unpublished(Unpublished {
                participant: f.str("participant")?,
                track: f.str("track")?,
            }),
            "reactions" => Kind::Reactions(Reactions {
                total: f.i64("total")?,
            }),
            other => return Err(bad(format!("unknown event type {other:?}"))),
        };
        f.done()?;
        Ok(Event { kind: Some(k) })
    }

    /// The JSON form.
    pub fn to_json(&self) -> Result<Value, WireError> {
        use event::Kind;
        Ok(match self.kind.as_ref().ok_or(WireError::Empty)? {
            Kind::Joined(j) => json!({"type": "joined", "participant": j.participant,
                                      "name": j.name, "metadata": j.metadata}),
            Kind::Left(l) => json!({"type": "left", "participant": l.participant}),
            Kind::Register(r) => {
                let mut v = json!({"type": "register", "participant": r.participant,
                                   "register": r.register, "value": value_json(&r.value)});
                if let Some(n) = &r.name {
                    v["name"] = json!(n);
                }
                v
            }
            Kind::Published(p) => json!({"type": "published", "participant": p.participant,
                                         "track": p.track, "stream": p.stream, "kind": p.kind}),
            Kind::Unpublished(u) => {
                json!({"type": "unpublished", "participant": u.participant, "track": u.track})
            }
            Kind::Chat(c) => {
                let mut v = chat_json(c);
                v["type"] = json!("chat");
                v
            }
            Kind::Reactions(r) => json!({"type": "reactions", "total": r.total}),
        })
    }
}

impl RoomState {
    /// The state of a welcome's JSON `state`.
    pub fn from_json(v: &Value) -> Result<Self, WireError> {
        let mut f = Fields::new(v, "state")?;
        f.taken.clear();
        let mut participants = BTreeMap::new();
        for (id, p) in f.object("participants")?.into_iter().flatten() {
            participants.insert(id.clone(), participant_from(p)?);
        }
        let participant_count = f.u64("participant_count")?;
        let chat = f
            .array("chat")?
            .iter()
            .map(|c| chat_from(c, "chat entry"))
            .collect::<Result<_, _>>()?;
        let reactions = f.i64("reactions")?;
        f.done()?;
        Ok(RoomState {
            participants,
            participant_count,
            chat,
            reactions,
        })
    }

    /// The JSON form.
    pub fn to_json(&self) -> Value {
        let participants: Map<String, Value> = self
            .participants
            .iter()
            .map(|(id, p)| {
                let tracks: Map<String, Value> = p
                    .tracks
                    .iter()
                    .map(|(t, i)| (t.clone(), json!({"stream": i.stream, "kind": i.kind})))
                    .collect();
                let v = json!({"name": p.name, "metadata": p.metadata,
                               "audio_muted": p.audio_muted, "video_muted": p.video_muted,
                               "hand_raised": p.hand_raised, "layout": p.layout,
                               "attributes": p.attributes, "tracks": tracks});
                (id.clone(), v)
            })
            .collect();
        let chat: Vec<Value> = self.chat.iter().map(chat_json).collect();
        json!({"participants": participants, "participant_count": self.participant_count,
               "chat": chat, "reactions": self.reactions})
    }
}

fn participant_from(v: &Value) -> Result<ParticipantState, WireError> {
    let mut f = Fields::new(v, "participant")?;
    f.taken.clear();
    let mut p = ParticipantState {
        name: f.str("name")?,
        metadata: f.str("metadata")?,
        audio_muted: f.bool("audio_muted")?,
        video_muted: f.bool("video_muted")?,
        hand_raised: f.bool("hand_raised")?,
        layout: f.opt_str("layout")?,
        ..Default::default()
    };
    for (k, a) in f.object("attributes")?.into_iter().flatten() {
        let a = a
            .as_str()
            .ok_or_else(|| bad(format!("attribute {k:?} is not a string")))?;
        p.attributes.insert(k.clone(), a.to_owned());
    }
    for (t, i) in f.object("tracks")?.into_iter().flatten() {
        let mut g = Fields::new(i, "track")?;
        g.taken.clear();
        let info = TrackInfo {
            stream: g.str("stream")?,
            kind: g.str("kind")?,
        };
        g.done()?;
        p.tracks.insert(t.clone(), info);
    }
    f.done()?;
    Ok(p)
}

impl ServerFrame {
    /// The frame of a JSON node frame (`{"type": "welcome", …}`).
    pub fn from_json(v: &Value) -> Result<Self, WireError> {
        use server_frame::*;
        let kind = frame_type(v)?;
        let mut f = Fields::new(v, kind)?;
        let frame = match kind {
            "welcome" => Frame::Welcome(Welcome {
                room: f.str("room")?,
                participant: f.str("participant")?,
                node: f.str("node")?,
                window_ms: f.u64("window_ms")?,
                state: f.get("state").map(RoomState::from_json).transpose()?,
            }),
            "receipt" => Frame::Receipt(Receipt {
                key: f.str("key")?,
                duplicate: f.bool("duplicate")?,
                stamp: f.str("stamp")?,
            }),
            "error" => Frame::Error(Error {
                key: f.opt_str("key")?,
                code: f.str("code")?,
                message: f.str("message")?,
            }),
            "events" => Frame::Events(Events {
                events: f
                    .array("events")?
                    .iter()
                    .map(Event::from_json)
                    .collect::<Result<_, _>>()?,
            }),
            "subscribed" => Frame::Subscribed(Subscribed {
                key: f.opt_str("key")?,
            }),
            other => return Err(bad(format!("unknown node frame type {other:?}"))),
        };
        f.done()?;
        Ok(ServerFrame { frame: Some(frame) })
    }

    /// The JSON form.
    pub fn to_json(&self) -> Result<Value, WireError> {
        use server_frame::Frame;
        Ok(match self.frame.as_ref().ok_or(WireError::Empty)? {
            Frame::Welcome(w) => {
                let state = w.state.as_ref().map_or(Value::Null, RoomState::to_json);
                json!({"type": "welcome", "room": w.room, "participant": w.participant,
                       "node": w.node, "window_ms": w.window_ms, "state": state})
            }
            Frame::Receipt(r) => json!({"type": "receipt", "key": r.key,
                                        "duplicate": r.duplicate, "stamp": r.stamp}),
            Frame::Error(e) => json!({"type": "error", "key": e.key, "code": e.code,
                                      "message": e.message}),
            Frame::Events(e) => json!({"type": "events",
                "events": e.events.iter().map(Event::to_json).collect::<Result<Vec<_>, _>>()?}),
            Frame::Subscribed(s) => json!({"type": "subscribed", "key": s.key}),
        })
    }
}

/// A JSON client frame as a binary frame.
pub fn encode_client(v: &Value) -> Result<Vec<u8>, WireError> {
    Ok(ClientFrame::from_json(v)?.encode_to_vec())
}

/// A binary client frame in its JSON form.
pub fn decode_client(bytes: &[u8]) -> Result<Value, WireError> {
    ClientFrame::decode(bytes)
        .map_err(|e| WireError::Decode(e.to_string()))?
        .to_json()
}

/// A JSON node frame as a binary frame.
pub fn encode_server(v: &Value) -> Result<Vec<u8>, WireError> {
    Ok(ServerFrame::from_json(v)?.encode_to_vec())
}

/// A binary node frame in its JSON form.
pub fn decode_server(bytes: &[u8]) -> Result<Value, WireError> {
    ServerFrame::decode(bytes)
        .map_err(|e| WireError::Decode(e.to_string()))?
        .to_json()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_round_trip(v: Value) {
        let bytes = encode_client(&v).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(decode_client(&bytes).unwrap(), v);
    }

    fn server_round_trip(v: Value) -> usize {
        let bytes = encode_server(&v).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(decode_server(&bytes).unwrap(), v);
        bytes.len()
    }

    #[test]
    fn every_client_frame_survives_the_binary_form() {
        for v in [
            json!({"type": "join", "key": "k1", "name": "Alice", "metadata": "{}"}),
            json!({"type": "leave", "key": "k2"}),
            json!({"type": "set", "key": "k3", "register": "audio_muted", "value": true}),
            json!({"type": "set", "key": "k4", "register": "layout", "value": "grid"}),
            json!({"type": "set", "key": "k5", "register": "attribute", "name": "lang",
                   "value": null}),
            json!({"type": "publish", "key": "k6", "track": "cam", "stream": "r.a.cam",
                   "kind": "video"}),
            json!({"type": "unpublish", "key": "k7", "track": "cam"}),
            json!({"type": "react", "key": "k8", "delta": -3}),
            json!({"type": "chat", "key": "k9", "text": "hi ✓"}),
            json!({"type": "subscribe", "events": ["chat"], "participants": null}),
            json!({"type": "subscribe", "key": "s", "events": [], "participants": ["bob"]}),
            // No key: the node refuses it, as it does the JSON frame.
            json!({"type": "chat", "text": "x"}),
        ] {
            client_round_trip(v);
        }
    }

    #[test]
    fn every_node_frame_survives_the_binary_form_and_is_smaller() {
        let welcome = json!({"type": "welcome", "room": "r", "participant": "alice",
            "node": "node-a", "window_ms": 50, "state": {
                "participants": {"alice": {"name": "Alice", "metadata": "", "audio_muted": true,
                    "video_muted": false, "hand_raised": false, "layout": null,
                    "attributes": {"lang": "de"},
                    "tracks": {"cam": {"stream": "r.alice.cam", "kind": "video"}}}},
                "participant_count": 1,
                "chat": [{"participant": "alice", "text": "hi", "stamp": "17.0.3", "at": 17}],
                "reactions": -2}});
        let events = json!({"type": "events", "events": [
            {"type": "joined", "participant": "bob", "name": "Bob", "metadata": ""},
            {"type": "register", "participant": "bob", "register": "audio_muted",
             "value": true},
            {"type": "register", "participant": "bob", "register": "attribute",
             "name": "lang", "value": null},
            {"type": "register", "participant": "bob", "register": "layout", "value": "grid"},
            {"type": "published", "participant": "bob", "track": "mic", "stream": "r.bob.mic",
             "kind": "audio"},
            {"type": "unpublished", "participant": "bob", "track": "mic"},
            {"type": "chat", "participant": "bob", "text": "yo", "stamp": "18.1.4",
             "at": 18},
            {"type": "reactions", "total": 7},
            {"type": "left", "participant": "bob"}]});
        for v in [&welcome, &events] {
            let (binary, text) = (server_round_trip(v.clone()), v.to_string().len());
            eprintln!("{}: {binary} B protobuf, {text} B JSON", v["type"]);
            assert!(binary < text, "{binary} B for {v}");
        }
        for v in [
            json!({"type": "receipt", "key": "k1", "duplicate": true, "stamp": "1.2.3"}),
            json!({"type": "error", "key": null, "code": "bad_request", "message": "no"}),
            json!({"type": "error", "key": "k", "code": "not_in_room", "message": "join"}),
            json!({"type": "subscribed", "key": null}),
        ] {
            server_round_trip(v);
        }
    }

    #[test]
    fn what_is_not_a_frame_is_a_typed_error() {
        for v in [
            json!({"type": "dance"}),
            json!({"name": "no type"}),
            json!({"type": "join", "key": "k", "colour": "red"}),
            json!({"type": "join", "key": 7}),
            json!({"type": "set", "key": "k", "register": "audio_muted", "value": 1}),
            json!({"type": "subscribe", "events": "chat"}),
            json!({"type": "react", "key": "k", "delta": 1.5}),
            json!("join"),
        ] {
            assert!(matches!(encode_client(&v), Err(WireError::Json(_))), "{v}");
        }
        assert!(encode_server(&json!({"type": "events", "events": [{"type": "x"}]})).is_err());
        assert_eq!(decode_client(&[]), Err(WireError::Empty));
        assert!(matches!(
            decode_client(&[0x0a, 0xff]),
            Err(WireError::Decode(_))
        ));
        assert!(decode_server(&[0xff; 9]).is_err());
    }
}
