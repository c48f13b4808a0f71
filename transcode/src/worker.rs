//! One running transcode (the driver): it plays the source stream from its node as a client
//! (the Rust SDK), feeds every video frame to one ffmpeg per rung, cuts each ffmpeg's output
//! into access units and publishes them as the rung's stream, one rung frame per source frame
//! (ffmpeg keeps frames one to one), each lasting as long as the source frame it came from.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_proto::StreamId;
use ferry_sdk::codec::Codec;
use ferry_sdk::{FerryClient, PlayOptions, PublishOptions, Session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::watch;

use crate::encoder::{Encoder, Input, ffmpeg_args};
use crate::framing::{Feed, Units};
use crate::ladder::Rung;

/// How long the worker waits for its source's first video frame.
const FIRST_FRAME_WAIT: Duration = Duration::from_secs(20);

/// A source frame's duration when its timestamps do not tell (the first, or a jump).
const DEFAULT_FRAME: Duration = Duration::from_millis(33);

/// What a rung has done so far.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RungStats {
    /// `360p`.
    pub name: String,
    /// The stream it is published as.
    pub stream: String,
    /// Frames published.
    pub frames: u64,
    /// Keyframes among them.
    pub keyframes: u64,
    /// Media seconds published.
    pub media_s: f64,
    /// CPU seconds its ffmpeg used.
    pub cpu_s: f64,
    /// Real-time factor: media seconds published per second of wall time since its first frame
    /// (1.0 keeps up with a live source).
    pub realtime_factor: f64,
    /// The publisher's session id.
    pub session: Option<String>,
    /// Why it stopped, if it did.
    pub error: Option<String>,
}

/// What a transcode has done so far.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Progress {
    /// `starting`, `running`, `stopped`, `handed-over` (moved to another node), `failed`.
    pub state: String,
    /// Source frames taken.
    pub frames_in: u64,
    /// The source's codec, once known.
    pub input: Option<Input>,
    /// Per rung.
    pub rungs: Vec<RungStats>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// How a worker reaches its node and what it runs.
#[derive(Debug, Clone)]
pub struct WorkerSetup {
    /// The node's base URL (the worker is a client of it).
    pub node: String,
    /// The access token for WHIP/WHEP there.
    pub token: String,
    /// The source stream.
    pub stream: StreamId,
    /// The rungs.
    pub ladder: Vec<Rung>,
    /// The encoder.
    pub encoder: Encoder,
    /// The ffmpeg binary.
    pub ffmpeg: PathBuf,
    /// Where each rung's publisher keeps its session ticket (`{dir}/{rung}.ticket`): a worker
    /// started again with them takes the rungs' sessions over (viewers keep playing).
    pub tickets: Option<PathBuf>,
}

/// A running worker: its progress, and how to stop it (dropping it stops it too).
#[derive(Debug)]
pub struct Worker {
    progress: Arc<Mutex<Progress>>,
    stop: watch::Sender<Stop>,
    done: Option<tokio::task::JoinHandle<()>>,
}

/// How a worker is to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Not yet.
    No,
    /// Its rungs' sessions end (their viewers' streams end).
    Close,
    /// Its rungs' sessions are left to a worker elsewhere that resumes them with their tickets
    /// (a move): detached, not ended.
    HandOver,
}

fn relock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Worker {
    /// Starts a worker.
    pub fn start(setup: WorkerSetup) -> Worker {
        let progress = Arc::new(Mutex::new(Progress {
            state: "starting".into(),
            rungs: setup
                .ladder
                .iter()
                .map(|r| RungStats {
                    name: r.name(),
                    stream: r
                        .stream_of(&setup.stream)
                        .map(|s| s.to_string())
                        .unwrap_or_default(),
                    ..RungStats::default()
                })
                .collect(),
            ..Progress::default()
        }));
        let (stop, stopped) = watch::channel(Stop::No);
        let p = progress.clone();
        let done = tokio::spawn(async move {
            if let Err(e) = run(setup, p.clone(), stopped).await {
                tracing::warn!(error = %e, "transcode failed");
                let mut p = relock(&p);
                p.state = "failed".into();
                p.error = Some(e.to_string());
            }
        });
        Worker {
            progress,
            stop,
            done: Some(done),
        }
    }

    /// Its progress now.
    pub fn progress(&self) -> Progress {
        relock(&self.progress).clone()
    }

    /// Stops it: ffmpeg ends, the rungs' sessions and the source's viewer are closed.
    pub async fn stop(self) -> Progress {
        self.stop_as(Stop::Close).await
    }

    /// Stops it for a move: ffmpeg ends and the source's viewer is closed, but the rungs'
    /// sessions are only detached — the worker that took them over with their tickets carries
    /// them on, and their viewers keep playing.
    pub async fn hand_over(self) -> Progress {
        self.stop_as(Stop::HandOver).await
    }

    async fn stop_as(mut self, how: Stop) -> Progress {
        let _ = self.stop.send(how);
        if let Some(done) = self.done.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), done).await;
        }
        self.progress()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if *self.stop.borrow() == Stop::No {
            let _ = self.stop.send(Stop::Close);
        }
    }
}

