//! Recordings on the node: a `ferry_record::Recorder` per recording, fed the plain RTP of the
//! stream's source (local publisher or relay) where the node fans it out. The core decides; the
//! objects to store leave through [`Node::poll_recording`] and the driver puts them (one writer
//! task per recording, in order).
//!
//! Only the tracks the publisher sends are configured (its first accepted H.264/VP8 line and its
//! first accepted Opus line): a recorder waiting for video that never comes writes nothing.

mod book;

use std::collections::VecDeque;
use std::time::Instant;

use ferry_proto::{RecordingId, StreamId};
use ferry_record::{Recorder, RecorderConfig, RecorderState, TrackConfig};

use super::Node;
pub(super) use book::Recordings;
use book::*;
pub use book::{
    AWAIT_LIMIT, RecordingCounters, RecordingError, RecordingInfo, RecordingOutput, RecordingPhase,
};

use crate::rtcp::SenderReportData;
use crate::rtp::RtpHeader;

impl Node {
    /// Sets the directory a recording without a target goes under (`{dir}/{id}`).
    pub fn set_recordings_dir(&mut self, dir: Option<String>) {
        self.recordings.dir = dir;
    }

    /// Starts recording `stream` (live here: published or relayed) into `target`, or
    /// `{recordings dir}/{id}` when `None`, under `id` (the scheduler names recordings
    /// cluster-wide) or a fresh one. The driver opens the target's store.
    pub fn start_recording(
        &mut self,
        now: Instant,
        id: Option<RecordingId>,
        stream: &StreamId,
        target: Option<String>,
    ) -> Result<RecordingInfo, RecordingError> {
        self.new_recording(now, id, stream, target, None)
    }

    /// Continues recording `id` from `state` (a hand-over or export of another node's
    /// recorder, or — `after_crash` — the last state it stored before its node died: the gap is
    /// marked `EXT-X-DISCONTINUITY`). Its target is the state's.
    pub fn resume_recording(
        &mut self,
        now: Instant,
        id: RecordingId,
        stream: &StreamId,
        state: &RecorderState,
        after_crash: bool,
    ) -> Result<RecordingInfo, RecordingError> {
        let info = self.new_recording(
            now,
            Some(id),
            stream,
            Some(state.target.clone()),
            Some((state, after_crash)),
        )?;
        if after_crash {
            self.recordings.counters.crash_resumes += 1;
        }
        Ok(info)
    }

    /// Target of a hand-over: recording `id` of `stream` (live here) waits for the state its
    /// source hands over ([`Node::resume_awaiting`]), holding the stream's packets meanwhile,
    /// for at most [`AWAIT_LIMIT`]. Asking again for the same stream changes nothing.
    pub fn await_recording(
        &mut self,
        now: Instant,
        id: RecordingId,
        stream: &StreamId,
        target: String,
    ) -> Result<RecordingInfo, RecordingError> {
        self.last_now = now;
        if let Some(a) = self.recordings.awaiting.iter().find(|a| a.id == id) {
            return if &a.stream == stream {
                Ok(a.info())
            } else {
                Err(RecordingError::Exists(id))
            };
        }
        let lines = self
            .source_lines(stream)
            .ok_or_else(|| RecordingError::UnknownStream(stream.clone()))?;
        if let (None, None) = tracks(&lines) {
            return Err(RecordingError::NothingToRecord(stream.clone()));
        }
        self.recordings.claim(&id)?;
        let a = Awaiting {
            id,
            stream: stream.clone(),
            target,
            since: now,
            held: VecDeque::new(),
            bytes: 0,
            dropped: 0,
        };
        let info = a.info();
        self.recordings.awaiting.push(a);
        let until = now + AWAIT_LIMIT;
        self.next_timeout = Some(self.next_timeout.map_or(until, |n| n.min(until)));
        Ok(info)
    }

    /// Target of a hand-over: the source's state is in; the waiting recording resumes from it
    /// and takes the packets it held (what the source already wrote is dropped as stale).
    pub fn resume_awaiting(
        &mut self,
        now: Instant,
        id: &RecordingId,
        state: &RecorderState,
    ) -> Result<RecordingInfo, RecordingError> {
        let Some(i) = self.recordings.awaiting.iter().position(|a| &a.id == id) else {
            return Err(match self.recordings.list.iter().find(|r| &r.id == id) {
                Some(r) => RecordingError::WrongPhase(id.clone(), r.phase.as_str()),
                None => RecordingError::UnknownRecording(id.clone()),
            });
        };
        let stream = self.recordings.awaiting[i].stream.clone();
        let info = self.new_recording(
            now,
            Some(id.clone()),
            &stream,
            Some(state.target.clone()),
            Some((state, false)),
        );
        let a = self.recordings.awaiting.remove(i);
        let info = info?;
        self.recordings.counters.taken_over += 1;
        if a.dropped > 0 {
            tracing::warn!(recording = %id, dropped = a.dropped, "a hand-over waited long: its oldest packets were let go");
        }
        for h in a.held {
            self.record(h.at.min(now), &stream, h.line, &h.data);
        }
        Ok(self.recording(id).unwrap_or(info))
    }

