//! Sharing one viewer's bandwidth estimate over its tracks: which layer of each track to
//! forward. Pure: the node calls [`allocate`] with the estimate, what each source offers and
//! the per-track state it keeps, and applies the targets it gets back.
//!
//! The rules (after mediasoup's `DistributeAvailableOutgoingBitrate` and LiveKit's stream
//! allocator, learnt from, not copied):
//! - audio is served first and always;
//! - a track's ladder ([`super::layers::SourceLayers::ladder`]) goes through its layers and,
//!   within each, its temporal layers; every video track gets its lowest rung (a viewer under
//!   a starved link still sees something), then the budget left is handed out one rung at a
//!   time, round-robin over the video tracks in priority order (screen share before camera),
//!   while a step fits;
//! - going down happens at once when the rungs played take more than the estimate and
//!   [`AllocConfig::down_tolerance`] (the estimate says the link cannot carry them); going up past
//!   the rung a track plays needs the step to fit with [`AllocConfig::up_headroom`] to spare,
//!   a [`AllocConfig::up_spare`] share of the estimate left unallocated after it (into another
//!   layer, [`AllocConfig::key_spare`] of that layer's rate, for its keyframe, if more), and,
//!   after the track went down, [`AllocConfig::up_hold`] of quiet — no flapping between two
//!   rungs when the estimate sits at the boundary; and one rung at a time: a track goes at
//!   most one rung above the one it plays per allocation;
//! - when a step up does not fit, the allocation says how much it would take
//!   ([`Allocation::wanted_bps`]) so the caller can probe for it before switching.

use std::time::{Duration, Instant};

use super::layers::{Rung, rung_of};

/// Allocation settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllocConfig {
    /// A step above the layer a track plays must fit this many times over (the switch brings a
    /// keyframe, and a rate measured over a second is an average).
    pub up_headroom: f64,
    /// A step above the layer a track plays must also leave this share of the whole estimate
    /// unallocated: a step that only just fits under a shaped link's estimate (the estimate
    /// drifts a few percent around the link rate) comes down again within a second, and each
    /// such failed climb holds the track longer (`docs/adaptation.md`, "Climbing back").
    pub up_spare: f64,
    /// A step up into another layer (a simulcast stream, a spatial layer) must leave this
    /// share of that layer's whole rate unallocated too: the switch starts with a keyframe
    /// (libwebrtc's are ~3 delta frames and more), whose burst queues at the bottleneck until
    /// the spare drains it, and a delay-based estimator reads a queue that takes a second
    /// to drain as overuse. A temporal step needs none.
    pub key_spare: f64,
    /// A track keeps the rung it plays while the allocation stays within this share above the
    /// estimate (Jitsi's allocator reallocates only on a 15 % change of the estimate): a
    /// delay-based estimator falls to 0.85 of the acknowledged rate on each overuse, so a rung
    /// that takes more than ~85 % of a link is dropped at every keyframe's queue while the
    /// link carries it. A link that really no longer carries it overuses again and the next
    /// decrease goes past this.
    pub down_tolerance: f64,
    /// After a track went down, how long before it may go up again.
    pub up_hold: Duration,
    /// A track that goes down within this of going up failed its climb: its next hold is
    /// twice the last, up to [`AllocConfig::max_hold`]; a down after a longer stay on the
    /// higher layer starts again from [`AllocConfig::up_hold`].
    pub failed_climb: Duration,
    /// The longest hold.
    pub max_hold: Duration,
}

impl Default for AllocConfig {
    fn default() -> Self {
        Self {
            up_headroom: 1.15,
            up_spare: 0.1,
            key_spare: 0.15,
            down_tolerance: 0.1,
            // mediasoup holds a downgraded layer 8-10 s; with probing to confirm the headroom,
            // a shorter first hold does not flap (see `docs/adaptation.md`), and a link where
            // climbs keep failing is left alone for longer each time.
            up_hold: Duration::from_secs(3),
            failed_climb: Duration::from_secs(10),
            // mediasoup's 8-10 s at most: a link that frees up is climbed within ~10 s still.
            max_hold: Duration::from_secs(8),
        }
    }
}

/// A viewer that arrives from another node (a migration, a resumed session) keeps its layers
/// this long before any climb: the new node measures its source's layers afresh and the path
/// to the viewer may differ, so the estimate it brought is a prior, not a measurement, and
/// no probe goes out for a climb meanwhile. Going down is not held.
pub const MOVE_HOLD: Duration = Duration::from_secs(5);

