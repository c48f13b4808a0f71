//! The room WebSocket's frames as a client sees them (docs/rooms.md, "Signalling"): the
//! commands it sends, the frames the node sends parsed into types, the socket's URL and the
//! idempotency keys. Pure: no IO. Frames are built and read in their JSON form and go over the
//! socket as protobuf binary frames (`ferry_proto::room`, the node's default encoding).

use serde::Deserialize;
use serde_json::{Value, json};

use super::model::{ChatMessage, MediaKind, Participant, Receipt, RegisterValue, RoomEvent};
use crate::error::SdkError;

pub(crate) use ferry_proto::room::EVENT_TYPES;

/// `join`: enter the room (again after a reconnect: refreshes name and metadata).
pub(crate) fn join(name: &str, metadata: &str) -> Value {
    json!({"type": "join", "name": name, "metadata": metadata})
}

/// `leave`.
pub(crate) fn leave() -> Value {
    json!({"type": "leave"})
}

/// `set` of `audio_muted` / `video_muted`.
pub(crate) fn set_muted(kind: MediaKind, muted: bool) -> Value {
    let register = match kind {
        MediaKind::Audio => "audio_muted",
        MediaKind::Video => "video_muted",
    };
    json!({"type": "set", "register": register, "value": muted})
}

/// `set` of `hand_raised`.
pub(crate) fn raise_hand(raised: bool) -> Value {
    json!({"type": "set", "register": "hand_raised", "value": raised})
}

/// `set` of a custom attribute (`null` deletes it).
pub(crate) fn set_attribute(name: &str, value: Option<&str>) -> Value {
    json!({"type": "set", "register": "attribute", "name": name, "value": value})
}

/// `chat`.
pub(crate) fn chat(text: &str) -> Value {
    json!({"type": "chat", "text": text})
}

/// `react`.
pub(crate) fn react(delta: i64) -> Value {
    json!({"type": "react", "delta": delta})
}

/// `publish`: announce a WHIP stream as a track.
pub(crate) fn publish(track: &str, stream: &str, kind: MediaKind) -> Value {
    json!({"type": "publish", "track": track, "stream": stream, "kind": kind.as_str()})
}

/// `unpublish`.
pub(crate) fn unpublish(track: &str) -> Value {
    json!({"type": "unpublish", "track": track})
}

/// A command frame ready to go: its key (`next_key()` when it has none) and its text. Refuses
/// what is not a command (no `type`, a `key` that is not a string, `subscribe`, which is
/// answered by `subscribed` rather than a receipt).
pub(crate) fn keyed(
    frame: Value,
    next_key: impl FnOnce() -> String,
) -> Result<(String, String), SdkError> {
    let Value::Object(mut fields) = frame else {
        return Err(SdkError::Invalid("a room frame is a JSON object".into()));
    };
    let kind = match fields.remove("type") {
        Some(Value::String(t)) => t,
        _ => return Err(SdkError::Invalid("a room frame needs a string type".into())),
    };
    if kind == "subscribe" {
        return Err(SdkError::Invalid(
            "subscribe is not a command (it has no receipt): use JoinOptions::events".into(),
        ));
    }
    let key = match fields.remove("key") {
        None | Some(Value::Null) => next_key(),
        Some(Value::String(k)) => k,
        Some(other) => {
            return Err(SdkError::Invalid(format!(
                "a command's key is a string, not {other}"
            )));
        }
    };
    let mut out = serde_json::Map::new();
    out.insert("type".into(), Value::String(kind));
    out.insert("key".into(), Value::String(key.clone()));
    out.extend(fields);
    let frame = Value::Object(out);
    // Refused here, not when it would go: a frame without a binary form could not be sent.
    ferry_proto::room::encode_client(&frame).map_err(|e| SdkError::Invalid(e.to_string()))?;
    Ok((key, frame.to_string()))
}

/// The binary frame of a command's text (from `keyed`, so it has one).
pub(crate) fn binary(text: &str) -> Result<Vec<u8>, BinaryError> {
    let v: Value = serde_json::from_str(text)?;
    Ok(ferry_proto::room::encode_client(&v)?)
}

/// Why a command's text has no binary frame.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BinaryError {
    /// Not JSON.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// JSON that is no client frame.
    #[error("{0}")]
    Frame(#[from] ferry_proto::room::WireError),
}

