//! In-process transport: every node of one process joins a
//! [`MemoryNetwork`]. Messages go through their protobuf encoding, as on a
//! real link, so `ferry dev` exercises the same bytes as a cluster.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use ferry_proto::NodeId;
use tokio::sync::mpsc;

use super::{Transport, TransportError};
use crate::wire::Message;

type Inbox = mpsc::UnboundedSender<(NodeId, Vec<u8>)>;

/// The nodes of one process.
#[derive(Debug, Clone, Default)]
pub struct MemoryNetwork {
    nodes: Arc<Mutex<HashMap<NodeId, Inbox>>>,
}

impl MemoryNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<NodeId, Inbox>> {
        // A panic elsewhere while holding the map leaves it consistent
        // (inserts and removes only).
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `node` (replacing an earlier transport of the same node).
    pub fn join(&self, node: NodeId) -> MemoryTransport {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().insert(node.clone(), tx.clone());
        MemoryTransport {
            me: node,
            net: self.clone(),
            own: tx,
            rx,
        }
    }
}

/// One node's end of a [`MemoryNetwork`]; leaves the network when dropped.
#[derive(Debug)]
pub struct MemoryTransport {
    me: NodeId,
    net: MemoryNetwork,
    own: Inbox,
    rx: mpsc::UnboundedReceiver<(NodeId, Vec<u8>)>,
}

impl Drop for MemoryTransport {
    fn drop(&mut self) {
        let mut nodes = self.net.lock();
        if nodes
            .get(&self.me)
            .is_some_and(|tx| tx.same_channel(&self.own))
        {
            nodes.remove(&self.me);
        }
    }
}

impl Transport for MemoryTransport {
    fn local_node(&self) -> &NodeId {
        &self.me
    }

    fn send(&self, to: &NodeId, msg: Message) -> Result<(), TransportError> {
        let tx = self
            .net
            .lock()
            .get(to)
            .cloned()
            .ok_or_else(|| TransportError::UnknownPeer(to.clone()))?;
        // A peer that left loses the message, like a dead node would.
        let _ = tx.send((self.me.clone(), msg.encode()));
        Ok(())
    }

    async fn recv(&mut self) -> Result<(NodeId, Message), TransportError> {
        let (from, bytes) = self.rx.recv().await.ok_or(TransportError::Closed)?;
        Ok((from, Message::decode(&bytes)?))
    }
}
