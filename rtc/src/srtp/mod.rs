//! SRTP and SRTCP (RFC 3711) with AES_CM_128_HMAC_SHA1_80, AEAD_AES_128_GCM and
//! AEAD_AES_256_GCM (RFC 7714).
//!
//! One [`SrtpContext`] is one direction of one session: everything we encrypt toward a peer,
//! or everything we decrypt from it. Keys come from the DTLS-SRTP exporter (RFC 5764); session
//! keys are derived once (key derivation rate 0). All per-SSRC state (rollover counter,
//! highest sequence number, replay windows, SRTCP index) is explicit and can be moved between
//! nodes with [`SrtpContext::snapshot`] / [`SrtpContext::restore`].
//!
//! The hot path works in place on the caller's buffer and does not allocate (a map entry is
//! added the first time an SSRC is seen):
//!
//! ```
//! use ferry_rtc::srtp::{SrtpContext, SrtpProfile};
//!
//! let profile = SrtpProfile::AeadAes128Gcm;
//! let (key, salt) = ([7u8; 16], [9u8; 12]);
//! let mut tx = SrtpContext::new(profile, &key, &salt)?;
//! let mut rx = SrtpContext::new(profile, &key, &salt)?;
//!
//! let rtp = [0x80, 96, 0, 1, 0, 0, 0, 0, 0xca, 0xfe, 0xba, 0xbe, 1, 2, 3];
//! let mut buf = [0u8; 1500];
//! buf[..rtp.len()].copy_from_slice(&rtp);
//! let n = tx.protect_rtp(&mut buf, rtp.len())?;
//! let m = rx.unprotect_rtp(&mut buf[..n])?;
//! assert_eq!(&buf[..m], &rtp);
//! # Ok::<(), ferry_rtc::srtp::SrtpError>(())
//! ```

mod error;
mod kdf;
mod profile;
mod replay;
mod streams;
mod transform;

#[cfg(test)]
mod tests_behaviour;
#[cfg(test)]
mod tests_interop;
#[cfg(test)]
mod tests_vectors;

use std::fmt;

pub use error::SrtpError;
use ferry_proto::state::srtp::{SrtcpStreamState, SrtpContextState, SrtpStreamState};
pub use profile::SrtpProfile;
use replay::{MAX_RTCP_INDEX, MAX_RTP_INDEX, ReplayWindow, estimate_index};
use streams::{StreamMap, WhenFull};
use transform::{RTCP_CLEAR_LEN, RtpMeta, Transform};

/// SSRCs remembered on the unprotect side; beyond this the least recently used is forgotten,
/// so a peer inventing SSRCs cannot grow memory.
pub const MAX_RECV_STREAMS: usize = 64;

/// SSRCs the protect side will track. It never forgets one (that would reset its ROC and could
/// reuse a keystream), so a new SSRC past this cap is refused with [`SrtpError::TooManyStreams`].
pub const MAX_SEND_STREAMS: usize = 1024;

/// SRTP state of one SSRC: the highest index, the window behind it, and (protect side) the
/// floor below which no index may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RtpStream {
    highest: u64,
    window: ReplayWindow,
    floor: Option<u64>,
}

/// SRTCP state of one SSRC: last index used (protect) or highest accepted (unprotect).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RtcpStream {
    index: u32,
    window: ReplayWindow,
}

/// One direction of one SRTP session: either everything we encrypt, or everything we decrypt.
///
/// Session keys are derived once (key derivation rate 0) for SRTP and SRTCP; per-SSRC state
/// (ROC, highest seq, replay window, SRTCP index) lives in a small map keyed by SSRC. Using
/// one context for both directions mixes their per-SSRC state and is a bug.
#[derive(Clone)]
pub struct SrtpContext {
    profile: SrtpProfile,
    master_key: Vec<u8>,
    master_salt: [u8; 14],
    transform: Transform,
    rtp: StreamMap<RtpStream>,
    rtcp: StreamMap<RtcpStream>,
}

impl fmt::Debug for SrtpContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SrtpContext")
            .field("profile", &self.profile)
            .field("rtp_streams", &self.rtp.len())
            .field("rtcp_streams", &self.rtcp.len())
            .finish_non_exhaustive()
    }
}

