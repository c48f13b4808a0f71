#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use proptest::prelude::*;

use super::av1::{DependencyDescriptor, DependencyStructure};
use super::dims::*;
use super::vp9::{GofEntry, MAX_SPATIAL_LAYERS, ScalabilityStructure};

mod build;
use build::*;

// Real headers, encoded for these tests with ffmpeg 5.1 from its `testsrc` pattern (libx264
// 164, libvpx 1.12, libaom 3.6, SVT-AV1 1.4, rav1e 0.6): SPS NAL units with their header
// byte, the first bytes of VP8/VP9 keyframes, and whole AV1 sequence header OBUs.

/// `-profile:v baseline -level 3.1`: 40x23 macroblocks cropped by 4 rows of 2 (368 → 360).
const X264_BASELINE_640X360: [u8; 25] = [
    0x67, 0x42, 0xc0, 0x1f, 0xd9, 0x00, 0xa0, 0x2f, 0xf9, 0x70, 0x11, 0x00, 0x00, 0x03, 0x00, 0x01,
    0x00, 0x00, 0x03, 0x00, 0x3c, 0x0f, 0x18, 0x32, 0x48,
];
/// High profile, 4:2:0, no scaling matrix.
const X264_HIGH_1280X720: [u8; 26] = [
    0x67, 0x64, 0x00, 0x1f, 0xac, 0xd9, 0x40, 0x50, 0x05, 0xbb, 0x01, 0x10, 0x00, 0x00, 0x03, 0x00,
    0x10, 0x00, 0x00, 0x03, 0x03, 0xc0, 0xf1, 0x83, 0x19, 0x60,
];
/// Main profile, 1088 cropped to 1080.
const X264_MAIN_1920X1080: [u8; 26] = [
    0x67, 0x4d, 0x40, 0x28, 0xec, 0xa0, 0x3c, 0x01, 0x13, 0xf2, 0xe0, 0x22, 0x00, 0x00, 0x03, 0x00,
    0x02, 0x00, 0x00, 0x03, 0x00, 0x78, 0x1e, 0x30, 0x63, 0x2c,
];
/// `interlaced=1`: frame_mbs_only_flag = 0, 12 map units of 32 rows cropped by 6 units of 4.
const X264_INTERLACED_640X360: [u8; 26] = [
    0x67, 0x64, 0x00, 0x1e, 0xac, 0xd9, 0x40, 0xa0, 0x63, 0xf3, 0xe0, 0x22, 0x00, 0x00, 0x03, 0x00,
    0x02, 0x00, 0x00, 0x03, 0x00, 0x78, 0x3e, 0x28, 0x53, 0x2c,
];
/// High 4:2:2: crop units of 2 across but 1 down.
const X264_HIGH422_642X362: [u8; 27] = [
    0x67, 0x7a, 0x00, 0x1e, 0xbc, 0xd9, 0x40, 0xa4, 0x2f, 0xe2, 0x27, 0xc0, 0x44, 0x00, 0x00, 0x03,
    0x00, 0x04, 0x00, 0x00, 0x03, 0x00, 0xf0, 0x3c, 0x58, 0xb6, 0x58,
];
/// High 4:4:4 Predictive: crop units of one sample.
const X264_HIGH444_642X362: [u8; 26] = [
    0x67, 0xf4, 0x00, 0x1e, 0x91, 0x9b, 0x28, 0x14, 0x85, 0xfc, 0x7c, 0xf8, 0x08, 0x80, 0x00, 0x00,
    0x03, 0x00, 0x80, 0x00, 0x00, 0x1e, 0x07, 0x8b, 0x16, 0xcb,
];
const LIBVPX_VP8_640X360: [u8; 24] = [
    0x90, 0x9c, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0x68, 0x01, 0x00, 0x47, 0x08, 0x85, 0x85, 0x88,
    0x85, 0x84, 0x88, 0x02, 0x02, 0xe0, 0x10, 0x41,
];
const LIBVPX_VP8_1280X720: [u8; 24] = [
    0x90, 0x77, 0x01, 0x9d, 0x01, 0x2a, 0x00, 0x05, 0xd0, 0x02, 0x00, 0x07, 0x08, 0x85, 0x85, 0x88,
    0x85, 0x84, 0x88, 0x02, 0x03, 0xbb, 0xf1, 0xf2,
];
/// Profile 0.
const LIBVPX_VP9_1280X720: [u8; 24] = [
    0x82, 0x49, 0x83, 0x42, 0x00, 0x4f, 0xf0, 0x2c, 0xf6, 0x06, 0x38, 0x24, 0x1c, 0x18, 0x4a, 0x18,
    0x04, 0x18, 0x7f, 0xd5, 0xf9, 0xbf, 0x3f, 0xf1,
];
/// Profile 1 (4:4:4, subsampling bits sent).
const LIBVPX_VP9_444_642X362: [u8; 24] = [
    0xa2, 0x49, 0x83, 0x42, 0x00, 0x05, 0x02, 0x02, 0xd2, 0xc2, 0x07, 0x04, 0x83, 0x83, 0x09, 0x42,
    0x00, 0xe1, 0x7f, 0x91, 0xf4, 0x5f, 0x3b, 0xb3,
];
/// Profile 2 (10 bits: ten_or_twelve_bit sent).
const LIBVPX_VP9_10BIT_640X360: [u8; 24] = [
    0x92, 0x49, 0x83, 0x42, 0x00, 0x13, 0xf8, 0x0b, 0x3b, 0x06, 0x1c, 0x12, 0x0e, 0x0c, 0x2c, 0x08,
    0x02, 0xb0, 0x7f, 0xd1, 0xfa, 0x3e, 0x8b, 0xe7,
];
/// Profile 1 with color_space CS_RGB (no color_range, no subsampling bits).
const LIBVPX_VP9_GBR_640X360: [u8; 24] = [
    0xa2, 0x49, 0x83, 0x42, 0xe0, 0x27, 0xf0, 0x16, 0x76, 0x06, 0x38, 0x24, 0x1c, 0x18, 0x4a, 0x10,
    0x06, 0x50, 0x7f, 0xd5, 0xfa, 0x3e, 0x8b, 0xe7,
];
const LIBAOM_1280X720: [u8; 13] = [
    0x0a, 0x0b, 0x00, 0x00, 0x00, 0x2d, 0x4c, 0xff, 0xb3, 0xcc, 0xaf, 0x90, 0x04,
];
/// `timing-info=constant`: timing info with equal_picture_interval, no decoder model.
const LIBAOM_TIMING_1280X720: [u8; 22] = [
    0x0a, 0x14, 0x04, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x7b, 0x40, 0x00, 0x05, 0xbd, 0x4c,
    0xff, 0xb3, 0xcc, 0xaf, 0x90, 0x04,
];
/// `timing-info=model`: decoder model info and operating parameters.
const LIBAOM_DECODER_MODEL_1280X720: [u8; 32] = [
    0x0a, 0x1e, 0x04, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x79, 0x78, 0x00, 0x00, 0x00, 0x0a,
    0x53, 0x00, 0x00, 0x17, 0x5f, 0x91, 0x5f, 0x90, 0xbd, 0x4c, 0xff, 0xb3, 0xcc, 0xaf, 0x90, 0x04,
];
/// `-still-picture 1`: reduced_still_picture_header.
const LIBAOM_STILL_320X180: [u8; 9] = [0x0a, 0x07, 0x18, 0x21, 0xe7, 0xf6, 0x6d, 0x00, 0x40];
const SVT_AV1_640X360: [u8; 13] = [
    0x0a, 0x0b, 0x00, 0x00, 0x00, 0x0c, 0xc4, 0xff, 0x67, 0x3e, 0xfe, 0x40, 0x10,
];
const RAV1E_640X360: [u8; 16] = [
    0x0a, 0x0e, 0x00, 0x00, 0x00, 0xfa, 0x62, 0x7f, 0xb3, 0x88, 0x42, 0xb2, 0x04, 0x04, 0x04, 0x28,
];

