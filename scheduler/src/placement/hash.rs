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
//!   operations only (its table is built at compile time the same way) (`+ - * /` are correctly rounded on every platform and
//!   Rust never fuses them), so the same bits give the same `f64` everywhere.

/// The SplitMix64 increment (2^64 / φ, odd).
pub(crate) const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

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
    // Through i64: a signed conversion is one instruction on x86-64.
    (((bits >> 11) + 1) as i64) as f64 * SCALE
}

/// Bits of the `ln` table index.
const LN_BITS: u32 = 8;
const LN_SIZE: usize = 1 << LN_BITS;

/// `(1/c, ln c)` for `c = 1 + (j + ½)/256`: built at compile time with
/// basic operations only, so the same on every platform.
static LN_TABLE: [(f64, f64); LN_SIZE] = ln_table();

/// `ln m` for `m` in [1, 2]: `2·atanh(s)`, `s = (m−1)/(m+1) ≤ ⅓`, 40 terms.
const fn ln_series(m: f64) -> f64 {
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut term = s;
    let mut sum = 0.0;
    let mut k = 0;
    while k < 40 {
        sum += term / (2 * k + 1) as f64;
        term *= s2;
        k += 1;
    }
    2.0 * sum
}

const fn ln_table() -> [(f64, f64); LN_SIZE] {
    let mut t = [(0.0, 0.0); LN_SIZE];
    let mut j = 0;
    while j < LN_SIZE {
        let c = 1.0 + (j as f64 + 0.5) / LN_SIZE as f64;
        t[j] = (1.0 / c, ln_series(c));
        j += 1;
    }
    t
}

/// `ln(u)` for `u` in (0, 1], from basic IEEE operations only.
///
/// `u = m·2^e`, `m` in [1, 2); `ln m = ln c + ln(1 + r)` with `c` the nearest
/// of 256 table points and `r = m/c − 1`, |r| < 1/512, by a degree-4 series
/// evaluated in Estrin's form (short dependency chain): absolute error below
/// 2e-14, far below anything a share or a movement property can notice, and
/// no division on the lookup path.
#[inline(always)]
pub(crate) fn ln_unit(u: f64) -> f64 {
    const LN2: f64 = std::f64::consts::LN_2;
    let bits = u.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let j = ((bits >> (52 - LN_BITS)) as usize) & (LN_SIZE - 1);
    let m = f64::from_bits((bits & 0x000F_FFFF_FFFF_FFFF) | (1023u64 << 52));
    let (inv, ln_c) = LN_TABLE[j];
    let r = m * inv - 1.0;
    let r2 = r * r;
    let p = (r - 0.5 * r2) + r2 * (r * (1.0 / 3.0) - 0.25 * r2);
    e as f64 * LN2 + (ln_c + p)
}

/// An Exp(1) variate from 64 random bits; never negative (at `u = 1` the
/// table's rounding would give −6e-15), so times never run backwards.
#[inline(always)]
pub(crate) fn exp1(bits: u64) -> f64 {
    (-ln_unit(unit(bits))).max(0.0)
}

/// A lower bound of [`exp1`] without a logarithm: `−ln u ≥ 1 − u`, less
/// more than `ln_unit`'s absolute error.
#[inline(always)]
pub(crate) fn exp1_floor(bits: u64) -> f64 {
    (1.0 - unit(bits)) - 1e-13
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
            assert!(exp1_floor(x) <= exp1(x));
            assert!(
                (ours - std).abs() <= 2e-14 * std.abs().max(1.0),
                "{u}: {ours} vs {std}"
            );
        }
        assert!(ln_unit(1.0).abs() < 1e-14);
        assert!((ln_unit(0.5) + std::f64::consts::LN_2).abs() < 1e-14);
        assert_eq!(exp1(u64::MAX), 0.0);
    }

    #[test]
    fn fastrange_covers_the_range() {
        assert_eq!(fastrange(0, 7), 0);
        assert_eq!(fastrange(u64::MAX, 7), 6);
        assert_eq!(fastrange(u64::MAX, 1), 0);
    }
}
