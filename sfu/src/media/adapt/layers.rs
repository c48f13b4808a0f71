//! What a source track offers its viewers: its RTP streams (simulcast layers), each with the
//! bitrate it carries now and whether it is live. The node keeps one [`SourceLayers`] per
//! track of every stream it forwards — published here or relayed in — and updates it from the
//! packets it fans out, so the allocator sees the same picture on the origin and on a relay.

use std::time::{Duration, Instant};

/// Most streams one track may carry (simulcast layers plus strays), as on the receive side.
pub const MAX_LAYERS: usize = 8;

/// A layer that sent nothing for this long is paused (the publisher stopped encoding it: its
/// own bandwidth estimate, dynacast, or it went away).
pub const LAYER_SILENCE: Duration = Duration::from_millis(1_000);

/// A viewer whose layer sent nothing for this long takes the next keyframe of any layer
/// (shorter than [`LAYER_SILENCE`]: a frozen picture costs more than an early switch).
pub const SUBSTITUTE_SILENCE: Duration = Duration::from_millis(300);

/// How often the bitrate windows close.
pub const RATE_WINDOW: Duration = Duration::from_millis(500);

/// Keyframe bytes are averaged over this many windows (8 s), the rest over ~2: a keyframe
/// (libwebrtc's are several delta frames) doubles the rate of the window it falls in, and a
/// viewer's switch up asks for one on the layer it switches to — counted at once, the layer
/// it just climbed to would look too big for the estimate and the switch would undo itself.
/// Keyframes that come regularly (a fixed GOP) still count at what they carry on average.
pub const KEYFRAME_WINDOWS: u64 = 16;

/// Dynacast's view of one simulcast encoding of a local publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoding {
    /// The publisher's m-line.
    pub line: usize,
    /// The encoding's SSRC.
    pub ssrc: u32,
    /// What the publisher was last told: send it.
    pub active: bool,
    /// When some consumer could last use it.
    pub needed_at: Instant,
}

/// One RTP stream of a source track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceLayer {
    /// Its media SSRC.
    pub ssrc: u32,
    /// Its bitrate (bit/s): a smoothed rate over the last windows, keyframes counted at
    /// their average over [`KEYFRAME_WINDOWS`].
    pub bitrate_bps: u64,
    /// The highest smoothed bitrate it had (a paused layer is ranked by what it carried).
    pub peak_bps: u64,
    /// When its last packet came.
    pub last_seen: Instant,
    /// Its picture size (width, height), read from its last keyframe.
    pub size: Option<(u16, u16)>,
    /// A layered stream (VP8 temporal layers, VP9/AV1 SVC): the rate of each (spatial,
    /// temporal) layer's own frames (bit/s), smoothed like `bitrate_bps`; row 0 only for a
    /// stream without spatial layers.
    pub layer_bps: [[u64; MAX_TEMPORAL]; MAX_SPATIAL],
    /// Picture sizes per spatial layer, where the stream says them.
    pub spatial_size: [Option<(u16, u16)>; MAX_SPATIAL],
    /// Spatial layers seen (0: no layer information).
    pub spatial_layers: u8,
    /// Rate windows closed since it first came (at most 255).
    windows: u8,
    /// Bytes in the current window: of delta frames, of keyframes.
    window_bytes: u64,
    window_key_bytes: u64,
    layer_bytes: [[u64; MAX_TEMPORAL]; MAX_SPATIAL],
    layer_key_bytes: [[u64; MAX_TEMPORAL]; MAX_SPATIAL],
    /// The two parts of `bitrate_bps` and of `layer_bps`: delta frames (smoothed over ~2
    /// windows), keyframes (over [`KEYFRAME_WINDOWS`]).
    delta_bps: u64,
    key_bps: u64,
    layer_delta_bps: [[u64; MAX_TEMPORAL]; MAX_SPATIAL],
    layer_key_bps: [[u64; MAX_TEMPORAL]; MAX_SPATIAL],
    /// The RTP timestamp of the keyframe being received (its packets share it), if the last
    /// packet was of one.
    key_ts: Option<u32>,
}

