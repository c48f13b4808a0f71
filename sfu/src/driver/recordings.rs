//! The driver's side of recordings: the HTTP layer's calls ([`NodeHandle`] methods) and how the
//! control task carries them out on the core that has the stream.
//!
//! A recording moves between nodes in three calls the scheduler makes (docs/recording.md):
//! the target waits for it ([`NodeHandle::await_recording`]: the stream is relayed in and its
//! packets held), the source hands it over at its next keyframe ([`NodeHandle::hand_over`]:
//! answers with the recorder's state once its last objects are stored), and the target resumes
//! from that state ([`NodeHandle::resume_awaiting`]). After a crash, any node resumes it from the
//! state its dead node last stored ([`NodeHandle::resume_crashed`]).

use std::time::{Duration, Instant};

use ferry_proto::{RecordingId, StreamId};
use ferry_record::{RecorderState, Store};
use tokio::sync::oneshot;

use super::cores::{CoreState, Cores};
use super::handle::{Command, NodeHandle, RecordingCommand, RecordingReply};
use crate::driver::recording_writer::{RecordingApiError, RecordingView};
use crate::node::{RecordingError, RecordingPhase};

/// How often a hand-over is looked at while it waits for its keyframe.
const HANDOVER_POLL: Duration = Duration::from_millis(10);

/// How long a hand-over waits for the source's last objects to be stored.
const STORE_WAIT: Duration = Duration::from_secs(30);

