//! Per-viewer adaptation on the node: the layer tables' rate windows, and each viewer's
//! allocation — which layer of each of its tracks it plays ([`crate::adapt`]).

use std::time::Instant;

use ferry_proto::StreamId;

use super::Node;
use crate::adapt::allocator::{self, AllocConfig, TrackInput, TrackState};
use crate::adapt::layers::SourceLayer;
use crate::adapt::view::{AdaptationView, LayerView, SessionView, TrackView};
use crate::bwe::Congestion;
use crate::session::{Phase, Role};
use crate::signal::SignalError;

/// What a viewer without any estimate (no transport-wide CC, no REMB) may use: everything.
const UNLIMITED_BPS: u64 = 1 << 40;

/// Padding bytes per probe packet (libwebrtc's largest padding packet).
const PROBE_PADDING: u8 = 224;

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
            if ticked && !e.viewers.is_empty() {
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
        }
        next
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
        let sources: Vec<Option<&crate::adapt::layers::SourceLayers>> = tracks
            .iter()
            .map(|t| t.source().and_then(|l| entry.layers.get(l)))
            .collect();
        let simulcast: Vec<bool> = sources
            .iter()
            .map(|s| s.is_some_and(|s| s.simulcast))
            .collect();
        // A single stream counts as one layer (at its rate): what it plays whatever it is.
        let layers: Vec<Vec<SourceLayer>> = sources
            .iter()
            .map(|s| match s {
                Some(s) if s.simulcast => s.ranked(now),
                Some(s) => s.ranked(now).into_iter().rev().take(1).collect(),
                None => Vec::new(),
            })
            .collect();
        let inputs: Vec<TrackInput<'_>> = tracks
            .iter()
            .zip(&layers)
            .map(|(t, l)| TrackInput {
                video: t.line.video,
                priority: 0,
                layers: l,
                current: t.playing(),
                max_layer: None,
                paused: t.line.video && v.video_paused,
            })
            .collect();
        let mut states: Vec<TrackState> = tracks.iter().map(|t| t.layer).collect();
        let estimate = v.estimate_bps().unwrap_or(UNLIMITED_BPS);
        let a = allocator::allocate(now, estimate, &inputs, &mut states, &AllocConfig::default());
        // Only simulcast sources switch; a single stream is played whatever it is.
        let switches: Vec<(usize, u32, bool)> = a
            .switches
            .iter()
            .copied()
            .filter(|(i, _, _)| simulcast[*i])
            .collect();
        let stream = v.stream.clone();
        let lines: Vec<Option<usize>> = tracks.iter().map(|t| t.source()).collect();
        let Some(v) = self.sessions[vk].as_mut() else {
            return;
        };
        if let Role::Viewer(tracks) = &mut v.role {
            for &(i, _, up) in &switches {
                if let Some(t) = tracks.get_mut(i) {
                    t.layer = states[i];
                }
                if up {
                    self.out.metrics.layer_ups += 1;
                } else {
                    self.out.metrics.layer_downs += 1;
                }
            }
        }
        v.note_allocation(estimate, &a);
        // A step up that does not fit: find out whether the link carries it.
        if let Some(w) = a.wanted_bps.filter(|w| *w > estimate) {
            v.adapt.request_probe(now, w);
        }
        for (i, ssrc, _) in switches {
            if let Some(line) = lines[i] {
                self.request_keyframe(now, &stream, line, Some(ssrc));
            }
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
        let Role::Viewer(tracks) = &s.role else {
            return Ok(SessionView {
                info: s.info(),
                adaptation: None,
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
                    layers: ranked
                        .iter()
                        .map(|l| LayerView {
                            ssrc: l.ssrc,
                            bitrate_bps: l.bitrate_bps,
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
        })
    }
}
