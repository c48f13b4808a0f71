//! Merkle digest of a room state, for anti-entropy.
//!
//! The leaves are one hash per subtree — a participant's store, a one-minute chat bucket, the
//! reaction counters — over its canonical encoding (ordered maps), and the root hashes the
//! leaves in key order. Equal states have equal digests whatever order they merged in. Two
//! replicas compare roots; when they differ they compare leaves and exchange only the
//! subtrees whose leaves differ (`diff`, `subtree`, `merge_subtree`).
//!
//! Leaves hash tombstones too (so a missing removal is found), which makes a digest depend on
//! how far garbage collection went: replicas exchange their collection watermarks in the same
//! round (see `Replica`) so they collect identically before comparing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::ids::{ParticipantId, RoomId};
use crate::state::{Fragment, RoomState, SyncError};

/// Width of a chat bucket: messages are grouped by the minute of their stamp.
pub const CHAT_BUCKET_MS: u64 = 60_000;

/// A subtree of the state.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum Key {
    /// The reaction counters.
    Counters,
    /// One participant's store.
    Participant(ParticipantId),
    /// Chat messages stamped in minute `n` (`wall_ms / CHAT_BUCKET_MS`).
    Chat(u64),
}

/// A 128-bit truncated SHA-256.
pub type Hash = [u8; 16];

/// The digest: a root over per-subtree leaves.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Digest {
    /// Hash over all leaves in key order.
    pub root: Hash,
    /// One hash per non-empty subtree.
    pub leaves: BTreeMap<Key, Hash>,
}

impl Digest {
    /// Keys whose subtrees differ (present on one side only, or with different hashes).
    pub fn diff(&self, theirs: &Digest) -> Vec<Key> {
        if self.root == theirs.root {
            return Vec::new();
        }
        let mut keys: Vec<Key> = self
            .leaves
            .iter()
            .filter(|(k, h)| theirs.leaves.get(*k) != Some(*h))
            .map(|(k, _)| k.clone())
            .collect();
        keys.extend(
            theirs
                .leaves
                .keys()
                .filter(|k| !self.leaves.contains_key(*k))
                .cloned(),
        );
        keys.sort();
        keys
    }
}

/// One subtree's entries, tombstones included, as anti-entropy ships them.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Subtree {
    /// The room.
    pub room: RoomId,
    /// Which subtree.
    pub key: Key,
    /// Its entries.
    pub data: Fragment,
}

fn hash_of<T: Serialize>(value: &T) -> Hash {
    // postcard only fails on types it cannot express (unsized sequences); ours are all sized.
    let bytes = postcard::to_allocvec(value).unwrap_or_default();
    let full = Sha256::digest(&bytes);
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

impl RoomState {
    /// The Merkle digest of the state.
    pub fn digest(&self) -> Digest {
        let mut leaves = BTreeMap::new();
        let data = self.data();
        if !data.counters.is_empty() {
            leaves.insert(Key::Counters, hash_of(&data.counters));
        }
        for (p, store) in &data.participants {
            leaves.insert(Key::Participant(p.clone()), hash_of(store));
        }
        let mut bucket: Option<(u64, Vec<_>)> = None;
        for entry in &data.chat {
            let b = entry.0.stamp.wall_ms / CHAT_BUCKET_MS;
            match &mut bucket {
                Some((cur, items)) if *cur == b => items.push(entry),
                _ => {
                    if let Some((cur, items)) = bucket.take() {
                        leaves.insert(Key::Chat(cur), hash_of(&items));
                    }
                    bucket = Some((b, vec![entry]));
                }
            }
        }
        if let Some((cur, items)) = bucket {
            leaves.insert(Key::Chat(cur), hash_of(&items));
        }
        let root = hash_of(&leaves);
        Digest { root, leaves }
    }

    /// The keys whose subtrees differ from `theirs`.
    pub fn diff(&self, theirs: &Digest) -> Vec<Key> {
        self.digest().diff(theirs)
    }

    /// One subtree, tombstones included (empty if this replica holds nothing there).
    pub fn subtree(&self, key: &Key) -> Subtree {
        let data = self.data();
        let mut frag = Fragment::default();
        match key {
            Key::Counters => frag.counters = data.counters.clone(),
            Key::Participant(p) => {
                if let Some(s) = data.participants.get(p) {
                    frag.participants.insert(p.clone(), s.clone());
                }
            }
            Key::Chat(b) => {
                frag.chat = data
                    .chat
                    .iter()
                    .filter(|(id, _)| id.stamp.wall_ms / CHAT_BUCKET_MS == *b)
                    .map(|(id, m)| (id.clone(), m.clone()))
                    .collect();
            }
        }
        Subtree {
            room: self.room().clone(),
            key: key.clone(),
            data: frag,
        }
    }

    /// Merges a subtree from another replica; returns whether anything changed.
    pub fn merge_subtree(&mut self, subtree: &Subtree) -> Result<bool, SyncError> {
        if subtree.room != *self.room() {
            return Err(SyncError::WrongRoom {
                want: self.room().clone(),
                got: subtree.room.clone(),
            });
        }
        Ok(self.merge_entries(&subtree.data))
    }
}
