//! Plays a stream of a Ferry cluster with the Rust SDK into a file, following migrations and
//! node failures by itself.
//!
//! ```text
//! cargo run -p ferry-sdk --example play -- URL OUT.ivf|OUT.h264 [--seconds S] [--frames N] [--token T]
//! ```
//!
//! `URL` is a WHEP endpoint (`http://127.0.0.1:8080/whep/cam`); `--token` (default:
//! `$FERRY_TOKEN`) is the access token (`ferry token --play …`, or `ferry dev`'s). VP8 is written as IVF, H.264 as
//! an Annex B stream. It stops after `--seconds` (default 10) or `--frames`, prints the
//! session's events and then a JSON summary (frames written, keyframes, migrations).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ferry_sdk::codec::Codec;
use ferry_sdk::media::ivf;
use ferry_sdk::{FerryClient, PlayOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let mut it = std::env::args().skip(1);
    let (mut url, mut out, mut seconds, mut max_frames, mut ticket_file) =
        (None, None, 10.0f64, u64::MAX, None);
    let mut token = std::env::var("FERRY_TOKEN").ok().filter(|t| !t.is_empty());
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => seconds = it.next().context("--seconds S")?.parse()?,
            "--frames" => max_frames = it.next().context("--frames N")?.parse()?,
            "--ticket-file" => ticket_file = Some(it.next().context("--ticket-file PATH")?),
            "--token" => token = Some(it.next().context("--token T")?),
            _ if url.is_none() => url = Some(a),
            _ if out.is_none() => out = Some(a),
            other => bail!("unexpected argument {other:?}"),
        }
    }
    let usage = "usage: play URL OUT.ivf|OUT.h264 [--seconds S] [--frames N] [--token T]";
    let url = url.context(usage)?;
    let out = out.context(usage)?;
    let (base, stream) = url
        .split_once("/whep/")
        .with_context(|| format!("{url} is not a WHEP endpoint (…/whep/NAME)"))?;
    let mut client = FerryClient::new(base);
    if let Some(t) = token {
        client = client.with_token(t);
    }
    let opts = PlayOptions {
        ticket_file: ticket_file.map(Into::into),
        ..PlayOptions::default()
    };
    let mut session = client.play(stream.trim_end_matches('/'), opts).await?;
    eprintln!(
        "playing {url} as session {} on {}",
        session.id().unwrap_or_default(),
        session.node().unwrap_or_default()
    );
    let file = std::fs::File::create(&out).with_context(|| format!("creating {out}"))?;
    let mut ivf_out = None;
    let mut raw_out = None;
    let (mut written, mut keyframes, mut first_ts) = (0u64, 0u64, None::<u64>);
    let mut first_at = None::<Instant>;
    let mut pending_file = Some(file);
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while written < max_frames {
        let frame = tokio::select! {
            f = session.next_frame() => f,
            () = tokio::time::sleep_until(end.into()) => None,
        };
        let Some(f) = frame else { break };
        while let Some(e) = session.try_event() {
            println!("{}", serde_json::to_string(&e)?);
        }
        if !f.video {
            continue;
        }
        let t0 = *first_ts.get_or_insert(f.ts);
        first_at.get_or_insert_with(Instant::now);
        // 90 kHz RTP clock: IVF pts in ticks of 1/90000 s.
        let pts = f.ts.saturating_sub(t0);
        match f.codec {
            Codec::Vp8 => {
                if ivf_out.is_none() {
                    let file = pending_file.take().context("output file")?;
                    let header = ivf::IvfHeader {
                        timebase_den: 90_000,
                        timebase_num: 1,
                        ..ivf::IvfHeader::vp8(640, 360, 30)
                    };
                    ivf_out = Some(ivf::IvfWriter::new(file, &header)?);
                }
                if let Some(w) = ivf_out.as_mut() {
                    w.write_frame(pts, &f.data)?;
                }
            }
            Codec::H264 => {
                use std::io::Write;
                if raw_out.is_none() {
                    raw_out = pending_file.take();
                }
                if let Some(w) = raw_out.as_mut() {
                    w.write_all(&f.data)?;
                }
            }
            // The SDK's viewer assembles Opus, VP8 and H.264 only (it does not offer the others).
            Codec::Opus | Codec::Vp9 | Codec::Av1 => continue,
        }
        written += 1;
        keyframes += u64::from(f.keyframe);
    }
    let span = first_at.map_or(0.0, |t| t.elapsed().as_secs_f64());
    if let Some(w) = ivf_out {
        w.finish()?;
    }
    let stats = session.stats().await?;
    println!(
        "{}",
        serde_json::json!({
            "session": stats.session,
            "node": stats.node,
            "frames_written": written,
            "first_keyframe_to_end_s": span,
            "keyframes": keyframes,
            "frames_dropped": stats.frames_dropped,
            "migrations": stats.migrations,
            "reconnects": stats.reconnects,
            "state": stats.state,
        })
    );
    session.close().await;
    Ok(())
}
