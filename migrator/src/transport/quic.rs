//! QUIC transport (quinn) with mutual TLS against the cluster CA.
//!
//! Each node dials its peers for what it sends and accepts their dials for
//! what it receives, so one direction's connection carries one direction's
//! messages: a control stream (every message but snapshot chunks) and a bulk
//! stream (snapshot chunks), both unidirectional, so a large snapshot never
//! holds up a `Cutover` or `Commit` of another migration. A new connection
//! starts with a hello exchange on a bidirectional stream, answered only
//! after the accepting side has verified the dialler's certificate and read
//! its node ID, so a dial to a node that refuses us fails at once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ferry_proto::NodeId;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::pki_types::CertificateDer;
use tokio::sync::mpsc;

use super::tls::{self, NodeIdentity, SERVER_NAME};
use super::{Transport, TransportError};
use crate::frame::{FrameDecoder, encode_frame};
use crate::wire::Message;

const HELLO: &[u8] = b"ferry-migration hello 1";
const HELLO_OK: &[u8] = b"ok";
/// Messages received but not yet taken by `recv`; beyond it QUIC flow
/// control slows the sender down.
const INBOUND_QUEUE: usize = 1024;

/// Migration transport over QUIC.
#[derive(Debug)]
pub struct QuicTransport {
    me: NodeId,
    shared: Arc<Shared>,
    inbound: mpsc::Receiver<(NodeId, Message)>,
    accept_task: tokio::task::JoinHandle<()>,
}

/// A handle that sends on a [`QuicTransport`] from anywhere (another thread, another task):
/// what [`Transport::send`] does, without the transport's receiving half.
#[derive(Debug, Clone)]
pub struct QuicSender {
    shared: Arc<Shared>,
}

impl QuicSender {
    /// Queues `msg` for `to` (as [`Transport::send`]).
    pub fn send(&self, to: &NodeId, msg: Message) -> Result<(), TransportError> {
        self.shared.send(to, msg)
    }
}

#[derive(Debug)]
struct Shared {
    endpoint: quinn::Endpoint,
    client: quinn::ClientConfig,
    runtime: tokio::runtime::Handle,
    peers: Mutex<HashMap<NodeId, SocketAddr>>,
    links: Mutex<HashMap<NodeId, Link>>,
}

#[derive(Debug)]
struct Link {
    dialer: Arc<Dialer>,
    control: mpsc::UnboundedSender<Message>,
    bulk: mpsc::UnboundedSender<Message>,
}

/// One outgoing connection to one peer, made on demand and remade after
/// it fails.
#[derive(Debug)]
struct Dialer {
    peer: NodeId,
    addr: SocketAddr,
    endpoint: quinn::Endpoint,
    client: quinn::ClientConfig,
    conn: tokio::sync::Mutex<Option<quinn::Connection>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Maps only see inserts and lookups, so a poisoned one is still whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn transport_config() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(quinn::IdleTimeout::try_from(Duration::from_secs(10)).ok());
    t.keep_alive_interval(Some(Duration::from_secs(2)));
    Arc::new(t)
}

