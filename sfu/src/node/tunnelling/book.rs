//! How a datagram reached the node, the datagrams held for inactive sessions, and the
//! forwarding pointers of sessions that moved away.

use std::net::SocketAddr;
use std::time::Instant;

use crate::node::session::{Session, Via};

/// How the datagram being processed reached the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ingress {
    /// From the client itself.
    Direct,
    /// Through an edge (or a node acting as one) at `addr`.
    Edge { addr: SocketAddr, epoch: u64 },
    /// Re-sent by the node the session left: says nothing about the path.
    Forwarded,
}

impl Ingress {
    /// Where a reply to this datagram goes: back the way it came.
    pub(crate) fn reply_path(self, s: &Session) -> Option<Via> {
        match self {
            Self::Direct => None,
            Self::Edge { addr, .. } => Some(Via {
                addr,
                epoch: s.epoch,
            }),
            Self::Forwarded => s.path(),
        }
    }

    /// A check on the media path came this way: send media this way too.
    pub(crate) fn update_path(self, s: &mut Session) {
        match self {
            Self::Direct => s.via = None,
            Self::Edge { addr, .. } => s.via = Some(addr),
            Self::Forwarded => {}
        }
    }
}

/// A datagram kept for an inactive session.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) from: SocketAddr,
    pub(crate) ingress: Ingress,
    pub(crate) data: Vec<u8>,
}

/// Where the datagrams of a session that moved away go.
#[derive(Debug, Clone)]
pub(crate) struct Forward {
    /// The session's ICE ufrag here.
    pub(crate) ufrag: String,
    /// The node that owns it now.
    pub(crate) target: SocketAddr,
    /// Its epoch there.
    pub(crate) epoch: u64,
    /// Forgotten after this.
    pub(crate) expires: Instant,
}
