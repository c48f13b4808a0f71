//! The estimator as a whole: feedback handling, odd input, REMB viewers,
//! probing, snapshots, and runs on the simulated link.

use std::time::{Duration, Instant};

use ferry_proto::state::bwe::BweState;
use prost::Message;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::sim::{RunReport, Scenario, run};
use super::*;

const MS: Duration = Duration::from_millis(1);

/// Sends `bps` in 1000-byte packets from `from` for `dur` over a path with a
/// fixed 30 ms delay and unlimited capacity; the viewer reports every 50 ms.
/// Returns the next sequence number.
fn clean_path(
    bwe: &mut BandwidthEstimator,
    t0: Instant,
    from: Duration,
    dur: Duration,
    bps: u64,
    mut seq: u64,
) -> u64 {
    let every = Duration::from_nanos(1000 * 8 * 1_000_000_000 / bps);
    let mut pending = Vec::new();
    let mut t = from;
    let mut next_report = from + 50 * MS;
    while t < from + dur {
        bwe.on_sent(
            t0 + t,
            SentPacket {
                seq,
                size: 1000,
                probe: None,
            },
        );
        pending.push((seq, t));
        seq += 1;
        t += every;
        if t >= next_report {
            // Arrived 30 ms after sending; reported 30 ms later.
            let fb: Vec<PacketFeedback> = pending
                .iter()
                .map(|(s, sent)| PacketFeedback {
                    seq: *s,
                    arrival_us: Some(5_000_000 + (*sent + 30 * MS).as_micros() as i64),
                })
                .collect();
            pending.clear();
            bwe.handle_feedback(t0 + t + 60 * MS, &fb);
            bwe.handle_rtt(t0 + t + 60 * MS, 60 * MS);
            next_report += 50 * MS;
        }
    }
    seq
}

#[test]
fn a_clean_path_is_normal_and_acknowledged_at_the_sent_rate() {
    let t0 = Instant::now();
    let mut bwe = BandwidthEstimator::new(BweConfig::default());
    assert_eq!(bwe.estimate_bps(), 300_000);
    clean_path(
        &mut bwe,
        t0,
        Duration::ZERO,
        Duration::from_secs(3),
        800_000,
        0,
    );
    assert_eq!(bwe.congestion(), Congestion::Normal);
    let acked = bwe.acked_bps().unwrap();
    assert!((780_000..820_000).contains(&acked), "{acked}");
    // Nothing said where the path ends: the estimate is at least what was acknowledged, and
    // app-limited, not past 1.25 × acked.
    let e = bwe.estimate_bps();
    assert!(e >= acked && e <= 1_010_000 + 10_000, "{e}");
}

#[test]
fn a_start_below_what_flows_comes_up_to_it_at_the_first_acknowledged_rate() {
    let t0 = Instant::now();
    // 1 Mbit/s flows (a single stream cannot go lower) from a 300 kbit/s start: after the
    // acknowledged rate's first window, the estimate is there, not seconds of 8 %/s later.
    let mut fresh = BandwidthEstimator::new(BweConfig::default());
    clean_path(&mut fresh, t0, Duration::ZERO, 700 * MS, 1_000_000, 0);
    let e = fresh.estimate_bps();
    assert!(e >= 950_000, "{e}");
    // A probe counts its padding in the acknowledged rate: once one ran, no floor (the
    // estimate moves by the probe's result and AIMD).
    let limits = fresh.limits();
    assert!(fresh.prober.request(t0, 5_000_000, e, &limits));
    assert!(fresh.prober.next_id() > 1);
    // The floor moves with a migrated viewer; a snapshot without it (an older node's, or one
    // of an estimator an overuse settled) continues from the estimate it brought.
    let snap = BandwidthEstimator::new(BweConfig::default()).snapshot(t0);
    assert!(snap.acked_floor);
    let mut moved = BandwidthEstimator::restore(&snap, BweConfig::default(), t0);
    clean_path(&mut moved, t0, Duration::ZERO, 700 * MS, 1_000_000, 0);
    let e = moved.estimate_bps();
    assert!(e >= 950_000, "{e}");
    let older = BweState {
        acked_floor: false,
        ..snap
    };
    let mut moved = BandwidthEstimator::restore(&older, BweConfig::default(), t0);
    clean_path(&mut moved, t0, Duration::ZERO, 700 * MS, 1_000_000, 0);
    let e = moved.estimate_bps();
    assert!((300_000..400_000).contains(&e), "{e}");
}

