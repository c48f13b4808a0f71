#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashSet;

use proptest::prelude::*;

use super::av1::{CHROME_L3T3, DependencyDescriptor, DependencyStructure};
use super::fuzz::fuzz_vp9;
use super::layers::*;
use super::tests_av1::{dd, encode, l1t3, l3t3_key};
use super::vp9::*;

/// `M` forwarded with the marker, `F` forwarded without, `.` dropped.
fn outcome(s: Selection) -> char {
    match s {
        Selection::Forward { marker: true } => 'M',
        Selection::Forward { marker: false } => 'F',
        Selection::Drop => '.',
    }
}

/// The SSRC the tests' packets come on (one stream unless a test says otherwise).
const SSRC: u32 = 1;

fn run(sel: &mut LayerSelector, infos: &[LayerInfo]) -> String {
    run_on(sel, SSRC, infos)
}

fn run_on(sel: &mut LayerSelector, ssrc: u32, infos: &[LayerInfo]) -> String {
    infos.iter().map(|i| outcome(sel.select(ssrc, i))).collect()
}

// ---- VP8 ----

fn vp8(pid: u16, tid: u8, sync: bool, key: bool, start: bool) -> Vec<u8> {
    let s = if start { 0x90 } else { 0x80 };
    let t = (tid << 6) | if sync { 0x20 } else { 0 };
    let p = if key { 0x10 } else { 0x11 };
    vec![s, 0xe0, 0x80 | (pid >> 8) as u8, pid as u8, 0, t, p]
}

/// libwebrtc's three-layer pattern (T0 T2 T1 T2), sync frames (Y) after the keyframe and in
/// the third cycle.
fn vp8_stream(n: u16) -> Vec<LayerInfo> {
    (0..n)
        .map(|pid| {
            let tid = [0, 2, 1, 2][usize::from(pid % 4)];
            let sync = matches!(pid, 1 | 2 | 9 | 10 | 13);
            vp8_layer_info(&vp8(pid, tid, sync, pid == 0, true), true).unwrap()
        })
        .collect()
}

#[test]
fn vp8_descriptor_reads_tid_y_keyidx() {
    let d = super::vp8_descriptor(&[0x90, 0x30, 0x9f, 0x10]).unwrap();
    assert_eq!(
        (d.temporal, d.key_idx, d.len),
        (Some((2, false)), Some(0x1f), 3)
    );
    let i = vp8_layer_info(&vp8(7, 1, true, false, true), false).unwrap();
    assert_eq!(
        (i.temporal, i.temporal_switch_up, i.keyframe),
        (1, true, false)
    );
    assert_eq!(
        (i.picture, i.start_of_frame, i.end_of_frame),
        (Some(7), true, false)
    );
}

#[test]
fn vp8_temporal_switches_at_sync_frames_one_layer_at_a_time() {
    let s = vp8_stream(20);
    let mut all = LayerSelector::default();
    assert!(all.needs_keyframe());
    assert_eq!(run(&mut all, &s), "M".repeat(20));
    assert_eq!(all.current(), Some((0, 2)));

    let mut sel = LayerSelector::default();
    sel.set_target(0, 0);
    assert_eq!(run(&mut sel, &s[..4]), "M...");
    assert!(!sel.needs_keyframe());
    sel.set_target(0, 2);
    // 9 is a T2 sync frame but T1 is not forwarded yet; 10 (T1, Y) and 13 (T2, Y) switch.
    assert_eq!(run(&mut sel, &s[4..16]), "M...M.M.MMMM");
    assert_eq!(sel.current(), Some((0, 2)));
    sel.set_target(0, 1);
    assert_eq!(run(&mut sel, &s[16..]), "M.M.");
    assert_eq!(sel.current(), Some((0, 1)));
}