impl SrtpContext {
    /// Derives the session keys for `profile` from the DTLS-exported master key and salt.
    pub fn new(
        profile: SrtpProfile,
        master_key: &[u8],
        master_salt: &[u8],
    ) -> Result<Self, SrtpError> {
        if master_key.len() != profile.master_key_len()
            || master_salt.len() != profile.master_salt_len()
        {
            return Err(SrtpError::BadKeyLength);
        }
        let mut salt = [0u8; 14];
        salt[..master_salt.len()].copy_from_slice(master_salt);
        Ok(Self {
            profile,
            master_key: master_key.to_vec(),
            master_salt: salt,
            transform: Transform::derive(profile, master_key, master_salt),
            rtp: StreamMap::with_capacity(16),
            rtcp: StreamMap::with_capacity(16),
        })
    }

    /// The context's protection profile.
    pub fn profile(&self) -> SrtpProfile {
        self.profile
    }

    /// Encrypts the RTP packet in `buf[..len]` in place and appends the tag; `buf` must have
    /// `len + rtp_overhead()` bytes. Returns the new length. No heap allocation.
    ///
    /// The index comes from the sequence number exactly as a receiver would estimate it: a
    /// sequence number behind the highest one (a retransmission) reuses its original index,
    /// and a wrap of the sequence number increments the ROC.
    pub fn protect_rtp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, SrtpError> {
        let out_len = len
            .checked_add(self.profile.rtp_overhead())
            .filter(|&n| n <= buf.len())
            .ok_or(SrtpError::BufferTooSmall)?;
        let (meta, seq) = parse_rtp(&buf[..len])?;
        let (index, next) = match self.rtp.get(meta.ssrc) {
            None => {
                let index = u64::from(seq);
                let stream = RtpStream {
                    highest: index,
                    window: ReplayWindow::default(),
                    floor: None,
                };
                (index, stream)
            }
            Some(stream) => {
                let index = estimate_index(stream.highest, seq)?;
                if stream.floor.is_some_and(|floor| index <= floor) {
                    return Err(SrtpError::IndexBelowFloor);
                }
                let next = RtpStream {
                    highest: stream.highest.max(index),
                    ..stream
                };
                (index, next)
            }
        };
        if self.rtp.get(meta.ssrc).is_none() && self.rtp.len() >= MAX_SEND_STREAMS {
            return Err(SrtpError::TooManyStreams);
        }
        self.transform.protect_rtp(buf, len, meta, index)?;
        self.rtp
            .put(meta.ssrc, next, MAX_SEND_STREAMS, WhenFull::Grow);
        Ok(out_len)
    }

    /// Authenticates, replay-checks and decrypts `buf` in place; returns the plaintext RTP
    /// length. A packet that is rejected changes no state (ROC, window) and leaves `buf` as it
    /// was.
    pub fn unprotect_rtp(&mut self, buf: &mut [u8]) -> Result<usize, SrtpError> {
        let (meta, seq) = parse_rtp(buf)?;
        if buf.len() < meta.header_len + self.profile.tag_len() {
            return Err(SrtpError::TooShort);
        }
        let (index, next) = match self.rtp.get(meta.ssrc) {
            None => {
                let index = u64::from(seq);
                let stream = RtpStream {
                    highest: index,
                    window: ReplayWindow::first(),
                    floor: None,
                };
                (index, stream)
            }
            Some(stream) => {
                let index = estimate_index(stream.highest, seq)?;
                stream.window.check(stream.highest, index)?;
                let mut next = stream;
                next.highest = next.window.accept(stream.highest, index);
                (index, next)
            }
        };
        let plain_len = self.transform.unprotect_rtp(buf, meta, index)?;
        self.rtp.put(
            meta.ssrc,
            next,
            MAX_RECV_STREAMS,
            WhenFull::EvictLeastRecent,
        );
        Ok(plain_len)
    }

    /// Encrypts the RTCP compound packet in `buf[..len]` in place and appends the E flag, the
    /// SRTCP index and the tag; `buf` must have `len + rtcp_overhead()` bytes. Uses and
    /// increments the 31-bit SRTCP index of the sender SSRC (bytes 4..8), starting at 0.
    pub fn protect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, SrtpError> {
        self.protect_rtcp_inner(buf, len, true)
    }

