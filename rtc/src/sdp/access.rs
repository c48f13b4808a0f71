//! Typed accessors: media-level on [`MediaDescription`], session-level on [`SessionDescription`]
//! and [`SdpFrag`], and the JSEP fallback from one to the other on [`MediaView`].
//!
//! The parser has already checked known attributes, so accessors skip (rather than report) values
//! that do not decode; only attributes pushed by hand can be skipped that way.

use std::ops::Deref;

use super::attrs::{
    Candidate, Direction, ExtMap, Fingerprint, Fmtp, Group, Msid, Rid, RtcpFb, RtpMap, Setup,
    Simulcast, SsrcAttr, SsrcGroup,
};
use super::description::{Attribute, MediaDescription, SessionDescription};
use super::frag::SdpFrag;
use super::grammar::{AttrResult, parse_digits};

fn values<'a>(attrs: &'a [Attribute], name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    attrs
        .iter()
        .filter(move |a| a.name == name)
        .filter_map(|a| a.value.as_deref())
}

fn first<'a>(attrs: &'a [Attribute], name: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|a| a.name == name)
        .and_then(|a| a.value.as_deref())
}

fn has(attrs: &[Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.name == name)
}

fn all<T>(attrs: &[Attribute], name: &str, parse: fn(&str) -> AttrResult<T>) -> Vec<T> {
    values(attrs, name).filter_map(|v| parse(v).ok()).collect()
}

fn ice_options(attrs: &[Attribute]) -> Option<Vec<&str>> {
    first(attrs, "ice-options").map(|v| v.split_ascii_whitespace().collect())
}

fn setup(attrs: &[Attribute]) -> Option<Setup> {
    first(attrs, "setup").and_then(|v| Setup::parse(v).ok())
}

fn direction(attrs: &[Attribute]) -> Option<Direction> {
    attrs.iter().find_map(|a| Direction::from_name(&a.name))
}

fn bundle(attrs: &[Attribute]) -> Option<Vec<String>> {
    all(attrs, "group", Group::parse)
        .into_iter()
        .find(|g| g.semantics == "BUNDLE")
        .map(|g| g.mids)
}

impl MediaDescription {
    /// First attribute with this name.
    pub fn attr(&self, name: &str) -> Option<&Attribute> {
        self.attributes.iter().find(|a| a.name == name)
    }

    /// True when an attribute with this name is present.
    pub fn has_attr(&self, name: &str) -> bool {
        has(&self.attributes, name)
    }

    /// `a=mid`.
    pub fn mid(&self) -> Option<&str> {
        first(&self.attributes, "mid")
    }

    /// Media-level `a=ice-ufrag` only; see [`MediaView::ice_ufrag`] for the fallback.
    pub fn ice_ufrag(&self) -> Option<&str> {
        first(&self.attributes, "ice-ufrag")
    }

    /// Media-level `a=ice-pwd` only.
    pub fn ice_pwd(&self) -> Option<&str> {
        first(&self.attributes, "ice-pwd")
    }

    /// Media-level `a=ice-options` tokens only; empty when absent.
    pub fn ice_options(&self) -> Vec<&str> {
        ice_options(&self.attributes).unwrap_or_default()
    }

    /// Media-level `a=fingerprint` lines only.
    pub fn fingerprints(&self) -> Vec<Fingerprint> {
        all(&self.attributes, "fingerprint", Fingerprint::parse)
    }

    /// Media-level `a=setup` only.
    pub fn setup(&self) -> Option<Setup> {
        setup(&self.attributes)
    }

    /// Media-level direction, `sendrecv` when absent (ignores the session level; see
    /// [`MediaView::direction`]).
    pub fn direction(&self) -> Direction {
        direction(&self.attributes).unwrap_or(Direction::SendRecv)
    }

    /// `a=rtcp-mux`.
    pub fn rtcp_mux(&self) -> bool {
        self.has_attr("rtcp-mux")
    }

    /// `a=rtcp-rsize`.
    pub fn rtcp_rsize(&self) -> bool {
        self.has_attr("rtcp-rsize")
    }

    /// All `a=rtpmap` lines in order.
    pub fn rtpmaps(&self) -> Vec<RtpMap> {
        all(&self.attributes, "rtpmap", RtpMap::parse)
    }

    /// The `a=rtpmap` of one payload type.
    pub fn rtpmap(&self, pt: u8) -> Option<RtpMap> {
        self.rtpmaps().into_iter().find(|r| r.pt == pt)
    }

    /// All `a=fmtp` lines with a payload type.
    pub fn fmtps(&self) -> Vec<Fmtp> {
        all(&self.attributes, "fmtp", Fmtp::parse)
    }

    /// The `a=fmtp` of one payload type.
    pub fn fmtp(&self, pt: u8) -> Option<Fmtp> {
        self.fmtps().into_iter().find(|f| f.pt == pt)
    }