/// Spatial layers of a scalable stream that are told apart.
pub const MAX_SPATIAL: usize = 4;

/// Temporal layers of a stream (or of a spatial layer) that are told apart.
pub const MAX_TEMPORAL: usize = 4;

/// One step of a track's ladder for the allocator: a layer up to a temporal layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rung {
    /// The layer: a simulcast stream's SSRC, a scalable stream's spatial layer index, or the
    /// single stream's SSRC.
    pub layer: u32,
    /// The highest temporal layer it takes (`None`: all of them).
    pub temporal: Option<u8>,
    /// What it carries (bit/s).
    pub bitrate_bps: u64,
    /// What its layer carries with every temporal layer (bit/s).
    pub layer_bps: u64,
    /// Its picture size, where known.
    pub size: Option<(u16, u16)>,
}

/// Where layer `layer` up to temporal layer `temporal` (`None`: all) sits in `rungs`: the first
/// of that layer's rungs that takes `temporal` (a temporal layer below the layer's lowest
/// rung counts as that rung).
pub fn rung_of(rungs: &[Rung], layer: u32, temporal: Option<u8>) -> Option<usize> {
    rungs.iter().position(|r| {
        r.layer == layer
            && match (r.temporal, temporal) {
                (None, _) => true,
                (Some(rt), Some(t)) => rt >= t,
                (Some(_), None) => false,
            }
    })
}

impl SourceLayer {
    /// A layer measured at `bitrate_bps`, last seen at `now` (for a caller that measures rates
    /// itself: a simulation, a benchmark).
    pub fn measured(ssrc: u32, bitrate_bps: u64, now: Instant) -> Self {
        Self {
            ssrc,
            bitrate_bps,
            peak_bps: bitrate_bps,
            last_seen: now,
            size: None,
            layer_bps: [[0; MAX_TEMPORAL]; MAX_SPATIAL],
            spatial_size: [None; MAX_SPATIAL],
            spatial_layers: 0,
            windows: 0,
            window_bytes: 0,
            window_key_bytes: 0,
            layer_bytes: [[0; MAX_TEMPORAL]; MAX_SPATIAL],
            layer_key_bytes: [[0; MAX_TEMPORAL]; MAX_SPATIAL],
            delta_bps: bitrate_bps,
            key_bps: 0,
            layer_delta_bps: [[0; MAX_TEMPORAL]; MAX_SPATIAL],
            layer_key_bps: [[0; MAX_TEMPORAL]; MAX_SPATIAL],
            key_ts: None,
        }
    }

    /// Counts a packet of `len` bytes: of a keyframe when it carries the keyframe's RTP
    /// timestamp (its first packet, `keyframe_start`, names it).
    fn count(&mut self, len: usize, ts: Option<u32>, keyframe_start: bool) {
        if keyframe_start {
            self.key_ts = ts;
        } else if self.key_ts.is_some() && ts != self.key_ts {
            self.key_ts = None;
        }
        if self.key_ts.is_some() {
            self.window_key_bytes += len as u64;
        } else {
            self.window_bytes += len as u64;
        }
    }

    /// Closes a window of `secs`.
    fn close_window(&mut self, secs: f64) {
        let rate = |bytes: &mut u64| {
            let r = (*bytes as f64 * 8.0 / secs) as u64;
            *bytes = 0;
            r
        };
        // Smoothed over ~2 windows: the ranking of layers follows a rate that changes within
        // a second or so.
        let fast = |bps: &mut u64, r: u64| *bps = if *bps == 0 { r } else { (*bps + r) / 2 };
        let slow = |bps: &mut u64, r: u64| {
            *bps = (bps.saturating_mul(KEYFRAME_WINDOWS - 1) + r) / KEYFRAME_WINDOWS;
        };
        fast(&mut self.delta_bps, rate(&mut self.window_bytes));
        slow(&mut self.key_bps, rate(&mut self.window_key_bytes));
        self.bitrate_bps = self.delta_bps + self.key_bps;
        for s in 0..MAX_SPATIAL {
            for t in 0..MAX_TEMPORAL {
                fast(
                    &mut self.layer_delta_bps[s][t],
                    rate(&mut self.layer_bytes[s][t]),
                );
                slow(
                    &mut self.layer_key_bps[s][t],
                    rate(&mut self.layer_key_bytes[s][t]),
                );
                self.layer_bps[s][t] = self.layer_delta_bps[s][t] + self.layer_key_bps[s][t];
            }
        }
        self.peak_bps = self.peak_bps.max(self.bitrate_bps);
        self.windows = self.windows.saturating_add(1);
    }

