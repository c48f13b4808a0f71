//! One m-line of a session as offer/answer settled it (`node/negotiate`): what the forwarder
//! reads of it (codec, payload types, feedback, header extensions, SSRCs), and its snapshot
//! form.

use ferry_proto::state::{ExtMapEntry, MediaLineState};

use crate::codec::Codec;

/// The parameters of one m-line as negotiated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaLine {
    /// `a=mid`.
    pub mid: String,
    /// Video (else audio).
    pub video: bool,
    /// Whether we accepted the m-line (else it is rejected with port 0).
    pub accepted: bool,
    /// The codec.
    pub codec: Codec,
    /// Its payload type on this session.
    pub pt: u8,
    /// RTX payload type, if negotiated.
    pub rtx_pt: Option<u8>,
    /// `a=fmtp` parameters we answered (empty if none).
    pub fmtp: String,
    /// Generic NACK negotiated.
    pub nack: bool,
    /// PLI negotiated.
    pub pli: bool,
    /// FIR negotiated.
    pub fir: bool,
    /// REMB negotiated.
    pub remb: bool,
    /// Transport-wide congestion control feedback negotiated (`transport-cc`, with the
    /// transport-wide sequence number extension).
    pub twcc: bool,
    /// Header extensions in use: (id, uri).
    pub extmap: Vec<(u8, String)>,
    /// Publisher: SSRCs it declared, (media, rtx).
    pub remote_ssrcs: Vec<(u32, Option<u32>)>,
    /// Publisher: simulcast rids it sends.
    pub rids: Vec<String>,
    /// Viewer: our outgoing SSRC.
    pub local_ssrc: u32,
    /// Viewer: our outgoing RTX SSRC.
    pub local_rtx_ssrc: Option<u32>,
    /// Viewer: which of the publisher's m-lines this one plays.
    pub source: Option<usize>,
    /// Why a live line was not accepted (logged, and shown in `GET /v1/sessions/{id}`: a viewer
    /// that gets audio only can find out why); `None` when accepted or disabled by the offer.
    pub rejected: Option<String>,
}

impl MediaLine {
    /// The id of a header extension by URI, if negotiated.
    pub fn ext_id(&self, uri: &str) -> Option<u8> {
        self.extmap
            .iter()
            .find(|(_, u)| u == uri)
            .map(|(id, _)| *id)
    }

    /// Exports the line.
    pub fn to_state(&self) -> MediaLineState {
        MediaLineState {
            mid: self.mid.clone(),
            video: self.video,
            accepted: self.accepted,
            codec: self.codec.to_wire(),
            pt: u32::from(self.pt),
            rtx_pt: self.rtx_pt.map(u32::from),
            fmtp: self.fmtp.clone(),
            nack: self.nack,
            pli: self.pli,
            fir: self.fir,
            remb: self.remb,
            twcc: self.twcc,
            extmap: self
                .extmap
                .iter()
                .map(|(id, uri)| ExtMapEntry {
                    id: u32::from(*id),
                    uri: uri.clone(),
                })
                .collect(),
            remote_ssrcs: self.remote_ssrcs.iter().map(|(m, _)| *m).collect(),
            remote_rtx_ssrcs: self
                .remote_ssrcs
                .iter()
                .map(|(_, r)| r.unwrap_or(0))
                .collect(),
            rids: self.rids.clone(),
            local_ssrc: self.local_ssrc,
            local_rtx_ssrc: self.local_rtx_ssrc,
            source: self.source.map(|s| s as u32),
            rejected: self.rejected.clone(),
        }
    }

    /// Rebuilds a line from a snapshot.
    pub fn from_state(s: &MediaLineState) -> Result<Self, RestoreError> {
        let codec = Codec::from_wire(s.codec).ok_or(RestoreError::UnknownCodec(s.codec))?;
        let byte = |v: u32, what: &'static str| {
            u8::try_from(v).map_err(|_| RestoreError::OutOfRange { what, value: v })
        };
        Ok(Self {
            mid: s.mid.clone(),
            video: s.video,
            accepted: s.accepted,
            codec,
            pt: byte(s.pt, "payload type")?,
            rtx_pt: s.rtx_pt.map(|p| byte(p, "rtx payload type")).transpose()?,
            fmtp: s.fmtp.clone(),
            nack: s.nack,
            pli: s.pli,
            fir: s.fir,
            remb: s.remb,
            twcc: s.twcc,
            extmap: s
                .extmap
                .iter()
                .map(|e| Ok((byte(e.id, "extension id")?, e.uri.clone())))
                .collect::<Result<_, RestoreError>>()?,
            remote_ssrcs: s
                .remote_ssrcs
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let rtx = s.remote_rtx_ssrcs.get(i).copied().filter(|r| *r != 0);
                    (*m, rtx)
                })
                .collect(),
            rids: s.rids.clone(),
            local_ssrc: s.local_ssrc,
            local_rtx_ssrc: s.local_rtx_ssrc,
            source: s.source.map(|v| v as usize),
            rejected: s.rejected.clone(),
        })
    }
}

/// Why a session (or one of its m-lines) could not be rebuilt from a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// Taken by a newer node than this one.
    #[error("snapshot version {got} is newer than this node's {ours}")]
    NewerVersion {
        /// The snapshot's version.
        got: u32,
        /// The newest this node reads.
        ours: u32,
    },
    /// A session or stream id that is not one.
    #[error("bad id: {0}")]
    BadId(#[from] ferry_proto::ids::IdError),
    /// A part every session has is missing.
    #[error("snapshot has no {0} state")]
    Missing(&'static str),
    /// A codec this node does not know.
    #[error("unknown codec {0}")]
    UnknownCodec(u32),
    /// A field past its wire range (payload types and extension ids are bytes).
    #[error("{what} {value} out of range")]
    OutOfRange {
        /// Which field.
        what: &'static str,
        /// Its value.
        value: u32,
    },
    /// A track names an m-line the snapshot does not have.
    #[error("track refers to m-line {0}")]
    NoSuchLine(usize),
    /// An SRTP context that does not hold together.
    #[error("SRTP: {0}")]
    Srtp(#[from] crate::srtp::SrtpError),
    /// The relay address the session came through is not an address.
    #[error("bad via address {0:?}")]
    BadVia(String),
}
