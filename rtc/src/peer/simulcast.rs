//! A simulcast publisher's video line: which of its layers the answer takes, and their streams.

use super::config::SimulcastConfig;
use super::offer::{AnswerLine, OfferLine};
use super::send::{Extensions, Layer, SendStream, StreamBases};

/// The simulcast layers of our video line: those the answer's `a=simulcast:recv` takes, or,
/// without one, the lowest alone (a browser falls back to its first encoding).
pub(super) fn layer_streams(
    sim: Option<SimulcastConfig>,
    layer_bases: &[(StreamBases, u16)],
    ours: &OfferLine,
    line: &AnswerLine,
) -> Vec<SendStream> {
    let Some(sim) = sim else {
        return Vec::new();
    };
    let taken = |i: usize, rid: &String| match &line.simulcast_recv {
        Some(rids) => rids.contains(rid),
        None => i == 0,
    };
    let mut out = Vec::new();
    for (i, ((rid, (b, picture_id)), cfg)) in ours
        .rids
        .iter()
        .zip(layer_bases)
        .zip(sim.layers())
        .enumerate()
    {
        if !taken(i, rid) {
            continue;
        }
        let b = b.negotiated(line.rtx_pt, line.nack);
        let ext = Extensions {
            mid: line.ext_mid.map(|id| (id, line.mid.clone())),
            abs_send_time: line.ext_abs_send_time,
            audio_level: line.ext_audio_level,
            rid: line.ext_rid.map(|id| (id, rid.clone())),
            rrid: line.ext_rrid,
        };
        let layer = Layer {
            index: i as u8,
            bitrate_bps: cfg.bitrate_bps,
            picture_id: *picture_id,
            temporal_layers: sim.temporal_layers,
            tl0_pic_idx: *picture_id as u8,
        };
        let s = SendStream::new(line.codec, line.pt, b, ext).with_layer(layer, rid);
        out.push(s);
    }
    out
}