#[test]
fn odd_input_never_panics_and_stays_bounded() {
    let t0 = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut bwe = BandwidthEstimator::new(BweConfig::default());
    let mut t = t0 + Duration::from_secs(100);
    for i in 0..60_000u64 {
        let r = rng.next_u64();
        // Time mostly forwards, sometimes backwards.
        t = if r % 17 == 0 {
            t.checked_sub(Duration::from_millis(r % 500)).unwrap_or(t)
        } else {
            t + Duration::from_micros(r % 3000)
        };
        let seq = match r % 7 {
            0 => r,
            1 => u64::MAX - (r % 3),
            _ => i,
        };
        let size = [0, 1, 1200, usize::MAX][(r >> 8) as usize % 4];
        bwe.on_sent(
            t,
            SentPacket {
                seq,
                size,
                probe: (r % 11 == 0).then_some((r >> 16) as u32),
            },
        );
        if i % 25 == 0 {
            let fb: Vec<PacketFeedback> = (0..30)
                .map(|k| {
                    let x = rng.next_u64();
                    PacketFeedback {
                        seq: if x % 5 == 0 { x } else { i.saturating_sub(k) },
                        arrival_us: match x % 6 {
                            0 => None,
                            1 => Some(x as i64),
                            2 => Some(i64::MIN),
                            _ => Some((i * 1000 + k) as i64),
                        },
                    }
                })
                .collect();
            bwe.handle_feedback(t, &fb);
        }
        match r % 97 {
            0 => bwe.handle_remb(t, r),
            1 => bwe.handle_loss_report(t, r as u8),
            2 => bwe.handle_rtt(t, Duration::from_micros(r % 100_000_000)),
            3 => {
                bwe.request_probe(t, r % 50_000_000);
            }
            _ => {}
        }
        while bwe.poll_probe(t).is_some() {}
        if bwe.poll_timeout().is_some_and(|d| d <= t) {
            bwe.handle_timeout(t);
        }
        let e = bwe.estimate_bps();
        assert!((30_000..=20_000_000).contains(&e), "{e}");
    }
    assert!(bwe.history.len() <= history::MAX_PACKETS);
    let s = bwe.snapshot(t);
    let restored = BandwidthEstimator::restore(&s, BweConfig::default(), t);
    assert_eq!(restored.estimate_bps(), s.estimate_bps);
}

#[test]
fn feedback_repeats_unknown_and_late_receipts() {
    let t0 = Instant::now();
    let mut bwe = BandwidthEstimator::new(BweConfig::default());
    for seq in 0..40 {
        bwe.on_sent(
            t0 + seq as u32 * 5 * MS,
            SentPacket {
                seq,
                size: 1000,
                probe: None,
            },
        );
    }
    let at = |s: u64| Some(1_000_000 + s as i64 * 5_000);
    // 0..20 reported, 10..15 lost, plus a sequence number never sent.
    let mut fb: Vec<PacketFeedback> = (0..20)
        .map(|s| PacketFeedback {
            seq: s,
            arrival_us: if (10..15).contains(&s) { None } else { at(s) },
        })
        .collect();
    fb.push(PacketFeedback {
        seq: 999,
        arrival_us: Some(0),
    });
    bwe.handle_feedback(t0 + 150 * MS, &fb);
    // The lost ones arrive after all, reported with 20..40 in reverse order;
    // 0..5 repeated.
    let mut fb: Vec<PacketFeedback> = (10..40)
        .rev()
        .map(|s| PacketFeedback {
            seq: s,
            arrival_us: at(s),
        })
        .collect();
    fb.extend((0..5).map(|s| PacketFeedback {
        seq: s,
        arrival_us: None,
    }));
    bwe.handle_feedback(t0 + 300 * MS, &fb);
    // 40 packets, none lost in the end: the 250 ms sample reads 0.
    assert_eq!(bwe.fraction_lost(), 0);
    assert_eq!(bwe.congestion(), Congestion::Normal);
}

