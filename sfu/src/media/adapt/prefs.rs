//! What a viewer asks for: a cap on the picture it gets (the SDKs' `setQuality`, a WHEP
//! client's `POST {session}/layer`), on the rate it may be sent, or no video at all for now.
//! The allocator never goes above it, whatever the estimate; it moves with the session.

use serde::{Deserialize, Serialize};

/// A viewer's caps. Every field is optional; all `None` is "automatic" (the estimate decides).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Preferences {
    /// The highest picture it wants (pixels): the highest layer at most this high.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_height: Option<u32>,
    /// The widest picture it wants (pixels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_width: Option<u32>,
    /// The most frames per second it wants (temporal layers, where the source has them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fps: Option<u32>,
    /// The most it may be sent (bit/s), whatever its link carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bitrate: Option<u64>,
}

/// Why a request for preferences is refused (400 with the reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PreferencesError {
    /// The body is not the JSON object this takes.
    #[error("bad layer request: {0}")]
    Malformed(String),
    /// A value is out of range.
    #[error("bad layer request: {0}")]
    OutOfRange(&'static str),
}

impl Preferences {
    /// Parses a request body: `{}` (automatic) or any of `maxHeight`, `maxWidth`, `maxFps`,
    /// `maxBitrate`.
    pub fn parse(body: &[u8]) -> Result<Self, PreferencesError> {
        // serde would take a JSON array as the fields in order: only an object is a request.
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(PreferencesError::Malformed(
                "the body must be a JSON object".into(),
            ));
        }
        let p: Preferences =
            serde_json::from_slice(body).map_err(|e| PreferencesError::Malformed(e.to_string()))?;
        p.validate()?;
        Ok(p)
    }

    /// Checks the ranges: a cap of 0 would mean no video, which is `paused`'s job.
    pub fn validate(&self) -> Result<(), PreferencesError> {
        if self.max_height.is_some_and(|h| h == 0 || h > 16_384) {
            return Err(PreferencesError::OutOfRange("maxHeight must be 1..=16384"));
        }
        if self.max_width.is_some_and(|w| w == 0 || w > 16_384) {
            return Err(PreferencesError::OutOfRange("maxWidth must be 1..=16384"));
        }
        if self.max_fps.is_some_and(|f| f == 0 || f > 240) {
            return Err(PreferencesError::OutOfRange("maxFps must be 1..=240"));
        }
        if self
            .max_bitrate
            .is_some_and(|b| !(10_000..=1_000_000_000).contains(&b))
        {
            return Err(PreferencesError::OutOfRange(
                "maxBitrate must be 10000..=1000000000 bit/s",
            ));
        }
        Ok(())
    }

    /// Whether a picture of `size` (width, height) is within the caps (an unknown size is).
    pub fn admits(&self, size: Option<(u16, u16)>) -> bool {
        let Some((w, h)) = size else {
            return true;
        };
        self.max_height.is_none_or(|m| u32::from(h) <= m)
            && self.max_width.is_none_or(|m| u32::from(w) <= m)
    }

    /// Whether any cap is set.
    pub fn is_automatic(&self) -> bool {
        *self == Preferences::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_checks_and_admits() {
        assert_eq!(Preferences::parse(b"{}"), Ok(Preferences::default()));
        let p = Preferences::parse(br#"{"maxHeight": 180, "maxBitrate": 300000}"#).unwrap();
        assert_eq!((p.max_height, p.max_bitrate), (Some(180), Some(300_000)));
        assert!(p.admits(Some((320, 180))) && !p.admits(Some((640, 360))));
        assert!(p.admits(None), "a layer of unknown size is not excluded");
        assert!(matches!(
            Preferences::parse(br#"{"maxHeight": 0}"#),
            Err(PreferencesError::OutOfRange(_))
        ));
        assert!(matches!(
            Preferences::parse(br#"{"maxHeigth": 180}"#),
            Err(PreferencesError::Malformed(_))
        ));
        assert!(matches!(
            Preferences::parse(b"[1]"),
            Err(PreferencesError::Malformed(_))
        ));
    }
}
