//! Ferry's Rust client SDK (DESIGN §6).
//!
//! The SDK's migration handling (tickets, IDR-aware switching, the fallback
//! state machine) arrives with the SDK issue. Plain WHIP/WHEP clients need
//! nothing from this crate; the browser SDK lives in `js/`.
