//! Migration of live sessions between nodes (DESIGN §4).
//!
//! The migrator never links media code: a node exposes its sessions through
//! [`SessionHost`], and the migration protocol (plan/prewarm, snapshot, WAL,
//! quiesce, cutover with a fencing epoch, commit/rollback, report) drives
//! that trait. The protocol core ([`Migrator`]) is a pure state machine;
//! [`transport`]s carry its [`Message`]s between nodes. `docs/migration.md`
//! describes the protocol.
//!
//! # Drive loop
//!
//! The node owns the task; the migrator is one more input of its select
//! loop, next to media sockets:
//!
//! ```no_run
//! # use ferry_migrator::{Migrator, SessionHost, driver, transport::Transport};
//! # async fn node_loop<H: SessionHost, T: Transport>(
//! #     mut migrator: Migrator, mut transport: T, mut host: H,
//! # ) -> Result<(), ferry_migrator::transport::TransportError> {
//! loop {
//!     tokio::select! {
//!         input = driver::next_input(migrator.poll_timeout(), &mut transport) => {
//!             driver::handle_input(&mut migrator, std::time::Instant::now(), &mut host, input?);
//!             driver::flush(&mut migrator, &transport);
//!             while let Some(event) = migrator.poll_event() {
//!                 // phase changes and final reports: metrics, traces, the API
//!                 # let _ = event;
//!             }
//!         }
//!         // media sockets, signalling, … (they may call `migrator.start`)
//!     }
//! }
//! # }
//! ```

// The core never reads the clock (clippy.toml); its tests may, to get a start time.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod config;
mod core;
pub mod crc32c;
#[cfg(feature = "runtime")]
pub mod driver;
pub mod frame;
pub mod report;
#[cfg(feature = "runtime")]
pub mod transport;
pub mod wire;

use std::time::Instant;

use ferry_proto::state::{SessionSnapshot, WalRecord};
use ferry_proto::{NodeId, SessionId, StreamId};

pub use crate::config::Config;
pub use crate::core::{AbortError, MigrationPlan, Migrator, StartError};
pub use crate::report::{MigrationEvent, MigrationReport, Outcome, Phase, PhaseDurations, Role};
pub use crate::wire::{Body, Message};

/// What a node offers the migrator for its sessions. All calls are
/// synchronous and made from the task that owns the node core.
///
/// The contract, in protocol order:
///
/// - **source**: [`SessionHost::export_snapshot`] (starts WAL capture) →
///   [`SessionHost::take_wal`] repeatedly → [`SessionHost::freeze`] (the
///   session stops sending; datagrams for it are held; returns the final
///   small state and the last WAL records) → then either
///   [`SessionHost::release`] (commit: forward held and later datagrams to
///   the target) or [`SessionHost::resume`] (rollback: continue exactly where
///   it froze; the target never sent anything).
/// - **target**: [`SessionHost::prewarm`] (capacity check, relay
///   subscriptions) → [`SessionHost::import_snapshot`] (installed inactive:
///   sends nothing) → [`SessionHost::apply_wal`] → [`SessionHost::install_final`]
///   (still inactive) → [`SessionHost::activate`] on commit, or
///   [`SessionHost::discard`] on abort.
pub trait SessionHost {
    /// Error type of the host.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Whether the host can take `session` of `stream` (capacity, version);
    /// prepares what it needs (e.g. a relay of the stream). `publisher`
    /// tells publish from view.
    fn prewarm(
        &mut self,
        now: Instant,
        session: &SessionId,
        stream: &StreamId,
        publisher: bool,
    ) -> Result<(), Self::Error>;

    /// Exports the full state of a session and starts capturing its WAL.
    fn export_snapshot(
        &mut self,
        now: Instant,
        session: &SessionId,
    ) -> Result<SessionSnapshot, Self::Error>;

    /// WAL records captured since the last call (positions increase by one).
    fn take_wal(&mut self, session: &SessionId) -> Result<Vec<WalRecord>, Self::Error>;

    /// Quiesces the session: it stops sending, and datagrams that arrive for
    /// it are held. Returns the final state (a snapshot whose packet caches
    /// are empty: the cache travelled as snapshot + WAL) and the WAL records
    /// captured since the last [`SessionHost::take_wal`].
    fn freeze(
        &mut self,
        now: Instant,
        session: &SessionId,
    ) -> Result<(SessionSnapshot, Vec<WalRecord>), Self::Error>;

    /// Rollback on the source: the session continues where it froze, at
    /// ownership `epoch`; held datagrams are processed.
    fn resume(&mut self, now: Instant, session: &SessionId, epoch: u64) -> Result<(), Self::Error>;

    /// Commit on the source: the session is gone from here; held and later
    /// datagrams for it are forwarded to `target` for a grace window.
    fn release(
        &mut self,
        now: Instant,
        session: &SessionId,
        target: &NodeId,
    ) -> Result<(), Self::Error>;

    /// Installs a session from a snapshot, inactive.
    fn import_snapshot(
        &mut self,
        now: Instant,
        snapshot: SessionSnapshot,
    ) -> Result<(), Self::Error>;

    /// Applies WAL records in position order (a record already applied is
    /// ignored).
    fn apply_wal(
        &mut self,
        now: Instant,
        session: &SessionId,
        records: &[WalRecord],
    ) -> Result<(), Self::Error>;

    /// Replaces the imported state with the final state (keeping the caches
    /// built from snapshot + WAL). Still inactive.
    fn install_final(
        &mut self,
        now: Instant,
        final_state: SessionSnapshot,
    ) -> Result<(), Self::Error>;

    /// Commit on the target: the session starts sending, owning it at `epoch`.
    fn activate(
        &mut self,
        now: Instant,
        session: &SessionId,
        epoch: u64,
    ) -> Result<(), Self::Error>;

    /// Abort on the target: forget the session.
    fn discard(&mut self, now: Instant, session: &SessionId);

    /// Rollback on the source before [`SessionHost::freeze`] (the target
    /// refused the snapshot, went silent, or the operator cancelled): stop
    /// capturing WAL and drop what was captured. The session never stopped
    /// sending and keeps its epoch; [`SessionHost::resume`] is not called.
    /// The default does nothing: a host that buffers WAL should override it,
    /// or the capture grows until the next `export_snapshot`.
    fn cancel_export(&mut self, now: Instant, session: &SessionId) {
        let _ = (now, session);
    }
}
