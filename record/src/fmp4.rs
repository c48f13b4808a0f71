//! Fragmented MP4 (ISO/IEC 14496-12 with `mvex`; the CMAF layout HLS uses): an init segment
//! (`ftyp` + `moov` with H.264 `avc1`/`avcC` and Opus `Opus`/`dOps` sample entries, ISO/IEC
//! 14496-15 and the Opus-in-ISOBMFF mapping) and media segments (`styp` + `moof` + `mdat`), the
//! boxes encoded with `mp4-atom`.

use mp4_atom::{
    Audio, Avc1, Avcc, Dinf, Dops, Dref, Encode, Ftyp, Hdlr, Mdat, Mdhd, Mdia, Mfhd, Minf, Moof,
    Moov, Mvex, Mvhd, Opus, Smhd, Stbl, Stco, Stsd, Styp, Tfdt, Tfhd, Tkhd, Traf, Trak, Trex, Trun,
    TrunEntry, Url, Visual, Vmhd,
};

use crate::h264::H264Params;
use crate::mux::{MuxError, Sample};

/// `sample_depends_on = 2` (an I-frame, a sync sample).
const SYNC: u32 = 0x0200_0000;
/// `sample_depends_on = 1`, `sample_is_non_sync_sample = 1`.
const NON_SYNC: u32 = 0x0101_0000;

/// One track of an fMP4 recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fmp4Track {
    /// H.264 video at 90 kHz.
    H264(H264Params),
    /// Opus audio at 48 kHz, stereo.
    Opus,
}

fn trak(id: u32, track: &Fmp4Track) -> Result<Trak, MuxError> {
    let (handler, timescale, minf_head, codec, width, height, volume) = match track {
        Fmp4Track::H264(p) => {
            let avcc = Avcc::new(&p.sps, &p.pps).map_err(|e| MuxError::Mp4(e.to_string()))?;
            let codec = Avc1 {
                visual: Visual {
                    data_reference_index: 1,
                    width: p.width,
                    height: p.height,
                    compressor: "".into(),
                    ..Visual::default()
                },
                avcc,
                btrt: None,
                colr: None,
                pasp: None,
                taic: None,
                fiel: None,
                spatial: None,
            };
            (b"vide", 90_000, true, codec.into(), p.width, p.height, 0)
        }
        Fmp4Track::Opus => {
            let codec = Opus {
                audio: Audio {
                    data_reference_index: 1,
                    channel_count: 2,
                    sample_size: 16,
                    sample_rate: 48_000.into(),
                },
                dops: Dops {
                    output_channel_count: 2,
                    pre_skip: 0,
                    input_sample_rate: 48_000,
                    output_gain: 0,
                    channel_mapping: None,
                },
                btrt: None,
            };
            (b"soun", 48_000, false, codec.into(), 0, 0, 1)
        }
    };
    Ok(Trak {
        tkhd: Tkhd {
            track_id: id,
            enabled: true,
            in_movie: true,
            volume: volume.into(),
            width: width.into(),
            height: height.into(),
            ..Tkhd::default()
        },
        mdia: Mdia {
            mdhd: Mdhd {
                timescale,
                language: "und".into(),
                ..Mdhd::default()
            },
            hdlr: Hdlr {
                handler: handler.into(),
                name: if minf_head { "Video" } else { "Audio" }.into(),
            },
            minf: Minf {
                vmhd: minf_head.then(Vmhd::default),
                smhd: (!minf_head).then(Smhd::default),
                dinf: Dinf {
                    dref: Dref {
                        entries: vec![Url::default().into()],
                    },
                },
                stbl: Stbl {
                    stsd: Stsd {
                        codecs: vec![codec],
                    },
                    stco: Some(Stco::default()),
                    ..Stbl::default()
                },
                ..Minf::default()
            },
        },
        ..Trak::default()
    })
}

/// The init segment of a recording whose tracks are `tracks`, track IDs 1, 2, … in order.
pub fn init_segment(tracks: &[Fmp4Track]) -> Result<Vec<u8>, MuxError> {
    let mut out = Vec::new();
    Ftyp {
        major_brand: b"iso6".into(),
        minor_version: 0,
        compatible_brands: vec![b"iso6".into(), b"cmfc".into(), b"mp41".into()],
    }
    .encode(&mut out)
    .map_err(mp4)?;
    let mut traks = Vec::new();
    let mut trex = Vec::new();
    for (i, t) in tracks.iter().enumerate() {
        let id = u32::try_from(i + 1).map_err(|_| MuxError::TooLarge)?;
        traks.push(trak(id, t)?);
        trex.push(Trex {
            track_id: id,
            default_sample_description_index: 1,
            ..Trex::default()
        });
    }
    Moov {
        mvhd: Mvhd {
            timescale: 1000,
            rate: 1.into(),
            volume: 1.into(),
            next_track_id: u32::try_from(tracks.len() + 1).map_err(|_| MuxError::TooLarge)?,
            ..Mvhd::default()
        },
        mvex: Some(Mvex { mehd: None, trex }),
        trak: traks,
        ..Moov::default()
    }
    .encode(&mut out)
    .map_err(mp4)?;
    Ok(out)
}

fn mp4(e: mp4_atom::Error) -> MuxError {
    MuxError::Mp4(e.to_string())
}

