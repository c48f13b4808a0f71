//! Cascade relay on the node: subscribing to a stream published elsewhere,
//! serving subscriptions to local streams, and the relay control plane
//! (offers, relay-link NACKs, keyframe requests, sender reports).

use std::net::SocketAddr;
use std::time::Instant;

use ferry_proto::StreamId;

use super::Node;
use crate::cluster::relay::{
    self, Control, MediaHeader, Offer, Redirect, RelayIn, RelayNack, RelayOut, RelaySr, RelayTrack,
    Subscribe, control::Body,
};
use crate::cluster::relay_seal::RelaySealer;
use crate::media::line::MediaLine;
use crate::media::munger::SourcePacket;
use crate::node::session::Role;
use crate::rtp::RtpHeader;

impl Node {
    fn send_control(&mut self, to: SocketAddr, body: Body) {
        let Some(seal) = self.relay_sealer.as_mut() else {
            return;
        };
        let data = relay::write_control(seal, &Control { body: Some(body) });
        self.out.send(to, data);
    }

    /// Subscribes to `stream` published on the node at `origin`. Local
    /// viewers can be created once the origin's offer arrived
    /// ([`Node::relay_ready`]). A stream published here is not relayed in.
    pub fn subscribe_relay(&mut self, now: Instant, stream: &StreamId, origin: SocketAddr) {
        if self.config.cluster_key.is_none() {
            return;
        }
        let cache = self.config.nack_cache;
        let entry = self.streams.entry(stream.clone()).or_default();
        if entry.publisher.is_some() {
            return;
        }
        match &mut entry.relay_in {
            Some(r) if r.origin == origin => return,
            Some(r) => *r = RelayIn::new(origin, now, cache),
            None => entry.relay_in = Some(RelayIn::new(origin, now, cache)),
        }
        self.relay_ids
            .insert(relay::relay_id(stream), stream.clone());
        let load = self.relay_load();
        self.send_control(
            origin,
            Body::Subscribe(Subscribe {
                stream: stream.to_string(),
                direct: false,
                load,
            }),
        );
        self.note_relay_deadline(now);
    }

    /// Sends the subscription of `stream`'s relay again now (its offer has not come and a
    /// request waits for it).
    pub(super) fn ask_relay_again(&mut self, stream: &StreamId) {
        let Some((origin, direct)) = self
            .streams
            .get(stream)
            .and_then(|e| e.relay_in.as_ref())
            .filter(|r| !r.ready())
            .map(|r| (r.origin, r.direct))
        else {
            return;
        };
        let load = self.relay_load();
        self.send_control(
            origin,
            Body::Subscribe(Subscribe {
                stream: stream.to_string(),
                direct,
                load,
            }),
        );
    }

    /// What this core would relay a stream on with, as a subscription tells its origin: its
    /// sessions and the relay links it sends (each costs a send per packet like a viewer).
    pub(super) fn relay_load(&self) -> u32 {
        let links: usize = self.streams.values().map(|e| e.relay_out.len()).sum();
        u32::try_from(self.by_id.len() + links).unwrap_or(u32::MAX)
    }

    pub(super) fn unsubscribe_relay(&mut self, stream: &StreamId, origin: SocketAddr) {
        self.relay_ids.retain(|_, s| s != stream);
        self.send_control(origin, Body::Unsubscribe(Subscribe::of(stream)));
    }

    /// Sets how many nodes a stream published here is relayed to directly
    /// ([`super::NodeConfig::relay_fanout`]).
    pub fn set_relay_fanout(&mut self, n: usize) {
        self.config.relay_fanout = n;
    }

    /// The node `stream` is relayed in from, if it is.
    pub fn relay_source(&self, stream: &StreamId) -> Option<SocketAddr> {
        self.streams
            .get(stream)?
            .relay_in
            .as_ref()
            .map(|r| r.origin)
    }

    /// Every stream relayed in (and offered), with the node it comes from.
    pub fn relay_sources(&self) -> Vec<(StreamId, SocketAddr)> {
        self.streams
            .iter()
            .filter_map(|(name, e)| {
                let r = e.relay_in.as_ref().filter(|r| r.ready())?;
                Some((name.clone(), r.origin))
            })
            .collect()
    }

