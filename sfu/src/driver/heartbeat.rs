//! The node reports in: every second it sends the scheduler its load
//! figures, capabilities and sessions (`POST /v1/nodes/{id}/heartbeat`).
//! Part of the driver: it reads `/proc` and talks HTTP.

use std::time::{Duration, Instant};

use ferry_proto::NodeId;
use ferry_proto::api::{Heartbeat, SessionKind, SessionReport};

use crate::driver::handle::NodeHandle;
use crate::node::metrics::NodeMetrics;
use crate::node::signal;

pub use crate::driver::scheduler_link::{GpuReader, SchedulerLink};

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
    workers: u64,
    last: Option<(Instant, f64, NodeMetrics)>,
    notices: TurnDrainNotices,
}

/// Which sessions were told which TURN relays drain: each connected session gets a
/// `turn-drain` event once per new set of draining relays (the SDK moves off them by an ICE
/// restart when its transport uses one).
#[derive(Debug, Default)]
pub struct TurnDrainNotices {
    told: std::collections::HashMap<ferry_proto::SessionId, Vec<String>>,
}

impl TurnDrainNotices {
    /// The sessions among `connected` to tell that `draining` (sorted, deduplicated here) drain,
    /// with the list to tell them; sessions gone are forgotten.
    pub fn due(
        &mut self,
        draining: &[String],
        connected: &[ferry_proto::SessionId],
    ) -> Vec<(ferry_proto::SessionId, Vec<String>)> {
        let mut relays = draining.to_vec();
        relays.sort();
        relays.dedup();
        let live: std::collections::HashSet<&ferry_proto::SessionId> = connected.iter().collect();
        self.told.retain(|id, _| live.contains(id));
        if relays.is_empty() {
            self.told.clear();
            return Vec::new();
        }
        let mut due = Vec::new();
        for id in connected {
            let told = self.told.entry(id.clone()).or_default();
            if relays.iter().any(|r| !told.contains(r)) {
                *told = relays.clone();
                due.push((id.clone(), relays.clone()));
            } else if told.len() != relays.len() {
                // A relay's drain ended: nothing to say, remember the smaller set.
                *told = relays.clone();
            }
        }
        due
    }
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
            workers: 1,
            last: None,
            notices: TurnDrainNotices::default(),
        }
    }

    /// Reports `workers` cores forwarding media.
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers as u64;
        self
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
            workers: self.workers,
            // Filled by the caller (the node's recordings).
            recordings: Vec::new(),
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
            // Filled by the caller (the node's relays).
            relays: Vec::new(),
        }
    }

    /// Reports every interval until the node stops.
    pub async fn run(mut self, node: NodeHandle) {
        let path = format!("/v1/nodes/{}/heartbeat", self.id);
        let mut tick = tokio::time::interval(self.link.interval);
        let mut failing = false;
        loop {
            tick.tick().await;
            let Ok((sessions, metrics, relays)) = node.report().await else {
                return;
            };
            let mut hb = self.build(Instant::now(), &sessions, &metrics);
            hb.relays = relays
                .into_iter()
                .map(|(stream, from)| ferry_proto::api::RelayReport {
                    stream: stream.to_string(),
                    from: from.to_string(),
                })
                .collect();
            hb.recordings = node
                .recordings()
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|r| ferry_proto::api::RecordingReport {
                    id: r.id.to_string(),
                    stream: r.stream.to_string(),
                    target: r.target,
                    state: r.state,
                    segments: r.segments,
                    bytes: r.bytes,
                    ..Default::default()
                })
                .collect();
            let (link, path) = (self.link.clone(), path.clone());
            let sent = tokio::task::spawn_blocking(move || {
                let body = serde_json::to_value(&hb).map_err(|e| e.to_string())?;
                match link.call(&path, Some(&body), Duration::from_secs(2)) {
                    Ok(a) if (200..300).contains(&a.status) => Ok((a.node_state, a.turn_draining)),
                    Ok(a) => Err(format!("{} {}", a.status, a.body.trim())),
                    Err(e) => Err(e.to_string()),
                }
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            if let Ok((state, draining)) = &sent {
                node.readiness().heard(state.as_deref());
                let connected: Vec<_> = sessions
                    .iter()
                    .filter(|s| s.state == "connected")
                    .map(|s| s.id.clone())
                    .collect();
                for (session, relays) in self.notices.due(draining, &connected) {
                    let data = serde_json::json!({ "relays": relays }).to_string();
                    let heard = node.send_event(&session, ("turn-drain", data));
                    tracing::info!(%session, ?relays, heard, "client told its TURN relays drain");
                }
            }
            match sent {
                Ok(_) if failing => {
                    failing = false;
                    tracing::info!("heartbeats to the scheduler flow again");
                }
                Ok(_) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "heartbeat to the scheduler failed");
                }
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_proto::SessionId;

    fn ids(names: &[&str]) -> Vec<SessionId> {
        names.iter().map(|n| SessionId::new(*n).unwrap()).collect()
    }

    #[test]
    fn each_session_hears_of_a_draining_relay_once() {
        let mut n = TurnDrainNotices::default();
        let a = "turn:10.0.0.1:3478".to_owned();
        let b = "turn:10.0.0.2:3478".to_owned();
        assert!(n.due(&[], &ids(&["s1"])).is_empty());
        let due = n.due(std::slice::from_ref(&a), &ids(&["s1", "s2"]));
        assert_eq!(due.len(), 2);
        assert_eq!(due[0].1, vec![a.clone()]);
        assert!(
            n.due(std::slice::from_ref(&a), &ids(&["s1", "s2"]))
                .is_empty()
        );
        // A new session hears of it; a second relay is news to everyone.
        let due = n.due(std::slice::from_ref(&a), &ids(&["s1", "s2", "s3"]));
        assert_eq!(due.len(), 1);
        let due = n.due(&[b.clone(), a.clone(), a.clone()], &ids(&["s1", "s3"]));
        assert_eq!(due.len(), 2);
        assert_eq!(due[0].1, vec![a.clone(), b.clone()]);
        // One drain ends: nothing new to say; it starts again: news again.
        assert!(n.due(std::slice::from_ref(&b), &ids(&["s1"])).is_empty());
        assert_eq!(n.due(&[a, b], &ids(&["s1"])).len(), 1);
    }
}
