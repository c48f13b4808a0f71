//! Drain orchestration (DESIGN §5): a DRAINING node takes no new sessions;
//! its sessions are migrated away under a migration budget (at most N at
//! once, at most M started per second), failed migrations are retried a
//! few times, and the node is drained when none are left.
//!
//! The core decides which sessions to start; the driver asks the
//! [`Migrations`] implementation to carry them out and reports back.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use ferry_proto::api::{DrainStatus, MigrationView, NodeState};
use ferry_proto::{MigrationId, NodeId, SessionId};
use serde::{Deserialize, Serialize};

/// How fast a drain may move sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainBudget {
    /// Migrations in flight at once, per node.
    pub max_concurrent: usize,
    /// Migrations started per second, per node.
    pub max_per_second: u32,
    /// Attempts per session before it is left to end on its own.
    pub max_attempts: u32,
}

impl Default for DrainBudget {
    fn default() -> Self {
        Self {
            max_concurrent: 16,
            max_per_second: 100,
            max_attempts: 3,
        }
    }
}

/// The drain of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    /// The node.
    pub node: NodeId,
    pending: VecDeque<SessionId>,
    running: BTreeMap<MigrationId, SessionId>,
    attempts: BTreeMap<SessionId, u32>,
    /// Sessions whose migration committed: the node stops reporting them
    /// shortly, and they must not be moved twice meanwhile.
    moved: std::collections::BTreeSet<SessionId>,
    /// Start times within the last second (age in ms is not needed: the
    /// window is rebuilt after a restart).
    #[serde(skip)]
    window: VecDeque<Option<Instant>>,
    started: u64,
    committed: u64,
    failed: u64,
}

impl Drain {
    /// A drain of `node`, which currently holds `sessions`.
    pub fn new(node: NodeId, sessions: impl IntoIterator<Item = SessionId>) -> Self {
        Self {
            node,
            pending: sessions.into_iter().collect(),
            running: BTreeMap::new(),
            attempts: BTreeMap::new(),
            moved: Default::default(),
            window: VecDeque::new(),
            started: 0,
            committed: 0,
            failed: 0,
        }
    }

    /// Reconciles with the sessions the node reports: ended sessions are
    /// forgotten, new ones (arrived before the drain took effect) queued.
    pub fn refresh(&mut self, current: &[SessionId], budget: &DrainBudget) {
        self.pending.retain(|s| current.contains(s));
        self.moved.retain(|s| current.contains(s));
        for s in current {
            let queued = self.pending.contains(s)
                || self.running.values().any(|r| r == s)
                || self.moved.contains(s);
            let exhausted = self
                .attempts
                .get(s)
                .is_some_and(|a| *a >= budget.max_attempts);
            if !queued && !exhausted {
                self.pending.push_back(s.clone());
            }
        }
    }

    /// Sessions to start migrating now, within the budget.
    pub fn next(&mut self, now: Instant, budget: &DrainBudget) -> Vec<SessionId> {
        while self.window.front().is_some_and(|t| {
            t.is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_secs(1))
        }) {
            self.window.pop_front();
        }
        let by_rate = (budget.max_per_second as usize).saturating_sub(self.window.len());
        let by_concurrency = budget.max_concurrent.saturating_sub(self.running.len());
        let n = by_rate.min(by_concurrency).min(self.pending.len());
        let out: Vec<SessionId> = self.pending.drain(..n).collect();
        for _ in &out {
            self.window.push_back(Some(now));
        }
        out
    }

    /// When [`Drain::next`] may have more to start (the rate window opens).
    pub fn poll_timeout(&self, budget: &DrainBudget) -> Option<Instant> {
        if self.pending.is_empty() || self.running.len() >= budget.max_concurrent {
            return None;
        }
        self.window
            .front()
            .and_then(|t| *t)
            .map(|t| t + Duration::from_secs(1))
    }

    /// A migration was started for `session`.
    pub fn started(&mut self, session: SessionId, id: MigrationId) {
        *self.attempts.entry(session.clone()).or_default() += 1;
        self.running.insert(id, session);
        self.started += 1;
    }

    /// A migration ended. A failed one puts its session back in the queue
    /// (until its attempts are used up).
    pub fn finished(&mut self, id: &MigrationId, committed: bool, budget: &DrainBudget) {
        let Some(session) = self.running.remove(id) else {
            return;
        };
        if committed {
            self.committed += 1;
            self.moved.insert(session);
        } else {
            self.failed += 1;
            if self
                .attempts
                .get(&session)
                .is_none_or(|a| *a < budget.max_attempts)
            {
                self.pending.push_back(session);
            }
        }
    }

    /// Migrations of this drain still running.
    pub fn running(&self) -> impl Iterator<Item = &MigrationId> {
        self.running.keys()
    }

    /// Progress for the API.
    pub fn status(&self, state: NodeState, sessions_left: u64) -> DrainStatus {
        DrainStatus {
            node: self.node.clone(),
            state,
            sessions_left,
            migrations_started: self.started,
            migrations_committed: self.committed,
            migrations_failed: self.failed,
        }
    }
}

