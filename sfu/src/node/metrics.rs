//! Counters of one node, rendered as Prometheus text. The core increments
//! plain integers; nothing on the media path locks or allocates for them.

use std::fmt::Write as _;

macro_rules! metrics {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// Monotonic counters of one node.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct NodeMetrics {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl NodeMetrics {
            /// `(name, help, value)` for every counter.
            pub fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
                vec![$((stringify!($name), concat!($($doc),*), self.$name)),*]
            }

            /// Adds `other`'s counts (the cores of one node).
            pub fn add(&mut self, other: &NodeMetrics) {
                $(self.$name += other.$name;)*
            }
        }
    };
}

metrics! {
    /// Datagrams received.
    rx_datagrams,
    /// Bytes received.
    rx_bytes,
    /// Datagrams queued for sending.
    tx_datagrams,
    /// Bytes queued for sending.
    tx_bytes,
    /// Datagrams dropped because they exceed the maximum size.
    dropped_oversize,
    /// Datagrams from an address that belongs to no session.
    dropped_unknown_source,
    /// Datagrams that are neither STUN, DTLS, RTP nor RTCP.
    dropped_unknown_protocol,
    /// STUN messages that failed to parse or authenticate.
    stun_errors,
    /// SRTP/SRTCP packets that failed authentication.
    srtp_auth_failures,
    /// SRTP/SRTCP packets rejected as replays or too old.
    srtp_replays,
    /// Media packets dropped because the session has no keys yet.
    dropped_before_dtls,
    /// RTP packets that failed to parse.
    rtp_parse_errors,
    /// RTCP packets that failed to parse.
    rtcp_parse_errors,
    /// RTP packets from a publisher that match no negotiated track.
    rtp_unknown_stream,
    /// Padding-only RTX packets (bandwidth probes) dropped.
    padding_dropped,
    /// RTP packets received from publishers.
    rtp_received,
    /// RTP packets forwarded to viewers.
    rtp_forwarded,
    /// Packets a munger dropped while waiting for a keyframe.
    dropped_waiting_keyframe,
    /// Video packets not sent to viewers that an overloaded node shed (whole frames).
    dropped_overload,
    /// Times a viewer began skipping video (until a keyframe) because the node was overloaded.
    overload_sheds,
    /// Keyframe requests sent so that the set of shed viewers rotates.
    overload_keyframe_requests,
    /// NACKed sequence numbers received from viewers.
    nacks_received,
    /// Packets retransmitted to viewers.
    retransmissions_sent,
    /// NACKed packets no longer in the cache.
    retransmissions_missed,
    /// NACKed packets not resent: the viewer's retransmissions of the last second had reached
    /// its bandwidth estimate.
    retransmissions_over_budget,
    /// Sequence numbers NACKed towards publishers.
    nacks_sent,
    /// Publisher packets given up on after NACK retries.
    nack_gave_up,
    /// Keyframe requests (PLI) sent to publishers.
    plis_sent,
    /// Keyframe requests (PLI/FIR) received from viewers.
    keyframe_requests_received,
    /// Sessions created.
    sessions_created,
    /// Sessions closed.
    sessions_closed,
    /// Sessions resumed by their client with a ticket (a new transport, the same session).
    sessions_resumed,
    /// Relay subscriptions moved to a stream's new origin (its publisher came back elsewhere).
    relays_repointed,
    /// Sessions that reached DTLS connected.
    sessions_connected,
    /// DTLS handshakes that failed.
    dtls_failures,
    /// Sessions ended because ICE consent expired.
    consent_expired,
    /// ICE path switches.
    ice_path_switches,
    /// Socket send errors.
    send_errors,
    /// Datagrams a worker received for another core and handed to it (`--workers` > 1).
    handed_off,
    /// Datagrams dropped because the owning core's inbox was full.
    handoff_dropped,
    /// Signalling requests rejected with a 4xx error.
    signal_rejected,
    /// Media packets relayed to other nodes.
    relay_sent,
    /// Media packets received from relays.
    relay_received,
    /// Relay datagrams refused (unauthenticated, unknown stream, wrong origin).
    relay_refused,
    /// Relay datagrams refused as replays: authentic, but seen before (counted in
    /// relay_refused too).
    relay_replayed,
    /// Media packets a stream's old origin relayed before its publisher moved here, taken after
    /// the move (counted in relay_received too).
    relay_drained,
    /// Packets re-sent on a relay link after a relay NACK.
    relay_retransmitted,
    /// Relay subscribers sent on to another subscriber (this origin relays the stream to
    /// `--relay-fanout` nodes already) or back to the origin (this node stopped relaying).
    relay_redirects,
    /// Relayed-in streams whose source, a node one level down from the origin, went silent for
    /// [`crate::cluster::relay::PARENT_SILENCE`]: subscribed at the origin directly instead.
    relay_parent_failovers,
    /// Viewers (and recordings) that waited for a stream published on another node and got it
    /// ([`crate::node::RELAY_WAIT`]).
    relay_waits_answered,
    /// Those whose stream's relay was not offered within [`crate::node::RELAY_WAIT`] (404).
    relay_waits_timed_out,
    /// Media packets of a stream relayed in here and relayed on to other nodes (counted in
    /// relay_sent too).
    relay_forwarded,
    /// Client datagrams received through an edge or a forwarding node.
    tunnel_received,
    /// Tunnel datagrams refused (unauthenticated, malformed, no such session).
    tunnel_refused,
    /// Datagrams for a client dropped because a stale owner sent them.
    tunnel_fenced,
    /// Datagrams of a session that moved away sent on to its new owner.
    forwarded_to_owner,
    /// Datagrams of a moved session's new owner sent on to its client.
    forwarded_to_client,
    /// Datagrams held for a frozen or imported session.
    held_datagrams,
    /// Held datagrams dropped because the hold queue was full.
    held_dropped,
    /// Ownership claims sent to the edge.
    edge_claims,
    /// Sessions migrated away from this node (committed).
    migrations_out,
    /// Sessions migrated to this node (activated).
    migrations_in,
    /// Migrations of a session away from this node rolled back.
    migrations_rolled_back,
    /// Times a viewer's track switched to another simulcast layer (at its keyframe).
    layer_switches,
    /// Allocations that moved a viewer's track to a higher layer.
    layer_ups,
    /// Allocations that moved a viewer's track to a lower layer.
    layer_downs,
    /// Transport-wide CC feedback messages received from viewers.
    twcc_feedback_received,
    /// Transport-wide CC feedback messages sent to publishers.
    twcc_feedback_sent,
    /// Padding packets sent to viewers to probe for bandwidth.
    probe_packets,
    /// Bytes of those probes.
    probe_bytes,
}

