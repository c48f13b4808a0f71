//! What every handler of the node's HTTP API is given ([`AppState`]) and reads the same way.

use axum::http::StatusCode;
use axum::response::Response;
use ferry_proto::StreamId;
use ferry_proto::auth::Verifier;

use super::error::error;
use super::limits::HttpLimits;
use super::turn::{IceServer, TurnLinks};
use crate::driver::handle::NodeHandle;

/// Extra Prometheus text the embedding process appends to `/metrics`
/// (process-wide gauges such as heap usage).
#[derive(Clone)]
pub struct ProcessMetrics(pub std::sync::Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for ProcessMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessMetrics")
    }
}

/// Who may create sessions, and how clients reach this node.
#[derive(Debug, Clone)]
pub struct Access {
    /// Checks the access token of every WHIP/WHEP `POST`.
    pub tokens: std::sync::Arc<Verifier>,
    /// `https` when the node serves TLS, else `http` (the scheme of the `Location`s it gives).
    pub scheme: &'static str,
}

#[derive(Clone)]
pub(super) struct AppState {
    pub(super) node: NodeHandle,
    pub(super) ice_servers: Vec<IceServer>,
    pub(super) turn: TurnLinks,
    pub(super) process_metrics: Option<ProcessMetrics>,
    pub(super) access: Access,
    pub(super) limits: HttpLimits,
}

/// A stream name from a path, or a 400 saying why it is none.
pub(super) fn parse_stream(s: &str) -> Result<StreamId, Response> {
    StreamId::new(s).map_err(|e| error(StatusCode::BAD_REQUEST, format!("stream name: {e}")))
}
