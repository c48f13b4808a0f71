//! Frames on their way to clients, in the encoding each connection asked for: JSON text
//! frames (`?format=json`) or protobuf binary frames (the default; `ferry_proto::room`).
//!
//! A merge window's `events` frame is shared by every connection with the same subscription:
//! its text is made once, and its binary form once, by the first binary connection that sends it.
//! A welcome's room state likewise: the welcomes of one subscription in one merge window share it
//! (a join storm's thousands of welcomes encode the state once per format), each welcome adding
//! only its head (room, participant, node, window).

use std::sync::{Arc, OnceLock};

use axum::body::Bytes;
use axum::extract::ws::Message as WsMessage;

/// How a connection's frames are encoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Format {
    /// Protobuf binary frames (`ferry_proto::room`).
    #[default]
    Protobuf,
    /// JSON text frames.
    Json,
}

impl Format {
    /// The `format` query parameter: `protobuf` (also when absent) or `json`.
    pub fn parse(q: Option<&str>) -> Result<Self, FormatError> {
        match q {
            None | Some(ferry_proto::room::FORMAT_PROTOBUF) => Ok(Format::Protobuf),
            Some(ferry_proto::room::FORMAT_JSON) => Ok(Format::Json),
            Some(other) => Err(FormatError(other.to_owned())),
        }
    }
}

/// A `format` query parameter that names neither encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("format is json or protobuf, not {0:?}")]
pub struct FormatError(pub String);

/// One frame for clients: its JSON text, and its binary form once a binary client needs it.
#[derive(Debug)]
pub struct OutFrame {
    text: String,
    binary: OnceLock<Bytes>,
}

impl OutFrame {
    /// A frame from its JSON text (as the room server makes them).
    pub fn new(text: String) -> Self {
        OutFrame {
            text,
            binary: OnceLock::new(),
        }
    }

    /// The JSON text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The WebSocket message for a connection in `format`.
    pub fn message(&self, format: Format) -> WsMessage {
        match format {
            Format::Json => WsMessage::Text(self.text.as_str().into()),
            Format::Protobuf => {
                WsMessage::Binary(self.binary.get_or_init(|| encode(&self.text)).clone())
            }
        }
    }
}

/// A welcome's room state, shared by the welcomes of one subscription in one merge window: its
/// JSON text, and its protobuf form (`RoomState`) once a binary client needs it.
#[derive(Debug)]
pub struct WelcomeState {
    text: Arc<str>,
    binary: OnceLock<Vec<u8>>,
}

impl WelcomeState {
    /// The state from its JSON text.
    pub fn new(text: String) -> Self {
        WelcomeState {
            text: text.into(),
            binary: OnceLock::new(),
        }
    }

    fn binary(&self) -> &[u8] {
        self.binary.get_or_init(|| {
            use prost::Message as _;
            let state = serde_json::from_str(&self.text)
                .map_err(|e| e.to_string())
                .and_then(|v| {
                    ferry_proto::room::RoomState::from_json(&v).map_err(|e| e.to_string())
                });
            match state {
                Ok(s) => s.encode_to_vec(),
                Err(e) => {
                    tracing::error!(error = %e, "room state without a binary form");
                    Vec::new()
                }
            }
        })
    }
}

/// One client's welcome: its head and the shared state.
#[derive(Debug)]
pub struct Welcome {
    /// Room id.
    pub room: String,
    /// The connection's participant.
    pub participant: String,
    /// This node.
    pub node: String,
    /// The merge window.
    pub window_ms: u64,
    /// The room as the subscription sees it.
    pub state: Arc<WelcomeState>,
}

impl Welcome {
    /// The JSON text (the state spliced in as text).
    pub fn text(&self) -> String {
        let head = serde_json::json!({
            "type": "welcome",
            "room": self.room,
            "participant": self.participant,
            "node": self.node,
            "window_ms": self.window_ms,
        })
        .to_string();
        format!(
            "{},\"state\":{}}}",
            &head[..head.len() - 1],
            self.state.text
        )
    }

