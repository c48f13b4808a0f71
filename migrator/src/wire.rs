//! The migration protocol's messages and their protobuf encoding.
//!
//! Hand-written prost messages, no `.proto` file. Field tags are part of the
//! wire contract between node versions: never reuse or renumber one; add
//! fields with new tags. A reader ignores unknown fields and fills defaults
//! for missing ones. Every message is one [`Message`]: the Migration ID plus
//! one [`Body`]; on the wire it is a `Frame` whose `version` is
//! [`WIRE_VERSION`] — a reader accepts that version and every older one.
//!
//! Decoding validates everything a peer controls (IDs, versions, sizes) and
//! never panics.

use ferry_proto::api::CutoverMode;
use ferry_proto::state::{SessionSnapshot, WalRecord};
use ferry_proto::{IdError, MigrationId, NodeId, SessionId, StreamId};
use prost::Message as _;

use crate::crc32c::crc32c;

/// Version of the frame layout written by this build.
pub const WIRE_VERSION: u32 = 1;

/// Largest snapshot chunk payload (64 KiB).
pub const MAX_CHUNK: usize = 64 * 1024;

/// One protocol message of one migration.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The migration it belongs to.
    pub id: MigrationId,
    /// What it says.
    pub body: Body,
}

/// The protocol's messages (DESIGN §4). Source → target: `Prepare`,
/// `SnapshotChunk`, `Wal`, `Cutover`, `Commit`, `Abort`. Target → source:
/// `Prepared`, `SnapshotAck`, `SnapshotNack`, `WalAck`, `Ready`,
/// `Committed`, `Abort`.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// Asks the target to take a session.
    Prepare(Prepare),
    /// The target's answer to `Prepare`.
    Prepared(Prepared),
    /// A piece of the encoded snapshot.
    SnapshotChunk(SnapshotChunk),
    /// Chunks received so far.
    SnapshotAck(SnapshotAck),
    /// A chunk failed its checksum: send it again.
    SnapshotNack(SnapshotNack),
    /// WAL records after the snapshot.
    Wal(Wal),
    /// WAL applied so far.
    WalAck(WalAck),
    /// The source froze: final state and last records.
    Cutover(Cutover),
    /// The target installed the final state (inactive) and waits for commit.
    Ready(Ready),
    /// The source committed: the target owns the session from `epoch`.
    Commit(Commit),
    /// The target activated.
    Committed(Committed),
    /// Either side gives up (before commit), or reports a lost session.
    Abort(Abort),
}

impl Body {
    /// A short name for logs and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Body::Prepare(_) => "prepare",
            Body::Prepared(_) => "prepared",
            Body::SnapshotChunk(_) => "snapshot_chunk",
            Body::SnapshotAck(_) => "snapshot_ack",
            Body::SnapshotNack(_) => "snapshot_nack",
            Body::Wal(_) => "wal",
            Body::WalAck(_) => "wal_ack",
            Body::Cutover(_) => "cutover",
            Body::Ready(_) => "ready",
            Body::Commit(_) => "commit",
            Body::Committed(_) => "committed",
            Body::Abort(_) => "abort",
        }
    }

    /// Whether the message travels from the source to the target.
    pub fn to_target(&self) -> bool {
        matches!(
            self,
            Body::Prepare(_)
                | Body::SnapshotChunk(_)
                | Body::Wal(_)
                | Body::Cutover(_)
                | Body::Commit(_)
        )
    }

    /// Whether a transport should carry it on its bulk channel.
    pub fn is_bulk(&self) -> bool {
        matches!(self, Body::SnapshotChunk(_))
    }
}

/// `Prepare`: plan + prewarm request.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepare {
    /// The session to move.
    pub session: SessionId,
    /// Its stream.
    pub stream: StreamId,
    /// Publisher (else viewer).
    pub publisher: bool,
    /// The node that owns it now.
    pub source: NodeId,
    /// The node that should own it.
    pub target: NodeId,
    /// The source's ownership epoch; the target will own it at `epoch + 1`.
    pub epoch: u64,
    /// How the client will be redirected.
    pub mode: CutoverMode,
    /// Snapshot format version the source writes.
    pub snapshot_version: u32,
    /// W3C `traceparent` of the source's migration span (may be empty).
    pub trace_parent: String,
}

