//! Rust SDK sessions driven in process: synthetic media and waiting on what a viewer shows.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use ferry_sdk::{Media, Session};

/// Synthetic media at 400 kbit/s: no encoder, no camera.
pub fn synthetic() -> Media {
    Media::Synthetic {
        bitrate_bps: 400_000,
    }
}

/// Waits until the viewer completed more than `n` video frames; how many it had.
pub async fn frames_over(viewer: &Session, n: u64, within: Duration) -> Result<u64> {
    let deadline = Instant::now() + within;
    loop {
        let f = viewer.stats().await?.frames;
        if f > n {
            return Ok(f);
        }
        ensure!(Instant::now() < deadline, "the viewer has {f} frames");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
