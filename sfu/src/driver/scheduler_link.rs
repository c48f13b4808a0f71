//! Where and how a node talks to the scheduler: its replicas' URLs (with etcd there are
//! several; a follower answers state-changing calls with a 307 to the leader), the API token,
//! and what the node reports about itself. [`SchedulerLink::call`] tries the replica that
//! answered last first, then the others, and follows one redirect to the leader.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferry_proto::api::GpuFigures;

/// The header of a heartbeat's answer that carries the node's state at the scheduler.
pub const NODE_STATE_HEADER: &str = "ferry-node-state";
/// The header of a heartbeat's answer that lists the TURN relays being drained (URIs).
pub const TURN_DRAINING_HEADER: &str = "ferry-turn-draining";

/// Whether the node should get new traffic (`/readyz`): not before the scheduler acknowledged a
/// heartbeat (it does not know the node yet), not while it drains.
#[derive(Debug, Default)]
pub struct Readiness {
    waiting: std::sync::atomic::AtomicBool,
    draining: std::sync::atomic::AtomicBool,
}

impl Readiness {
    /// Not ready until [`Readiness::heard`] (a node that reports to a scheduler).
    pub fn wait_for_scheduler(&self) {
        self.waiting.store(true, Ordering::SeqCst);
    }

    /// The scheduler acknowledged a heartbeat, and said the node's state (if it did).
    pub fn heard(&self, node_state: Option<&str>) {
        self.waiting.store(false, Ordering::SeqCst);
        if let Some(s) = node_state {
            let draining = matches!(s.trim(), "draining" | "drained");
            self.draining.store(draining, Ordering::SeqCst);
        }
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.waiting.load(Ordering::SeqCst) {
            return Err("not ready: no heartbeat acknowledged by the scheduler yet");
        }
        if self.draining.load(Ordering::SeqCst) {
            return Err("not ready: draining");
        }
        Ok(())
    }
}

/// Reads the node's GPU figures at each heartbeat (NVML on GPU nodes).
pub type GpuReader = Arc<dyn Fn() -> Option<GpuFigures> + Send + Sync>;

/// Where and how a node reports to the scheduler.
#[derive(Clone)]
pub struct SchedulerLink {
    /// Scheduler replicas' base URLs (`http://127.0.0.1:8080`), at least one.
    pub urls: Vec<String>,
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
    /// TLS settings for `https://` scheduler URLs (trusted roots).
    pub tls: ureq::tls::TlsConfig,
    /// The replica that answered last (index into `urls`).
    preferred: Arc<AtomicUsize>,
}

impl std::fmt::Debug for SchedulerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerLink")
            .field("urls", &self.urls)
            .field("zone", &self.zone)
            .field("host", &self.host)
            .field("capabilities", &self.capabilities)
            .field("gpu", &self.gpu)
            .field("live_gpu", &self.gpu_reader.is_some())
            .finish_non_exhaustive()
    }
}

/// A call to the scheduler that no replica answered.
#[derive(Debug, thiserror::Error)]
#[error("no scheduler replica answered {path}: {last}")]
pub struct SchedulerUnreachable {
    /// The path called.
    pub path: String,
    /// The last replica's error.
    pub last: String,
    /// The last 503 a replica answered (no leader yet, or nothing to give: say, no TURN fleet),
    /// `None` when no replica answered at all.
    pub unavailable: Option<Box<SchedulerAnswer>>,
}

/// An answer from a scheduler replica.
#[derive(Debug)]
pub struct SchedulerAnswer {
    /// HTTP status.
    pub status: u16,
    /// Body text.
    pub body: String,
    /// `Ferry-Node-State` (a heartbeat's answer: the node's state at the scheduler).
    pub node_state: Option<String>,
    /// `Ferry-Turn-Draining` (a heartbeat's answer: URIs of the TURN relays being drained).
    pub turn_draining: Vec<String>,
}

impl SchedulerLink {
    /// A link to the scheduler replicas at `urls` (one URL or several, comma-separated)
    /// with defaults for what the node reports.
    pub fn new(urls: &str, token: &str) -> Self {
        SchedulerLink {
            urls: urls
                .split(',')
                .map(|u| u.trim().trim_end_matches('/').to_owned())
                .filter(|u| !u.is_empty())
                .collect(),
            token: token.to_owned(),
            zone: "default".into(),
            host: String::new(),
            region: String::new(),
            capabilities: Vec::new(),
            canary: false,
            gpu: None,
            gpu_reader: None,
            bandwidth_capacity_bps: 0,
            interval: Duration::from_secs(1),
            tls: ureq::tls::TlsConfig::default(),
            preferred: Arc::default(),
        }
    }

