//! Session descriptions: owned types, parser, writer and typed accessors.
//!
//! * [`SessionDescription::parse`] reads an offer or answer (CRLF or LF), and
//!   [`SessionDescription`]'s `Display` writes it back with CRLF in RFC 8866 order.
//! * [`SdpFrag::parse`] reads a trickle-ICE fragment; [`IceRestartAnswer`] builds the server's one.
//! * [`MediaView`] (from [`SessionDescription::media_views`]) answers the JSEP questions for one
//!   m-section, falling back to session-level attributes where JSEP allows.
//!
//! Parsing follows JSEP §5.8: unknown lines and attributes are kept (or, for `i=`, `u=`, `e=`, `p=`,
//! `r=`, `z=`, `k=` lines, skipped), but a known attribute that does not match its grammar rejects
//! the whole description, so nothing ambiguous is silently misread.

mod access;
mod attrs;
mod candidate;
mod codec;
mod description;
mod direction;
pub mod extmap;
mod frag;
#[cfg(any(test, feature = "fuzzing"))]
mod fuzz;
mod grammar;
mod parse;
mod streams;
mod write;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_errors;
#[cfg(test)]
mod tests_prop;

pub use access::MediaView;
pub use attrs::{
    Candidate, Direction, ExtMap, Fingerprint, Fmtp, Group, Msid, Rid, RidDirection, RtcpFb,
    RtpMap, Setup, Simulcast, SimulcastRid, SsrcAttr, SsrcGroup,
};
pub use frag::{IceRestartAnswer, SdpFrag};
#[cfg(any(test, feature = "fuzzing"))]
pub use fuzz::fuzz_sdp;

pub use description::{
    Attribute, Bandwidth, Connection, MAX_LINE_LEN, MAX_MEDIA, MAX_SDP_SIZE, MediaDescription,
    MediaKind, Origin, SdpError, SessionDescription, Timing,
};