#[test]
fn vp8_frames_are_decided_whole_and_wait_for_a_keyframe() {
    let mut sel = LayerSelector::default();
    let delta = vp8_layer_info(&vp8(5, 0, false, false, true), true).unwrap();
    assert_eq!(sel.select(SSRC, &delta), Selection::Drop);
    assert!(sel.needs_keyframe());
    let key = vp8_layer_info(&vp8(6, 0, false, true, true), true).unwrap();
    assert_eq!(outcome(sel.select(SSRC, &key)), 'M');
    // A T2 frame in two packets: the target drops between them, the frame stays whole.
    let first = vp8_layer_info(&vp8(7, 2, true, false, true), false).unwrap();
    let second = vp8_layer_info(&vp8(7, 2, true, false, false), true).unwrap();
    assert_eq!(outcome(sel.select(SSRC, &first)), 'F');
    sel.set_target(0, 0);
    assert_eq!(outcome(sel.select(SSRC, &second)), 'M');
    let next = vp8_layer_info(&vp8(8, 2, true, false, true), true).unwrap();
    assert_eq!(sel.select(SSRC, &next), Selection::Drop);
}

// ---- VP9 ----

#[derive(Clone, Copy, Default)]
struct V9 {
    pid: u16,
    s: u8,
    t: u8,
    u: bool,
    p: bool,
    d: bool,
    flexible: bool,
    pdiff: u8,
    tl0: u8,
    ss: Option<u8>,
}

fn vp9(v: V9) -> Vec<u8> {
    let mut desc = Vp9Descriptor {
        inter_picture_predicted: v.p,
        flexible: v.flexible,
        start_of_frame: true,
        end_of_frame: true,
        not_upper_reference: false,
        picture_id: Some(PictureId {
            value: v.pid,
            long: true,
        }),
        layer: Some(LayerIndices {
            temporal: v.t,
            switching_up: v.u,
            spatial: v.s,
            inter_layer_dependency: v.d,
        }),
        tl0_pic_idx: (!v.flexible).then_some(v.tl0),
        p_diffs: [v.pdiff, 0, 0],
        p_diff_count: u8::from(v.flexible && v.p),
        ss: None,
        len: 0,
    };
    let gof =
        [(0, false, 4), (2, true, 1), (1, true, 2), (2, false, 1)].map(|(t, u, d)| GofEntry {
            temporal: t,
            switching_up: u,
            p_diffs: [d, 0, 0],
            references: 1,
        });
    desc.ss = v.ss.map(|n| ScalabilityStructure {
        spatial_layers: n,
        resolutions: Some([
            (320, 180),
            (640, 360),
            (1280, 720),
            (0, 0),
            (0, 0),
            (0, 0),
            (0, 0),
            (0, 0),
        ]),
        gof_pictures: (!v.flexible).then_some(4),
        gof_offset: 0,
    });
    let gof: &[GofEntry] = if v.flexible { &[] } else { &gof };
    let mut buf = vec![0u8; 64];
    let n = desc.write(gof, &mut buf).unwrap();
    buf.truncate(n);
    buf.push(0xaa); // VP9 payload
    buf
}

/// One L3T3 picture in flexible mode, `pos` pictures after the keyframe (T0 T2 T1 T2); full
/// SVC predicts every upper layer from the one below, K-SVC only at the keyframe.
fn l3t3_picture(pid: u16, pos: u32, ksvc: bool) -> Vec<LayerInfo> {
    let (t, pdiff) = [(0, 4), (2, 1), (1, 2), (2, 1)][(pos % 4) as usize];
    (0..3)
        .map(|s| {
            let key = pos == 0;
            let v = V9 {
                pid,
                s,
                t,
                p: !key,
                d: s > 0 && (key || !ksvc),
                flexible: true,
                pdiff,
                ss: (key && s == 0).then_some(3),
                ..V9::default()
            };
            vp9_layer_info(&vp9(v), s == 2).unwrap()
        })
        .collect()
}

fn pictures(sel: &mut LayerSelector, from: u16, poss: &[u32], ksvc: bool) -> String {
    let mut out = Vec::new();
    for (k, &pos) in poss.iter().enumerate() {
        out.push(run(sel, &l3t3_picture(from + k as u16, pos, ksvc)));
    }
    out.join(" ")
}