/// What one track of the viewer plays from, for the allocator.
#[derive(Debug, Clone, Copy)]
pub struct TrackInput<'a> {
    /// Video (else audio: always forwarded, served first).
    pub video: bool,
    /// Higher goes first (screen share above camera).
    pub priority: u8,
    /// The source's ladder, lowest first ([`super::layers::SourceLayers::ladder`]).
    pub layers: &'a [Rung],
    /// The layer and temporal layer (`None`: all) the viewer plays now, if any.
    pub current: Option<(u32, Option<u8>)>,
    /// The highest rung (index into `layers`) the viewer accepts (its cap), if any.
    pub max_layer: Option<usize>,
    /// The viewer paused this track: nothing is allocated to it.
    pub paused: bool,
}

/// The allocator's memory of one track (part of the viewer's snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackState {
    /// The layer (SSRC) to forward; `None`: not chosen yet (a single-stream source needs none).
    pub target: Option<u32>,
    /// The highest temporal layer of it to forward (`None`: all).
    pub temporal: Option<u8>,
    /// Until when the track may not go up (it went down lately, or just moved here).
    pub held_until: Option<Instant>,
    /// The length of the last hold after a down (zero before the first).
    pub hold: Duration,
    /// When it last went up a layer.
    pub up_at: Option<Instant>,
}

/// The outcome of one allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocation {
    /// Bits per second the chosen layers carry.
    pub allocated_bps: u64,
    /// Some track could play a higher layer if the estimate allowed: the total it would take
    /// (what to probe for), else `None`.
    pub wanted_bps: Option<u64>,
    /// What every track on its highest rung within the viewer's cap would take, with the
    /// room a climb leaves ([`AllocConfig::up_headroom`], [`AllocConfig::up_spare`],
    /// [`AllocConfig::key_spare`]); `None` where every track has it already or is held. The
    /// target of a viewer's first probe: one probe session finds where the path ends, not a
    /// rung at a time.
    pub top_bps: Option<u64>,
    /// Tracks whose target changed.
    pub switches: Vec<Switch>,
}

/// A track's new target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    /// The track's index.
    pub track: usize,
    /// The layer to play (SSRC, or a scalable stream's spatial layer).
    pub layer: u32,
    /// Up to this temporal layer (`None`: all).
    pub temporal: Option<u8>,
    /// Up the ladder (else down).
    pub up: bool,
    /// Another layer than the one targeted before (a temporal change alone is not).
    pub new_layer: bool,
}

/// What one viewer may be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The bandwidth estimate (bit/s): its dips are met with
    /// [`AllocConfig::down_tolerance`].
    pub estimate_bps: u64,
    /// A limit the viewer set itself (its `maxBitrate`): never crossed, the tolerance included.
    pub limit_bps: Option<u64>,
}

impl Budget {
    /// What is shared out: the estimate within the limit.
    pub fn bps(&self) -> u64 {
        self.limit_bps
            .map_or(self.estimate_bps, |l| self.estimate_bps.min(l))
    }

    /// How far above [`Budget::bps`] the rungs tracks play may stay: the tolerance of the
    /// estimate, up to the limit.
    fn tolerance_bps(&self, cfg: &AllocConfig) -> i64 {
        let bps = self.bps();
        let t = (bps as f64 * cfg.down_tolerance.max(0.0)) as u64;
        self.limit_bps
            .map_or(t, |l| t.min(l.saturating_sub(bps)))
            .min(i64::MAX as u64) as i64
    }
}

/// An estimate without a limit.
impl From<u64> for Budget {
    fn from(estimate_bps: u64) -> Self {
        Self {
            estimate_bps,
            limit_bps: None,
        }
    }
}

