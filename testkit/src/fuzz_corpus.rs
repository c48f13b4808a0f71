//! The kept fuzz corpora: `fuzz/corpus/<target>/`, grown and minimised by `scripts/fuzz`, with
//! every crash reproducer it found (`crash-*`, `oom-*`, `timeout-*`). Each crate replays the
//! corpora of its fuzz bodies in a stable `cargo test` ([`replay`]), so an input that once broke
//! a parser breaks the build again if the bug comes back, without nightly or libFuzzer.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};

/// The `fuzz/` folder of the tree: found from the package whose tests run (cargo sets
/// `CARGO_MANIFEST_DIR` when it runs them, and their working directory), not from where this
/// crate was compiled — a target directory shared by two checkouts keeps this crate built in
/// the other one, whose tree may be gone.
pub fn fuzz_dir() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    start
        .ancestors()
        .map(|d| d.join("fuzz"))
        .find(|f| f.join("Cargo.toml").is_file())
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz"))
}

/// The names of every fuzz target (`[[bin]]` of `fuzz/Cargo.toml`).
pub fn targets() -> Result<Vec<String>> {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml"))
        .context("reading fuzz/Cargo.toml")?;
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin && let Some(name) = line.strip_prefix("name = ") {
            names.push(name.trim_matches('"').to_owned());
        }
    }
    ensure!(!names.is_empty(), "no [[bin]] in fuzz/Cargo.toml");
    Ok(names)
}

/// Runs every kept input of `target` through `body`, the function its fuzz target wraps (the
/// target's source must name it as `body_path`, so the replay cannot drift from the target).
/// Fails on a missing or empty corpus and on every input that panics, naming them. Returns
/// how many inputs ran.
pub fn replay(target: &str, body_path: &str, body: impl Fn(&[u8])) -> Result<usize> {
    let source = fuzz_dir().join("fuzz_targets").join(format!("{target}.rs"));
    let text = std::fs::read_to_string(&source)
        .with_context(|| format!("reading {}", source.display()))?;
    ensure!(
        text.contains(body_path),
        "fuzz target {target} does not call {body_path}: the replay would test something else"
    );
    let dir = fuzz_dir().join("corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| {
            format!(
                "no corpus {} (scripts/fuzz {target} grows one)",
                dir.display()
            )
        })?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.is_file());
    files.sort();
    ensure!(!files.is_empty(), "corpus {} is empty", dir.display());
    let mut broken = Vec::new();
    for file in &files {
        let data = std::fs::read(file)?;
        if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
            broken.push(file.display().to_string());
        }
    }
    if !broken.is_empty() {
        bail!(
            "{} of {} inputs of {target} panic: {}",
            broken.len(),
            files.len(),
            broken.join(", ")
        );
    }
    Ok(files.len())
}

/// A test, `the_kept_fuzz_corpus_runs_without_a_panic`, that [`replay`]s `target`'s kept corpus
/// through `body`, which the target's source calls as `path`.
#[macro_export]
macro_rules! replay_test {
    ($target:literal, $path:literal, $body:expr) => {
        #[test]
        fn the_kept_fuzz_corpus_runs_without_a_panic() {
            $crate::fuzz_corpus::replay($target, $path, $body).unwrap();
        }
    };
}