impl NodeHandle {
    async fn recording_call<T>(
        &self,
        make: impl FnOnce(RecordingReply<T>) -> RecordingCommand,
    ) -> Result<T, RecordingApiError> {
        let unavailable = || RecordingApiError::new(503, "node is shutting down");
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Recording(make(tx)))
            .await
            .map_err(|_| unavailable())?;
        rx.await.map_err(|_| unavailable())?
    }

    /// Makes `stream` live here for a recording (relayed in when it is published elsewhere).
    async fn stream_here(&self, stream: &StreamId) -> Result<(), RecordingApiError> {
        // Whether it came, the recording's own start says (404 for a stream nowhere).
        self.call(|r| Command::StreamHere(stream.clone(), r))
            .await
            .map(|_here| ())
            .map_err(|_| RecordingApiError::new(503, "node is shutting down"))
    }

    /// Starts recording `stream` into `target` (default: under the node's recordings
    /// directory), under `id` when the scheduler names it. A stream published on another node
    /// is relayed here first.
    pub async fn start_recording(
        &self,
        id: Option<RecordingId>,
        stream: StreamId,
        target: Option<String>,
    ) -> Result<RecordingView, RecordingApiError> {
        self.stream_here(&stream).await?;
        self.recording_call(|r| RecordingCommand::Start(id, stream, target, r))
            .await
    }

    /// Target of a move: recording `id` of `stream` waits here for its source's state, holding
    /// the stream's packets (relayed in when needed).
    pub async fn await_recording(
        &self,
        id: RecordingId,
        stream: StreamId,
        target: String,
    ) -> Result<RecordingView, RecordingApiError> {
        self.stream_here(&stream).await?;
        self.recording_call(|r| RecordingCommand::Await(id, stream, target, r))
            .await
    }

    /// Target of a move: resumes the waiting recording `id` from its source's state.
    pub async fn resume_awaiting(
        &self,
        id: RecordingId,
        state: RecorderState,
    ) -> Result<RecordingView, RecordingApiError> {
        self.recording_call(|r| RecordingCommand::ResumeAwaiting(id, Box::new(state), r))
            .await
    }

    /// Source of a move: hands recording `id` over at the stream's next keyframe and answers
    /// with its state once every object before it is stored. When no keyframe comes within
    /// `wait`, it hands over at once (the target's video then starts at its first keyframe).
    /// Asking again answers with the same state.
    pub async fn hand_over(
        &self,
        id: RecordingId,
        wait: Duration,
    ) -> Result<RecorderState, RecordingApiError> {
        let deadline = tokio::time::Instant::now() + wait;
        self.recording_call(|r| RecordingCommand::BeginHandover(id.clone(), r))
            .await?;
        let (state, stored) = loop {
            if let Some(handed) = self
                .recording_call(|r| RecordingCommand::HandedOver(id.clone(), r))
                .await?
            {
                break handed;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(recording = %id, wait_ms = wait.as_millis(), "no keyframe to hand over at: handing over now");
                break self
                    .recording_call(|r| RecordingCommand::Export(id.clone(), r))
                    .await?;
            }
            tokio::time::sleep(HANDOVER_POLL).await;
        };
        // Either answer means the writer is past the last object.
        let _ = tokio::time::timeout(STORE_WAIT, stored).await;
        Ok(*state)
    }

    /// Continues recording `id` of `stream` whose node died, from the state stored under
    /// `target` (the gap is marked `EXT-X-DISCONTINUITY`); a recording that stored no state yet
    /// starts afresh there.
    pub async fn resume_crashed(
        &self,
        id: RecordingId,
        stream: StreamId,
        target: String,
    ) -> Result<RecordingView, RecordingApiError> {
        let store = Store::open(&target)
            .map_err(|e| RecordingApiError::new(400, format!("target {target:?}: {e}")))?;
        let state = store.load_state().await.map_err(|e| {
            RecordingApiError::new(502, format!("reading the state under {target:?}: {e}"))
        })?;
        self.stream_here(&stream).await?;
        match state {
            Some(s) if s.finished => Err(RecordingError::Ended(id).into()),
            Some(s) => {
                self.recording_call(|r| RecordingCommand::Resume(id, stream, Box::new(s), true, r))
                    .await
            }
            None => {
                self.recording_call(|r| RecordingCommand::Start(Some(id), stream, Some(target), r))
                    .await
            }
        }
    }

    /// Stops a recording; answers once its playlist with `EXT-X-ENDLIST` is stored (or after
    /// `wait`, with the recording as it then stands).
    pub async fn stop_recording(
        &self,
        id: RecordingId,
        wait: Duration,
    ) -> Result<RecordingView, RecordingApiError> {
        let done = self
            .recording_call(|r| RecordingCommand::Stop(id.clone(), r))
            .await?;
        match tokio::time::timeout(wait, done).await {
            Ok(Ok(v)) => Ok(v),
            _ => self.recording(id).await,
        }
    }

    /// The node's recordings.
    pub async fn recordings(&self) -> Result<Vec<RecordingView>, RecordingApiError> {
        self.recording_call(RecordingCommand::List).await
    }

    /// One recording.
    pub async fn recording(&self, id: RecordingId) -> Result<RecordingView, RecordingApiError> {
        self.recording_call(|r| RecordingCommand::Show(id, r)).await
    }
}