    /// The rate of spatial layer `spatial`'s own frames, all temporal layers (bit/s).
    pub fn spatial_bps(&self, spatial: usize) -> u64 {
        self.layer_bps.get(spatial).map_or(0, |r| r.iter().sum())
    }

    /// What it carries up to each of its temporal layers (bit/s, the last its whole rate);
    /// empty when it shows fewer than two.
    pub fn temporal_bps(&self) -> Vec<u64> {
        let rungs = self.rungs(Lowest::Any);
        if rungs.len() < 2 {
            return Vec::new();
        }
        rungs.iter().map(|r| r.bitrate_bps).collect()
    }

    /// This layer's rungs (a stream, or one spatial layer of a scalable stream as
    /// [`SourceLayers::spatial`] gives it): one per temporal layer
    /// from `lowest` up, the last taking every temporal layer; each carries the share of
    /// `bitrate_bps` its temporal layers carried. One rung (all) when it shows no temporal
    /// layers.
    fn rungs(&self, lowest: Lowest) -> Vec<Rung> {
        let mut rates = [0u64; MAX_TEMPORAL];
        for row in &self.layer_bps {
            for (r, x) in rates.iter_mut().zip(row) {
                *r += x;
            }
        }
        let total: u64 = rates.iter().sum();
        let n = rates.iter().rposition(|&r| r > 0).map_or(0, |t| t + 1);
        let all = Rung {
            layer: self.ssrc,
            temporal: None,
            bitrate_bps: self.bitrate_bps,
            layer_bps: self.bitrate_bps,
            size: self.size,
        };
        if n < 2 || total == 0 {
            return vec![all];
        }
        let from = match lowest {
            Lowest::Any => 0,
            Lowest::HalfRate => n - 2,
        };
        let mut v: Vec<Rung> = (from..n - 1)
            .map(|t| {
                let upto: u64 = rates[..=t].iter().sum();
                Rung {
                    temporal: Some(t as u8),
                    bitrate_bps: (self.bitrate_bps as f64 * upto as f64 / total as f64) as u64,
                    ..all
                }
            })
            .collect();
        v.push(all);
        v
    }
}

/// The lowest temporal layer a layer's rungs start at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lowest {
    /// Any: the track's lowest layer, a starved viewer's last resort before it loses
    /// packets.
    Any,
    /// Half the frame rate at least (one temporal layer dropped): a higher layer at a
    /// quarter of the frame rate looks worse than the layer below at full rate.
    HalfRate,
}

/// The layers of one source track.
#[derive(Debug, Clone, Default)]
pub struct SourceLayers {
    layers: Vec<SourceLayer>,
    window_start: Option<Instant>,
    /// The publisher negotiated simulcast for it (more than one rid): viewers choose among its
    /// streams. Otherwise its streams follow one another (an encoder restart's new SSRC).
    pub simulcast: bool,
}

impl SourceLayers {
    /// Counts one packet of `len` bytes of stream `ssrc` with RTP timestamp `ts`, the first
    /// of a keyframe where `keyframe_start` (a keyframe's bytes count at their long-run
    /// average, [`KEYFRAME_WINDOWS`]).
    pub fn on_media(
        &mut self,
        now: Instant,
        ssrc: u32,
        len: usize,
        ts: Option<u32>,
        keyframe_start: bool,
    ) {
        self.window_start.get_or_insert(now);
        if let Some(l) = self.layers.iter_mut().find(|l| l.ssrc == ssrc) {
            l.count(len, ts, keyframe_start);
            l.last_seen = now;
            return;
        }
        if self.layers.len() >= MAX_LAYERS {
            // Strays beyond the limit: forget the longest silent one.
            let Some(oldest) = (0..self.layers.len()).min_by_key(|&i| self.layers[i].last_seen)
            else {
                return;
            };
            self.layers.swap_remove(oldest);
        }
        let mut l = SourceLayer::measured(ssrc, 0, now);
        l.count(len, ts, keyframe_start);
        self.layers.push(l);
    }

