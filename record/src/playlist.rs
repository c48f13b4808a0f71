//! The HLS media playlist of a recording (RFC 8216bis), written with `m3u8-rs`: version 7, an
//! `EVENT` playlist while it records (segments are only appended) that gets `EXT-X-ENDLIST` when
//! it stops, `EXT-X-MAP` where the init segment changes and `EXT-X-DISCONTINUITY` after a gap.

use m3u8_rs::{Map, MediaPlaylist, MediaPlaylistType, MediaSegment};

use crate::state::SegmentEntry;

/// The playlist of `segments`; `ended` adds `EXT-X-ENDLIST`.
pub fn render(segments: &[SegmentEntry], target_duration: u64, ended: bool) -> Vec<u8> {
    let playlist = MediaPlaylist {
        version: Some(7),
        target_duration: target_duration.max(1),
        media_sequence: segments.first().map_or(1, |s| u64::from(s.number)),
        segments: segments
            .iter()
            .map(|s| MediaSegment {
                uri: s.name.clone(),
                duration: s.duration as f32,
                discontinuity: s.discontinuity,
                map: s.map.as_ref().map(|uri| Map {
                    uri: uri.clone(),
                    ..Map::default()
                }),
                ..MediaSegment::default()
            })
            .collect(),
        end_list: ended,
        playlist_type: Some(MediaPlaylistType::Event),
        independent_segments: true,
        ..MediaPlaylist::default()
    };
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = playlist.write_to(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(number: u32, duration: f64, discontinuity: bool, map: Option<&str>) -> SegmentEntry {
        SegmentEntry {
            number,
            name: format!("seg-{number:05}.m4s"),
            duration,
            discontinuity,
            map: map.map(str::to_string),
            bytes: 100,
        }
    }

    #[test]
    fn tags_in_place_and_parses_back() {
        let segs = [
            seg(1, 2.5, false, Some("init.mp4")),
            seg(2, 4.0, false, None),
            seg(3, 3.0, true, Some("init-2.mp4")),
        ];
        let text = String::from_utf8(render(&segs, 6, false)).unwrap();
        assert!(text.contains("#EXT-X-VERSION:7\n"), "{text}");
        assert!(text.contains("#EXT-X-TARGETDURATION:6\n"));
        assert!(text.contains("#EXT-X-PLAYLIST-TYPE:EVENT"));
        assert!(!text.contains("#EXT-X-ENDLIST"));
        let disc = text.find("#EXT-X-DISCONTINUITY").unwrap();
        assert!(
            disc > text.find("seg-00002.m4s").unwrap() && disc < text.find("seg-00003").unwrap()
        );
        assert!(text.contains("#EXT-X-MAP:URI=\"init.mp4\""));

        let ended = render(&segs, 6, true);
        let Ok((_, m3u8_rs::Playlist::MediaPlaylist(p))) = m3u8_rs::parse_playlist(&ended) else {
            panic!("does not parse");
        };
        assert!(p.end_list);
        assert_eq!(p.segments.len(), 3);
        assert!(p.segments[2].discontinuity && !p.segments[1].discontinuity);
        assert_eq!(p.media_sequence, 1);
    }
}
