//! Transport-wide congestion control feedback (draft-holmer-rmcat-transport-wide-cc-extensions-01).
//!
//! A sender numbers every RTP packet it sends with one 16-bit transport-wide sequence number (the
//! header extension [`crate::sdp::extmap::EXT_TRANSPORT_CC`]); the receiver reports, in RTCP
//! RTPFB FMT 15 packets, which of those arrived and when. Three pieces live here:
//!
//! - [`TwccFeedback`] decodes the FCI of a received feedback
//!   ([`RtcpPacket::TransportCc`](crate::rtcp::RtcpPacket::TransportCc)) into
//!   `(seq, arrival)` pairs, validating the whole body up front and allocating nothing;
//! - [`write_transport_cc`] encodes one feedback packet, choosing run-length, 1-bit and 2-bit
//!   chunks the way libwebrtc does;
//! - [`TwccRecorder`] is the receive side: it records arrivals and writes the periodic feedback.
//!
//! Times are microseconds on one time base per side: the arrivals a parser yields are the
//! packet's reference time plus the accumulated receive deltas, so arrivals from different
//! feedback packets of the same receiver are directly comparable (up to the reference time's
//! 24-bit wrap, [`REFERENCE_WRAP_US`]).
//!
//! The recorder is sans-IO: the driver passes `now` in, sends what
//! [`TwccRecorder::poll_feedback`] writes (SRTCP) and wakes up at
//! [`TwccRecorder::poll_timeout`]:
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ferry_rtc::rtcp::{RtcpIter, RtcpPacket};
//! use ferry_rtc::twcc::{TwccFeedback, TwccRecorder};
//!
//! let start = Instant::now();
//! let mut recorder = TwccRecorder::default();
//! // Transport-wide sequence numbers of received RTP packets, 10 ms apart; 102 is lost.
//! for (i, seq) in [100u16, 101, 103].into_iter().enumerate() {
//!     recorder.on_packet(start + Duration::from_millis(10 * i as u64), seq);
//! }
//! let due = recorder.poll_timeout().unwrap();
//! assert_eq!(due, start + Duration::from_millis(50));
//! let mut buf = [0u8; 1500];
//! while let Some(len) = recorder.poll_feedback(due, 0x1111, 0x2222, &mut buf) {
//!     // A driver protects `&buf[..len]` with SRTCP and sends it; here we read it back.
//!     let Some(Ok(RtcpPacket::TransportCc { fci, .. })) = RtcpIter::new(&buf[..len]).next() else {
//!         panic!("not a transport-cc packet");
//!     };
//!     let feedback = TwccFeedback::parse(fci)?;
//!     let statuses: Vec<_> = feedback.packets().collect();
//!     assert_eq!(
//!         statuses,
//!         [(100, Some(0)), (101, Some(10_000)), (102, None), (103, Some(20_000))]
//!     );
//! }
//! assert_eq!(recorder.poll_timeout(), None, "everything is reported");
//! # Ok::<(), ferry_rtc::twcc::TwccError>(())
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::rtcp::{PT_RTPFB, RtcpError, reserve, write_header};
use crate::seq::SeqUnwrapper;

/// FMT of transport-wide CC feedback within RTPFB (PT 205).
pub const FMT_TRANSPORT_CC: u8 = 15;
/// Unit of the receive deltas, in microseconds.
pub const DELTA_TICK_US: i64 = 250;
/// Unit of the reference time, in microseconds.
pub const REFERENCE_TICK_US: i64 = 64_000;
/// Period after which the 24-bit reference time wraps (about 12.4 days), in microseconds.
pub const REFERENCE_WRAP_US: i64 = REFERENCE_TICK_US << 24;
/// Default spacing of the recorder's feedback.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(50);
/// Default ceiling on one feedback packet: well under any path MTU once SRTCP and the UDP/IP
/// headers are added.
pub const DEFAULT_MAX_PACKET_LEN: usize = 1200;

