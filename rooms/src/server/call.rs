//! Calls to other nodes and to the scheduler's snapshot store: the HTTP client, reading an
//! answer, and why a call failed.

use std::time::Duration;

use crate::ids::RoomId;

/// The HTTP client of calls to other nodes and the scheduler: a status is an answer, not an
/// error.
pub(super) fn http_agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

/// Why a call to another node or to the scheduler's snapshot store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No URL to call.
    #[error("no scheduler URL")]
    NoUrl,
    /// The request could not be made.
    #[error("{0}")]
    Request(String),
    /// The peer did not answer.
    #[error("{0}: {1}")]
    Transport(String, String),
    /// The peer answered with an error status.
    #[error("{what}: {status} {body}")]
    Status {
        /// The call.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The body, as text.
        body: String,
    },
    /// A body in the room codec that does not encode or decode.
    #[error("{0}: {1}")]
    Decode(String, crate::CodecError),
    /// A snapshot over [`crate::snapshot::MAX_SNAPSHOT_BYTES`].
    #[error("the snapshot of {room} is {len} bytes, over the limit")]
    TooLarge {
        /// The room.
        room: RoomId,
        /// Its snapshot's size.
        len: usize,
    },
    /// The blocking task that made the call failed.
    #[error("{0}")]
    Task(String),
}

impl CallError {
    pub(super) fn status(what: impl Into<String>, status: u16, body: &[u8]) -> Self {
        CallError::Status {
            what: what.into(),
            status,
            body: String::from_utf8_lossy(body).into_owned(),
        }
    }
}

/// An answer's status and body (at most the largest replica message).
pub(super) fn read_answer(
    resp: &mut ureq::http::Response<ureq::Body>,
) -> Result<(u16, Vec<u8>), ureq::Error> {
    let status = resp.status().as_u16();
    let bytes = resp
        .body_mut()
        .with_config()
        .limit(crate::codec::MAX_MESSAGE_BYTES as u64)
        .read_to_vec()?;
    Ok((status, bytes))
}
