//! Real encoded media for [`crate::peer::Peer`]: reading and writing the files an SDK streams
//! from and records to ([`ivf`] for VP8, [`annexb`] for H.264), splitting frames into RTP
//! payloads ([`mod@packetize`]) and putting them back together on the receiving side
//! ([`depacketize`]). All of it is sans-IO apart from the file formats' `Read`/`Write`.

pub mod annexb;
pub mod depacketize;
pub mod ivf;
pub mod nal;
pub mod packetize;
mod payload;

pub use depacketize::{AssemblerConfig, AssemblerStats, Frame, FrameAssembler};
pub use packetize::{PacketizeError, Payloads, packetize};