/// RTCP header, the two SSRCs and the FCI's fixed 8 bytes.
const HEADER_LEN: usize = 20;
/// The smallest packet with one received status: header, a chunk, a 2-byte delta.
const MIN_PACKET_LEN: usize = 24;
const MAX_RUN: u16 = 0x1FFF;
const ONE_BIT_CAPACITY: u16 = 14;
const TWO_BIT_CAPACITY: u16 = 7;

/// Why a transport-cc FCI was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TwccError {
    /// Fewer than the 8 bytes of base sequence, status count, reference time and feedback count.
    #[error("transport-cc FCI of {0} bytes is shorter than its 8-byte header")]
    TooShort(usize),
    /// The packet status count is zero (libwebrtc rejects these too).
    #[error("transport-cc feedback with a packet status count of 0")]
    Empty,
    /// The packet chunks end before they describe `count` statuses.
    #[error("packet chunks end after {covered} of {count} statuses")]
    TruncatedChunks {
        /// Statuses the chunks present describe.
        covered: u16,
        /// The packet status count.
        count: u16,
    },
    /// A status uses symbol 3, which the draft reserves.
    #[error("status of packet {seq} uses the reserved symbol 3")]
    ReservedSymbol {
        /// The transport-wide sequence number it describes.
        seq: u16,
    },
    /// The receive deltas the statuses announce are not all there.
    #[error("receive deltas need {needed} bytes, {available} left")]
    TruncatedDeltas {
        /// Bytes of deltas the statuses require.
        needed: usize,
        /// Bytes after the chunks.
        available: usize,
    },
}

/// Number of statuses a chunk describes, before truncation to the status count.
fn chunk_capacity(chunk: u16) -> u16 {
    match chunk >> 14 {
        0 | 1 => chunk & MAX_RUN,
        2 => ONE_BIT_CAPACITY,
        _ => TWO_BIT_CAPACITY,
    }
}

/// Status symbol `i` of a chunk, which is also the size of its receive delta in bytes (3 is
/// reserved). `i` must be below [`chunk_capacity`]; past it the result is meaningless but the
/// shifts saturate rather than overflow.
fn chunk_symbol(chunk: u16, i: u16) -> u8 {
    let bits = match chunk >> 14 {
        0 | 1 => chunk >> 13,
        2 => (chunk >> (ONE_BIT_CAPACITY - 1).saturating_sub(i)) & 1,
        _ => chunk >> (2 * (TWO_BIT_CAPACITY - 1).saturating_sub(i)),
    };
    (bits & 3) as u8
}

/// A decoded transport-cc FCI (the bytes after the two SSRCs), borrowing the packet.
///
/// [`TwccFeedback::parse`] has checked that every status and receive delta is present, so
/// [`TwccFeedback::packets`] yields exactly `status_count` items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwccFeedback<'a> {
    /// Transport-wide sequence number of the first status.
    pub base_seq: u16,
    /// Number of statuses (at least 1).
    pub status_count: u16,
    /// The reference time (the draft's signed 24-bit field, in 64 ms units), in microseconds on
    /// the feedback sender's time base. Unwrap it modulo [`REFERENCE_WRAP_US`] when comparing
    /// across feedbacks: libwebrtc writes the field as unsigned and wraps it.
    pub reference_time_us: i64,
    /// Counter the feedback sender increments with every feedback packet (wrapping).
    pub feedback_count: u8,
    chunks: &'a [u8],
    deltas: &'a [u8],
}