#[test]
fn vp9_descriptors_parse_exactly() {
    let nf = Vp9Descriptor::parse(&[0xac, 0x92, 0x34, 0x53, 0x07, 0xff]).unwrap();
    assert_eq!(
        nf.picture_id,
        Some(PictureId {
            value: 0x1234,
            long: true
        })
    );
    let l = nf.layer.unwrap();
    assert_eq!(
        (
            l.temporal,
            l.switching_up,
            l.spatial,
            l.inter_layer_dependency
        ),
        (2, true, 1, true)
    );
    assert_eq!(
        (nf.tl0_pic_idx, nf.len, nf.is_keyframe()),
        (Some(7), 5, false)
    );
    let fx = Vp9Descriptor::parse(&[0xf8, 0x05, 0x00, 0x09, 0x02]).unwrap();
    assert_eq!(
        (fx.p_diffs(), fx.tl0_pic_idx, fx.len),
        (&[4u8, 1][..], None, 5)
    );
    assert_eq!(fx.picture_id.unwrap().minus(6), 0x7f);
    let ss = [
        0x0a, 0x58, 1, 64, 0, 180, 2, 128, 1, 104, 5, 0, 2, 208, 1, 0x04, 0x04,
    ];
    let d = Vp9Descriptor::parse(&ss).unwrap();
    let s = d.ss.unwrap();
    assert_eq!((s.spatial_layers, s.gof_pictures), (3, Some(1)));
    assert_eq!(
        s.resolutions.unwrap()[..3],
        [(320, 180), (640, 360), (1280, 720)]
    );
    let gof: Vec<_> = d.gof(&ss).collect();
    assert_eq!((gof.len(), gof[0].references, gof[0].p_diffs[0]), (1, 1, 4));
    assert!(d.is_keyframe() && d.start_of_frame && d.len == ss.len());

    assert_eq!(Vp9Descriptor::parse(&[]), Err(Vp9Error::Truncated));
    assert_eq!(
        Vp9Descriptor::parse(&[0xac, 0x92]),
        Err(Vp9Error::Truncated)
    );
    assert_eq!(
        Vp9Descriptor::parse(&[0x50, 3, 3, 3, 3]),
        Err(Vp9Error::TooManyPDiffs)
    );
    assert_eq!(
        Vp9Descriptor::parse(&[0x50, 0x01]),
        Err(Vp9Error::ZeroPDiff)
    );
    assert_eq!(Vp9Descriptor::parse(&ss[..14]), Err(Vp9Error::Truncated));
}

#[test]
fn vp9_flexible_layer_info_names_its_references() {
    let v = V9 {
        pid: 2,
        s: 1,
        t: 1,
        p: true,
        d: true,
        flexible: true,
        pdiff: 3,
        ..V9::default()
    };
    let i = vp9_layer_info(&vp9(v), false).unwrap();
    assert!(i.refs_complete && !i.keyframe && !i.spatial_switch_up);
    let prev = vp9_layer_info(
        &vp9(V9 {
            pid: 0x7fff,
            s: 1,
            ..v
        }),
        false,
    )
    .unwrap();
    let lower = vp9_layer_info(&vp9(V9 { s: 0, ..v }), false).unwrap();
    assert_eq!(i.refs(), &[prev.frame.unwrap(), lower.frame.unwrap()]);
    let nf = vp9_layer_info(
        &vp9(V9 {
            flexible: false,
            ..v
        }),
        false,
    )
    .unwrap();
    assert!(!nf.refs_complete && nf.refs() == [lower.frame.unwrap()]);
}

#[test]
fn vp9_l1t3_non_flexible_switches_up_at_u_bits() {
    let stream: Vec<LayerInfo> = (0u16..12)
        .map(|pid| {
            let (t, u) = [(0, false), (2, true), (1, true), (2, false)][usize::from(pid % 4)];
            let v = V9 {
                pid,
                t,
                u,
                p: pid > 0,
                tl0: (pid / 4) as u8,
                ss: (pid == 0).then_some(1),
                ..V9::default()
            };
            vp9_layer_info(&vp9(v), true).unwrap()
        })
        .collect();
    let mut sel = LayerSelector::default();
    sel.set_target(0, 0);
    assert_eq!(run(&mut sel, &stream[..5]), "M...M");
    sel.set_target(0, 2);
    assert_eq!(run(&mut sel, &stream[5..]), ".M.MMMM");
    assert_eq!(sel.current(), Some((0, 2)));
}