    /// Drops a recording that waits for a hand-over (the move was called off).
    pub fn cancel_awaiting(&mut self, id: &RecordingId) -> bool {
        let before = self.recordings.awaiting.len();
        self.recordings.awaiting.retain(|a| &a.id != id);
        before != self.recordings.awaiting.len()
    }

    fn new_recording(
        &mut self,
        now: Instant,
        id: Option<RecordingId>,
        stream: &StreamId,
        target: Option<String>,
        resume: Option<(&RecorderState, bool)>,
    ) -> Result<RecordingInfo, RecordingError> {
        self.last_now = now;
        let lines = self
            .source_lines(stream)
            .ok_or_else(|| RecordingError::UnknownStream(stream.clone()))?;
        let (video, audio) = tracks(&lines);
        if video.is_none() && audio.is_none() {
            return Err(RecordingError::NothingToRecord(stream.clone()));
        }
        let id = match id {
            Some(id) => {
                // A waiting entry of the same id is the one being resumed.
                if !self.recordings.awaiting.iter().any(|a| a.id == id) {
                    self.recordings.claim(&id)?;
                }
                id
            }
            None => loop {
                let id =
                    RecordingId::new(format!("rec-{}", super::random_token(&mut self.rng, 12)))
                        .map_err(|_| RecordingError::NoTarget)?;
                if self.recordings.get_mut(&id).is_none() {
                    break id;
                }
            },
        };
        let target = match target {
            Some(t) => t,
            None => {
                let dir = self
                    .recordings
                    .dir
                    .as_deref()
                    .ok_or(RecordingError::NoTarget)?;
                format!("{}/{id}", dir.trim_end_matches('/'))
            }
        };
        let config = RecorderConfig::new(video.map(|v| v.1), audio.map(|a| a.1), target.clone());
        let recorder = match resume {
            None => Recorder::new(config)?,
            Some((state, false)) => Recorder::resume(config, state)?,
            Some((state, true)) => Recorder::resume_after_crash(config, state)?,
        };
        let tap = |t: Option<(usize, TrackConfig)>| {
            t.map(|(line, _)| Tap {
                line,
                ssrc: None,
                last_seen: None,
            })
        };
        let rec = Recording {
            id,
            stream: stream.clone(),
            target,
            phase: RecordingPhase::Recording,
            recorder,
            video: tap(video),
            audio: tap(audio),
            refused: 0,
            next_keyframe: now + KEYFRAME_INTERVAL,
        };
        let info = rec.info();
        self.recordings.list.push(rec);
        self.recordings.trim();
        // A keyframe starts the first segment at once.
        if let Some(v) = video {
            let top = self.top_layer(stream, v.0);
            self.request_keyframe(now, stream, v.0, top);
        }
        Ok(info)
    }

    /// Stops a recording: its open segment and the playlist with `EXT-X-ENDLIST` are output,
    /// then [`RecordingOutput::Ended`].
    pub fn stop_recording(
        &mut self,
        now: Instant,
        id: &RecordingId,
    ) -> Result<RecordingInfo, RecordingError> {
        self.last_now = now;
        let Recordings {
            list,
            out,
            counters,
            ..
        } = &mut self.recordings;
        let r = find_mut(list, id)?;
        if r.phase != RecordingPhase::Recording {
            return Err(RecordingError::Ended(id.clone()));
        }
        r.recorder.finish(now);
        Recordings::drain(out, counters, r);
        r.phase = RecordingPhase::Stopped;
        out.push_back(RecordingOutput::Ended(id.clone()));
        Ok(r.info())
    }

    /// `stream` ended here (its publisher left for good): its recordings stop as if asked to —
    /// the open segment and the playlist with `EXT-X-ENDLIST` go out.
    pub(super) fn end_recordings_of(&mut self, now: Instant, stream: &StreamId) {
        self.recordings.awaiting.retain(|a| &a.stream != stream);
        let ids: Vec<RecordingId> = self
            .recordings
            .list
            .iter()
            .filter(|r| &r.stream == stream && r.phase == RecordingPhase::Recording)
            .map(|r| r.id.clone())
            .collect();
        for id in ids {
            if self.stop_recording(now, &id).is_ok() {
                tracing::info!(recording = %id, %stream, "recording ended with its stream");
            }
        }
    }

