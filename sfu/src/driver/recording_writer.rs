//! The driver side of the node's recordings: one writer task per recording puts the objects
//! the core outputs ([`crate::node::RecordingOutput`]) through `ferry_record::Store`, in order,
//! off the media loop; its counters feed the API views and `/metrics`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_proto::RecordingId;
use ferry_record::{Object, Store};
use tokio::sync::{mpsc, oneshot};

use crate::node::{RecordingInfo, RecordingOutput};

/// Tries per object before it is given up (a later playlist lists what was stored).
const PUT_TRIES: u32 = 4;
/// First wait between tries (doubled each time).
const RETRY_BACKOFF: Duration = Duration::from_millis(250);

/// Why a recording API call failed (the HTTP status goes with it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct RecordingApiError {
    /// HTTP status.
    pub status: u16,
    /// Why.
    pub reason: String,
}

impl RecordingApiError {
    /// An error with its status.
    pub fn new(status: u16, reason: impl Into<String>) -> Self {
        Self {
            status,
            reason: reason.into(),
        }
    }
}

impl From<crate::node::RecordingError> for RecordingApiError {
    fn from(e: crate::node::RecordingError) -> Self {
        Self::new(e.status(), e.to_string())
    }
}

/// A recording as the API shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecordingView {
    /// Its id.
    pub id: RecordingId,
    /// The stream it records.
    pub stream: ferry_proto::StreamId,
    /// Where it is stored.
    pub target: String,
    /// `recording`, `stopped` or `moved`.
    pub state: String,
    /// Media segments stored.
    pub segments: u64,
    /// Bytes stored (every object).
    pub bytes: u64,
    /// Objects that could not be stored.
    pub upload_errors: u64,
    /// The latest storage error, if any.
    pub last_error: Option<String>,
    /// Places where this node's recorder lacks video the publisher sent (RTP sequence numbers
    /// missing between two written frames); 0 when every frame that came was written.
    #[serde(default)]
    pub video_holes: u64,
}

/// What a writer task is told.
enum Job {
    Put(Object),
    /// Everything before was put: answer with the view.
    Finish(Box<RecordingInfo>, oneshot::Sender<RecordingView>),
    /// Everything before was put: say so.
    Barrier(oneshot::Sender<()>),
    /// Nothing more comes.
    End,
}

/// An answer waiting for a recording's last object.
type Pending = (Box<RecordingInfo>, oneshot::Sender<RecordingView>);

struct Writer {
    tx: mpsc::UnboundedSender<Job>,
    store: Store,
    last_error: Arc<Mutex<Option<String>>>,
    /// Who waits for the recording's end to be stored.
    finish: Option<Pending>,
}

fn view(info: &RecordingInfo, store: &Store, last_error: &Mutex<Option<String>>) -> RecordingView {
    let m = store.metrics();
    RecordingView {
        id: info.id.clone(),
        stream: info.stream.clone(),
        target: info.target.clone(),
        state: info.state.as_str().to_owned(),
        segments: m.segments,
        bytes: m.bytes,
        upload_errors: m.errors,
        last_error: last_error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        video_holes: info.video_holes,
    }
}

/// The node's recording writers, shared by its cores.
pub(crate) struct Writers {
    by_id: HashMap<RecordingId, Writer>,
    /// Where the writers run: the node's runtime, not a core's worker.
    runtime: tokio::runtime::Handle,
}

impl Writers {
    /// No writers yet; those opened run on `runtime`.
    pub(crate) fn new(runtime: tokio::runtime::Handle) -> Writers {
        Writers {
            by_id: HashMap::new(),
            runtime,
        }
    }

    /// Opens the store of a recording the core just started and spawns its writer.
    pub(crate) fn open(&mut self, info: &RecordingInfo) -> Result<(), RecordingApiError> {
        let store = Store::open(&info.target)
            .map_err(|e| RecordingApiError::new(400, format!("target {:?}: {e}", info.target)))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let last_error = Arc::new(Mutex::new(None));
        self.runtime.spawn(write(
            info.id.clone(),
            store.clone(),
            rx,
            last_error.clone(),
        ));
        self.by_id.insert(
            info.id.clone(),
            Writer {
                tx,
                store,
                last_error,
                finish: None,
            },
        );
        Ok(())
    }

    /// Carries out one output of the core.
    pub(crate) fn handle(&mut self, out: RecordingOutput) {
        match out {
            RecordingOutput::Put(id, obj) => {
                if let Some(w) = self.by_id.get(&id) {
                    let _ = w.tx.send(Job::Put(obj));
                }
            }
            RecordingOutput::Ended(id) => {
                if let Some(w) = self.by_id.get_mut(&id) {
                    if let Some((info, reply)) = w.finish.take() {
                        let _ = w.tx.send(Job::Finish(info, reply));
                    }
                    let _ = w.tx.send(Job::End);
                }
            }
            RecordingOutput::Handover(id, state) => {
                // Its last objects here are queued: the writer ends after them.
                tracing::info!(recording = %id, segments = state.segments.len(), "recording handed over");
                if let Some(w) = self.by_id.get(&id) {
                    let _ = w.tx.send(Job::End);
                }
            }
            RecordingOutput::Event(id, ferry_record::Event::VideoHole { packets }) => {
                tracing::warn!(recording = %id, packets, "recording lacks video: a hole in the RTP sequence");
            }
            RecordingOutput::Event(id, e) => {
                tracing::debug!(recording = %id, event = ?e, "recording event");
            }
        }
    }