    /// The RTX payload type whose `apt=` is `pt`.
    pub fn rtx_for(&self, pt: u8) -> Option<u8> {
        let fmtps = self.fmtps();
        self.rtpmaps()
            .into_iter()
            .filter(RtpMap::is_rtx)
            .find(|r| fmtps.iter().any(|f| f.pt == r.pt && f.apt() == Some(pt)))
            .map(|r| r.pt)
    }

    /// `a=rtcp-fb` lines that apply to `pt`, including `*` wildcards, in order.
    pub fn rtcp_fbs(&self, pt: u8) -> Vec<RtcpFb> {
        let mut fbs = all(&self.attributes, "rtcp-fb", RtcpFb::parse);
        fbs.retain(|fb| fb.pt.is_none_or(|p| p == pt));
        fbs
    }

    /// Media-level `a=extmap` lines only.
    pub fn extmaps(&self) -> Vec<ExtMap> {
        all(&self.attributes, "extmap", ExtMap::parse)
    }

    /// Media-level `a=extmap-allow-mixed` only.
    pub fn extmap_allow_mixed(&self) -> bool {
        self.has_attr("extmap-allow-mixed")
    }

    /// `a=ssrc` lines in order.
    pub fn ssrcs(&self) -> Vec<SsrcAttr> {
        all(&self.attributes, "ssrc", SsrcAttr::parse)
    }

    /// `a=ssrc-group` lines in order.
    pub fn ssrc_groups(&self) -> Vec<SsrcGroup> {
        all(&self.attributes, "ssrc-group", SsrcGroup::parse)
    }

    /// The sender's SSRCs as (media, RTX) pairs: `FID` groups pair media
    /// with RTX; an SSRC in no such group is media without RTX.
    pub fn declared_ssrcs(&self) -> Vec<(u32, Option<u32>)> {
        let mut pairs: Vec<(u32, Option<u32>)> = self
            .ssrc_groups()
            .into_iter()
            .filter(|g| g.semantics == "FID" && g.ssrcs.len() == 2)
            .map(|g| (g.ssrcs[0], Some(g.ssrcs[1])))
            .collect();
        for s in self.ssrcs() {
            if !pairs
                .iter()
                .any(|(a, b)| *a == s.ssrc || *b == Some(s.ssrc))
            {
                pairs.push((s.ssrc, None));
            }
        }
        pairs
    }

    /// `a=rid` lines in order.
    pub fn rids(&self) -> Vec<Rid> {
        all(&self.attributes, "rid", Rid::parse)
    }

    /// `a=simulcast`.
    pub fn simulcast(&self) -> Option<Simulcast> {
        first(&self.attributes, "simulcast").and_then(|v| Simulcast::parse(v).ok())
    }

    /// First `a=msid`.
    pub fn msid(&self) -> Option<Msid> {
        first(&self.attributes, "msid").and_then(|v| Msid::parse(v).ok())
    }

    /// All `a=msid` lines.
    pub fn msids(&self) -> Vec<Msid> {
        all(&self.attributes, "msid", Msid::parse)
    }

    /// `a=candidate` lines in order.
    pub fn candidates(&self) -> Vec<Candidate> {
        all(&self.attributes, "candidate", Candidate::parse)
    }

    /// Media-level `a=end-of-candidates` only.
    pub fn end_of_candidates(&self) -> bool {
        self.has_attr("end-of-candidates")
    }

    /// `a=sctp-port` (RFC 8841).
    pub fn sctp_port(&self) -> Option<u16> {
        first(&self.attributes, "sctp-port").and_then(|v| parse_digits(v.trim(), "").ok())
    }

    /// `a=max-message-size` (RFC 8841).
    pub fn max_message_size(&self) -> Option<u64> {
        first(&self.attributes, "max-message-size").and_then(|v| parse_digits(v.trim(), "").ok())
    }
}

/// Session-level accessors shared by [`SessionDescription`] and [`SdpFrag`].
macro_rules! session_accessors {
    ($ty:ty) => {
        impl $ty {
            /// First session-level attribute with this name.
            pub fn attr(&self, name: &str) -> Option<&Attribute> {
                self.attributes.iter().find(|a| a.name == name)
            }

            /// Session-level `a=ice-ufrag`.
            pub fn ice_ufrag(&self) -> Option<&str> {
                first(&self.attributes, "ice-ufrag")
            }

            /// Session-level `a=ice-pwd`.
            pub fn ice_pwd(&self) -> Option<&str> {
                first(&self.attributes, "ice-pwd")
            }

            /// Session-level `a=ice-options` tokens; empty when absent.
            pub fn ice_options(&self) -> Vec<&str> {
                ice_options(&self.attributes).unwrap_or_default()
            }

            /// `a=ice-lite` (session level only).
            pub fn ice_lite(&self) -> bool {
                has(&self.attributes, "ice-lite")
            }

            /// `a=group` lines.
            pub fn groups(&self) -> Vec<Group> {
                all(&self.attributes, "group", Group::parse)
            }

            /// Mids of the first `a=group:BUNDLE`.
            pub fn group_bundle(&self) -> Option<Vec<String>> {
                bundle(&self.attributes)
            }

            /// Session-level `a=end-of-candidates`.
            pub fn end_of_candidates(&self) -> bool {
                has(&self.attributes, "end-of-candidates")
            }

            /// Every m-section with session-level fallback.
            pub fn media_views(&self) -> impl Iterator<Item = MediaView<'_>> {
                self.media.iter().map(|media| MediaView {
                    session: &self.attributes,
                    media,
                })
            }

            /// The m-section at `index` with session-level fallback.
            pub fn media_view(&self, index: usize) -> Option<MediaView<'_>> {
                self.media_views().nth(index)
            }

            /// The m-section with this `a=mid`.
            pub fn media_by_mid(&self, mid: &str) -> Option<MediaView<'_>> {
                self.media_views().find(|m| m.media.mid() == Some(mid))
            }
        }
    };
}

