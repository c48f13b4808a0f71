//! Migration of live sessions between nodes (DESIGN §4).
//!
//! The migrator never links media code: a node exposes its sessions through
//! [`SessionHost`], and the migration protocol (snapshot, WAL, quiesce,
//! cutover, commit/rollback) drives that trait. The protocol and its
//! transports land with the migration issue; this crate currently holds the
//! contract the media node implements.

use ferry_proto::SessionId;
use ferry_proto::state::SessionSnapshot;

/// What a node offers the migrator for one of its sessions.
pub trait SessionHost {
    /// Error type of the host.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Exports the full state of a session at this instant.
    fn export_snapshot(&mut self, session: &SessionId) -> Result<SessionSnapshot, Self::Error>;

    /// Installs a session from a snapshot taken on another node.
    fn import_snapshot(&mut self, snapshot: SessionSnapshot) -> Result<SessionId, Self::Error>;

    /// Stops the session from sending (quiesce) without freeing its state.
    fn freeze(&mut self, session: &SessionId) -> Result<(), Self::Error>;

    /// Resumes a frozen session (after a rollback) or an imported one (after cutover).
    fn resume(&mut self, session: &SessionId) -> Result<(), Self::Error>;
}
