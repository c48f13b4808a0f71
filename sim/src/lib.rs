//! Ferry's deterministic world, for tests and simulation benches: nothing here runs in a node.
//!
//! - [`net`]: a seeded datagram network (delay, jitter, loss, reorder, duplication, bottleneck
//!   queues, partitions) and a virtual clock.
//! - [`testbed`]: real node cores ([`ferry_sfu::node::Node`]), an edge and test peers on that
//!   network, all in one thread. A failing seed replays exactly.
//!
//! The integration tests (`sim/tests/sim/`) drive the node's forwarding, migrations, relays,
//! recordings and overload through it.

pub mod net;
pub mod testbed;
