//! The forwarder: what happens to a media packet between a publisher and its viewers.
//!
//! - [`ingest`]: a publisher's tracks as they arrive (simulcast encodings, SVC layers, keyframes,
//!   the rates each layer is measured at).
//! - [`munger`]: the per-viewer rewrite that makes a switched layer look like one continuous
//!   stream (SSRC, sequence numbers, timestamps, picture ids, dependency descriptors).
//! - [`adapt`]: per-viewer layer choice within the viewer's bandwidth estimate (the allocator).
//! - [`egress`]: a viewer's outgoing tracks (RTX history, pacing of probes, transport-wide
//!   sequence numbers).
//!
//! The [`crate::node::Node`] methods that tie them together live in `node/forward.rs`.

pub mod adapt;
pub mod egress;
pub mod ingest;
pub mod line;
pub mod munger;
