//! The tokio driver: one task owns the [`Node`] core and its UDP socket.
//! It is boring on purpose — read socket → `handle_datagram` → drain
//! `poll_transmit` → write socket; arm the timer from `poll_timeout`; serve
//! commands from the HTTP layer over a channel.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use ferry_proto::state::SessionSnapshot;
use ferry_proto::{SessionId, StreamId};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

use crate::node::Node;
use crate::signal::{PatchOutcome, SessionAnswer, SessionInfo, SignalError};

/// Datagrams read per wake-up before the loop drains its output.
const RECV_BATCH: usize = 64;
/// Receive buffer: the largest datagram we accept plus room for SRTP work.
const RECV_BUF: usize = 2048;

type Reply<T> = oneshot::Sender<Result<T, SignalError>>;

enum Command {
    Publish(StreamId, String, Reply<SessionAnswer>),
    View(StreamId, String, Reply<SessionAnswer>),
    Patch(SessionId, String, Option<String>, Reply<PatchOutcome>),
    Delete(SessionId, Reply<()>),
    Sessions(Reply<Vec<SessionInfo>>),
    Metrics(Reply<String>),
    Snapshot(SessionId, Reply<SessionSnapshot>),
    Restore(Box<SessionSnapshot>, Reply<SessionId>),
    Report(Reply<(Vec<SessionInfo>, crate::metrics::NodeMetrics)>),
}

/// A cheap, cloneable handle to a running node.
#[derive(Clone, Debug)]
pub struct NodeHandle {
    tx: mpsc::Sender<Command>,
    udp: SocketAddr,
}

impl NodeHandle {
    /// The node's media address.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, SignalError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(make(tx))
            .await
            .map_err(|_| SignalError::Unavailable)?;
        rx.await.map_err(|_| SignalError::Unavailable)?
    }

    /// WHIP: a publisher's offer.
    pub async fn publish(
        &self,
        stream: StreamId,
        offer: String,
    ) -> Result<SessionAnswer, SignalError> {
        self.call(|r| Command::Publish(stream, offer, r)).await
    }

    /// WHEP: a viewer's offer.
    pub async fn view(
        &self,
        stream: StreamId,
        offer: String,
    ) -> Result<SessionAnswer, SignalError> {
        self.call(|r| Command::View(stream, offer, r)).await
    }

    /// Trickle or ICE restart.
    pub async fn patch(
        &self,
        session: SessionId,
        frag: String,
        if_match: Option<String>,
    ) -> Result<PatchOutcome, SignalError> {
        self.call(|r| Command::Patch(session, frag, if_match, r))
            .await
    }

    /// Ends a session.
    pub async fn delete(&self, session: SessionId) -> Result<(), SignalError> {
        self.call(|r| Command::Delete(session, r)).await
    }

    /// Lists sessions.
    pub async fn sessions(&self) -> Result<Vec<SessionInfo>, SignalError> {
        self.call(Command::Sessions).await
    }

    /// Prometheus text of the node's counters.
    pub async fn metrics_text(&self) -> Result<String, SignalError> {
        self.call(Command::Metrics).await
    }

    /// Sessions and counters, for heartbeats.
    pub async fn report(
        &self,
    ) -> Result<(Vec<SessionInfo>, crate::metrics::NodeMetrics), SignalError> {
        self.call(Command::Report).await
    }

    /// Exports a session's state.
    pub async fn snapshot(&self, session: SessionId) -> Result<SessionSnapshot, SignalError> {
        self.call(|r| Command::Snapshot(session, r)).await
    }

    /// Installs a session from a snapshot.
    pub async fn restore(&self, snapshot: SessionSnapshot) -> Result<SessionId, SignalError> {
        self.call(|r| Command::Restore(Box::new(snapshot), r)).await
    }
}

/// Binds the media socket and starts the node's task.
pub async fn spawn(node: Node, udp_bind: SocketAddr) -> std::io::Result<NodeHandle> {
    let socket = UdpSocket::bind(udp_bind).await?;
    spawn_on(node, socket)
}

/// Starts the node's task on an already bound socket.
pub fn spawn_on(node: Node, socket: UdpSocket) -> std::io::Result<NodeHandle> {
    let udp = socket.local_addr()?;
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(run(node, Arc::new(socket), rx));
    Ok(NodeHandle { tx, udp })
}