#[test]
fn vp8_keyframes_from_libvpx() {
    // Descriptor: X=1, S=1, PID=0; I=1 with a 15-bit picture ID.
    let desc = [0x90, 0x80, 0x81, 0x23];
    assert_eq!(
        vp8_size(&[&desc[..], &LIBVPX_VP8_640X360].concat()),
        Some((640, 360))
    );
    assert_eq!(
        vp8_size(&[&desc[..], &LIBVPX_VP8_1280X720].concat()),
        Some((1280, 720))
    );
    // The smallest descriptor (S=1 only).
    assert_eq!(
        vp8_size(&[&[0x10][..], &LIBVPX_VP8_640X360].concat()),
        Some((640, 360))
    );
    assert_eq!(vp8_keyframe_size(&LIBVPX_VP8_1280X720), Some((1280, 720)));
}

#[test]
fn vp8_scale_bits_do_not_change_the_coded_size() {
    for (w, h) in [(640, 360), (1280, 720)] {
        for (hs, vs) in [(0, 0), (1, 2), (3, 3), (2, 1)] {
            let p = [&[0x10][..], &vp8_frame(w, h, hs, vs)].concat();
            assert_eq!(vp8_size(&p), Some((w, h)), "scale {hs},{vs}");
        }
    }
}

#[test]
fn vp8_refuses_what_is_not_a_keyframe_start() {
    let key = [&[0x10][..], &LIBVPX_VP8_640X360].concat();
    // Inter frame (P=1).
    let mut inter = key.clone();
    inter[1] |= 0x01;
    assert_eq!(vp8_size(&inter), None);
    // Not the start of a partition, or partition 1.
    let mut cont = key.clone();
    cont[0] = 0x00;
    assert_eq!(vp8_size(&cont), None);
    let mut part1 = key.clone();
    part1[0] = 0x11;
    assert_eq!(vp8_size(&part1), None);
    // Bad start code, zero size, truncated.
    let mut bad = key.clone();
    bad[5] = 0x02;
    assert_eq!(vp8_size(&bad), None);
    assert_eq!(
        vp8_size(&[&[0x10][..], &vp8_frame(0, 360, 0, 0)].concat()),
        None
    );
    for n in 0..11 {
        assert_eq!(vp8_size(&key[..n]), None, "cut at {n}");
    }
    assert_eq!(vp8_size(&key[..11]), Some((640, 360)));
}

