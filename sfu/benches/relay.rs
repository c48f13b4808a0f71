//! Per-packet cost of the relay link's seal: a relayed RTP packet sealed (AES-128-GCM, the
//! packet encrypted) and opened again with its replay check, against the HMAC-SHA-256
//! envelope over the same bytes that relay links used before (it still authenticates tickets
//! and the edge tunnel), in the same run.

#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferry_sfu::cluster::relay::{self, ClusterKey, MediaHeader};
use ferry_sfu::cluster::relay_seal::{RelayOpener, RelaySealer};
use ferry_sfu::media::munger::SourcePacket;

fn bench(c: &mut Criterion) {
    let key = ClusterKey::new(&[7; 32]);
    let mut rtp = vec![0u8; 1200];
    rtp[0] = 0x80;
    rtp[1] = 96;
    let h = MediaHeader {
        relay_id: 42,
        track: 1,
        src: SourcePacket {
            ssrc: 9,
            ext_seq: 1,
            ext_ts: 90_000,
            keyframe_start: false,
            clock_rate: 0,
            vp8: Some((300, Some(9))),
            dd_frame: None,
        },
    };
    let mut g = c.benchmark_group("relay_link_1200B");
    g.throughput(Throughput::Elements(1));
    let mut seal = RelaySealer::new(&key.seal_keys(), 1);
    let mut open = RelayOpener::new(key.seal_keys());
    let mut buf = Vec::with_capacity(1300);
    g.bench_function("seal_and_open (AES-128-GCM, encrypted)", |b| {
        b.iter(|| {
            relay::write_media(&mut seal, &h, black_box(&rtp), &mut buf);
            let (back, body) = relay::read_media(&mut open, &mut buf).unwrap();
            black_box((back, body.len()))
        })
    });
    g.bench_function("hmac_envelope (HMAC-SHA-256, plain: before)", |b| {
        b.iter(|| {
            buf.clear();
            buf.extend_from_slice(&[relay::MEDIA; 27]);
            buf.extend_from_slice(black_box(&rtp));
            key.seal(&mut buf);
            black_box(key.open(&buf).unwrap().len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