/// `Prepared`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Prepared {
    /// The target takes the session (prewarmed).
    #[prost(bool, tag = "1")]
    pub ok: bool,
    /// Why not.
    #[prost(string, tag = "2")]
    pub reason: String,
}

/// `SnapshotChunk`: `seq` counts from 1 to `total`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotChunk {
    /// Position of this chunk, 1..=total.
    #[prost(uint32, tag = "1")]
    pub seq: u32,
    /// Number of chunks.
    #[prost(uint32, tag = "2")]
    pub total: u32,
    /// CRC-32C of `bytes`.
    #[prost(fixed32, tag = "3")]
    pub crc32c: u32,
    /// At most [`MAX_CHUNK`] bytes of the encoded snapshot.
    #[prost(bytes = "vec", tag = "4")]
    pub bytes: Vec<u8>,
}

impl SnapshotChunk {
    /// Whether the payload matches its checksum.
    pub fn is_intact(&self) -> bool {
        crc32c(&self.bytes) == self.crc32c
    }
}

/// Splits an encoded snapshot into checksummed chunks of at most
/// `chunk_size` (capped at [`MAX_CHUNK`]) bytes; an empty input still makes
/// one (empty) chunk.
pub fn chunk_snapshot(bytes: &[u8], chunk_size: usize) -> Vec<SnapshotChunk> {
    let size = chunk_size.clamp(1, MAX_CHUNK);
    let pieces: Vec<&[u8]> = if bytes.is_empty() {
        vec![&[][..]]
    } else {
        bytes.chunks(size).collect()
    };
    let total = u32::try_from(pieces.len()).unwrap_or(u32::MAX);
    pieces
        .into_iter()
        .zip(1..=total)
        .map(|(p, seq)| SnapshotChunk {
            seq,
            total,
            crc32c: crc32c(p),
            bytes: p.to_vec(),
        })
        .collect()
}

/// `SnapshotAck`: every chunk `1..=through_seq` arrived intact (0: none).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotAck {
    /// Highest contiguous chunk received.
    #[prost(uint32, tag = "1")]
    pub through_seq: u32,
}

/// `SnapshotNack`: chunk `seq` arrived corrupt.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotNack {
    /// The chunk to send again.
    #[prost(uint32, tag = "1")]
    pub seq: u32,
}

/// `Wal`: records in position order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Wal {
    /// The records.
    #[prost(message, repeated, tag = "1")]
    pub records: Vec<WalRecord>,
}

/// `WalAck`: every record up to `position` is applied.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WalAck {
    /// Highest applied WAL position (0: none).
    #[prost(uint64, tag = "1")]
    pub position: u64,
}

/// `Cutover`: the source is frozen.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Cutover {
    /// The final state: an encoded [`SessionSnapshot`] without packet caches.
    #[prost(bytes = "vec", tag = "1")]
    pub final_state: Vec<u8>,
    /// Every WAL record the target has not acknowledged, through the last.
    #[prost(message, repeated, tag = "2")]
    pub records: Vec<WalRecord>,
    /// The source's ownership epoch.
    #[prost(uint64, tag = "3")]
    pub epoch: u64,
}

/// `Ready`: final state installed, inactive.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ready {
    /// Highest applied WAL position.
    #[prost(uint64, tag = "1")]
    pub position: u64,
}

/// `Commit`: the point of no return.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Commit {
    /// The epoch the target owns the session at (the source's + 1).
    #[prost(uint64, tag = "1")]
    pub epoch: u64,
    /// Time from the source's freeze to this message, in µs (source clock).
    #[prost(uint64, tag = "2")]
    pub frozen_us: u64,
    /// The source's round-trip estimate to the target, in µs.
    #[prost(uint64, tag = "3")]
    pub rtt_us: u64,
}

/// `Committed`: the target is active.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Committed {
    /// The epoch it owns the session at.
    #[prost(uint64, tag = "1")]
    pub epoch: u64,
    /// Freeze → activate, in µs, as the protocol sees it.
    #[prost(uint64, tag = "2")]
    pub blackout_us: u64,
}