    /// Drops a recording the driver could not open storage for (nothing was output yet that
    /// matters: its objects are discarded).
    pub fn discard_recording(&mut self, id: &RecordingId) {
        self.recordings.list.retain(|r| &r.id != id);
        self.recordings.out.retain(|o| match o {
            RecordingOutput::Put(r, _)
            | RecordingOutput::Ended(r)
            | RecordingOutput::Handover(r, _)
            | RecordingOutput::Event(r, _) => r != id,
        });
    }

    /// Hands a recording over at its next video keyframe ([`RecordingOutput::Handover`]; the
    /// move of a recording to another node), asking the publisher for that keyframe now. Asking
    /// again changes nothing.
    pub fn begin_recording_handover(
        &mut self,
        now: Instant,
        id: &RecordingId,
    ) -> Result<(), RecordingError> {
        self.last_now = now;
        let Recordings {
            list,
            out,
            counters,
            ..
        } = &mut self.recordings;
        let r = find_mut(list, id)?;
        match r.phase {
            RecordingPhase::Recording => {}
            RecordingPhase::Moved => return Ok(()),
            RecordingPhase::Stopped => return Err(RecordingError::Ended(id.clone())),
            RecordingPhase::Awaiting => {
                return Err(RecordingError::WrongPhase(id.clone(), "awaiting"));
            }
        }
        r.recorder.begin_handover();
        let (stream, line) = (r.stream.clone(), r.video.map(|v| v.line));
        Recordings::drain(out, counters, r);
        if let Some(line) = line {
            let top = self.top_layer(&stream, line);
            self.request_keyframe(now, &stream, line, top);
        }
        Ok(())
    }

    /// Hands a recording over now, without waiting for a keyframe (its open segment is closed
    /// at once): the fallback when no keyframe comes. The target's video starts at its first
    /// keyframe. A recording handed over already answers with the state it handed over with.
    pub fn export_recording(
        &mut self,
        now: Instant,
        id: &RecordingId,
    ) -> Result<RecorderState, RecordingError> {
        self.last_now = now;
        let Recordings {
            list,
            out,
            counters,
            ..
        } = &mut self.recordings;
        let r = find_mut(list, id)?;
        match r.phase {
            RecordingPhase::Recording | RecordingPhase::Moved => {}
            RecordingPhase::Stopped => return Err(RecordingError::Ended(id.clone())),
            RecordingPhase::Awaiting => {
                return Err(RecordingError::WrongPhase(id.clone(), "awaiting"));
            }
        }
        if r.phase == RecordingPhase::Moved {
            return Ok(r.recorder.state());
        }
        let state = r.recorder.export(now);
        Recordings::drain(out, counters, r);
        r.phase = RecordingPhase::Moved;
        counters.handed_over += 1;
        Ok(state)
    }

    /// The state a recording handed over with, once it reached its hand-over point (the source
    /// keeps it for the target, which may ask again).
    pub fn handed_over_state(&self, id: &RecordingId) -> Option<RecorderState> {
        self.recordings
            .list
            .iter()
            .find(|r| &r.id == id && r.phase == RecordingPhase::Moved)
            .map(|r| r.recorder.state())
    }

    /// A recording's state as it stands (what a crash-resume would start from once stored).
    pub fn recording_state(&self, id: &RecordingId) -> Option<RecorderState> {
        self.recordings
            .list
            .iter()
            .find(|r| &r.id == id)
            .map(|r| r.recorder.state())
    }

    /// One recording.
    pub fn recording(&self, id: &RecordingId) -> Option<RecordingInfo> {
        self.recordings
            .list
            .iter()
            .find(|r| &r.id == id)
            .map(Recording::info)
            .or_else(|| {
                self.recordings
                    .awaiting
                    .iter()
                    .find(|a| &a.id == id)
                    .map(Awaiting::info)
            })
    }

    /// Every recording this node has (ended ones too, the latest [`MAX_ENDED`]), then those
    /// waiting for a hand-over.
    pub fn recordings(&self) -> Vec<RecordingInfo> {
        let Recordings { list, awaiting, .. } = &self.recordings;
        list.iter()
            .map(Recording::info)
            .chain(awaiting.iter().map(Awaiting::info))
            .collect()
    }

    /// How recordings came and went here.
    pub fn recording_counters(&self) -> RecordingCounters {
        self.recordings.counters
    }

    /// Recordings taking media now.
    pub fn active_recordings(&self) -> usize {
        self.recordings
            .list
            .iter()
            .filter(|r| r.phase == RecordingPhase::Recording)
            .count()
    }