/// Why a connection's peer has no node id.
#[derive(Debug, thiserror::Error)]
enum PeerIdError {
    /// No certificate came with the connection.
    #[error("no peer certificate")]
    NoCertificate,
    /// A chain without certificates.
    #[error("empty certificate chain")]
    EmptyChain,
    /// The certificate names no node.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

fn peer_node(conn: &quinn::Connection) -> Result<NodeId, PeerIdError> {
    let certs = conn
        .peer_identity()
        .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or(PeerIdError::NoCertificate)?;
    let leaf = certs.first().ok_or(PeerIdError::EmptyChain)?;
    Ok(tls::node_id_of(leaf)?)
}

impl QuicTransport {
    /// Listens on `listen` as `identity`'s node. Call inside a tokio runtime.
    pub fn bind(identity: &NodeIdentity, listen: SocketAddr) -> Result<Self, TransportError> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| TransportError::Io(std::io::Error::other(e)))?;
        let server_crypto = QuicServerConfig::try_from(identity.server_config()?)
            .map_err(|e| TransportError::Io(std::io::Error::other(e)))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
        server.transport_config(transport_config());
        let client_crypto = QuicClientConfig::try_from(identity.client_config()?)
            .map_err(|e| TransportError::Io(std::io::Error::other(e)))?;
        let mut client = quinn::ClientConfig::new(Arc::new(client_crypto));
        client.transport_config(transport_config());
        let endpoint = {
            let _guard = runtime.enter();
            quinn::Endpoint::server(server, listen)?
        };
        let (tx, inbound) = mpsc::channel(INBOUND_QUEUE);
        let accept_task = runtime.spawn(accept_loop(endpoint.clone(), tx));
        Ok(Self {
            me: identity.node().clone(),
            shared: Arc::new(Shared {
                endpoint,
                client,
                runtime,
                peers: Mutex::new(HashMap::new()),
                links: Mutex::new(HashMap::new()),
            }),
            inbound,
            accept_task,
        })
    }

    /// A sender on this transport for other threads or tasks.
    pub fn sender(&self) -> QuicSender {
        QuicSender {
            shared: self.shared.clone(),
        }
    }

    /// The UDP address it listens on.
    pub fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        Ok(self.shared.endpoint.local_addr()?)
    }

    /// Where `node` listens. A changed address applies to the next
    /// connection.
    pub fn add_peer(&self, node: NodeId, addr: SocketAddr) {
        let old = lock(&self.shared.peers).insert(node.clone(), addr);
        if old.is_some_and(|a| a != addr) {
            lock(&self.shared.links).remove(&node);
        }
    }

    /// Dials `peer` now (or checks the existing connection): the TLS
    /// handshake, both certificates and the hello exchange. `send` dials on
    /// its own; this surfaces setup errors early.
    pub async fn connect(&self, peer: &NodeId) -> Result<(), TransportError> {
        let dialer = self.link(peer)?;
        dialer.get().await.map(|_| ())
    }

    fn link(&self, peer: &NodeId) -> Result<Arc<Dialer>, TransportError> {
        let mut links = lock(&self.shared.links);
        if let Some(l) = links.get(peer) {
            return Ok(l.dialer.clone());
        }
        let l = self.shared.new_link(peer)?;
        let d = l.dialer.clone();
        links.insert(peer.clone(), l);
        Ok(d)
    }
}

impl Shared {
    fn new_link(&self, peer: &NodeId) -> Result<Link, TransportError> {
        let addr = *lock(&self.peers)
            .get(peer)
            .ok_or_else(|| TransportError::UnknownPeer(peer.clone()))?;
        let dialer = Arc::new(Dialer {
            peer: peer.clone(),
            addr,
            endpoint: self.endpoint.clone(),
            client: self.client.clone(),
            conn: tokio::sync::Mutex::new(None),
        });
        let (control, control_rx) = mpsc::unbounded_channel();
        let (bulk, bulk_rx) = mpsc::unbounded_channel();
        let rt = &self.runtime;
        rt.spawn(write_loop(dialer.clone(), control_rx, "control"));
        rt.spawn(write_loop(dialer.clone(), bulk_rx, "bulk"));
        Ok(Link {
            dialer,
            control,
            bulk,
        })
    }
}

impl Drop for QuicTransport {
    fn drop(&mut self) {
        self.accept_task.abort();
        self.shared
            .endpoint
            .close(0u32.into(), b"node shutting down");
    }
}

impl Transport for QuicTransport {
    fn local_node(&self) -> &NodeId {
        &self.me
    }

    fn send(&self, to: &NodeId, msg: Message) -> Result<(), TransportError> {
        self.shared.send(to, msg)
    }

    async fn recv(&mut self) -> Result<(NodeId, Message), TransportError> {
        self.inbound.recv().await.ok_or(TransportError::Closed)
    }
}

impl Shared {
    fn send(&self, to: &NodeId, msg: Message) -> Result<(), TransportError> {
        let mut links = lock(&self.links);
        if !links.contains_key(to) {
            let l = self.new_link(to)?;
            links.insert(to.clone(), l);
        }
        let Some(link) = links.get(to) else {
            return Err(TransportError::UnknownPeer(to.clone()));
        };
        let ch = if msg.body.is_bulk() {
            &link.bulk
        } else {
            &link.control
        };
        ch.send(msg).map_err(|_| TransportError::Closed)
    }
}