impl<'a> TwccFeedback<'a> {
    /// Decodes and validates `fci`. Bytes after the last receive delta (the zero padding
    /// Firefox and the draft put inside the FCI) are ignored.
    pub fn parse(fci: &'a [u8]) -> Result<Self, TwccError> {
        let Some((head, rest)) = fci.split_first_chunk::<8>() else {
            return Err(TwccError::TooShort(fci.len()));
        };
        let base_seq = u16::from_be_bytes([head[0], head[1]]);
        let status_count = u16::from_be_bytes([head[2], head[3]]);
        // The arithmetic shift sign-extends the 24-bit field.
        let reference_ticks = i32::from_be_bytes([head[4], head[5], head[6], 0]) >> 8;
        if status_count == 0 {
            return Err(TwccError::Empty);
        }
        // One pass over the chunks sizes the deltas, so a status count the body cannot back is
        // rejected before anything trusts it. The work is bounded by the body length: every
        // chunk is 2 bytes, and a vector chunk has at most 14 symbols.
        let mut covered: u16 = 0;
        let mut delta_len: usize = 0;
        let mut after_chunks = rest;
        while covered < status_count {
            let Some((raw, tail)) = after_chunks.split_first_chunk::<2>() else {
                return Err(TwccError::TruncatedChunks {
                    covered,
                    count: status_count,
                });
            };
            after_chunks = tail;
            let chunk = u16::from_be_bytes(*raw);
            let n = chunk_capacity(chunk).min(status_count - covered);
            let reserved = |i: u16| TwccError::ReservedSymbol {
                seq: base_seq.wrapping_add(covered + i),
            };
            if chunk & 0x8000 == 0 {
                // A run repeats one symbol: no need to look at it up to 8191 times.
                let symbol = chunk_symbol(chunk, 0);
                if symbol == 3 && n > 0 {
                    return Err(reserved(0));
                }
                delta_len += usize::from(symbol) * usize::from(n);
            } else {
                for i in 0..n {
                    match chunk_symbol(chunk, i) {
                        3 => return Err(reserved(i)),
                        symbol => delta_len += usize::from(symbol),
                    }
                }
            }
            covered += n;
        }
        let chunks = &rest[..rest.len() - after_chunks.len()];
        let Some(deltas) = after_chunks.get(..delta_len) else {
            return Err(TwccError::TruncatedDeltas {
                needed: delta_len,
                available: after_chunks.len(),
            });
        };
        Ok(TwccFeedback {
            base_seq,
            status_count,
            reference_time_us: i64::from(reference_ticks) * REFERENCE_TICK_US,
            feedback_count: head[7],
            chunks,
            deltas,
        })
    }

    /// Every status in sequence order: `(seq, arrival)`, where `arrival` is `None` for a packet
    /// reported not received, else the reference time plus the receive deltas so far, in µs.
    pub fn packets(&self) -> TwccPackets<'a> {
        TwccPackets {
            chunks: self.chunks,
            deltas: self.deltas,
            chunk: 0,
            pos: 0,
            len: 0,
            remaining: self.status_count,
            seq: self.base_seq,
            arrival_us: self.reference_time_us,
        }
    }
}

/// Iterator over the statuses of a [`TwccFeedback`].
#[derive(Debug, Clone)]
pub struct TwccPackets<'a> {
    chunks: &'a [u8],
    deltas: &'a [u8],
    chunk: u16,
    pos: u16,
    len: u16,
    remaining: u16,
    seq: u16,
    arrival_us: i64,
}

impl Iterator for TwccPackets<'_> {
    type Item = (u16, Option<i64>);

    fn next(&mut self) -> Option<(u16, Option<i64>)> {
        if self.remaining == 0 {
            return None;
        }
        // Validation guarantees the data below; should it be missing anyway, end early.
        let mut step = || {
            while self.pos >= self.len {
                let (raw, tail) = self.chunks.split_first_chunk::<2>()?;
                self.chunks = tail;
                self.chunk = u16::from_be_bytes(*raw);
                self.pos = 0;
                self.len = chunk_capacity(self.chunk);
            }
            let symbol = chunk_symbol(self.chunk, self.pos);
            self.pos += 1;
            let delta_ticks = match symbol {
                0 => return Some(None),
                1 => {
                    let (&b, tail) = self.deltas.split_first()?;
                    self.deltas = tail;
                    i64::from(b)
                }
                2 => {
                    let (raw, tail) = self.deltas.split_first_chunk::<2>()?;
                    self.deltas = tail;
                    i64::from(i16::from_be_bytes(*raw))
                }
                _ => return None,
            };
            // At most 65535 deltas of at most 2^15 ticks: far from overflowing.
            self.arrival_us += delta_ticks * DELTA_TICK_US;
            Some(Some(self.arrival_us))
        };
        let Some(arrival) = step() else {
            self.remaining = 0;
            return None;
        };
        let seq = self.seq;
        self.seq = seq.wrapping_add(1);
        self.remaining -= 1;
        Some((seq, arrival))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Exact: parsing checked that every status and delta is there.
        let n = usize::from(self.remaining);
        (n, Some(n))
    }
}

