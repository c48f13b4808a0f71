//! Publishes a video file to a Ferry cluster with the Rust SDK, paced in real time, and follows
//! migrations and node failures by itself.
//!
//! ```text
//! cargo run -p ferry-sdk --example publish -- FILE.ivf|FILE.h264 URL [--fps N] [--loop] [--token T]
//! ```
//!
//! `URL` is a WHIP endpoint (`http://127.0.0.1:8080/whip/cam`) or a cluster's base URL plus
//! `--stream NAME`; `--token` (default: `$FERRY_TOKEN`) is the access token (`ferry token
//! --publish …`, or `ferry dev`'s). VP8 comes from an IVF file, H.264 from an Annex B stream (`.h264`, `.264`);
//! make them with ffmpeg, a keyframe every second so a viewer joins fast:
//!
//! ```text
//! ffmpeg -f lavfi -i testsrc=size=640x360:rate=30 -t 10 -c:v libvpx -g 30 -b:v 1M cam.ivf
//! ffmpeg -f lavfi -i testsrc=size=640x360:rate=30 -t 10 -c:v libx264 -g 30 -profile:v baseline -bsf:v h264_mp4toannexb -f h264 cam.h264
//! ```
//!
//! It prints the session's events (migrations, reconnections) and, at the end, a JSON summary.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ferry_sdk::codec::Codec;
use ferry_sdk::media::{annexb, ivf};
use ferry_sdk::{FerryClient, PublishOptions};

struct Args {
    file: String,
    base: String,
    stream: String,
    fps: Option<u32>,
    looped: bool,
    ticket_file: Option<String>,
    token: Option<String>,
}

fn args() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let (mut file, mut url, mut stream, mut fps, mut looped, mut ticket_file) =
        (None, None, None, None, false, None);
    let mut token = std::env::var("FERRY_TOKEN").ok().filter(|t| !t.is_empty());
    while let Some(a) = it.next() {
        match a.as_str() {
            "--token" => token = Some(it.next().context("--token T")?),
            "--fps" => fps = Some(it.next().context("--fps N")?.parse()?),
            "--stream" => stream = Some(it.next().context("--stream NAME")?),
            "--ticket-file" => ticket_file = Some(it.next().context("--ticket-file PATH")?),
            "--loop" => looped = true,
            _ if file.is_none() => file = Some(a),
            _ if url.is_none() => url = Some(a),
            other => bail!("unexpected argument {other:?}"),
        }
    }
    let usage =
        "usage: publish FILE.ivf|FILE.h264 URL [--stream NAME] [--fps N] [--loop] [--token T]";
    let file = file.context(usage)?;
    let url = url.context(usage)?;
    let (base, stream) = match (url.split_once("/whip/"), stream) {
        (_, Some(s)) => (url.trim_end_matches('/').to_owned(), s),
        (Some((b, s)), None) => (b.to_owned(), s.trim_end_matches('/').to_owned()),
        (None, None) => bail!("{url} is not a WHIP endpoint (…/whip/NAME): add --stream NAME"),
    };
    Ok(Args {
        file,
        base,
        stream,
        fps,
        looped,
        ticket_file,
        token,
    })
}

/// One frame of the file: its bytes, whether it is a keyframe, how long it lasts.
type Frame = (Vec<u8>, bool, Duration);

/// The file's codec and frames.
fn frames(path: &str, fps: Option<u32>) -> Result<(Codec, Vec<Frame>)> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
    if bytes.starts_with(b"DKIF") {
        let mut r = ivf::IvfReader::new(bytes.as_slice())?;
        let h = *r.header();
        if &h.fourcc != b"VP80" {
            bail!("{path}: only VP8 IVF files (fourcc {:?})", h.fourcc);
        }
        let mut out = Vec::new();
        while let Some(f) = r.read_frame()? {
            // VP8 frame tag: bit 0 clear is a key frame (RFC 6386 §9.1).
            let key = f.data.first().is_some_and(|b| b & 1 == 0);
            out.push((f.data, key, f.pts));
        }
        let fixed = fps.map(|f| Duration::from_secs_f64(1.0 / f64::from(f.max(1))));
        let mut timed = Vec::new();
        for i in 0..out.len() {
            let d = fixed.unwrap_or_else(|| match out.get(i + 1) {
                Some(next) => h.duration(next.2.saturating_sub(out[i].2)),
                None => Duration::from_millis(33),
            });
            let (data, key, _) = std::mem::take(&mut out[i]);
            timed.push((data, key, d.max(Duration::from_millis(1))));
        }
        return Ok((Codec::Vp8, timed));
    }
    let d = Duration::from_secs_f64(1.0 / f64::from(fps.unwrap_or(30).max(1)));
    let aus: Vec<_> = annexb::access_units(&bytes)
        .map(|au| (au.data.to_vec(), au.keyframe, d))
        .collect();
    if aus.is_empty() {
        bail!("{path}: neither an IVF file nor an H.264 Annex B stream");
    }
    Ok((Codec::H264, aus))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let a = args()?;
    let (codec, frames) = frames(&a.file, a.fps)?;
    let mut opts = PublishOptions::new(codec, false);
    opts.ticket_file = a.ticket_file.map(Into::into);
    let mut client = FerryClient::new(&a.base);
    if let Some(t) = &a.token {
        client = client.with_token(t.clone());
    }
    let mut session = client.publish(&a.stream, opts).await?;
    eprintln!(
        "publishing {} ({codec:?}, {} frames) as session {} on {}",
        a.file,
        frames.len(),
        session.id().unwrap_or_default(),
        session.node().unwrap_or_default()
    );
    let start = Instant::now();
    let mut due = start;
    let mut sent = 0u64;
    'outer: loop {
        for (data, key, d) in &frames {
            tokio::time::sleep_until(due.into()).await;
            while let Some(e) = session.try_event() {
                println!("{}", serde_json::to_string(&e)?);
            }
            session.send_video(data.clone(), *d, *key)?;
            sent += 1;
            due += *d;
            if session.state() == ferry_sdk::State::Failed {
                break 'outer;
            }
        }
        if !a.looped {
            break;
        }
    }
    // Let the last frames and their repairs get there.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stats = session.stats().await?;
    println!(
        "{}",
        serde_json::json!({
            "session": stats.session,
            "node": stats.node,
            "frames_sent": sent,
            "seconds": start.elapsed().as_secs_f64(),
            "migrations": stats.migrations,
            "reconnects": stats.reconnects,
            "state": stats.state,
        })
    );
    session.close().await;
    Ok(())
}