/// Parses a binary frame (protobuf); `None` for what is not a frame.
pub(crate) fn parse_binary(bytes: &[u8]) -> Option<ServerFrame> {
    parse_value(ferry_proto::room::decode_server(bytes).ok()?)
}

/// Idempotency keys: a random seed and a counter (`[0-9a-f]{16}-N`, well within 64 characters).
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    seed: String,
    n: u64,
}

impl Keys {
    /// Keys starting from `seed` (random in the driver, fixed in tests).
    pub(crate) fn new(seed: u64) -> Self {
        Keys {
            seed: format!("{seed:016x}"),
            n: 0,
        }
    }

    /// The next key.
    pub(crate) fn next_key(&mut self) -> String {
        self.n += 1;
        format!("{}-{}", self.seed, self.n)
    }
}

/// What a welcome says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub(crate) struct Welcome {
    pub participant: String,
    pub node: String,
    pub state: WelcomeState,
}

/// A welcome's `state`: the room as the node saw it (cut by the connection's subscription).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub(crate) struct WelcomeState {
    pub participants: std::collections::BTreeMap<String, Participant>,
    pub chat: Vec<ChatMessage>,
    pub reactions: i64,
}

/// A frame from the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerFrame {
    Welcome(Box<Welcome>),
    Receipt(Receipt),
    Error {
        key: Option<String>,
        code: String,
        message: String,
    },
    Events(Vec<RoomEvent>),
    /// `subscribed`, or a type of a newer server.
    Other,
}

/// Parses a text frame; `None` for what is not a frame (or a welcome/receipt without its
/// fields). Unknown events inside an `events` frame are skipped.
pub(crate) fn parse(text: &str) -> Option<ServerFrame> {
    parse_value(serde_json::from_str(text).ok()?)
}

fn parse_value(v: Value) -> Option<ServerFrame> {
    let kind = v.get("type")?.as_str()?;
    Some(match kind {
        "welcome" => ServerFrame::Welcome(Box::new(serde_json::from_value(v).ok()?)),
        "receipt" => {
            let r: Receipt = serde_json::from_value(v).ok()?;
            if r.key.is_empty() {
                return None;
            }
            ServerFrame::Receipt(r)
        }
        "error" => {
            let code = v
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_owned();
            ServerFrame::Error {
                key: v.get("key").and_then(Value::as_str).map(str::to_owned),
                message: v
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or(&code)
                    .to_owned(),
                code,
            }
        }
        "events" => ServerFrame::Events(
            v.get("events")?
                .as_array()?
                .iter()
                .filter_map(event)
                .collect(),
        ),
        _ => ServerFrame::Other,
    })
}

/// An `EVENT` as the server sends it.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    Joined {
        participant: String,
        #[serde(default)]
        name: String,
        #[serde(default)]
        metadata: String,
    },
    Left {
        participant: String,
    },
    Register {
        participant: String,
        register: String,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        value: Value,
    },
    Published {
        participant: String,
        track: String,
        stream: String,
        kind: String,
    },
    Unpublished {
        participant: String,
        track: String,
    },
    Chat {
        participant: String,
        text: String,
        stamp: String,
        #[serde(default)]
        at: u64,
    },
    Reactions {
        total: i64,
    },
}

/// One event of an `events` frame (`None`: malformed, or of a kind this SDK does not know).
pub(crate) fn event(v: &Value) -> Option<RoomEvent> {
    let resync = false;
    Some(match serde_json::from_value::<WireEvent>(v.clone()).ok()? {
        WireEvent::Joined {
            participant,
            name,
            metadata,
        } => RoomEvent::Joined {
            participant,
            name,
            metadata,
            resync,
        },
        WireEvent::Left { participant } => RoomEvent::Left {
            participant,
            resync,
        },
        WireEvent::Register {
            participant,
            register,
            name,
            value,
        } => RoomEvent::Register {
            participant,
            value: register_value(&register, name, &value)?,
            resync,
        },
        WireEvent::Published {
            participant,
            track,
            stream,
            kind,
        } => RoomEvent::Published {
            participant,
            track,
            stream,
            kind,
            resync,
        },
        WireEvent::Unpublished { participant, track } => RoomEvent::Unpublished {
            participant,
            track,
            resync,
        },
        WireEvent::Chat {
            participant,
            text,
            stamp,
            at,
        } => RoomEvent::Chat {
            participant,
            text,
            stamp,
            at,
            resync,
        },
        WireEvent::Reactions { total } => RoomEvent::Reactions { total, resync },
    })
}

