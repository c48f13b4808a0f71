//! The wire encoding of replica messages: one version byte, then postcard (serde, varints).
//!
//! Postcard's encoding of our types is fixed by their field and variant order, so types here
//! and in `op`/`state`/`digest` only ever grow at the end. Decoding never panics: arbitrary
//! bytes give a `CodecError`.

use serde::{Deserialize, Serialize};

use crate::digest::Subtree;
use crate::op::Op;
use crate::replica::{Ack, AeFinish, AeReply, AeRequest, Summary, Watermark};
use crate::state::Delta;

/// Version byte in front of every message.
pub const WIRE_VERSION: u8 = 1;
/// Largest message accepted.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Everything replicas of a room send each other.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Message {
    /// A freshly stamped operation (the fast path).
    Op(Op),
    /// Entries the receiver has not acknowledged.
    Delta(Delta),
    /// The receiver's version vector after a delta.
    Ack(Ack),
    /// Anti-entropy: my digest.
    AeRequest(AeRequest),
    /// Anti-entropy: the keys that differ and my subtrees for them.
    AeReply(AeReply),
    /// Anti-entropy: my subtrees for the keys that differ.
    AeFinish(AeFinish),
    /// Subtrees sent on their own (e.g. to a rejoining replica).
    Subtrees(Vec<Subtree>),
    /// Up the sync tree: a child's subtree summary.
    Summary(Summary),
    /// Down the sync tree: the parent's collection watermark.
    Watermark(Watermark),
}

/// A message that could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// Empty input.
    #[error("empty message")]
    Empty,
    /// Unknown version byte.
    #[error("wire version {0}, expected {WIRE_VERSION}")]
    Version(u8),
    /// Over `MAX_MESSAGE_BYTES`.
    #[error("message of {0} bytes is over the limit")]
    TooLarge(usize),
    /// Bytes left after the message.
    #[error("{0} bytes after the message")]
    TrailingBytes(usize),
    /// Not a valid message.
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// Encodes any wire value (`Message`, `Op`, `Delta`, …) with the version byte.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let out = postcard::to_extend(value, vec![WIRE_VERSION])
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
    if out.len() > MAX_MESSAGE_BYTES {
        return Err(CodecError::TooLarge(out.len()));
    }
    Ok(out)
}

/// Decodes a wire value written by `encode`.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty)?;
    if version != WIRE_VERSION {
        return Err(CodecError::Version(version));
    }
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(CodecError::TooLarge(bytes.len()));
    }
    let (value, rest) =
        postcard::take_from_bytes(body).map_err(|e| CodecError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CodecError::TrailingBytes(rest.len()));
    }
    Ok(value)
}
