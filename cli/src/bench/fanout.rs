//! The synthetic RTP peers of `ferry bench forward` and `ferry bench janus`: test peers of
//! `ferry_sfu::peer` (ICE, DTLS, SRTP, NACK) driven on their own UDP sockets, the WHEP/WHIP
//! signalling that connects them, and what one side of the comparison measured.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::process::Clocks;
use anyhow::{Context, Result};
use ferry_sfu::peer::{LatencyStats, Peer, PeerConfig, PeerRole, PeerStats};
use serde::Serialize;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

pub(crate) enum PeerCmd {
    Stats(oneshot::Sender<PeerStats>),
    /// Stop reading: the peer becomes a sink (`ferry bench forward --scaling`).
    Park,
    Stop,
}

/// Drives one test peer on its own UDP socket (the node's batched loop).
pub(crate) async fn drive_peer(peer: Peer, socket: UdpSocket, rx: mpsc::Receiver<PeerCmd>) {
    let mut l = PeerLoop {
        peer,
        rx,
        parked: false,
    };
    ferry_sfu::udp::serve(&socket, &mut l).await;
    if !l.parked {
        return;
    }
    // A sink: the socket stays open and unread, its receive buffer at the kernel's minimum, so
    // the kernel drops what the node sends it (no ICMP back) and this process does no work.
    let _ = nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::RcvBuf, &1);
    while let Some(cmd) = l.rx.recv().await {
        match cmd {
            PeerCmd::Stats(tx) => {
                let _ = tx.send(l.peer.stats());
            }
            PeerCmd::Stop => break,
            PeerCmd::Park => {}
        }
    }
}

/// A test peer as the UDP loop sees it; its own input is the bench's commands.
struct PeerLoop {
    peer: Peer,
    rx: mpsc::Receiver<PeerCmd>,
    /// Told to stop reading ([`PeerCmd::Park`]).
    parked: bool,
}

impl ferry_sfu::udp::Datagrams for PeerLoop {
    type Transmit = (SocketAddr, Vec<u8>);
    type Event = PeerCmd;

    fn view(t: &Self::Transmit) -> (&[u8], SocketAddr) {
        (&t.1[..], t.0)
    }

    fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &mut [u8],
        waited: Duration,
    ) {
        // Latency to the kernel's arrival stamp: what the node and the network took, not how
        // far behind this process is in reading its sockets.
        self.peer.handle_datagram_waited(now, from, data, waited);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.peer.handle_timeout(now);
    }

    fn poll_transmit(&mut self) -> Option<Self::Transmit> {
        self.peer.poll_transmit()
    }

    fn poll_timeout(&mut self) -> Option<Instant> {
        self.peer.poll_timeout()
    }

    async fn next_event(&mut self) -> Option<PeerCmd> {
        match self.rx.recv().await {
            Some(PeerCmd::Stop) | None => None,
            Some(PeerCmd::Park) => {
                self.parked = true;
                None
            }
            cmd => cmd,
        }
    }

    fn handle_event(&mut self, cmd: PeerCmd) {
        if let PeerCmd::Stats(tx) = cmd {
            let _ = tx.send(self.peer.stats());
        }
    }
}

/// A bare synthetic peer of the fan-out benchmark (no signalling beyond its POST, nothing to
/// follow); the benchmarks that move sessions use SDK sessions (`bench_peer`).
pub(crate) struct PeerHandle {
    pub(crate) tx: mpsc::Sender<PeerCmd>,
}

impl PeerHandle {
    pub(crate) async fn stats(&self) -> Result<PeerStats> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(PeerCmd::Stats(tx))
            .await
            .ok()
            .context("peer gone")?;
        rx.await.context("peer gone")
    }
}

impl Drop for PeerHandle {
    fn drop(&mut self) {
        let _ = self.tx.try_send(PeerCmd::Stop);
    }
}

/// POSTs an SDP offer; returns the answer.
pub(crate) async fn signal(url: String, offer: String) -> Result<String> {
    tokio::task::spawn_blocking(move || -> Result<String> {
        let mut resp = ureq::post(&url)
            .header("Content-Type", "application/sdp")
            .send(offer.as_bytes())
            .with_context(|| format!("POST {url}"))?;
        Ok(resp.body_mut().read_to_string()?)
    })
    .await?
}

pub(crate) async fn start_peer(
    role: PeerRole,
    seed: u64,
    bitrate: u32,
    clocks: &Clocks,
    url: String,
) -> Result<PeerHandle> {
    start_peer_with(role, seed, bitrate, clocks, url, |_| {}).await
}

/// [`start_peer`] with `configure` applied to the peer's config last.
pub(crate) async fn start_peer_with(
    role: PeerRole,
    seed: u64,
    bitrate: u32,
    clocks: &Clocks,
    url: String,
    configure: impl FnOnce(&mut PeerConfig),
) -> Result<PeerHandle> {
    let socket = ferry_sfu::udp::bind(([127, 0, 0, 1], 0).into())?;
    let local = socket.local_addr()?;
    let now = Instant::now();
    let mut cfg = PeerConfig::new(role, seed, local, now);
    cfg.wall = clocks.wall;
    cfg.latency_epoch = clocks.epoch;
    cfg.video_bitrate_bps = bitrate;
    configure(&mut cfg);
    let mut secret = [0x11u8; 32];
    secret[..8].copy_from_slice(&seed.to_le_bytes());
    let cert = ferry_sfu::cert::generate(secret)?;
    let mut peer = Peer::new(cfg, Arc::new(cert), now);
    let answer = signal(url, peer.create_offer()).await?;
    peer.apply_answer(Instant::now(), &answer)?;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(drive_peer(peer, socket, rx));
    Ok(PeerHandle { tx })
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Side {
    /// Media packets the subscribers received per second.
    pub(crate) out_pps: f64,
    /// CPU the forwarding process used, in cores.
    pub(crate) cpu_cores: f64,
    /// `out_pps / cpu_cores`.
    pub(crate) pps_per_core: f64,
    pub(crate) latency_p50_us: Option<u64>,
    pub(crate) latency_p99_us: Option<u64>,
    pub(crate) latency_max_us: Option<u64>,
    /// Packets the subscribers were missing at the end.
    pub(crate) missing: u64,
}

pub(crate) fn side(out: u64, dur: f64, cpu: f64, lat: &LatencyStats, missing: u64) -> Side {
    let out_pps = out as f64 / dur;
    let cpu_cores = cpu / dur;
    Side {
        out_pps,
        cpu_cores,
        pps_per_core: if cpu_cores > 0.0 {
            out_pps / cpu_cores
        } else {
            0.0
        },
        latency_p50_us: lat.quantile_us(0.5),
        latency_p99_us: lat.quantile_us(0.99),
        latency_max_us: lat.max_us,
        missing,
    }
}

/// Every viewer is connected and has video packets.
pub(crate) async fn all_playing(viewers: &[PeerHandle]) -> Result<bool> {
    for v in viewers {
        let s = v.stats().await?;
        if !s.connected || s.video().map(|r| r.packets).sum::<u64>() == 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

pub(crate) async fn all_stats(peers: &[PeerHandle]) -> Result<Vec<PeerStats>> {
    let mut out = Vec::with_capacity(peers.len());
    for p in peers {
        out.push(p.stats().await?);
    }
    Ok(out)
}