#[test]
fn remb_drives_a_viewer_without_transport_cc() {
    let t0 = Instant::now();
    let mut bwe = BandwidthEstimator::new(BweConfig::default());
    bwe.handle_remb(t0, 800_000);
    assert_eq!(bwe.estimate_bps(), 800_000);
    // 25 % loss in a receiver report: 800 k × (1 − 0.125).
    bwe.handle_loss_report(t0 + 100 * MS, 64);
    assert_eq!(bwe.estimate_bps(), 700_000);
    assert_eq!(bwe.congestion(), Congestion::LossLimited);
    // Probing needs transport-wide feedback.
    assert!(!bwe.request_probe(t0 + 200 * MS, 2_000_000));
    // Clean reports lift the cap again (8 %/s) until REMB is the limit.
    for i in 1..=3 {
        bwe.handle_loss_report(t0 + 100 * MS + Duration::from_secs(i), 0);
    }
    assert_eq!(bwe.estimate_bps(), 800_000);
    assert_eq!(bwe.congestion(), Congestion::Normal);
    bwe.handle_remb(t0 + Duration::from_secs(4), 5_000);
    assert_eq!(bwe.estimate_bps(), 30_000);
}

#[test]
fn silence_from_the_viewer_cuts_the_estimate() {
    let t0 = Instant::now();
    let mut bwe = BandwidthEstimator::new(BweConfig::default());
    let seq = clean_path(
        &mut bwe,
        t0,
        Duration::ZERO,
        Duration::from_secs(2),
        300_000,
        0,
    );
    let before = bwe.estimate_bps();
    // Keep sending, no feedback for 3 s.
    let mut t = Duration::from_secs(2);
    for s in seq..seq + 300 {
        bwe.on_sent(
            t0 + t,
            SentPacket {
                seq: s,
                size: 1000,
                probe: None,
            },
        );
        if bwe.poll_timeout().is_some_and(|d| d <= t0 + t) {
            bwe.handle_timeout(t0 + t);
        }
        t += 10 * MS;
    }
    assert_eq!(bwe.congestion(), Congestion::LossLimited);
    assert!(
        bwe.estimate_bps() <= before * 64 / 100,
        "{} vs {before}",
        bwe.estimate_bps()
    );
}

#[test]
fn a_probe_on_a_fast_path_raises_the_estimate_to_the_target() {
    let t0 = Instant::now();
    let mut bwe = BandwidthEstimator::new(BweConfig::default());
    let mut seq = clean_path(
        &mut bwe,
        t0,
        Duration::ZERO,
        Duration::from_secs(2),
        250_000,
        0,
    );
    let start = bwe.estimate_bps();
    assert!(start < 400_000, "{start}");
    let mut t = t0 + Duration::from_secs(2);
    assert!(bwe.request_probe(t, 1_000_000));
    let mut sent = Vec::new();
    // Pace the padding at 1 ms resolution, deliver 30 ms later, report every 50 ms.
    let mut next_report = t + 50 * MS;
    let mut outcome = None;
    for _ in 0..3000 {
        while let Some(p) = bwe.poll_probe(t) {
            bwe.on_sent(
                t,
                SentPacket {
                    seq,
                    size: p.bytes,
                    probe: Some(p.cluster),
                },
            );
            sent.push((seq, t));
            seq += 1;
        }
        if bwe.poll_timeout().is_some_and(|d| d <= t) {
            bwe.handle_timeout(t);
        }
        if t >= next_report {
            let fb: Vec<PacketFeedback> = sent
                .drain(..)
                .map(|(s, at): (u64, Instant)| PacketFeedback {
                    seq: s,
                    arrival_us: Some((at + 30 * MS - t0).as_micros() as i64),
                })
                .collect();
            bwe.handle_feedback(t + 30 * MS, &fb);
            next_report += 50 * MS;
        }
        if let Some(o) = bwe.take_probe_outcome() {
            outcome = Some(o);
            break;
        }
        t += MS;
    }
    let o = outcome.unwrap();
    assert!(o.success, "{o:?}");
    assert!(bwe.estimate_bps() >= 1_000_000, "{}", bwe.estimate_bps());
    // Right after a success the next probe waits.
    assert!(!bwe.request_probe(t, 4_000_000));
}

