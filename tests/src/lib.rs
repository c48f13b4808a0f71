//! Helpers for Ferry's end-to-end tests.