/// One rung's ffmpeg and publisher.
struct RungRun {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Durations of the source frames fed and not yet published.
    pending: Arc<Mutex<VecDeque<Duration>>>,
    publisher: Arc<Session>,
    reader: tokio::task::JoinHandle<()>,
}

/// Why a transcode stopped (its `error`).
#[derive(Debug, thiserror::Error)]
enum WorkerError {
    /// The source stream could not be played.
    #[error("playing {0}: {1}")]
    Play(String, String),
    /// No video frame came in time.
    #[error("no video from {0} within {secs} s", secs = FIRST_FRAME_WAIT.as_secs())]
    NoVideo(String),
    /// The source ended before its first video frame.
    #[error("{0} ended before any video")]
    EndedEarly(String),
    /// A source codec the worker does not decode.
    #[error("{0} sends {1:?} video: only VP8 and H.264 are transcoded")]
    Codec(String, Codec),
    /// A rung's stream name is not one.
    #[error("{0}")]
    RungName(String),
    /// A rung could not be published.
    #[error("publishing {0}: {1}")]
    Publish(String, String),
    /// ffmpeg did not start.
    #[error("starting {0}: {1}")]
    Ffmpeg(String, std::io::Error),
    /// ffmpeg started without its output pipe.
    #[error("ffmpeg has no stdout")]
    NoStdout,
}

async fn run(
    setup: WorkerSetup,
    progress: Arc<Mutex<Progress>>,
    mut stop: watch::Receiver<Stop>,
) -> Result<(), WorkerError> {
    let node = setup.node.trim_end_matches('/').to_owned();
    let client = FerryClient::new(&node).with_token(&setup.token);
    let mut viewer = client
        .play(
            setup.stream.as_str(),
            PlayOptions {
                endpoint: Some(format!("{node}/whep/{}", setup.stream)),
                ..PlayOptions::default()
            },
        )
        .await
        .map_err(|e| WorkerError::Play(setup.stream.to_string(), e.to_string()))?;
    // The first video frame tells the source's codec (and starts ffmpeg at a keyframe).
    let first = tokio::time::timeout(FIRST_FRAME_WAIT, async {
        loop {
            match viewer.next_frame().await {
                Some(f) if f.video => return Some(f),
                Some(_) => {}
                None => return None,
            }
        }
    })
    .await
    .map_err(|_| WorkerError::NoVideo(setup.stream.to_string()))?
    .ok_or_else(|| WorkerError::EndedEarly(setup.stream.to_string()))?;
    let input = match first.codec {
        Codec::Vp8 => Input::Vp8,
        Codec::H264 => Input::H264,
        c => {
            return Err(WorkerError::Codec(setup.stream.to_string(), c));
        }
    };
    let mut rungs = Vec::with_capacity(setup.ladder.len());
    for (i, rung) in setup.ladder.iter().enumerate() {
        rungs.push(start_rung(&setup, &client, &node, *rung, i, input, &progress).await?);
    }
    {
        let mut p = relock(&progress);
        p.state = "running".into();
        p.input = Some(input);
    }
    tracing::info!(stream = %setup.stream, rungs = rungs.len(), encoder = ?setup.encoder, ?input, "transcode running");
    let mut feed = Feed::new(input);
    let mut last_ts: Option<u64> = None;
    let mut frame = Some(first);
    loop {
        if let Some(f) = frame.take().filter(|f| f.video) {
            let duration = match last_ts.replace(f.ts) {
                Some(prev) if f.ts > prev && f.ts - prev < 90_000 => {
                    Duration::from_micros((f.ts - prev) * 1_000_000 / 90_000)
                }
                _ => DEFAULT_FRAME,
            };
            if let Some(bytes) = feed.frame(&f.data, f.keyframe) {
                for r in &mut rungs {
                    relock(&r.pending).push_back(duration);
                    if let Some(stdin) = r.stdin.as_mut()
                        && stdin.write_all(&bytes).await.is_err()
                    {
                        r.stdin = None;
                    }
                }
                relock(&progress).frames_in = feed.frames();
            }
            if rungs.iter().all(|r| r.stdin.is_none()) {
                break;
            }
        }
        tokio::select! {
            f = viewer.next_frame() => match f {
                Some(f) => frame = Some(f),
                None => break,
            },
            _ = stop.changed() => break,
        }
    }
    let how = *stop.borrow();
    for mut r in rungs {
        drop(r.stdin.take());
        let _ = r.child.kill().await;
        r.reader.abort();
        let _ = (&mut r.reader).await;
        if let Ok(publisher) = Arc::try_unwrap(r.publisher) {
            if how == Stop::HandOver {
                publisher.detach().await;
            } else {
                publisher.close().await;
            }
        }
    }
    viewer.close().await;
    relock(&progress).state = if how == Stop::HandOver {
        "handed-over"
    } else {
        "stopped"
    }
    .into();
    Ok(())
}

