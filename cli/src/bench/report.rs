//! What the benchmarks write and compute the same way: the JSON file, percentiles.

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) fn write_json<T: Serialize>(out: &PathBuf, rows: &T) -> Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(out, serde_json::to_string_pretty(rows)?)?;
    println!("wrote {}", out.display());
    Ok(())
}