    /// Nodes `stream` is relayed to from here.
    pub fn relay_subscribers(&self, stream: &StreamId) -> Vec<SocketAddr> {
        self.streams
            .get(stream)
            .map(|e| e.relay_out.iter().map(|r| r.addr).collect())
            .unwrap_or_default()
    }

    /// Whether a relayed `stream` has been offered (viewers can join).
    pub fn relay_ready(&self, stream: &StreamId) -> bool {
        self.streams
            .get(stream)
            .and_then(|e| e.relay_in.as_ref())
            .is_some_and(RelayIn::ready)
    }

    pub(super) fn note_relay_deadline(&mut self, now: Instant) {
        let t = self.next_relay_tick.max(now);
        self.next_timeout = Some(self.next_timeout.map_or(t, |n| n.min(t)));
    }

    /// The publisher's m-lines of a stream, local or relayed.
    pub(super) fn source_lines(&self, stream: &StreamId) -> Option<Vec<MediaLine>> {
        let entry = self.streams.get(stream)?;
        if let Some(p) = entry.publisher.and_then(|k| self.sessions[k].as_ref()) {
            return Some(p.media.clone());
        }
        entry
            .relay_in
            .as_ref()
            .filter(|r| r.ready())
            .map(|r| r.media.clone())
    }

    /// Follows streams whose relay source died: to where their publisher is now (it reconnected
    /// to another node), or — the source was a node one level down from an origin that still
    /// publishes it — to that origin, keeping what was relayed so far (the numbering is the
    /// origin's, so the hole the death left is NACKed there). Only a dead source is left: during
    /// a planned migration the relay follows the origin's own offers, ahead of the routing
    /// table. Nodes declared down stop being relayed to.
    pub fn repoint_relays(
        &mut self,
        now: Instant,
        origins: &std::collections::HashMap<StreamId, SocketAddr>,
        down: &std::collections::HashSet<SocketAddr>,
    ) {
        let previous = std::mem::replace(&mut self.origins, origins.clone());
        for e in self.streams.values_mut() {
            e.relay_out.retain(|r| !down.contains(&r.addr));
        }
        let moves: Vec<(StreamId, SocketAddr, bool)> = self
            .streams
            .iter()
            .filter(|(_, e)| e.publisher.is_none())
            .filter_map(|(name, e)| {
                let r = e.relay_in.as_ref()?;
                let to = *origins.get(name)?;
                let same_origin = previous.get(name) == Some(&to);
                (to != r.origin && down.contains(&r.origin))
                    .then(|| (name.clone(), to, same_origin))
            })
            .collect();
        for (stream, to, same_origin) in moves {
            self.out.metrics.relays_repointed += 1;
            if same_origin {
                tracing::info!(%stream, %to, "relay source died: back to the stream's origin");
                self.resubscribe(now, &stream, to);
            } else {
                tracing::info!(%stream, %to, "relay origin died: following the stream's publisher");
                self.subscribe_relay(now, &stream, to);
            }
        }
    }

    /// Whether `stream` can be played here (published here, or relayed in and offered).
    pub fn has_stream(&self, stream: &StreamId) -> bool {
        self.source_lines(stream).is_some()
    }

    /// Sends `Offer` for a local stream to a subscriber.
    pub(super) fn send_offer(&mut self, stream: &StreamId, to: SocketAddr, live: bool) {
        self.send_offer_from(stream, to, live, None);
    }

