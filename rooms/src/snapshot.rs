//! Room snapshots for a full-cluster restart (DESIGN §7, issue 12 scope 5): every node hosting a
//! room stores its replica's [`RoomState`] with the scheduler now and then; a node opening a
//! room merges every node's stored snapshot of it into its fresh replica (a CRDT join, so the
//! order and repeats do not matter, and a snapshot older than what peers send loses nothing).
//!
//! Wire: `PUT /v1/rooms/{room}/snapshots/{node}` carries one [`encode`]d `RoomState`;
//! `GET /v1/rooms/{room}/snapshots` answers one encoded `Vec<StoredSnapshot>`.

use serde::{Deserialize, Serialize};

use crate::codec::{self, CodecError};
use crate::ids::{ReplicaId, RoomId};
use crate::state::RoomState;

/// Largest snapshot the scheduler keeps (one room's state, encoded).
pub const MAX_SNAPSHOT_BYTES: usize = 4 << 20;

/// One node's snapshot of a room, as the scheduler keeps it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct StoredSnapshot {
    /// The node whose replica it is.
    pub node: ReplicaId,
    /// When the scheduler took it, ms since the epoch.
    pub saved_at_ms: u64,
    /// The replica's state.
    pub state: RoomState,
}

/// Why a snapshot is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Over [`MAX_SNAPSHOT_BYTES`].
    #[error("a snapshot of {0} bytes is over the limit of {MAX_SNAPSHOT_BYTES}")]
    TooLarge(usize),
    /// Not an encoded room state.
    #[error("not a room state: {0}")]
    Codec(#[from] CodecError),
    /// The state of another room than the path names.
    #[error("the snapshot is of room {got}, not {want}")]
    WrongRoom {
        /// The room of the path.
        want: RoomId,
        /// The room of the state.
        got: RoomId,
    },
}

/// Checks an uploaded snapshot of `room`: its state.
pub fn check(room: &RoomId, bytes: &[u8]) -> Result<RoomState, SnapshotError> {
    if bytes.len() > MAX_SNAPSHOT_BYTES {
        return Err(SnapshotError::TooLarge(bytes.len()));
    }
    let state: RoomState = codec::decode(bytes)?;
    if state.room() != room {
        return Err(SnapshotError::WrongRoom {
            want: room.clone(),
            got: state.room().clone(),
        });
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, IdempotencyKey, ParticipantId, Replica, ReplicaConfig};

    fn replica(node: &str, room: &RoomId) -> Replica {
        Replica::new(ReplicaConfig::new(
            ReplicaId::new(node).unwrap(),
            room.clone(),
            Vec::new(),
        ))
    }

    fn run(r: &mut Replica, now: u64, key: &str, cmd: Command) {
        r.handle_command(now, IdempotencyKey::new(key).unwrap(), cmd)
            .unwrap();
    }

    #[test]
    fn snapshots_of_diverged_replicas_restore_one_state() {
        let room = RoomId::new("standup").unwrap();
        let (mut a, mut b) = (replica("node-a", &room), replica("node-b", &room));
        let alice = ParticipantId::new("alice").unwrap();
        let bob = ParticipantId::new("bob").unwrap();
        let join = |p: &ParticipantId| Command::Join {
            participant: p.clone(),
            name: p.to_string(),
            metadata: String::new(),
        };
        run(&mut a, 1_000, "a1", join(&alice));
        run(&mut b, 1_001, "b1", join(&bob));
        run(
            &mut a,
            1_002,
            "a2",
            Command::Chat {
                participant: alice.clone(),
                text: "before the restart".into(),
            },
        );
        // What both would converge to.
        let mut merged = a.clone();
        merged.handle_delta(1_003, &b.delta_for(a.id())).unwrap();

        let stored: Vec<Vec<u8>> = [&a, &b]
            .iter()
            .map(|r| codec::encode(r.state()).unwrap())
            .collect();
        // A fresh replica (the node came back with nothing) merges both, in either order, twice.
        for order in [[0, 1], [1, 0]] {
            let mut fresh = replica("node-a", &room);
            for i in order.iter().chain(order.iter()) {
                let state = check(&room, &stored[*i]).unwrap();
                fresh.merge_snapshot(2_000, &state).unwrap();
            }
            assert_eq!(fresh.state().digest(), merged.state().digest());
            let view = fresh.state().view();
            assert_eq!(view.participants.len(), 2);
            assert_eq!(view.chat[0].text, "before the restart");
            // Its own next operation does not reuse a dot it had before the restart.
            run(
                &mut fresh,
                2_001,
                "a3",
                join(&ParticipantId::new("carol").unwrap()),
            );
            assert_eq!(fresh.state().version().get(a.id()), 3);
        }
    }

    #[test]
    fn bad_snapshots_are_refused() {
        let room = RoomId::new("standup").unwrap();
        let other = replica("node-a", &RoomId::new("other").unwrap());
        let bytes = codec::encode(other.state()).unwrap();
        assert!(matches!(
            check(&room, &bytes),
            Err(SnapshotError::WrongRoom { .. })
        ));
        assert!(matches!(
            check(&room, b"\x01garbage"),
            Err(SnapshotError::Codec(_))
        ));
        assert!(matches!(check(&room, b""), Err(SnapshotError::Codec(_))));
        let big = vec![1u8; MAX_SNAPSHOT_BYTES + 1];
        assert!(matches!(
            check(&room, &big),
            Err(SnapshotError::TooLarge(_))
        ));
    }
}
