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
    /// NACKed sequence numbers received from viewers.
    nacks_received,
    /// Packets retransmitted to viewers.
    retransmissions_sent,
    /// NACKed packets no longer in the cache.
    retransmissions_missed,
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
    /// Signalling requests rejected with a 4xx error.
    signal_rejected,
    /// Media packets relayed to other nodes.
    relay_sent,
    /// Media packets received from relays.
    relay_received,
    /// Relay datagrams refused (unauthenticated, unknown stream, wrong origin).
    relay_refused,
    /// Packets re-sent on a relay link after a relay NACK.
    relay_retransmitted,
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

#[cfg(test)]
mod tests {
    use super::*;

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
