//! The node reports in: every second it sends the scheduler its load
//! figures, capabilities and sessions (`POST /v1/nodes/{id}/heartbeat`).
//! Part of the driver: it reads `/proc` and talks HTTP.

use std::time::{Duration, Instant};

use ferry_proto::NodeId;
use ferry_proto::api::{GpuFigures, Heartbeat, SessionKind, SessionReport};

use crate::driver::NodeHandle;
use crate::metrics::NodeMetrics;
use crate::signal;

/// Reads the node's GPU figures at each heartbeat (NVML on GPU nodes).
pub type GpuReader = std::sync::Arc<dyn Fn() -> Option<GpuFigures> + Send + Sync>;

/// Where and how a node reports to the scheduler.
#[derive(Clone)]
pub struct SchedulerLink {
    /// Scheduler base URL (`http://127.0.0.1:8080`).
    pub url: String,
    /// Bearer token of the scheduler API.
    pub token: String,
    /// Zone (AZ or ISP line).
    pub zone: String,
    /// Physical host, for anti-affinity (default: the node id).
    pub host: String,
    /// Region.
    pub region: String,
    /// Capability flags.
    pub capabilities: Vec<String>,
    /// Canary node (fixed small weight).
    pub canary: bool,
    /// GPU figures from configuration (used when `gpu_reader` is absent).
    pub gpu: Option<GpuFigures>,
    /// Live GPU figures (NVML), read at every heartbeat.
    pub gpu_reader: Option<GpuReader>,
    /// Bandwidth capacity, bit/s (0 = unknown).
    pub bandwidth_capacity_bps: u64,
    /// Report interval.
    pub interval: Duration,
}

impl std::fmt::Debug for SchedulerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerLink")
            .field("url", &self.url)
            .field("zone", &self.zone)
            .field("host", &self.host)
            .field("capabilities", &self.capabilities)
            .field("gpu", &self.gpu)
            .field("live_gpu", &self.gpu_reader.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds and sends heartbeats.
#[derive(Debug)]
pub struct Reporter {
    link: SchedulerLink,
    id: NodeId,
    http: String,
    media: String,
    cluster: String,
    migration: String,
    capacity: u64,
    last: Option<(Instant, f64, NodeMetrics)>,
}

/// Process CPU seconds (user + system) from `/proc/self/stat`.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux ABI Ferry runs on.
    Some(ticks / 100.0)
}

/// Resident memory as a fraction of the machine's.
fn memory_fraction() -> f64 {
    let kb = |text: &str, key: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    match (kb(&status, "VmRSS:"), kb(&meminfo, "MemTotal:")) {
        (Some(rss), Some(total)) if total > 0.0 => (rss / total).clamp(0.0, 1.0),
        _ => 0.0,
    }
}

impl Reporter {
    /// A reporter for node `id` whose API is at `http` and media at `media`.
    pub fn new(
        link: SchedulerLink,
        id: NodeId,
        http: String,
        media: String,
        capacity: u64,
    ) -> Self {
        Self {
            link,
            id,
            http,
            media,
            cluster: String::new(),
            migration: String::new(),
            capacity,
            last: None,
        }
    }

    /// Also reports the node's cluster (relay/tunnel) and migration addresses.
    pub fn with_cluster(mut self, cluster: String, migration: String) -> Self {
        self.cluster = cluster;
        self.migration = migration;
        self
    }

    /// The heartbeat for the node's current sessions and counters.
    pub fn build(
        &mut self,
        now: Instant,
        sessions: &[signal::SessionInfo],
        m: &NodeMetrics,
    ) -> Heartbeat {
        let cpu_now = cpu_seconds().unwrap_or(0.0);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let (cpu, bandwidth_bps, loss) = match &self.last {
            Some((t, cpu0, m0)) => {
                let dt = now.saturating_duration_since(*t).as_secs_f64().max(0.001);
                let cpu = ((cpu_now - cpu0) / dt / cores).clamp(0.0, 1.0);
                let bw = (m.tx_bytes.saturating_sub(m0.tx_bytes) as f64 * 8.0 / dt) as u64;
                let received = m.rtp_received.saturating_sub(m0.rtp_received);
                let missing = m.nacks_sent.saturating_sub(m0.nacks_sent);
                let loss = if received + missing == 0 {
                    0.0
                } else {
                    missing as f64 / (received + missing) as f64
                };
                (cpu, bw, loss.clamp(0.0, 1.0))
            }
            None => (0.0, 0, 0.0),
        };
        self.last = Some((now, cpu_now, m.clone()));
        Heartbeat {
            http: self.http.clone(),
            media: self.media.clone(),
            cluster: self.cluster.clone(),
            migration: self.migration.clone(),
            zone: self.link.zone.clone(),
            host: if self.link.host.is_empty() {
                self.id.to_string()
            } else {
                self.link.host.clone()
            },
            region: self.link.region.clone(),
            capabilities: self.link.capabilities.clone(),
            cpu,
            memory: memory_fraction(),
            bandwidth_bps,
            bandwidth_capacity_bps: self.link.bandwidth_capacity_bps,
            loss,
            session_capacity: self.capacity,
            sessions: sessions
                .iter()
                .map(|s| SessionReport {
                    id: s.id.clone(),
                    stream: s.stream.clone(),
                    kind: match s.kind {
                        signal::SessionKind::Publish => SessionKind::Publish,
                        signal::SessionKind::View => SessionKind::View,
                    },
                    state: s.state.to_owned(),
                })
                .collect(),
            gpu: match &self.link.gpu_reader {
                Some(read) => read(),
                None => self.link.gpu,
            },
            canary: self.link.canary,
        }
    }

    /// Reports every interval until the node stops.
    pub async fn run(mut self, node: NodeHandle) {
        let url = format!(
            "{}/v1/nodes/{}/heartbeat",
            self.link.url.trim_end_matches('/'),
            self.id
        );
        let auth = format!("Bearer {}", self.link.token);
        let mut tick = tokio::time::interval(self.link.interval);
        let mut failing = false;
        loop {
            tick.tick().await;
            let Ok((sessions, metrics)) = node.report().await else {
                return;
            };
            let hb = self.build(Instant::now(), &sessions, &metrics);
            let (url, auth) = (url.clone(), auth.clone());
            let sent = tokio::task::spawn_blocking(move || {
                ureq::post(&url)
                    .header("Authorization", &auth)
                    .send_json(&hb)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            match sent {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("heartbeats to the scheduler flow again");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "heartbeat to the scheduler failed");
                }
                Err(_) => {}
            }
        }
    }
}
