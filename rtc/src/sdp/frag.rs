//! Trickle-ICE fragments (RFC 8840, `application/trickle-ice-sdpfrag`), as sent in WHIP/WHEP PATCH
//! requests (RFC 9725 §4.4) for trickle and ICE restarts.

use super::candidate::Candidate;
use super::description::{Attribute, MediaDescription};

/// A fragment: session-level attributes (`a=ice-ufrag`, `a=ice-pwd`, `a=ice-options`,
/// `a=group:BUNDLE`, ...) then m-sections carrying `a=mid`, credentials and candidates.
///
/// Session-level accessors (`ice_ufrag`, `group_bundle`, `media_views`, ...) are the same as on
/// [`SessionDescription`](super::SessionDescription); a [`MediaView`](super::MediaView) falls back
/// to the fragment's session-level credentials.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SdpFrag {
    /// Session-level `a=` lines in order.
    pub attributes: Vec<Attribute>,
    /// m-sections in order; each `m=` line is kept as the peer wrote it.
    pub media: Vec<MediaDescription>,
}

impl SdpFrag {
    /// Candidates of every m-section, with the mid they belong to.
    pub fn candidates(&self) -> Vec<(Option<&str>, Candidate)> {
        self.media
            .iter()
            .flat_map(|m| m.candidates().into_iter().map(move |c| (m.mid(), c)))
            .collect()
    }

    /// Appends a session-level attribute (`value` `None` for a flag).
    pub fn push_attr(&mut self, name: impl Into<String>, value: Option<&str>) -> &mut Self {
        self.attributes.push(Attribute {
            name: name.into(),
            value: value.map(str::to_string),
        });
        self
    }
}

/// The fragment a server answers an ICE-restart PATCH with (RFC 9725 §4.4.2): its new credentials
/// and, optionally, its candidates, on the first bundled m-section.
///
/// ```
/// use ferry_rtc::sdp::{IceRestartAnswer, MediaDescription, MediaKind, SdpFrag};
///
/// let frag = IceRestartAnswer {
///     ice_lite: true,
///     ice_options: vec!["trickle".into(), "ice2".into()],
///     ufrag: "289b31b7".into(),
///     pwd: "0b66f472495ef0ccac7bda653ab6".into(),
///     bundle: Some(vec!["0".into()]),
///     media: Some((MediaDescription::new(MediaKind::Audio, 9, "UDP/TLS/RTP/SAVPF", ["111"]), "0".into())),
///     candidates: Vec::new(),
///     end_of_candidates: true,
/// }
/// .into_frag();
/// assert!(frag.to_string().starts_with("a=ice-lite\r\na=ice-options:trickle ice2\r\n"));
/// assert_eq!(SdpFrag::parse(&frag.to_string())?, frag);
/// # Ok::<(), ferry_rtc::sdp::SdpError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IceRestartAnswer {
    /// Write `a=ice-lite`.
    pub ice_lite: bool,
    /// `a=ice-options` tokens; omitted when empty.
    pub ice_options: Vec<String>,
    /// New ICE username fragment.
    pub ufrag: String,
    /// New ICE password.
    pub pwd: String,
    /// `a=group:BUNDLE` mids, when the session is bundled.
    pub bundle: Option<Vec<String>>,
    /// The m= line (its attributes are replaced) and mid of the first bundled m-section. With
    /// `None`, credentials and candidates go at session level.
    pub media: Option<(MediaDescription, String)>,
    /// Candidates to announce.
    pub candidates: Vec<Candidate>,
    /// Write `a=end-of-candidates`.
    pub end_of_candidates: bool,
}

impl IceRestartAnswer {
    /// Builds the fragment.
    pub fn into_frag(self) -> SdpFrag {
        let mut frag = SdpFrag::default();
        if self.ice_lite {
            frag.attributes.push(Attribute::flag("ice-lite"));
        }
        if !self.ice_options.is_empty() {
            frag.attributes
                .push(Attribute::new("ice-options", self.ice_options.join(" ")));
        }
        if let Some(mids) = &self.bundle {
            let mut value = String::from("BUNDLE");
            mids.iter().for_each(|m| {
                value.push(' ');
                value.push_str(m);
            });
            frag.attributes.push(Attribute::new("group", value));
        }
        let mut ice = vec![
            Attribute::new("ice-ufrag", self.ufrag),
            Attribute::new("ice-pwd", self.pwd),
        ];
        ice.extend(self.candidates.iter().map(Attribute::from));
        if self.end_of_candidates {
            ice.push(Attribute::flag("end-of-candidates"));
        }
        match self.media {
            Some((mut media, mid)) => {
                media.attributes = vec![Attribute::new("mid", mid)];
                media.attributes.extend(ice);
                frag.media.push(media);
            }
            None => frag.attributes.extend(ice),
        }
        frag
    }
}
