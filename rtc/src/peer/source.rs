//! The synthetic publisher's media as plain RTP: the same frames, sizes, pacing and packetizer
//! as a [`super::Peer`] publisher, with no ICE, DTLS or SRTP around them, for servers fed RTP
//! directly (a Janus streaming mountpoint in `ferry bench janus`).

use std::collections::VecDeque;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::codec::Codec;

use super::config::{PeerConfig, PeerRole};
use super::offer::{PT_H264, PT_OPUS, PT_VP8};
use super::send::{Extensions, SendConfig, SendStream, Sender, StreamBases};
use super::stats::SendStreamStats;
use super::{Plain, random_ssrc};

/// Opus payload type of [`RtpSource`] audio.
pub const SOURCE_AUDIO_PT: u8 = PT_OPUS;
/// VP8 payload type of [`RtpSource`] video (H.264: 102).
pub const SOURCE_VIDEO_PT: u8 = PT_VP8;

/// Header extension ids the synthetic publisher offers (its answer decides which stay): one-byte
/// audio level 1, abs-send-time 2, mid 4. The source writes all of them, so its packets are as
/// large as the publisher's.
const EXT_AUDIO_LEVEL_ID: u8 = 1;
const EXT_ABS_SEND_TIME_ID: u8 = 2;
const EXT_MID_ID: u8 = 4;

/// One packet of an [`RtpSource`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePacket {
    /// Video (else audio).
    pub video: bool,
    /// The RTP packet.
    pub data: Vec<u8>,
}

/// A publisher's synthetic media as plain RTP. Drive it like a peer: sleep until
/// [`RtpSource::poll_timeout`], call [`RtpSource::handle_timeout`], send what
/// [`RtpSource::poll_packet`] gives (video and audio to their own ports). Sender reports and
/// retransmissions are not produced: there is no RTCP path.
#[derive(Debug)]
pub struct RtpSource {
    sender: Sender,
    plain: Vec<Plain>,
    out: VecDeque<SourcePacket>,
    video_pt: Option<u8>,
}