/// `Abort`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Abort {
    /// Why.
    #[prost(string, tag = "1")]
    pub reason: String,
}

/// Why bytes are not a valid message or snapshot.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Not protobuf of the expected shape.
    #[error("malformed message: {0}")]
    Decode(#[from] prost::DecodeError),
    /// Written by a newer frame layout than this reader knows.
    #[error("frame version {0} is newer than {WIRE_VERSION}")]
    FrameTooNew(u32),
    /// Written by a newer snapshot format than this reader accepts.
    #[error("snapshot version {found} is newer than {max}")]
    SnapshotTooNew {
        /// The snapshot's version.
        found: u32,
        /// The newest this reader accepts.
        max: u32,
    },
    /// A version field is zero.
    #[error("missing version")]
    NoVersion,
    /// An ID field is not a valid ID.
    #[error("bad {field}: {error}")]
    BadId {
        /// Which field.
        field: &'static str,
        /// What is wrong.
        error: IdError,
    },
    /// The frame has no body this reader knows.
    #[error("message has no known body")]
    NoBody,
    /// An unknown cutover mode.
    #[error("unknown cutover mode {0}")]
    BadMode(u32),
    /// A chunk larger than [`MAX_CHUNK`].
    #[error("snapshot chunk of {0} bytes exceeds {MAX_CHUNK}")]
    ChunkTooLarge(usize),
}

/// Decodes a snapshot written at `max_version` or older.
pub fn decode_snapshot(bytes: &[u8], max_version: u32) -> Result<SessionSnapshot, WireError> {
    let snap = SessionSnapshot::decode(bytes)?;
    match snap.version {
        0 => Err(WireError::NoVersion),
        v if v > max_version => Err(WireError::SnapshotTooNew {
            found: v,
            max: max_version,
        }),
        _ => Ok(snap),
    }
}

impl Message {
    /// A message of migration `id`.
    pub fn new(id: MigrationId, body: Body) -> Self {
        Self { id, body }
    }

    /// Protobuf encoding.
    pub fn encode(&self) -> Vec<u8> {
        self.to_frame().encode_to_vec()
    }

    /// Length of [`Message::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        self.to_frame().encoded_len()
    }

    /// Decodes and validates a message of [`WIRE_VERSION`] or older.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let frame = Frame::decode(bytes)?;
        match frame.version {
            0 => return Err(WireError::NoVersion),
            v if v > WIRE_VERSION => return Err(WireError::FrameTooNew(v)),
            _ => {}
        }
        let id = MigrationId::new(frame.migration).map_err(|error| WireError::BadId {
            field: "migration",
            error,
        })?;
        let body = match frame.body.ok_or(WireError::NoBody)? {
            FrameBody::Prepare(p) => Body::Prepare(p.try_into()?),
            FrameBody::Prepared(m) => Body::Prepared(m),
            FrameBody::SnapshotChunk(m) => {
                if m.bytes.len() > MAX_CHUNK {
                    return Err(WireError::ChunkTooLarge(m.bytes.len()));
                }
                Body::SnapshotChunk(m)
            }
            FrameBody::SnapshotAck(m) => Body::SnapshotAck(m),
            FrameBody::SnapshotNack(m) => Body::SnapshotNack(m),
            FrameBody::Wal(m) => Body::Wal(m),
            FrameBody::WalAck(m) => Body::WalAck(m),
            FrameBody::Cutover(m) => Body::Cutover(m),
            FrameBody::Ready(m) => Body::Ready(m),
            FrameBody::Commit(m) => Body::Commit(m),
            FrameBody::Committed(m) => Body::Committed(m),
            FrameBody::Abort(m) => Body::Abort(m),
        };
        Ok(Self { id, body })
    }

    fn to_frame(&self) -> Frame {
        let body = match &self.body {
            Body::Prepare(p) => FrameBody::Prepare(p.into()),
            Body::Prepared(m) => FrameBody::Prepared(m.clone()),
            Body::SnapshotChunk(m) => FrameBody::SnapshotChunk(m.clone()),
            Body::SnapshotAck(m) => FrameBody::SnapshotAck(m.clone()),
            Body::SnapshotNack(m) => FrameBody::SnapshotNack(m.clone()),
            Body::Wal(m) => FrameBody::Wal(m.clone()),
            Body::WalAck(m) => FrameBody::WalAck(m.clone()),
            Body::Cutover(m) => FrameBody::Cutover(m.clone()),
            Body::Ready(m) => FrameBody::Ready(m.clone()),
            Body::Commit(m) => FrameBody::Commit(m.clone()),
            Body::Committed(m) => FrameBody::Committed(m.clone()),
            Body::Abort(m) => FrameBody::Abort(m.clone()),
        };
        Frame {
            version: WIRE_VERSION,
            migration: self.id.as_str().to_owned(),
            body: Some(body),
        }
    }
}