impl std::iter::FusedIterator for TwccPackets<'_> {}

/// The statuses not yet in an emitted chunk, as their delta sizes (0 not received, 1 small,
/// 2 large or negative). Follows libwebrtc's encoder: a status is added while some chunk kind
/// can still hold everything pending; when none can, the longest chunk that fits is emitted.
#[derive(Debug, Clone, Copy)]
struct Chunker {
    /// The first 14 sizes pending; a longer run repeats `sizes[0]`.
    sizes: [u8; 14],
    len: u16,
    all_same: bool,
    has_large: bool,
}

impl Chunker {
    const EMPTY: Chunker = Chunker {
        sizes: [0; 14],
        len: 0,
        all_same: true,
        has_large: false,
    };

    fn can_add(&self, size: u8) -> bool {
        self.len < TWO_BIT_CAPACITY
            || (self.len < ONE_BIT_CAPACITY && !self.has_large && size != 2)
            || (self.len < MAX_RUN && self.all_same && self.sizes[0] == size)
    }

    fn add(&mut self, size: u8) {
        if let Some(slot) = self.sizes.get_mut(usize::from(self.len)) {
            *slot = size;
        }
        self.all_same = self.all_same && self.sizes[0] == size;
        self.has_large = self.has_large || size == 2;
        self.len += 1;
    }

    /// Emits a full chunk from the front; for when the next status cannot be added.
    fn emit(&mut self) -> u16 {
        if self.all_same {
            let chunk = run_chunk(self.sizes[0], self.len);
            *self = Chunker::EMPTY;
            return chunk;
        }
        if self.len >= ONE_BIT_CAPACITY && !self.has_large {
            let chunk = vector_chunk(&self.sizes, ONE_BIT_CAPACITY, false);
            *self = Chunker::EMPTY;
            return chunk;
        }
        // Seven mixed sizes, one of them large, go into a 2-bit vector; the rest stay pending.
        let chunk = vector_chunk(&self.sizes, TWO_BIT_CAPACITY, true);
        let rest = self.len.saturating_sub(TWO_BIT_CAPACITY);
        let mut left = Chunker::EMPTY;
        for &size in self.sizes.iter().skip(7).take(usize::from(rest)) {
            left.add(size);
        }
        *self = left;
        chunk
    }

    /// The pending statuses as one final chunk.
    fn last(&self) -> Option<u16> {
        if self.len == 0 {
            None
        } else if self.all_same {
            Some(run_chunk(self.sizes[0], self.len))
        } else {
            // Mixed sizes beyond seven never include a large one (`can_add`), so fit 1 bit.
            Some(vector_chunk(
                &self.sizes,
                self.len,
                self.len <= TWO_BIT_CAPACITY,
            ))
        }
    }
}

fn run_chunk(size: u8, len: u16) -> u16 {
    (u16::from(size & 3) << 13) | (len & MAX_RUN)
}

fn vector_chunk(sizes: &[u8; 14], len: u16, two_bit: bool) -> u16 {
    let (mut chunk, width, capacity) = if two_bit {
        (0xC000u16, 2, TWO_BIT_CAPACITY)
    } else {
        (0x8000, 1, ONE_BIT_CAPACITY)
    };
    let mask = (1u16 << width) - 1;
    for (i, &size) in (0..len.min(capacity)).zip(sizes) {
        chunk |= (u16::from(size) & mask) << (width * (capacity - 1 - i));
    }
    chunk
}

