//! Length-prefixed framing of [`Message`]s over byte pipes, shared by the
//! QUIC and RDMA transports: a 4-byte big-endian length, then the protobuf
//! encoding of one message.

use crate::wire::{Message, WireError};

/// Largest encoded message accepted (16 MiB): a `Cutover` carries the final
/// state and the unacknowledged WAL, chunks are at most 64 KiB.
pub const MAX_FRAME: usize = 16 << 20;

/// Why a byte stream is not a sequence of frames.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A length prefix above [`MAX_FRAME`].
    #[error("frame of {0} bytes exceeds {MAX_FRAME}")]
    TooLarge(usize),
    /// The frame's contents are not a valid message.
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// One frame: length prefix and message.
pub fn encode_frame(msg: &Message) -> Vec<u8> {
    let body = msg.encode();
    let mut out = Vec::with_capacity(4 + body.len());
    // An encoded message never nears 4 GiB: the largest parts are bounded
    // by MAX_CHUNK and by what the host puts in its final state.
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Reassembles frames from bytes that arrive in arbitrary pieces.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    start: usize,
}

impl FrameDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held that do not yet form a whole frame.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole frame, if one is buffered. After an error the stream
    /// is unusable (its framing is lost) and should be closed.
    pub fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        let avail = &self.buf[self.start..];
        let Some(prefix) = avail.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*prefix) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        let Some(body) = avail.get(4..4 + len) else {
            return Ok(None);
        };
        let msg = Message::decode(body);
        self.start += 4 + len;
        if self.start > self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(Some(msg?))
    }
}

#[cfg(test)]
mod tests {
    use ferry_proto::MigrationId;

    use super::*;
    use crate::wire::{Abort, Body, WalAck};

    fn msgs() -> Vec<Message> {
        (0..20)
            .map(|i| {
                let id = MigrationId::new(format!("m{i}")).unwrap();
                if i % 2 == 0 {
                    Message::new(id, Body::WalAck(WalAck { position: i }))
                } else {
                    Message::new(
                        id,
                        Body::Abort(Abort {
                            reason: "x".repeat(i as usize * 7),
                        }),
                    )
                }
            })
            .collect()
    }

    #[test]
    fn frames_survive_any_split() {
        let all: Vec<u8> = msgs().iter().flat_map(encode_frame).collect();
        for piece in [1, 2, 3, 5, 7, 64, all.len()] {
            let mut d = FrameDecoder::new();
            let mut got = Vec::new();
            for part in all.chunks(piece) {
                d.push(part);
                while let Some(m) = d.next_message().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, msgs(), "piece size {piece}");
            assert_eq!(d.pending(), 0);
        }
    }

    #[test]
    fn oversized_and_garbage_frames_are_errors() {
        let mut d = FrameDecoder::new();
        d.push(&(MAX_FRAME as u32 + 1).to_be_bytes());
        assert_eq!(d.next_message(), Err(FrameError::TooLarge(MAX_FRAME + 1)));
        let mut d = FrameDecoder::new();
        d.push(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
        assert!(matches!(d.next_message(), Err(FrameError::Wire(_))));
    }
}