    /// Sends `Offer`; `previous_origin` when the publisher just moved here
    /// from that node.
    pub(super) fn send_offer_from(
        &mut self,
        stream: &StreamId,
        to: SocketAddr,
        live: bool,
        previous_origin: Option<SocketAddr>,
    ) {
        let media = if live {
            self.source_lines(stream)
                .map(|m| m.iter().map(MediaLine::to_state).collect())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        self.send_control(
            to,
            Body::Offer(Offer {
                stream: stream.to_string(),
                relay_id: relay::relay_id(stream),
                media,
                live,
                moved_to: self
                    .moved_streams
                    .get(stream)
                    .filter(|_| !live)
                    .map(|(to, _)| to.to_string())
                    .unwrap_or_default(),
                previous_origin: previous_origin.map(|a| a.to_string()).unwrap_or_default(),
            }),
        );
    }

    /// Relays one forwarded packet of `stream` (published here, or relayed in from `except`)
    /// to the subscribed nodes.
    pub(super) fn relay_out(
        &mut self,
        stream: &StreamId,
        line: usize,
        src: &SourcePacket,
        rtp: &[u8],
        except: Option<SocketAddr>,
    ) {
        let Some(entry) = self.streams.get(stream) else {
            return;
        };
        if entry.relay_out.is_empty() {
            return;
        }
        let Some(seal) = self.relay_sealer.as_mut() else {
            return;
        };
        let h = MediaHeader {
            relay_id: relay::relay_id(stream),
            track: line as u8,
            src: *src,
        };
        // (Disjoint fields: no per-packet copy of the key or the subscriber list.)
        for to in entry
            .relay_out
            .iter()
            .map(|r| r.addr)
            .filter(|a| Some(*a) != except)
        {
            let mut buf = self.out.buffer();
            relay::write_media(seal, &h, rtp, &mut buf);
            self.out.metrics.relay_sent += 1;
            if except.is_some() {
                self.out.metrics.relay_forwarded += 1;
            }
            self.out.send(to, buf);
        }
    }

    pub(super) fn handle_relay_media(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        let Some(open) = self.relay_opener.as_mut() else {
            self.out.metrics.relay_refused += 1;
            return;
        };
        let (h, rtp) = match relay::read_media(open, data) {
            Ok(x) => x,
            Err(e) => {
                self.out.metrics.relay_refused += 1;
                if e == relay::RelayError::Replayed {
                    self.out.metrics.relay_replayed += 1;
                }
                return;
            }
        };
        // A relayed stream, or one whose publisher moved here from `from` a moment ago.
        let Some(stream) = self.relay_ids.get(&h.relay_id).cloned().or_else(|| {
            self.streams
                .iter()
                .find(|(_, e)| {
                    e.relay_draining
                        .as_ref()
                        .is_some_and(|(r, _)| r.origin == from && r.relay_id == Some(h.relay_id))
                })
                .map(|(name, _)| name.clone())
        }) else {
            self.out.metrics.relay_refused += 1;
            return;
        };
        let Some(entry) = self.streams.get_mut(&stream) else {
            self.out.metrics.relay_refused += 1;
            return;
        };
        let (r, draining) = match entry.relay_in.as_mut().filter(|r| r.origin == from) {
            Some(r) => (r, false),
            None => match entry
                .relay_draining
                .as_mut()
                .filter(|(r, _)| r.origin == from)
            {
                Some((r, _)) => (r, true),
                None => {
                    self.out.metrics.relay_refused += 1;
                    return;
                }
            },
        };
        let Some(line) = r.media.get(usize::from(h.track)) else {
            return;
        };
        let mut src = h.src;
        src.clock_rate = line.codec.clock_rate();
        let fresh = r.receive(now, h.track, &src, rtp);
        // A gap on the relay link is NACKed at once, not at the next refresh (a draining relay
        // NACKs nothing: its publisher is here now).
        if let Some(t) = r.nack_deadline().filter(|_| !draining) {
            self.next_timeout = Some(self.next_timeout.map_or(t, |n| n.min(t)));
        }
        if !fresh {
            return;
        }
        self.out.metrics.relay_received += 1;
        if draining {
            self.out.metrics.relay_drained += 1;
        }
        let want_keyframe = self.fan_out(now, &stream, usize::from(h.track), rtp, &src);
        // The second level of the relay tree: nodes subscribed here get it too.
        self.relay_out(&stream, usize::from(h.track), &src, rtp, Some(from));
        if want_keyframe {
            self.request_keyframe(now, &stream, usize::from(h.track), Some(src.ssrc));
        }
        self.note_relay_deadline(now);
    }

    pub(super) fn handle_relay_control(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        let Some(open) = self.relay_opener.as_mut() else {
            self.out.metrics.relay_refused += 1;
            return;
        };
        let body = match relay::read_control(open, data) {
            Ok(Control { body: Some(body) }) => body,
            Ok(Control { body: None }) => {
                self.out.metrics.relay_refused += 1;
                return;
            }
            Err(e) => {
                self.out.metrics.relay_refused += 1;
                if e == relay::RelayError::Replayed {
                    self.out.metrics.relay_replayed += 1;
                }
                return;
            }
        };
        tracing::trace!(%from, ?body, "relay control");
        match body {
            Body::Subscribe(s) => {
                let (direct, load) = (s.direct, s.load);
                let Ok(stream) = StreamId::new(s.stream) else {
                    return;
                };
                let live = self
                    .streams
                    .get(&stream)
                    .is_some_and(|e| e.publisher.is_some());
                let waiting = self
                    .streams
                    .get(&stream)
                    .is_some_and(|e| e.orphaned_until.is_some());
                if !live && (waiting || self.importing_publisher(&stream)) {
                    // The publisher is moving here: the subscriber gets the
                    // stream once it is activated (relay_to); no "ended".
                    return;
                }
                // A stream relayed in here is relayed on (never back to where it comes from);
                // until its own offer arrived the subscriber's next refresh is answered.
                // (Asked by its own source, a moment after that moved: the next refresh too.)
                let relayed = match self.streams.get(&stream).and_then(|e| e.relay_in.as_ref()) {
                    Some(r) if !live => Some(r.ready() && r.origin != from),
                    _ => None,
                };
                if relayed == Some(false) {
                    return;
                }
                if !live && relayed.is_none() {
                    self.answer_lost_subscriber(&stream, from);
                    return;
                }
                let fanout = self.config.relay_fanout;
                let Some(e) = self.streams.get_mut(&stream) else {
                    return;
                };
                // Past the fan-out only for a subscriber whose parent went silent.
                let full = live && fanout > 0 && e.relay_out.len() >= fanout && !direct;
                match e.relay_out.iter_mut().find(|r| r.addr == from) {
                    Some(r) => {
                        r.refreshed = now;
                        r.load = load;
                        r.pending = 0;
                    }
                    None if full => {
                        // Relayed to enough nodes from here: the newcomer takes it from the
                        // least loaded direct subscriber (its last subscription's load and
                        // the subscribers sent to it since; then the one sent the fewest), one
                        // level down; a repeated request gets the same answer.
                        let earlier = e.sent_down.iter().find(|(f, _, at)| {
                            *f == from
                                && now.saturating_duration_since(*at) < relay::SUBSCRIPTION_TTL
                        });
                        let via = match earlier {
                            Some((_, via, _)) => *via,
                            None => {
                                let Some(r) = e
                                    .relay_out
                                    .iter_mut()
                                    .min_by_key(|r| (r.effective_load(), r.redirected))
                                else {
                                    return;
                                };
                                r.redirected += 1;
                                r.pending += 1;
                                let via = r.addr;
                                e.sent_down.retain(|(f, _, _)| *f != from);
                                e.sent_down.push((from, via, now));
                                self.out.metrics.relay_redirects += 1;
                                tracing::debug!(%stream, %from, %via, "relay subscriber sent one level down");
                                via
                            }
                        };
                        self.send_control(
                            from,
                            Body::Redirect(Redirect {
                                stream: stream.to_string(),
                                via: via.to_string(),
                            }),
                        );
                        return;
                    }
                    None => e.relay_out.push(RelayOut::new(from, now, load)),
                }
                self.send_offer(&stream, from, true);
            }
            Body::Unsubscribe(s) => {
                if let Ok(stream) = StreamId::new(s.stream)
                    && let Some(e) = self.streams.get_mut(&stream)
                {
                    e.relay_out.retain(|r| r.addr != from);
                }
            }
            Body::Offer(o) => self.handle_offer(now, from, o),
            Body::Nack(n) => self.handle_relay_nack(from, n),
            Body::KeyframeRequest(t) => {
                let ssrc = (t.ssrc != 0).then_some(t.ssrc);
                if let Some(stream) = self.relay_stream_of_origin(t.relay_id) {
                    self.out.metrics.keyframe_requests_received += 1;
                    self.request_keyframe(now, &stream, t.track as usize, ssrc);
                } else if let Some(stream) = self.relay_ids.get(&t.relay_id).cloned() {
                    // A node one level down: the request goes up (throttled as our own).
                    self.out.metrics.keyframe_requests_received += 1;
                    self.request_relay_keyframe(now, &stream, t.track as usize, ssrc, false);
                }
            }
            Body::SenderReport(sr) => {
                let Some(stream) = self.relay_ids.get(&sr.relay_id).cloned() else {
                    return;
                };
                let Some(e) = self.streams.get_mut(&stream) else {
                    return;
                };
                let Some(r) = e.relay_in.as_mut().filter(|r| r.origin == from) else {
                    return;
                };
                r.sender_report(now, sr.track as u8, sr.ssrc, sr.ntp, sr.ext_ts);
                let down: Vec<SocketAddr> = e.relay_out.iter().map(|r| r.addr).collect();
                for to in down {
                    self.send_control(to, Body::SenderReport(sr.clone()));
                }
            }
            Body::Redirect(r) => self.handle_redirect(now, from, r),
        }
    }

    /// Subscribes where the node this stream came from sent us: one of its subscribers, or
    /// (`via` empty) the stream's origin in the directory.
    fn handle_redirect(&mut self, now: Instant, from: SocketAddr, r: Redirect) {
        let Ok(stream) = StreamId::new(r.stream) else {
            return;
        };
        let via = match r.via.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => self.origins.get(&stream).copied(),
        };
        let me = self
            .config
            .cluster_addr
            .or(self.config.candidates.first().copied());
        let Some(via) = via.filter(|v| *v != from && Some(*v) != me) else {
            return;
        };
        let Some(ri) = self
            .streams
            .get_mut(&stream)
            .and_then(|e| e.relay_in.as_mut())
            .filter(|ri| ri.origin == from)
        else {
            return;
        };
        tracing::debug!(%stream, %from, %via, "relay redirected");
        ri.direct = false;
        // Sent one level down (not back to the origin by a parent that stopped relaying).
        let below = self.origins.get(&stream) != Some(&via);
        self.resubscribe(now, &stream, via);
        if let Some(ri) = self
            .streams
            .get_mut(&stream)
            .and_then(|e| e.relay_in.as_mut())
        {
            ri.below = below;
        }
    }