// ------------------------------------------------------------------------------------ H.264

#[test]
fn h264_sps_from_x264() {
    for (nal, size) in [
        (&X264_BASELINE_640X360[..], (640, 360)),
        (&X264_HIGH_1280X720[..], (1280, 720)),
        (&X264_MAIN_1920X1080[..], (1920, 1080)),
        (&X264_INTERLACED_640X360[..], (640, 360)),
        (&X264_HIGH422_642X362[..], (642, 362)),
        (&X264_HIGH444_642X362[..], (642, 362)),
    ] {
        assert_eq!(h264_size(nal), Some(size), "{nal:02x?}");
        assert_eq!(h264_sps_size(&nal[1..]), Some(size));
    }
}

#[test]
fn chrome_constrained_baseline_42e01f() {
    // Chrome's profile-level-id 42e01f: constraint_set0..2 on. The constraint byte is a fixed
    // field, so x264's baseline SPS with it set is what such an encoder sends.
    let mut sps = X264_BASELINE_640X360;
    sps[2] = 0xe0;
    assert_eq!(h264_size(&sps), Some((640, 360)));
    // And one written field by field the way OpenH264 does it: 23 macroblock rows, cropped by
    // 4 units of 2 rows (368 → 360).
    let mut s = Sps::baseline(40, 23);
    s.crop = Some([0, 0, 0, 4]);
    let nal = s.nal();
    assert_eq!(&nal[..4], &[0x67, 0x42, 0xe0, 0x1f]);
    assert_eq!(h264_size(&nal), Some((640, 360)));
    s.crop = None;
    assert_eq!(h264_size(&s.nal()), Some((640, 368)));
}

#[test]
fn h264_high_profile_scaling_lists_are_skipped() {
    let mut s = Sps::baseline(80, 45);
    s.profile = 100;
    // Absent (flag 0), default (delta -8), flat, and a real-looking JVT-style 8x8 list.
    let jvt8: Vec<u8> = (0..64)
        .map(|i| 6 + (i % 8) as u8 * 5 + (i / 8) as u8 * 3)
        .collect();
    let mut lists = vec![None; 8];
    lists[0] = Some(vec![]);
    lists[1] = Some(vec![16]);
    lists[3] = Some(vec![
        6, 13, 20, 28, 13, 20, 28, 32, 20, 28, 32, 37, 28, 32, 37, 42,
    ]);
    lists[6] = Some(jvt8.clone());
    lists[7] = Some(vec![255, 1, 128]);
    s.scaling = Some(lists);
    assert_eq!(h264_size(&s.nal()), Some((1280, 720)));
    // 4:4:4 has twelve lists.
    s.profile = 244;
    s.chroma = 3;
    let mut lists = vec![Some(jvt8); 12];
    lists[2] = None;
    s.scaling = Some(lists);
    assert_eq!(h264_size(&s.nal()), Some((1280, 720)));
    // Scaling matrix present with every list absent.
    s.scaling = Some(vec![None; 12]);
    assert_eq!(h264_size(&s.nal()), Some((1280, 720)));
}

