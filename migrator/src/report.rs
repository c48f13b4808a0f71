//! What a migration tells the node: phase changes and a final report.

use std::collections::BTreeMap;
use std::time::Duration;

use ferry_proto::api::{CutoverMode, MigrationState};
use ferry_proto::{MigrationId, NodeId, SessionId};

/// Which side of a migration this node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// It owned the session.
    Source,
    /// It takes the session.
    Target,
}

/// Protocol phases (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// `Prepare` sent / target prewarming.
    Prepare,
    /// Snapshot chunks in flight.
    Snapshot,
    /// WAL streaming and catch-up.
    Wal,
    /// Source frozen, `Cutover` in flight, target installing.
    Cutover,
    /// `Commit` sent (source) / waiting for it (target).
    Commit,
}

impl Phase {
    /// The name used in reports and the API (`phases_ms` keys).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Prepare => "prepare",
            Phase::Snapshot => "snapshot",
            Phase::Wal => "wal",
            Phase::Cutover => "cutover",
            Phase::Commit => "commit",
        }
    }
}

/// How a migration ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Source: the target confirmed activation. Target: activated.
    Committed,
    /// Source only: `Commit` was sent (the session is released) but no
    /// `Committed` came back within `commit_retry_for`. The target owns the
    /// session if the `Commit` reached it.
    Unconfirmed,
    /// Undone before commit: the source kept or resumed the session; the
    /// target discarded what it had.
    RolledBack,
    /// The target refused at `Prepare`; nothing was moved.
    Refused,
    /// After commit the target could not activate (or had discarded): the
    /// session is gone from both nodes.
    Lost,
}

impl Outcome {
    /// The API's state for it.
    pub fn state(self) -> MigrationState {
        match self {
            Outcome::Committed | Outcome::Unconfirmed => MigrationState::Committed,
            Outcome::RolledBack => MigrationState::RolledBack,
            Outcome::Refused | Outcome::Lost => MigrationState::Failed,
        }
    }
}

/// Duration of each phase as this node saw it (`None`: not reached).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhaseDurations {
    /// Source: `Prepare` → `Prepared`. Target: `Prepare` → prewarm done.
    pub prepare: Option<Duration>,
    /// Source: `Prepared` → last chunk acknowledged. Target: first chunk →
    /// snapshot imported.
    pub snapshot: Option<Duration>,
    /// Source: snapshot acknowledged → freeze. Target: import → `Cutover`.
    pub wal: Option<Duration>,
    /// Source: freeze → `Ready`. Target: `Cutover` → final state installed.
    pub cutover: Option<Duration>,
    /// Source: `Commit` → `Committed`. Target: `Ready` → `Commit`.
    pub commit: Option<Duration>,
}

impl PhaseDurations {
    /// Finished phases in ms, keyed by [`Phase::name`] (the API's `phases_ms`).
    pub fn to_ms(&self) -> BTreeMap<String, u64> {
        [
            (Phase::Prepare, self.prepare),
            (Phase::Snapshot, self.snapshot),
            (Phase::Wal, self.wal),
            (Phase::Cutover, self.cutover),
            (Phase::Commit, self.commit),
        ]
        .into_iter()
        .filter_map(|(p, d)| {
            d.map(|d| {
                (
                    p.name().to_owned(),
                    u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
                )
            })
        })
        .collect()
    }

    pub(crate) fn set(&mut self, phase: Phase, d: Duration) {
        let slot = match phase {
            Phase::Prepare => &mut self.prepare,
            Phase::Snapshot => &mut self.snapshot,
            Phase::Wal => &mut self.wal,
            Phase::Cutover => &mut self.cutover,
            Phase::Commit => &mut self.commit,
        };
        *slot = Some(d);
    }
}

/// The final account of one migration on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The migration.
    pub id: MigrationId,
    /// The session.
    pub session: SessionId,
    /// This node's side.
    pub role: Role,
    /// The other node.
    pub peer: NodeId,
    /// How it ended.
    pub outcome: Outcome,
    /// Why it did not commit (or why it was lost).
    pub reason: Option<String>,
    /// The ownership epoch after the migration on this node's side: the
    /// target's when committed, the source's after a resume.
    pub epoch: u64,
    /// Per-phase durations.
    pub phases: PhaseDurations,
    /// Encoded snapshot bytes moved (once, retransmissions not counted).
    pub snapshot_bytes: u64,
    /// Encoded WAL bytes moved (once), including the `Cutover`'s records
    /// and final state.
    pub wal_bytes: u64,
    /// WAL records moved.
    pub wal_records: u64,
    /// Freeze → activate as the protocol sees it: the source's freeze →
    /// `Commit` time, plus half its round-trip estimate for `Commit` to
    /// travel. Known to the target on commit, and to the source once
    /// `Committed` arrives.
    pub blackout: Option<Duration>,
}

/// What [`crate::Migrator::poll_event`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationEvent {
    /// A migration entered a phase.
    Phase {
        /// The migration.
        id: MigrationId,
        /// This node's side.
        role: Role,
        /// The phase entered.
        phase: Phase,
    },
    /// This node accepted an incoming migration (target side), before
    /// its first `Phase` event.
    Accepted {
        /// The migration.
        id: MigrationId,
        /// The session coming in.
        session: SessionId,
        /// The node it comes from.
        source: NodeId,
        /// How its client is redirected.
        mode: CutoverMode,
        /// The source's W3C `traceparent` (may be empty).
        trace_parent: String,
    },
    /// A migration ended here; nothing more will happen for it.
    Finished(Box<MigrationReport>),
}