impl NodeMetrics {
    /// Prometheus text exposition of the counters, prefixed `ferry_node_`.
    pub fn to_prometheus(&self) -> String {
        let mut s = String::new();
        for (name, help, value) in self.counters() {
            let _ = writeln!(s, "# HELP ferry_node_{name}_total {}", help.trim());
            let _ = writeln!(s, "# TYPE ferry_node_{name}_total counter");
            let _ = writeln!(s, "ferry_node_{name}_total {value}");
        }
        s
    }
}

/// Upper bounds (seconds) of the migration duration histograms: 1 ms to 10 s, dense below the
/// 200 ms blackout goal (DESIGN §9, seed 004 §4.4).
pub const DURATION_BUCKETS_S: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A Prometheus histogram: cumulative counts per upper bound, `+Inf`, sum and count.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations ≤ each bound (not yet cumulative).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Default for Histogram {
    /// An empty histogram of durations ([`DURATION_BUCKETS_S`]).
    fn default() -> Self {
        Histogram::new(DURATION_BUCKETS_S)
    }
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one value.
    pub fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Appends the `_bucket`, `_sum` and `_count` samples of `name` with `labels` (`k="v",…`,
    /// possibly empty); the caller writes `# HELP` / `# TYPE name histogram` once.
    pub fn write(&self, s: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cumulative += c;
            let _ = writeln!(s, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(
            s,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(s, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(s, "{name}_count{braces} {}", self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_cumulatively_with_inf_sum_and_count() {
        let mut h = Histogram::new(&[0.01, 0.1]);
        for v in [0.005, 0.01, 0.05, 3.0] {
            h.observe(v);
        }
        let mut s = String::new();
        h.write(&mut s, "x_seconds", "phase=\"wal\"");
        assert_eq!(
            s,
            "x_seconds_bucket{phase=\"wal\",le=\"0.01\"} 2\n\
             x_seconds_bucket{phase=\"wal\",le=\"0.1\"} 3\n\
             x_seconds_bucket{phase=\"wal\",le=\"+Inf\"} 4\n\
             x_seconds_sum{phase=\"wal\"} 3.065\n\
             x_seconds_count{phase=\"wal\"} 4\n"
        );
        let mut s = String::new();
        Histogram::default().write(&mut s, "y", "");
        assert!(s.starts_with("y_bucket{le=\"0.001\"} 0\n"), "{s}");
        assert!(s.ends_with("y_sum 0\ny_count 0\n"), "{s}");
    }

    #[test]
    fn renders_every_counter() {
        let m = NodeMetrics {
            rx_datagrams: 3,
            ..Default::default()
        };
        let text = m.to_prometheus();
        assert!(text.contains("ferry_node_rx_datagrams_total 3\n"));
        assert!(text.contains("# HELP ferry_node_signal_rejected_total Signalling requests"));
        assert_eq!(text.matches("# TYPE").count(), m.counters().len());
    }
}