#[test]
fn h264_field_coding_and_crop_units() {
    // frame_mbs_only_flag = 0: 12 map units are 24 macroblock rows (384), crop units of 4.
    let mut s = Sps::baseline(40, 12);
    s.profile = 77;
    s.frame_mbs_only = false;
    s.crop = Some([0, 0, 0, 6]);
    assert_eq!(h264_size(&s.nal()), Some((640, 360)));
    // Monochrome (chroma_format_idc 0) and separate colour planes crop in luma samples.
    s.profile = 100;
    s.chroma = 0;
    s.frame_mbs_only = true;
    s.height_units = 23;
    s.crop = Some([1, 2, 3, 5]);
    assert_eq!(h264_size(&s.nal()), Some((637, 360)));
    s.profile = 244;
    s.chroma = 3;
    s.separate_planes = true;
    assert_eq!(h264_size(&s.nal()), Some((637, 360)));
    // Cropping past the picture is refused.
    s.crop = Some([400, 400, 0, 0]);
    assert_eq!(h264_size(&s.nal()), None);
}

#[test]
fn h264_poc_types() {
    let mut s = Sps::baseline(20, 15);
    s.poc_type = 0;
    assert_eq!(h264_size(&s.nal()), Some((320, 240)));
    s.poc_type = 1;
    s.poc_cycle = vec![1, -2, 300, 0, -70_000];
    assert_eq!(h264_size(&s.nal()), Some((320, 240)));
    s.poc_type = 3;
    assert_eq!(h264_size(&s.nal()), None);
}

#[test]
fn h264_sps_in_stap_a_and_fu_a() {
    let sps = &X264_HIGH_1280X720[..];
    let pps = [0x68, 0xeb, 0xe3, 0xcb, 0x22, 0xc0];
    let unit = |n: &[u8]| [&(n.len() as u16).to_be_bytes()[..], n].concat();
    // SPS first, SPS after the PPS, and after an SEI.
    let stap = [&[0x78][..], &unit(sps), &unit(&pps)].concat();
    assert_eq!(h264_size(&stap), Some((1280, 720)));
    let stap = [
        &[0x78][..],
        &unit(&[0x06, 0x05, 0x01]),
        &unit(&pps),
        &unit(sps),
    ]
    .concat();
    assert_eq!(h264_size(&stap), Some((1280, 720)));
    // No SPS, or a unit overrunning the packet.
    assert_eq!(h264_size(&[&[0x78][..], &unit(&pps)].concat()), None);
    let mut over = [&[0x78][..], &unit(sps)].concat();
    over[2] += 1;
    assert_eq!(h264_size(&over), None);
    // FU-A: indicator (NRI 3, type 28), header S=1 type 7, then the SPS body; only the start.
    let fu = [&[0x7c, 0x87][..], &sps[1..]].concat();
    assert_eq!(h264_size(&fu), Some((1280, 720)));
    let cont = [&[0x7c, 0x07][..], &sps[1..]].concat();
    assert_eq!(h264_size(&cont), None);
    let idr = [&[0x7c, 0x85][..], &sps[1..]].concat();
    assert_eq!(h264_size(&idr), None);
    // An FU-A start too short to reach the size fields.
    assert_eq!(h264_size(&fu[..8]), None);
    // Other NAL types.
    assert_eq!(h264_size(&pps), None);
    assert_eq!(h264_size(&[0x65, 0x88, 0x84]), None);
    assert_eq!(h264_size(&[]), None);
}

#[test]
fn h264_emulation_prevention_is_removed() {
    // Long exp-Golomb codes (offset_for_ref_frame, the cropping offsets) put runs of zero
    // bytes into the RBSP; wherever one is followed by a byte of at most 3 the encoder inserts
    // an escape, and the parser must drop it mid-field.
    let mut escaped = 0;
    for k in 0..64 {
        let mut s = Sps::baseline(40 + k % 8, 23);
        s.poc_type = 1;
        s.poc_cycle = vec![-70_000 - k as i32, 1 << 20, 3];
        s.crop = Some([0, k % 4, 0, 4]);
        let nal = s.nal();
        let plain_len = {
            // The NAL unit minus its escapes.
            let mut zeros = 0;
            let mut n = 0;
            for &b in &nal[1..] {
                if zeros >= 2 && b == 3 {
                    zeros = 0;
                    continue;
                }
                n += 1;
                zeros = if b == 0 { zeros + 1 } else { 0 };
            }
            n
        };
        escaped += usize::from(plain_len < nal.len() - 1);
        assert_eq!(h264_size(&nal), Some(s.expected()), "{s:?}");
    }
    assert!(escaped > 8, "only {escaped} vectors needed escaping");
    // A width of 2^17 - 1 macroblocks does not fit 16 bits: None, not a wrapped value.
    let mut w = W::default();
    w.bits(66, 8)
        .bits(0xc0, 8)
        .bits(0x1e, 8)
        .ue(0)
        .ue(0)
        .ue(2)
        .ue(0)
        .bit(false);
    w.ue((1 << 17) - 2)
        .ue(0)
        .bit(true)
        .bit(true)
        .bit(false)
        .bit(false);
    assert_eq!(h264_sps_size(&escape(&w.rbsp())), None);
    // Width 16 * 4095 = 65520 fits.
    let mut w = W::default();
    w.bits(66, 8).bits(0, 16).ue(0).ue(0).ue(2).ue(0).bit(false);
    w.ue(4094).ue(0).bit(true).bit(true).bit(false).bit(false);
    assert_eq!(h264_sps_size(&escape(&w.rbsp())), Some((65_520, 16)));
}

