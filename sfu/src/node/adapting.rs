//! Per-viewer adaptation on the node: the layer tables' rate windows, and each viewer's
//! allocation — which layer of each of its tracks it plays ([`crate::media::adapt`]).

use std::time::{Duration, Instant};

use ferry_proto::StreamId;

use super::Node;
use crate::bwe::Congestion;
use crate::media::adapt::allocator::{self, AllocConfig, TrackInput, TrackState};
use crate::media::adapt::layers::Rung;
use crate::media::adapt::view::{
    AdaptationView, LayerView, RejectedLineView, SessionView, TrackView,
};
use crate::node::session::{Phase, Role};
use crate::node::signal::SignalError;

/// What a viewer without any estimate (no transport-wide CC, no REMB) may use: everything.
const UNLIMITED_BPS: u64 = 1 << 40;

/// Padding bytes per probe packet (libwebrtc's largest padding packet).
const PROBE_PADDING: u8 = 224;

/// How long an encoding nobody can use is still asked for (dynacast): a viewer that lifts its
/// cap a moment later finds it there, and the publisher's encoder does not flap.
pub const DYNACAST_HOLD: Duration = Duration::from_secs(5);

impl Node {
    /// The top layer of `stream`'s track `line` (what recordings take), if it has layers.
    pub(super) fn top_layer(&self, stream: &StreamId, line: usize) -> Option<u32> {
        let now = self.last_now;
        self.streams.get(stream)?.layers.get(line)?.top(now)
    }

