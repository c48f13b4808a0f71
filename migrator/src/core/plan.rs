//! What a migration is asked to do: which session, from where to where, how.

use ferry_proto::api::CutoverMode;
use ferry_proto::{MigrationId, NodeId, SessionId, StreamId};

/// What the source needs to start a migration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationPlan {
    /// The migration's ID (chosen by the scheduler).
    pub id: MigrationId,
    /// The session to move.
    pub session: SessionId,
    /// Its stream.
    pub stream: StreamId,
    /// Publisher (else viewer).
    pub publisher: bool,
    /// Where it goes.
    pub target: NodeId,
    /// The session's current ownership epoch on this node.
    pub epoch: u64,
    /// How its client is redirected.
    pub mode: CutoverMode,
    /// W3C `traceparent` of the span that traces this migration on the
    /// source (empty: not traced). The target's span joins that trace.
    pub trace_parent: String,
}