#[test]
fn h264_out_of_range_fields_are_refused() {
    // seq_parameter_set_id 32.
    let mut w = W::default();
    w.bits(66, 8).bits(0, 16).ue(32);
    assert_eq!(h264_sps_size(&w.rbsp()), None);
    // chroma_format_idc 4.
    let mut w = W::default();
    w.bits(100, 8).bits(0, 16).ue(0).ue(4);
    assert_eq!(h264_sps_size(&w.rbsp()), None);
    // 40 leading zeros in an exp-Golomb code.
    let mut w = W::default();
    w.bits(66, 8).bits(0, 16).ue(0).bits(0, 40).bit(true);
    assert_eq!(h264_sps_size(&w.rbsp()), None);
}

#[test]
fn vp9_scalability_structure_three_layers() {
    let mut d = vp9_desc(true, false, Some(0));
    d.ss = Some(ss(&[(320, 180), (640, 360), (1280, 720)], true));
    let sizes = vp9_size(&vp9_packet(&d, &LIBVPX_VP9_1280X720)).unwrap();
    assert_eq!(
        sizes.iter().collect::<Vec<_>>(),
        vec![(0, (320, 180)), (1, (640, 360)), (2, (1280, 720))]
    );
    assert_eq!(sizes.len(), 3);
    assert_eq!(sizes.highest_at_most(180), Some(0));
    assert_eq!(sizes.highest_at_most(359), Some(0));
    assert_eq!(sizes.highest_at_most(360), Some(1));
    assert_eq!(sizes.highest_at_most(1080), Some(2));
    assert_eq!(sizes.highest_at_most(100), None);
    // Also with a group-of-frames description after the sizes (non-flexible mode).
    let mut d = vp9_desc(true, false, Some(0));
    d.flexible = false;
    d.tl0_pic_idx = Some(7);
    d.ss = Some(ScalabilityStructure {
        gof_pictures: Some(1),
        ..ss(&[(320, 180), (640, 360), (1280, 720)], true)
    });
    let mut buf = [0u8; 64];
    let gof = [GofEntry::default()];
    let n = d.write(&gof, &mut buf).unwrap();
    assert_eq!(vp9_size(&buf[..n]), Some(sizes));
    // The structure's sizes count even on a packet that is not a frame start.
    let mut d = vp9_desc(false, true, Some(2));
    d.p_diffs[0] = 1;
    d.p_diff_count = 1;
    d.ss = Some(ss(&[(320, 180), (640, 360), (1280, 720)], true));
    assert_eq!(vp9_size(&vp9_packet(&d, &[])), Some(sizes));
}

#[test]
fn vp9_structure_with_a_zero_size_keeps_the_others() {
    let mut d = vp9_desc(true, false, Some(0));
    d.ss = Some(ss(&[(320, 180), (0, 360), (1280, 720)], true));
    let sizes = vp9_size(&vp9_packet(&d, &[])).unwrap();
    assert_eq!(sizes.get(0), Some((320, 180)));
    assert_eq!(sizes.get(1), None);
    assert_eq!(sizes.get(2), Some((1280, 720)));
    assert_eq!(sizes.highest_at_most(400), Some(0));
}

#[test]
fn vp9_keyframe_headers_from_libvpx() {
    for (frame, size) in [
        (&LIBVPX_VP9_1280X720[..], (1280, 720)),
        (&LIBVPX_VP9_444_642X362[..], (642, 362)),
        (&LIBVPX_VP9_10BIT_640X360[..], (640, 360)),
        (&LIBVPX_VP9_GBR_640X360[..], (640, 360)),
    ] {
        assert_eq!(vp9_frame_size(frame), Some(size), "{frame:02x?}");
        // No structure: the keyframe header, for the descriptor's spatial layer.
        let sizes = vp9_size(&vp9_packet(&vp9_desc(true, false, None), frame)).unwrap();
        assert_eq!(sizes.iter().collect::<Vec<_>>(), vec![(0, size)]);
        // A structure without sizes (Y=0) falls back the same way.
        let mut d = vp9_desc(true, false, Some(0));
        d.ss = Some(ss(&[(1, 1), (1, 1)], false));
        assert_eq!(vp9_size(&vp9_packet(&d, frame)), Some(sizes));
    }
}