    /// Calls `path` (`/v1/...`) with `GET`, or `POST` of `body` as JSON, with the bearer
    /// token; blocking (run it on a blocking thread). Any HTTP status counts as an answer but
    /// a 503 (no leader yet) or a failed connection, which move on to the next replica. A 307
    /// (a follower naming its leader) is followed once, with the token.
    pub fn call(
        &self,
        path: &str,
        body: Option<&serde_json::Value>,
        timeout: Duration,
    ) -> Result<SchedulerAnswer, SchedulerUnreachable> {
        let method = if body.is_some() {
            Method::Post
        } else {
            Method::Get
        };
        self.request(method, path, body, timeout)
    }

    /// [`SchedulerLink::call`] with `DELETE`.
    pub fn delete(
        &self,
        path: &str,
        timeout: Duration,
    ) -> Result<SchedulerAnswer, SchedulerUnreachable> {
        self.request(Method::Delete, path, None, timeout)
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        timeout: Duration,
    ) -> Result<SchedulerAnswer, SchedulerUnreachable> {
        let n = self.urls.len().max(1);
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut last = String::from("no scheduler URL configured");
        let mut unavailable = None;
        for i in 0..self.urls.len() {
            let idx = (first + i) % n;
            let url = format!("{}{path}", self.urls[idx]);
            let mut answer = self.once(method, &url, body, timeout);
            if let Ok((Some(location), a)) = &answer
                && matches!(a.status, 307 | 308)
            {
                answer = self.once(method, location, body, timeout);
            }
            match answer {
                Ok((_, a)) if a.status == 503 => {
                    last = format!("{url}: 503 {}", a.body);
                    unavailable = Some(Box::new(a));
                }
                Ok((_, a)) => {
                    self.preferred.store(idx, Ordering::Relaxed);
                    return Ok(a);
                }
                Err(e) => last = format!("{url}: {e}"),
            }
        }
        Err(SchedulerUnreachable {
            path: path.to_owned(),
            last,
            unavailable,
        })
    }

    /// One request: its `Location` and the answer.
    fn once(
        &self,
        method: Method,
        url: &str,
        body: Option<&serde_json::Value>,
        timeout: Duration,
    ) -> Result<(Option<String>, SchedulerAnswer), ureq::Error> {
        let auth = format!("Bearer {}", self.token);
        macro_rules! configured {
            ($builder:expr) => {
                $builder
                    .config()
                    .tls_config(self.tls.clone())
                    .timeout_global(Some(timeout))
                    .http_status_as_error(false)
                    .max_redirects(0)
                    .build()
                    .header("Authorization", &auth)
            };
        }
        let mut r = match (method, body) {
            (Method::Post, Some(b)) => configured!(ureq::post(url)).send_json(b)?,
            (Method::Post, None) => configured!(ureq::post(url)).send_empty()?,
            (Method::Get, _) => configured!(ureq::get(url)).call()?,
            (Method::Delete, _) => configured!(ureq::delete(url)).call()?,
        };
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (location, node_state) = (header("location"), header(NODE_STATE_HEADER));
        let turn_draining = header(TURN_DRAINING_HEADER)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let body = r.body_mut().read_to_string().unwrap_or_default();
        Ok((
            location,
            SchedulerAnswer {
                status: r.status().as_u16(),
                body,
                node_state,
                turn_draining,
            },
        ))
    }
}

/// The HTTP methods the link uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
    Delete,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_and_trim() {
        let l = SchedulerLink::new(" http://a:1/ ,http://b:2,,", "t");
        assert_eq!(l.urls, ["http://a:1", "http://b:2"]);
    }

    #[test]
    fn no_replica_answering_is_an_error_naming_the_last() {
        // Port 9 on loopback: nothing listens (connection refused).
        let l = SchedulerLink::new("http://127.0.0.1:9", "t");
        let e = l
            .call("/healthz", None, Duration::from_millis(500))
            .unwrap_err();
        assert!(e.last.contains("127.0.0.1:9"), "{e}");
        assert!(e.unavailable.is_none(), "nobody answered");
    }
}