/// A boxed future, so the trait stays object-safe without extra crates.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the orchestrator needs from the migration machinery (DESIGN §4).
///
/// `source_http` is the base URL the migration's source node reports in its
/// heartbeats (`NodeView::http`): the node that carries the migration out.
pub trait Migrations: Send + Sync {
    /// Starts `migration` (state `planned`, target chosen) on its source
    /// node. Resolves once it is under way or has been refused; the error
    /// says why, in words an operator can act on.
    fn start(
        &self,
        migration: MigrationView,
        source_http: String,
    ) -> BoxFuture<'_, Result<(), StartRefused>>;

    /// The migration's current view as its source node reports it, `None`
    /// if unknown or unreachable right now.
    fn status(&self, id: MigrationId, source_http: String) -> BoxFuture<'_, Option<MigrationView>>;
}

/// Why a migration could not be started on its source node, in words an operator can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StartRefused {
    /// This scheduler cannot order migrations ([`NoMigrator`]).
    #[error("session migration is not available in this build")]
    Unavailable,
    /// The source node did not answer.
    #[error("source node at {base} unreachable: {reason}")]
    Unreachable {
        /// The node's HTTP base.
        base: String,
        /// What failed.
        reason: String,
    },
    /// The source node answered with an error.
    #[error("source node refused the migration ({status}): {reason}")]
    Refused {
        /// Its HTTP status.
        status: u16,
        /// Its reason.
        reason: String,
    },
    /// The call itself failed (its task panicked or was cancelled).
    #[error("calling the source node: {0}")]
    Call(String),
}

/// A migrator that refuses every migration with a clear reason, so a drain
/// degrades to "no new sessions, wait for the existing ones to end". For
/// tests and setups whose nodes cannot migrate; `ferry` wires
/// [`crate::node_client::HttpMigrations`].
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMigrator;

impl Migrations for NoMigrator {
    fn start(
        &self,
        _migration: MigrationView,
        _source_http: String,
    ) -> BoxFuture<'_, Result<(), StartRefused>> {
        Box::pin(async { Err(StartRefused::Unavailable) })
    }

    fn status(
        &self,
        _id: MigrationId,
        _source_http: String,
    ) -> BoxFuture<'_, Option<MigrationView>> {
        Box::pin(async { None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(i: usize) -> SessionId {
        SessionId::new(format!("s{i}")).unwrap()
    }

    fn mid(i: usize) -> MigrationId {
        MigrationId::new(format!("m{i}")).unwrap()
    }

    #[test]
    fn respects_concurrency_rate_and_retries() {
        let t0 = Instant::now();
        let budget = DrainBudget {
            max_concurrent: 3,
            max_per_second: 5,
            max_attempts: 2,
        };
        let mut d = Drain::new(NodeId::new("a").unwrap(), (0..10).map(sid));
        let first = d.next(t0, &budget);
        assert_eq!(first.len(), 3, "concurrency cap");
        for (i, s) in first.into_iter().enumerate() {
            d.started(s, mid(i));
        }
        assert!(d.next(t0, &budget).is_empty());
        d.finished(&mid(0), true, &budget);
        d.finished(&mid(1), true, &budget);
        d.finished(&mid(2), false, &budget);
        let second = d.next(t0, &budget);
        assert_eq!(second.len(), 2, "rate cap: 5 per second, 3 already started");
        assert!(d.next(t0 + Duration::from_millis(999), &budget).is_empty());
        assert_eq!(d.poll_timeout(&budget), Some(t0 + Duration::from_secs(1)));
        for (i, s) in second.into_iter().enumerate() {
            d.started(s, mid(10 + i));
        }
        let third = d.next(t0 + Duration::from_secs(1), &budget);
        assert_eq!(third.len(), 1, "concurrency cap again (2 running)");
        // The failed session came back to the queue exactly once more.
        let all: Vec<SessionId> = (0..10).map(sid).collect();
        d.refresh(&all, &budget);
        let st = d.status(NodeState::Draining, 10);
        assert_eq!(
            (
                st.migrations_started,
                st.migrations_committed,
                st.migrations_failed
            ),
            (5, 2, 1)
        );
    }

    #[test]
    fn refresh_forgets_ended_sessions_and_gives_up_after_attempts() {
        let t0 = Instant::now();
        let budget = DrainBudget {
            max_concurrent: 10,
            max_per_second: 100,
            max_attempts: 1,
        };
        let mut d = Drain::new(NodeId::new("a").unwrap(), (0..3).map(sid));
        d.refresh(&[sid(0), sid(2)], &budget);
        let go = d.next(t0, &budget);
        assert_eq!(go, vec![sid(0), sid(2)]);
        d.started(sid(0), mid(0));
        d.started(sid(2), mid(2));
        d.finished(&mid(0), false, &budget);
        d.refresh(&[sid(0), sid(2)], &budget);
        assert!(
            d.next(t0, &budget).is_empty(),
            "attempts used up: left to end on its own"
        );
    }
}