#[test]
fn vp9_l3t3_full_svc_switches_spatial_down_at_once_and_up_at_keyframes() {
    let mut sel = LayerSelector::new(SvcMode::Full);
    sel.set_target(2, 2);
    assert_eq!(
        pictures(&mut sel, 0, &[0, 1, 2, 3], false),
        "FFM FFM FFM FFM"
    );
    assert_eq!(sel.current(), Some((2, 2)));
    sel.set_target(1, 2);
    assert!(!sel.needs_keyframe());
    assert_eq!(
        pictures(&mut sel, 4, &[4, 5, 6, 7], false),
        "FM. FM. FM. FM."
    );
    sel.set_target(2, 2);
    // Layer 2's last picture was dropped: its next frames do not decode.
    assert!(sel.needs_keyframe());
    assert_eq!(pictures(&mut sel, 8, &[8, 9], false), "FM. FM.");
    assert_eq!(pictures(&mut sel, 10, &[0], false), "FFM");
    assert!(!sel.needs_keyframe());
    sel.set_target(2, 0);
    assert_eq!(
        pictures(&mut sel, 11, &[1, 2, 3, 4], false),
        "... ... ... FFM"
    );
    assert_eq!(sel.current(), Some((2, 0)));
    sel.set_target(2, 2);
    // The T2 picture references the T0 one just forwarded: switch at once.
    assert_eq!(pictures(&mut sel, 15, &[5, 6], false), "FFM FFM");
    assert_eq!(sel.current(), Some((2, 2)));
}

#[test]
fn vp9_l3t3_key_forwards_one_layer_and_switches_at_key_pictures() {
    let mut sel = LayerSelector::new(SvcMode::KSvc);
    sel.set_target(2, 2);
    assert_eq!(pictures(&mut sel, 0, &[0, 1, 2], true), "FFM ..M ..M");
    sel.set_target(1, 2);
    assert!(sel.needs_keyframe());
    // No way down before a key picture: layer 2 stays.
    assert_eq!(pictures(&mut sel, 3, &[3, 4], true), "..M ..M");
    assert_eq!(sel.current(), Some((2, 2)));
    assert_eq!(pictures(&mut sel, 5, &[0, 1, 2], true), "FM. .M. .M.");
    assert_eq!(sel.current(), Some((1, 2)));
    assert!(!sel.needs_keyframe());
    sel.set_target(2, 1);
    assert!(sel.needs_keyframe());
    assert_eq!(
        pictures(&mut sel, 8, &[3, 0, 1, 2], true),
        "... FFM ... ..M"
    );
}

#[test]
fn a_frame_whose_reference_was_dropped_is_dropped_and_a_broken_base_waits_for_a_keyframe() {
    let mut sel = LayerSelector::new(SvcMode::Full);
    sel.set_target(0, 2);
    let key = l3t3_picture(0, 0, false);
    assert_eq!(run(&mut sel, &key), "M..");
    // A T2 frame referencing the dropped S1 frame is dropped; the stream goes on.
    let mut t2 = l3t3_picture(1, 1, false)[0];
    t2.refs[0] = key[1].frame.unwrap();
    assert_eq!(sel.select(SSRC, &t2), Selection::Drop);
    assert_eq!(sel.current(), Some((0, 2)));
    // The base layer in the same situation: nothing decodes until a keyframe.
    let mut t0 = l3t3_picture(4, 4, false)[0];
    t0.refs[0] = key[1].frame.unwrap();
    assert_eq!(sel.select(SSRC, &t0), Selection::Drop);
    assert_eq!(sel.current(), None);
    assert!(sel.needs_keyframe());
    assert_eq!(run(&mut sel, &l3t3_picture(5, 1, false)), "...");
    assert_eq!(run(&mut sel, &l3t3_picture(6, 0, false)), "M..");
}

// ---- Dependency descriptor ----

struct DdStream {
    st: DependencyStructure,
    tracker: Av1DdTracker,
    fnum: u16,
    ssrc: u32,
}

impl DdStream {
    fn new(st: DependencyStructure) -> Self {
        DdStream {
            st,
            tracker: Av1DdTracker::new(),
            fnum: 100,
            ssrc: SSRC,
        }
    }