    /// Counts `len` bytes of stream `ssrc` as layer (`spatial`, `temporal`)'s (a layered
    /// stream; after [`SourceLayers::on_media`] for the same packet, which says whether it
    /// is of a keyframe).
    pub fn on_layer(&mut self, ssrc: u32, spatial: u8, temporal: u8, len: usize) {
        let s = usize::from(spatial).min(MAX_SPATIAL - 1);
        let t = usize::from(temporal).min(MAX_TEMPORAL - 1);
        if let Some(l) = self.layers.iter_mut().find(|l| l.ssrc == ssrc) {
            if l.key_ts.is_some() {
                l.layer_key_bytes[s][t] += len as u64;
            } else {
                l.layer_bytes[s][t] += len as u64;
            }
            l.spatial_layers = l.spatial_layers.max(s as u8 + 1);
        }
    }

    /// Notes the picture size of spatial layer `spatial` of stream `ssrc`.
    pub fn set_spatial_size(&mut self, ssrc: u32, spatial: u8, size: (u16, u16)) {
        let s = usize::from(spatial).min(MAX_SPATIAL - 1);
        if let Some(l) = self.layers.iter_mut().find(|l| l.ssrc == ssrc) {
            l.spatial_size[s] = Some(size);
        }
    }

    /// Notes the picture size of stream `ssrc` (read from a keyframe of it).
    pub fn set_size(&mut self, ssrc: u32, size: (u16, u16)) {
        if let Some(l) = self.layers.iter_mut().find(|l| l.ssrc == ssrc) {
            l.size = Some(size);
        }
    }

    /// Closes the bitrate window if it is [`RATE_WINDOW`] old; returns whether it did.
    pub fn tick(&mut self, now: Instant) -> bool {
        let Some(start) = self.window_start else {
            return false;
        };
        let elapsed = now.saturating_duration_since(start);
        if elapsed < RATE_WINDOW {
            return false;
        }
        let secs = elapsed.as_secs_f64();
        for l in &mut self.layers {
            l.close_window(secs);
        }
        self.window_start = Some(now);
        true
    }

    /// When the window closes.
    pub fn next_tick(&self) -> Option<Instant> {
        self.window_start.map(|t| t + RATE_WINDOW)
    }

    /// How many streams the track carries (live or not).
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether it carried nothing yet.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Streams that sent something within [`LAYER_SILENCE`].
    pub fn live(&self, now: Instant) -> impl Iterator<Item = &SourceLayer> {
        self.layers
            .iter()
            .filter(move |l| now.saturating_duration_since(l.last_seen) < LAYER_SILENCE)
    }

    /// A stream by SSRC.
    pub fn get(&self, ssrc: u32) -> Option<&SourceLayer> {
        self.layers.iter().find(|l| l.ssrc == ssrc)
    }

    /// The live layers from the lowest to the highest, by what they carry (a layer not yet
    /// measured ranks last among equals: it just started, and layers start from the top).
    pub fn ranked(&self, now: Instant) -> Vec<SourceLayer> {
        let mut v: Vec<SourceLayer> = self.live(now).copied().collect();
        v.sort_by_key(|l| (l.peak_bps.max(l.bitrate_bps), l.ssrc));
        v
    }

    /// Whether a live layer has no settled rate yet (the first two [`RATE_WINDOW`]s of a
    /// stream on this node: a relay that just started, a layer that just came): layers
    /// cannot be ranked until each has. One window is not enough: the keyframe a new node
    /// asks for on arrival lands in it, and its temporal layers' shares (all base layer)
    /// would take a viewer that moved off the temporal layer it played.
    pub fn unranked(&self, now: Instant) -> bool {
        // Per stream, not per spatial layer: an SVC encoder may leave a spatial layer out
        // for as long as it likes (CPU, bandwidth), and that layer's rate stays 0.
        self.live(now)
            .any(|l| l.peak_bps.max(l.bitrate_bps) == 0 || l.windows < 2)
    }

