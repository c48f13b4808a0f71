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

/// Node liveness kept in the store (etcd leases, [`crate::ha`]) instead of counted from missed
/// heartbeats: the leader renews a node's lease on each of its heartbeats, and learns of the
/// nodes whose lease expired. The two ends of the channels the store's task serves.
#[derive(Debug)]
pub struct NodeLeases {
    commands: tokio::sync::mpsc::UnboundedSender<LeaseCommand>,
    expired: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<ferry_proto::NodeId>>,
}

/// What the leader asks of the node leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseCommand {
    /// The node sent a heartbeat: keep its lease (or give it one).
    Renew(ferry_proto::NodeId),
    /// This replica just took the lead: every node it holds as up gets a lease of its own
    /// (reusing the one its key already has), so a node that died while no replica led is down
    /// a lease after the takeover, and one that lives keeps it by heartbeating.
    Adopt(Vec<ferry_proto::NodeId>),
}

/// The store's end of [`NodeLeases`].
#[derive(Debug)]
pub struct NodeLeaseTask {
    /// Commands from the leader.
    pub commands: tokio::sync::mpsc::UnboundedReceiver<LeaseCommand>,
    /// Nodes whose lease expired (sent only while this replica leads).
    pub expired: tokio::sync::mpsc::UnboundedSender<ferry_proto::NodeId>,
}

impl NodeLeases {
    /// The leader's end and the store's end.
    pub fn channel() -> (Arc<NodeLeases>, NodeLeaseTask) {
        let (commands, commands_rx) = tokio::sync::mpsc::unbounded_channel();
        let (expired_tx, expired) = tokio::sync::mpsc::unbounded_channel();
        (
            Arc::new(NodeLeases {
                commands,
                expired: tokio::sync::Mutex::new(expired),
            }),
            NodeLeaseTask {
                commands: commands_rx,
                expired: expired_tx,
            },
        )
    }

    /// Asks for `command` (never blocks; the store's task carries it out in order).
    pub fn send(&self, command: LeaseCommand) {
        // The task lives as long as the store's runtime: a closed channel means the process
        // is stopping.
        let _ = self.commands.send(command);
    }

    /// The next node whose lease expired; pending forever once the store's task is gone.
    pub async fn next_expired(&self) -> ferry_proto::NodeId {
        match self.expired.lock().await.recv().await {
            Some(id) => id,
            None => std::future::pending().await,
        }
    }
}