async fn start_rung(
    setup: &WorkerSetup,
    client: &FerryClient,
    node: &str,
    rung: Rung,
    index: usize,
    input: Input,
    progress: &Arc<Mutex<Progress>>,
) -> Result<RungRun, WorkerError> {
    let stream = rung
        .stream_of(&setup.stream)
        .map_err(|e| WorkerError::RungName(e.to_string()))?;
    let publisher = client
        .publish(
            stream.as_str(),
            PublishOptions {
                endpoint: Some(format!("{node}/whip/{stream}")),
                ticket_file: setup
                    .tickets
                    .as_ref()
                    .map(|d| d.join(format!("{}.ticket", rung.name()))),
                ..PublishOptions::new(Codec::H264, false)
            },
        )
        .await
        .map_err(|e| WorkerError::Publish(stream.to_string(), e.to_string()))?;
    relock(progress).rungs[index].session = publisher.id();
    let mut child = Command::new(&setup.ffmpeg)
        .args(ffmpeg_args(input, rung, setup.encoder))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| WorkerError::Ffmpeg(setup.ffmpeg.display().to_string(), e))?;
    let stdin = child.stdin.take();
    let mut stdout = child.stdout.take().ok_or(WorkerError::NoStdout)?;
    let stderr = child.stderr.take();
    let pid = child.id();
    let pending = Arc::new(Mutex::new(VecDeque::new()));
    let publisher = Arc::new(publisher);
    let reader = {
        let (pending, publisher, progress) = (pending.clone(), publisher.clone(), progress.clone());
        tokio::spawn(async move {
            let mut units = Units::default();
            let mut buf = vec![0u8; 64 * 1024];
            let mut first: Option<Instant> = None;
            loop {
                let n = match stdout.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                units.push(&buf[..n]);
                while let Some(u) = units.next_unit() {
                    let d = relock(&pending).pop_front().unwrap_or(DEFAULT_FRAME);
                    if let Err(e) = publisher.send_video(u.data, d, u.keyframe) {
                        let mut p = relock(&progress);
                        p.rungs[index].error = Some(format!("publisher: {e}"));
                    }
                    let now = Instant::now();
                    let since = now.duration_since(*first.get_or_insert(now));
                    let mut p = relock(&progress);
                    let r = &mut p.rungs[index];
                    r.frames += 1;
                    r.keyframes += u64::from(u.keyframe);
                    r.media_s += d.as_secs_f64();
                    r.realtime_factor = if since.as_secs_f64() > 0.5 {
                        (r.media_s - d.as_secs_f64()) / since.as_secs_f64()
                    } else {
                        0.0
                    };
                    r.cpu_s = pid.and_then(cpu_seconds).unwrap_or(r.cpu_s);
                }
            }
        })
    };
    if let Some(e) = stderr {
        let progress = progress.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt as _;
            // ffmpeg runs with -loglevel error: every line is worth a warning, the latest is
            // the rung's error.
            let mut lines = tokio::io::BufReader::new(e).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                tracing::warn!(rung = index, ffmpeg = %line, "ffmpeg said");
                relock(&progress).rungs[index].error = Some(line.chars().take(500).collect());
            }
        });
    }
    Ok(RungRun {
        child,
        stdin,
        pending,
        publisher,
        reader,
    })
}

/// CPU seconds process `pid` used so far (Linux: `/proc/{pid}/stat`, user + system).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces), from field 3 on.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}