    /// Subscribes the relay of `stream` (its state kept: the numbering is the origin's
    /// wherever it comes from) at its new source `to` now.
    fn resubscribe(&mut self, now: Instant, stream: &StreamId, to: SocketAddr) {
        let mut direct = false;
        if let Some(r) = self
            .streams
            .get_mut(stream)
            .and_then(|e| e.relay_in.as_mut())
        {
            r.origin = to;
            r.next_refresh = now + relay::REFRESH;
            r.last_heard = now;
            r.below = false;
            r.rearm_nacks(now);
            direct = r.direct;
        }
        let load = self.relay_load();
        self.send_control(
            to,
            Body::Subscribe(Subscribe {
                stream: stream.to_string(),
                direct,
                load,
            }),
        );
        self.note_relay_deadline(now);
    }

    /// A subscription for a stream neither published nor relayed here: where its publisher
    /// went, that it ended, or — a node that relayed it on and stopped — its origin.
    fn answer_lost_subscriber(&mut self, stream: &StreamId, from: SocketAddr) {
        if !self.moved_streams.contains_key(stream)
            && let Some(origin) = self.origins.get(stream).copied().filter(|o| *o != from)
        {
            self.send_control(
                from,
                Body::Redirect(Redirect {
                    stream: stream.to_string(),
                    via: origin.to_string(),
                }),
            );
            return;
        }
        self.send_offer(stream, from, false);
    }

