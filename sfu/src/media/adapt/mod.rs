//! Per-viewer adaptation: each viewer gets the layers of its stream that its own link carries.
//!
//! - [`layers`]: what each source track offers (its simulcast layers, their rates, which are
//!   live), kept by the node from the packets it fans out — on the origin and on relays alike.
//! - [`allocator`]: shares a viewer's bandwidth estimate over its tracks (audio first, then
//!   video layer steps by priority, with hysteresis) — pure.
//! - [`viewer`]: a viewer's transport-wide sequence numbers, bandwidth estimator
//!   ([`crate::bwe`], fed by its transport-wide CC feedback or REMB) and probes — migrated
//!   with the session.
//! - [`resend`]: what a viewer's NACKs may cost (its retransmissions held to its estimate).
//! - [`prefs`]: a viewer's caps (picture size, rate), which the allocator never exceeds.
//! - [`view`]: what `GET /v1/sessions/{id}` shows of it.
//!
//! The forwarder switches a viewer's track to the chosen layer at that layer's next keyframe
//! ([`crate::media::egress::OutgoingTrack::takes`]); the munger makes the switch one continuous
//! stream. `docs/adaptation.md` has the design and the measured figures.

pub mod allocator;
pub mod layers;
pub mod prefs;
pub mod resend;
pub mod view;
pub mod viewer;
