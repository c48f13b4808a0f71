//! The benchmarks' synthetic WebRTC peers that follow their sessions as any app would: through
//! the Rust SDK (`ferry-sdk`), with synthetic stamped media so the receiving side measures
//! latency, gaps and loss. Migrations, ICE restarts, reconnects and node failures are the SDK's
//! business, not the bench's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferry_sdk::fsm::{Config, Event, Mode};
use ferry_sdk::{FerryClient, Media, PeerStats, PlayOptions, PublishOptions, Session};
use ferry_sfu::codec::Codec;
use tokio::sync::mpsc;

use super::process::Clocks;

/// One SDK session of a benchmark.
pub(crate) struct SdkPeer {
    session: Session,
    ice_restarts: Arc<AtomicU64>,
    reconnected: mpsc::UnboundedReceiver<(Instant, Event)>,
}

/// Publisher (`Some(codec)`) or player through `gateway` with access token `token`, its first
/// offer to `node` (an HTTP base URL), or where the gateway places it (`None`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn start(
    gateway: &str,
    token: &str,
    node: Option<&str>,
    stream: &str,
    publish: Option<Codec>,
    seed: u64,
    bitrate: u32,
    clocks: &Clocks,
) -> Result<SdkPeer> {
    let client = FerryClient::new(gateway).with_token(token);
    let kind = if publish.is_some() { "whip" } else { "whep" };
    let endpoint = node.map(|node| format!("{node}/{kind}/{stream}"));
    let clocks = Some((clocks.wall, clocks.epoch));
    let media = Media::Synthetic {
        bitrate_bps: bitrate,
    };
    // Hundreds of sessions start at once on two cores: give the first connection time.
    let config = Config {
        connect_timeout: Duration::from_secs(30),
        ..Config::default()
    };
    let mut session = match publish {
        Some(video) => {
            let mut o = PublishOptions::new(video, false);
            o.media = media;
            o.seed = Some(seed);
            o.clocks = clocks;
            o.config = config;
            o.endpoint = endpoint;
            client.publish(stream, o).await
        }
        None => {
            client
                .play(
                    stream,
                    PlayOptions {
                        media,
                        seed: Some(seed),
                        clocks,
                        config,
                        endpoint,
                        ..PlayOptions::default()
                    },
                )
                .await
        }
    }
    .with_context(|| format!("{kind} {stream} at {}", node.unwrap_or(gateway)))?;
    let ice_restarts = Arc::new(AtomicU64::new(0));
    let (tx, reconnected) = mpsc::unbounded_channel();
    let mut events = session.take_events();
    let counter = ice_restarts.clone();
    tokio::spawn(async move {
        while let Some(e) = events.next().await {
            match &e {
                Event::Migrated {
                    mode: Mode::IceRestart,
                    ..
                } => {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                Event::Reconnected { .. } | Event::Migrated { .. } => {
                    let _ = tx.send((Instant::now(), e));
                }
                _ => {}
            }
        }
    });
    Ok(SdkPeer {
        session,
        ice_restarts,
        reconnected,
    })
}

impl SdkPeer {
    /// Migrations its session followed with an ICE restart.
    pub(crate) fn ice_restarts(&self) -> u64 {
        self.ice_restarts.load(Ordering::Relaxed)
    }

    /// Starts a new window for the largest arrival gap.
    pub(crate) async fn reset_gaps(&self) -> Result<()> {
        self.session.reset_arrival_gaps();
        Ok(())
    }

    /// The current transport's counters.
    pub(crate) async fn stats(&self) -> Result<PeerStats> {
        self.session
            .stats()
            .await?
            .peer
            .context("the session has no transport")
    }

    /// Transports the session has used so far.
    pub(crate) async fn transports(&self) -> Result<u32> {
        Ok(self.session.stats().await?.transports)
    }

    /// The session's id (where it is now).
    pub(crate) fn id(&self) -> Option<String> {
        self.session.id()
    }

    /// The node serving the session.
    pub(crate) fn node(&self) -> Option<String> {
        self.session.node()
    }

    /// Waits (up to `limit`) for the session's next `reconnected` event: when it came.
    pub(crate) async fn reconnected(&mut self, limit: Duration) -> Option<Instant> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.reconnected.recv()).await {
                Ok(Some((at, Event::Reconnected { .. }))) => return Some(at),
                Ok(Some(_)) => {}
                _ => return None,
            }
        }
    }

    /// Ends the session.
    pub(crate) async fn close(self) {
        self.session.close().await;
    }
}
