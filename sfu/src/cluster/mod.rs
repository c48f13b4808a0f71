//! A node among other nodes (sans-IO, part of the core): what crosses between nodes on the media
//! path.
//!
//! - [`relay`]: the cascade: a stream relayed from its origin node to the nodes that have its
//!   viewers (authenticated with the cluster key; not TURN, which lives in `ferry-proto::turn`).
//! - [`tunnel`]: the edge tunnel that carries a migrated session's datagrams from the address
//!   the client still sends to, to the node that now owns the session.
//! - [`edge`]: the edge forwarder's state machine (client address → owning node).
//! - [`shards`]: a node on several cores: which core owns a stream, a session, a datagram.

pub mod edge;
pub mod relay;
pub mod relay_seal;
pub mod shards;
pub mod tunnel;