    /// One frame per template index; the first of a keyframe carries the structure.
    fn frames(&mut self, idx: &[usize], with_structure: bool) -> Vec<LayerInfo> {
        let top = self.st.max_spatial();
        idx.iter()
            .enumerate()
            .map(|(k, &i)| {
                let id = ((usize::from(self.st.template_id_offset) + i) % 64) as u8;
                let s = (with_structure && k == 0).then(|| self.st.clone());
                let bytes = encode(&dd(id, self.fnum, s), Some(&self.st));
                self.fnum = self.fnum.wrapping_add(1);
                let spatial = self.st.templates[i].spatial;
                self.tracker.layer_info(&bytes, spatial == top).unwrap()
            })
            .collect()
    }
}

fn dd_pictures(sel: &mut LayerSelector, s: &mut DdStream, pics: &[&[usize]], key: bool) -> String {
    let mut out = Vec::new();
    for (k, p) in pics.iter().enumerate() {
        let infos = s.frames(p, key && k == 0);
        out.push(run_on(sel, s.ssrc, &infos));
    }
    out.join(" ")
}

#[test]
fn av1_l1t3_switches_temporal_layers_at_switch_indications() {
    let mut s = DdStream::new(l1t3(0));
    let mut sel = LayerSelector::default();
    sel.set_target(0, 0);
    let key: &[&[usize]] = &[&[0], &[3], &[2], &[4], &[1]];
    assert_eq!(dd_pictures(&mut sel, &mut s, key, true), "M . . . M");
    assert_eq!(sel.active_decode_targets(), Some(0b001));
    sel.set_target(0, 2);
    // T2 (not a switch point for DT2), T1 (a switch point), T2, T0.
    let cycle: &[&[usize]] = &[&[3], &[2], &[4], &[1]];
    assert_eq!(dd_pictures(&mut sel, &mut s, cycle, false), ". M M M");
    assert_eq!(
        (sel.current(), sel.decode_target()),
        (Some((0, 2)), Some(2))
    );
    assert_eq!(sel.active_decode_targets(), Some(0b111));
    sel.set_target(0, 0);
    assert_eq!(dd_pictures(&mut sel, &mut s, cycle, false), ". . . M");
    assert!(!sel.needs_keyframe());
}

#[test]
fn a_new_source_streams_frames_are_decided_afresh_whatever_their_numbers() {
    // The viewer joins the old stream between keyframes: its frames up to the next keyframe
    // are dropped (numbers 101-104), then it plays.
    let mut old = DdStream::new(l1t3(0));
    let mut sel = LayerSelector::default();
    let _ = old.frames(&[0], true);
    let cycle: &[&[usize]] = &[&[3], &[2], &[4], &[1]];
    assert_eq!(dd_pictures(&mut sel, &mut old, cycle, false), ". . . .");
    let gop: &[&[usize]] = &[&[0], &[3], &[2], &[4], &[1]];
    assert_eq!(dd_pictures(&mut sel, &mut old, gop, true), "M M M M M");
    // The publisher's encoder restarts (a reconnect): a new SSRC whose frames are numbered
    // from 100 again. Its keyframe and every frame after it play, the ones numbered as the
    // old stream's dropped ones included.
    let mut new = DdStream::new(l1t3(0));
    new.ssrc = SSRC + 1;
    assert_eq!(
        dd_pictures(&mut sel, &mut new, gop, true),
        "M M M M M",
        "frames 100-104 of the new stream"
    );
    assert_eq!(dd_pictures(&mut sel, &mut new, cycle, false), "M M M M");
    // Packets of the old stream still in flight are decided by the old stream's frames.
    let late = old.frames(&[3], false);
    assert_eq!(run_on(&mut sel, SSRC, &late), "M");
}

const KEY_PIC: &[usize] = &[0x0, 0x5, 0xa];
const KSVC_CYCLE: &[&[usize]] = &[
    &[0x3, 0x8, 0xd],
    &[0x2, 0x7, 0xc],
    &[0x4, 0x9, 0xe],
    &[0x1, 0x6, 0xb],
];

