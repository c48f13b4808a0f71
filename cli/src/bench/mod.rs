//! `ferry bench …`: end-to-end benchmarks that print a table and write JSON under
//! `target/bench/`, each with its baseline in the same run. One file per benchmark
//! (`forward`, `migrate` with `drain`, `hot`, `room`, `transcode`, `recovery`, `ha`, `janus`,
//! `adaptive`, `placement`, `turn`); what several share: `process` (child processes, CPU
//! pinning and CPU time), `fanout` (the synthetic RTP peers of `forward` and `janus`),
//! `cluster` (a local `ferry` cluster and its HTTP API), `sdk_peer` (SDK clients), `etcd`,
//! `report` (JSON and percentiles).

use std::net::SocketAddr;

use anyhow::Result;

mod adaptive;
mod cluster;
mod etcd;
mod fanout;
mod forward;
mod ha;
mod hot;
mod janus;
mod migrate;
mod placement;
mod process;
mod recovery;
mod report;
mod room;
mod sdk_peer;
mod transcode;
mod turn;

use forward::ForwardArgs;
use placement::PlacementArgs;
use turn::TurnArgs;

/// Benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// One publisher fanned out to N SRTP subscribers, against a raw-UDP relay.
    Forward(ForwardArgs),
    /// Placement under scale events: keys moved and load spread, ours
    /// against a vnode ring and Maglev.
    Placement(PlacementArgs),
    /// Live migration of N sessions between two nodes behind an edge:
    /// blackout at the receiver, migration time, state moved.
    Migrate(migrate::MigrateArgs),
    /// Viewers of one stream beyond its origin's share: where the scheduler puts them (bounded
    /// load over the nodes, fed by the cascade relay), what each node carries, and what the
    /// viewers receive.
    HotStream(hot::HotStreamArgs),
    /// A join storm into one room over the nodes (WebSocket participants): events delivered per
    /// participant, join latency, CPU per node, with and without merge windows and lazy
    /// subscription.
    Room(room::RoomArgs),
    /// Transcodes of a real VP8 stream, 1, 2, 4 … at once: each rung's real-time factor and
    /// CPU, the node's CPU, and bare ffmpeg on the same file as the baseline.
    Transcode(transcode::TranscodeArgs),
    /// Drain a node with N sessions: time to empty it, packets lost.
    Drain(migrate::DrainArgs),
    /// SIGKILL the node of an SDK viewer, then of an SDK publisher: time until media plays
    /// again (p50/p95/max over the trials).
    Recovery(recovery::RecoveryArgs),
    /// Scheduler replicas on a real etcd cluster: the leader SIGKILLed mid-drain, an etcd
    /// member killed, a node killed — failover time, drain, packets lost, recovery.
    Ha(ha::HaArgs),
    /// The TURN fleet under scale events (relays join, drain, are removed, a zone is lost):
    /// users moved against the minimum, load spread (simulated, the scheduler's own code).
    Turn(TurnArgs),
    /// The fan-out of `forward` through Janus 1.1's streaming plugin (the Debian `janus`
    /// package), in a network namespace of its own.
    Janus(janus::JanusArgs),
    /// Viewers on simulated links (capacity drawn from a spread, stepped down and up): time to
    /// settle after a drop and to climb after the capacity returns, link use, loss, layer flaps;
    /// beside it the same links with every viewer pinned to the top layer (adaptation off) as
    /// the baseline.
    Adaptive(adaptive::AdaptiveArgs),
    /// The raw-UDP fan-out baseline (started by `forward`).
    #[command(hide = true)]
    Relay {
        /// Listen address.
        #[arg(long, default_value = "127.0.0.1:0")]
        udp: SocketAddr,
    },
}

pub async fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Forward(args) => forward::forward(args).await,
        BenchCommand::Placement(args) => placement::placement(args),
        BenchCommand::Migrate(args) => migrate::migrate(args).await,
        BenchCommand::HotStream(args) => hot::hot_stream(args).await,
        BenchCommand::Room(args) => room::room(args).await,
        BenchCommand::Transcode(args) => transcode::transcode(args).await,
        BenchCommand::Drain(args) => migrate::drain(args).await,
        BenchCommand::Recovery(args) => recovery::recovery(args).await,
        BenchCommand::Ha(args) => ha::ha(args).await,
        BenchCommand::Turn(args) => turn::turn(args),
        BenchCommand::Janus(args) => janus::janus(args).await,
        BenchCommand::Adaptive(args) => adaptive::adaptive(args),
        BenchCommand::Relay { udp } => forward::relay(udp).await,
    }
}