async fn run(mut node: Node, socket: Arc<UdpSocket>, mut rx: mpsc::Receiver<Command>) {
    let mut buf = vec![0u8; RECV_BUF];
    loop {
        flush(&mut node, &socket).await;
        while let Some(event) = node.poll_event() {
            match event {
                crate::session::Event::Connected(id) => {
                    tracing::info!(session = %id, "session connected")
                }
                crate::session::Event::Closed(id, reason) => {
                    tracing::info!(session = %id, ?reason, "session closed");
                }
            }
        }
        let deadline = node.poll_timeout();
        tracing::trace!(?deadline, "node loop");
        let sleep = async {
            match deadline {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = socket.recv_from(&mut buf) => {
                let Ok((n, from)) = r else { continue };
                let now = Instant::now();
                node.handle_datagram(now, from, &mut buf[..n]);
                // Send what each datagram produced before reading the next:
                // a fan-out's buffers go back to the pool at once, so it stays
                // about one fan-out deep.
                flush(&mut node, &socket).await;
                for _ in 1..RECV_BATCH {
                    match socket.try_recv_from(&mut buf) {
                        Ok((n, from)) => {
                            node.handle_datagram(now, from, &mut buf[..n]);
                            flush(&mut node, &socket).await;
                        }
                        Err(_) => break,
                    }
                }
            }
            cmd = rx.recv() => {
                let Some(cmd) = cmd else { break };
                command(&mut node, cmd);
            }
            () = sleep => node.handle_timeout(Instant::now()),
        }
    }
}

fn command(node: &mut Node, cmd: Command) {
    let now = Instant::now();
    // A dropped reply only means the HTTP client went away.
    match cmd {
        Command::Publish(stream, offer, r) => {
            let _ = r.send(node.publish(now, &stream, &offer));
        }
        Command::View(stream, offer, r) => {
            let _ = r.send(node.view(now, &stream, &offer));
        }
        Command::Patch(id, frag, if_match, r) => {
            let _ = r.send(node.patch(now, &id, &frag, if_match.as_deref()));
        }
        Command::Delete(id, r) => {
            let _ = r.send(node.delete(now, &id));
        }
        Command::Sessions(r) => {
            let _ = r.send(Ok(node.sessions()));
        }
        Command::Metrics(r) => {
            let _ = r.send(Ok(node.metrics().to_prometheus()));
        }
        Command::Snapshot(id, r) => {
            let _ = r.send(node.snapshot_session(now, &id));
        }
        Command::Restore(snap, r) => {
            let _ = r.send(node.restore_session(now, *snap));
        }
        Command::Report(r) => {
            let _ = r.send(Ok((node.sessions(), node.metrics().clone())));
        }
    }
}

async fn flush(node: &mut Node, socket: &UdpSocket) {
    while let Some(t) = node.poll_transmit() {
        match socket.try_send_to(&t.data, t.to) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let _ = socket.send_to(&t.data, t.to).await;
            }
            Err(_) => node.metrics_mut().send_errors += 1,
        }
        node.recycle(t.data);
    }
}

/// What [`start`] needs to run one node.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Node id.
    pub id: ferry_proto::NodeId,
    /// HTTP (WHIP/WHEP) listen address.
    pub http: SocketAddr,
    /// Media UDP listen address.
    pub udp: SocketAddr,
    /// Address announced in candidates (default: the bound one; loopback if unspecified).
    pub announce: Option<std::net::IpAddr>,
    /// ICE servers for `Link` headers.
    pub ice_servers: Vec<crate::http::IceServer>,
    /// NACK cache per stream.
    pub nack_cache: usize,
    /// Sessions accepted before answering 503.
    pub max_sessions: usize,
    /// Extra text for `/metrics` from the embedding process.
    pub process_metrics: Option<crate::http::ProcessMetrics>,
    /// The scheduler to report to, if any.
    pub scheduler: Option<crate::heartbeat::SchedulerLink>,
}

/// A node started by [`start`].
#[derive(Debug)]
pub struct RunningNode {
    /// Handle to the node task.
    pub handle: NodeHandle,
    /// Where HTTP listens.
    pub http: SocketAddr,
    /// Where media listens.
    pub udp: SocketAddr,
    /// The announced candidate.
    pub candidate: SocketAddr,
    /// The HTTP server task.
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Binds sockets, makes a certificate and starts the node and its HTTP API.
pub async fn start(opts: NodeOptions) -> std::io::Result<RunningNode> {
    use rand::RngExt;

    let socket = UdpSocket::bind(opts.udp).await?;
    let udp = socket.local_addr()?;
    let ip = match (opts.announce, udp.ip()) {
        (Some(ip), _) => ip,
        (None, ip) if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
        (None, ip) => ip,
    };
    let candidate = SocketAddr::new(ip, udp.port());
    let mut rng = rand::rng();
    let cert = loop {
        if let Ok(c) = crate::cert::generate(rng.random()) {
            break c;
        }
    };
    let now = Instant::now();
    let wall = crate::time::WallClock {
        base: now,
        unix_at_base: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default(),
    };
    let mut config =
        crate::node::NodeConfig::new(opts.id.clone(), vec![candidate], rng.random(), wall);
    config.nack_cache = opts.nack_cache;
    config.max_sessions = opts.max_sessions;
    let node = Node::new(config, Arc::new(cert), now);
    let handle = spawn_on(node, socket)?;
    let listener = tokio::net::TcpListener::bind(opts.http).await?;
    let http = listener.local_addr()?;
    let app = crate::http::router(handle.clone(), opts.ice_servers, opts.process_metrics);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    if let Some(link) = opts.scheduler {
        let hb = crate::heartbeat::Reporter::new(
            link,
            opts.id.clone(),
            format!("http://{http}"),
            candidate.to_string(),
            opts.max_sessions as u64,
        );
        tokio::spawn(hb.run(handle.clone()));
    }
    Ok(RunningNode {
        handle,
        http,
        udp,
        candidate,
        server,
    })
}