/// `x / 250` rounded to the nearest tick (halves up), for any `x`.
fn to_ticks(x: i64) -> i64 {
    x.saturating_add(DELTA_TICK_US / 2)
        .div_euclid(DELTA_TICK_US)
}

/// The receive delta does not fit the 16-bit field.
#[derive(Debug)]
struct DeltaOverflow;

/// Sizes and encodes a feedback packet status by status.
#[derive(Debug, Clone, Copy)]
struct Encoder {
    chunker: Chunker,
    reference_us: i64,
    /// Ticks from the reference time to the last received status; deltas are taken between
    /// rounded absolute times so rounding errors do not accumulate.
    prev_ticks: i64,
    chunks: usize,
    delta_bytes: usize,
    count: usize,
}

impl Encoder {
    fn new(reference_us: i64) -> Self {
        Encoder {
            chunker: Chunker::EMPTY,
            reference_us,
            prev_ticks: 0,
            chunks: 0,
            delta_bytes: 0,
            count: 0,
        }
    }

    /// Adds one status; `emit` gets each chunk this completes. Returns the receive delta to
    /// write, `None` for a packet not received.
    fn push(
        &mut self,
        arrival_us: Option<i64>,
        mut emit: impl FnMut(u16),
    ) -> Result<Option<i16>, DeltaOverflow> {
        let delta = match arrival_us {
            None => None,
            Some(at) => {
                let ticks = to_ticks(at.saturating_sub(self.reference_us));
                // Both operands are within i64::MAX / 250: the difference cannot overflow.
                let delta = i16::try_from(ticks - self.prev_ticks).map_err(|_| DeltaOverflow)?;
                Some((delta, ticks))
            }
        };
        let size = match delta {
            None => 0,
            Some((d, _)) if (0..=255).contains(&d) => 1,
            Some(_) => 2,
        };
        while !self.chunker.can_add(size) {
            emit(self.chunker.emit());
            self.chunks += 1;
        }
        self.chunker.add(size);
        self.delta_bytes += usize::from(size);
        self.count += 1;
        Ok(delta.map(|(d, ticks)| {
            self.prev_ticks = ticks;
            d
        }))
    }

    fn unpadded_len(&self) -> usize {
        let chunks = self.chunks + usize::from(self.chunker.len > 0);
        HEADER_LEN + 2 * chunks + self.delta_bytes
    }

    fn packet_len(&self) -> usize {
        self.unpadded_len().next_multiple_of(4)
    }
}

