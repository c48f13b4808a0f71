#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use proptest::prelude::*;

use super::av1::*;
use super::fuzz::fuzz_dependency_descriptor;
use super::layers::{Av1DdTracker, DecodeTargets};

/// A template in libwebrtc's notation: `S(s).T(t).Dtis("..").ChainDiffs(..).FrameDiffs(..)`.
pub(super) fn tpl(s: u8, t: u8, dtis: &str, chains: &[u8], fdiffs: &[u16]) -> FrameTemplate {
    FrameTemplate {
        spatial: s,
        temporal: t,
        dtis: Dtis::from_symbols(dtis).unwrap(),
        fdiffs: Fdiffs::from_slice(fdiffs).unwrap(),
        chain_diffs: ChainDiffs::from_slice(chains).unwrap(),
    }
}

/// libwebrtc's `ScalabilityStructureL1T3::DependencyStructure`.
pub(super) fn l1t3(offset: u8) -> DependencyStructure {
    DependencyStructure {
        template_id_offset: offset,
        decode_targets: 3,
        chains: 1,
        protected_by: vec![0, 0, 0],
        templates: vec![
            tpl(0, 0, "SSS", &[0], &[]),
            tpl(0, 0, "SSS", &[4], &[4]),
            tpl(0, 1, "-DS", &[2], &[2]),
            tpl(0, 2, "--D", &[1], &[1]),
            tpl(0, 2, "--D", &[3], &[1]),
        ],
        resolutions: vec![(640, 360)],
    }
}

/// libwebrtc's `ScalabilityStructureL3T3Key::DependencyStructure` (templates sorted by layer).
pub(super) fn l3t3_key(offset: u8) -> DependencyStructure {
    DependencyStructure {
        template_id_offset: offset,
        decode_targets: 9,
        chains: 3,
        protected_by: vec![0, 0, 0, 1, 1, 1, 2, 2, 2],
        templates: vec![
            tpl(0, 0, "SSSSSSSSS", &[0, 0, 0], &[]),
            tpl(0, 0, "SSS------", &[12, 11, 10], &[12]),
            tpl(0, 1, "-DS------", &[6, 5, 4], &[6]),
            tpl(0, 2, "--D------", &[3, 2, 1], &[3]),
            tpl(0, 2, "--D------", &[9, 8, 7], &[3]),
            tpl(1, 0, "---SSSSSS", &[1, 1, 1], &[1]),
            tpl(1, 0, "---SSS---", &[1, 12, 11], &[12]),
            tpl(1, 1, "----DS---", &[7, 6, 5], &[6]),
            tpl(1, 2, "-----D---", &[4, 3, 2], &[3]),
            tpl(1, 2, "-----D---", &[10, 9, 8], &[3]),
            tpl(2, 0, "------SSS", &[2, 1, 1], &[1]),
            tpl(2, 0, "------SSS", &[2, 1, 12], &[12]),
            tpl(2, 1, "-------DS", &[8, 7, 6], &[6]),
            tpl(2, 2, "--------D", &[5, 4, 3], &[3]),
            tpl(2, 2, "--------D", &[11, 10, 9], &[3]),
        ],
        resolutions: vec![(320, 180), (640, 360), (1280, 720)],
    }
}

pub(super) fn dd(
    template_id: u8,
    frame_number: u16,
    structure: Option<DependencyStructure>,
) -> DependencyDescriptor {
    DependencyDescriptor {
        start_of_frame: true,
        end_of_frame: true,
        template_id,
        frame_number,
        structure,
        active_decode_targets: None,
        custom_dtis: None,
        custom_fdiffs: None,
        custom_chains: None,
    }
}