    /// The next thing the driver does for a recording.
    pub fn poll_recording(&mut self) -> Option<RecordingOutput> {
        self.recordings.out.pop_front()
    }

    /// Feeds a source packet of `stream`'s line `line` to its recordings (called where the node
    /// fans it out); asks the publisher for a keyframe when a recorder lost video.
    pub(super) fn record(&mut self, now: Instant, stream: &StreamId, line: usize, pkt: &[u8]) {
        if self.recordings.list.is_empty() && self.recordings.awaiting.is_empty() {
            return;
        }
        for a in self
            .recordings
            .awaiting
            .iter_mut()
            .filter(|a| &a.stream == stream)
        {
            a.hold(now, line, pkt);
        }
        let Ok(h) = RtpHeader::parse(pkt) else {
            return;
        };
        let mut keyframe = None;
        let mut deadline: Option<Instant> = None;
        let Recordings {
            list,
            out,
            counters,
            ..
        } = &mut self.recordings;
        for r in list
            .iter_mut()
            .filter(|r| &r.stream == stream && r.phase == RecordingPhase::Recording)
        {
            let tap = [r.video.as_mut(), r.audio.as_mut()]
                .into_iter()
                .flatten()
                .find(|t| t.line == line);
            let Some(tap) = tap else { continue };
            if !tap.admit(now, h.ssrc) {
                continue;
            }
            if r.recorder.handle_rtp(now, pkt).is_err() {
                r.refused += 1;
            }
            if let Some(v) = r.video
                && (r.recorder.wants_keyframe() || now >= r.next_keyframe)
            {
                r.next_keyframe = now + KEYFRAME_INTERVAL;
                keyframe = Some(v.line);
            }
            if let Some(t) = r.recorder.poll_timeout() {
                deadline = Some(deadline.map_or(t, |d| d.min(t)));
            }
            Recordings::drain(out, counters, r);
        }
        if let Some(t) = deadline {
            self.next_timeout = Some(self.next_timeout.map_or(t, |n| n.min(t)));
        }
        if let Some(line) = keyframe {
            let top = self.top_layer(stream, line);
            self.request_keyframe(now, stream, line, top);
        }
    }

    /// Feeds a sender report of `stream`'s publisher to its recordings (audio/video alignment).
    pub(super) fn record_sender_report(&mut self, stream: &StreamId, sr: &SenderReportData) {
        for r in self
            .recordings
            .list
            .iter_mut()
            .filter(|r| &r.stream == stream && r.phase == RecordingPhase::Recording)
        {
            r.recorder.handle_sender_report(sr);
        }
    }

    /// Drives the recorders' timers; the next one.
    pub(super) fn recording_tick(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let Recordings {
            list,
            awaiting,
            out,
            counters,
            ..
        } = &mut self.recordings;
        awaiting.retain(|a| {
            let until = a.since + AWAIT_LIMIT;
            if until <= now {
                tracing::warn!(recording = %a.id, stream = %a.stream, "no hand-over came for the waiting recording: dropped");
                return false;
            }
            next = Some(next.map_or(until, |n| n.min(until)));
            true
        });
        for r in list
            .iter_mut()
            .filter(|r| r.phase == RecordingPhase::Recording)
        {
            if r.recorder.poll_timeout().is_some_and(|t| t <= now) {
                r.recorder.handle_timeout(now);
                Recordings::drain(out, counters, r);
            }
            if let Some(t) = r.recorder.poll_timeout() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_simulcast_layer_at_a_time() {
        let t0 = Instant::now();
        let mut tap = Tap {
            line: 1,
            ssrc: None,
            last_seen: None,
        };
        assert!(tap.admit(t0, 10));
        assert!(!tap.admit(t0 + Duration::from_millis(10), 11));
        assert!(tap.admit(t0 + Duration::from_millis(20), 10));
        // The followed layer went quiet: the next one is taken.
        assert!(tap.admit(t0 + Duration::from_millis(1100), 11));
        assert!(!tap.admit(t0 + Duration::from_millis(1110), 10));
    }

    #[test]
    fn errors_map_to_statuses() {
        let s = StreamId::new("s").unwrap();
        let r = RecordingId::new("r").unwrap();
        assert_eq!(RecordingError::UnknownStream(s.clone()).status(), 404);
        assert_eq!(RecordingError::UnknownRecording(r.clone()).status(), 404);
        assert_eq!(RecordingError::Ended(r).status(), 409);
        assert_eq!(RecordingError::NothingToRecord(s).status(), 422);
        assert_eq!(RecordingError::NoTarget.status(), 400);
    }
}
