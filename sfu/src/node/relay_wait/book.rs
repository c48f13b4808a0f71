//! The requests waiting in the core for their stream's relay, and the answers not yet taken.

use std::time::Instant;

use ferry_proto::StreamId;
use ferry_proto::api::TicketClaims;

use crate::node::signal::{SessionAnswer, SignalError};

/// What `Node::request_session` gives back.
#[derive(Debug)]
pub enum Requested {
    /// The answer, now.
    Answer(SessionAnswer),
    /// A viewer waiting for its stream's relay: `Node::poll_answer` gives its answer under
    /// this id.
    Waiting(u64),
}

/// The answer to a request that waited.
#[derive(Debug)]
pub enum Answer {
    /// A viewer's (`Node::request_session`).
    Session(Result<SessionAnswer, SignalError>),
    /// Whether the stream is here now (`Node::request_stream`).
    Stream(bool),
}

/// What waits for a stream's relay.
#[derive(Debug)]
pub(crate) enum Want {
    /// A viewer's session.
    Viewer {
        offer: String,
        key: Option<String>,
        ticket: Option<TicketClaims>,
    },
    /// The stream itself (a recording starts).
    Stream,
    /// A viewer migrating in (imported): nobody is answered, but a lost subscription or offer
    /// is asked again every `SUBSCRIBE_RETRY` rather than at the relay's next refresh, since
    /// the viewer plays from here as soon as it is activated.
    Import,
}

/// A request waiting for its stream's relay.
#[derive(Debug)]
pub(crate) struct Parked {
    pub(super) id: u64,
    pub(super) stream: StreamId,
    pub(super) want: Want,
    pub(super) until: Instant,
    /// When the subscription is sent again if the offer has not come.
    pub(super) ask_again: Instant,
}

/// The requests waiting here and the answers not yet taken.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    pub(super) parked: Vec<Parked>,
    pub(super) answers: std::collections::VecDeque<(u64, Answer)>,
    pub(super) next_id: u64,
}
