//! A bounded memory of finished migrations, so replayed messages get the
//! same answer and change nothing.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use ferry_proto::{MigrationId, NodeId};

use crate::report::Outcome;
use crate::wire::Body;

/// How a migration ended, as a state machine hands it back.
pub(crate) struct Finish {
    pub(crate) outcome: Outcome,
    pub(crate) reason: Option<String>,
    pub(crate) epoch: u64,
    /// The answer to any later message of this migration from the peer.
    pub(crate) reply: Option<Body>,
    pub(crate) blackout: Option<Duration>,
}

#[derive(Debug)]
pub(crate) struct FinishedRecord {
    pub(crate) peer: NodeId,
    pub(crate) outcome: Outcome,
    pub(crate) reply: Option<Body>,
}

/// The last `capacity` finished migrations, oldest forgotten first.
#[derive(Debug)]
pub(crate) struct FinishedLog {
    capacity: usize,
    order: VecDeque<MigrationId>,
    records: HashMap<MigrationId, FinishedRecord>,
}

impl FinishedLog {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            order: VecDeque::new(),
            records: HashMap::new(),
        }
    }

    pub(crate) fn get(&self, id: &MigrationId) -> Option<&FinishedRecord> {
        self.records.get(id)
    }

    pub(crate) fn insert(&mut self, id: MigrationId, peer: NodeId, f: &Finish) {
        let rec = FinishedRecord {
            peer,
            outcome: f.outcome,
            reply: f.reply.clone(),
        };
        if self.records.insert(id.clone(), rec).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.records.remove(&old);
            }
        }
    }
}
