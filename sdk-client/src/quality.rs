//! A viewer's caps on what the node sends it (the body of `POST {session}/layer`).

use crate::error::SdkError;

/// A viewer's caps ([`Session::set_quality`]): the node never sends it more, whatever its link
/// carries. All `None` ([`Quality::default`]) is automatic: the node's estimate decides. The
/// JSON body of `POST {session}/layer` (camelCase, absent fields left out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Quality {
    /// The highest picture (pixels): the highest simulcast layer at most this high, else the
    /// lowest (1–16384).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_height: Option<u32>,
    /// The widest picture (pixels), likewise (1–16384).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_width: Option<u32>,
    /// Frames per second (1–240; where the source has temporal layers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_fps: Option<u32>,
    /// Bit/s the node may send the viewer (10 000–1 000 000 000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bitrate: Option<u64>,
}

impl Quality {
    /// Checks the node's ranges (a value outside them would be refused with a 400).
    pub fn validate(&self) -> Result<(), SdkError> {
        let bad = |what: &str| Err(SdkError::Invalid(format!("quality: {what}")));
        if self.max_height.is_some_and(|h| !(1..=16_384).contains(&h)) {
            return bad("max_height must be 1..=16384");
        }
        if self.max_width.is_some_and(|w| !(1..=16_384).contains(&w)) {
            return bad("max_width must be 1..=16384");
        }
        if self.max_fps.is_some_and(|f| !(1..=240).contains(&f)) {
            return bad("max_fps must be 1..=240");
        }
        if self
            .max_bitrate
            .is_some_and(|b| !(10_000..=1_000_000_000).contains(&b))
        {
            return bad("max_bitrate must be 10000..=1000000000 bit/s");
        }
        Ok(())
    }

    /// Whether no cap is set.
    pub fn is_automatic(&self) -> bool {
        *self == Quality::default()
    }

    /// The request body.
    pub(crate) fn body(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_checked_and_written_as_the_node_reads_them() {
        assert_eq!(Quality::default().body(), "{}");
        assert!(Quality::default().is_automatic());
        let q = Quality {
            max_height: Some(180),
            max_bitrate: Some(300_000),
            ..Quality::default()
        };
        assert_eq!(q.body(), r#"{"maxHeight":180,"maxBitrate":300000}"#);
        assert!(q.validate().is_ok() && !q.is_automatic());
        for bad in [
            Quality {
                max_height: Some(0),
                ..Quality::default()
            },
            Quality {
                max_width: Some(20_000),
                ..Quality::default()
            },
            Quality {
                max_fps: Some(241),
                ..Quality::default()
            },
            Quality {
                max_bitrate: Some(9_999),
                ..Quality::default()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(SdkError::Invalid(_))),
                "{bad:?}"
            );
        }
    }
}
