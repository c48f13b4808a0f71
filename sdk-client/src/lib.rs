//! Ferry's Rust client SDK (DESIGN §6).
//!
//! [`fsm`] is the session state machine both SDKs share (the browser SDK in `js/` runs the same
//! machine, checked against the same scenarios).

pub mod fsm;
