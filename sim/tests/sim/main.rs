//! The node cores in the seeded simulation ([`ferry_sim::testbed`]): forwarding, adaptive layer
//! selection, admission and overload, migrations and moves, relay trees, recordings, tickets,
//! and the sans-IO peer against the node's pieces. One binary; each file a module.

mod adaptive;
mod admission;
mod forwarding;
mod migration;
mod moves;
mod overload;
mod peer;
mod recording_moves;
mod relay_link;
mod relay_tree;
mod relay_wait;
mod resume;
mod support;
mod ticket;
