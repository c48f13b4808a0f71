//! The recorder core: RTP packets of one video and one audio track in, storage objects out
//! (init segment, media segments cut at keyframes, the HLS playlist and the state), sans-IO.

use std::collections::VecDeque;
use std::time::Instant;

use ferry_rtc::codec::Codec;
use ferry_rtc::media::{AssemblerConfig, AssemblerStats, Frame, FrameAssembler};
use ferry_rtc::rtcp::SenderReportData;
use ferry_rtc::rtp::RtpHeader;
use ferry_rtc::seq::{SeqUnwrapper, TsUnwrapper};

use crate::config::{ConfigError, InputError, RecorderConfig, TrackConfig, check_config};
use crate::h264::{self, H264Params};
use crate::layout::{Layout, VideoParams, opus_duration};
use crate::mux::{Container, MuxError, Sample};
use crate::output::{Event, Object, ObjectKind, Output, RecorderStats};
use crate::playlist;
use crate::segmenter::{Decision, Segmenter};
use crate::state::{InitEntry, RecorderState, STATE_VERSION, SegmentEntry, StateError, TrackState};
use crate::timeline::{Mapped, TrackClock, ntp_diff_ticks, rescale, rtp_diff};
use crate::webm;

/// Object name of the playlist.
pub const PLAYLIST_NAME: &str = "index.m3u8";
/// Object name of the state.
pub const STATE_NAME: &str = "state.json";

/// Duration of a video frame when nothing else tells (30 fps).
const DEFAULT_VIDEO_FRAME: u32 = 3000;
/// Sender reports kept for SSRCs not seen yet.
const MAX_EARLY_REPORTS: usize = 4;
/// Duration of an Opus frame when its TOC does not parse (20 ms).
const DEFAULT_OPUS_FRAME: u32 = 960;

/// Where the recorder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Recording,
    /// Cut and hand over at the next keyframe.
    HandingOver,
    Stopped,
}

/// A frame whose duration is known only when the next one arrives.
#[derive(Debug)]
struct Held {
    t: u64,
    keyframe: bool,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Track {
    cfg: TrackConfig,
    ssrc: Option<u32>,
    seq: SeqUnwrapper,
    ts: TsUnwrapper,
    asm: FrameAssembler,
    clock: Option<TrackClock>,
    /// Last sender report: (NTP, RTP timestamp).
    sr: Option<(u64, u32)>,
    /// Arrival of the last frame taken.
    last_arrival: Option<Instant>,
    /// The next frame starts again from arrival time (after an SSRC change).
    reanchor: bool,
    held: Option<Held>,
    /// Extended sequence number of the last packet of the last frame written.
    last_written_seq: Option<u64>,
}

impl Track {
    fn new(cfg: TrackConfig, assembler: AssemblerConfig) -> Track {
        Track {
            cfg,
            ssrc: None,
            seq: SeqUnwrapper::new(),
            ts: TsUnwrapper::new(),
            asm: FrameAssembler::new(cfg.codec, assembler),
            clock: None,
            sr: None,
            last_arrival: None,
            reanchor: false,
            held: None,
            last_written_seq: None,
        }
    }

    fn restore(cfg: TrackConfig, assembler: AssemblerConfig, s: &TrackState) -> Track {
        let mut t = Track::new(cfg, assembler);
        t.ssrc = s.ssrc;
        t.seq = SeqUnwrapper::from_highest(s.highest_seq);
        t.ts = TsUnwrapper::from_highest(s.highest_ts);
        t.clock = s.clock;
        t.last_written_seq = s.last_written_seq;
        t
    }

    fn state(&self) -> TrackState {
        TrackState {
            codec: self.cfg.codec,
            payload_type: self.cfg.payload_type,
            ssrc: self.ssrc,
            highest_seq: self.seq.highest(),
            highest_ts: self.ts.highest(),
            last_written_seq: self.last_written_seq,
            clock: self.clock,
        }
    }
}

/// Which track a frame came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Video,
    Audio,
}