    /// Every layer it has carried, live or paused, lowest first by the most it carried.
    pub fn known(&self) -> Vec<SourceLayer> {
        let mut v = self.layers.clone();
        v.sort_by_key(|l| (l.peak_bps.max(l.bitrate_bps), l.ssrc));
        v
    }

    /// A scalable stream's spatial layers as the allocator's layers, lowest first: `ssrc` is
    /// the spatial layer's index, the rate its own frames' (K-SVC forwards one spatial layer
    /// between key pictures), the size where the stream says it.
    pub fn spatial(&self, now: Instant) -> Vec<SourceLayer> {
        let Some(l) = self.live(now).max_by_key(|l| l.spatial_layers) else {
            return Vec::new();
        };
        (0..usize::from(l.spatial_layers))
            .map(|i| {
                let mut s = SourceLayer::measured(i as u32, l.spatial_bps(i), now);
                s.size = l.spatial_size[i];
                s.layer_bps[0] = l.layer_bps[i];
                s
            })
            .collect()
    }

    /// The allocator's ladder for this track, lowest first. Each layer — a simulcast stream
    /// (`simulcast`), a scalable stream's spatial layer (`scalable`), else the single stream —
    /// goes up through its temporal layers where it has them: the lowest layer from its lowest
    /// temporal layer, the layers above it from half the frame rate (after LiveKit's and
    /// mediasoup's selectors, which climb spatial layer by spatial layer, temporal layers
    /// within each).
    pub fn ladder(&self, now: Instant, scalable: bool) -> Vec<Rung> {
        let layers = if scalable {
            self.spatial(now)
        } else if self.simulcast {
            self.ranked(now)
        } else {
            self.ranked(now).into_iter().rev().take(1).collect()
        };
        layers
            .iter()
            .enumerate()
            .flat_map(|(k, l)| {
                let lowest = if k == 0 {
                    Lowest::Any
                } else {
                    Lowest::HalfRate
                };
                l.rungs(lowest)
            })
            .collect()
    }

    /// The live layer with the highest bitrate (what recordings and transcoders take).
    pub fn top(&self, now: Instant) -> Option<u32> {
        self.live(now)
            .max_by_key(|l| (l.peak_bps.max(l.bitrate_bps), l.ssrc))
            .map(|l| l.ssrc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_ranked_by_what_they_carry_and_paused_ones_drop_out() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = SourceLayers::default();
        // 100 ms of three layers at 100 k, 400 k and 1.2 Mbit/s (packets every 10 ms).
        for i in 0..50u64 {
            let now = t0 + ms(i * 10);
            s.on_media(now, 3, 1500, None, false);
            s.on_media(now, 1, 125, None, false);
            s.on_media(now, 2, 500, None, false);
        }
        assert!(s.tick(t0 + ms(500)));
        let ranked: Vec<(u32, u64)> = s
            .ranked(t0 + ms(500))
            .iter()
            .map(|l| (l.ssrc, l.bitrate_bps))
            .collect();
        assert_eq!(
            ranked,
            [(1, 100_000), (2, 400_000), (3, 1_200_000)],
            "low to high"
        );
        assert_eq!(s.top(t0 + ms(500)), Some(3));
        // The top layer pauses: after LAYER_SILENCE it is not offered.
        for i in 50..200u64 {
            let now = t0 + ms(i * 10);
            s.on_media(now, 1, 125, None, false);
            s.on_media(now, 2, 500, None, false);
        }
        let later = t0 + ms(2_000);
        assert_eq!(s.top(later), Some(2));
        assert_eq!(s.ranked(later).len(), 2);
        assert!(s.get(3).is_some(), "remembered for when it comes back");
    }

    #[test]
    fn a_keyframe_counts_at_its_average_over_several_seconds() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = SourceLayers::default();
        // 1 Mbit/s of delta frames (a 1250-byte packet every 10 ms, a frame every 30 ms), and
        // at 3 s one keyframe of 40 packets (400 kbit) as a viewer's switch asks for.
        let mut rates = Vec::new();
        for i in 0..600u64 {
            let now = t0 + ms(i * 10);
            let ts = (i / 3) as u32 * 2700;
            if i == 300 {
                for k in 0..40 {
                    s.on_media(now, 7, 1250, Some(ts + 1), k == 0);
                }
            }
            s.on_media(now, 7, 1250, Some(ts), false);
            if s.tick(now) {
                rates.push(s.get(7).map_or(0, |l| l.bitrate_bps));
            }
        }
        // The window with the keyframe would read 1.8 Mbit/s: the rate moves by 50 k.
        let max = *rates.iter().max().unwrap();
        assert!((1_000_000..1_060_000).contains(&max), "{rates:?}");
        // A keyframe every 500 ms (a GOP of 15 frames): after 20 s the rate has 92 % of its
        // keyframes (1.8 Mbit/s on average).
        let mut s = SourceLayers::default();
        for i in 0..2_000u64 {
            let now = t0 + ms(i * 10);
            let ts = (i / 3) as u32 * 2700;
            if i % 50 == 0 {
                for k in 0..40 {
                    s.on_media(now, 7, 1250, Some(ts + 1), k == 0);
                }
            }
            s.on_media(now, 7, 1250, Some(ts), false);
            s.tick(now);
        }
        let rate = s.get(7).map_or(0, |l| l.bitrate_bps);
        assert!((1_700_000..1_820_000).contains(&rate), "{rate}");
    }

