//! The scheduler's calls to nodes for the tasks it keeps going — recordings (the node side is
//! `ferry_sfu`'s `/v1/recordings`, docs/recording.md "Moving a recording": start one, move one
//! — the target waits, the source hands over, the target resumes —, resume one after its node
//! died, stop one) and transcodes (`ferry_transcode`'s `/v1/transcodes`: start, stop). Blocking
//! `ureq` calls on tokio's blocking pool, with the cluster's bearer token; a recorder's state
//! passes through as opaque JSON (the scheduler does not link the recorder).

use std::time::Duration;

use ferry_proto::api::RecordingReport;
use ferry_proto::{RecordingId, StreamId};

/// Longest wait for an ordinary answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// A hand-over waits for the stream's next keyframe (the node gives up waiting after 8 s and
/// hands over at once) and for its last objects to be stored.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(40);
/// A stop waits for the playlist with `EXT-X-ENDLIST` to be stored (the node waits 30 s).
const STOP_TIMEOUT: Duration = Duration::from_secs(35);
/// Starting a transcode probes the encoder and connects its sessions; stopping one ends them.
const TRANSCODE_TIMEOUT: Duration = Duration::from_secs(20);

/// A node's refusal or its silence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct NodeError {
    /// The node's status, `None` when it did not answer.
    pub status: Option<u16>,
    /// Why, in words.
    pub reason: String,
}

/// Calls nodes' recording endpoints.
#[derive(Clone)]
pub struct TaskClient {
    agent: ureq::Agent,
    auth: String,
}

impl std::fmt::Debug for TaskClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskClient").finish_non_exhaustive()
    }
}

/// What a node answers about a recording (the fields the scheduler keeps).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct NodeRecording {
    /// Its id.
    pub id: String,
    /// Where it is stored, as the node resolved it.
    pub target: String,
    /// Its state there.
    pub state: String,
}

impl TaskClient {
    /// A client presenting `token` (the cluster's API token) with `tls` for `https://` nodes.
    pub fn new(token: &str, tls: Option<ureq::tls::TlsConfig>) -> Self {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0);
        if let Some(tls) = tls {
            config = config.tls_config(tls);
        }
        Self {
            agent: config.build().new_agent(),
            auth: format!("Bearer {token}"),
        }
    }

    fn call(
        &self,
        method: &str,
        url: String,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Vec<u8>, NodeError> {
        let unreachable = |e: &dyn std::fmt::Display| NodeError {
            status: None,
            reason: format!("{url}: {e}"),
        };
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Authorization", &self.auth);
        if body.is_some() {
            req = req.header("Content-Type", "application/json");
        }
        let mut resp = match body {
            Some(b) => self.run(req.body(b), timeout),
            None => self.run(req.body(()), timeout),
        }
        .map_err(|e| unreachable(&e))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(16 << 20)
            .read_to_vec()
            .map_err(|e| unreachable(&e))?;
        if (200..300).contains(&status) {
            return Ok(bytes);
        }
        let text = String::from_utf8_lossy(&bytes);
        let reason = serde_json::from_str::<ferry_proto::api::ApiError>(&text)
            .map_or_else(|_| text.trim().chars().take(300).collect(), |e| e.error);
        Err(NodeError {
            status: Some(status),
            reason: format!("{url}: {status} {reason}"),
        })
    }

    fn run<S: ureq::AsSendBody>(
        &self,
        req: Result<ureq::http::Request<S>, ureq::http::Error>,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let req = req?;
        let req = self
            .agent
            .configure_request(req)
            .timeout_global(Some(timeout))
            .build();
        self.agent.run(req)
    }

    async fn blocking(
        &self,
        method: &'static str,
        url: String,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Vec<u8>, NodeError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.call(method, url, body, timeout))
            .await
            .unwrap_or_else(|e| {
                Err(NodeError {
                    status: None,
                    reason: format!("calling the node: {e}"),
                })
            })
    }

    fn decode(bytes: &[u8]) -> Result<NodeRecording, NodeError> {
        serde_json::from_slice(bytes).map_err(|e| NodeError {
            status: None,
            reason: format!("the node's answer is no recording: {e}"),
        })
    }

    /// Starts recording `id` of `stream` on the node at `base`.
    pub async fn start(
        &self,
        base: &str,
        id: &RecordingId,
        stream: &StreamId,
        target: Option<&str>,
    ) -> Result<NodeRecording, NodeError> {
        let body = serde_json::json!({ "stream": stream, "target": target, "id": id });
        let b = self
            .blocking(
                "POST",
                format!("{}/v1/recordings", base.trim_end_matches('/')),
                Some(body.to_string().into_bytes()),
                CALL_TIMEOUT,
            )
            .await?;
        Self::decode(&b)
    }

    /// Continues recording `id` on the node at `base`: waits there for a hand-over
    /// (`from = "handover"`), or resumes from what its dead node stored (`"crash"`).
    pub async fn continue_on(
        &self,
        base: &str,
        id: &RecordingId,
        stream: &StreamId,
        target: &str,
        from: &str,
    ) -> Result<NodeRecording, NodeError> {
        let body = serde_json::json!({ "stream": stream, "target": target, "from": from });
        let b = self
            .blocking(
                "PUT",
                url(base, id, ""),
                Some(body.to_string().into_bytes()),
                CALL_TIMEOUT,
            )
            .await?;
        Self::decode(&b)
    }

    /// The source hands recording `id` over: its state (JSON), once its objects are stored.
    pub async fn hand_over(&self, base: &str, id: &RecordingId) -> Result<Vec<u8>, NodeError> {
        self.blocking("POST", url(base, id, "/handover"), None, HANDOVER_TIMEOUT)
            .await
    }

    /// The target resumes recording `id` from the source's `state`.
    pub async fn resume(
        &self,
        base: &str,
        id: &RecordingId,
        state: Vec<u8>,
    ) -> Result<NodeRecording, NodeError> {
        let b = self
            .blocking("POST", url(base, id, "/resume"), Some(state), CALL_TIMEOUT)
            .await?;
        Self::decode(&b)
    }

    /// Recording `id` as the node at `base` has it.
    pub async fn show(&self, base: &str, id: &RecordingId) -> Result<NodeRecording, NodeError> {
        let b = self
            .blocking("GET", url(base, id, ""), None, CALL_TIMEOUT)
            .await?;
        Self::decode(&b)
    }

    /// Stops recording `id` on its node (or drops it where it waits for a hand-over).
    pub async fn stop(&self, base: &str, id: &RecordingId) -> Result<NodeRecording, NodeError> {
        let b = self
            .blocking("DELETE", url(base, id, ""), None, STOP_TIMEOUT)
            .await?;
        Self::decode(&b)
    }
}