/// Shares `budget` over `tracks`, updating `states` (one per track, same order).
pub fn allocate(
    now: Instant,
    budget: impl Into<Budget>,
    tracks: &[TrackInput<'_>],
    states: &mut [TrackState],
    cfg: &AllocConfig,
) -> Allocation {
    let limits: Budget = budget.into();
    let estimate_bps = limits.bps();
    let tolerance = limits.tolerance_bps(cfg);
    let mut out = Allocation::default();
    let mut budget = estimate_bps as i64;
    // Audio first: whatever it carries.
    for t in tracks.iter().filter(|t| !t.video && !t.paused) {
        let rate = t.layers.iter().map(|l| l.bitrate_bps).max().unwrap_or(0);
        budget -= rate as i64;
        out.allocated_bps += rate;
    }
    // Video in priority order, then in track order.
    let mut order: Vec<usize> = (0..tracks.len())
        .filter(|&i| tracks[i].video && !tracks[i].paused && !tracks[i].layers.is_empty())
        .collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(tracks[i].priority), i));
    let top = |t: &TrackInput<'_>| match t.max_layer {
        Some(m) => m.min(t.layers.len() - 1),
        None => t.layers.len() - 1,
    };
    let current_level = |t: &TrackInput<'_>| t.current.and_then(|(l, tl)| rung_of(t.layers, l, tl));
    let mut level: Vec<usize> = vec![0; tracks.len()];
    // The rung each track was last given (its switch may still wait for a keyframe).
    let targeted: Vec<Option<usize>> = (0..tracks.len())
        .map(|i| {
            let s = states.get(i)?;
            rung_of(tracks[i].layers, s.target?, s.temporal)
        })
        .collect();
    for &i in &order {
        budget -= tracks[i].layers[0].bitrate_bps as i64;
    }
    // One step at a time, round-robin, while a step fits.
    let mut wanted: Option<u64> = None;
    loop {
        let mut stepped = false;
        for &i in &order {
            let t = &tracks[i];
            let next = level[i] + 1;
            if next > top(t) {
                continue;
            }
            let delta = t.layers[next]
                .bitrate_bps
                .saturating_sub(t.layers[level[i]].bitrate_bps) as i64;
            let current = current_level(t);
            let above_current = current.is_none_or(|c| next > c);
            // Up one layer past the one it plays per allocation: the next allocation (with the
            // estimate that layer's traffic produced) decides the step after. A rung already
            // targeted stays reachable: while a switch waits for its keyframe the track still
            // plays the old layer, and pulling the target back would count as a step down.
            if current.is_some_and(|c| next > c + 1) && targeted[i].is_none_or(|g| next > g) {
                continue;
            }
            let (need, held) = if above_current {
                let held = states
                    .get(i)
                    .and_then(|s| s.held_until)
                    .is_some_and(|h| now < h);
                ((delta as f64 * cfg.up_headroom) as i64, held)
            } else {
                (delta, false)
            };
            // Above the layer it plays, the step must also leave `up_spare` of the estimate,
            // and a step into another layer room for the keyframe it starts with.
            let into = t.layers[next];
            let key = if into.layer != t.layers[level[i]].layer {
                (into.layer_bps as f64 * cfg.key_spare) as i64
            } else {
                0
            };
            let spare = if above_current {
                ((estimate_bps as f64 * cfg.up_spare) as i64).max(key)
            } else {
                0
            };
            // Up to the rung it plays, the step may take the tolerance.
            let keep = if above_current { 0 } else { tolerance };
            let room = budget + keep;
            if need <= room && room - delta >= spare && !held {
                budget -= delta;
                level[i] = next;
                stepped = true;
            } else if wanted.is_none() && !held {
                // The first step that did not fit, in priority order: what a probe must find.
                // The estimate at which both the headroom and the spare hold.
                let used = estimate_bps as i64 - budget;
                let with_spare = ((used + delta) as f64 / (1.0 - cfg.up_spare.min(0.9))) as i64;
                let with_key = used + delta + key;
                wanted = Some((used + need).max(with_spare).max(with_key).max(0) as u64);
            }
        }
        if !stepped {
            break;
        }
    }
    out.top_bps = top_bps(
        now,
        estimate_bps as i64 - budget,
        tracks,
        states,
        &order,
        &level,
        cfg,
    );
    for &i in &order {
        let t = &tracks[i];
        let chosen = t.layers[level[i]];
        out.allocated_bps += chosen.bitrate_bps;
        let Some(state) = states.get_mut(i) else {
            continue;
        };
        if state.target == Some(chosen.layer) && state.temporal == chosen.temporal {
            continue;
        }
        let was = state
            .target
            .and_then(|s| rung_of(t.layers, s, state.temporal))
            .or_else(|| current_level(t));
        let up = was.is_none_or(|w| level[i] > w);
        if up {
            state.up_at = Some(now);
        } else if was.is_some_and(|w| level[i] < w) {
            // A climb that failed soon holds longer each time: a link on the edge of a
            // layer is not made to freeze every few seconds.
            let failed = state
                .up_at
                .is_some_and(|t| now.saturating_duration_since(t) < cfg.failed_climb);
            state.hold = if failed && !state.hold.is_zero() {
                (state.hold * 2).min(cfg.max_hold)
            } else {
                cfg.up_hold
            };
            state.held_until = Some(now + state.hold);
        }
        let new_layer = state.target != Some(chosen.layer);
        state.target = Some(chosen.layer);
        state.temporal = chosen.temporal;
        out.switches.push(Switch {
            track: i,
            layer: chosen.layer,
            temporal: chosen.temporal,
            up,
            new_layer,
        });
    }
    out.wanted_bps = wanted;
    out
}

