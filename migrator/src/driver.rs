//! Glue between a [`Migrator`], a [`Transport`] and the node's task. The
//! node owns the loop (its `select!` also serves media); these helpers are
//! the migrator's arm of it. See the crate docs for the loop.

use std::time::Instant;

use ferry_proto::NodeId;

use crate::SessionHost;
use crate::core::Migrator;
use crate::transport::{Transport, TransportError};
use crate::wire::Message;

/// What woke the migrator.
#[derive(Debug)]
pub enum Input {
    /// A message from a node.
    Message(NodeId, Message),
    /// The migrator's timer fired.
    Timeout,
}

/// Waits for the next message or for `timeout` (the migrator's
/// [`Migrator::poll_timeout`]). Cancel safe.
pub async fn next_input<T: Transport>(
    timeout: Option<Instant>,
    transport: &mut T,
) -> Result<Input, TransportError> {
    let recv = async {
        let (from, msg) = transport.recv().await?;
        Ok(Input::Message(from, msg))
    };
    match timeout {
        Some(at) => tokio::select! {
            r = recv => r,
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => Ok(Input::Timeout),
        },
        None => recv.await,
    }
}

/// Feeds one input to the migrator.
pub fn handle_input<H: SessionHost>(
    migrator: &mut Migrator,
    now: Instant,
    host: &mut H,
    input: Input,
) {
    match input {
        Input::Message(from, msg) => {
            tracing::debug!(migration = %msg.id, body = msg.body.name(), %from, "migration message in");
            migrator.handle_message(now, host, &from, msg)
        }
        Input::Timeout => migrator.handle_timeout(now, host),
    }
}

/// Hands every queued message to the transport. A message the transport
/// cannot take (unknown peer) is dropped and logged: to the protocol it is a
/// lost message, and the migration times out and rolls back.
pub fn flush<T: Transport>(migrator: &mut Migrator, transport: &T) {
    while let Some((to, msg)) = migrator.poll_transmit() {
        tracing::debug!(migration = %msg.id, body = msg.body.name(), %to, "migration message out");
        if let Err(e) = transport.send(&to, msg) {
            tracing::warn!(node = %migrator.node(), peer = %to, error = %e, "migration message not sent");
        }
    }
}