/// Records one stream. Sans-IO: feed packets with [`Recorder::handle_rtp`] (and sender reports
/// with [`Recorder::handle_sender_report`]), call [`Recorder::handle_timeout`] at
/// [`Recorder::poll_timeout`], and drain [`Recorder::poll_output`] after each call, storing every
/// [`Output::Put`] in order.
///
/// ```
/// use std::time::Instant;
/// use ferry_record::{Recorder, RecorderConfig, TrackConfig, Output};
/// use ferry_rtc::codec::Codec;
///
/// let config = RecorderConfig::new(
///     Some(TrackConfig::new(Codec::H264, 102)),
///     Some(TrackConfig::new(Codec::Opus, 111)),
///     "/var/lib/ferry/recordings/r1",
/// );
/// let mut rec = Recorder::new(config).unwrap();
/// let now = Instant::now();
/// // for each RTP packet: rec.handle_rtp(now, &packet)?;
/// rec.finish(now);
/// while let Some(out) = rec.poll_output() {
///     if let Output::Put(object) = out {
///         // store object.bytes under object.name
///         # let _ = object;
///     }
/// }
/// ```
#[derive(Debug)]
pub struct Recorder {
    config: RecorderConfig,
    container: Container,
    video: Option<Track>,
    audio: Option<Track>,
    /// Arrival of the first frame on this recorder.
    origin: Option<Instant>,
    /// Media seconds before this recorder's first frame (a resumed recording's end so far).
    floor_secs: f64,
    segmenter: Segmenter,
    open_video: Vec<Sample>,
    open_audio: Vec<Sample>,
    video_params: Option<VideoParams>,
    last_video_duration: u32,
    segments: Vec<SegmentEntry>,
    next_number: u32,
    init: Option<InitEntry>,
    init_count: u32,
    /// Whether this recorder checked its init segment against the one in force.
    init_checked: bool,
    pending_map: Option<String>,
    pending_discontinuity: bool,
    target_duration: u64,
    upload_id: Option<String>,
    finished: bool,
    phase: Phase,
    outputs: VecDeque<Output>,
    stats: RecorderStats,
    /// Sender reports of SSRCs no packet has named yet: (SSRC, (NTP, RTP timestamp)).
    early_reports: Vec<(u32, (u64, u32))>,
}

impl Recorder {
    /// A new recording.
    pub fn new(config: RecorderConfig) -> Result<Recorder, ConfigError> {
        check_config(&config)?;
        let video = config.video.map(|c| Track::new(c, config.assembler));
        let audio = config.audio.map(|c| Track::new(c, config.assembler));
        let cut_rate = config
            .video
            .or(config.audio)
            .map_or(90_000, |t| t.clock_rate);
        Ok(Recorder {
            container: Container::for_video(config.video.map(|v| v.codec)),
            segmenter: Segmenter::new(config.segments, cut_rate),
            target_duration: config.segments.max.as_secs_f64().ceil() as u64,
            config,
            video,
            audio,
            origin: None,
            floor_secs: 0.0,
            open_video: Vec::new(),
            open_audio: Vec::new(),
            video_params: None,
            last_video_duration: DEFAULT_VIDEO_FRAME,
            segments: Vec::new(),
            next_number: 1,
            init: None,
            init_count: 0,
            init_checked: false,
            pending_map: None,
            pending_discontinuity: false,
            upload_id: None,
            finished: false,
            phase: Phase::Recording,
            outputs: VecDeque::new(),
            stats: RecorderStats::default(),
            early_reports: Vec::new(),
        })
    }

    fn from_state(
        config: RecorderConfig,
        state: &RecorderState,
        crashed: bool,
    ) -> Result<Recorder, StateError> {
        if state.version != STATE_VERSION {
            return Err(StateError::Version(state.version));
        }
        if state.finished {
            return Err(StateError::Finished);
        }
        let mut r = Recorder::new(config).map_err(|_| StateError::Mismatch("bad configuration"))?;
        if r.container != state.container {
            return Err(StateError::Mismatch("container"));
        }
        let matches = |cfg: Option<TrackConfig>, st: &Option<TrackState>| match (cfg, st) {
            (Some(c), Some(s)) => c.codec == s.codec,
            (None, None) => true,
            _ => false,
        };
        if !matches(r.config.video, &state.video) || !matches(r.config.audio, &state.audio) {
            return Err(StateError::Mismatch("tracks"));
        }
        let assembler = r.config.assembler;
        // Media time already written, in seconds: where tracks that start afresh begin.
        let end = state
            .video
            .iter()
            .chain(state.audio.iter())
            .filter_map(|t| t.clock)
            .map(|c| (c.last_media as f64 + 1.0) / f64::from(c.rate.max(1)))
            .fold(0.0, f64::max);
        if crashed {
            // A new stream from the publisher: fresh unwrappers and clocks, after a gap.
            r.floor_secs = end + 0.040;
            r.pending_discontinuity = true;
        } else {
            r.floor_secs = end;
            if let (Some(cfg), Some(s)) = (r.config.video, &state.video) {
                r.video = Some(Track::restore(cfg, assembler, s));
            }
            if let (Some(cfg), Some(s)) = (r.config.audio, &state.audio) {
                r.audio = Some(Track::restore(cfg, assembler, s));
            }
            r.pending_discontinuity = state.pending_discontinuity;
        }
        r.segments = state.segments.clone();
        r.next_number = state.next_number;
        r.init = state.init.clone();
        r.init_count = state.init_count;
        r.target_duration = r.target_duration.max(state.target_duration);
        r.upload_id = state.upload_id.clone();
        Ok(r)
    }