impl TaskClient {
    /// Starts transcode `id` of `stream` with `ladder` on the node at `base`: its view.
    pub async fn start_transcode(
        &self,
        base: &str,
        id: &ferry_proto::TranscodeId,
        stream: &StreamId,
        ladder: &[String],
        tickets: &std::collections::BTreeMap<String, String>,
    ) -> Result<ferry_proto::api::TranscodeView, NodeError> {
        let body = serde_json::json!({
            "stream": stream, "ladder": ladder, "id": id, "tickets": tickets
        });
        let b = self
            .blocking(
                "POST",
                format!("{}/v1/transcodes", base.trim_end_matches('/')),
                Some(body.to_string().into_bytes()),
                TRANSCODE_TIMEOUT,
            )
            .await?;
        decode(&b)
    }

    /// Transcode `id` as the node at `base` runs it (with its figures).
    pub async fn transcode(
        &self,
        base: &str,
        id: &ferry_proto::TranscodeId,
    ) -> Result<ferry_proto::api::TranscodeView, NodeError> {
        let b = self
            .blocking("GET", transcode_url(base, id), None, CALL_TIMEOUT)
            .await?;
        decode(&b)
    }

    /// Hands transcode `id` over on the node at `base` (it moves): its rungs' session tickets.
    pub async fn handover_transcode(
        &self,
        base: &str,
        id: &ferry_proto::TranscodeId,
    ) -> Result<ferry_proto::api::TranscodeHandover, NodeError> {
        let url = format!("{}/handover", transcode_url(base, id));
        let b = self
            .blocking("POST", url, Some(b"{}".to_vec()), CALL_TIMEOUT)
            .await?;
        decode(&b)
    }

    /// Takes the handover of transcode `id` back on the node at `base` (its move failed).
    pub async fn cancel_transcode_handover(
        &self,
        base: &str,
        id: &ferry_proto::TranscodeId,
    ) -> Result<(), NodeError> {
        let url = format!("{}/handover", transcode_url(base, id));
        self.blocking("DELETE", url, None, CALL_TIMEOUT).await?;
        Ok(())
    }

    /// Stops transcode `id` on the node at `base`.
    pub async fn stop_transcode(
        &self,
        base: &str,
        id: &ferry_proto::TranscodeId,
    ) -> Result<ferry_proto::api::TranscodeView, NodeError> {
        let b = self
            .blocking("DELETE", transcode_url(base, id), None, TRANSCODE_TIMEOUT)
            .await?;
        decode(&b)
    }
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, NodeError> {
    serde_json::from_slice(bytes).map_err(|e| NodeError {
        status: None,
        reason: format!("the node's answer does not decode: {e}"),
    })
}

fn transcode_url(base: &str, id: &ferry_proto::TranscodeId) -> String {
    format!("{}/v1/transcodes/{id}", base.trim_end_matches('/'))
}

fn url(base: &str, id: &RecordingId, tail: &str) -> String {
    format!("{}/v1/recordings/{id}{tail}", base.trim_end_matches('/'))
}

/// A node's view as the scheduler lists it, before the heartbeat brings figures.
pub fn report_of(
    r: &NodeRecording,
    stream: &StreamId,
    node: &ferry_proto::NodeId,
) -> RecordingReport {
    RecordingReport {
        id: r.id.clone(),
        stream: stream.to_string(),
        target: r.target.clone(),
        state: r.state.clone(),
        node: node.to_string(),
        ..Default::default()
    }
}
