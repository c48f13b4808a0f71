//! GStreamer as a WHIP/WHEP client: `gst-launch-1.0` with `whipsink` / `whepsrc` from
//! gst-plugins-rs (crate `gst-plugin-webrtchttp`, which `./scripts/test` builds once and points
//! [`PLUGIN_PATH_ENV`] at), run inside a [`Netns`] because libnice ignores loopback.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use rustix::process::{Pid, Signal, kill_process};

use crate::netns::Netns;

/// Where `libgstwebrtchttp.so` is (set by `./scripts/test`).
pub const PLUGIN_PATH_ENV: &str = "FERRY_GST_PLUGIN_PATH";

/// The directory holding the WHIP/WHEP plugin, checked.
pub fn plugin_path() -> Result<PathBuf> {
    let dir = PathBuf::from(std::env::var_os(PLUGIN_PATH_ENV).with_context(|| {
        format!(
            "{PLUGIN_PATH_ENV} is not set: ./scripts/test builds gst-plugin-webrtchttp (whipsink, whepsrc) and sets it"
        )
    })?);
    ensure!(
        dir.join("libgstwebrtchttp.so").is_file(),
        "no libgstwebrtchttp.so in {} ({PLUGIN_PATH_ENV})",
        dir.display()
    );
    Ok(dir)
}

/// A running `gst-launch-1.0`, killed on drop; its output goes to a file.
#[derive(Debug)]
pub struct GstLaunch {
    child: Child,
    log: PathBuf,
}

impl GstLaunch {
    /// Starts `gst-launch-1.0 -v PIPELINE…` in `ns` (each element of `pipeline` one word).
    pub fn spawn(ns: &Netns, pipeline: &[&str], debug: &str) -> Result<GstLaunch> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let log = std::env::temp_dir().join(format!(
            "ferry-gst-{}-{}.log",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let out = std::fs::File::create(&log)?;
        let child = ns
            .command("gst-launch-1.0")
            .arg("-v")
            .args(pipeline)
            .env("GST_PLUGIN_PATH", plugin_path()?)
            .env("GST_DEBUG", debug)
            .env("GST_DEBUG_NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("gst-launch-1.0 (apt-get install gstreamer1.0-tools)")?;
        Ok(GstLaunch { child, log })
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines it printed.
    pub fn tail(&self, n: usize) -> String {
        let out = self.output();
        let lines: Vec<&str> = out.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Buffers that reached the `fakesink` named `sink` (`silent=false`, one "chain" line each).
    pub fn buffers_at(&self, sink: &str) -> usize {
        let tag = format!("({sink}:sink)");
        self.output()
            .lines()
            .filter(|l| l.contains("chain") && l.contains(&tag))
            .count()
    }

    /// Raw `kind` buffers (`video` or `audio`) that reached fakesinks: a sink is counted for
    /// the kind of the caps `-v` printed for it (`decodebin` branches take whichever stream
    /// gst-launch linked to them).
    pub fn decoded(&self, kind: &str) -> usize {
        let out = self.output();
        let raw = format!("caps = {kind}/x-raw");
        let sinks: Vec<String> = out
            .lines()
            .filter(|l| {
                l.contains("GstFakeSink:") && l.contains(".GstPad:sink: ") && l.contains(&raw)
            })
            .filter_map(|l| {
                l.split("GstFakeSink:")
                    .nth(1)?
                    .split('.')
                    .next()
                    .map(str::to_owned)
            })
            .collect();
        sinks.iter().map(|s| self.buffers_at(s)).sum()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Ctrl-C: gst-launch stops the pipeline (whipsink and whepsrc send their DELETE) and exits;
    /// waits up to `wait` for that.
    pub fn interrupt(&mut self, wait: Duration) -> Result<()> {
        let pid = Pid::from_child(&self.child);
        kill_process(pid, Signal::INT)?;
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if !self.running() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        anyhow::bail!("gst-launch did not stop within {wait:?}: {}", self.tail(20))
    }
}

impl Drop for GstLaunch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}