#[test]
fn vp9_header_fallback_needs_a_non_predicted_frame_start() {
    let frame = &LIBVPX_VP9_1280X720[..];
    // Middle packet of a keyframe: not a header.
    assert_eq!(
        vp9_size(&vp9_packet(&vp9_desc(false, false, None), frame)),
        None
    );
    // Inter-picture predicted.
    let mut d = vp9_desc(true, true, None);
    d.p_diffs[0] = 1;
    d.p_diff_count = 1;
    assert_eq!(vp9_size(&vp9_packet(&d, frame)), None);
    // Show-existing frame, inter frame, bad sync code, bad marker.
    assert_eq!(vp9_frame_size(&[0x88, 0x00]), None);
    assert_eq!(vp9_frame_size(&[0x86, 0x00, 0x40, 0x00, 0x00]), None);
    let mut bad = LIBVPX_VP9_1280X720;
    bad[3] = 0x43;
    assert_eq!(vp9_frame_size(&bad), None);
    bad = LIBVPX_VP9_1280X720;
    bad[0] &= 0x3f;
    assert_eq!(vp9_frame_size(&bad), None);
    for n in 0..9 {
        assert_eq!(vp9_frame_size(&frame[..n]), None, "cut at {n}");
    }
    assert_eq!(vp9_frame_size(&frame[..9]), Some((1280, 720)));
}

#[test]
fn vp9_intra_only_frames_and_profiles() {
    for profile in 0..4 {
        for intra in [false, true] {
            for cs in [0, 2, 7] {
                if cs == 7 && profile % 2 == 0 {
                    continue;
                }
                let h = vp9_header(profile, intra, cs, 1280, 720);
                assert_eq!(
                    vp9_frame_size(&h),
                    Some((1280, 720)),
                    "profile {profile} intra {intra} cs {cs}"
                );
            }
        }
    }
    // An upper spatial layer frame (intra-only) for SID 1.
    let d = vp9_desc(true, false, Some(1));
    let sizes = vp9_size(&vp9_packet(&d, &vp9_header(0, true, 0, 640, 360))).unwrap();
    assert_eq!(sizes.iter().collect::<Vec<_>>(), vec![(1, (640, 360))]);
    // RGB in profile 0 does not exist.
    let mut b = W::default();
    b.bits(2, 2)
        .bits(0, 2)
        .bit(false)
        .bits(0b010, 3)
        .bits(0x49_83_42, 24)
        .bits(7, 3);
    b.bits(0, 40);
    assert_eq!(vp9_frame_size(&b.bytes()), None);
}

// -------------------------------------------------------------------------------------- AV1

#[test]
fn av1_sequence_headers_from_encoders() {
    for (obu, size) in [
        (&LIBAOM_1280X720[..], (1280, 720)),
        (&LIBAOM_TIMING_1280X720[..], (1280, 720)),
        (&LIBAOM_DECODER_MODEL_1280X720[..], (1280, 720)),
        (&LIBAOM_STILL_320X180[..], (320, 180)),
        (&SVT_AV1_640X360[..], (640, 360)),
        (&RAV1E_640X360[..], (640, 360)),
    ] {
        assert_eq!(
            av1_sequence_header_size(&obu[2..]),
            Some(size),
            "{obu:02x?}"
        );
        // As sent: aggregation header N=1 W=1, the OBU with its size field.
        assert_eq!(av1_size(&[&[0x18][..], obu].concat()), Some(size));
        // Without the size field, as the RTP spec asks of senders.
        let bare = [&[0x18, obu[0] & !0x02][..], &obu[2..]].concat();
        assert_eq!(av1_size(&bare), Some(size));
    }
}

