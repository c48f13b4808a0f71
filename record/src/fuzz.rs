//! Fuzz target bodies: they compile with the crate (feature `fuzzing`, and in tests) so they
//! cannot rot.

// Fuzz bodies pick a start time.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use ferry_rtc::codec::Codec;

use crate::config::{RecorderConfig, TrackConfig};
use crate::output::{Event, Output};
use crate::recorder::Recorder;
use crate::segmenter::SegmentPolicy;

/// Fuzz target body: arbitrary RTP packets (headers built from control bytes that move the
/// sequence number and timestamp back and forth, arbitrary payloads, and raw garbage) into an
/// H.264 + Opus and a VP8 + Opus recorder, with hand-over and resume in the middle: nothing
/// panics and segments come out in order.
pub fn fuzz_recorder(data: &[u8]) {
    let start = Instant::now();
    for video in [Codec::H264, Codec::Vp8] {
        let config = RecorderConfig {
            segments: SegmentPolicy {
                min: Duration::from_millis(10),
                max: Duration::from_millis(50),
            },
            ..RecorderConfig::new(
                Some(TrackConfig::new(video, 96)),
                Some(TrackConfig::new(Codec::Opus, 111)),
                "fuzz",
            )
        };
        let Ok(mut rec) = Recorder::new(config.clone()) else {
            return;
        };
        let mut now = start;
        let mut rest = data;
        let (mut vseq, mut aseq) = (65_530u16, 0u16);
        let (mut vts, mut ats) = (u32::MAX - 9000, 0u32);
        let mut last = 0;
        let mut check = |o: Output| {
            if let Output::Event(Event::SegmentClosed { number, .. }) = o {
                assert!(number > last, "segment {number} after {last}");
                last = number;
            }
        };
        while let [ctl, len, tail @ ..] = rest {
            let len = usize::from(*len).min(tail.len());
            let (payload, after) = tail.split_at(len);
            rest = after;
            now += Duration::from_millis(u64::from(ctl >> 6) * 15);
            let packet = if ctl & 0x0f == 0x0f {
                payload.to_vec()
            } else {
                let audio = ctl & 1 == 1;
                let step = u16::from(ctl >> 1 & 3);
                let (pt, seq, ts) = if audio {
                    aseq = aseq.wrapping_add(step).wrapping_sub(1);
                    ats = ats.wrapping_add(u32::from(ctl >> 3 & 1) * 960);
                    (111u8, aseq, ats)
                } else {
                    vseq = vseq.wrapping_add(step).wrapping_sub(1);
                    vts = vts.wrapping_add(u32::from(ctl >> 3 & 1) * 3000);
                    (96u8, vseq, vts)
                };
                let marker = ctl & 0x20 != 0;
                let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
                p.extend_from_slice(&seq.to_be_bytes());
                p.extend_from_slice(&ts.to_be_bytes());
                p.extend_from_slice(&[0, 0, 0, if audio { 2 } else { 1 }]);
                p.extend_from_slice(payload);
                p
            };
            let _ = rec.handle_rtp(now, &packet);
            rec.handle_timeout(now);
            if *ctl == 0xff && !rec.is_stopped() {
                // Hand over here: export and resume.
                let state = rec.export(now);
                while let Some(o) = rec.poll_output() {
                    check(o);
                }
                match Recorder::resume(config.clone(), &state) {
                    Ok(r) => rec = r,
                    Err(e) => panic!("resume refused its own state: {e}"),
                }
            }
            while let Some(o) = rec.poll_output() {
                check(o);
            }
        }
        rec.finish(now);
        while let Some(o) = rec.poll_output() {
            check(o);
        }
    }
}

/// Everything the crate parses from the network: H.264 parameter sets and RTP through
/// depacketizing, the timeline and both muxers.
pub fn fuzz_record(data: &[u8]) {
    crate::h264::fuzz_h264(data);
    fuzz_recorder(data);
}

#[cfg(test)]
mod tests {
    ferry_testkit::replay_test!(
        "record",
        "ferry_record::fuzz::fuzz_record",
        super::fuzz_record
    );
}
