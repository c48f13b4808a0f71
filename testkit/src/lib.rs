//! Real third-party tools for the tests of several crates: [`probe`] reads a recording with
//! ffprobe, [`Moto`] runs a real S3 API server; and the kept fuzz corpora, which each crate's
//! stable tests replay through its fuzz bodies ([`fuzz_corpus`]).
//!
//! A crate of its own rather than a module of `ferry-tests`: `ferry-record`'s tests use these
//! too, and `ferry-tests` depends on `ferry-record` (through `ferry-sfu`), so a dev-dependency
//! of `ferry-record` on `ferry-tests` would be a cycle. This crate depends on no Ferry crate.
//!
//! A missing tool is an error that says how to install it ([`require`]), never a skip.

mod ffprobe;
pub mod fuzz_corpus;
mod moto;

use std::process::Command;

use anyhow::{Result, ensure};

pub use ffprobe::{Probe, ffprobe, ffprobe_with, probe, require_ffmpeg, require_ffprobe};
pub use moto::Moto;

/// Fails (never skips) when `tool args` does not run, saying how to install it with `hint`.
pub fn require(tool: &str, args: &[&str], hint: &str) -> Result<()> {
    let ok = Command::new(tool)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    ensure!(
        ok,
        "`{tool}` is required by this test and was not found: {hint}"
    );
    Ok(())
}