    #[test]
    fn the_ladder_climbs_each_layer_through_its_temporal_layers() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = SourceLayers {
            simulcast: true,
            ..SourceLayers::default()
        };
        // Two simulcast streams with three temporal layers each (libwebrtc's pattern 0 2 1 2,
        // T0 frames four times the size of T2 ones), and a third without temporal layers.
        for i in 0..100u64 {
            let now = t0 + ms(i * 5);
            let tid = [0u8, 2, 1, 2][i as usize % 4];
            let size = [400, 100, 200, 100][i as usize % 4];
            for (ssrc, scale) in [(1u32, 1usize), (2, 3)] {
                s.on_media(now, ssrc, size * scale, None, false);
                s.on_layer(ssrc, 0, tid, size * scale);
            }
            s.on_media(now, 3, 5000, None, false);
        }
        assert!(s.tick(t0 + ms(500)));
        let ladder: Vec<(u32, Option<u8>, u64)> = s
            .ladder(t0 + ms(500), false)
            .iter()
            .map(|r| (r.layer, r.temporal, r.bitrate_bps / 1000))
            .collect();
        // Stream 1 (320 k): T0 400/800 of it, T1 600/800; stream 2 (960 k) from T1, as a
        // higher layer below half the frame rate is not offered; stream 3 as one rung.
        assert_eq!(
            ladder,
            [
                (1, Some(0), 160),
                (1, Some(1), 240),
                (1, None, 320),
                (2, Some(1), 720),
                (2, None, 960),
                (3, None, 8000),
            ]
        );
        let rungs = s.ladder(t0 + ms(500), false);
        assert_eq!(
            rung_of(&rungs, 2, Some(0)),
            Some(3),
            "below the lowest rung: that rung"
        );
        assert_eq!(rung_of(&rungs, 2, Some(2)), Some(4));
        assert_eq!(rung_of(&rungs, 1, None), Some(2));
        assert_eq!(rung_of(&rungs, 9, None), None);
    }

    #[test]
    fn strays_beyond_the_limit_replace_the_longest_silent() {
        let t0 = Instant::now();
        let mut s = SourceLayers::default();
        for ssrc in 0..MAX_LAYERS as u32 + 3 {
            s.on_media(
                t0 + Duration::from_millis(u64::from(ssrc)),
                ssrc,
                100,
                None,
                false,
            );
        }
        assert_eq!(s.len(), MAX_LAYERS);
        assert!(s.get(0).is_none() && s.get(MAX_LAYERS as u32 + 2).is_some());
    }
}
