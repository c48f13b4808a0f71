//! Client idempotency keys: a retried operation returns the first result and changes nothing.
//!
//! Keys are remembered for at least the retention (30 s by default, measured on the `now_ms`
//! the caller passes) and memory is bounded by a capacity. When the store is full of keys
//! younger than the retention it refuses new operations with a retry-after rather than forget
//! a key early: forgetting would let a late retry apply twice.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::context::Dot;
use crate::hlc::Hlc;
use crate::ids::IdempotencyKey;

/// How long keys are kept by default.
pub const DEFAULT_RETENTION_MS: u64 = 30_000;
/// How many keys are kept at most by default (~2,000 operations/s for 30 s).
pub const DEFAULT_CAPACITY: usize = 65_536;

/// The result of an operation, as returned to its client (and again to every retry).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Receipt {
    /// The operation's identity.
    pub dot: Dot,
    /// Its stamp.
    pub stamp: Hlc,
}

/// What the store knows about a key.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Lookup {
    /// Never seen (or forgotten after the retention): apply the operation.
    Fresh,
    /// Seen: return this and apply nothing.
    Replay(Receipt),
    /// Seen with a different request.
    Conflict,
}

/// The store refuses to remember another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// Every slot holds a key younger than the retention.
    #[error("idempotency store full, a slot frees in {retry_after_ms} ms")]
    Full {
        /// When the oldest key may be forgotten.
        retry_after_ms: u64,
    },
}

#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
struct Remembered {
    at_ms: u64,
    fingerprint: Option<u64>,
    receipt: Receipt,
}

/// Remembered keys, oldest first.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct IdempotencyStore {
    retention_ms: u64,
    capacity: usize,
    keys: BTreeMap<IdempotencyKey, Remembered>,
    order: VecDeque<(u64, IdempotencyKey)>,
}

impl IdempotencyStore {
    /// A store keeping keys `retention_ms` and at most `capacity` of them.
    pub fn new(retention_ms: u64, capacity: usize) -> Self {
        Self {
            retention_ms,
            capacity: capacity.max(1),
            keys: BTreeMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Forgets keys older than the retention.
    pub fn expire(&mut self, now_ms: u64) {
        while let Some((at, key)) = self.order.front() {
            if at.saturating_add(self.retention_ms) > now_ms {
                break;
            }
            self.keys.remove(key);
            self.order.pop_front();
        }
    }

    /// Looks a key up. `fingerprint` identifies the request; `None` matches anything.
    pub fn lookup(
        &mut self,
        now_ms: u64,
        key: &IdempotencyKey,
        fingerprint: Option<u64>,
    ) -> Lookup {
        self.expire(now_ms);
        match self.keys.get(key) {
            None => Lookup::Fresh,
            Some(r) => match (r.fingerprint, fingerprint) {
                (Some(a), Some(b)) if a != b => Lookup::Conflict,
                _ => Lookup::Replay(r.receipt.clone()),
            },
        }
    }

    /// Whether `remember` would succeed now.
    pub fn check_room(&mut self, now_ms: u64) -> Result<(), IdempotencyError> {
        self.expire(now_ms);
        if self.keys.len() < self.capacity {
            return Ok(());
        }
        let oldest = self.order.front().map_or(now_ms, |(at, _)| *at);
        Err(IdempotencyError::Full {
            retry_after_ms: oldest
                .saturating_add(self.retention_ms)
                .saturating_sub(now_ms)
                .max(1),
        })
    }

    /// Remembers a key's first result. A key already held keeps its first result.
    pub fn remember(
        &mut self,
        now_ms: u64,
        key: IdempotencyKey,
        fingerprint: Option<u64>,
        receipt: Receipt,
    ) -> Result<(), IdempotencyError> {
        if self.keys.contains_key(&key) {
            return Ok(());
        }
        self.check_room(now_ms)?;
        self.order.push_back((now_ms, key.clone()));
        self.keys.insert(
            key,
            Remembered {
                at_ms: now_ms,
                fingerprint,
                receipt,
            },
        );
        Ok(())
    }
}

impl Default for IdempotencyStore {
    fn default() -> Self {
        Self::new(DEFAULT_RETENTION_MS, DEFAULT_CAPACITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ReplicaId;

    fn receipt(seq: u64) -> Receipt {
        let replica = ReplicaId::new("a").unwrap();
        Receipt {
            dot: Dot {
                replica: replica.clone(),
                seq,
            },
            stamp: Hlc {
                wall_ms: seq,
                logical: 0,
                replica,
            },
        }
    }

    fn key(s: &str) -> IdempotencyKey {
        IdempotencyKey::new(s).unwrap()
    }

    #[test]
    fn keys_are_kept_for_the_retention_then_forgotten() {
        let mut s = IdempotencyStore::new(30_000, 10);
        s.remember(1_000, key("k1"), Some(7), receipt(1)).unwrap();
        assert_eq!(
            s.lookup(30_999, &key("k1"), Some(7)),
            Lookup::Replay(receipt(1))
        );
        assert_eq!(s.lookup(31_000, &key("k1"), Some(7)), Lookup::Fresh);
        assert!(s.is_empty());
    }

    #[test]
    fn a_key_keeps_its_first_result_and_detects_a_different_request() {
        let mut s = IdempotencyStore::new(30_000, 10);
        s.remember(0, key("k1"), Some(7), receipt(1)).unwrap();
        s.remember(5, key("k1"), Some(7), receipt(2)).unwrap();
        assert_eq!(
            s.lookup(10, &key("k1"), Some(7)),
            Lookup::Replay(receipt(1))
        );
        assert_eq!(s.lookup(10, &key("k1"), Some(8)), Lookup::Conflict);
        assert_eq!(s.lookup(10, &key("k1"), None), Lookup::Replay(receipt(1)));
    }

    #[test]
    fn a_full_store_refuses_instead_of_forgetting_early() {
        let mut s = IdempotencyStore::new(30_000, 2);
        s.remember(0, key("k1"), None, receipt(1)).unwrap();
        s.remember(10, key("k2"), None, receipt(2)).unwrap();
        assert_eq!(
            s.remember(20_000, key("k3"), None, receipt(3)),
            Err(IdempotencyError::Full {
                retry_after_ms: 10_000
            })
        );
        assert_eq!(s.len(), 2);
        s.remember(30_000, key("k3"), None, receipt(3)).unwrap();
        assert_eq!(s.lookup(30_000, &key("k1"), None), Lookup::Fresh);
        assert_eq!(
            s.lookup(30_000, &key("k2"), None),
            Lookup::Replay(receipt(2))
        );
    }
}