/// The envelope on the wire.
#[derive(Clone, PartialEq, prost::Message)]
struct Frame {
    #[prost(uint32, tag = "1")]
    version: u32,
    #[prost(string, tag = "2")]
    migration: String,
    #[prost(
        oneof = "FrameBody",
        tags = "10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21"
    )]
    body: Option<FrameBody>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum FrameBody {
    #[prost(message, tag = "10")]
    Prepare(PrepareWire),
    #[prost(message, tag = "11")]
    Prepared(Prepared),
    #[prost(message, tag = "12")]
    SnapshotChunk(SnapshotChunk),
    #[prost(message, tag = "13")]
    SnapshotAck(SnapshotAck),
    #[prost(message, tag = "14")]
    SnapshotNack(SnapshotNack),
    #[prost(message, tag = "15")]
    Wal(Wal),
    #[prost(message, tag = "16")]
    WalAck(WalAck),
    #[prost(message, tag = "17")]
    Cutover(Cutover),
    #[prost(message, tag = "18")]
    Ready(Ready),
    #[prost(message, tag = "19")]
    Commit(Commit),
    #[prost(message, tag = "20")]
    Committed(Committed),
    #[prost(message, tag = "21")]
    Abort(Abort),
}

#[derive(Clone, PartialEq, prost::Message)]
struct PrepareWire {
    #[prost(string, tag = "1")]
    session: String,
    #[prost(string, tag = "2")]
    stream: String,
    #[prost(bool, tag = "3")]
    publisher: bool,
    #[prost(string, tag = "4")]
    source: String,
    #[prost(string, tag = "5")]
    target: String,
    #[prost(uint64, tag = "6")]
    epoch: u64,
    /// 0 edge, 1 ICE restart, 2 reconnect.
    #[prost(uint32, tag = "7")]
    mode: u32,
    #[prost(uint32, tag = "8")]
    snapshot_version: u32,
    #[prost(string, tag = "9")]
    trace_parent: String,
}

impl From<&Prepare> for PrepareWire {
    fn from(p: &Prepare) -> Self {
        Self {
            session: p.session.as_str().to_owned(),
            stream: p.stream.as_str().to_owned(),
            publisher: p.publisher,
            source: p.source.as_str().to_owned(),
            target: p.target.as_str().to_owned(),
            epoch: p.epoch,
            mode: match p.mode {
                CutoverMode::Edge => 0,
                CutoverMode::IceRestart => 1,
                CutoverMode::Reconnect => 2,
            },
            snapshot_version: p.snapshot_version,
            trace_parent: p.trace_parent.clone(),
        }
    }
}

impl TryFrom<PrepareWire> for Prepare {
    type Error = WireError;

    fn try_from(w: PrepareWire) -> Result<Self, WireError> {
        fn id<T>(
            field: &'static str,
            s: String,
            f: impl FnOnce(String) -> Result<T, IdError>,
        ) -> Result<T, WireError> {
            f(s).map_err(|error| WireError::BadId { field, error })
        }
        if w.snapshot_version == 0 {
            return Err(WireError::NoVersion);
        }
        Ok(Self {
            session: id("session", w.session, SessionId::new)?,
            stream: id("stream", w.stream, StreamId::new)?,
            publisher: w.publisher,
            source: id("source", w.source, NodeId::new)?,
            target: id("target", w.target, NodeId::new)?,
            epoch: w.epoch,
            mode: match w.mode {
                0 => CutoverMode::Edge,
                1 => CutoverMode::IceRestart,
                2 => CutoverMode::Reconnect,
                m => return Err(WireError::BadMode(m)),
            },
            snapshot_version: w.snapshot_version,
            trace_parent: w.trace_parent,
        })
    }
}