/// Writes one feedback packet; `statuses` is walked twice (sizing, then writing).
fn encode(
    buf: &mut [u8],
    sender_ssrc: u32,
    media_ssrc: u32,
    base_seq: u16,
    reference_time_us: i64,
    feedback_count: u8,
    statuses: impl Iterator<Item = Option<i64>> + Clone,
) -> Result<usize, RtcpError> {
    let reference_ticks = reference_time_us.div_euclid(REFERENCE_TICK_US);
    let reference_us = reference_ticks.saturating_mul(REFERENCE_TICK_US);
    let overflow = |_| RtcpError::InvalidInput("receive delta does not fit 16 bits");
    let mut sizing = Encoder::new(reference_us);
    for status in statuses.clone() {
        sizing.push(status, |_| {}).map_err(overflow)?;
    }
    let count = u16::try_from(sizing.count)
        .map_err(|_| RtcpError::InvalidInput("more than 65535 packet statuses"))?;
    if count == 0 {
        return Err(RtcpError::InvalidInput(
            "transport-cc feedback without packets",
        ));
    }
    let unpadded = sizing.unpadded_len();
    let len = sizing.packet_len();
    let out = reserve(buf, len)?;
    // Zero padding inside the FCI as the draft draws it, not the P bit: RFC 3550 wants padding
    // only on the last packet of a compound, and this one may not be last.
    out.fill(0);
    write_header(out, FMT_TRANSPORT_CC, PT_RTPFB, len);
    out[4..8].copy_from_slice(&sender_ssrc.to_be_bytes());
    out[8..12].copy_from_slice(&media_ssrc.to_be_bytes());
    out[12..14].copy_from_slice(&base_seq.to_be_bytes());
    out[14..16].copy_from_slice(&count.to_be_bytes());
    out[16..19].copy_from_slice(&(reference_ticks as u32).to_be_bytes()[1..]);
    out[19] = feedback_count;
    let chunk_bytes = 2 * (sizing.chunks + usize::from(sizing.chunker.len > 0));
    let Some((chunk_area, rest)) = out[HEADER_LEN..unpadded].split_at_mut_checked(chunk_bytes)
    else {
        return Err(RtcpError::InvalidInput("statuses changed between passes"));
    };
    let mut chunk_slots = chunk_area.chunks_exact_mut(2);
    let mut delta_slots = rest;
    let mut writer = Encoder::new(reference_us);
    for status in statuses {
        let delta = writer
            .push(status, |chunk| {
                if let Some(slot) = chunk_slots.next() {
                    slot.copy_from_slice(&chunk.to_be_bytes());
                }
            })
            .map_err(overflow)?;
        let (bytes, n) = match delta {
            None => continue,
            Some(d) => match u8::try_from(d) {
                Ok(small) => ([small, 0], 1),
                Err(_) => (d.to_be_bytes(), 2),
            },
        };
        let Some((slot, tail)) = std::mem::take(&mut delta_slots).split_at_mut_checked(n) else {
            return Err(RtcpError::InvalidInput("statuses changed between passes"));
        };
        slot.copy_from_slice(&bytes[..n]);
        delta_slots = tail;
    }
    if let (Some(chunk), Some(slot)) = (writer.chunker.last(), chunk_slots.next()) {
        slot.copy_from_slice(&chunk.to_be_bytes());
    }
    Ok(len)
}

/// Writes a transport-cc feedback packet (RTPFB FMT 15) for the statuses of `base_seq`,
/// `base_seq + 1`, ... (`arrivals[i]` is `None` for a packet not received, else its arrival in
/// µs on the same time base as `reference_time_us`); returns its length.
///
/// The reference time is floored to 64 ms and written modulo 2^24 units; the deltas are taken
/// from the floored value and rounded to 250 µs without accumulating error. The packet is
/// zero-padded to 32 bits inside the FCI. Fails with [`RtcpError::InvalidInput`] for no
/// statuses, more than 65535, or a delta between consecutive received packets (or from the
/// reference time to the first one) beyond ±8.19 s.
pub fn write_transport_cc(
    buf: &mut [u8],
    sender_ssrc: u32,
    media_ssrc: u32,
    base_seq: u16,
    reference_time_us: i64,
    feedback_count: u8,
    arrivals: &[Option<i64>],
) -> Result<usize, RtcpError> {
    encode(
        buf,
        sender_ssrc,
        media_ssrc,
        base_seq,
        reference_time_us,
        feedback_count,
        arrivals.iter().copied(),
    )
}

/// How a [`TwccRecorder`] paces and sizes its feedback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwccConfig {
    /// Feedback is due this long after the first packet it has not reported yet arrived
    /// (libwebrtc sends every 50 to 100 ms).
    pub interval: Duration,
    /// Largest feedback packet written; more statuses are split over several packets.
    pub max_packet_len: usize,
}

impl Default for TwccConfig {
    fn default() -> Self {
        TwccConfig {
            interval: DEFAULT_INTERVAL,
            max_packet_len: DEFAULT_MAX_PACKET_LEN,
        }
    }
}

/// Statuses tracked at most; a forward jump of the sequence beyond it starts over.
const MAX_TRACKED: u64 = 1 << 14;
/// Reported statuses kept, so that a late packet can still be reported.
const REPORTED_HISTORY: u64 = 1024;
/// Arrival slot of a packet not (yet) received.
const NOT_RECEIVED: i64 = i64::MIN;