#[test]
fn a_snapshot_round_trips_and_a_restored_estimator_continues() {
    let s = Scenario::step_down_up();
    let t0 = Instant::now();
    let mut bwe = BandwidthEstimator::new(BweConfig::default());
    let seq = clean_path(
        &mut bwe,
        t0,
        Duration::ZERO,
        Duration::from_secs(4),
        1_200_000,
        0,
    );
    bwe.handle_loss_report(t0, 0);
    let now = t0 + Duration::from_secs(4);
    let snap = bwe.snapshot(now);
    assert_eq!(
        BweState::decode(snap.encode_to_vec().as_slice()).unwrap(),
        snap
    );
    let later = now + Duration::from_secs(30);
    let restored = BandwidthEstimator::restore(&snap, s.bwe.clone(), later);
    assert_eq!(restored.snapshot(later), snap);
    assert_eq!(restored.estimate_bps(), bwe.estimate_bps());
    assert_eq!(restored.congestion(), bwe.congestion());
    // No slow start: the restored one continues where the old one was.
    let mut restored = restored;
    clean_path(
        &mut restored,
        later - Duration::from_secs(4),
        Duration::from_secs(4),
        Duration::from_secs(1),
        1_200_000,
        seq,
    );
    assert!(
        restored.estimate_bps() >= snap.estimate_bps,
        "{} < {}",
        restored.estimate_bps(),
        snap.estimate_bps
    );
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.1}", d.as_secs_f64()))
}

fn row(r: &RunReport) -> String {
    format!(
        "| {} | {} | {} | {:.0} % | {:.0} % | {:.2} % | {} | {:.1} | {:.0} / {:.0} / {:.0} | {} ({}, {}) |",
        r.name,
        ms(r.settle_after_drop),
        ms(r.climb_after_rise),
        r.utilisation * 100.0,
        r.delivered * 100.0,
        r.loss * 100.0,
        r.layer_switches,
        r.overshoot.as_secs_f64(),
        r.queue_ms_mean,
        r.queue_ms_p95,
        r.queue_ms_max,
        r.probe_clusters,
        r.probe_successes,
        r.probe_failures,
    )
}

fn secs(d: Option<Duration>) -> f64 {
    d.map_or(f64::INFINITY, |d| d.as_secs_f64())
}

/// Outcomes every run must show on the simulated link: an estimate that
/// finds most of the link and does not sit far above it.
fn assert_sane(r: &RunReport) {
    assert!(
        r.utilisation >= 0.85,
        "{}: utilisation {}",
        r.name,
        r.utilisation
    );
    assert!(
        r.overshoot <= Duration::from_secs(1),
        "{}: overshoot {:?}",
        r.name,
        r.overshoot
    );
    assert!(
        r.queue_ms_p95 <= 50.0,
        "{}: queue p95 {} ms",
        r.name,
        r.queue_ms_p95
    );
}