    /// Closes the layers' rate windows that are due and re-allocates the viewers of the
    /// streams whose rates changed. Returns when to come back.
    pub(super) fn adapt_tick(&mut self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut changed = Vec::new();
        for (name, e) in &mut self.streams {
            let mut ticked = false;
            for l in &mut e.layers {
                ticked |= l.tick(now);
                if let Some(t) = l.next_tick() {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
            if ticked {
                changed.push(name.clone());
            }
        }
        for name in changed {
            let viewers = self
                .streams
                .get(&name)
                .map(|e| e.viewers.clone())
                .unwrap_or_default();
            for vk in viewers {
                self.allocate(now, vk);
            }
            self.dynacast(now, &name);
        }
        next
    }

    /// Dynacast: tells `stream`'s local publisher which of its simulcast encodings some
    /// consumer can use (an SDK publisher stops encoding the others; a plain WHIP client keeps
    /// sending them). A viewer can use every layer up to its cap (bandwidth changes: a viewer
    /// on a slow link may climb, so what it may climb to stays on); a relay or a recording
    /// uses every layer; the lowest always stays on. An encoding goes off once nobody could
    /// use it for [`DYNACAST_HOLD`], and back on at once.
    pub(super) fn dynacast(&mut self, now: Instant, stream: &StreamId) {
        let Some(entry) = self.streams.get(stream) else {
            return;
        };
        let Some(pk) = entry.publisher else {
            return;
        };
        let Some(Role::Publisher(ptracks)) = self.sessions[pk].as_ref().map(|p| &p.role) else {
            return;
        };
        let everything = !entry.relay_out.is_empty() || self.recordings.records(stream);
        // Per simulcast line: the highest layer index (of the known layers) someone can use.
        let mut wants: Vec<(usize, Vec<crate::media::adapt::layers::SourceLayer>, usize)> =
            Vec::new();
        for (line, layers) in entry.layers.iter().enumerate() {
            if !layers.simulcast {
                continue;
            }
            let known = layers.known();
            if known.is_empty() {
                continue;
            }
            let top = known.len() - 1;
            let mut want = if everything { top } else { 0 };
            for &vk in &entry.viewers {
                let Some(v) = self.sessions[vk].as_ref() else {
                    continue;
                };
                let Role::Viewer(vt) = &v.role else {
                    continue;
                };
                if v.video_paused || !vt.iter().any(|t| t.source() == Some(line)) {
                    continue;
                }
                let prefs = v.adapt.prefs;
                let cap = if prefs.is_automatic() {
                    top
                } else {
                    known
                        .iter()
                        .rposition(|l| prefs.admits(l.size))
                        .unwrap_or(0)
                };
                want = want.max(cap);
            }
            wants.push((line, known, want));
        }
        let rid_of = |line: usize, ssrc: u32| {
            ptracks
                .iter()
                .find(|t| t.index == line)
                .and_then(|t| t.stream(ssrc))
                .map(|s| s.rid.clone())
                .filter(|r| !r.is_empty())
        };
        let mid_of = |line: usize| {
            ptracks
                .iter()
                .find(|t| t.index == line)
                .map(|t| t.line.mid.clone())
        };
        let mut told: Vec<(usize, u32, String, String)> = Vec::new();
        for (line, known, _) in &wants {
            for l in known {
                if let (Some(rid), Some(mid)) = (rid_of(*line, l.ssrc), mid_of(*line)) {
                    told.push((*line, l.ssrc, mid, rid));
                }
            }
        }
        let Some(entry) = self.streams.get_mut(stream) else {
            return;
        };
        let mut changed = false;
        for (line, known, want) in &wants {
            for (i, l) in known.iter().enumerate() {
                let needed = i <= *want;
                let e = match entry
                    .encodings
                    .iter_mut()
                    .find(|e| e.line == *line && e.ssrc == l.ssrc)
                {
                    Some(e) => e,
                    None => {
                        entry.encodings.push(crate::media::adapt::layers::Encoding {
                            line: *line,
                            ssrc: l.ssrc,
                            active: true,
                            needed_at: now,
                        });
                        let Some(e) = entry.encodings.last_mut() else {
                            continue;
                        };
                        e
                    }
                };
                if needed {
                    e.needed_at = now;
                    if !e.active {
                        e.active = true;
                        changed = true;
                    }
                } else if e.active && now.saturating_duration_since(e.needed_at) >= DYNACAST_HOLD {
                    e.active = false;
                    changed = true;
                }
            }
        }
        if !changed {
            return;
        }
        let layers: Vec<(String, String, bool)> = told
            .into_iter()
            .map(|(line, ssrc, mid, rid)| {
                let active = entry
                    .encodings
                    .iter()
                    .find(|e| e.line == line && e.ssrc == ssrc)
                    .is_none_or(|e| e.active);
                (mid, rid, active)
            })
            .collect();
        let Some(id) = self.sessions[pk].as_ref().map(|p| p.id.clone()) else {
            return;
        };
        self.out
            .events
            .push_back(crate::node::session::Event::Layers(id, layers));
    }

    /// Chooses the layer of each track of viewer `vk` within its estimate, and asks the
    /// sources for a keyframe of each layer it switches to.
    pub(super) fn allocate(&mut self, now: Instant, vk: usize) {
        let Some(v) = self.sessions[vk].as_ref() else {
            return;
        };
        if v.phase != Phase::Connected {
            return;
        }
        let Role::Viewer(tracks) = &v.role else {
            return;
        };
        let Some(entry) = self.streams.get(&v.stream) else {
            return;
        };
        let sources: Vec<Option<&crate::media::adapt::layers::SourceLayers>> = tracks
            .iter()
            .map(|t| t.source().and_then(|l| entry.layers.get(l)))
            .collect();
        let simulcast: Vec<bool> = sources
            .iter()
            .map(|s| s.is_some_and(|s| s.simulcast))
            .collect();
        // A scalable (SVC) stream with spatial layers offers them, by index.
        let scalable: Vec<bool> = tracks
            .iter()
            .zip(&sources)
            .map(|(t, s)| t.line.codec.is_scalable() && s.is_some_and(|s| s.spatial(now).len() > 1))
            .collect();
        // Layers without a measured rate cannot be ranked (a viewer that just moved here, its
        // stream's relay just started): a track that has a layer keeps it until they can.
        if tracks
            .iter()
            .zip(&sources)
            .any(|(t, s)| t.layer.target.is_some() && s.is_some_and(|s| s.unranked(now)))
        {
            return;
        }
        // Each layer through its temporal layers; a single stream is one layer (at its rate),
        // which may still drop temporal layers.
        let layers: Vec<Vec<Rung>> = sources
            .iter()
            .zip(&scalable)
            .map(|(s, svc)| s.map(|s| s.ladder(now, *svc)).unwrap_or_default())
            .collect();
        let svc_ssrc: Vec<Option<u32>> =
            sources.iter().map(|s| s.and_then(|s| s.top(now))).collect();
        let prefs = v.adapt.prefs;
        let inputs: Vec<TrackInput<'_>> = tracks
            .iter()
            .zip(&layers)
            .zip(&scalable)
            .enumerate()
            .map(|(i, ((t, l), svc))| {
                let selected = t.svc.as_ref().and_then(|s| s.current());
                let playing = if *svc {
                    selected.map(|(sp, _)| u32::from(sp))
                } else if simulcast[i] {
                    t.playing()
                } else {
                    // A single stream plays whatever stream comes.
                    l.last().map(|r| r.layer)
                };
                // On the layer it was given, the temporal layer it was given: the selector
                // reaches it at the stream's next switch point, and after each keyframe it
                // shows the base layer alone for a frame or two, which is no step down.
                let temporal = match playing {
                    Some(p) if Some(p) == t.layer.target => t.layer.temporal,
                    _ => selected.map(|(_, tl)| tl),
                };
                TrackInput {
                    video: t.line.video,
                    priority: 0,
                    layers: l,
                    current: playing.map(|p| (p, temporal)),
                    // The viewer's cap: the highest rung within it (the lowest if none is),
                    // and no spatial layer it cannot decode.
                    max_layer: {
                        let cap = (t.line.video && !prefs.is_automatic())
                            .then(|| l.iter().rposition(|x| prefs.admits(x.size)).unwrap_or(0));
                        let ceiling = (*svc && t.spatial_ceiling() != u8::MAX).then(|| {
                            let c = u32::from(t.spatial_ceiling());
                            l.iter().rposition(|r| r.layer <= c).unwrap_or(0)
                        });
                        match (cap, ceiling) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        }
                    },
                    paused: t.line.video && v.video_paused,
                }
            })
            .collect();
        let mut states: Vec<TrackState> = tracks.iter().map(|t| t.layer).collect();
        // The estimate (where adaptation is on, or the viewer set caps), within the viewer's
        // own bitrate cap: a limit the tolerance before going down does not cross.
        let budget = v
            .adapt
            .budget()
            .filter(|_| self.config.adaptive || !prefs.is_automatic())
            .unwrap_or_else(|| UNLIMITED_BPS.into());
        let estimate = budget.bps();
        let a = allocator::allocate(now, budget, &inputs, &mut states, &AllocConfig::default());
        // Only a track with a choice switches: a single stream without temporal layers is
        // played whatever it is.
        let switches: Vec<allocator::Switch> = a
            .switches
            .iter()
            .copied()
            .filter(|s| simulcast[s.track] || scalable[s.track] || layers[s.track].len() > 1)
            .collect();
        // The frame rate a viewer asked for: VP8/VP9/AV1 temporal layers halve it each (three
        // at 30 fps: 7.5, 15, 30).
        let temporal_cap = prefs.max_fps.map(|f| match f {
            0..=8 => 0u8,
            9..=16 => 1,
            _ => u8::MAX,
        });
        let stream = v.stream.clone();
        let lines: Vec<Option<usize>> = tracks.iter().map(|t| t.source()).collect();
        let Some(v) = self.sessions[vk].as_mut() else {
            return;
        };
        let mut keyframes: Vec<(usize, Option<u32>)> = Vec::new();
        if let Role::Viewer(tracks) = &mut v.role {
            for (t, svc) in tracks.iter_mut().zip(&scalable) {
                t.scalable = *svc;
                if t.line.video {
                    t.temporal_cap = temporal_cap;
                }
            }
            for sw in &switches {
                let i = sw.track;
                if let Some(t) = tracks.get_mut(i) {
                    if sw.new_layer && simulcast[i] && !scalable[i] {
                        t.await_layer(states[i], sw.up);
                    } else {
                        t.layer = states[i];
                    }
                    if !sw.new_layer {
                        // A temporal layer more or less: at the stream's next switch point.
                    } else if scalable[i] {
                        // The spatial layer to reach; K-SVC switches at a key picture.
                        let sp = sw.layer.min(255) as u8;
                        t.set_svc_target(sp, t.temporal_target());
                        if t.svc_needs_keyframe()
                            && let Some(line) = lines[i]
                        {
                            keyframes.push((line, svc_ssrc[i]));
                        }
                    } else if simulcast[i]
                        && let Some(line) = lines[i]
                    {
                        keyframes.push((line, Some(sw.layer)));
                    }
                }
                if sw.up {
                    self.out.metrics.layer_ups += 1;
                } else {
                    self.out.metrics.layer_downs += 1;
                }
            }
            for t in tracks.iter_mut().filter(|t| t.line.video) {
                t.retarget_temporal();
            }
        }
        v.note_allocation(estimate, &a);
        if switches.iter().any(|s| s.up) {
            v.adapt.expect_burst(now);
        }
        // A step up that does not fit: find out whether the link carries it. The first probe
        // asks for the whole ladder: the estimator starts low (`viewer_bwe_config`), and a
        // rung at a time from there would take a probe and a keyframe per rung.
        let wanted = if v.adapt.has_probed() {
            a.wanted_bps
        } else {
            a.wanted_bps.max(a.top_bps)
        };
        if let Some(w) = wanted.filter(|w| *w > estimate) {
            v.adapt.request_probe(now, w);
        }
        for (line, ssrc) in keyframes {
            self.request_keyframe(now, &stream, line, ssrc);
        }
    }

    /// Viewer `vk`'s timers: its estimator's (probe clusters, missing feedback), the probes due,
    /// and a new allocation when the estimate moved.
    pub(super) fn adapt_timeout(&mut self, now: Instant, vk: usize) {
        let Some(v) = self.sessions[vk].as_mut() else {
            return;
        };
        v.adapt.handle_timeout(now);
        self.send_probes(now, vk);
        if self.sessions[vk]
            .as_ref()
            .is_some_and(|v| v.adapt.needs_allocation())
        {
            self.allocate(now, vk);
        }
    }

    /// Sends the padding viewer `vk`'s estimator asks for, on its first video track's RTX
    /// stream (a viewer without RTX is not probed: its estimate climbs by itself).
    fn send_probes(&mut self, now: Instant, vk: usize) {
        let Some(v) = self.sessions[vk].as_mut() else {
            return;
        };
        while let Some((cluster, bytes)) = v.adapt.poll_probe(now) {
            let mut left = bytes;
            while left > 0 {
                let mut buf = self.out.buffer();
                let Role::Viewer(tracks) = &mut v.role else {
                    self.out.recycle(buf);
                    return;
                };
                let n = tracks
                    .iter_mut()
                    .filter(|t| t.line.video)
                    .find_map(|t| t.write_probe(&mut buf, PROBE_PADDING));
                let Some(n) = n else {
                    self.out.recycle(buf);
                    return;
                };
                left = left.saturating_sub(n);
                if v.send_rtp_probe(now, &mut self.out, buf, n, Some(cluster)) {
                    v.adapt.probe_packets += 1;
                    v.adapt.probe_bytes += n as u64;
                    self.out.metrics.probe_packets += 1;
                    self.out.metrics.probe_bytes += n as u64;
                }
            }
        }
    }

    /// A session as `GET /v1/sessions/{id}` shows it, with a viewer's adaptation.
    pub fn session_view(
        &self,
        now: Instant,
        id: &ferry_proto::SessionId,
    ) -> Result<SessionView, SignalError> {
        let s = self
            .by_id
            .get(id)
            .and_then(|&k| self.sessions[k].as_ref())
            .ok_or_else(|| SignalError::SessionNotFound(id.to_string()))?;
        let rejected = s
            .media
            .iter()
            .filter_map(|m| {
                Some(RejectedLineView {
                    mid: m.mid.clone(),
                    reason: m.rejected.clone()?,
                })
            })
            .collect();
        let Role::Viewer(tracks) = &s.role else {
            return Ok(SessionView {
                info: s.info(),
                adaptation: None,
                rejected,
            });
        };
        let entry = self.streams.get(&s.stream);
        let a = &s.adapt;
        let tracks = tracks
            .iter()
            .map(|t| {
                let ranked = t
                    .source()
                    .and_then(|l| entry?.layers.get(l))
                    .map(|l| l.ranked(now))
                    .unwrap_or_default();
                let index =
                    |ssrc: Option<u32>| ssrc.and_then(|x| ranked.iter().position(|l| l.ssrc == x));
                TrackView {
                    mid: t.line.mid.clone(),
                    kind: if t.line.video { "video" } else { "audio" },
                    target: index(t.layer.target.or(t.playing())),
                    playing: index(t.playing()),
                    temporal_target: Some(t.temporal_target()).filter(|&tl| tl != u8::MAX),
                    temporal_playing: t.svc.as_ref().and_then(|s| s.current()).map(|(_, tl)| tl),
                    layers: ranked
                        .iter()
                        .map(|l| LayerView {
                            ssrc: l.ssrc,
                            bitrate_bps: l.bitrate_bps,
                            temporal_bps: l.temporal_bps(),
                            width: l.size.map(|s| s.0),
                            height: l.size.map(|s| s.1),
                        })
                        .collect(),
                }
            })
            .collect();
        let feedback = match (a.twcc_ext, a.estimate_bps()) {
            (Some(_), _) => "transport-cc",
            (None, Some(_)) => "remb",
            (None, None) => "none",
        };
        let (acked_bps, loss) = a.acked_and_loss();
        Ok(SessionView {
            info: s.info(),
            adaptation: Some(AdaptationView {
                feedback,
                estimate_bps: a.estimate_bps(),
                acked_bps,
                loss,
                congestion: a.congestion().map(|c| match c {
                    Congestion::Normal => "normal",
                    Congestion::Overusing => "overusing",
                    Congestion::Underusing => "underusing",
                    Congestion::LossLimited => "loss-limited",
                }),
                allocated_bps: a.allocated_bps,
                wanted_bps: a.wanted_bps,
                feedbacks: a.feedbacks,
                probe_packets: a.probe_packets,
                probe_bytes: a.probe_bytes,
                rtt_ms: a.rtt().map(|r| r.as_millis() as u64),
                resends_over_budget: a.resend.refused,
                preferences: a.prefs,
                tracks,
                history: a
                    .history
                    .iter()
                    .map(|p| {
                        [
                            now.saturating_duration_since(p.at).as_millis() as u64,
                            p.estimate_bps,
                            p.allocated_bps,
                        ]
                    })
                    .collect(),
            }),
            rejected,
        })
    }

    /// A viewer's caps (`POST {session}/layer`, the SDKs' `setQuality`): allocated again at
    /// once; a switch the caps bring happens at the next keyframe of the layer it goes to.
    pub fn set_preferences(
        &mut self,
        now: Instant,
        id: &ferry_proto::SessionId,
        prefs: crate::media::adapt::prefs::Preferences,
    ) -> Result<(), SignalError> {
        let Some(&key) = self.by_id.get(id) else {
            return Err(SignalError::SessionNotFound(id.to_string()));
        };
        let Some(s) = self.sessions[key].as_mut() else {
            return Err(SignalError::SessionNotFound(id.to_string()));
        };
        if !matches!(s.role, Role::Viewer(_)) {
            return Err(SignalError::Unsupported(
                "layer preferences are for viewer (WHEP) sessions".into(),
            ));
        }
        s.adapt.prefs = prefs;
        let stream = s.stream.clone();
        self.allocate(now, key);
        self.dynacast(now, &stream);
        Ok(())
    }

    /// Turns per-viewer adaptation on or off ([`super::NodeConfig::adaptive`]); off, every
    /// viewer's next allocation gives it each track's top layer (a benchmark's baseline).
    pub fn set_adaptive(&mut self, on: bool) {
        self.config.adaptive = on;
    }
}