    /// A local stream by the id subscribers use for it.
    fn relay_stream_of_origin(&self, relay_id: u32) -> Option<StreamId> {
        self.streams
            .iter()
            .find(|(name, e)| e.publisher.is_some() && relay::relay_id(name) == relay_id)
            .map(|(name, _)| name.clone())
    }

    fn handle_offer(&mut self, now: Instant, from: SocketAddr, o: Offer) {
        let Ok(stream) = StreamId::new(o.stream) else {
            return;
        };
        let Some(entry) = self.streams.get_mut(&stream) else {
            return;
        };
        let Some(r) = entry.relay_in.as_mut() else {
            return;
        };
        if r.origin != from {
            // The publisher moved from our origin to the sender: follow it.
            let took_over = o.live && o.previous_origin.parse() == Ok(r.origin);
            if !took_over {
                return;
            }
            r.origin = from;
        }
        if o.live {
            r.offered(o.relay_id, &o.media);
            self.map_source_extensions(&stream, None);
            self.relay_ids.insert(o.relay_id, stream);
            // Viewers that waited for it are answered now.
            self.answer_waiting(now);
            return;
        }
        if let Ok(to) = o.moved_to.parse::<SocketAddr>() {
            // The publisher moved on: subscribe where it went.
            r.origin = to;
            r.next_refresh = now;
            self.note_relay_deadline(now);
            return;
        }
        // The origin no longer publishes it: the stream ended (for the nodes below too).
        entry.relay_in = None;
        let viewers = std::mem::take(&mut entry.viewers);
        let down = std::mem::take(&mut entry.relay_out);
        if entry.unused() {
            self.streams.remove(&stream);
        }
        self.relay_ids.retain(|_, s| *s != stream);
        for v in viewers {
            self.close(v, crate::node::session::CloseReason::PublisherGone);
        }
        for r in down {
            self.send_offer(&stream, r.addr, false);
        }
        let _ = now;
    }