/// A temporal delimiter and a sequence header as separate elements, in every W form.
#[test]
fn av1_aggregation_forms() {
    let sh = &LIBAOM_1280X720[..];
    let td = [0x12, 0x00];
    let elem = |o: &[u8]| [&[o.len() as u8][..], o].concat();
    // W=0: every element has a length.
    let w0 = [&[0x08][..], &elem(&td), &elem(sh)].concat();
    assert_eq!(av1_size(&w0), Some((1280, 720)));
    // W=2: the last element has none.
    let w2 = [&[0x28][..], &elem(&td), sh].concat();
    assert_eq!(av1_size(&w2), Some((1280, 720)));
    // W=3 with the sequence header in the middle.
    let frame = [0x32, 0x03, 0x10, 0x00, 0x00];
    let w3 = [&[0x38][..], &elem(&td), &elem(sh), &frame].concat();
    assert_eq!(av1_size(&w3), Some((1280, 720)));
    // Z=1: the first element finishes an earlier OBU and is not read, even if it looks like
    // a sequence header.
    let z = [&[0xa0][..], &elem(&SVT_AV1_640X360), sh].concat();
    assert_eq!(av1_size(&z), Some((1280, 720)));
    let z_only = [&[0x90][..], sh].concat();
    assert_eq!(av1_size(&z_only), None);
    // An OBU extension header (temporal/spatial ids) before the payload.
    let ext = [&[0x18, 0x0e, 0x00][..], &sh[1..]].concat();
    assert_eq!(av1_size(&ext), Some((1280, 720)));
    // A leb128 length of two bytes.
    let long = [&[0x08, 0x8d, 0x00][..], sh].concat();
    assert_eq!(av1_size(&long), Some((1280, 720)));
    // No sequence header, a length overrunning the packet, forbidden bit, cut short.
    assert_eq!(av1_size(&[&[0x10][..], &frame].concat()), None);
    assert_eq!(av1_size(&[0x00, 0x20, 0x0a, 0x0b, 0x00]), None);
    let forbidden = [&[0x18, 0x8a][..], &sh[1..]].concat();
    assert_eq!(av1_size(&forbidden), None);
    let w1 = [&[0x18][..], sh].concat();
    // The size fields end in the eighth payload byte; a fragment (Y=1) cut after them still
    // tells the size, one cut before them does not.
    for n in 0..11 {
        assert_eq!(av1_size(&w1[..n]), None, "cut at {n}");
    }
    assert_eq!(av1_size(&w1[..11]), Some((1280, 720)));
    assert_eq!(av1_size(&[]), None);
}

#[test]
fn av1_svc_operating_points_and_decoder_model() {
    // L3T3 as libaom's SVC encoder describes it: nine operating points, levels above 7
    // (with a tier bit), a decoder model for some, initial display delays for others.
    let ops: Vec<_> = (0..9u16)
        .map(|i| {
            // operating_point_idc: the spatial layers (bits 8..) and temporal layers it drops
            // down to, highest operating point first.
            let (s, t) = (2 - i / 3, 2 - i % 3);
            let idc = (((1 << (s + 1)) - 1) << 8) | ((1 << (t + 1)) - 1);
            (idc, 8 + i as u8, i % 2 == 0, i % 3 == 0)
        })
        .collect();
    let h = SeqHeader {
        profile: 0,
        reduced: false,
        timing: Some(Some(0)),
        decoder_model: Some(9),
        initial_display_delay: true,
        ops,
        width: 1280,
        height: 720,
        extra_bits: 0,
    };
    assert_eq!(av1_sequence_header_size(&h.write()), Some((1280, 720)));
    let obu = [&[0x10, 0x08][..], &h.write()].concat();
    assert_eq!(av1_size(&obu), Some((1280, 720)));
    // A reserved seq_profile is refused; 65536 does not fit 16 bits.
    let bad = SeqHeader {
        profile: 3,
        ..h.clone()
    };
    assert_eq!(av1_sequence_header_size(&bad.write()), None);
    let huge = SeqHeader { width: 65_536, ..h };
    assert_eq!(av1_sequence_header_size(&huge.write()), None);
}

// ---------------------------------------------------------------- dependency descriptor

#[test]
fn dependency_descriptor_resolutions() {
    let st = super::tests_av1::l1t3(0);
    let sizes = dd_sizes(&st).unwrap();
    assert_eq!(sizes.iter().collect::<Vec<_>>(), vec![(0, (640, 360))]);
    let mut st = super::tests_av1::l3t3_key(0);
    st.resolutions = vec![(320, 180), (640, 360), (1280, 720)];
    let sizes = dd_sizes(&st).unwrap();
    assert_eq!(sizes.highest_at_most(180), Some(0));
    assert_eq!(sizes.highest_at_most(720), Some(2));
    // Through the wire format: written, parsed back, read.
    let dd = DependencyDescriptor {
        start_of_frame: true,
        end_of_frame: true,
        template_id: 0,
        frame_number: 1,
        structure: Some(st.clone()),
        active_decode_targets: None,
        custom_dtis: None,
        custom_fdiffs: None,
        custom_chains: None,
    };
    let mut buf = vec![0u8; dd.encoded_len(None).unwrap()];
    dd.write(None, &mut buf).unwrap();
    let back = DependencyDescriptor::parse(&buf, None).unwrap();
    assert_eq!(dd_sizes(back.structure.as_ref().unwrap()), Some(sizes));
    // 65536 (legal there) leaves its layer unknown; no resolutions at all gives None.
    st.resolutions = vec![(320, 180), (65_536, 360), (1280, 720)];
    let sizes = dd_sizes(&st).unwrap();
    assert_eq!(sizes.get(1), None);
    assert_eq!(sizes.len(), 2);
    st.resolutions.clear();
    assert_eq!(dd_sizes(&st), None);
    assert_eq!(dd_sizes(&DependencyStructure::default()), None);
}

