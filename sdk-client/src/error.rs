//! Why an SDK call failed.

use std::time::Duration;

use crate::turn::RelayError;

/// Why an SDK call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdkError {
    /// The session ended before it connected (the reason from its last state change).
    #[error("the session ended: {0}")]
    Ended(String),
    /// It did not connect in time.
    #[error("the session did not connect within {0:?}")]
    Timeout(Duration),
    /// The session's task is gone.
    #[error("the session is closed")]
    Closed,
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
    /// `relay_only`: the session could not connect because no relay could be used (no
    /// credentials, or every relay refused or did not answer).
    #[error("no TURN relay: {0}")]
    Relay(RelayError),
    /// The room's node refused a command with an `error` frame (`code`: `not_in_room`,
    /// `bad_request`, `bad_value`, `key_reused`, `overloaded`, … — docs/rooms.md).
    #[error("refused by the room: {code}: {message}")]
    Refused {
        /// The protocol's code.
        code: String,
        /// For people.
        message: String,
    },
    /// The join endpoint did not answer with a place to connect to (`status` 0: no answer).
    #[error("room join refused: {status} {message}")]
    JoinFailed {
        /// The HTTP status (0 when no response came).
        status: u16,
        /// The answer's body, or why there was none.
        message: String,
    },
    /// The access token is missing or invalid (HTTP 401, or the room WebSocket's close code 4401).
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The access token does not grant this (HTTP 403, or close code 4403).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The room's WebSocket could not be opened or closed before a command was answered.
    #[error("room connection lost: {0}")]
    Disconnected(String),
    /// The node serving the session refused a request about it, or did not answer (`status` 0).
    #[error("the node answered {status}: {message}")]
    Rejected {
        /// The HTTP status (0 when no response came).
        status: u16,
        /// The node's reason, or why there was no answer.
        message: String,
    },
}