    fn protect_rtcp_inner(
        &mut self,
        buf: &mut [u8],
        len: usize,
        encrypt: bool,
    ) -> Result<usize, SrtpError> {
        let out_len = len
            .checked_add(self.profile.rtcp_overhead())
            .filter(|&n| n <= buf.len())
            .ok_or(SrtpError::BufferTooSmall)?;
        let ssrc = parse_rtcp(&buf[..len])?;
        let next = match self.rtcp.get(ssrc) {
            None => RtcpStream {
                index: 0,
                window: ReplayWindow::default(),
            },
            Some(stream) if stream.index >= MAX_RTCP_INDEX => {
                return Err(SrtpError::IndexExhausted);
            }
            Some(stream) => RtcpStream {
                index: stream.index + 1,
                ..stream
            },
        };
        if self.rtcp.get(ssrc).is_none() && self.rtcp.len() >= MAX_SEND_STREAMS {
            return Err(SrtpError::TooManyStreams);
        }
        self.transform
            .protect_rtcp(buf, len, ssrc, next.index, encrypt)?;
        self.rtcp.put(ssrc, next, MAX_SEND_STREAMS, WhenFull::Grow);
        Ok(out_len)
    }

    /// Authenticates, replay-checks and (when its E flag is set) decrypts the SRTCP packet in
    /// `buf`; returns the RTCP length. A rejected packet changes no state and leaves `buf` as
    /// it was.
    pub fn unprotect_rtcp(&mut self, buf: &mut [u8]) -> Result<usize, SrtpError> {
        let n = buf.len();
        if n < RTCP_CLEAR_LEN + self.profile.rtcp_overhead() {
            return Err(SrtpError::TooShort);
        }
        let ssrc = parse_rtcp(buf)?;
        let at = self.transform.rtcp_trailer_at(n);
        let trailer = read_u32(buf, at).ok_or(SrtpError::TooShort)?;
        let encrypted = trailer & 0x8000_0000 != 0;
        let index = trailer & MAX_RTCP_INDEX;
        let next = match self.rtcp.get(ssrc) {
            None => RtcpStream {
                index,
                window: ReplayWindow::first(),
            },
            Some(stream) => {
                let (highest, wanted) = (u64::from(stream.index), u64::from(index));
                stream.window.check(highest, wanted)?;
                let mut next = stream;
                // Both are 31-bit, so the larger one fits.
                next.index = next.window.accept(highest, wanted) as u32;
                next
            }
        };
        let plain_len = self.transform.unprotect_rtcp(buf, ssrc, index, encrypted)?;
        self.rtcp
            .put(ssrc, next, MAX_RECV_STREAMS, WhenFull::EvictLeastRecent);
        Ok(plain_len)
    }

    /// Decrypts an SRTP packet in place without the replay check and without
    /// changing any state; returns `(plaintext length, SSRC, index)`. For
    /// audits of what a sender encrypted (tests: no index used twice).
    pub fn inspect_rtp(&self, buf: &mut [u8]) -> Result<(usize, u32, u64), SrtpError> {
        let (meta, seq) = parse_rtp(buf)?;
        if buf.len() < meta.header_len + self.profile.tag_len() {
            return Err(SrtpError::TooShort);
        }
        let index = match self.rtp.get(meta.ssrc) {
            None => u64::from(seq),
            Some(stream) => estimate_index(stream.highest, seq)?,
        };
        let n = self.transform.unprotect_rtp(buf, meta, index)?;
        Ok((n, meta.ssrc, index))
    }

    /// Like [`SrtpContext::inspect_rtp`] for SRTCP: `(length, SSRC, SRTCP index)`.
    pub fn inspect_rtcp(&self, buf: &mut [u8]) -> Result<(usize, u32, u32), SrtpError> {
        let n = buf.len();
        if n < RTCP_CLEAR_LEN + self.profile.rtcp_overhead() {
            return Err(SrtpError::TooShort);
        }
        let ssrc = parse_rtcp(buf)?;
        let at = self.transform.rtcp_trailer_at(n);
        let trailer = read_u32(buf, at).ok_or(SrtpError::TooShort)?;
        let index = trailer & MAX_RTCP_INDEX;
        let len = self
            .transform
            .unprotect_rtcp(buf, ssrc, index, trailer & 0x8000_0000 != 0)?;
        Ok((len, ssrc, index))
    }