session_accessors!(SessionDescription);
session_accessors!(SdpFrag);

impl SessionDescription {
    /// Session-level `a=fingerprint` lines.
    pub fn fingerprints(&self) -> Vec<Fingerprint> {
        all(&self.attributes, "fingerprint", Fingerprint::parse)
    }

    /// Session-level `a=setup`.
    pub fn setup(&self) -> Option<Setup> {
        setup(&self.attributes)
    }

    /// Session-level direction attribute, when present.
    pub fn direction(&self) -> Option<Direction> {
        direction(&self.attributes)
    }

    /// Session-level `a=extmap` lines.
    pub fn extmaps(&self) -> Vec<ExtMap> {
        all(&self.attributes, "extmap", ExtMap::parse)
    }

    /// Session-level `a=extmap-allow-mixed` (Chrome puts it here).
    pub fn extmap_allow_mixed(&self) -> bool {
        has(&self.attributes, "extmap-allow-mixed")
    }
}

/// One m-section read with JSEP's session-level fallback (RFC 8829 §5.8, RFC 8839, RFC 8842,
/// RFC 8285). Media-only accessors come through `Deref` to [`MediaDescription`]; the methods here
/// shadow those that may also appear at session level.
#[derive(Debug, Clone, Copy)]
pub struct MediaView<'a> {
    session: &'a [Attribute],
    media: &'a MediaDescription,
}

impl<'a> Deref for MediaView<'a> {
    type Target = MediaDescription;

    fn deref(&self) -> &MediaDescription {
        self.media
    }
}

impl<'a> MediaView<'a> {
    /// The m-section itself.
    pub fn media(&self) -> &'a MediaDescription {
        self.media
    }

    /// `a=ice-ufrag`, media level first.
    pub fn ice_ufrag(&self) -> Option<&'a str> {
        first(&self.media.attributes, "ice-ufrag").or_else(|| first(self.session, "ice-ufrag"))
    }

    /// `a=ice-pwd`, media level first.
    pub fn ice_pwd(&self) -> Option<&'a str> {
        first(&self.media.attributes, "ice-pwd").or_else(|| first(self.session, "ice-pwd"))
    }

    /// `a=ice-options` tokens, media level first; empty when absent at both.
    pub fn ice_options(&self) -> Vec<&'a str> {
        ice_options(&self.media.attributes)
            .or_else(|| ice_options(self.session))
            .unwrap_or_default()
    }

    /// `a=ice-lite` (session level).
    pub fn ice_lite(&self) -> bool {
        has(self.session, "ice-lite")
    }

    /// Media-level fingerprints if any, else session-level ones.
    pub fn fingerprints(&self) -> Vec<Fingerprint> {
        let media = all(&self.media.attributes, "fingerprint", Fingerprint::parse);
        if media.is_empty() {
            all(self.session, "fingerprint", Fingerprint::parse)
        } else {
            media
        }
    }

    /// `a=setup`, media level first.
    pub fn setup(&self) -> Option<Setup> {
        setup(&self.media.attributes).or_else(|| setup(self.session))
    }

    /// Direction, media level first, then session level, else `sendrecv`.
    pub fn direction(&self) -> Direction {
        direction(&self.media.attributes)
            .or_else(|| direction(self.session))
            .unwrap_or(Direction::SendRecv)
    }

    /// Media-level extmaps if any, else session-level ones.
    pub fn extmaps(&self) -> Vec<ExtMap> {
        let media = all(&self.media.attributes, "extmap", ExtMap::parse);
        if media.is_empty() {
            all(self.session, "extmap", ExtMap::parse)
        } else {
            media
        }
    }

    /// `a=extmap-allow-mixed` at either level.
    pub fn extmap_allow_mixed(&self) -> bool {
        has(&self.media.attributes, "extmap-allow-mixed") || has(self.session, "extmap-allow-mixed")
    }

    /// `a=end-of-candidates` at either level.
    pub fn end_of_candidates(&self) -> bool {
        has(&self.media.attributes, "end-of-candidates") || has(self.session, "end-of-candidates")
    }
}
