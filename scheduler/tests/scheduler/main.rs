//! The scheduler's HTTP API against its spec, and the migrations it orders from nodes. One
//! binary; each file a module.

mod api;
mod node_migrations;
