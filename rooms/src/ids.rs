//! Identifiers of the room core. Replicas are cluster nodes, so a replica is a `NodeId`.

use ferry_proto::typed_id;

typed_id!(
    /// A room (`standup`, `all-hands-2024`).
    RoomId
);
typed_id!(
    /// One participant of a room; stable across reconnects and migrations.
    ParticipantId
);
typed_id!(
    /// A client-chosen key for one operation (UUIDv7 or `client-seq`); a retry reuses it.
    IdempotencyKey
);

/// The replica that stamps and numbers operations: the node hosting the room's replica.
pub type ReplicaId = ferry_proto::ids::NodeId;
