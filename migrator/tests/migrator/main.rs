//! The migration protocol between two migrators (lossy, reordering, partitioned links), its tokio
//! driver, and the QUIC transport with mutual TLS. One binary; each file a module.

// Tests and benches drive the cores with the real clock (clippy.toml forbids it in the cores).
#![allow(clippy::disallowed_methods)]

mod driver;
mod protocol;
mod quic;
mod support;