/// The receive side of transport-wide CC: records when each transport-wide sequence number
/// arrived and writes the feedback that reports it.
///
/// Arrival times are µs since the first packet recorded, so the reference times of successive
/// feedbacks share one time base. Each feedback covers the statuses from the first one not yet
/// reported up to the highest sequence number received; gaps are reported as not received.
/// A packet that arrives after its gap was reported, but within the last 1024 reported
/// statuses, moves the start of the next feedback back to it: like libwebrtc, the statuses from
/// there on are reported again, now with that packet received. Older packets are dropped, as
/// are duplicates. Memory is bounded: at most 16384 statuses are tracked, and a jump further
/// ahead than that forgets what was not reported yet.
#[derive(Debug, Clone)]
pub struct TwccRecorder {
    config: TwccConfig,
    unwrapper: SeqUnwrapper,
    epoch: Option<Instant>,
    /// Extended sequence number of `arrivals[0]`.
    start: u64,
    /// µs since `epoch`, or [`NOT_RECEIVED`]; the back is always the highest packet received.
    arrivals: VecDeque<i64>,
    /// First extended sequence number the next feedback reports.
    next_report: u64,
    feedback_count: u8,
    due: Option<Instant>,
}

impl Default for TwccRecorder {
    fn default() -> Self {
        TwccRecorder::new(TwccConfig::default())
    }
}

impl TwccRecorder {
    /// A recorder that has seen nothing.
    pub fn new(config: TwccConfig) -> Self {
        TwccRecorder {
            config: TwccConfig {
                max_packet_len: config.max_packet_len.max(MIN_PACKET_LEN),
                ..config
            },
            unwrapper: SeqUnwrapper::new(),
            epoch: None,
            start: 0,
            arrivals: VecDeque::new(),
            next_report: 0,
            feedback_count: 0,
            due: None,
        }
    }

    /// Records that the packet with transport-wide sequence number `seq` arrived at `now`.
    pub fn on_packet(&mut self, now: Instant, seq: u16) {
        let epoch = *self.epoch.get_or_insert(now);
        let arrival =
            i64::try_from(now.saturating_duration_since(epoch).as_micros()).unwrap_or(i64::MAX);
        let ext = self.unwrapper.unwrap(u64::from(seq));
        let end = self.end();
        if self.arrivals.is_empty() || ext >= end.saturating_add(MAX_TRACKED) {
            self.arrivals.clear();
            self.arrivals.push_back(arrival);
            self.start = ext;
            self.next_report = ext;
        } else if ext >= end {
            for _ in end..ext {
                self.arrivals.push_back(NOT_RECEIVED);
            }
            self.arrivals.push_back(arrival);
            let excess = self.arrivals.len().saturating_sub(MAX_TRACKED as usize);
            if excess > 0 {
                self.arrivals.drain(..excess);
                self.start += excess as u64;
                self.next_report = self.next_report.max(self.start);
            }
        } else {
            let slot = ext
                .checked_sub(self.start)
                .and_then(|i| usize::try_from(i).ok())
                .and_then(|i| self.arrivals.get_mut(i));
            match slot {
                Some(slot) if *slot == NOT_RECEIVED => *slot = arrival,
                // A duplicate, or older than the history.
                _ => return,
            }
            self.next_report = self.next_report.min(ext);
        }
        if self.due.is_none() {
            self.due = Some(now + self.config.interval);
        }
    }

