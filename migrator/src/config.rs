//! Tunables of the migration protocol.

use std::time::Duration;

use ferry_proto::state::SNAPSHOT_VERSION;

use crate::wire::MAX_CHUNK;

/// Timeouts, windows and limits of one node's [`crate::Migrator`]. The
/// defaults are documented in `docs/migration.md`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Snapshot format version this node writes, and the newest it reads.
    pub snapshot_version: u32,
    /// How long an unanswered message waits before it is sent again.
    pub retry_interval: Duration,
    /// Source: `Prepare` → `Prepared` (target prewarm included).
    pub prepare_timeout: Duration,
    /// Source: silence from the target during snapshot and WAL → rollback.
    pub peer_timeout: Duration,
    /// Source: freeze → `Ready`; past it the source resumes. Bounds the
    /// freeze of a failed cutover. The source waits four of the round trips
    /// it measured (`Prepare` → `Prepared`, target prewarm included), but at
    /// least [`Config::cutover_timeout_min`] and at most this.
    pub cutover_timeout: Duration,
    /// Source: the shortest wait for `Ready` (see `cutover_timeout`). At
    /// 150 ms a target that died mid-cutover costs the client ~150 ms of
    /// media, under Chromium's freeze threshold at 30 fps (~183 ms).
    pub cutover_timeout_min: Duration,
    /// Source: how long `Commit` is repeated without `Committed` before the
    /// migration is reported as committed but unconfirmed.
    pub commit_retry_for: Duration,
    /// Target: silence from the source before `Ready` → discard.
    pub idle_timeout: Duration,
    /// Target: `Ready` without `Commit` → discard.
    pub commit_wait: Duration,
    /// Source: how often new WAL records are taken from the host.
    pub wal_interval: Duration,
    /// Source: quiesce once the unacknowledged WAL is at most this many
    /// bytes.
    pub catch_up_bytes: usize,
    /// Source: longest WAL phase; past it the source quiesces anyway and the
    /// `Cutover` carries the rest.
    pub catch_up_max: Duration,
    /// Largest WAL batch in one `Wal` message (a bigger record goes alone).
    pub wal_batch_bytes: usize,
    /// Snapshot chunk size (at most 64 KiB).
    pub chunk_size: usize,
    /// Snapshot chunks sent ahead of the acknowledgements.
    pub snapshot_window: u32,
    /// Target: largest snapshot accepted.
    pub max_snapshot_bytes: usize,
    /// Finished migrations remembered to answer replays.
    pub finished_capacity: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            snapshot_version: SNAPSHOT_VERSION,
            retry_interval: Duration::from_millis(50),
            prepare_timeout: Duration::from_secs(2),
            peer_timeout: Duration::from_secs(2),
            cutover_timeout: Duration::from_millis(500),
            cutover_timeout_min: Duration::from_millis(150),
            commit_retry_for: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(5),
            commit_wait: Duration::from_secs(15),
            wal_interval: Duration::from_millis(5),
            catch_up_bytes: 16 * 1024,
            catch_up_max: Duration::from_secs(2),
            wal_batch_bytes: 64 * 1024,
            chunk_size: MAX_CHUNK,
            snapshot_window: 16,
            max_snapshot_bytes: 64 << 20,
            finished_capacity: 4096,
        }
    }
}
