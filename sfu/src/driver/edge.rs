//! The edge's tokio driver (`ferry edge`, and in-process in `ferry dev`):
//! one task owns the [`Edge`] core and its UDP socket; a small HTTP server
//! serves `/metrics` and `/healthz`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;

use crate::cluster::edge::Edge;
use crate::cluster::relay::ClusterKey;

/// An edge started by [`start_edge`].
#[derive(Debug)]
pub struct RunningEdge {
    /// Where clients and nodes reach it.
    pub udp: SocketAddr,
    /// Where `/metrics` is served, if asked for.
    pub http: Option<SocketAddr>,
    /// The media task.
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Binds `udp` (and `http` for metrics, when given; HTTPS with `tls`) and runs an edge with
/// the cluster `key`.
pub async fn start_edge(
    udp: SocketAddr,
    http: Option<SocketAddr>,
    tls: Option<Arc<crate::driver::tls::ServerTls>>,
    key: ClusterKey,
) -> std::io::Result<RunningEdge> {
    let socket = crate::udp::bind(udp)?;
    let udp = socket.local_addr()?;
    let metrics = Arc::new(Mutex::new(String::new()));
    let edge = Edge::new(key, Instant::now());
    let task = tokio::spawn(run(socket, edge, metrics.clone()));
    let http = match http {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            let bound = listener.local_addr()?;
            let app = axum::Router::new()
                .route("/healthz", axum::routing::get(|| async { "ok\n" }))
                .route(
                    "/metrics",
                    axum::routing::get(move || {
                        let text = metrics.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        async move { text }
                    }),
                );
            tokio::spawn(crate::driver::tls::serve(listener, tls, app));
            Some(bound)
        }
        None => None,
    };
    Ok(RunningEdge { udp, http, task })
}

async fn run(socket: UdpSocket, edge: Edge, metrics: Arc<Mutex<String>>) -> std::io::Result<()> {
    let publish = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut core = EdgeLoop {
        edge,
        metrics,
        publish,
    };
    crate::udp::serve(&socket, &mut core).await;
    Ok(())
}

/// The edge as the UDP loop sees it; its own input is the once-a-second metrics text.
struct EdgeLoop {
    edge: Edge,
    metrics: Arc<Mutex<String>>,
    publish: tokio::time::Interval,
}

impl crate::udp::Datagrams for EdgeLoop {
    type Transmit = crate::cluster::edge::EdgeTransmit;
    type Event = ();

    fn view(t: &Self::Transmit) -> (&[u8], SocketAddr) {
        (&t.data[..], t.to)
    }

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &mut [u8], _: Duration) {
        self.edge.handle_datagram(now, from, data);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.edge.handle_timeout(now);
    }

    fn poll_transmit(&mut self) -> Option<Self::Transmit> {
        self.edge.poll_transmit()
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.edge.poll_timeout()
    }

    fn sent(&mut self, _: &mut Vec<Self::Transmit>, refused: usize) {
        if refused > 0 {
            tracing::debug!(refused, "edge sends refused");
        }
    }

    async fn next_event(&mut self) -> Option<()> {
        self.publish.tick().await;
        Some(())
    }

    fn handle_event(&mut self, (): ()) {
        let text = self.edge.metrics().to_prometheus(self.edge.routes());
        *self.metrics.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }
}