    /// When [`TwccRecorder::poll_feedback`] has something to write; `None` while everything
    /// received has been reported.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.due
    }

    /// Once the feedback is due, writes the next feedback packet into `buf` and returns its
    /// length; call again until `None`, as statuses that do not fit one packet (or whose receive
    /// delta overflows 16 bits) continue in another. `buf` should hold `max_packet_len` bytes;
    /// nothing is written if it cannot hold one status.
    pub fn poll_feedback(
        &mut self,
        now: Instant,
        sender_ssrc: u32,
        media_ssrc: u32,
        buf: &mut [u8],
    ) -> Option<usize> {
        if self.due.is_none_or(|due| now < due) {
            return None;
        }
        let end = self.end();
        let skip = usize::try_from(self.next_report.saturating_sub(self.start)).ok()?;
        let pending = self
            .arrivals
            .range(skip.min(self.arrivals.len())..)
            .map(|&a| (a != NOT_RECEIVED).then_some(a));
        let Some(first) = pending.clone().flatten().next() else {
            self.due = None;
            return None;
        };
        let reference_us = first.div_euclid(REFERENCE_TICK_US) * REFERENCE_TICK_US;
        let budget = self.config.max_packet_len.min(buf.len());
        let mut plan = Encoder::new(reference_us);
        let mut n = 0;
        for status in pending.clone().take(usize::from(u16::MAX)) {
            let mut next = plan;
            if next.push(status, |_| {}).is_err() || next.packet_len() > budget {
                break;
            }
            plan = next;
            n += 1;
        }
        if n == 0 {
            return None;
        }
        let len = encode(
            buf,
            sender_ssrc,
            media_ssrc,
            (self.next_report & 0xFFFF) as u16,
            reference_us,
            self.feedback_count,
            pending.take(n),
        )
        .ok()?;
        self.feedback_count = self.feedback_count.wrapping_add(1);
        self.next_report += n as u64;
        if self.next_report >= end {
            self.due = None;
        }
        let forget = self
            .next_report
            .saturating_sub(REPORTED_HISTORY)
            .saturating_sub(self.start);
        if forget > 0 {
            self.arrivals.drain(
                ..usize::try_from(forget)
                    .unwrap_or(usize::MAX)
                    .min(self.arrivals.len()),
            );
            self.start += forget;
        }
        Some(len)
    }

    /// One past the highest extended sequence number tracked.
    fn end(&self) -> u64 {
        self.start + self.arrivals.len() as u64
    }
}

/// Fuzz target body: decodes arbitrary bytes as a transport-cc FCI (and as RTCP holding
/// transport-cc packets); what decodes is re-encoded with [`write_transport_cc`] and must decode
/// to the same statuses and arrival times.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_twcc(data: &[u8]) {
    use crate::rtcp::{RtcpIter, RtcpPacket};

    fn round_trip(fci: &[u8]) {
        let Ok(feedback) = TwccFeedback::parse(fci) else {
            return;
        };
        let statuses: Vec<(u16, Option<i64>)> = feedback.packets().collect();
        assert_eq!(statuses.len(), usize::from(feedback.status_count));
        for (i, &(seq, _)) in (0..=u16::MAX).zip(&statuses) {
            assert_eq!(seq, feedback.base_seq.wrapping_add(i));
        }
        let arrivals: Vec<Option<i64>> = statuses.iter().map(|&(_, a)| a).collect();
        let mut buf = vec![0u8; 32 + 3 * arrivals.len()];
        let written = write_transport_cc(
            &mut buf,
            1,
            2,
            feedback.base_seq,
            feedback.reference_time_us,
            feedback.feedback_count,
            &arrivals,
        );
        let Ok(len) = written else {
            panic!("decoded feedback does not re-encode: {written:?}");
        };
        let again = RtcpIter::new(&buf[..len]).next();
        let Some(Ok(RtcpPacket::TransportCc { fci: again, .. })) = again else {
            panic!("re-encoded feedback is not transport-cc: {again:?}");
        };
        let again = TwccFeedback::parse(again)
            .unwrap_or_else(|e| panic!("re-encoded feedback does not decode: {e}"));
        let head = |f: &TwccFeedback<'_>| (f.base_seq, f.reference_time_us, f.feedback_count);
        assert_eq!(head(&again), head(&feedback));
        // Decoded arrivals sit on the 250 µs grid, so the re-encoding is exact.
        assert!(again.packets().eq(statuses.iter().copied()));
    }

    round_trip(data);
    for packet in RtcpIter::new(data) {
        if let Ok(RtcpPacket::TransportCc { fci, .. }) = packet {
            round_trip(fci);
        }
    }
}

#[cfg(test)]
mod tests;