#[test]
fn av1_l3t3_key_forwards_the_chosen_layer_and_moves_down_at_a_keyframe() {
    let mut s = DdStream::new(l3t3_key(7));
    let mut sel = LayerSelector::default();
    sel.set_target(2, 2);
    assert_eq!(dd_pictures(&mut sel, &mut s, &[KEY_PIC], true), "FFM");
    assert_eq!(
        dd_pictures(&mut sel, &mut s, KSVC_CYCLE, false),
        "..M ..M ..M ..M"
    );
    assert_eq!(sel.active_decode_targets(), Some(0b111_000_000));
    sel.set_target(1, 2);
    assert!(sel.needs_keyframe());
    assert_eq!(
        dd_pictures(&mut sel, &mut s, &KSVC_CYCLE[..2], false),
        "..M ..M"
    );
    assert_eq!(sel.current(), Some((2, 2)));
    assert_eq!(
        dd_pictures(&mut sel, &mut s, &[KEY_PIC, KSVC_CYCLE[0]], true),
        "FM. .M."
    );
    assert_eq!((sel.current(), sel.needs_keyframe()), (Some((1, 2)), false));
    sel.set_target(2, 2);
    assert!(sel.needs_keyframe());
    // S2's T0 frame is a switch indication but references the S2 frame never forwarded.
    assert_eq!(
        dd_pictures(&mut sel, &mut s, &KSVC_CYCLE[1..], false),
        ".M. .M. .M."
    );
}

#[test]
fn av1_chrome_l3t3_full_svc_moves_down_without_a_keyframe() {
    let full = DependencyDescriptor::parse(&CHROME_L3T3, None).unwrap();
    let mut s = DdStream::new(full.structure.unwrap());
    let key: &[usize] = &[1, 6, 11];
    let cycle: &[&[usize]] = &[&[3, 8, 13], &[2, 7, 12], &[4, 9, 14], &[0, 5, 10]];
    let mut sel = LayerSelector::default();
    sel.set_target(2, 2);
    assert_eq!(dd_pictures(&mut sel, &mut s, &[key], true), "FFM");
    assert_eq!(
        dd_pictures(&mut sel, &mut s, cycle, false),
        "FFM FFM FFM FFM"
    );
    sel.set_target(1, 1);
    assert!(!sel.needs_keyframe());
    assert_eq!(
        dd_pictures(&mut sel, &mut s, cycle, false),
        "... FM. ... FM."
    );
    assert_eq!(sel.active_decode_targets(), Some(0b000_011_011));
    sel.set_target(2, 2);
    assert!(sel.needs_keyframe());
    // T2 comes back at once (switch at the T1 frame); S2 waits for the keyframe.
    assert_eq!(
        dd_pictures(&mut sel, &mut s, &cycle[..3], false),
        "... FM. FM."
    );
    assert_eq!(dd_pictures(&mut sel, &mut s, &[key], true), "FFM");
    assert!(!sel.needs_keyframe());
}

#[test]
fn snapshots_are_plain_data_and_resume() {
    let mut s = DdStream::new(l3t3_key(0));
    let mut sel = LayerSelector::default();
    sel.set_target(2, 2);
    dd_pictures(&mut sel, &mut s, &[KEY_PIC, KSVC_CYCLE[0]], true);
    let snap = sel.snapshot();
    let mut back = LayerSelector::restore(snap);
    assert_eq!(back.snapshot(), snap);
    let mut tracker = Av1DdTracker::restore(&s.tracker.snapshot()).unwrap();
    assert_eq!(tracker.structure(), s.tracker.structure());
    let infos = s.frames(&[0x2, 0x7, 0xc], false);
    assert_eq!(run(&mut sel, &infos), "..M");
    assert_eq!(run(&mut back, &infos), "..M");
    let bytes = encode(&dd(0x4, 0x2000, None), Some(&s.st));
    assert_eq!(
        tracker.layer_info(&bytes, false),
        s.tracker.layer_info(&bytes, false)
    );
}

#[test]
fn a_late_packet_of_an_older_structure_is_refused() {
    let mut s = DdStream::new(l1t3(0));
    s.frames(&[0, 3, 2], true);
    // The sender restarts with L3T3_KEY at template ids 5..: a new structure.
    s.st = l3t3_key(5);
    s.frames(&[0x0, 0x5], true);
    let old = l1t3(0);
    let late = encode(&dd(0, 100, Some(old.clone())), None);
    assert_eq!(
        s.tracker.read(&late, false),
        Err(super::av1::DdError::StaleStructure)
    );
    assert_eq!(s.tracker.structure(), Some(&s.st));
    // Much later (frame numbers wrapped around), a new structure is still taken.
    for _ in 0..3 {
        s.fnum = s.fnum.wrapping_add(30_000);
        s.frames(&[0x1], false);
    }
    s.st = old;
    s.frames(&[0], true);
    assert_eq!(s.tracker.structure(), Some(&s.st));
}

