//! Rooms: the CRDT's laws (proptest), replicas converging over lossy links, and the codec against
//! arbitrary bytes. One binary; each file a module.

mod codec_fuzz;
mod common;
mod crdt_laws;
mod replica;
