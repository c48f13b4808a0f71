//! Exportable state of the ICE-lite agent.

/// State of one ICE-lite agent (`ferry_sfu::ice::IceLite`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct IceState {
    #[prost(string, tag = "1")]
    pub local_ufrag: String,
    #[prost(string, tag = "2")]
    pub local_pwd: String,
    #[prost(string, tag = "3")]
    pub remote_ufrag: String,
    #[prost(string, tag = "4")]
    pub remote_pwd: String,
    /// Nominated remote address, `"ip:port"` (IPv6 as `"[ip]:port"`), empty when none.
    #[prost(string, tag = "5")]
    pub selected_addr: String,
    /// Milliseconds between the last consent refresh from the selected address and the snapshot;
    /// `None` when nothing is selected. Values of 30 000 and above mean consent had expired.
    #[prost(uint64, optional, tag = "6")]
    pub consent_age_ms: Option<u64>,
    /// Last address that passed a check without nominating, empty when none (diagnostics only).
    #[prost(string, tag = "7")]
    pub candidate_addr: String,
}
