//! H.264 parameter sets in band: a viewer can only decode from an IDR that its SPS and PPS came
//! with, and encoders (x264 into an Annex B file, for one) often write them once at the start.
//! Like browsers, the SDK sends the latest SPS and PPS with every IDR access unit that lacks
//! them, so a viewer that joins — or switches source — at any keyframe can decode it.

use ferry_rtc::media::annexb::nal_units;
use ferry_rtc::media::nal::{IDR, PPS, SPS, nal_type};

const START: [u8; 4] = [0, 0, 0, 1];

/// The latest SPS and PPS of a stream.
#[derive(Debug, Default)]
pub(crate) struct ParameterSets {
    sps: Option<Vec<u8>>,
    pps: Option<Vec<u8>>,
}

impl ParameterSets {
    /// `au` (Annex B), with the cached SPS and PPS put in front when it is an IDR without them.
    pub fn complete(&mut self, au: Vec<u8>) -> Vec<u8> {
        let (mut has_sps, mut has_pps, mut idr) = (false, false, false);
        for nal in nal_units(&au) {
            match nal.first().map(|h| nal_type(*h)) {
                Some(SPS) => {
                    has_sps = true;
                    self.sps = Some(nal.to_vec());
                }
                Some(PPS) => {
                    has_pps = true;
                    self.pps = Some(nal.to_vec());
                }
                Some(IDR) => idr = true,
                _ => {}
            }
        }
        if !idr || (has_sps && has_pps) {
            return au;
        }
        let mut out = Vec::with_capacity(au.len() + 64);
        for (have, set) in [(has_sps, &self.sps), (has_pps, &self.pps)] {
            if let (false, Some(nal)) = (have, set) {
                out.extend_from_slice(&START);
                out.extend_from_slice(nal);
            }
        }
        out.extend_from_slice(&au);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(t: u8, body: &[u8]) -> Vec<u8> {
        let mut v = START.to_vec();
        v.push(0x60 | t);
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn idrs_get_the_parameter_sets_they_lack() {
        let mut ps = ParameterSets::default();
        let first = [unit(SPS, &[1, 2]), unit(PPS, &[3]), unit(IDR, &[0x88, 4])].concat();
        assert_eq!(ps.complete(first.clone()), first, "complete already");
        let p = unit(1, &[0x9a, 5]);
        assert_eq!(ps.complete(p.clone()), p, "not an IDR");
        let bare = unit(IDR, &[0x88, 6]);
        assert_eq!(
            ps.complete(bare.clone()),
            [unit(SPS, &[1, 2]), unit(PPS, &[3]), bare].concat()
        );
        let mut fresh = ParameterSets::default();
        let alone = unit(IDR, &[0x88, 7]);
        assert_eq!(fresh.complete(alone.clone()), alone, "nothing cached yet");
    }
}