pub(super) fn encode(d: &DependencyDescriptor, st: Option<&DependencyStructure>) -> Vec<u8> {
    let mut buf = vec![0u8; d.encoded_len(st).unwrap()];
    assert_eq!(d.write(st, &mut buf), Ok(buf.len()));
    buf
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn chrome_l1t1_descriptors_parse_and_write_back_identically() {
    // Chrome 110, AV1 without scalability (jitsi-videobridge's test vectors).
    let long = hex("80000180003a410180ef808680");
    let d = DependencyDescriptor::parse(&long, None).unwrap();
    assert!(d.start_of_frame && !d.end_of_frame);
    assert_eq!(d.frame_number, 1);
    let st = d.structure.clone().unwrap();
    assert_eq!(
        (st.decode_targets, st.chains, st.templates.len()),
        (1, 1, 2)
    );
    assert_eq!(st.resolutions, vec![(480, 270)]);
    assert_eq!(encode(&d, None), long);
    let f = d.frame(None).unwrap();
    assert_eq!((f.spatial, f.temporal), (0, 0));
    // Later keyframes re-send the structure at a new template id offset.
    for (long, offset) in [
        ("82007780403a4101813f80b380", 2),
        ("8400d380803a410181df810d80", 4),
    ] {
        let bytes = hex(long);
        let d = DependencyDescriptor::parse(&bytes, None).unwrap();
        assert_eq!(d.structure.as_ref().unwrap().template_id_offset, offset);
        assert_eq!(encode(&d, None), bytes);
    }
    let short = hex("400001");
    let s = DependencyDescriptor::parse(&short, Some(&st)).unwrap();
    assert!(s.structure.is_none() && !s.start_of_frame && s.end_of_frame);
    assert_eq!(encode(&s, Some(&st)), short);
    assert_eq!(
        DependencyDescriptor::parse(&short, None),
        Err(DdError::NoStructure)
    );
    let m = DependencyDescriptor::parse_mandatory(&hex("870235")).unwrap();
    assert_eq!(
        (m.start_of_frame, m.end_of_frame, m.template_id),
        (true, false, 7)
    );
    assert_eq!(m.frame_number, 0x0235);
}

#[test]
fn chrome_l3t3_structure_parses_and_writes_back_identically() {
    let d = DependencyDescriptor::parse(&CHROME_L3T3, None).unwrap();
    assert!(d.start_of_frame && d.end_of_frame);
    assert_eq!(d.frame_number, 0x0134);
    let st = d.structure.clone().unwrap();
    assert_eq!(st.decode_targets, 9);
    assert_eq!(st.chains, 3);
    assert_eq!(st.max_spatial(), 2);
    let layers: Vec<_> = (0..9)
        .map(|dt| st.decode_target_layer(dt).unwrap())
        .collect();
    let want: Vec<_> = (0..3).flat_map(|s| (0..3).map(move |t| (s, t))).collect();
    assert_eq!(layers, want);
    assert_eq!(encode(&d, None), CHROME_L3T3);
    let f = d.frame(None).unwrap();
    assert_eq!((f.spatial, f.temporal), (0, 0));
    // Full SVC: every lower decode target's frames are in the top one.
    let targets = DecodeTargets::from_structure(&st);
    assert_eq!(targets.within(8), 0x1ff);
    assert_eq!(targets.within(4), 0b000_011_011);
    assert_eq!(targets.within(0), 0b1);

    let mid = hex("d10146401c");
    let m = DependencyDescriptor::parse(&mid, Some(&st)).unwrap();
    assert_eq!(m.frame_number, 0x0146);
    assert_eq!(m.active_decode_targets, Some(0x7));
    let f = m.frame(Some(&st)).unwrap();
    assert_eq!((f.spatial, f.temporal), (0, 1));
    assert_eq!(encode(&m, Some(&st)), mid);

    let mut t = Av1DdTracker::new();
    t.read(&CHROME_L3T3, false).unwrap();
    assert_eq!(t.active_decode_targets(), 0x1ff);
    t.read(&mid, true).unwrap();
    assert_eq!(t.active_decode_targets(), 0x7);
}

#[test]
fn libwebrtc_structures_round_trip_and_know_their_decode_targets() {
    for st in [l1t3(0), l1t3(63), l3t3_key(5)] {
        st.validate().unwrap();
        let d = dd(st.template_id_offset, 7, Some(st.clone()));
        let bytes = encode(&d, None);
        assert_eq!(DependencyDescriptor::parse(&bytes, None).unwrap(), d);
    }
    let k = DecodeTargets::from_structure(&l3t3_key(0));
    // K-SVC: a receiver of S2 gets only S2's frames between keyframes.
    assert_eq!(k.within(8), 0b111_000_000);
    assert_eq!(k.within(5), 0b000_111_000);
    assert_eq!(k.layer(5), Some((1, 2)));
    assert_eq!(k.chain(5), Some(1));
    assert_eq!(k.find(2, 1), Some(7));
    let t = DecodeTargets::from_structure(&l1t3(0));
    assert_eq!(
        (t.within(2), t.within(1), t.within(0)),
        (0b111, 0b011, 0b001)
    );
}

#[test]
fn custom_fields_and_active_mask_round_trip() {
    let st = l3t3_key(10);
    let mut d = dd(12, 0xfffe, None);
    d.active_decode_targets = Some(0b000_111_111);
    d.custom_dtis = Dtis::from_symbols("SSSRRRDD-");
    d.custom_fdiffs = Fdiffs::from_slice(&[1, 17, 300, 4096]);
    d.custom_chains = ChainDiffs::from_slice(&[0, 200, 255]);
    let bytes = encode(&d, Some(&st));
    let back = DependencyDescriptor::parse(&bytes, Some(&st)).unwrap();
    assert_eq!(back, d);
    let f = back.frame(Some(&st)).unwrap();
    assert_eq!((f.spatial, f.temporal), (0, 1));
    assert_eq!(f.fdiffs.as_slice(), &[1, 17, 300, 4096]);
    assert_eq!(f.dtis.get(8), Some(Dti::NotPresent));
    // Wrong counts do not encode.
    d.custom_chains = ChainDiffs::from_slice(&[0]);
    assert!(matches!(d.encoded_len(Some(&st)), Err(DdError::Invalid(_))));
    d.custom_chains = None;
    d.active_decode_targets = Some(1 << 9);
    assert!(d.encoded_len(Some(&st)).is_err());
}

#[test]
fn malformed_descriptors_are_typed_errors() {
    let st = l1t3(0);
    assert_eq!(
        DependencyDescriptor::parse(&[0x80, 0x00], None),
        Err(DdError::Truncated)
    );
    // Template 9 does not exist in a 5-template structure at offset 0.
    let bad = encode(&dd(0, 1, None), Some(&st));
    let mut bytes = bad.clone();
    bytes[0] = (bytes[0] & 0xc0) | 9;
    assert_eq!(
        DependencyDescriptor::parse(&bytes, Some(&st)),
        Err(DdError::UnknownTemplate(9))
    );
    // A structure cut short.
    let full = encode(&dd(0, 1, Some(l3t3_key(0))), None);
    for n in 4..full.len() {
        assert!(
            DependencyDescriptor::parse(&full[..n], None).is_err(),
            "{n}"
        );
    }
    // 65 templates of one layer: next_layer_idc = 0 sixty-four times.
    let mut w = vec![0x80, 0, 1, 0x80, 0];
    w.extend([0u8; 40]);
    assert_eq!(
        DependencyDescriptor::parse(&w, None),
        Err(DdError::TooManyTemplates)
    );
    // Five spatial layers: next_layer_idc = 2 four times (bits after the 11-bit header).
    let five = [0x80, 0, 1, 0x80, 0x00, 0b1010_1010, 0, 0, 0, 0, 0, 0];
    assert_eq!(
        DependencyDescriptor::parse(&five, None),
        Err(DdError::LayerOutOfRange)
    );
    // An invalid structure does not encode.
    let mut unordered = l1t3(0);
    unordered.templates.swap(0, 2);
    assert!(dd(0, 0, Some(unordered)).encoded_len(None).is_err());
}

fn arb_structure() -> impl Strategy<Value = DependencyStructure> {
    (1u8..=4, 1u8..=3, 1u8..=9, 0u8..64, any::<bool>())
        .prop_flat_map(|(spatial, temporal, dts, offset, res)| {
            let layers: Vec<(u8, u8)> = (0..spatial)
                .flat_map(|s| (0..temporal).map(move |t| (s, t)))
                .collect();
            let n = layers.len();
            (
                Just((layers, dts, offset, res, spatial)),
                0..=dts,
                prop::collection::vec(0u8..4, n * usize::from(dts)),
                prop::collection::vec(prop::collection::vec(1u16..=16, 0..4), n),
                prop::collection::vec(0u8..16, n * usize::from(dts)),
                prop::collection::vec(any::<u8>(), usize::from(dts)),
            )
        })
        .prop_map(
            |((layers, dts, offset, res, spatial), chains, dti, fd, cd, prot)| {
                let sym = ['-', 'D', 'S', 'R'];
                let templates = layers
                    .iter()
                    .enumerate()
                    .map(|(k, &(s, t))| {
                        let d = &dti[k * usize::from(dts)..(k + 1) * usize::from(dts)];
                        let dtis: String = d.iter().map(|&x| sym[usize::from(x)]).collect();
                        let c =
                            &cd[k * usize::from(dts)..k * usize::from(dts) + usize::from(chains)];
                        tpl(s, t, &dtis, c, &fd[k])
                    })
                    .collect();
                DependencyStructure {
                    template_id_offset: offset,
                    decode_targets: dts,
                    chains,
                    protected_by: if chains > 0 {
                        prot.iter().map(|p| p % chains).collect()
                    } else {
                        vec![]
                    },
                    templates,
                    resolutions: if res {
                        (0..spatial).map(|s| (160 << s, 90 << s)).collect()
                    } else {
                        vec![]
                    },
                }
            },
        )
}

proptest! {
    #[test]
    fn random_structures_round_trip(st in arb_structure(), fnum: u16, sof: bool, eof: bool) {
        st.validate().unwrap();
        let mut d = dd(st.template_id_offset, fnum, Some(st.clone()));
        d.start_of_frame = sof;
        d.end_of_frame = eof;
        let bytes = encode(&d, None);
        prop_assert_eq!(DependencyDescriptor::parse(&bytes, None).unwrap(), d.clone());
        // Follow-up descriptors for every template, with and without custom fields.
        for k in 0..st.templates.len() {
            let id = ((usize::from(st.template_id_offset) + k) % 64) as u8;
            let mut f = dd(id, fnum.wrapping_add(k as u16), None);
            prop_assert_eq!(encode(&f, Some(&st)).len(), 3);
            f.custom_fdiffs = Fdiffs::from_slice(&[k as u16 + 1]);
            f.active_decode_targets = Some(1);
            let bytes = encode(&f, Some(&st));
            prop_assert_eq!(DependencyDescriptor::parse(&bytes, Some(&st)).unwrap(), f);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..120)) {
        fuzz_dependency_descriptor(&data);
    }

    #[test]
    fn mutated_valid_descriptors_never_panic(
        pick in 0usize..3,
        flips in prop::collection::vec((any::<usize>(), 0u8..8), 1..6),
        cut in any::<usize>(),
    ) {
        let mut bytes = match pick {
            0 => CHROME_L3T3.to_vec(),
            1 => encode(&dd(0, 9, Some(l3t3_key(0))), None),
            _ => encode(&dd(3, 9, Some(l1t3(3))), None),
        };
        for (at, bit) in flips {
            let n = bytes.len();
            bytes[at % n] ^= 1 << bit;
        }
        fuzz_dependency_descriptor(&bytes);
        let n = bytes.len();
        fuzz_dependency_descriptor(&bytes[..cut % n]);
    }
}