    /// The 48-bit index (ROC << 16 | seq) last used for this SSRC on the protect side, or the
    /// highest accepted on the unprotect side.
    pub fn rtp_index(&self, ssrc: u32) -> Option<u64> {
        self.rtp.get(ssrc).map(|s| s.highest)
    }

    /// The SRTCP index last used for this SSRC on the protect side, or the highest accepted on
    /// the unprotect side.
    pub fn rtcp_index(&self, ssrc: u32) -> Option<u32> {
        self.rtcp.get(ssrc).map(|s| s.index)
    }

    /// Makes the protect side never use an index <= `index` for `ssrc` again (used after a
    /// migration rollback). Later packets are indexed relative to `index`, so the caller's
    /// sequence numbers should continue past it; a packet that would still land at or below
    /// it is refused with [`SrtpError::IndexBelowFloor`].
    pub fn skip_rtp_index_to(&mut self, ssrc: u32, index: u64) {
        let index = index.min(MAX_RTP_INDEX);
        let next = match self.rtp.get(ssrc) {
            None => RtpStream {
                highest: index,
                window: ReplayWindow::default(),
                floor: Some(index),
            },
            Some(stream) => RtpStream {
                highest: stream.highest.max(index),
                window: stream.window,
                floor: Some(stream.floor.map_or(index, |f| f.max(index))),
            },
        };
        self.rtp.put(ssrc, next, MAX_SEND_STREAMS, WhenFull::Grow);
    }

    /// Makes the protect side's next SRTCP index for `ssrc` greater than `index`.
    pub fn skip_rtcp_index_to(&mut self, ssrc: u32, index: u32) {
        let index = index.min(MAX_RTCP_INDEX);
        let next = match self.rtcp.get(ssrc) {
            None => RtcpStream {
                index,
                window: ReplayWindow::default(),
            },
            Some(stream) => RtcpStream {
                index: stream.index.max(index),
                ..stream
            },
        };
        self.rtcp.put(ssrc, next, MAX_SEND_STREAMS, WhenFull::Grow);
    }

    /// The keys and all per-SSRC state, as plain data.
    pub fn snapshot(&self) -> SrtpContextState {
        let salt_len = self.profile.master_salt_len();
        SrtpContextState {
            profile: u32::from(self.profile.dtls_id()),
            master_key: self.master_key.clone(),
            master_salt: self.master_salt[..salt_len].to_vec(),
            rtp: self
                .rtp
                .by_age()
                .into_iter()
                .map(|(ssrc, s)| SrtpStreamState {
                    ssrc,
                    roc: (s.highest >> 16) as u32,
                    highest_seq: (s.highest & 0xffff) as u32,
                    replay_window_lo: s.window.lo(),
                    replay_window_hi: s.window.hi(),
                    index_floor: s.floor,
                })
                .collect(),
            rtcp: self
                .rtcp
                .by_age()
                .into_iter()
                .map(|(ssrc, s)| SrtcpStreamState {
                    ssrc,
                    index: s.index,
                    replay_window_lo: s.window.lo(),
                    replay_window_hi: s.window.hi(),
                })
                .collect(),
        }
    }