    /// Continues a recording handed over by another recorder ([`Output::Handover`] or
    /// [`Recorder::export`]): same timeline, next segment at the first keyframe, frames the
    /// source already wrote dropped.
    pub fn resume(config: RecorderConfig, state: &RecorderState) -> Result<Recorder, StateError> {
        Recorder::from_state(config, state, false)
    }

    /// Continues a recording whose recorder died, from the last state it uploaded: the media
    /// after that state is lost, so the next segment is marked `EXT-X-DISCONTINUITY`, and the
    /// timeline starts again just after the last uploaded frame.
    pub fn resume_after_crash(
        config: RecorderConfig,
        last_uploaded: &RecorderState,
    ) -> Result<Recorder, StateError> {
        Recorder::from_state(config, last_uploaded, true)
    }

    /// The container of this recording.
    pub fn container(&self) -> Container {
        self.container
    }

    /// What it counted.
    pub fn stats(&self) -> RecorderStats {
        self.stats
    }

    /// The video track's reassembly counters.
    pub fn video_assembler_stats(&self) -> Option<AssemblerStats> {
        self.video.as_ref().map(|t| t.asm.stats())
    }

    /// Whether the video track lost a frame and a keyframe request (PLI) is due.
    pub fn wants_keyframe(&self) -> bool {
        self.video.as_ref().is_some_and(|t| t.asm.wants_keyframe())
    }

    /// Segments written so far.
    pub fn segments(&self) -> &[SegmentEntry] {
        &self.segments
    }

    /// Whether it stopped (finished, exported or handed over).
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// Records the multipart upload the driver has open, so that it moves with the state.
    pub fn set_upload_id(&mut self, id: Option<String>) {
        self.upload_id = id;
    }

    /// Takes one RTP packet (decrypted) of either track.
    pub fn handle_rtp(&mut self, now: Instant, packet: &[u8]) -> Result<(), InputError> {
        if self.phase == Phase::Stopped {
            return Err(InputError::Stopped);
        }
        let h = RtpHeader::parse(packet)?;
        let kind = if self
            .video
            .as_ref()
            .is_some_and(|t| t.cfg.payload_type == h.payload_type)
        {
            Kind::Video
        } else if self
            .audio
            .as_ref()
            .is_some_and(|t| t.cfg.payload_type == h.payload_type)
        {
            Kind::Audio
        } else {
            return Err(InputError::UnknownPayloadType(h.payload_type));
        };
        let assembler = self.config.assembler;
        let Some(track) = self.track_mut(kind) else {
            return Err(InputError::UnknownPayloadType(h.payload_type));
        };
        if track.ssrc.is_some_and(|s| s != h.ssrc) {
            // A new stream (the publisher reconnected): new sequence and timestamp spaces.
            track.seq = SeqUnwrapper::new();
            track.ts = TsUnwrapper::new();
            track.asm = FrameAssembler::new(track.cfg.codec, assembler);
            track.sr = None;
            track.reanchor = true;
            track.last_written_seq = None;
            self.stats.ssrc_changes += 1;
        }
        let Some(track) = self.track_mut(kind) else {
            return Ok(());
        };
        if track.ssrc != Some(h.ssrc) {
            track.ssrc = Some(h.ssrc);
            if let Some(i) = self.early_reports.iter().position(|r| r.0 == h.ssrc) {
                let (_, report) = self.early_reports.remove(i);
                if let Some(t) = self.track_mut(kind) {
                    t.sr = Some(report);
                }
            }
        }
        let Some(track) = self.track_mut(kind) else {
            return Ok(());
        };
        let seq = track.seq.unwrap(u64::from(h.sequence));
        let ts = track.ts.unwrap(u64::from(h.timestamp));
        track.asm.push(seq, ts, h.marker, h.payload(packet), now);
        self.drain_frames();
        Ok(())
    }