#[test]
fn capacity_step_down_and_up() {
    for seed in 1..=3 {
        let r = run(&Scenario::step_down_up().with_seed(seed));
        assert_sane(&r);
        // Below the new 500 kbit/s within 2 s of simulated time…
        assert!(secs(r.settle_after_drop) <= 2.0, "seed {seed}: {r:?}");
        // …and back on the top layer within 8 s of the return to 3 Mbit/s.
        assert!(secs(r.climb_after_rise) <= 8.0, "seed {seed}: {r:?}");
        assert!(r.delivered >= 0.9, "seed {seed}: delivered {}", r.delivered);
        // Start-up (3 up), the drop (down to the lowest), the rise (3 up), and no flapping.
        assert!(
            r.layer_switches <= 10,
            "seed {seed}: {} switches",
            r.layer_switches
        );
        assert!(r.loss <= 0.01, "seed {seed}: loss {}", r.loss);
    }
}

#[test]
fn a_deep_queue_stays_short() {
    let r = run(&Scenario::deep_queue());
    assert_sane(&r);
    assert!(secs(r.settle_after_drop) <= 2.0, "{r:?}");
    // The buffer holds 2 s at 1 Mbit/s: the delay signal, not loss, keeps it short.
    assert!(r.queue_ms_max <= 700.0, "max queue {} ms", r.queue_ms_max);
    assert_eq!(r.loss, 0.0);
    assert!(r.delivered >= 0.9, "delivered {}", r.delivered);
}

#[test]
fn two_percent_random_loss_is_not_congestion() {
    for seed in 1..=3 {
        let r = run(&Scenario::random_loss().with_seed(seed));
        assert_sane(&r);
        assert!(r.delivered >= 0.9, "seed {seed}: delivered {}", r.delivered);
        assert!(
            r.layer_switches <= 6,
            "seed {seed}: {} switches",
            r.layer_switches
        );
    }
}

#[test]
fn burst_loss_costs_little() {
    let r = run(&Scenario::burst_loss());
    assert_sane(&r);
    assert!(r.delivered >= 0.85, "delivered {}", r.delivered);
    assert!(r.layer_switches <= 6, "{} switches", r.layer_switches);
}

#[test]
fn cross_traffic_taking_half_the_link() {
    let r = run(&Scenario::cross_traffic());
    assert_sane(&r);
    assert!(secs(r.settle_after_drop) <= 2.0, "{r:?}");
    assert!(secs(r.climb_after_rise) <= 8.0, "{r:?}");
    assert!(r.delivered >= 0.9, "delivered {}", r.delivered);
    assert!(r.loss <= 0.001, "loss {}", r.loss);
}

#[test]
fn a_token_bucket_burst_is_not_taken_for_capacity() {
    for seed in 1..=3 {
        let s = Scenario::token_bucket().with_seed(seed);
        let r = run(&s);
        // Time on a layer above the one that fits: the freeze a viewer would see.
        let over = r
            .trace
            .iter()
            .filter(|p| p.layer > s.layer_for(p.available_bps))
            .count();
        assert!(
            over <= 5,
            "seed {seed}: {over} × 100 ms above the fitting layer: {r:?}"
        );
        assert!(
            r.overshoot <= Duration::from_secs(1),
            "seed {seed}: overshoot {:?}",
            r.overshoot
        );
        assert!(
            r.delivered >= 0.85,
            "seed {seed}: delivered {}",
            r.delivered
        );
        assert!(r.loss <= 0.01, "seed {seed}: loss {}", r.loss);
    }
}

#[test]
fn runs_are_deterministic() {
    let s = Scenario::burst_loss();
    assert_eq!(run(&s), run(&s));
    assert_ne!(run(&s).trace, run(&s.clone().with_seed(2)).trace);
}

/// The table in docs/bwe.md:
/// `cargo test -p ferry-rtc --lib bwe::tests::figures -- --nocapture`.
#[test]
fn figures() {
    println!(
        "| scenario | settle after drop (s) | climb after rise (s) | utilisation | delivered | loss | layer switches | overshoot > 1.3x (s) | queue mean / p95 / max (ms) | probe clusters (sessions ok, failed) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for s in Scenario::all() {
        println!("{}", row(&run(&s)));
    }
}