/// Carries out `cmd` on the core that has its stream or recording.
pub(super) fn handle(cores: &Cores, now: Instant, cmd: RecordingCommand) {
    let of_recording = |id: &RecordingId| cores.of_recording(id).unwrap_or(0);
    match cmd {
        RecordingCommand::Start(id, stream, target, r) => {
            let _ = r.send(cores.drive_core(cores.of_stream(&stream), move |c| {
                let info = c.node.start_recording(now, id, &stream, target);
                opened(c, info)
            }));
        }
        RecordingCommand::Resume(id, stream, state, after_crash, r) => {
            let _ = r.send(cores.drive_core(cores.of_stream(&stream), move |c| {
                let info = c
                    .node
                    .resume_recording(now, id, &stream, &state, after_crash);
                opened(c, info)
            }));
        }
        RecordingCommand::Await(id, stream, target, r) => {
            let _ = r.send(cores.drive_core(cores.of_stream(&stream), move |c| {
                c.node
                    .await_recording(now, id, &stream, target)
                    .map(|info| c.writers().view(&info))
                    .map_err(Into::into)
            }));
        }
        RecordingCommand::ResumeAwaiting(id, state, r) => {
            let _ = r.send(cores.drive_core(of_recording(&id), move |c| {
                let info = c.node.resume_awaiting(now, &id, &state);
                opened(c, info)
            }));
        }
        RecordingCommand::BeginHandover(id, r) => {
            let _ = r.send(cores.drive(of_recording(&id), move |n| {
                n.begin_recording_handover(now, &id).map_err(Into::into)
            }));
        }
        RecordingCommand::HandedOver(id, r) => {
            // The barrier is set by the core's worker, so no object of the recording can be
            // handed to its writer in between.
            let _ = r.send(cores.drive_core(of_recording(&id), move |c| {
                match c.node.handed_over_state(&id) {
                    Some(state) => Ok(Some((Box::new(state), barrier(c, &id)))),
                    None if c.node.recording(&id).is_some() => Ok(None),
                    None => Err(RecordingError::UnknownRecording(id).into()),
                }
            }));
        }
        RecordingCommand::Export(id, r) => {
            let _ = r.send(cores.drive_core(of_recording(&id), move |c| {
                let state = c.node.export_recording(now, &id)?;
                Ok((Box::new(state), barrier(c, &id)))
            }));
        }
        RecordingCommand::Stop(id, r) => {
            // The writer learns whom to answer before the core's worker can hand it the
            // recording's end: both on the core's worker.
            let _ = r.send(cores.drive_core(of_recording(&id), move |c| {
                if let Some(mut info) = c
                    .node
                    .recording(&id)
                    .filter(|i| i.state == RecordingPhase::Awaiting)
                {
                    c.node.cancel_awaiting(&id);
                    info.state = RecordingPhase::Stopped;
                    let (tx, rx) = oneshot::channel();
                    let _ = tx.send(c.writers().view(&info));
                    return Ok(rx);
                }
                match c.node.stop_recording(now, &id) {
                    Ok(info) => {
                        let (tx, rx) = oneshot::channel();
                        c.writers().on_end(info, tx);
                        Ok(rx)
                    }
                    Err(e) => Err(e.into()),
                }
            }));
        }
        RecordingCommand::List(r) => {
            let list = cores.recordings();
            let mut writers = relock(&cores.writers);
            writers.retain(&list);
            let _ = r.send(Ok(list.iter().map(|i| writers.view(i)).collect()));
        }
        RecordingCommand::Show(id, r) => {
            let info = cores.of_recording(&id).and_then(|i| {
                let id = id.clone();
                cores.drive(i, move |n| n.recording(&id))
            });
            let _ = r.send(match info {
                Some(info) => Ok(relock(&cores.writers).view(&info)),
                None => Err(RecordingError::UnknownRecording(id).into()),
            });
        }
    }
}

/// Resolves once every object recording `id` output so far is stored: what the core still
/// holds goes to the writers first (on the core's worker, so in order), then the barrier.
fn barrier(core: &mut CoreState, id: &RecordingId) -> oneshot::Receiver<()> {
    let mut writers = relock(&core.writers);
    while let Some(o) = core.node.poll_recording() {
        writers.handle(o);
    }
    writers.barrier(id)
}

fn relock(
    writers: &std::sync::Mutex<crate::driver::recording_writer::Writers>,
) -> std::sync::MutexGuard<'_, crate::driver::recording_writer::Writers> {
    writers.lock().unwrap_or_else(|e| e.into_inner())
}

/// A recording the core just started or resumed gets its writer (a target that cannot be
/// opened takes the recording back: 400).
fn opened(
    core: &mut CoreState,
    info: Result<crate::node::RecordingInfo, RecordingError>,
) -> Result<RecordingView, RecordingApiError> {
    let info = info?;
    let mut writers = relock(&core.writers);
    if let Err(e) = writers.open(&info) {
        core.node.discard_recording(&info.id);
        return Err(e);
    }
    tracing::info!(recording = %info.id, stream = %info.stream, target = %info.target, "recording started");
    Ok(writers.view(&info))
}
