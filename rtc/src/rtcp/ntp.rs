//! NTP timestamps as RTCP uses them (RFC 3550 §4, §6.4.1).

use std::time::Duration;

/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_UNIX_OFFSET_SECS: u64 = 2_208_988_800;

/// The 64-bit NTP timestamp (32.32 fixed point) for a time since the Unix epoch.
///
/// The seconds wrap modulo 2^32 (NTP era 1 starts in 2036), as the wire format does.
pub fn ntp_from_unix(since_unix_epoch: Duration) -> u64 {
    let secs = since_unix_epoch
        .as_secs()
        .wrapping_add(NTP_UNIX_OFFSET_SECS);
    let frac = (u64::from(since_unix_epoch.subsec_nanos()) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// The time since the Unix epoch for an NTP timestamp; seconds below the Unix epoch are read as
/// NTP era 1 (after February 2036). Exact inverse of [`ntp_from_unix`] at nanosecond precision.
pub fn unix_from_ntp(ntp: u64) -> Duration {
    let ntp_secs = ntp >> 32;
    let secs = if ntp_secs >= NTP_UNIX_OFFSET_SECS {
        ntp_secs - NTP_UNIX_OFFSET_SECS
    } else {
        ntp_secs + (1 << 32) - NTP_UNIX_OFFSET_SECS
    };
    let nanos = ((ntp & 0xFFFF_FFFF) * 1_000_000_000 + (1 << 31)) >> 32;
    Duration::from_secs(secs) + Duration::from_nanos(nanos)
}

/// The middle 32 bits of an NTP timestamp (16.16 fixed point), as carried in LSR.
pub fn ntp_short(ntp: u64) -> u32 {
    (ntp >> 16) as u32
}

/// A delay in DLSR units (1/65536 s), rounded down and saturating at `u32::MAX`.
pub fn dlsr_from_duration(delay: Duration) -> u32 {
    let units = (delay.as_nanos() << 16) / 1_000_000_000;
    u32::try_from(units).unwrap_or(u32::MAX)
}

/// A DLSR value (1/65536 s) as a duration, rounded to the nearest nanosecond.
pub fn duration_from_dlsr(dlsr: u32) -> Duration {
    let nanos = (u64::from(dlsr) * 1_000_000_000 + (1 << 15)) >> 16;
    Duration::from_nanos(nanos)
}

/// Round-trip time from a report block (RFC 3550 §6.4.1): `arrival - LSR - DLSR`, all in compact
/// NTP (`arrival` is [`ntp_short`] of the time the report arrived). `None` when the block carries
/// no LSR; a negative result (clock trouble) reads as zero.
pub fn rtt(arrival: u32, last_sr: u32, delay_since_last_sr: u32) -> Option<Duration> {
    if last_sr == 0 {
        return None;
    }
    let units = arrival
        .wrapping_sub(last_sr)
        .wrapping_sub(delay_since_last_sr);
    Some(if units > 1 << 31 {
        Duration::ZERO
    } else {
        duration_from_dlsr(units)
    })
}
