//! Fuzz bodies of the layered-codec parsers (`fuzz/fuzz_targets/av1_dd.rs`, `vp9.rs`): each
//! parses arbitrary bytes, checks that what parses writes back the same, and feeds the layer
//! selector. Built for tests and with the `fuzzing` feature only.

use crate::codec::av1::{CHROME_L3T3, DependencyDescriptor, DependencyStructure};
use crate::codec::layers::{Av1DdTracker, LayerSelector, SvcMode, vp9_layer_info};
use crate::codec::vp9::{GofEntry, MAX_P_DIFFS, Vp9Descriptor};

/// Fuzz body (`fuzz/fuzz_targets/av1_dd.rs`): arbitrary bytes as a descriptor with and without a
/// structure in force; whatever parses must write back to an equal descriptor. The bytes then
/// go through a tracker and a selector as a stream of small extensions.
pub fn fuzz_dependency_descriptor(data: &[u8]) {
    fn round_trip(dd: &DependencyDescriptor, in_force: Option<&DependencyStructure>) {
        let Ok(n) = dd.encoded_len(in_force) else {
            panic!("a parsed descriptor must encode: {dd:?}");
        };
        let mut buf = vec![0u8; n];
        assert_eq!(dd.write(in_force, &mut buf), Ok(n));
        assert_eq!(DependencyDescriptor::parse(&buf, in_force).as_ref(), Ok(dd));
    }

    let _ = DependencyDescriptor::parse_mandatory(data);
    if let Ok(dd) = DependencyDescriptor::parse(data, None) {
        let st = dd.structure.as_ref();
        assert!(
            st.is_some_and(|s| s.validate().is_ok()),
            "attached structure is valid"
        );
        round_trip(&dd, None);
    }
    let Ok(chrome) = DependencyDescriptor::parse(&CHROME_L3T3, None) else {
        panic!("Chrome's L3T3 sample parses");
    };
    let st = chrome.structure.as_ref();
    if let Ok(dd) = DependencyDescriptor::parse(data, st) {
        round_trip(&dd, st);
    }
    let mut t = Av1DdTracker::new();
    let mut sel = LayerSelector::default();
    let _ = t.read(&CHROME_L3T3, false);
    for (k, chunk) in data.chunks(5).enumerate() {
        if k % 4 == 0 {
            sel.set_target(chunk.first().map_or(2, |b| b & 3), chunk.len() as u8 & 3);
        }
        if let Ok(info) = t.layer_info(chunk, k % 2 == 0) {
            let _ = sel.select(source_of(chunk), &info);
            let _ = (
                sel.current(),
                sel.needs_keyframe(),
                sel.active_decode_targets(),
            );
        }
    }
    let snap = t.snapshot();
    assert!(Av1DdTracker::restore(&snap).is_ok());
}

/// The source stream a fuzzed packet came on: two of them (0 and 1, from the chunk's last
/// byte), as when a publisher's encoder restarts on a new SSRC.
fn source_of(chunk: &[u8]) -> u32 {
    u32::from(chunk.last().is_some_and(|b| b & 0x80 != 0))
}

/// Fuzz body (`fuzz/fuzz_targets/vp9.rs`): parses arbitrary bytes, and checks that whatever
/// parses writes back to the same descriptor and feeds the layer selector without a panic.
pub fn fuzz_vp9(data: &[u8]) {
    if let Ok(d) = Vp9Descriptor::parse(data) {
        assert!(d.len <= data.len());
        assert!(usize::from(d.p_diff_count) <= MAX_P_DIFFS);
        let gof: Vec<GofEntry> = d.gof(data).collect();
        assert_eq!(
            gof.len(),
            usize::from(d.ss.and_then(|s| s.gof_pictures).unwrap_or(0))
        );
        let mut buf = vec![0u8; d.len];
        assert_eq!(d.write(&gof, &mut buf), Ok(d.len), "canonical length");
        assert_eq!(Vp9Descriptor::parse(&buf), Ok(d), "round trip");
    }
    // The input as a stream of small packets through both selector modes.
    for mode in [SvcMode::Full, SvcMode::KSvc] {
        let mut sel = LayerSelector::new(mode);
        for (k, chunk) in data.chunks(7).enumerate() {
            if k % 5 == 0 {
                sel.set_target(chunk.first().map_or(2, |b| b & 3), chunk.len() as u8 & 3);
            }
            if let Some(info) = vp9_layer_info(chunk, k % 3 == 0) {
                let _ = sel.select(source_of(chunk), &info);
                let _ = (sel.current(), sel.needs_keyframe());
            }
        }
        let snap = sel.snapshot();
        assert_eq!(LayerSelector::restore(snap).snapshot(), snap);
    }
}
