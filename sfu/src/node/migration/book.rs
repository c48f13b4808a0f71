//! What the node keeps of a migration between its steps.

use std::net::SocketAddr;

/// What an imported session takes over at activation.
#[derive(Debug, Default)]
pub(crate) struct Takeover {
    /// Publisher: nodes to relay the stream to.
    pub(super) relay_to: Vec<SocketAddr>,
    /// The stream's origin before the cutover.
    pub(super) previous_origin: Option<SocketAddr>,
}