    fn handle_relay_nack(&mut self, from: SocketAddr, n: RelayNack) {
        let Some(stream) = self.relay_stream_of_origin(n.relay_id) else {
            self.relay_nack_from_below(from, n);
            return;
        };
        let Some(pk) = self.streams.get(&stream).and_then(|e| e.publisher) else {
            return;
        };
        let Some(seal) = self.relay_sealer.as_mut() else {
            return;
        };
        let mut out = Vec::new();
        if let Some(Role::Publisher(tracks)) = self.sessions[pk].as_ref().map(|s| &s.role)
            && let Some(t) = tracks.iter().find(|t| t.index == n.track as usize)
            && let Some(st) = t.stream(n.ssrc)
        {
            for &ext in n.ext_seqs.iter().take(64) {
                let Some(pkt) = st.cached(ext) else { continue };
                let Ok(h) = RtpHeader::parse(pkt) else {
                    continue;
                };
                let Some(src) = super::forward::source_packet(
                    &t.line,
                    n.ssrc,
                    ext,
                    st.extend_ts(h.timestamp),
                    pkt,
                ) else {
                    continue;
                };
                out.push(retransmission(seal, &n, src, pkt));
            }
        }
        self.send_retransmissions(from, out);
    }

    fn send_retransmissions(&mut self, to: SocketAddr, out: Vec<Vec<u8>>) {
        for buf in out {
            self.out.metrics.relay_retransmitted += 1;
            self.out.send(to, buf);
        }
    }

    /// A NACK from a node one level down: answered from what was relayed in (what is missing
    /// here too, this node NACKs itself, and relays on the retransmission when it comes).
    fn relay_nack_from_below(&mut self, from: SocketAddr, n: RelayNack) {
        let Some(seal) = self.relay_sealer.as_mut() else {
            return;
        };
        let Some(stream) = self.relay_ids.get(&n.relay_id) else {
            return;
        };
        let Some(e) = self.streams.get(stream) else {
            return;
        };
        if !e.relay_out.iter().any(|r| r.addr == from) {
            return;
        }
        let Some(r) = e.relay_in.as_ref() else {
            return;
        };
        let Some(line) = r.media.get(n.track as usize) else {
            return;
        };
        let mut out = Vec::new();
        for &ext in n.ext_seqs.iter().take(64) {
            let Some((pkt, ext_ts)) = r.cached_with_ts(n.track as u8, n.ssrc, ext) else {
                continue;
            };
            let Some(src) = super::forward::source_packet(line, n.ssrc, ext, ext_ts, pkt) else {
                continue;
            };
            out.push(retransmission(seal, &n, src, pkt));
        }
        self.send_retransmissions(from, out);
    }

