//! Transports carry [`Message`]s between nodes: in memory (tests, `ferry
//! dev`), QUIC with mutual TLS (production), RDMA (feature `rdma`,
//! compile-checked only). QUIC and RDMA share the byte framing of
//! [`crate::frame`].

use std::future::Future;

use ferry_proto::NodeId;

use crate::frame::FrameError;
use crate::wire::{Message, WireError};

pub mod memory;
pub mod quic;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod tls;

pub use memory::{MemoryNetwork, MemoryTransport};
pub use quic::{QuicSender, QuicTransport};
pub use tls::{ClusterCa, NodeIdentity};

/// What a transport failed at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// No address is known for the node.
    #[error("unknown peer {0}")]
    UnknownPeer(NodeId),
    /// The transport was shut down.
    #[error("transport closed")]
    Closed,
    /// Socket-level failure.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// Connection setup or TLS failure.
    #[error("connection to {peer}: {reason}")]
    Connect {
        /// The peer.
        peer: NodeId,
        /// What went wrong.
        reason: String,
    },
    /// The peer's certificate names another node.
    #[error("expected {expected}, the certificate names {found}")]
    WrongPeer {
        /// The node dialled.
        expected: NodeId,
        /// The node its certificate names.
        found: NodeId,
    },
    /// TLS setup.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Bad bytes from a peer.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A message that does not decode.
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Carries migration messages between nodes.
///
/// `send` only queues: it never waits for the network, so the node's task
/// is never held up by a slow or unreachable peer. A message that cannot be
/// delivered is lost, which the protocol tolerates (it retries and times
/// out). `recv` yields the next message with the sender's node ID as the
/// transport authenticated it; it must be cancel safe, so it can be one arm
/// of a `select!`.
pub trait Transport: Send {
    /// This node.
    fn local_node(&self) -> &NodeId;

    /// Queues `msg` for `to`.
    fn send(&self, to: &NodeId, msg: Message) -> Result<(), TransportError>;

    /// The next message and its sender.
    fn recv(&mut self) -> impl Future<Output = Result<(NodeId, Message), TransportError>> + Send;
}
