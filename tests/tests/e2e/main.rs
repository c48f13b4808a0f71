//! End to end: the `ferry` binary, headless Chromium, GStreamer, aiortc, etcd, coturn, ffmpeg and
//! an S3 server, for real. One binary, a module per area; the tests of an area run side by side,
//! never beside another area's (`ferry_tests::area`). One area: `cargo test -p ferry-tests --test
//! e2e -- adaptive::`.

mod access;
mod adaptive;
mod bad_input;
mod config;
mod deploy;
mod dev_demo;
mod harness;
mod hot_stream;
mod interop;
mod migration;
mod migration_crash;
mod ops;
mod otlp;
mod quality;
mod recording;
mod recording_crash;
mod rooms;
mod scheduler_ha;
mod sdk_recovery;
mod sdk_rooms;
mod sdk_rust;
mod sdk_turn;
mod tickets;
mod transcode;
mod turn;
mod whip_whep;