    /// Rebuilds a context from [`snapshot`](Self::snapshot); it continues exactly where the
    /// snapshotted one stood.
    pub fn restore(state: &SrtpContextState) -> Result<Self, SrtpError> {
        let profile = u16::try_from(state.profile)
            .ok()
            .and_then(SrtpProfile::from_dtls_id)
            .ok_or(SrtpError::UnknownProfile(state.profile))?;
        let mut ctx = Self::new(profile, &state.master_key, &state.master_salt)?;
        if state.rtp.len() > MAX_SEND_STREAMS || state.rtcp.len() > MAX_SEND_STREAMS {
            return Err(SrtpError::InvalidState("too many streams"));
        }
        for s in &state.rtp {
            if s.highest_seq > 0xffff {
                return Err(SrtpError::InvalidState("highest_seq above 65535"));
            }
            if s.index_floor.is_some_and(|f| f > MAX_RTP_INDEX) {
                return Err(SrtpError::InvalidState("index_floor above 2^48 - 1"));
            }
            if ctx.rtp.get(s.ssrc).is_some() {
                return Err(SrtpError::InvalidState("duplicate SRTP SSRC"));
            }
            let stream = RtpStream {
                highest: (u64::from(s.roc) << 16) | u64::from(s.highest_seq),
                window: ReplayWindow::from_halves(s.replay_window_lo, s.replay_window_hi),
                floor: s.index_floor,
            };
            ctx.rtp
                .put(s.ssrc, stream, MAX_SEND_STREAMS, WhenFull::Grow);
        }
        for s in &state.rtcp {
            if s.index > MAX_RTCP_INDEX {
                return Err(SrtpError::InvalidState("SRTCP index above 2^31 - 1"));
            }
            if ctx.rtcp.get(s.ssrc).is_some() {
                return Err(SrtpError::InvalidState("duplicate SRTCP SSRC"));
            }
            let stream = RtcpStream {
                index: s.index,
                window: ReplayWindow::from_halves(s.replay_window_lo, s.replay_window_hi),
            };
            ctx.rtcp
                .put(s.ssrc, stream, MAX_SEND_STREAMS, WhenFull::Grow);
        }
        Ok(ctx)
    }

    /// A context on raw session keys, as the RFC 7714 vectors and B.2 give them.
    #[cfg(test)]
    fn with_transform(profile: SrtpProfile, transform: Transform) -> Self {
        Self {
            profile,
            master_key: vec![0; 16],
            master_salt: [0; 14],
            transform,
            rtp: StreamMap::with_capacity(16),
            rtcp: StreamMap::with_capacity(16),
        }
    }
}

/// Parses an RTP header: version 2, CSRCs and extension within `packet`.
/// Returns the SSRC, header length and sequence number.
fn parse_rtp(packet: &[u8]) -> Result<(RtpMeta, u16), SrtpError> {
    let first = *packet.first().ok_or(SrtpError::TooShort)?;
    if first >> 6 != 2 {
        return Err(SrtpError::InvalidPacket);
    }
    let seq = read_u16(packet, 2).ok_or(SrtpError::TooShort)?;
    let ssrc = read_u32(packet, 8).ok_or(SrtpError::TooShort)?;
    let mut header_len = 12 + 4 * usize::from(first & 0x0f);
    if first & 0x10 != 0 {
        let words = read_u16(packet, header_len + 2).ok_or(SrtpError::TooShort)?;
        header_len += 4 + 4 * usize::from(words);
    }
    if header_len > packet.len() {
        return Err(SrtpError::TooShort);
    }
    Ok((RtpMeta { ssrc, header_len }, seq))
}

/// Checks an RTCP header (version 2, 8 octets) and returns the sender SSRC.
fn parse_rtcp(packet: &[u8]) -> Result<u32, SrtpError> {
    let first = *packet.first().ok_or(SrtpError::TooShort)?;
    if first >> 6 != 2 {
        return Err(SrtpError::InvalidPacket);
    }
    read_u32(packet, 4).ok_or(SrtpError::TooShort)
}

fn read_u16(buf: &[u8], at: usize) -> Option<u16> {
    let bytes = buf.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([bytes[0], bytes[1]]))
}

fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Fuzz body: feeds `data` to `unprotect_rtp` and `unprotect_rtcp` of contexts with fixed keys
/// for both profiles. Must never panic.
pub fn fuzz_unprotect(data: &[u8]) {
    const KEY: [u8; 16] = [0x42; 16];
    const SALT: [u8; 14] = [0x24; 14];
    let mut scratch = data.to_vec();
    for profile in [SrtpProfile::Aes128CmHmacSha1_80, SrtpProfile::AeadAes128Gcm] {
        let salt = &SALT[..profile.master_salt_len()];
        if let Ok(mut ctx) = SrtpContext::new(profile, &KEY, salt) {
            scratch.copy_from_slice(data);
            let _ = ctx.unprotect_rtp(&mut scratch);
            scratch.copy_from_slice(data);
            let _ = ctx.unprotect_rtcp(&mut scratch);
        }
    }
}
