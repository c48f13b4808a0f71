//! `POST /v1/rooms/{room}/join`: where a participant's room WebSocket goes. The scheduler
//! places the participant and answers with its node; a node answers with itself.

use serde::{Deserialize, Serialize};

use crate::ids::{ParticipantId, RoomId};
use ferry_proto::ids::NodeId;

/// The request body (every field optional).
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JoinRequest {
    /// The participant (stable across reconnects, `[A-Za-z0-9._-]{1,64}`); one is made up when
    /// absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub participant: Option<String>,
    /// Display name (informational here; the `join` command carries it).
    #[serde(default)]
    pub name: Option<String>,
}

/// The answer.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JoinAnswer {
    /// The room.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub room: RoomId,
    /// The participant.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub participant: ParticipantId,
    /// The node hosting the participant's connection.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub node: NodeId,
    /// The node's HTTP base URL (its WHIP/WHEP endpoints).
    pub http: String,
    /// The WebSocket to open.
    pub ws: String,
}

impl JoinAnswer {
    /// The answer for `participant` of `room` on `node` at `http` (`http://…` or `https://…`).
    pub fn new(room: RoomId, participant: ParticipantId, node: NodeId, http: &str) -> Self {
        let http = http.trim_end_matches('/').to_owned();
        let ws = match http.split_once("://") {
            Some(("https", rest)) => format!("wss://{rest}"),
            Some((_, rest)) => format!("ws://{rest}"),
            None => format!("ws://{http}"),
        };
        let ws = format!("{ws}/v1/rooms/{room}/ws?participant={participant}");
        JoinAnswer {
            room,
            participant,
            node,
            http,
            ws,
        }
    }
}

/// A bad join request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The room id is not `[A-Za-z0-9._-]{1,64}`.
    #[error("bad room id: {0}")]
    Room(String),
    /// The participant id is not `[A-Za-z0-9._-]{1,64}`.
    #[error("bad participant id: {0}")]
    Participant(String),
}

/// Validates the room and the participant (`fresh` makes one up when absent).
pub fn parse(
    room: &str,
    req: &JoinRequest,
    fresh: impl FnOnce() -> String,
) -> Result<(RoomId, ParticipantId), JoinError> {
    let room = RoomId::new(room).map_err(|e| JoinError::Room(e.to_string()))?;
    let participant = req.participant.clone().unwrap_or_else(fresh);
    let participant =
        ParticipantId::new(participant).map_err(|e| JoinError::Participant(e.to_string()))?;
    Ok((room, participant))
}

/// The placement key of a participant: participants of a room spread over the nodes.
pub fn placement_key(room: &RoomId, participant: &ParticipantId) -> String {
    format!("{room}/{participant}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_derives_the_websocket_url() {
        let a = JoinAnswer::new(
            RoomId::new("standup").unwrap(),
            ParticipantId::new("alice").unwrap(),
            NodeId::new("node-a").unwrap(),
            "https://n.example:8443/",
        );
        assert_eq!(a.http, "https://n.example:8443");
        assert_eq!(
            a.ws,
            "wss://n.example:8443/v1/rooms/standup/ws?participant=alice"
        );
        let b = JoinAnswer::new(
            RoomId::new("r").unwrap(),
            ParticipantId::new("p").unwrap(),
            NodeId::new("n").unwrap(),
            "http://127.0.0.1:8081",
        );
        assert_eq!(b.ws, "ws://127.0.0.1:8081/v1/rooms/r/ws?participant=p");
    }

    #[test]
    fn bad_ids_are_refused() {
        let req = JoinRequest {
            participant: Some("a b".into()),
            name: None,
        };
        assert!(matches!(
            parse("r", &req, || "x".into()),
            Err(JoinError::Participant(_))
        ));
        assert!(matches!(
            parse("", &JoinRequest::default(), || "x".into()),
            Err(JoinError::Room(_))
        ));
        let (_, p) = parse("r", &JoinRequest::default(), || "gen1".into()).unwrap();
        assert_eq!(p.as_str(), "gen1");
    }
}
