//! Typed identifiers. Every ID in Ferry is one of these, never a bare string.

/// Declares a string-backed identifier type with validation of its characters.
///
/// IDs appear in URLs, routing tables and logs, so they are restricted to
/// `[A-Za-z0-9._-]`, 1..=64 bytes. They are shared strings: a clone (the media path holds a
/// stream's id per packet) is a reference count, not an allocation.
#[macro_export]
macro_rules! typed_id {
    ($(#[$meta:meta])* $name:ident) => {
        $crate::typed_id!($(#[$meta])* $name, $crate::ids::validate);
    };
    ($(#[$meta:meta])* $name:ident, $validate:path) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(std::sync::Arc<str>);

        impl $name {
            /// Parses and validates an ID.
            pub fn new(s: impl Into<String>) -> Result<Self, $crate::ids::IdError> {
                let s = s.into();
                $validate(&s)?;
                Ok(Self(s.into()))
            }

            /// The ID as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::ids::IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = $crate::ids::IdError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0.to_string()
            }
        }
    };
}

/// Why a string is not a valid ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The ID is empty.
    #[error("id is empty")]
    Empty,
    /// The ID is longer than 64 bytes.
    #[error("id is longer than 64 bytes")]
    TooLong,
    /// The ID holds a character outside `[A-Za-z0-9._-]`.
    #[error("id holds {0:?}; only A-Z a-z 0-9 . _ - are allowed")]
    BadChar(char),
    /// The stream name holds a character outside `[A-Za-z0-9._~-]`.
    #[error("stream name holds {0:?}; only A-Z a-z 0-9 . _ - ~ are allowed")]
    BadStreamChar(char),
}

fn check(s: &str, ok: impl Fn(char) -> bool, bad: fn(char) -> IdError) -> Result<(), IdError> {
    if s.is_empty() {
        return Err(IdError::Empty);
    }
    if s.len() > 64 {
        return Err(IdError::TooLong);
    }
    match s.chars().find(|c| !ok(*c)) {
        Some(c) => Err(bad(c)),
        None => Ok(()),
    }
}

/// Checks the ID alphabet (`[A-Za-z0-9._-]`) and length (1–64 bytes).
pub fn validate(s: &str) -> Result<(), IdError> {
    check(
        s,
        |c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'),
        IdError::BadChar,
    )
}

/// A stream name's alphabet also has `~`: a stream made from another is named after it
/// (`cam~360p`, a transcoded rung of `cam`).
pub fn validate_stream(s: &str) -> Result<(), IdError> {
    check(
        s,
        |c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '~'),
        IdError::BadStreamChar,
    )
}

typed_id!(
    /// A media session: one peer connection of a publisher or a viewer.
    SessionId
);
typed_id!(
    /// A cluster node (`node-a`).
    NodeId
);
typed_id!(
    /// A stream name as it appears in `/whip/{stream}` (`~` allowed: `cam~360p`).
    StreamId,
    crate::ids::validate_stream
);
typed_id!(
    /// One media track of a stream (its publisher-side `mid`).
    TrackId
);
typed_id!(
    /// One migration of one session.
    MigrationId
);
typed_id!(
    /// One recording of one stream.
    RecordingId
);
typed_id!(
    /// One transcode of one stream (its ladder of rungs).
    TranscodeId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_validate_alphabet_and_length() {
        assert!(SessionId::new("abc-DEF_0.9").is_ok());
        assert_eq!(SessionId::new(""), Err(IdError::Empty));
        assert_eq!(StreamId::new("a/b"), Err(IdError::BadStreamChar('/')));
        assert!(StreamId::new("cam~360p").is_ok());
        assert_eq!(SessionId::new("a~b"), Err(IdError::BadChar('~')));
        assert_eq!(NodeId::new("x".repeat(65)), Err(IdError::TooLong));
    }

    #[test]
    fn ids_round_trip_through_json() {
        let id = NodeId::new("node-a").unwrap();
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"node-a\"");
        let back: NodeId = serde_json::from_str(&json).unwrap();
        assert_eq!(back, id);
        assert!(serde_json::from_str::<NodeId>("\"bad id\"").is_err());
    }
}