/// [`Allocation::top_bps`]: from `used` (what the allocation gives), every video track that
/// is not held goes from its rung (`level`) to its highest admissible one.
fn top_bps(
    now: Instant,
    used: i64,
    tracks: &[TrackInput<'_>],
    states: &[TrackState],
    order: &[usize],
    level: &[usize],
    cfg: &AllocConfig,
) -> Option<u64> {
    let (mut more, mut key) = (0u64, 0u64);
    for &i in order {
        let t = &tracks[i];
        let held = states
            .get(i)
            .and_then(|s| s.held_until)
            .is_some_and(|h| now < h);
        let hi = t
            .max_layer
            .map_or(t.layers.len() - 1, |m| m.min(t.layers.len() - 1));
        if held || hi <= level[i] {
            continue;
        }
        let (from, to) = (t.layers[level[i]], t.layers[hi]);
        more += to.bitrate_bps.saturating_sub(from.bitrate_bps);
        if to.layer != from.layer {
            key = key.max((to.layer_bps as f64 * cfg.key_spare) as u64);
        }
    }
    if more == 0 {
        return None;
    }
    let used = used.max(0) as f64;
    let total = used + more as f64;
    let with_headroom = used + more as f64 * cfg.up_headroom;
    let with_spare = total / (1.0 - cfg.up_spare.min(0.9));
    Some(with_headroom.max(with_spare).max(total + key as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(ssrc: u32, bps: u64) -> Rung {
        Rung {
            layer: ssrc,
            temporal: None,
            bitrate_bps: bps,
            layer_bps: bps,
            size: None,
        }
    }

    fn video<'a>(layers: &'a [Rung], current: Option<u32>) -> TrackInput<'a> {
        TrackInput {
            video: true,
            priority: 0,
            layers,
            current: current.map(|c| (c, None)),
            max_layer: None,
            paused: false,
        }
    }

    /// The rules besides the keyframe's room (its own test below).
    fn without_key_spare() -> AllocConfig {
        AllocConfig {
            key_spare: 0.0,
            ..AllocConfig::default()
        }
    }

    #[test]
    fn a_step_into_another_layer_leaves_room_for_its_keyframe() {
        let now = Instant::now();
        let rung = |layer: u32, temporal: Option<u8>, bps: u64, layer_bps: u64| Rung {
            layer,
            temporal,
            bitrate_bps: bps,
            layer_bps,
            size: None,
        };
        // h at 550 k; f at 1.65 M with two temporal layers of three, 2.75 M with all.
        let cam = [
            rung(1, None, 550_000, 550_000),
            rung(2, Some(1), 1_650_000, 2_750_000),
            rung(2, None, 2_750_000, 2_750_000),
        ];
        let cfg = AllocConfig {
            key_spare: 0.2,
            ..AllocConfig::default()
        };
        let mut st = [TrackState {
            target: Some(1),
            ..TrackState::default()
        }];
        // 2.1 M: the step (1.1 M × 1.15) fits the 1.55 M left and leaves a tenth of the
        // estimate, but not a fifth of f's 2.75 M (550 k) for the keyframe: no climb, and a
        // probe for 1.65 M + 550 k.
        let a = allocate(now, 2_100_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(1));
        assert_eq!(a.wanted_bps, Some(2_200_000));
        allocate(now, 2_200_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!((st[0].target, st[0].temporal), (Some(2), Some(1)));
        // Within the layer, a temporal step needs only the tenth: 1.1 M × 1.15 + 1.65 M.
        let mut t = video(&cam, Some(2));
        t.current = Some((2, Some(1)));
        let later = now + cfg.max_hold;
        allocate(later, 3_000_000, &[t], &mut st, &cfg);
        assert_eq!(
            st[0].temporal,
            Some(1),
            "1.1 M × 1.15 does not fit the 1.35 M left"
        );
        allocate(later, 3_100_000, &[t], &mut st, &cfg);
        assert_eq!((st[0].target, st[0].temporal), (Some(2), None));
    }

    fn moves(a: &Allocation) -> Vec<(usize, u32, bool)> {
        a.switches
            .iter()
            .map(|s| (s.track, s.layer, s.up))
            .collect()
    }

    #[test]
    fn audio_first_then_the_highest_layer_that_fits() {
        let now = Instant::now();
        let audio = [layer(9, 40_000)];
        let cam = [layer(1, 150_000), layer(2, 500_000), layer(3, 1_500_000)];
        let tracks = [
            TrackInput {
                video: false,
                ..video(&audio, Some(9))
            },
            video(&cam, None),
        ];
        let cfg = without_key_spare();
        let mut st = [TrackState::default(); 2];
        // 700 k: audio 40 k + the middle layer (500 k); the top would need 1.5 M.
        let a = allocate(now, 700_000, &tracks, &mut st, &cfg);
        assert_eq!(st[1].target, Some(2));
        assert_eq!(a.allocated_bps, 540_000);
        assert_eq!(moves(&a), [(1, 2, true)]);
        // What a probe must find for the top layer: 1.54 M with a tenth of the estimate spare
        // (above the 540 k + 1 M × 1.15 the headroom alone asks).
        assert_eq!(
            a.wanted_bps,
            Some((1_540_000.0 / (1.0 - cfg.up_spare)) as u64),
        );
        // Under the lowest layer's rate the lowest still goes.
        let a = allocate(now, 100_000, &tracks, &mut st, &cfg);
        assert_eq!(st[1].target, Some(1));
        assert_eq!(moves(&a), [(1, 1, false)]);
        assert_eq!(st[1].held_until, Some(now + cfg.up_hold));
    }

    #[test]
    fn temporal_rungs_are_steps_like_layers_and_need_no_new_layer() {
        let now = Instant::now();
        let rung = |layer: u32, temporal: Option<u8>, bps: u64| Rung {
            layer,
            temporal,
            bitrate_bps: bps,
            layer_bps: if layer == 1 { 150_000 } else { 500_000 },
            size: None,
        };
        let cam = [
            rung(1, Some(0), 60_000),
            rung(1, Some(1), 90_000),
            rung(1, None, 150_000),
            rung(2, Some(1), 300_000),
            rung(2, None, 500_000),
        ];
        let cfg = without_key_spare();
        let mut st = [TrackState {
            target: Some(2),
            ..TrackState::default()
        }];
        // 400 k: the top layer at half its frame rate (300 k) stays, without the 500 k of all
        // of it; a temporal step down, not a new layer.
        let mut t = video(&cam, None);
        t.current = Some((2, None));
        let a = allocate(now, 400_000, &[t], &mut st, &cfg);
        assert_eq!((st[0].target, st[0].temporal), (Some(2), Some(1)));
        assert_eq!(a.switches.len(), 1);
        assert!(!a.switches[0].up && !a.switches[0].new_layer);
        // 80 k: the lowest layer's base temporal layer, a new layer.
        t.current = Some((2, Some(1)));
        let a = allocate(now, 80_000, &[t], &mut st, &cfg);
        assert_eq!((st[0].target, st[0].temporal), (Some(1), Some(0)));
        assert!(a.switches[0].new_layer);
        // Up one rung per allocation, from what it plays.
        let later = now + cfg.max_hold;
        t.current = Some((1, Some(0)));
        allocate(later, 10_000_000, &[t], &mut st, &cfg);
        assert_eq!((st[0].target, st[0].temporal), (Some(1), Some(1)));
    }

    #[test]
    fn the_top_is_every_track_on_its_highest_admissible_rung_with_a_climbs_room() {
        let t0 = Instant::now();
        let cam = [layer(1, 150_000), layer(2, 500_000), layer(3, 2_500_000)];
        let mic = [layer(9, 50_000)];
        let cfg = AllocConfig {
            key_spare: 0.2,
            ..AllocConfig::default()
        };
        let audio = TrackInput {
            video: false,
            ..video(&mic, None)
        };
        // From q under a 300 kbit/s start: audio and f (2.55 M), with the keyframe's room
        // (a fifth of f) the largest of the three rooms.
        let mut st = [TrackState::default(); 2];
        let a = allocate(t0, 300_000, &[audio, video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(st[1].target, Some(1));
        assert_eq!(a.top_bps, Some(3_050_000));
        // The first step's probe target stays what it was: h, not the top.
        assert!(
            a.wanted_bps.is_some_and(|w| w < 1_000_000),
            "{:?}",
            a.wanted_bps
        );
        // A cap at h: the top is h.
        let mut capped = video(&cam, Some(1));
        capped.max_layer = Some(1);
        let mut st = [TrackState::default(); 2];
        let a = allocate(t0, 300_000, &[audio, capped], &mut st, &cfg);
        assert_eq!(a.top_bps, Some(650_000));
        // A track on its top, or held (it just moved here, it just went down): none.
        let mut st = [TrackState::default(); 2];
        let a = allocate(t0, 5_000_000, &[audio, video(&cam, Some(3))], &mut st, &cfg);
        assert_eq!((st[1].target, a.top_bps), (Some(3), None));
        let mut st = [
            TrackState::default(),
            TrackState {
                held_until: Some(t0 + MOVE_HOLD),
                ..TrackState::default()
            },
        ];
        let a = allocate(t0, 300_000, &[audio, video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(a.top_bps, None);
    }

    #[test]
    fn a_first_choice_of_the_layer_a_track_plays_is_no_step_down() {
        // A viewer that starts on a low estimate while its track shows the lowest layer (every
        // temporal layer of it): the first allocation chooses that layer, which holds nothing,
        // and the next allocation with more room climbs at once.
        let t0 = Instant::now();
        let cam = [layer(1, 150_000), layer(2, 500_000)];
        let cfg = without_key_spare();
        let mut st = [TrackState::default()];
        let mut t = video(&cam, None);
        t.current = Some((1, Some(2)));
        allocate(t0, 300_000, &[t], &mut st, &cfg);
        assert_eq!(st[0].target, Some(1));
        assert_eq!(st[0].held_until, None);
        let t1 = t0 + Duration::from_millis(200);
        allocate(t1, 1_000_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(2));
    }

    #[test]
    fn a_switch_waiting_for_its_keyframe_keeps_its_target() {
        // q0 q h: the track plays q0 (its temporal target applied to the old layer while h's
        // keyframe is awaited) with h targeted; the estimate still carries h: no pull back to
        // the rung above q0 and no hold.
        let t0 = Instant::now();
        let rung = |layer: u32, temporal: Option<u8>, bps: u64| Rung {
            layer,
            temporal,
            bitrate_bps: bps,
            layer_bps: bps,
            size: None,
        };
        let cam = [
            rung(1, Some(0), 80_000),
            rung(1, None, 150_000),
            rung(2, None, 500_000),
        ];
        let cfg = without_key_spare();
        let mut st = [TrackState {
            target: Some(2),
            up_at: Some(t0),
            ..TrackState::default()
        }];
        let mut t = video(&cam, None);
        t.current = Some((1, Some(0)));
        let a = allocate(
            t0 + Duration::from_millis(100),
            1_200_000,
            &[t],
            &mut st,
            &cfg,
        );
        assert!(a.switches.is_empty(), "{a:?}");
        assert_eq!((st[0].target, st[0].held_until), (Some(2), None));
    }

    #[test]
    fn going_up_waits_for_headroom_and_the_hold_after_going_down() {
        let t0 = Instant::now();
        let cam = [layer(1, 150_000), layer(2, 500_000)];
        let cfg = without_key_spare();
        let mut st = [TrackState::default()];
        allocate(t0, 1_000_000, &[video(&cam, None)], &mut st, &cfg);
        assert_eq!(st[0].target, Some(2));
        // Down at once.
        allocate(t0, 400_000, &[video(&cam, Some(2))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(1));
        // Back up: it fits, but the hold is on.
        let t1 = t0 + Duration::from_secs(1);
        let a = allocate(t1, 1_000_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(1));
        assert!(a.switches.is_empty());
        // Hold over, but the step needs headroom: 150 k + 350 k × 1.15 = 552.5 k.
        let t2 = t0 + cfg.up_hold;
        allocate(t2, 540_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(1));
        allocate(t2, 560_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(2));
        // Staying on the layer it plays needs no headroom.
        allocate(t2, 500_000, &[video(&cam, Some(2))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(2));
    }

    /// q and h (150 k, 500 k), 56 k of audio, and the states of a viewer on h.
    fn h_with_audio() -> ([Rung; 2], [Rung; 1], [TrackState; 2]) {
        let on_h = TrackState {
            target: Some(2),
            ..TrackState::default()
        };
        (
            [layer(1, 150_000), layer(2, 500_000)],
            [layer(9, 56_000)],
            [TrackState::default(), on_h],
        )
    }

    #[test]
    fn a_track_keeps_its_rung_while_the_estimate_is_within_the_tolerance_below_it() {
        // A 689 kbit/s link plays h (500 k + 56 k audio); an overuse brings the estimate to
        // 0.85 of what was acknowledged.
        let t0 = Instant::now();
        let (cam, mic, mut st) = h_with_audio();
        let audio = TrackInput {
            video: false,
            ..video(&mic, Some(9))
        };
        let cfg = without_key_spare();
        // 556 k over 510 k: within a tenth above the estimate, the rung stays.
        let a = allocate(t0, 510_000, &[audio, video(&cam, Some(2))], &mut st, &cfg);
        assert!(a.switches.is_empty(), "{a:?}");
        assert_eq!(a.allocated_bps, 556_000);
        assert_eq!((st[1].target, st[1].held_until), (Some(2), None));
        // The link overuses again: past the tolerance, down at once and held.
        let a = allocate(t0, 500_000, &[audio, video(&cam, Some(2))], &mut st, &cfg);
        assert_eq!(st[1].target, Some(1), "{a:?}");
        assert!(st[1].held_until.is_some());
        // The tolerance keeps a rung; it climbs to none: back on 150 k, an estimate of 540 k
        // (within a tenth of h's 556 k) does not take it up after the hold.
        let t1 = t0 + cfg.max_hold;
        let a = allocate(t1, 540_000, &[audio, video(&cam, Some(1))], &mut st, &cfg);
        assert!(a.switches.is_empty(), "{a:?}");
        assert_eq!(st[1].target, Some(1));
    }

    #[test]
    fn a_viewers_own_bitrate_limit_is_not_crossed_by_the_tolerance() {
        // h with audio is 556 k; the viewer plays it.
        let t0 = Instant::now();
        let (cam, mic, _) = h_with_audio();
        let audio = TrackInput {
            video: false,
            ..video(&mic, Some(9))
        };
        let cfg = without_key_spare();
        let playing_h = || h_with_audio().2;
        let tracks = [audio, video(&cam, Some(2))];
        // A limit of 530 k: the estimate (2 M) does not matter, 556 k is past the limit.
        let mut st = playing_h();
        let capped = Budget {
            estimate_bps: 2_000_000,
            limit_bps: Some(530_000),
        };
        assert_eq!(capped.bps(), 530_000);
        let a = allocate(t0, capped, &tracks, &mut st, &cfg);
        assert_eq!((st[1].target, a.allocated_bps), (Some(1), 206_000), "{a:?}");
        // A limit above the estimate: the tolerance reaches up to the limit and no further.
        // An estimate of 510 k keeps h (556 k) under a limit of 560 k, not under one of 550 k.
        let mut st = playing_h();
        let under = |limit| Budget {
            estimate_bps: 510_000,
            limit_bps: Some(limit),
        };
        let a = allocate(t0, under(560_000), &tracks, &mut st, &cfg);
        assert!(a.switches.is_empty(), "{a:?}");
        let a = allocate(t0, under(550_000), &tracks, &mut st, &cfg);
        assert_eq!(st[1].target, Some(1), "{a:?}");
        // Without a limit the tolerance alone decides (as `510_000` alone).
        let mut st = playing_h();
        let a = allocate(t0, Budget::from(510_000), &tracks, &mut st, &cfg);
        assert!(a.switches.is_empty(), "{a:?}");
    }

    #[test]
    fn a_step_up_leaves_a_share_of_the_estimate_spare() {
        // The VP9 layers of a shaped 400 kbit/s viewer: 150 k, 300 k, 1 M.
        let t0 = Instant::now();
        let cam = [layer(1, 150_000), layer(2, 300_000), layer(3, 1_000_000)];
        let cfg = without_key_spare();
        let mut st = [TrackState {
            target: Some(1),
            ..TrackState::default()
        }];
        // 330 k: the step (150 k × 1.15 = 172.5 k) fits the 180 k left after the lowest, but
        // would leave 30 k, under a tenth of the estimate: no climb, and a probe for the
        // estimate at which the step leaves a tenth spare.
        let a = allocate(t0, 330_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(1));
        assert!(a.switches.is_empty());
        let want = (300_000.0 / (1.0 - cfg.up_spare)) as u64;
        assert_eq!(a.wanted_bps, Some(want));
        assert!(want > 330_000, "a probe asks for more than the estimate");
        // At that estimate it climbs.
        allocate(t0, want + 1, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(2));
        // Staying on the layer it plays needs no spare: 310 k keeps the 300 k layer.
        let a = allocate(t0, 310_000, &[video(&cam, Some(2))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(2));
        assert!(a.switches.is_empty());
    }

    #[test]
    fn climbs_that_fail_soon_hold_longer_each_time_and_a_held_track_asks_for_no_probe() {
        let t0 = Instant::now();
        let cam = [layer(1, 150_000), layer(2, 500_000)];
        let cfg = without_key_spare();
        let mut st = [TrackState::default()];
        let s = Duration::from_secs;
        // Each time: up, then down 1 s later (the link could not carry it).
        let mut t = t0;
        for hold in [3, 6, 8, 8] {
            allocate(t, 1_000_000, &[video(&cam, Some(1))], &mut st, &cfg);
            assert_eq!(st[0].target, Some(2), "up at {:?}", t - t0);
            t += s(1);
            allocate(t, 400_000, &[video(&cam, Some(2))], &mut st, &cfg);
            assert_eq!(st[0].target, Some(1));
            assert_eq!(st[0].held_until, Some(t + s(hold)));
            // While held: no climb, and no probe asked for (nothing it could switch to).
            let a = allocate(t + s(1), 1_000_000, &[video(&cam, Some(1))], &mut st, &cfg);
            assert_eq!(st[0].target, Some(1));
            assert_eq!(a.wanted_bps, None);
            t += s(hold);
        }
        // A climb that held for longer than `failed_climb` starts the holds over.
        allocate(t, 1_000_000, &[video(&cam, Some(1))], &mut st, &cfg);
        t += cfg.failed_climb + s(1);
        allocate(t, 400_000, &[video(&cam, Some(2))], &mut st, &cfg);
        assert_eq!(st[0].held_until, Some(t + cfg.up_hold));
    }

    #[test]
    fn a_track_that_just_moved_neither_climbs_nor_asks_for_a_probe() {
        let t0 = Instant::now();
        let cam = [layer(1, 150_000), layer(2, 500_000)];
        let cfg = without_key_spare();
        let mut st = [TrackState {
            target: Some(1),
            held_until: Some(t0 + MOVE_HOLD),
            ..TrackState::default()
        }];
        let a = allocate(t0, 400_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!((st[0].target, a.wanted_bps), (Some(1), None));
        // After the hold: the step is wanted (a probe towards it), and taken when it fits.
        let t1 = t0 + MOVE_HOLD;
        let a = allocate(t1, 400_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert!(a.wanted_bps.is_some());
        allocate(t1, 1_000_000, &[video(&cam, Some(1))], &mut st, &cfg);
        assert_eq!(st[0].target, Some(2));
    }

    #[test]
    fn the_budget_goes_round_robin_by_priority_and_caps_hold() {
        let now = Instant::now();
        let screen = [layer(11, 200_000), layer(12, 800_000)];
        let cam = [layer(1, 150_000), layer(2, 500_000)];
        let mut screen_t = video(&screen, None);
        screen_t.priority = 1;
        // Steps that fit exactly, to show the order.
        let cfg = AllocConfig {
            up_headroom: 1.0,
            up_spare: 0.0,
            key_spare: 0.0,
            ..AllocConfig::default()
        };
        let mut st = [TrackState::default(); 2];
        // 1.1 M: both lowest (350 k), then the screen's step (600 k) first: 950 k; the camera's
        // step (350 k) does not fit any more.
        let a = allocate(
            now,
            1_100_000,
            &[video(&cam, None), screen_t],
            &mut st,
            &cfg,
        );
        assert_eq!((st[0].target, st[1].target), (Some(1), Some(12)));
        assert_eq!(a.wanted_bps, Some(950_000 + 350_000));
        // A cap at the lowest layer leaves the camera there whatever the estimate.
        let mut capped = video(&cam, Some(1));
        capped.max_layer = Some(0);
        let mut st = [TrackState::default()];
        let a = allocate(now, 10_000_000, &[capped], &mut st, &cfg);
        assert_eq!(st[0].target, Some(1));
        assert_eq!(a.wanted_bps, None, "nothing more to want");
    }
}