// ---- Properties ----

/// Feeds frames, checking that every forwarded frame's references were forwarded and that
/// the last forwarded packet of each picture carries the marker.
#[derive(Default)]
struct Checker {
    forwarded: HashSet<u32>,
    last_of_picture: Option<bool>,
}

impl Checker {
    fn picture(&mut self, sel: &mut LayerSelector, infos: &[LayerInfo]) {
        self.last_of_picture = None;
        for i in infos {
            let s = sel.select(SSRC, i);
            if let Selection::Forward { marker } = s {
                for r in i.refs() {
                    assert!(self.forwarded.contains(r), "{i:?} lacks {r:#x}");
                }
                self.forwarded.insert(i.frame.unwrap());
                self.last_of_picture = Some(marker);
            }
        }
        assert_ne!(
            self.last_of_picture,
            Some(false),
            "picture without a marker"
        );
    }
}

proptest! {
    #[test]
    fn vp9_streams_never_forward_an_undecodable_frame(
        ksvc: bool,
        ops in prop::collection::vec((0u8..12, 0u8..3, 0u8..3), 1..80),
    ) {
        let mode = if ksvc { SvcMode::KSvc } else { SvcMode::Full };
        let mut sel = LayerSelector::new(mode);
        let mut c = Checker::default();
        let mut pos = 0;
        for (pid, (op, s, t)) in ops.into_iter().enumerate() {
            if op == 0 {
                pos = 0;
            }
            if op == 1 {
                sel.set_target(s, t);
            }
            c.picture(&mut sel, &l3t3_picture(pid as u16, pos, ksvc));
            pos += 1;
        }
    }

    #[test]
    fn dd_streams_never_forward_an_undecodable_frame(
        which in 0u8..3,
        ops in prop::collection::vec((0u8..12, 0u8..3, 0u8..3), 1..80),
    ) {
        let (st, key, cycle): (_, &[usize], Vec<Vec<usize>>) = match which {
            0 => (l1t3(0), &[0], vec![vec![3], vec![2], vec![4], vec![1]]),
            1 => (l3t3_key(0), KEY_PIC, KSVC_CYCLE.iter().map(|c| c.to_vec()).collect()),
            _ => {
                let d = DependencyDescriptor::parse(&CHROME_L3T3, None).unwrap();
                let c = vec![vec![3, 8, 13], vec![2, 7, 12], vec![4, 9, 14], vec![0, 5, 10]];
                (d.structure.unwrap(), &[1, 6, 11], c)
            }
        };
        let mut s = DdStream::new(st);
        let mut sel = LayerSelector::default();
        let mut c = Checker::default();
        let mut pos = 0usize;
        for (op, ts, tt) in ops {
            if op == 1 {
                sel.set_target(ts, tt);
            }
            let pic = if op == 0 || pos == 0 { key } else { &cycle[(pos - 1) % 4] };
            let infos = s.frames(pic, op == 0 || pos == 0);
            c.picture(&mut sel, &infos);
            pos = if op == 0 { 1 } else { pos + 1 };
        }
    }

    #[test]
    fn vp9_arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..64)) {
        fuzz_vp9(&data);
    }

    #[test]
    fn vp9_mutated_descriptors_never_panic(
        pos in 0u32..4,
        flexible: bool,
        flips in prop::collection::vec((any::<usize>(), 0u8..8), 1..4),
    ) {
        let v = V9 { pid: 300, t: 1, p: pos > 0, flexible, pdiff: 2, ss: (pos == 0).then_some(3), ..V9::default() };
        let mut bytes = vp9(v);
        for (at, bit) in flips {
            let n = bytes.len();
            bytes[at % n] ^= 1 << bit;
        }
        fuzz_vp9(&bytes);
    }
}