    /// The WebSocket message for a connection in `format`: the binary one is the head's fields
    /// followed by the shared state's bytes as field 5, inside the `ServerFrame`'s field 1
    /// (protobuf concatenates fields; the state is not decoded or encoded again).
    pub fn message(&self, format: Format) -> WsMessage {
        use prost::Message as _;
        use prost::encoding::{WireType, encode_key, encode_varint};
        if format == Format::Json {
            return WsMessage::Text(self.text().into());
        }
        let mut inner = ferry_proto::room::server_frame::Welcome {
            room: self.room.clone(),
            participant: self.participant.clone(),
            node: self.node.clone(),
            window_ms: self.window_ms,
            state: None,
        }
        .encode_to_vec();
        let state = self.state.binary();
        encode_key(5, WireType::LengthDelimited, &mut inner);
        encode_varint(state.len() as u64, &mut inner);
        inner.extend_from_slice(state);
        let mut out = Vec::with_capacity(inner.len() + 8);
        encode_key(1, WireType::LengthDelimited, &mut out);
        encode_varint(inner.len() as u64, &mut out);
        out.extend_from_slice(&inner);
        WsMessage::Binary(out.into())
    }
}

/// The binary form of a frame the room server made. Every frame it makes has one; a failure is
/// a bug, logged, and the client gets an `error` frame in its place.
fn encode(text: &str) -> Bytes {
    let encoded = serde_json::from_str(text)
        .map_err(|e| e.to_string())
        .and_then(|v| ferry_proto::room::encode_server(&v).map_err(|e| e.to_string()));
    match encoded {
        Ok(b) => b.into(),
        Err(e) => {
            tracing::error!(error = %e, frame = text, "room frame without a binary form");
            let v = serde_json::json!({"type": "error", "key": null, "code": "internal",
                                       "message": format!("the node could not encode a frame: {e}")});
            ferry_proto::room::encode_server(&v)
                .unwrap_or_default()
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_goes_out_in_the_connections_format() {
        let f = OutFrame::new(r#"{"type":"subscribed","key":"s1"}"#.into());
        assert!(matches!(f.message(Format::Json), WsMessage::Text(t) if t.as_str() == f.text()));
        let WsMessage::Binary(b) = f.message(Format::Protobuf) else {
            panic!("not binary");
        };
        let back = ferry_proto::room::decode_server(&b).unwrap();
        assert_eq!(back, serde_json::json!({"type": "subscribed", "key": "s1"}));
        assert_eq!(Format::parse(None), Ok(Format::Protobuf));
        assert_eq!(Format::parse(Some("json")), Ok(Format::Json));
        assert!(Format::parse(Some("xml")).is_err());
        // Not a frame the server makes: the client hears of the failure, in its format.
        let odd = OutFrame::new(r#"{"type":"gossip"}"#.into());
        let WsMessage::Binary(b) = odd.message(Format::Protobuf) else {
            panic!("not binary");
        };
        assert_eq!(
            ferry_proto::room::decode_server(&b).unwrap()["code"],
            "internal"
        );
    }

    #[test]
    fn a_welcome_spliced_from_the_shared_state_is_the_frame_encoded_whole() {
        let mut state = ferry_proto::room::RoomState {
            participant_count: 1,
            reactions: 3,
            ..Default::default()
        };
        state.participants.insert(
            "p".into(),
            ferry_proto::room::ParticipantState {
                name: "P".into(),
                audio_muted: true,
                ..Default::default()
            },
        );
        let state = state.to_json().to_string();
        let w = Welcome {
            room: "r".into(),
            participant: "q".into(),
            node: "node-a".into(),
            window_ms: 50,
            state: Arc::new(WelcomeState::new(state)),
        };
        let text = w.text();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["state"]["participants"]["p"]["name"], "P", "{text}");
        let WsMessage::Binary(b) = w.message(Format::Protobuf) else {
            panic!("not binary");
        };
        // Byte for byte what encoding the whole frame gives, and the same frame decoded.
        assert_eq!(&b[..], &encode(&text)[..]);
        assert_eq!(
            ferry_proto::room::decode_server(&b).unwrap(),
            ferry_proto::room::decode_server(&encode(&text)).unwrap()
        );
        assert!(matches!(w.message(Format::Json), WsMessage::Text(t) if t.as_str() == text));
    }
}