impl RtpSource {
    /// A source that starts its media at `now`. `config.role` says which streams there are
    /// (a [`PeerRole::Viewer`] config gives none); `config.seed` draws the SSRCs and the
    /// sequence and timestamp bases.
    pub fn new(config: &PeerConfig, now: Instant) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let mut taken = Vec::new();
        let mut base = |rng: &mut ChaCha8Rng| StreamBases {
            ssrc: random_ssrc(rng, &mut taken),
            seq: rng.next_u32() as u16,
            ts: rng.next_u32(),
            rtx: None,
        };
        let send_cfg = SendConfig {
            fps: config.video_fps,
            bitrate_bps: config.video_bitrate_bps,
            keyframe_interval: config.keyframe_interval,
            wall: config.wall,
            latency_epoch: config.latency_epoch,
            external: false,
        };
        let picture_id = rng.next_u32() as u16;
        let mut sender = Sender::new(send_cfg, "ferry-rtp-source".into(), picture_id);
        let mut video_pt = None;
        if let PeerRole::Publisher { video, audio } = config.role {
            if audio {
                let ext = Extensions {
                    mid: Some((EXT_MID_ID, "0".into())),
                    abs_send_time: Some(EXT_ABS_SEND_TIME_ID),
                    audio_level: Some(EXT_AUDIO_LEVEL_ID),
                    ..Extensions::default()
                };
                let b = base(&mut rng);
                sender.audio = Some(SendStream::new(Codec::Opus, PT_OPUS, b, ext));
            }
            let pt = match video {
                Codec::Vp8 => Some(PT_VP8),
                Codec::H264 => Some(PT_H264),
                // Publishes VP8 or H.264 only: no video for the others.
                Codec::Opus | Codec::Vp9 | Codec::Av1 => None,
            };
            if let Some(pt) = pt {
                let ext = Extensions {
                    mid: Some((EXT_MID_ID, if audio { "1" } else { "0" }.into())),
                    abs_send_time: Some(EXT_ABS_SEND_TIME_ID),
                    audio_level: None,
                    ..Extensions::default()
                };
                let b = base(&mut rng);
                sender.video = Some(SendStream::new(video, pt, b, ext));
                video_pt = Some(pt);
            }
        }
        sender.start(now);
        RtpSource {
            sender,
            plain: Vec::new(),
            out: VecDeque::new(),
            video_pt,
        }
    }

    /// When [`RtpSource::handle_timeout`] has the next frame or audio packet to make.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.sender.poll_timeout()
    }

    /// Makes every frame and audio packet due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.sender.on_timeout(now, &mut self.plain);
        for p in self.plain.drain(..) {
            if let Plain::Rtp(data) = p {
                let video = data.get(1).is_some_and(|b| Some(b & 0x7f) == self.video_pt);
                self.out.push_back(SourcePacket { video, data });
            }
        }
    }

    /// The next packet to send.
    pub fn poll_packet(&mut self) -> Option<SourcePacket> {
        self.out.pop_front()
    }

    /// What each stream sent so far (video first).
    pub fn stats(&self) -> Vec<SendStreamStats> {
        self.sender.streams()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use crate::peer::{Stamp, read_stamp};
    use crate::rtp::RtpHeader;

    fn source(now: Instant) -> RtpSource {
        let role = PeerRole::Publisher {
            video: Codec::Vp8,
            audio: true,
        };
        let mut cfg = PeerConfig::new(role, 9, "127.0.0.1:1".parse().unwrap(), now);
        cfg.video_bitrate_bps = 2_000_000;
        RtpSource::new(&cfg, now)
    }

    #[test]
    fn one_second_is_thirty_frames_and_fifty_audio_packets_of_plain_rtp() {
        let t0 = Instant::now();
        let mut src = source(t0);
        let mut packets = Vec::new();
        while let Some(t) = src.poll_timeout() {
            if t >= t0 + Duration::from_secs(1) {
                break;
            }
            src.handle_timeout(t);
            packets.extend(std::iter::from_fn(|| src.poll_packet()));
        }
        let video: Vec<_> = packets.iter().filter(|p| p.video).collect();
        let audio: Vec<_> = packets.iter().filter(|p| !p.video).collect();
        assert_eq!(audio.len(), 50);
        let stats = src.stats();
        assert_eq!(stats[0].frames, 30);
        assert_eq!(stats[0].keyframes, 1);
        assert_eq!(stats[0].packets, video.len() as u64);
        assert_eq!(stats[1].packets, 50);
        // Plain RTP with the publisher's payload types, continuous sequence numbers, and
        // stamped payloads a viewer measures latency from.
        let mut seq = None;
        for p in &video {
            let h = RtpHeader::parse(&p.data).unwrap();
            assert_eq!(h.payload_type, SOURCE_VIDEO_PT);
            assert_eq!(h.ssrc, stats[0].ssrc);
            assert!(p.data.len() <= crate::peer::MAX_RTP_PACKET);
            if let Some(s) = seq {
                assert_eq!(h.sequence, u16::wrapping_add(s, 1));
            }
            seq = Some(h.sequence);
        }
        let first = RtpHeader::parse(&video[0].data).unwrap();
        let stamp: Stamp = read_stamp(Codec::Vp8, first.payload(&video[0].data)).unwrap();
        assert_eq!(
            stamp,
            Stamp {
                send_us: 0,
                frame: 0,
                layer: None,
            }
        );
        let h = RtpHeader::parse(&audio[1].data).unwrap();
        assert_eq!(h.payload_type, SOURCE_AUDIO_PT);
        let stamp = read_stamp(Codec::Opus, h.payload(&audio[1].data)).unwrap();
        assert_eq!(
            stamp,
            Stamp {
                send_us: 20_000,
                frame: 1,
                layer: None,
            }
        );
    }

    #[test]
    fn a_viewer_config_makes_no_media() {
        let t0 = Instant::now();
        let cfg = PeerConfig::new(PeerRole::Viewer, 1, "127.0.0.1:1".parse().unwrap(), t0);
        let mut src = RtpSource::new(&cfg, t0);
        assert_eq!(src.poll_timeout(), None);
        src.handle_timeout(t0 + Duration::from_secs(1));
        assert_eq!(src.poll_packet(), None);
        assert!(src.stats().is_empty());
    }
}
