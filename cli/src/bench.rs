//! `ferry bench …`: end-to-end benchmarks.

/// Benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {}

pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {}
}