fn register_value(register: &str, name: Option<String>, value: &Value) -> Option<RegisterValue> {
    let text = || match value {
        Value::Null => Some(None),
        Value::String(s) => Some(Some(s.clone())),
        _ => None,
    };
    Some(match register {
        "audio_muted" => RegisterValue::AudioMuted(value.as_bool()?),
        "video_muted" => RegisterValue::VideoMuted(value.as_bool()?),
        "hand_raised" => RegisterValue::HandRaised(value.as_bool()?),
        "layout" => RegisterValue::Layout(text()?),
        "attribute" => RegisterValue::Attribute {
            name: name?,
            value: text()?,
        },
        _ => return None,
    })
}

/// The room WebSocket to open: the join answer's `ws` (resolved against the join endpoint
/// `post_url` when relative; `http(s)` becomes `ws(s)`), with the access token and the initial
/// subscription appended.
pub(crate) fn ws_url(
    ws: &str,
    post_url: &str,
    token: Option<&str>,
    events: Option<&[String]>,
    participants: Option<&[String]>,
) -> String {
    let absolute = if ws.starts_with("ws://") || ws.starts_with("wss://") {
        ws.to_owned()
    } else {
        crate::signalling::resolve(post_url, ws)
    };
    let mut url = if let Some(rest) = absolute.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = absolute.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        absolute
    };
    let mut add = |name: &str, value: String| {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(name);
        url.push('=');
        url.push_str(&value);
    };
    if let Some(t) = token {
        add("access_token", encode(t));
    }
    let list = |items: &[String]| {
        items
            .iter()
            .map(|i| encode(i))
            .collect::<Vec<_>>()
            .join(",")
    };
    if let Some(e) = events {
        add("events", list(e));
    }
    if let Some(p) = participants {
        add("participants", list(p));
    }
    url
}

