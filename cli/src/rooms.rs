//! The node's room server (`ferry-room`'s `server`): rooms' WebSockets on the node's HTTP
//! server, replicas found among the other nodes of the cluster directory, the cluster token
//! between nodes, the node's access tokens (grant `join`) for clients. docs/rooms.md.

use std::sync::Arc;

use ferry_proto::auth::Verifier;
use ferry_proto::ids::NodeId;
use ferry_room::server::{Peers, RoomServer, RoomServerConfig, SnapshotTarget};
use ferry_sfu::driver::membership::SharedDirectory;

/// The room flags of `ferry node` and `ferry dev`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RoomArgs {
    /// Room events to clients go out once per window (ms; 0: every change at once).
    #[arg(
        long = "room-window-ms",
        env = "FERRY_ROOM_WINDOW_MS",
        default_value_t = 50
    )]
    pub window_ms: u64,
    /// A room with more operations per second than this runs on a task of its own, so the
    /// node's other rooms keep their latency (0: never).
    #[arg(
        long = "room-hot-ops",
        env = "FERRY_ROOM_HOT_OPS",
        default_value_t = 300
    )]
    pub hot_ops: u64,
    /// An isolated room whose rate stayed under half of --room-hot-ops this long (ms) goes back
    /// to the shared task.
    #[arg(
        long = "room-hot-cool-ms",
        env = "FERRY_ROOM_HOT_COOL_MS",
        default_value_t = 10_000
    )]
    pub hot_cool_ms: u64,
    /// Each room's state is stored with the scheduler this often when it changed (ms), so
    /// the rooms survive a restart of the whole cluster; 0: never (without a scheduler
    /// neither).
    #[arg(
        long = "room-snapshot-ms",
        env = "FERRY_ROOM_SNAPSHOT_MS",
        default_value_t = 5000
    )]
    pub snapshot_ms: u64,
    /// Ops go from the node that stamped them down a push tree over the room's nodes: each
    /// node passes an op to at most this many others (1 or more; 64: one hop up to 65 nodes,
    /// two up to 4,161). Also the children per node of the room's sync tree (deltas and the
    /// tombstone collection's watermark).
    #[arg(
        long = "room-fanout",
        env = "FERRY_ROOM_FANOUT",
        default_value_t = ferry_room::fanout::DEFAULT_FANOUT as u64,
        value_parser = clap::value_parser!(u64).range(1..=4096)
    )]
    pub fanout: u64,
}

/// A node's room server and the directory it reads its peers from.
pub(crate) struct NodeRooms {
    pub server: Arc<RoomServer>,
    /// Give it to the node (`NodeOptions::directory`), which keeps it up to date.
    pub directory: SharedDirectory,
}

impl NodeRooms {
    /// Starts the room server of node `id` (a Tokio runtime must be running); its rooms'
    /// snapshots go to `scheduler`.
    pub fn start(
        id: &NodeId,
        cluster_token: &str,
        tokens: Arc<Verifier>,
        tls: bool,
        args: &RoomArgs,
        scheduler: Option<&str>,
    ) -> Self {
        let mut config = RoomServerConfig::new(id.clone());
        config.cluster_token = Some(cluster_token.to_owned());
        config.tokens = Some(tokens);
        config.tls = tls;
        config.window_ms = args.window_ms;
        config.hot_ops_per_s = args.hot_ops;
        config.hot_cool_ms = args.hot_cool_ms;
        config.fanout = args.fanout as usize;
        config.snapshots = scheduler
            .filter(|_| args.snapshot_ms > 0)
            .map(|url| SnapshotTarget {
                urls: url.split(',').map(|u| u.trim().to_owned()).collect(),
                interval_ms: args.snapshot_ms,
            });
        let directory: SharedDirectory = Arc::default();
        let d = directory.clone();
        let peers: Peers = Arc::new(move || {
            let d = d.lock().unwrap_or_else(|e| e.into_inner());
            d.http.iter().map(|(n, u)| (n.clone(), u.clone())).collect()
        });
        let server = RoomServer::new(config, peers);
        server.start();
        NodeRooms { server, directory }
    }

    /// The node's extra routes: the browser SDK's files and the rooms.
    /// The routes the binary adds to a node: the browser SDK's files, the rooms' and the
    /// transcodes' APIs.
    pub fn routes(&self, transcoders: &ferry_transcode::Transcoders) -> axum::Router {
        crate::sdk_files::routes()
            .merge(ferry_room::server::routes(self.server.clone()))
            .merge(transcoders.routes())
    }

    /// `/metrics` extras: process figures, the rooms' and the transcodes'.
    pub fn metrics(
        &self,
        transcoders: &ferry_transcode::Transcoders,
    ) -> ferry_sfu::driver::http::ProcessMetrics {
        let server = self.server.clone();
        let transcoders = transcoders.clone();
        ferry_sfu::driver::http::ProcessMetrics(Arc::new(move || {
            let mut s = crate::alloc::prometheus();
            s.push_str(&server.prometheus());
            s.push_str(&transcoders.prometheus());
            s
        }))
    }
}
