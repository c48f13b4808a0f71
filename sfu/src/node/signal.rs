//! Results and errors of signalling operations (WHIP/WHEP), shared by the
//! core and the HTTP layer. Each error maps to one specific HTTP status.

use ferry_proto::{SessionId, StreamId};
use serde::Serialize;

/// Whether a session publishes or views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionKind {
    /// WHIP: sends media to the node.
    Publish,
    /// WHEP: receives media from the node.
    View,
}

impl SessionKind {
    /// `whip` or `whep`, as in the URL.
    pub fn path(self) -> &'static str {
        match self {
            SessionKind::Publish => "whip",
            SessionKind::View => "whep",
        }
    }
}

/// A created session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionAnswer {
    /// The new session.
    pub session: SessionId,
    /// SDP answer.
    pub sdp: String,
    /// Entity tag of the session's ICE state (changes on ICE restart).
    pub etag: String,
    /// A ticket that resumes the session, and its expiry (Unix seconds); `None` outside a
    /// cluster.
    pub ticket: Option<(String, u64)>,
}

/// Result of a PATCH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOutcome {
    /// Trickled candidates accepted (204).
    Trickled,
    /// ICE restarted (200 with this sdpfrag and ETag).
    Restarted {
        /// Our new ICE credentials and candidates.
        sdpfrag: String,
        /// New entity tag.
        etag: String,
    },
}

/// What a caller learns about one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    /// Session id.
    pub id: SessionId,
    /// Stream it belongs to.
    pub stream: StreamId,
    /// Publish or view.
    pub kind: SessionKind,
    /// `new`, `connecting`, `connected`, `closed`.
    pub state: &'static str,
}

/// Why a signalling request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignalError {
    /// The body is not a usable SDP (400).
    #[error("bad SDP: {0}")]
    BadSdp(String),
    /// Well-formed, but asks for something we do not do (422).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The stream already has a publisher (409).
    #[error("stream {0} already has a publisher")]
    StreamBusy(StreamId),
    /// Nothing is published on this stream (404).
    #[error("stream {0} has no publisher")]
    StreamNotFound(StreamId),
    /// No such session (404).
    #[error("no session {0}")]
    SessionNotFound(String),
    /// `If-Match` does not match the session's ETag (412).
    #[error("If-Match does not match the current ETag")]
    PreconditionFailed,
    /// `If-Match` is required (428).
    #[error("If-Match is required")]
    PreconditionRequired,
    /// The node is at capacity (503).
    #[error("node is full")]
    Full,
    /// The node is shutting down (503).
    #[error("node is shutting down")]
    Unavailable,
    /// A session ticket that is refused (400/403/409/410, see [`TicketError::status`]).
    #[error("{0}")]
    BadTicket(TicketError),
    /// An `Idempotency-Key` reused with another request (422).
    #[error("Idempotency-Key {0:?} was used for another request")]
    IdempotencyMismatch(String),
    /// The session migrated to another node: its URL there (307 with `Location`), so a
    /// client that kept the old URL still reaches it.
    #[error("the session moved to {0}")]
    Moved(String),
}

impl SignalError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        match self {
            SignalError::BadSdp(_) => 400,
            SignalError::Unsupported(_) => 422,
            SignalError::StreamBusy(_) => 409,
            SignalError::StreamNotFound(_) | SignalError::SessionNotFound(_) => 404,
            SignalError::PreconditionFailed => 412,
            SignalError::PreconditionRequired => 428,
            SignalError::Full | SignalError::Unavailable => 503,
            SignalError::BadTicket(t) => t.status(),
            SignalError::IdempotencyMismatch(_) => 422,
            SignalError::Moved(_) => 307,
        }
    }

    /// A machine-readable code for the `Ferry-Error` header, where there is one.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            SignalError::BadTicket(t) => Some(t.code()),
            SignalError::IdempotencyMismatch(_) => Some("idempotency-mismatch"),
            SignalError::Moved(_) => Some("session-moved"),
            _ => None,
        }
    }
}

/// Why a ticket is refused. Each answers with its own status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TicketError {
    /// Not a ticket at all (400).
    #[error("the ticket is malformed")]
    Malformed,
    /// Not signed by this cluster (403).
    #[error("the ticket is not signed by this cluster")]
    Forged,
    /// Signed, but for another stream or kind (403).
    #[error("the ticket is for another stream or kind")]
    Mismatch,
    /// Past its expiry (410).
    #[error("the ticket expired")]
    Expired,
    /// Its generation was used already (409).
    #[error("the ticket was used already")]
    Replayed,
    /// This node has no cluster key to check tickets with (403).
    #[error("this node is not in a cluster and cannot check tickets")]
    NoCluster,
}

impl TicketError {
    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            TicketError::Malformed => 400,
            TicketError::Forged | TicketError::Mismatch | TicketError::NoCluster => 403,
            TicketError::Expired => 410,
            TicketError::Replayed => 409,
        }
    }

    /// Machine-readable code (`Ferry-Error` header).
    pub fn code(self) -> &'static str {
        match self {
            TicketError::Malformed => "ticket-malformed",
            TicketError::Forged => "ticket-forged",
            TicketError::Mismatch => "ticket-mismatch",
            TicketError::Expired => "ticket-expired",
            TicketError::Replayed => "ticket-replayed",
            TicketError::NoCluster => "ticket-unsupported",
        }
    }
}