    /// Takes a sender report of either track (by SSRC): tracks that start after both have one
    /// are aligned by NTP time instead of arrival time.
    pub fn handle_sender_report(&mut self, sr: &SenderReportData) {
        let report = (sr.ntp, sr.rtp_ts);
        for t in [self.video.as_mut(), self.audio.as_mut()]
            .into_iter()
            .flatten()
        {
            if t.ssrc == Some(sr.ssrc) {
                t.sr = Some(report);
                return;
            }
        }
        // A report ahead of its stream's first packet: kept until that packet names its track.
        self.early_reports.retain(|(ssrc, _)| *ssrc != sr.ssrc);
        if self.early_reports.len() >= MAX_EARLY_REPORTS {
            self.early_reports.remove(0);
        }
        self.early_reports.push((sr.ssrc, report));
    }

    /// Gives up on frames whose packets waited too long.
    pub fn handle_timeout(&mut self, now: Instant) {
        for t in [self.video.as_mut(), self.audio.as_mut()]
            .into_iter()
            .flatten()
        {
            t.asm.handle_timeout(now);
        }
        self.drain_frames();
    }

    /// When [`Recorder::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.video.as_ref(), self.audio.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|t| t.asm.poll_timeout())
            .min()
    }

    /// The next thing to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Hands over at the next video keyframe (audio only: the next frame): the open segment is
    /// closed just before it, its objects and the playlist are output, then
    /// [`Output::Handover`]; the recorder stops. The target, fed the same packets from before that
    /// keyframe on, continues with no gap and no duplicate.
    pub fn begin_handover(&mut self) {
        if self.phase == Phase::Recording {
            self.phase = Phase::HandingOver;
        }
    }

    /// Closes the open segment now and stops, returning the state for [`Recorder::resume`]
    /// (its objects are output first). Video between now and the target's first keyframe is
    /// lost; [`Recorder::begin_handover`] avoids that when both nodes receive the stream.
    pub fn export(&mut self, now: Instant) -> RecorderState {
        if self.phase == Phase::Stopped {
            return self.state();
        }
        self.handle_timeout(now);
        self.flush();
        self.phase = Phase::Stopped;
        self.state()
    }

    /// Stops the recording: the open segment, then the playlist with `EXT-X-ENDLIST` and the
    /// final state are output.
    pub fn finish(&mut self, now: Instant) {
        if self.phase == Phase::Stopped {
            return;
        }
        self.handle_timeout(now);
        self.flush();
        self.finished = true;
        self.phase = Phase::Stopped;
        self.put_index();
    }

    /// The state as it stands (what [`Recorder::export`] returns, without stopping).
    pub fn state(&self) -> RecorderState {
        RecorderState {
            version: STATE_VERSION,
            target: self.config.target.clone(),
            container: self.container,
            segments: self.segments.clone(),
            next_number: self.next_number,
            init: self.init.clone(),
            init_count: self.init_count,
            video: self.video.as_ref().map(Track::state),
            audio: self.audio.as_ref().map(Track::state),
            target_duration: self.target_duration,
            pending_discontinuity: self.pending_discontinuity,
            upload_id: self.upload_id.clone(),
            finished: self.finished,
        }
    }

    fn track_mut(&mut self, kind: Kind) -> Option<&mut Track> {
        match kind {
            Kind::Video => self.video.as_mut(),
            Kind::Audio => self.audio.as_mut(),
        }
    }

    fn drain_frames(&mut self) {
        loop {
            if self.phase == Phase::Stopped {
                return;
            }
            let v = self.video.as_mut().and_then(|t| t.asm.poll_frame());
            let got_v = v.is_some();
            if let Some(f) = v {
                self.handle_frame(Kind::Video, f);
            }
            if self.phase == Phase::Stopped {
                return;
            }
            let a = self.audio.as_mut().and_then(|t| t.asm.poll_frame());
            let got_a = a.is_some();
            if let Some(f) = a {
                self.handle_frame(Kind::Audio, f);
            }
            if !got_v && !got_a {
                return;
            }
        }
    }

    /// Media time of a track's first frame on this recorder.
    fn start_time(&mut self, kind: Kind, frame: &Frame) -> u64 {
        let origin = *self.origin.get_or_insert(frame.first_arrival);
        let Some(rate) = self.track_mut(kind).map(|t| t.cfg.clock_rate) else {
            return 0;
        };
        let floor = (self.floor_secs * f64::from(rate)) as u64;
        let since = frame.first_arrival.saturating_duration_since(origin);
        let by_arrival = floor + rescale(since.as_nanos() as u64, 1_000_000_000, rate);
        // Both tracks with sender reports, the other one running: align by NTP.
        let (this, other) = match kind {
            Kind::Video => (self.video.as_ref(), self.audio.as_ref()),
            Kind::Audio => (self.audio.as_ref(), self.video.as_ref()),
        };
        let (Some(this), Some(other)) = (this, other) else {
            return by_arrival;
        };
        let (Some((ntp, rtp)), Some((o_ntp, o_rtp)), Some(oc)) = (this.sr, other.sr, other.clock)
        else {
            return by_arrival;
        };
        // NTP time of this frame and of the other track's anchor.
        let frame_ntp_ticks = rtp_diff(frame.ts as u32, rtp);
        let anchor_ntp_ticks = rtp_diff(oc.anchor_ext as u32, o_rtp);
        let anchor_secs = oc.anchor_media as f64 / f64::from(oc.rate.max(1))
            - anchor_ntp_ticks as f64 / f64::from(oc.rate.max(1));
        let this_secs = frame_ntp_ticks as f64 / f64::from(rate);
        let d = ntp_diff_ticks(ntp, o_ntp, rate) as f64 / f64::from(rate);
        let secs = anchor_secs + d + this_secs;
        if secs.is_finite() && secs >= 0.0 {
            (secs * f64::from(rate)) as u64
        } else {
            by_arrival
        }
    }

    /// The frame's media time, `None` when stale. `commit` false leaves the clock as it was.
    fn map_time(&mut self, kind: Kind, frame: &Frame, commit: bool) -> Option<u64> {
        let start = match self.track_mut(kind) {
            Some(t) if t.clock.is_some() && !t.reanchor => None,
            Some(_) => Some(self.start_time(kind, frame)),
            None => return None,
        };
        let track = self.track_mut(kind)?;
        let rate = track.cfg.clock_rate;
        let elapsed = track.last_arrival.map(|l| {
            rescale(
                frame.first_arrival.saturating_duration_since(l).as_nanos() as u64,
                1_000_000_000,
                rate,
            )
        });
        let mut clock = track.clock;
        let mut jumped = false;
        let t = match (&mut clock, start) {
            (Some(c), None) => {
                let anchor = c.anchor_ext;
                match c.map(frame.ts, elapsed) {
                    Mapped::At(t) => {
                        jumped = c.anchor_ext != anchor && c.anchor_ext == frame.ts;
                        t
                    }
                    Mapped::Stale => return None,
                }
            }
            (Some(c), Some(_)) => {
                // A new stream after an SSRC change: continue from arrival time.
                let t = c.last_media + elapsed.unwrap_or(1).max(1);
                *c = TrackClock::start(rate, frame.ts, t);
                t
            }
            (None, Some(s)) => {
                clock = Some(TrackClock::start(rate, frame.ts, s));
                s
            }
            (None, None) => return None,
        };
        if commit {
            track.clock = clock;
            track.reanchor = false;
            track.last_arrival = Some(frame.first_arrival);
            if jumped {
                self.stats.timeline_jumps += 1;
            }
        }
        Some(t)
    }

    /// Counts a hole when the video frame about to be written does not start right after the
    /// last one written (in sequence numbers, carried across hand-overs).
    fn check_follows_on(&mut self, frame: &Frame) {
        let Some(track) = self.video.as_mut() else {
            return;
        };
        let last = track.last_written_seq.replace(frame.last_seq);
        if let Some(last) = last
            && frame.first_seq > last + 1
        {
            self.stats.video_holes += 1;
            self.outputs.push_back(Output::Event(Event::VideoHole {
                packets: frame.first_seq - last - 1,
            }));
        }
    }

    fn handle_frame(&mut self, kind: Kind, frame: Frame) {
        match kind {
            Kind::Video => self.handle_video(frame),
            Kind::Audio => self.handle_audio(frame),
        }
    }

    fn handle_video(&mut self, frame: Frame) {
        let Some(codec) = self.video.as_ref().map(|t| t.cfg.codec) else {
            return;
        };
        if frame.keyframe && self.video_params.is_none() {
            let params = match codec {
                Codec::H264 => H264Params::from_access_unit(&frame.data).map(VideoParams::H264),
                _ => webm::vp8_keyframe_size(&frame.data)
                    .map(|(width, height)| VideoParams::Vp8 { width, height }),
            };
            match params {
                Some(p) => self.video_params = Some(p),
                None => {
                    self.stats.unusable_frames += 1;
                    if let Some(t) = self.video.as_mut() {
                        t.asm.require_keyframe();
                    }
                    return;
                }
            }
        }
        if self.video_params.is_none() {
            self.stats.unusable_frames += 1;
            return;
        }
        let data = match codec {
            Codec::H264 => match h264::to_avcc(&frame.data) {
                Some(d) => d,
                None => {
                    self.stats.unusable_frames += 1;
                    return;
                }
            },
            _ => frame.data.clone(),
        };
        if self.phase == Phase::HandingOver && frame.keyframe {
            if self.map_time(Kind::Video, &frame, false).is_none() {
                self.stats.stale_frames += 1;
                return;
            }
            self.handover();
            return;
        }
        let Some(t) = self.map_time(Kind::Video, &frame, true) else {
            self.stats.stale_frames += 1;
            return;
        };
        self.check_follows_on(&frame);
        let seg_start = self.segmenter.start();
        let decision = self.segmenter.handle_frame(t, frame.keyframe);
        if let Some(held) = self.video.as_mut().and_then(|v| v.held.take()) {
            let d = u32::try_from(t.saturating_sub(held.t))
                .unwrap_or(u32::MAX)
                .max(1);
            self.last_video_duration = d;
            self.push_video(held, d);
        }
        match decision {
            Decision::Cut => {
                if let Some(start) = seg_start {
                    self.close_segment(start, t);
                }
            }
            Decision::Overrun => {
                self.stats.overruns += 1;
                self.outputs.push_back(Output::Event(Event::SegmentOverrun {
                    number: self.next_number,
                }));
            }
            Decision::Continue => {}
        }
        if let Some(v) = self.video.as_mut() {
            v.held = Some(Held {
                t,
                keyframe: frame.keyframe,
                data,
            });
        }
    }

    fn handle_audio(&mut self, frame: Frame) {
        let audio_only = self.video.is_none();
        if self.phase == Phase::HandingOver && audio_only {
            if self.map_time(Kind::Audio, &frame, false).is_none() {
                self.stats.stale_frames += 1;
                return;
            }
            self.handover();
            return;
        }
        let Some(t) = self.map_time(Kind::Audio, &frame, true) else {
            self.stats.stale_frames += 1;
            return;
        };
        if let Some(held) = self.audio.as_mut().and_then(|a| a.held.take()) {
            let d = u32::try_from(t.saturating_sub(held.t))
                .unwrap_or(u32::MAX)
                .max(1);
            self.push_audio(held, d);
        }
        if audio_only {
            let seg_start = self.segmenter.start();
            if let (Decision::Cut, Some(start)) = (self.segmenter.handle_frame(t, true), seg_start)
            {
                self.close_segment(start, t);
            }
        } else if self.segmenter.start().is_none() {
            // Waiting for the first keyframe: keep at most one maximum segment of audio.
            let keep = (self.config.segments.max.as_secs_f64() * 48_000.0) as u64;
            let before = self.open_audio.len();
            self.open_audio.retain(|s| t.saturating_sub(s.dts) <= keep);
            self.stats.preroll_dropped += (before - self.open_audio.len()) as u64;
        }
        if let Some(a) = self.audio.as_mut() {
            a.held = Some(Held {
                t,
                keyframe: true,
                data: frame.data,
            });
        }
    }

    fn push_video(&mut self, h: Held, duration: u32) {
        self.stats.video_frames += 1;
        self.open_video.push(Sample {
            dts: h.t,
            duration,
            keyframe: h.keyframe,
            data: h.data,
        });
    }

    fn push_audio(&mut self, h: Held, duration: u32) {
        self.stats.audio_frames += 1;
        self.open_audio.push(Sample {
            dts: h.t,
            duration,
            keyframe: true,
            data: h.data,
        });
    }

    /// Writes out the held frames with estimated durations and closes the open segment.
    fn flush(&mut self) {
        let mut end = None;
        if let Some(h) = self.video.as_mut().and_then(|v| v.held.take()) {
            let d = self.last_video_duration;
            end = Some(h.t + u64::from(d));
            self.push_video(h, d);
        }
        if let Some(h) = self.audio.as_mut().and_then(|a| a.held.take()) {
            let d = opus_duration(&h.data).unwrap_or(DEFAULT_OPUS_FRAME);
            if self.video.is_none() {
                end = Some(h.t + u64::from(d));
            }
            self.push_audio(h, d);
        }
        match (self.segmenter.start(), end) {
            (Some(start), Some(end)) => self.close_segment(start, end),
            _ => {
                // Nothing that starts a segment: audio waiting for a keyframe goes.
                self.open_audio.clear();
                self.open_video.clear();
            }
        }
    }

    fn handover(&mut self) {
        self.flush();
        self.phase = Phase::Stopped;
        let state = self.state();
        self.outputs.push_back(Output::Handover(Box::new(state)));
    }

    /// Makes sure the init segment this recorder writes is the one in force, writing it (and
    /// marking the next segment with `EXT-X-MAP`) when it is new.
    fn ensure_init(&mut self) -> Result<(), MuxError> {
        if self.init_checked {
            return Ok(());
        }
        let layout = Layout {
            container: self.container,
            video: self.video.is_some(),
            audio: self.audio.is_some(),
        };
        let Some(bytes) = layout.init_segment(self.video_params.as_ref())? else {
            return Ok(());
        };
        let crc32 = crc32fast::hash(&bytes);
        if self.init.as_ref().is_some_and(|i| i.crc32 == crc32) {
            self.init_checked = true;
            return Ok(());
        }
        self.init_count += 1;
        let ext = self.container.init_extension();
        let name = if self.init_count == 1 {
            format!("init.{ext}")
        } else {
            format!("init-{}.{ext}", self.init_count)
        };
        self.init = Some(InitEntry {
            name: name.clone(),
            crc32,
        });
        self.pending_map = Some(name.clone());
        self.init_checked = true;
        self.outputs.push_back(Output::Put(Object {
            name,
            kind: ObjectKind::Init,
            bytes,
        }));
        Ok(())
    }

    /// Closes the open segment, which began at `start` and ends at `end` (cutting-track ticks).
    fn close_segment(&mut self, start: u64, end: u64) {
        let video = std::mem::take(&mut self.open_video);
        let audio = std::mem::take(&mut self.open_audio);
        if video.is_empty() && audio.is_empty() {
            return;
        }
        let number = self.next_number;
        self.next_number += 1;
        let bytes = self.ensure_init().and_then(|()| {
            Layout {
                container: self.container,
                video: self.video.is_some(),
                audio: self.audio.is_some(),
            }
            .media_segment(self.video_params.as_ref(), number, &video, &audio)
        });
        let bytes = match bytes {
            Ok(b) => b,
            Err(error) => {
                self.stats.mux_failures += 1;
                self.outputs
                    .push_back(Output::Event(Event::MuxFailed { number, error }));
                return;
            }
        };
        let rate = self
            .config
            .video
            .or(self.config.audio)
            .map_or(90_000, |t| t.clock_rate);
        let duration = end.saturating_sub(start) as f64 / f64::from(rate);
        let name = format!("seg-{number:05}.{}", self.container.segment_extension());
        self.stats.segments += 1;
        self.stats.segment_bytes += bytes.len() as u64;
        self.target_duration = self.target_duration.max(duration.ceil() as u64);
        self.segments.push(SegmentEntry {
            number,
            name: name.clone(),
            duration,
            discontinuity: std::mem::take(&mut self.pending_discontinuity),
            map: self.pending_map.take(),
            bytes: bytes.len() as u64,
        });
        self.outputs.push_back(Output::Put(Object {
            name,
            kind: ObjectKind::Segment,
            bytes,
        }));
        self.put_index();
        self.outputs
            .push_back(Output::Event(Event::SegmentClosed { number, duration }));
    }

    /// The playlist, then the state.
    fn put_index(&mut self) {
        self.outputs.push_back(Output::Put(Object {
            name: PLAYLIST_NAME.into(),
            kind: ObjectKind::Playlist,
            bytes: playlist::render(&self.segments, self.target_duration, self.finished),
        }));
        self.outputs.push_back(Output::Put(Object {
            name: STATE_NAME.into(),
            kind: ObjectKind::State,
            bytes: self.state().to_json(),
        }));
    }
}

#[cfg(test)]
mod tests;
