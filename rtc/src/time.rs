//! Conversions between the core's `Instant`s and the relative times stored in
//! snapshots (an `Instant` means nothing on another machine).

use std::time::{Duration, Instant};

/// Milliseconds from `then` to `now` (0 if `then` is later).
pub fn age_ms(now: Instant, then: Instant) -> u64 {
    now.saturating_duration_since(then).as_millis() as u64
}

/// The instant `age_ms` before `now`, clamped to `now` if that cannot be represented.
pub fn from_age_ms(now: Instant, age_ms: u64) -> Instant {
    now.checked_sub(Duration::from_millis(age_ms))
        .unwrap_or(now)
}

/// Microseconds from `b` to `a`, negative when `a` is earlier.
pub fn signed_us(a: Instant, b: Instant) -> i64 {
    match a.checked_duration_since(b) {
        Some(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        None => -i64::try_from(b.saturating_duration_since(a).as_micros()).unwrap_or(i64::MAX),
    }
}

/// Maps core instants to wall-clock time for NTP timestamps. The driver sets
/// it once from the system clock; simulations use a fixed epoch.
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    /// An instant...
    pub base: Instant,
    /// ...and the Unix time it corresponds to.
    pub unix_at_base: Duration,
}

impl WallClock {
    /// Unix time at `now`.
    pub fn unix(&self, now: Instant) -> Duration {
        match now.checked_duration_since(self.base) {
            Some(d) => self.unix_at_base + d,
            None => self
                .unix_at_base
                .saturating_sub(self.base.saturating_duration_since(now)),
        }
    }

    /// 64-bit NTP timestamp at `now`.
    pub fn ntp(&self, now: Instant) -> u64 {
        crate::rtcp::ntp_from_unix(self.unix(now))
    }
}

/// Adds a duration to a 64-bit NTP timestamp.
pub fn ntp_add(ntp: u64, d: Duration) -> u64 {
    let add = (d.as_secs() << 32) + ((u64::from(d.subsec_nanos()) << 32) / 1_000_000_000);
    ntp.wrapping_add(add)
}
