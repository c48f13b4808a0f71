//! A viewer's send-side bandwidth estimator (`ferry_rtc::bwe`), as plain data.
//!
//! It carries what lets a migrated viewer continue at the estimate it had,
//! without a slow start: the estimate and its parts (delay-based rate control
//! with its link-capacity estimate, the loss-based cap, the acknowledged
//! bitrate), the overuse detector's adaptive threshold, and the probing
//! back-off. The sent-packet history and the arrival groups are left out:
//! feedback for packets the old node sent means nothing on the new one.
//! Times are ages relative to the snapshot instant.

/// The estimator's state.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BweState {
    /// The estimate the allocator was given (bps).
    #[prost(uint64, tag = "1")]
    pub estimate_bps: u64,
    /// The delay-based (AIMD) estimate (bps).
    #[prost(uint64, tag = "2")]
    pub delay_bps: u64,
    /// Rate-control state: 0 hold, 1 increase, 2 decrease.
    #[prost(uint32, tag = "3")]
    pub rate_state: u32,
    /// Link-capacity estimate of the rate control (kbps), if known.
    #[prost(double, optional, tag = "4")]
    pub link_capacity_kbps: Option<f64>,
    /// Normalised variance of the link-capacity estimate.
    #[prost(double, tag = "5")]
    pub link_capacity_deviation: f64,
    /// Age of the rate control's last change, in ms.
    #[prost(uint64, optional, tag = "6")]
    pub rate_change_age_ms: Option<u64>,
    /// The loss-based cap (bps), if loss limits the estimate.
    #[prost(uint64, optional, tag = "7")]
    pub loss_cap_bps: Option<u64>,
    /// Last measured loss fraction, in 1/256 (RTCP's scale).
    #[prost(uint32, tag = "8")]
    pub fraction_lost: u32,
    /// Age of the last loss-based decrease, in ms.
    #[prost(uint64, optional, tag = "9")]
    pub loss_decrease_age_ms: Option<u64>,
    /// Acknowledged bitrate estimate (kbps), if any.
    #[prost(double, optional, tag = "10")]
    pub acked_kbps: Option<f64>,
    /// Variance of the acknowledged bitrate estimate.
    #[prost(double, tag = "11")]
    pub acked_var: f64,
    /// Adaptive threshold of the overuse detector.
    #[prost(double, tag = "12")]
    pub threshold: f64,
    /// Detector hypothesis: 0 normal, 1 underusing, 2 overusing.
    #[prost(uint32, tag = "13")]
    pub hypothesis: u32,
    /// Smoothed round-trip time, in µs.
    #[prost(uint64, tag = "14")]
    pub rtt_us: u64,
    /// Last REMB value (bps), if the viewer sent one.
    #[prost(uint64, optional, tag = "15")]
    pub remb_bps: Option<u64>,
    /// The viewer sends transport-wide CC feedback.
    #[prost(bool, tag = "16")]
    pub twcc: bool,
    /// Probes that failed in a row.
    #[prost(uint32, tag = "17")]
    pub probe_failures: u32,
    /// Time until the next probe is allowed, in ms.
    #[prost(uint64, tag = "18")]
    pub probe_wait_ms: u64,
    /// Next probe cluster id.
    #[prost(uint32, tag = "19")]
    pub next_probe_id: u32,
    /// Nothing has said yet where the path ends (no overuse, no probe): the estimate is held
    /// at least at the acknowledged bitrate. Absent in older snapshots: held no longer.
    #[prost(bool, tag = "20")]
    pub acked_floor: bool,
}