/// Percent-encodes all but the unreserved characters of RFC 3986.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn commands_are_built_as_the_protocol_says() {
        assert_eq!(
            set_muted(MediaKind::Video, true),
            json!({"type": "set", "register": "video_muted", "value": true})
        );
        assert_eq!(
            set_attribute("lang", None),
            json!({"type": "set", "register": "attribute", "name": "lang", "value": null})
        );
        assert_eq!(
            publish("cam", "r.alice.cam", MediaKind::Video),
            json!({"type": "publish", "track": "cam", "stream": "r.alice.cam", "kind": "video"})
        );
        assert_eq!(
            join("Alice", ""),
            json!({"type": "join", "name": "Alice", "metadata": ""})
        );
    }

    #[test]
    fn a_key_is_filled_in_kept_or_refused() {
        let mut keys = Keys::new(0xab);
        let (key, text) = keyed(chat("hi"), || keys.next_key()).unwrap();
        assert_eq!(key, "00000000000000ab-1");
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({"type": "chat", "key": "00000000000000ab-1", "text": "hi"})
        );
        let (key, _) = keyed(
            json!({"type": "chat", "key": "mine", "text": "x"}),
            || unreachable!(),
        )
        .unwrap();
        assert_eq!(key, "mine");
        let (key, _) = keyed(json!({"type": "leave", "key": null}), || "k".into()).unwrap();
        assert_eq!(key, "k");
        for bad in [
            json!({"key": "k"}),
            json!([1]),
            json!({"type": "chat", "key": 5}),
            json!({"type": "subscribe", "events": null}),
        ] {
            assert!(
                matches!(keyed(bad.clone(), || "k".into()), Err(SdkError::Invalid(_))),
                "{bad}"
            );
        }
        assert_eq!(keys.next_key(), "00000000000000ab-2");
    }

    #[test]
    fn server_frames_are_parsed() {
        let w = parse(
            r#"{"type":"welcome","room":"r","participant":"alice","node":"node-a","window_ms":50,
                "state":{"participants":{"bob":{"name":"Bob","metadata":"","audio_muted":true,
                "video_muted":false,"hand_raised":false,"layout":null,"attributes":{"lang":"de"},
                "tracks":{"cam":{"stream":"r.bob.cam","kind":"video"}}}},"participant_count":1,
                "chat":[{"participant":"bob","text":"hi","stamp":"5.0.node-a","at":5}],"reactions":3}}"#,
        );
        let Some(ServerFrame::Welcome(w)) = w else {
            panic!("not a welcome")
        };
        assert_eq!(
            (w.participant.as_str(), w.node.as_str()),
            ("alice", "node-a")
        );
        let bob = &w.state.participants["bob"];
        assert!(bob.audio_muted && !bob.video_muted);
        assert_eq!(bob.attributes["lang"], "de");
        assert_eq!(bob.tracks["cam"].stream, "r.bob.cam");
        assert_eq!(w.state.chat[0].at, 5);
        assert_eq!(w.state.reactions, 3);

        assert_eq!(
            parse(r#"{"type":"receipt","key":"k1","duplicate":true,"stamp":"1.0.a"}"#),
            Some(ServerFrame::Receipt(Receipt {
                key: "k1".into(),
                duplicate: true,
                stamp: "1.0.a".into()
            }))
        );
        assert_eq!(
            parse(r#"{"type":"error","key":null,"code":"bad_request","message":"not a frame"}"#),
            Some(ServerFrame::Error {
                key: None,
                code: "bad_request".into(),
                message: "not a frame".into()
            })
        );
        assert_eq!(
            parse(r#"{"type":"subscribed","key":"s"}"#),
            Some(ServerFrame::Other)
        );
        for junk in ["", "[]", "{}", r#"{"type":5}"#, r#"{"type":"receipt"}"#] {
            assert_eq!(parse(junk), None, "{junk}");
        }
    }

    #[test]
    fn events_are_typed_and_unknown_ones_skipped() {
        let f = parse(
            r#"{"type":"events","events":[
                {"type":"joined","participant":"bob","name":"Bob","metadata":"m"},
                {"type":"register","participant":"bob","register":"audio_muted","value":true},
                {"type":"register","participant":"bob","register":"layout","value":"grid"},
                {"type":"register","participant":"bob","register":"attribute","name":"lang","value":null},
                {"type":"register","participant":"bob","register":"volume","value":3},
                {"type":"register","participant":"bob","register":"audio_muted","value":"yes"},
                {"type":"dance","participant":"bob"},
                {"type":"chat","participant":"bob","text":"hi","stamp":"9.0.a","at":9},
                {"type":"reactions","total":-2}]}"#,
        );
        let Some(ServerFrame::Events(evs)) = f else {
            panic!("not events")
        };
        let bob = || "bob".to_owned();
        assert_eq!(
            evs,
            vec![
                RoomEvent::Joined {
                    participant: bob(),
                    name: "Bob".into(),
                    metadata: "m".into(),
                    resync: false
                },
                RoomEvent::Register {
                    participant: bob(),
                    value: RegisterValue::AudioMuted(true),
                    resync: false
                },
                RoomEvent::Register {
                    participant: bob(),
                    value: RegisterValue::Layout(Some("grid".into())),
                    resync: false
                },
                RoomEvent::Register {
                    participant: bob(),
                    value: RegisterValue::Attribute {
                        name: "lang".into(),
                        value: None
                    },
                    resync: false
                },
                RoomEvent::Chat {
                    participant: bob(),
                    text: "hi".into(),
                    stamp: "9.0.a".into(),
                    at: 9,
                    resync: false
                },
                RoomEvent::Reactions {
                    total: -2,
                    resync: false
                },
            ]
        );
    }

    #[test]
    fn the_socket_url_carries_token_and_subscription() {
        let post = "http://gw:8080/v1/rooms/r/join";
        assert_eq!(
            ws_url(
                "ws://n:8081/v1/rooms/r/ws?participant=a",
                post,
                Some("t+/="),
                None,
                None
            ),
            "ws://n:8081/v1/rooms/r/ws?participant=a&access_token=t%2B%2F%3D"
        );
        let events = ["chat".to_owned(), "joined".to_owned()];
        let who = ["bob".to_owned()];
        assert_eq!(
            ws_url(
                "/v1/rooms/r/ws?participant=a",
                "https://gw/v1/rooms/r/join",
                None,
                Some(&events),
                Some(&who)
            ),
            "wss://gw/v1/rooms/r/ws?participant=a&events=chat,joined&participants=bob"
        );
    }
}
