//! The edge's tokio driver (`ferry edge`, and in-process in `ferry dev`):
//! one task owns the [`Edge`] core and its UDP socket; a small HTTP server
//! serves `/metrics` and `/healthz`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::net::UdpSocket;

use crate::edge::Edge;
use crate::relay::ClusterKey;

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
    tls: Option<Arc<crate::tls::ServerTls>>,
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
            tokio::spawn(crate::tls::serve(listener, tls, app));
            Some(bound)
        }
        None => None,
    };
    Ok(RunningEdge { udp, http, task })
}

async fn run(
    socket: UdpSocket,
    mut edge: Edge,
    metrics: Arc<Mutex<String>>,
) -> std::io::Result<()> {
    let mut batch = crate::udp::RecvBatch::default();
    let mut out = Vec::with_capacity(crate::udp::BATCH);
    let mut publish = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        // Out in `sendmmsg` batches.
        while let Some(failed) = crate::udp::send_next_batch(
            &socket,
            &mut out,
            || edge.poll_transmit(),
            |t| (&t.data[..], t.to),
        )
        .await
        {
            if failed > 0 {
                tracing::debug!(failed, "edge sends refused");
            }
        }
        let deadline = edge.poll_timeout();
        let sleep = crate::udp::sleep_until(deadline);
        tokio::select! {
            r = socket.readable() => {
                if r.is_err() {
                    continue;
                }
                // In by `recvmmsg`; one batch per turn, then what it produced goes out.
                let Ok(k) = crate::udp::try_recv_batch(&socket, &mut batch) else {
                    continue;
                };
                let now = Instant::now();
                for i in 0..k {
                    let (data, from) = batch.get_mut(i);
                    edge.handle_datagram(now, from, data);
                }
            }
            () = sleep => edge.handle_timeout(Instant::now()),
            _ = publish.tick() => {
                let text = edge.metrics().to_prometheus(edge.routes());
                *metrics.lock().unwrap_or_else(|e| e.into_inner()) = text;
            }
        }
    }
}
