//! Stable hashing for placement.
//!
//! Placements must not change when the scheduler is rebuilt with another
//! Rust version or runs on another platform, so nothing here uses std's
//! `DefaultHasher` (its algorithm is explicitly unspecified) or the
//! platform's `ln` (libm results may differ in the last bit):
//!
//! - keys are hashed with XXH3-64 (seed 0), a published, frozen algorithm;
//! - per-key random streams are SplitMix64: a 64-bit counter advanced by the
//!   golden-ratio increment and finalised with Stafford's "mix13";
//! - exponential variates use [`ln_unit`], written with IEEE-754 basic
//!   operations only (`+ - * /` are correctly rounded on every platform and
//!   Rust never fuses them), so the same bits give the same `f64` everywhere.

/// The SplitMix64 increment (2^64 / φ, odd).
pub(crate) const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Salt that separates a generation's time stream from its landing stream.
pub(crate) const TIME_SALT: u64 = 0x5851_F42D_4C95_7F2D;

/// Salt for the rendezvous (last-resort) order.
pub(crate) const RENDEZVOUS_SALT: u64 = 0x2545_F491_4F6C_DD1D;

/// A hashed placement key: the first step of every lookup.
///
/// Build it once with [`Key::new`] when the same key is looked up under
/// several policies or several times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub(crate) u64);

impl Key {
    /// XXH3-64 of the key bytes (a stream key, room key, …).
    pub fn new(bytes: &[u8]) -> Key {
        Key(xxhash_rust::xxh3::xxh3_64(bytes))
    }

    /// A key from an already well-mixed 64-bit hash (benchmarks, callers
    /// that hash keys themselves).
    pub fn from_hash(hash: u64) -> Key {
        Key(hash)
    }

    /// The 64-bit hash.
    pub fn hash(self) -> u64 {
        self.0
    }
}

impl From<&[u8]> for Key {
    fn from(bytes: &[u8]) -> Key {
        Key::new(bytes)
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Key {
        Key::new(s.as_bytes())
    }
}

/// SplitMix64's finaliser: a bijection on `u64` with full avalanche.
#[inline(always)]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stable 64-bit hash of a string (zone names, node ids for the ring and
/// Maglev).
pub(crate) fn str_hash(s: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(s.as_bytes())
}

/// A uniform in (0, 1] from the top 53 bits.
#[inline(always)]
pub(crate) fn unit(bits: u64) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    ((bits >> 11) + 1) as f64 * SCALE
}

/// `ln(u)` for `u` in (0, 1], from basic IEEE operations only.
///
/// `u = m·2^e` with `m` in [√½, √2); `ln m = 2·atanh(s)`, `s = (m−1)/(m+1)`,
/// |s| ≤ 0.1716, summed to s¹⁵: relative error below 1e-13, which is far
/// below what any share or movement property can notice.
#[inline]
pub(crate) fn ln_unit(u: f64) -> f64 {
    const LN2: f64 = std::f64::consts::LN_2;
    const SQRT2: f64 = std::f64::consts::SQRT_2;
    let bits = u.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000F_FFFF_FFFF_FFFF) | (1023u64 << 52));
    if m > SQRT2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let p = 1.0
        + s2 * (1.0 / 3.0
            + s2 * (1.0 / 5.0
                + s2 * (1.0 / 7.0
                    + s2 * (1.0 / 9.0 + s2 * (1.0 / 11.0 + s2 * (1.0 / 13.0 + s2 / 15.0))))));
    e as f64 * LN2 + 2.0 * s * p
}

/// An Exp(1) variate from 64 random bits.
#[inline]
pub(crate) fn exp1(bits: u64) -> f64 {
    -ln_unit(unit(bits))
}

/// `floor(x · n / 2^32)` for the top 32 bits of `x`: a uniform index in
/// `0..n` (Lemire's multiply-shift; bias at most n/2^32).
#[inline(always)]
pub(crate) fn fastrange(x: u64, n: u32) -> u32 {
    (((x >> 32) * u64::from(n)) >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_reference_stream() {
        // SplitMix64 seeded with 0 (Vigna's reference implementation).
        assert_eq!(mix64(GOLDEN), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix64(GOLDEN.wrapping_mul(2)), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn key_hash_is_xxh3_64_seed_0() {
        // XXH3-64 of the empty input is fixed by the specification.
        assert_eq!(Key::new(b"").hash(), 0x2D06_8005_38D3_94C2);
        assert_eq!(Key::from("room-1"), Key::new(b"room-1"));
    }

    #[test]
    fn ln_unit_agrees_with_std() {
        let mut x = 1u64;
        for _ in 0..100_000 {
            x = mix64(x.wrapping_add(GOLDEN));
            let u = unit(x);
            let ours = ln_unit(u);
            let std = u.ln();
            assert!(
                (ours - std).abs() <= 1e-13 * std.abs().max(1e-300) + 1e-15,
                "{u}: {ours} vs {std}"
            );
        }
        assert_eq!(ln_unit(1.0), 0.0);
        assert!((ln_unit(0.5) + std::f64::consts::LN_2).abs() < 1e-15);
    }

    #[test]
    fn fastrange_covers_the_range() {
        assert_eq!(fastrange(0, 7), 0);
        assert_eq!(fastrange(u64::MAX, 7), 6);
        assert_eq!(fastrange(u64::MAX, 1), 0);
    }
}