    /// Refreshes subscriptions, drops lapsed ones, sends relay-link NACKs and
    /// sender reports. Returns when it wants to run again.
    pub(super) fn relay_tick(&mut self, now: Instant) -> Option<Instant> {
        self.config.cluster_key.as_ref()?;
        let mut next: Option<Instant> = None;
        let mut min = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        let mut sends: Vec<(SocketAddr, Body)> = Vec::new();
        let mut drop_streams = Vec::new();
        let mut failovers: Vec<(StreamId, SocketAddr)> = Vec::new();
        let load = self.relay_load();
        let periodic = now >= self.next_relay_tick;
        if periodic {
            self.next_relay_tick = now + relay::REFRESH;
        }
        min(self.next_relay_tick);
        let names: Vec<StreamId> = self.streams.keys().cloned().collect();
        for name in names {
            // A recording wants the stream here as a viewer does, and so does a viewer that
            // migrates in (imported, not attached until it activates).
            let wanted_here = self.recordings.records(&name) || self.importing_viewer(&name);
            // One mapping per stream of each track: simulcast layers have timestamp bases of
            // their own (ssrc 0 is the top layer's, for subscribers of an older version).
            let sr: Vec<(u32, u32, (u64, u64))> = if periodic {
                self.streams
                    .get(&name)
                    .and_then(|e| e.publisher)
                    .and_then(|k| self.sessions[k].as_ref())
                    .map(|p| match &p.role {
                        Role::Publisher(tracks) => tracks
                            .iter()
                            .flat_map(|t| {
                                let track = t.index as u32;
                                let top = t
                                    .sr_projection(now, None)
                                    .map(|x| (track, 0, x))
                                    .into_iter();
                                // A single stream's mapping is the top one's.
                                let layered = t.streams.len() > 1;
                                let layers = t.streams.iter().filter(move |_| layered).filter_map(
                                    move |st| {
                                        t.sr_projection(now, Some(st.ssrc))
                                            .map(|x| (track, st.ssrc, x))
                                    },
                                );
                                top.chain(layers)
                            })
                            .collect(),
                        Role::Viewer(_) => Vec::new(),
                    })
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            let Some(e) = self.streams.get_mut(&name) else {
                continue;
            };
            if let Some((_, until)) = e.relay_draining.as_mut() {
                let t = *until.get_or_insert(now + relay::RELAY_DRAIN);
                if now >= t {
                    e.relay_draining = None;
                } else {
                    min(t);
                }
            }
            e.relay_out
                .retain(|r| now.saturating_duration_since(r.refreshed) < relay::SUBSCRIPTION_TTL);
            e.sent_down
                .retain(|(_, _, at)| now.saturating_duration_since(*at) < relay::SUBSCRIPTION_TTL);
            for r in &e.relay_out {
                for (track, ssrc, (ntp, ext_ts)) in &sr {
                    sends.push((
                        r.addr,
                        Body::SenderReport(RelaySr {
                            relay_id: relay::relay_id(&name),
                            track: *track,
                            ntp: *ntp,
                            ext_ts: *ext_ts,
                            ssrc: *ssrc,
                        }),
                    ));
                }
            }
            if let Some(r) = e.relay_in.as_mut() {
                let wanted = !e.viewers.is_empty() || wanted_here;
                if wanted {
                    r.used = true;
                }
                let idle = r.used || now.saturating_duration_since(r.created) >= relay::RELAY_IDLE;
                if !wanted && periodic && r.ready() && idle {
                    // No local viewer or recording left: tear the relay down, and send the
                    // nodes it was relayed on to back to where it came from.
                    sends.push((r.origin, Body::Unsubscribe(Subscribe::of(&name))));
                    for below in e.relay_out.drain(..) {
                        self.out.metrics.relay_redirects += 1;
                        sends.push((
                            below.addr,
                            Body::Redirect(Redirect {
                                stream: name.to_string(),
                                via: r.origin.to_string(),
                            }),
                        ));
                    }
                    drop_streams.push(name.clone());
                    continue;
                }
                // Its source is a node one level down the origin sent it to, and went silent:
                // that node may be dead, and the directory says so only seconds later. Leave
                // it for the origin (the directory's), which relays here directly.
                if let Some(&origin) = self.origins.get(&name).filter(|o| **o != r.origin)
                    && r.below
                    && r.ready()
                {
                    let silent_until = r.last_heard + relay::PARENT_SILENCE;
                    if now >= silent_until {
                        tracing::info!(stream = %name, parent = %r.origin, %origin, "relay source silent: subscribing at the origin");
                        self.out.metrics.relay_parent_failovers += 1;
                        sends.push((r.origin, Body::Unsubscribe(Subscribe::of(&name))));
                        r.direct = true;
                        failovers.push((name.clone(), origin));
                    } else {
                        min(silent_until);
                    }
                }
                if now >= r.next_refresh {
                    r.next_refresh = now + relay::REFRESH;
                    sends.push((
                        r.origin,
                        Body::Subscribe(Subscribe {
                            stream: name.to_string(),
                            direct: r.direct,
                            load,
                        }),
                    ));
                }
                min(r.next_refresh);
                if let Some(id) = r.relay_id {
                    for (track, ssrc, ext_seqs) in r.poll_nacks(now) {
                        sends.push((
                            r.origin,
                            Body::Nack(RelayNack {
                                relay_id: id,
                                track: u32::from(track),
                                ssrc,
                                ext_seqs,
                            }),
                        ));
                    }
                }
                if let Some(t) = r.nack_deadline() {
                    min(t);
                }
            }
        }
        for name in drop_streams {
            if let Some(e) = self.streams.get_mut(&name) {
                e.relay_in = None;
                if e.unused() {
                    self.streams.remove(&name);
                }
            }
            self.relay_ids.retain(|_, s| *s != name);
        }
        for (to, body) in sends {
            self.send_control(to, body);
        }
        for (stream, origin) in failovers {
            self.resubscribe(now, &stream, origin);
            if let Some(t) = self
                .streams
                .get(&stream)
                .and_then(|e| e.relay_in.as_ref())
                .map(|r| r.next_refresh)
            {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    /// A keyframe request for a relayed stream's layer `ssrc` (`None`: every layer) goes to
    /// its origin (`repair`: only viewers that lost part of a frame ask; see
    /// [`KeyframeThrottle`](crate::media::ingest::KeyframeThrottle)).
    pub(super) fn request_relay_keyframe(
        &mut self,
        now: Instant,
        stream: &StreamId,
        line: usize,
        ssrc: Option<u32>,
        repair: bool,
    ) {
        let throttle = if repair {
            self.config.pli_throttle.repair
        } else {
            self.config.pli_throttle.switch
        };
        let Some(r) = self
            .streams
            .get_mut(stream)
            .and_then(|e| e.relay_in.as_mut())
        else {
            return;
        };
        let (Some(id), origin) = (r.relay_id, r.origin) else {
            return;
        };
        let ssrc = ssrc.unwrap_or(0);
        if r.keyframe_request_due(now, line as u8, ssrc, throttle) {
            self.send_control(
                origin,
                Body::KeyframeRequest(RelayTrack {
                    relay_id: id,
                    track: line as u32,
                    ssrc,
                }),
            );
        }
    }
}

/// The relay media datagram that answers relay NACK `n` with `pkt`.
fn retransmission(seal: &mut RelaySealer, n: &RelayNack, src: SourcePacket, pkt: &[u8]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(pkt.len() + 64);
    relay::write_media(
        seal,
        &MediaHeader {
            relay_id: n.relay_id,
            track: n.track as u8,
            src,
        },
        pkt,
        &mut buf,
    );
    buf
}