#[cfg(test)]
mod tests {
    use ferry_proto::state::{WalCachePacket, wal_record};

    use super::*;

    fn mid() -> MigrationId {
        MigrationId::new("m-1").unwrap()
    }

    fn prepare() -> Prepare {
        Prepare {
            session: SessionId::new("s1").unwrap(),
            stream: StreamId::new("cam").unwrap(),
            publisher: true,
            source: NodeId::new("node-a").unwrap(),
            target: NodeId::new("node-b").unwrap(),
            epoch: 7,
            mode: CutoverMode::IceRestart,
            snapshot_version: 1,
            trace_parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
        }
    }

    fn record(position: u64) -> WalRecord {
        WalRecord {
            position,
            change: Some(wal_record::Change::CachePacket(WalCachePacket {
                track: 0,
                ssrc: 1,
                ext_seq: position,
                data: vec![position as u8; 10],
            })),
        }
    }

    #[test]
    fn every_body_round_trips() {
        let bodies = vec![
            Body::Prepare(prepare()),
            Body::Prepared(Prepared {
                ok: false,
                reason: "full".into(),
            }),
            Body::SnapshotChunk(chunk_snapshot(b"hello", 64).remove(0)),
            Body::SnapshotAck(SnapshotAck { through_seq: 3 }),
            Body::SnapshotNack(SnapshotNack { seq: 2 }),
            Body::Wal(Wal {
                records: vec![record(1), record(2)],
            }),
            Body::WalAck(WalAck { position: 2 }),
            Body::Cutover(Cutover {
                final_state: vec![1, 2, 3],
                records: vec![record(3)],
                epoch: 7,
            }),
            Body::Ready(Ready { position: 3 }),
            Body::Commit(Commit {
                epoch: 8,
                frozen_us: 1500,
                rtt_us: 200,
            }),
            Body::Committed(Committed {
                epoch: 8,
                blackout_us: 1600,
            }),
            Body::Abort(Abort {
                reason: "timeout".into(),
            }),
        ];
        for body in bodies {
            let m = Message::new(mid(), body);
            let bytes = m.encode();
            assert_eq!(bytes.len(), m.encoded_len());
            assert_eq!(Message::decode(&bytes).unwrap(), m);
        }
    }

