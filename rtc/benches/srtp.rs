//! SRTP protect/unprotect cost per packet for each profile (1,200-byte payload).

// Tests and benches drive the cores with the real clock (clippy.toml forbids it in the cores).
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferry_rtc::srtp::{SrtpContext, SrtpProfile};
use std::hint::black_box;

const PAYLOAD: usize = 1200;

fn packet(seq: u16) -> Vec<u8> {
    let mut p = vec![0u8; 12 + PAYLOAD + 32];
    p[0] = 0x80;
    p[1] = 96;
    p[2..4].copy_from_slice(&seq.to_be_bytes());
    p[8..12].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    p
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("srtp");
    g.throughput(Throughput::Elements(1));
    for profile in [
        SrtpProfile::Aes128CmHmacSha1_80,
        SrtpProfile::AeadAes128Gcm,
        SrtpProfile::AeadAes256Gcm,
    ] {
        let key = vec![7u8; profile.master_key_len()];
        let salt = vec![9u8; profile.master_salt_len()];
        let name = format!("{profile:?}");
        let mut tx = SrtpContext::new(profile, &key, &salt).unwrap();
        let mut buf = packet(0);
        let mut seq = 0u16;
        g.bench_function(format!("protect/{name}"), |b| {
            b.iter(|| {
                seq = seq.wrapping_add(1);
                buf[2..4].copy_from_slice(&seq.to_be_bytes());
                black_box(tx.protect_rtp(&mut buf, 12 + PAYLOAD).unwrap())
            })
        });
        // Pre-encrypt a window of packets, then measure decryption in order.
        let mut tx = SrtpContext::new(profile, &key, &salt).unwrap();
        let sealed: Vec<Vec<u8>> = (0..4096u16)
            .map(|s| {
                let mut p = packet(s);
                let n = tx.protect_rtp(&mut p, 12 + PAYLOAD).unwrap();
                p.truncate(n);
                p
            })
            .collect();
        let mut rx = SrtpContext::new(profile, &key, &salt).unwrap();
        let mut i = 0usize;
        let mut scratch = Vec::with_capacity(1500);
        g.bench_function(format!("unprotect/{name}"), |b| {
            b.iter(|| {
                if i == sealed.len() {
                    rx = SrtpContext::new(profile, &key, &salt).unwrap();
                    i = 0;
                }
                scratch.clear();
                scratch.extend_from_slice(&sealed[i]);
                i += 1;
                black_box(rx.unprotect_rtp(&mut scratch).unwrap())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
