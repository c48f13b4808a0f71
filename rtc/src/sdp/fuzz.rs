//! The body of the cargo-fuzz target. Compiled under `cfg(test)` and the `fuzz` feature so it cannot
//! rot; a panic here is a finding.

use super::access::MediaView;
use super::description::{MAX_SDP_SIZE, SessionDescription};
use super::frag::SdpFrag;

/// Parses `data` as a description and as a fragment, exercises every accessor, and checks that
/// whatever parses writes back to an equal value.
pub fn fuzz_sdp(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(SessionDescription::parse_bytes(data).is_err());
        return;
    };
    if let Ok(sdp) = SessionDescription::parse(text) {
        let written = sdp.to_string();
        if written.len() <= MAX_SDP_SIZE {
            assert_eq!(
                SessionDescription::parse(&written).as_ref(),
                Ok(&sdp),
                "round trip"
            );
        }
        let _ = (
            sdp.ice_ufrag(),
            sdp.ice_pwd(),
            sdp.ice_options(),
            sdp.ice_lite(),
            sdp.setup(),
        );
        let _ = (
            sdp.fingerprints(),
            sdp.group_bundle(),
            sdp.groups(),
            sdp.extmaps(),
        );
        let _ = (
            sdp.extmap_allow_mixed(),
            sdp.direction(),
            sdp.end_of_candidates(),
        );
        sdp.media_views().for_each(exercise);
    }
    if let Ok(frag) = SdpFrag::parse(text) {
        let written = frag.to_string();
        if written.len() <= MAX_SDP_SIZE {
            assert_eq!(
                SdpFrag::parse(&written).as_ref(),
                Ok(&frag),
                "frag round trip"
            );
        }
        let _ = (
            frag.ice_ufrag(),
            frag.ice_pwd(),
            frag.group_bundle(),
            frag.candidates(),
        );
        frag.media_views().for_each(exercise);
    }
}

fn exercise(m: MediaView<'_>) {
    let _ = (
        m.mid(),
        m.ice_ufrag(),
        m.ice_pwd(),
        m.ice_options(),
        m.ice_lite(),
    );
    let _ = (
        m.fingerprints(),
        m.setup(),
        m.direction(),
        m.rtcp_mux(),
        m.rtcp_rsize(),
    );
    let _ = (
        m.extmaps(),
        m.extmap_allow_mixed(),
        m.ssrcs(),
        m.ssrc_groups(),
        m.rids(),
    );
    let _ = (
        m.simulcast(),
        m.msid(),
        m.msids(),
        m.candidates(),
        m.end_of_candidates(),
    );
    let _ = (m.sctp_port(), m.max_message_size(), m.payload_types());
    for map in m.rtpmaps() {
        let _ = (m.fmtp(map.pt), m.rtcp_fbs(map.pt), m.rtx_for(map.pt));
    }
}