    #[test]
    fn chunks_cover_the_input_and_detect_corruption() {
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let chunks = chunk_snapshot(&data, 1 << 20);
        assert_eq!(chunks.len(), 4, "capped at 64 KiB");
        assert!(chunks.iter().all(|c| c.bytes.len() <= MAX_CHUNK));
        assert_eq!(
            chunks.iter().map(|c| c.seq).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert!(chunks.iter().all(|c| c.total == 4 && c.is_intact()));
        let joined: Vec<u8> = chunks.iter().flat_map(|c| c.bytes.clone()).collect();
        assert_eq!(joined, data);
        let mut bad = chunks[1].clone();
        bad.bytes[100] ^= 0x01;
        assert!(!bad.is_intact());
        let empty = chunk_snapshot(&[], 10);
        assert_eq!((empty.len(), empty[0].total), (1, 1));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(Message::decode(&[0xff, 0xff, 0xff]).is_err());
        assert!(matches!(Message::decode(&[]), Err(WireError::NoVersion)));
        let mut f = Message::new(mid(), Body::Prepare(prepare())).to_frame();
        f.migration = "bad id".into();
        assert!(matches!(
            Message::decode(&f.encode_to_vec()),
            Err(WireError::BadId {
                field: "migration",
                ..
            })
        ));
        let mut f = Message::new(mid(), Body::Prepare(prepare())).to_frame();
        if let Some(FrameBody::Prepare(p)) = &mut f.body {
            p.mode = 9;
        }
        assert_eq!(
            Message::decode(&f.encode_to_vec()),
            Err(WireError::BadMode(9))
        );
        let mut f = Message::new(mid(), Body::Ready(Ready::default())).to_frame();
        f.version = WIRE_VERSION + 1;
        assert_eq!(
            Message::decode(&f.encode_to_vec()),
            Err(WireError::FrameTooNew(WIRE_VERSION + 1))
        );
        f.version = WIRE_VERSION;
        f.body = None;
        assert_eq!(Message::decode(&f.encode_to_vec()), Err(WireError::NoBody));
        let big = SnapshotChunk {
            seq: 1,
            total: 1,
            crc32c: 0,
            bytes: vec![0; MAX_CHUNK + 1],
        };
        let f = Message::new(mid(), Body::SnapshotChunk(big)).to_frame();
        assert_eq!(
            Message::decode(&f.encode_to_vec()),
            Err(WireError::ChunkTooLarge(MAX_CHUNK + 1))
        );
    }

    /// A frame from a newer writer with a field this reader does not know is
    /// still read (unknown fields are skipped).
    #[test]
    fn unknown_fields_are_ignored() {
        #[derive(Clone, PartialEq, prost::Message)]
        struct ReadyV2 {
            #[prost(uint64, tag = "1")]
            position: u64,
            #[prost(string, tag = "9")]
            extra: String,
        }
        #[derive(Clone, PartialEq, prost::Message)]
        struct FrameV2 {
            #[prost(uint32, tag = "1")]
            version: u32,
            #[prost(string, tag = "2")]
            migration: String,
            #[prost(message, optional, tag = "18")]
            ready: Option<ReadyV2>,
            #[prost(uint64, tag = "99")]
            trailer: u64,
        }
        let bytes = FrameV2 {
            version: WIRE_VERSION,
            migration: "m-1".into(),
            ready: Some(ReadyV2 {
                position: 4,
                extra: "x".into(),
            }),
            trailer: 5,
        }
        .encode_to_vec();
        assert_eq!(
            Message::decode(&bytes).unwrap(),
            Message::new(mid(), Body::Ready(Ready { position: 4 }))
        );
    }

    /// "N+1 restores N": a hand-made snapshot of an older layout (fewer
    /// fields) is read by a newer reader, missing fields defaulted; a
    /// snapshot newer than the reader is refused.
    #[test]
    fn snapshot_reader_accepts_its_version_and_older() {
        #[derive(Clone, PartialEq, prost::Message)]
        struct SnapshotV1 {
            #[prost(uint32, tag = "1")]
            version: u32,
            #[prost(string, tag = "2")]
            session_id: String,
            #[prost(string, tag = "3")]
            stream: String,
            #[prost(bool, tag = "4")]
            publisher: bool,
            #[prost(string, tag = "13")]
            answer_sdp: String,
        }
        let old = SnapshotV1 {
            version: 1,
            session_id: "s1".into(),
            stream: "cam".into(),
            publisher: true,
            answer_sdp: "v=0".into(),
        }
        .encode_to_vec();
        for reader in [1, 2] {
            let snap = decode_snapshot(&old, reader).unwrap();
            assert_eq!(snap.version, 1);
            assert_eq!(snap.session_id, "s1");
            assert_eq!(snap.answer_sdp, "v=0");
            assert!(snap.ice.is_none() && snap.media.is_empty() && snap.rtcp_ssrc == 0);
        }

        #[derive(Clone, PartialEq, prost::Message)]
        struct SnapshotV2 {
            #[prost(uint32, tag = "1")]
            version: u32,
            #[prost(string, tag = "2")]
            session_id: String,
            #[prost(bytes = "vec", tag = "40")]
            new_state: Vec<u8>,
        }
        let new = SnapshotV2 {
            version: 2,
            session_id: "s1".into(),
            new_state: vec![1, 2],
        }
        .encode_to_vec();
        assert_eq!(decode_snapshot(&new, 2).unwrap().session_id, "s1");
        assert_eq!(
            decode_snapshot(&new, 1),
            Err(WireError::SnapshotTooNew { found: 2, max: 1 })
        );
        let unversioned = SnapshotV1::default().encode_to_vec();
        assert_eq!(decode_snapshot(&unversioned, 1), Err(WireError::NoVersion));
    }
}
