//! Per-packet cost of the forwarding path's rewrite: the munger decision
//! alone, and the full outgoing-track forward (copy + header rewrite +
//! extension-id remap + VP8 picture-id rewrite).

// Tests and benches drive the cores with the real clock (clippy.toml forbids it in the cores).
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferry_sfu::codec::Codec;
use ferry_sfu::media::egress::OutgoingTrack;
use ferry_sfu::media::line::MediaLine;
use ferry_sfu::media::munger::{Munger, SourcePacket};

fn line() -> MediaLine {
    MediaLine {
        mid: "1".into(),
        video: true,
        accepted: true,
        codec: Codec::Vp8,
        pt: 96,
        rtx_pt: Some(97),
        fmtp: String::new(),
        nack: true,
        pli: true,
        fir: true,
        remb: false,
        twcc: false,
        extmap: vec![(
            2,
            "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time".into(),
        )],
        remote_ssrcs: vec![],
        rids: vec![],
        local_ssrc: 0xabcd,
        local_rtx_ssrc: Some(0xabce),
        source: Some(1),
        rejected: None,
    }
}

/// A VP8 packet with a one-byte header extension (abs-send-time, id 3).
fn packet(seq: u16, ts: u32) -> Vec<u8> {
    let mut p = vec![0x90, 96];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&0x1111_2222u32.to_be_bytes());
    p.extend_from_slice(&[0xBE, 0xDE, 0, 1, 0x32, 1, 2, 3]);
    p.extend_from_slice(&[0x90, 0x80, 0x80 | 0x12, 0x34]);
    p.resize(1100, 0xAA);
    p
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("munger");
    g.throughput(Throughput::Elements(1));
    let t0 = Instant::now();
    let mut m = Munger::new(7, 100, 1000);
    let mut seq = 1u64 << 16;
    g.bench_function("process", |b| {
        b.iter(|| {
            seq += 1;
            let p = SourcePacket {
                ssrc: 1,
                ext_seq: seq,
                ext_ts: seq * 3000,
                keyframe_start: true,
                clock_rate: 90_000,
                vp8: Some((seq as u16 & 0x7fff, Some(3))),
                dd_frame: None,
            };
            black_box(m.process(t0, &p))
        })
    });

    let mut track = OutgoingTrack::new(0, line(), 100, 1000, 5);
    track.set_source_extmap(&[(
        3,
        "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time".into(),
    )]);
    let mut out = Vec::with_capacity(1600);
    let mut n = 0u32;
    let mut pkt = packet(0, 0);
    g.bench_function("forward_rewrite", |b| {
        b.iter(|| {
            n += 1;
            pkt[2..4].copy_from_slice(&(n as u16).to_be_bytes());
            pkt[4..8].copy_from_slice(&(n * 3000).to_be_bytes());
            let src = SourcePacket {
                ssrc: 0x1111_2222,
                ext_seq: (1 << 16) + u64::from(n),
                ext_ts: (1 << 32) + u64::from(n) * 3000,
                keyframe_start: true,
                clock_rate: 90_000,
                vp8: Some((0x1234, None)),
                dd_frame: None,
            };
            black_box(
                track
                    .forward(
                        t0 + Duration::from_millis(u64::from(n)),
                        &pkt,
                        &src,
                        &mut out,
                    )
                    .unwrap(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