#[test]
fn layer_sizes_update_and_set() {
    let mut a = LayerSizes::default();
    assert!(a.is_empty());
    assert!(a.set(0, (320, 180)));
    assert!(!a.set(1, (0, 360)));
    assert!(!a.set(MAX_SPATIAL_LAYERS as u8, (1, 1)));
    let mut b = LayerSizes::default();
    b.set(0, (480, 270));
    b.set(2, (1280, 720));
    a.update(&b);
    assert_eq!(
        a.iter().collect::<Vec<_>>(),
        vec![(0, (480, 270)), (2, (1280, 720))]
    );
    assert_eq!(a.highest_at_most(719), Some(0));
}

// ------------------------------------------------------------------------------------ fuzz

/// Every valid packet above, for the mutation proptest.
fn valid_packets() -> Vec<Vec<u8>> {
    let mut d = vp9_desc(true, false, Some(0));
    d.ss = Some(ss(&[(320, 180), (640, 360), (1280, 720)], true));
    let mut s = Sps::baseline(40, 23);
    s.profile = 100;
    s.scaling = Some(vec![Some(vec![6, 13, 20]); 8]);
    s.poc_type = 1;
    s.poc_cycle = vec![1, 2];
    s.crop = Some([0, 0, 0, 4]);
    vec![
        [&[0x90, 0x80, 0x81, 0x23][..], &LIBVPX_VP8_640X360].concat(),
        X264_BASELINE_640X360.to_vec(),
        X264_HIGH444_642X362.to_vec(),
        X264_INTERLACED_640X360.to_vec(),
        s.nal(),
        [&[0x7c, 0x87][..], &X264_HIGH422_642X362[1..]].concat(),
        vp9_packet(&d, &LIBVPX_VP9_1280X720),
        vp9_packet(&vp9_desc(true, false, None), &LIBVPX_VP9_444_642X362),
        [&[0x18][..], &LIBAOM_DECODER_MODEL_1280X720].concat(),
        [&[0x18][..], &LIBAOM_STILL_320X180].concat(),
        super::av1::CHROME_L3T3.to_vec(),
    ]
}

#[test]
fn fuzz_body_accepts_the_valid_packets() {
    for p in valid_packets() {
        fuzz_dims(&p);
    }
    fuzz_dims(&[]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..300)) {
        fuzz_dims(&data);
    }

    #[test]
    fn mutated_valid_packets_never_panic(
        pick in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let packets = valid_packets();
        let mut p = pick.get(&packets).clone();
        for (at, x) in flips {
            let i = at.index(p.len());
            p[i] ^= x;
        }
        fuzz_dims(&p);
        p.truncate(cut.index(p.len() + 1));
        fuzz_dims(&p);
    }

    #[test]
    fn sps_round_trip(s in sps_strategy()) {
        let (ux, uy) = s.crop_units();
        let f = if s.frame_mbs_only { 1 } else { 2 };
        let [l, r, t, b] = s.crop.unwrap_or([0; 4]);
        let fits = ux * (l + r) < s.width_mbs * 16 && uy * (t + b) < s.height_units * 16 * f;
        let want = fits.then(|| s.expected());
        let nal = s.nal();
        prop_assert_eq!(h264_size(&nal), want);
        let fu = [&[0x7c, 0x87][..], &nal[1..]].concat();
        prop_assert_eq!(h264_size(&fu), want);
    }

    #[test]
    fn sequence_header_round_trip(h in seq_header_strategy()) {
        let obu = [&[0x10, 0x08][..], &h.write()].concat();
        prop_assert_eq!(av1_size(&obu), Some((h.width as u16, h.height as u16)));
    }

    #[test]
    fn vp8_and_vp9_round_trip(
        w in 1u16..0x4000,
        h in 1u16..0x4000,
        scale in (0u16..4, 0u16..4),
        profile in 0u8..4,
        intra in any::<bool>(),
    ) {
        let p = [&[0x10][..], &vp8_frame(w, h, scale.0, scale.1)].concat();
        prop_assert_eq!(vp8_size(&p), Some((w, h)));
        let cs = if profile % 2 == 1 && intra { 7 } else { 1 };
        prop_assert_eq!(vp9_frame_size(&vp9_header(profile, intra, cs, w, h)), Some((w, h)));
    }
}
