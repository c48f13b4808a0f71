//! Who leads among scheduler replicas, as one replica sees it. With the embedded store there is
//! one replica and it always leads; with etcd ([`crate::ha`]) replicas elect one.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Who leads, as this replica sees it. Without etcd every scheduler leads.
#[derive(Debug)]
pub struct Leadership {
    leader: AtomicBool,
    leader_url: Mutex<Option<String>>,
    /// The election key this replica won with and its creation revision.
    fence: Mutex<Option<(Vec<u8>, i64)>>,
    /// Revision of the state key last seen.
    state_revision: AtomicI64,
    /// Leadership changed (either way).
    pub changed: Notify,
    /// The stored state changed (followers reload).
    pub state_changed: Notify,
}

impl Leadership {
    /// A replica that always leads (the embedded store).
    pub fn sole() -> Arc<Self> {
        Arc::new(Leadership {
            leader: AtomicBool::new(true),
            leader_url: Mutex::new(None),
            fence: Mutex::new(None),
            state_revision: AtomicI64::new(0),
            changed: Notify::new(),
            state_changed: Notify::new(),
        })
    }

    /// A replica that follows until it wins an election.
    pub fn follower() -> Arc<Self> {
        let l = Self::sole();
        l.leader.store(false, Ordering::SeqCst);
        l
    }

    /// Whether this replica leads now.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
    }

    /// The leader's base URL, if known (this replica's own when it leads).
    pub fn leader_url(&self) -> Option<String> {
        self.leader_url
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records a revision of the stored state.
    pub fn saw_revision(&self, rev: i64) {
        self.state_revision.fetch_max(rev, Ordering::SeqCst);
    }

    /// The revision of the stored state last seen (its version).
    pub fn state_revision(&self) -> i64 {
        self.state_revision.load(Ordering::SeqCst)
    }

    /// Records who leads.
    pub fn set_leader_url(&self, url: Option<String>) {
        *self.leader_url.lock().unwrap_or_else(|e| e.into_inner()) = url;
    }

    /// This replica won the election with `key` created at `rev`.
    pub fn won(&self, key: Vec<u8>, rev: i64, me: &str) {
        *self.fence.lock().unwrap_or_else(|e| e.into_inner()) = Some((key, rev));
        self.set_leader_url(Some(me.to_owned()));
        self.leader.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
        self.changed.notify_one();
    }

    /// This replica no longer leads (its lease ended, or a write was fenced).
    pub fn lost(&self) {
        *self.fence.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if self.leader.swap(false, Ordering::SeqCst) {
            self.set_leader_url(None);
            tracing::warn!("this scheduler is no longer the leader");
            self.changed.notify_waiters();
            self.changed.notify_one();
        }
    }

    /// The election key this replica leads with and its creation revision.
    pub fn fence(&self) -> Option<(Vec<u8>, i64)> {
        self.fence.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