    /// Answers `reply` with the view of `info` once the recording's last object (before
    /// [`RecordingOutput::Ended`]) is stored.
    pub(crate) fn on_end(&mut self, info: RecordingInfo, reply: oneshot::Sender<RecordingView>) {
        if let Some(w) = self.by_id.get_mut(&info.id) {
            w.finish = Some((Box::new(info), reply));
        }
    }

    /// Resolves once every object of recording `id` output so far is stored (at once when it
    /// has no writer, or its writer ended: then everything was).
    pub(crate) fn barrier(&self, id: &RecordingId) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if let Some(w) = self.by_id.get(id) {
            let _ = w.tx.send(Job::Barrier(tx));
        }
        rx
    }

    /// The API view of a recording the core lists.
    pub(crate) fn view(&self, info: &RecordingInfo) -> RecordingView {
        match self.by_id.get(&info.id) {
            Some(w) => view(info, &w.store, &w.last_error),
            None => RecordingView {
                id: info.id.clone(),
                stream: info.stream.clone(),
                target: info.target.clone(),
                state: info.state.as_str().to_owned(),
                segments: 0,
                bytes: 0,
                upload_errors: 0,
                last_error: None,
                video_holes: info.video_holes,
            },
        }
    }

    /// Forgets writers of recordings the core no longer lists.
    pub(crate) fn retain(&mut self, listed: &[RecordingInfo]) {
        if self.by_id.len() > listed.len() {
            self.by_id
                .retain(|id, _| listed.iter().any(|r| &r.id == id));
        }
    }

    /// `/metrics` series of every recording's storage.
    pub(crate) fn prometheus(
        &self,
        active: usize,
        moved: crate::node::RecordingCounters,
    ) -> String {
        let (mut bytes, mut segments, mut puts, mut errors) = (0, 0, 0, 0);
        let (mut sum_us, mut max_us) = (0u64, 0u64);
        for w in self.by_id.values() {
            let m = w.store.metrics();
            bytes += m.bytes;
            segments += m.segments;
            puts += m.puts;
            errors += m.errors;
            sum_us += m.latency_us_sum;
            max_us = max_us.max(m.latency_us_max);
        }
        format!(
            "# HELP ferry_recording_bytes_total Bytes of recordings stored (segments, playlists, state).\n\
             # TYPE ferry_recording_bytes_total counter\n\
             ferry_recording_bytes_total {bytes}\n\
             # HELP ferry_recording_segments_total Recording media segments stored.\n\
             # TYPE ferry_recording_segments_total counter\n\
             ferry_recording_segments_total {segments}\n\
             # HELP ferry_recording_upload_errors_total Recording objects that could not be stored.\n\
             # TYPE ferry_recording_upload_errors_total counter\n\
             ferry_recording_upload_errors_total {errors}\n\
             # HELP ferry_recording_upload_seconds Time to store one recording object.\n\
             # TYPE ferry_recording_upload_seconds summary\n\
             ferry_recording_upload_seconds_sum {}\n\
             ferry_recording_upload_seconds_count {puts}\n\
             # HELP ferry_recording_upload_seconds_max Longest time to store one recording object.\n\
             # TYPE ferry_recording_upload_seconds_max gauge\n\
             ferry_recording_upload_seconds_max {}\n\
             # HELP ferry_recordings_active Recordings taking media on this node.\n\
             # TYPE ferry_recordings_active gauge\n\
             ferry_recordings_active {active}\n\
             # HELP ferry_recording_handovers_total Recordings moved between nodes at a keyframe (out: handed over, in: taken over).\n\
             # TYPE ferry_recording_handovers_total counter\n\
             ferry_recording_handovers_total{{direction=\"out\"}} {}\n\
             ferry_recording_handovers_total{{direction=\"in\"}} {}\n\
             # HELP ferry_recording_gaps_total Recordings resumed here after their node died (each gap marked EXT-X-DISCONTINUITY).\n\
             # TYPE ferry_recording_gaps_total counter\n\
             ferry_recording_gaps_total {}\n\
             # HELP ferry_recording_video_holes_total Places where a recording here lacks video the publisher sent (RTP sequence numbers missing between two written frames).\n\
             # TYPE ferry_recording_video_holes_total counter\n\
             ferry_recording_video_holes_total {}\n",
            sum_us as f64 / 1e6,
            max_us as f64 / 1e6,
            moved.handed_over,
            moved.taken_over,
            moved.crash_resumes,
            moved.video_holes,
        )
    }
}

/// A recording's writer: puts its objects in order, retrying a failed put a few times (a
/// segment that cannot be stored is given up; the next playlist still lists only what the
/// recorder wrote, so the error is counted and reported in the view).
async fn write(
    id: RecordingId,
    store: Store,
    mut rx: mpsc::UnboundedReceiver<Job>,
    last_error: Arc<Mutex<Option<String>>>,
) {
    while let Some(job) = rx.recv().await {
        match job {
            Job::Put(obj) => {
                let mut wait = RETRY_BACKOFF;
                for attempt in 1..=PUT_TRIES {
                    match store.put(&obj).await {
                        Ok(()) => break,
                        Err(e) => {
                            tracing::warn!(recording = %id, object = %obj.name, attempt, error = %e, "recording object not stored");
                            *last_error.lock().unwrap_or_else(|e| e.into_inner()) =
                                Some(format!("{}: {e}", obj.name));
                            if attempt < PUT_TRIES {
                                tokio::time::sleep(wait).await;
                                wait *= 2;
                            }
                        }
                    }
                }
            }
            Job::Finish(info, reply) => {
                let _ = reply.send(view(&info, &store, &last_error));
            }
            Job::Barrier(reply) => {
                let _ = reply.send(());
            }
            Job::End => break,
        }
    }
    tracing::debug!(recording = %id, "recording writer done");
}