/// One media segment with fragment sequence number `sequence`: per track (IDs 1, 2, … as in the
/// init segment) its samples, in decode order, each sample's data already in MP4 form (AVCC for
/// H.264). A track with no samples is left out.
pub fn media_segment(sequence: u32, tracks: &[&[Sample]]) -> Result<Vec<u8>, MuxError> {
    let mut trafs = Vec::new();
    let mut payload_len = 0usize;
    for (i, samples) in tracks.iter().enumerate() {
        let Some(first) = samples.first() else {
            continue;
        };
        let entries = samples
            .iter()
            .map(|s| {
                Ok(TrunEntry {
                    duration: Some(s.duration),
                    size: Some(u32::try_from(s.data.len()).map_err(|_| MuxError::TooLarge)?),
                    flags: Some(if s.keyframe { SYNC } else { NON_SYNC }),
                    cts: None,
                })
            })
            .collect::<Result<Vec<_>, MuxError>>()?;
        trafs.push(Traf {
            tfhd: Tfhd {
                track_id: u32::try_from(i + 1).map_err(|_| MuxError::TooLarge)?,
                default_base_is_moof: true,
                ..Tfhd::default()
            },
            tfdt: Some(Tfdt {
                base_media_decode_time: first.dts,
            }),
            trun: vec![Trun {
                // Fixed up below, once the moof's size is known.
                data_offset: Some(0),
                samples: entries.into(),
            }],
            ..Traf::default()
        });
        payload_len += samples.iter().map(|s| s.data.len()).sum::<usize>();
    }
    let mut moof = Moof {
        mfhd: Mfhd {
            sequence_number: sequence,
        },
        traf: trafs,
    };
    let mut probe = Vec::new();
    moof.encode(&mut probe).map_err(mp4)?;
    // Each track's data follows the previous one's inside the mdat (8-byte header).
    let mut offset = probe.len() + 8;
    for (ti, samples) in tracks.iter().filter(|s| !s.is_empty()).enumerate() {
        if let Some(trun) = moof.traf.get_mut(ti).and_then(|t| t.trun.first_mut()) {
            trun.data_offset = Some(i32::try_from(offset).map_err(|_| MuxError::TooLarge)?);
        }
        offset += samples.iter().map(|s| s.data.len()).sum::<usize>();
    }
    let mut data = Vec::with_capacity(payload_len);
    for samples in tracks {
        for s in samples.iter() {
            data.extend_from_slice(&s.data);
        }
    }
    let mut out = Vec::with_capacity(probe.len() + payload_len + 64);
    Styp {
        major_brand: b"msdh".into(),
        minor_version: 0,
        compatible_brands: vec![b"msdh".into(), b"msix".into()],
    }
    .encode(&mut out)
    .map_err(mp4)?;
    let moof_at = out.len();
    moof.encode(&mut out).map_err(mp4)?;
    if out.len() - moof_at != probe.len() {
        return Err(MuxError::Mp4(
            "moof size changed when offsets were set".into(),
        ));
    }
    Mdat { data }.encode(&mut out).map_err(mp4)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mp4_atom::{Any, Decode};

    fn params() -> H264Params {
        H264Params {
            sps: vec![
                0x67, 0x42, 0xc0, 0x1f, 0xda, 0x01, 0x40, 0x16, 0xe8, 0x06, 0xd0,
            ],
            pps: vec![0x68, 0xce, 0x3c, 0x80],
            width: 1280,
            height: 720,
        }
    }

    #[test]
    fn init_decodes_back_with_both_tracks() {
        let init = init_segment(&[Fmp4Track::H264(params()), Fmp4Track::Opus]).unwrap();
        let mut buf = std::io::Cursor::new(&init);
        assert!(matches!(Any::decode(&mut buf), Ok(Any::Ftyp(_))));
        let Ok(Any::Moov(moov)) = Any::decode(&mut buf) else {
            panic!("no moov");
        };
        assert_eq!(moov.trak.len(), 2);
        assert_eq!(moov.trak[0].mdia.mdhd.timescale, 90_000);
        assert_eq!(moov.trak[1].mdia.mdhd.timescale, 48_000);
        assert_eq!(moov.mvex.unwrap().trex.len(), 2);
    }

    #[test]
    fn data_offsets_point_at_each_tracks_samples() {
        let video = [
            Sample {
                dts: 9000,
                duration: 3000,
                keyframe: true,
                data: vec![1; 10],
            },
            Sample {
                dts: 12000,
                duration: 3000,
                keyframe: false,
                data: vec![2; 5],
            },
        ];
        let audio = [Sample {
            dts: 4800,
            duration: 960,
            keyframe: true,
            data: vec![3; 7],
        }];
        let seg = media_segment(7, &[&video, &audio]).unwrap();
        let mut buf = std::io::Cursor::new(&seg);
        assert!(matches!(Any::decode(&mut buf), Ok(Any::Styp(_))));
        let moof_at = buf.position() as usize;
        let Ok(Any::Moof(moof)) = Any::decode(&mut buf) else {
            panic!("no moof");
        };
        assert_eq!(moof.mfhd.sequence_number, 7);
        let off = |i: usize| moof.traf[i].trun[0].data_offset.unwrap() as usize + moof_at;
        assert_eq!(seg[off(0)..off(0) + 10], [1; 10]);
        assert_eq!(seg[off(1)..off(1) + 7], [3; 7]);
        assert_eq!(
            moof.traf[1].tfdt.as_ref().unwrap().base_media_decode_time,
            4800
        );
    }
}
