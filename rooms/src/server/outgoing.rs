//! Frames on their way to clients, in the encoding each connection asked for: JSON text
//! frames (`?format=json`) or protobuf binary frames (the default; `ferry_proto::room`).
//!
//! A merge window's `events` frame is shared by every connection with the same subscription:
//! its text is made once, and its binary form once, by the first binary connection that sends it.

use std::sync::OnceLock;

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
    pub fn parse(q: Option<&str>) -> Result<Self, String> {
        match q {
            None | Some(ferry_proto::room::FORMAT_PROTOBUF) => Ok(Format::Protobuf),
            Some(ferry_proto::room::FORMAT_JSON) => Ok(Format::Json),
            Some(other) => Err(format!("format is json or protobuf, not {other:?}")),
        }
    }
}

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
}
