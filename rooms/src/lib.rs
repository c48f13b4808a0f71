//! Ferry rooms: the pure room-state core.
//!
//! A room's state (participants, their registers and tracks, reactions, chat) is a CRDT
//! replicated on every node that hosts a participant of the room. This crate is the core of
//! that: no IO, no clock reads, no randomness. Time comes in as `now_ms` arguments.
//!
//! - [`hlc`]: hybrid logical clock, monotonic under wall-clock steps, drift-bounded.
//! - [`state`]: [`RoomState`], the CRDT (OR-Sets, LWW registers, PN-counter, chat sequence),
//!   delta-state sync against acknowledged version vectors, tombstone collection.
//! - [`digest`]: Merkle digest for anti-entropy (`digest`, `diff`, `subtree`).
//! - [`fanout`]: the push tree an op takes from the replica that stamped it to the others.
//! - [`replica`]: [`Replica`], one room replica: commands, ops, deltas, acks, anti-entropy.
//! - [`idempotency`]: client idempotency keys (≥ 30 s, bounded).
//! - [`merge_window`]: 50/100/200 ms merge windows for outgoing events.
//! - [`codec`]: the stable binary encoding (version byte + postcard).
//! - [`join`]: `POST /v1/rooms/{room}/join` (where a participant's room WebSocket goes).
//! - `server` (feature `server`): a node's room server, the WebSocket and replication driver.
//!
//! # Drive loop
//!
//! A driver owns sockets and timers and does, per room replica:
//! client command → [`Replica::handle_command`] → reply with the receipt, send the op to its
//! [`fanout::children`],
//! push [`Change::from_op`] into the [`MergeWindow`]; peer `Op` → [`Replica::handle_op`] →
//! if new, on to this replica's children in the op's tree;
//! delta timer → [`Replica::sync_round`] → [`Replica::delta_for`] each tree neighbour that is
//! behind, the `Summary` to the parent, the `Watermark` to the children (peer `Summary` →
//! [`Replica::handle_summary`], `Watermark` → [`Replica::handle_watermark`]); peer `Delta` →
//! [`Replica::handle_delta`] →
//! send the `Ack` back → [`Replica::handle_ack`]; every 30 s and on reconnect
//! [`Replica::start_anti_entropy`]; window timer ([`MergeWindow::poll_timeout`]) →
//! [`MergeWindow::poll`] → one batched event to the room's clients.
//!
//! ```
//! use ferry_room::{Command, Replica, ReplicaConfig, ReplicaId, RoomId, ParticipantId, IdempotencyKey};
//!
//! let (a, b) = (ReplicaId::new("node-a").unwrap(), ReplicaId::new("node-b").unwrap());
//! let room = RoomId::new("standup").unwrap();
//! let mut ra = Replica::new(ReplicaConfig::new(a.clone(), room.clone(), vec![b.clone()]));
//! let mut rb = Replica::new(ReplicaConfig::new(b.clone(), room, vec![a.clone()]));
//!
//! let alice = ParticipantId::new("alice").unwrap();
//! let join = Command::Join { participant: alice.clone(), name: "Alice".into(), metadata: String::new() };
//! let out = ra.handle_command(1_000, IdempotencyKey::new("k1").unwrap(), join.clone()).unwrap();
//! // A retry with the same key returns the same receipt and no new op.
//! let retry = ra.handle_command(1_200, IdempotencyKey::new("k1").unwrap(), join).unwrap();
//! assert_eq!((retry.receipt, retry.op), (out.receipt, None));
//!
//! // Delta sync: b merges what a has and acknowledges it.
//! let ack = rb.handle_delta(1_010, &ra.delta_for(&b)).unwrap();
//! ra.handle_ack(&ack);
//! assert!(rb.state().is_present(&alice));
//! assert_eq!(ra.state().digest(), rb.state().digest());
//! ```

pub mod codec;
pub mod context;
pub mod digest;
pub mod fanout;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzz;
pub mod hlc;
pub mod idempotency;
pub mod ids;
pub mod join;
pub mod merge_window;
pub mod op;
pub mod replica;
#[cfg(feature = "server")]
pub mod server;
pub mod snapshot;
pub mod state;

#[cfg(test)]
mod sim;

pub use codec::{CodecError, Message, decode, encode};
pub use context::{CausalContext, Dot, VersionVector};
pub use digest::{Digest, Key, Subtree};
pub use hlc::{Hlc, HlcClock, HlcError};
pub use idempotency::{IdempotencyStore, Lookup, Receipt};
pub use ids::{IdempotencyKey, ParticipantId, ReplicaId, RoomId};
pub use merge_window::{Batch, Change, MergeWindow};
pub use op::{Command, CommandError, Layout, Op, OpKind, Register, TrackKind, Value};
pub use replica::{
    Ack, AeFinish, AeReply, AeRequest, CommandOutcome, Replica, ReplicaConfig, Summary, SyncRound,
    Watermark,
};
pub use state::{Delta, RoomState, RoomView, SyncError, Touched};
