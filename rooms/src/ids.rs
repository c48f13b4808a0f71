//! Identifiers of the room core. Replicas are cluster nodes, so a replica is a `NodeId`.

use ferry_proto::typed_id;
use sha2::{Digest as _, Sha256};

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

impl ParticipantId {
    /// How logs name the participant (DESIGN §8: no user id in logs beyond a hashed form):
    /// `p-` and the first 8 hex digits of the id's SHA-256. The same participant reads the same
    /// in every line and on every node; the id itself is not written.
    pub fn in_logs(&self) -> String {
        let h = Sha256::digest(self.as_str().as_bytes());
        format!("p-{:02x}{:02x}{:02x}{:02x}", h[0], h[1], h[2], h[3])
    }
}

/// The replica that stamps and numbers operations: the node hosting the room's replica.
pub type ReplicaId = ferry_proto::ids::NodeId;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_name_a_participant_by_a_stable_hash_not_its_id() {
        let p = ParticipantId::new("alice.smith").unwrap();
        let l = p.in_logs();
        assert_eq!(l, ParticipantId::new("alice.smith").unwrap().in_logs());
        assert_ne!(l, ParticipantId::new("bob").unwrap().in_logs());
        assert!(
            l.starts_with("p-") && l.len() == 10 && !l.contains("alice"),
            "{l}"
        );
    }
}