impl Dialer {
    /// The live connection, dialled (and verified) if there is none.
    async fn get(&self) -> Result<quinn::Connection, TransportError> {
        let mut conn = self.conn.lock().await;
        if let Some(c) = conn.as_ref().filter(|c| c.close_reason().is_none()) {
            return Ok(c.clone());
        }
        let fail = |reason: String| TransportError::Connect {
            peer: self.peer.clone(),
            reason,
        };
        let c = self
            .endpoint
            .connect_with(self.client.clone(), self.addr, SERVER_NAME)
            .map_err(|e| fail(e.to_string()))?
            .await
            .map_err(|e| fail(e.to_string()))?;
        let found = peer_node(&c).map_err(|e| fail(e.to_string()))?;
        if found != self.peer {
            c.close(1u32.into(), b"wrong node");
            return Err(TransportError::WrongPeer {
                expected: self.peer.clone(),
                found,
            });
        }
        let (mut s, mut r) = c.open_bi().await.map_err(|e| fail(e.to_string()))?;
        s.write_all(HELLO).await.map_err(|e| fail(e.to_string()))?;
        s.finish().map_err(|e| fail(e.to_string()))?;
        let reply = r.read_to_end(64).await.map_err(|e| fail(e.to_string()))?;
        if reply != HELLO_OK {
            return Err(fail("unexpected hello reply".into()));
        }
        *conn = Some(c.clone());
        Ok(c)
    }
}

async fn write_loop(
    dialer: Arc<Dialer>,
    mut rx: mpsc::UnboundedReceiver<Message>,
    kind: &'static str,
) {
    let mut stream: Option<(usize, quinn::SendStream)> = None;
    while let Some(msg) = rx.recv().await {
        let frame = encode_frame(&msg);
        // One retry on a fresh connection: a stream of a connection that
        // died idle fails on its first write.
        for _ in 0..2 {
            let conn = match dialer.get().await {
                Ok(c) => c,
                Err(e) => {
                    // Whatever queued while dialling is stale: the protocol
                    // retries what still matters.
                    let mut dropped = 1;
                    while rx.try_recv().is_ok() {
                        dropped += 1;
                    }
                    tracing::warn!(peer = %dialer.peer, error = %e, dropped, "migration link down");
                    break;
                }
            };
            if stream
                .as_ref()
                .is_none_or(|(id, _)| *id != conn.stable_id())
            {
                match conn.open_uni().await {
                    Ok(s) => stream = Some((conn.stable_id(), s)),
                    Err(e) => {
                        tracing::debug!(peer = %dialer.peer, kind, error = %e, "open stream");
                        stream = None;
                        continue;
                    }
                }
            }
            let Some((_, s)) = stream.as_mut() else {
                continue;
            };
            match s.write_all(&frame).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::debug!(peer = %dialer.peer, kind, error = %e, "write");
                    stream = None;
                }
            }
        }
    }
}

async fn accept_loop(endpoint: quinn::Endpoint, tx: mpsc::Sender<(NodeId, Message)>) {
    while let Some(incoming) = endpoint.accept().await {
        tokio::spawn(serve(incoming, tx.clone()));
    }
}

/// One accepted connection: verify, answer the hello, read its streams.
async fn serve(incoming: quinn::Incoming, tx: mpsc::Sender<(NodeId, Message)>) {
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            // A peer without a certificate of our CA ends here.
            tracing::warn!(error = %e, "migration handshake refused");
            return;
        }
    };
    let peer = match peer_node(&conn) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "migration peer without node id");
            conn.close(2u32.into(), b"no node id");
            return;
        }
    };
    let hello = async {
        let (mut s, mut r) = conn.accept_bi().await.map_err(|e| e.to_string())?;
        let got = r.read_to_end(64).await.map_err(|e| e.to_string())?;
        if got != HELLO {
            return Err("bad hello".to_owned());
        }
        s.write_all(HELLO_OK).await.map_err(|e| e.to_string())?;
        s.finish().map_err(|e| e.to_string())
    };
    if let Err(e) = hello.await {
        tracing::warn!(%peer, error = %e, "migration hello");
        conn.close(3u32.into(), b"bad hello");
        return;
    }
    while let Ok(recv) = conn.accept_uni().await {
        tokio::spawn(read_loop(peer.clone(), recv, tx.clone()));
    }
}

async fn read_loop(peer: NodeId, mut recv: quinn::RecvStream, tx: mpsc::Sender<(NodeId, Message)>) {
    let mut frames = FrameDecoder::new();
    while let Ok(Some(chunk)) = recv.read_chunk(64 * 1024, true).await {
        frames.push(&chunk.bytes);
        loop {
            match frames.next_message() {
                Ok(Some(m)) => {
                    if tx.send((peer.clone(), m)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "bad migration frame; closing the stream");
                    let _ = recv.stop(4u32.into());
                    return;
                }
            }
        }
    }
}
