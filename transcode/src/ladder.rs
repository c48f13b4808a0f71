//! A transcode's ladder: the rungs it makes of its stream (named by their height, `360p`), each
//! with the bitrate it is encoded at, and the stream each rung is published as
//! (`{stream}~{rung}`).

use ferry_proto::StreamId;
use ferry_proto::api::RungName;

/// One rung of a ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rung {
    /// Which.
    pub name: RungName,
    /// Picture height in pixels (the width follows the source's aspect ratio, even).
    pub height: u16,
    /// Video bitrate, kbit/s (H.264, 30 fps).
    pub kbps: u32,
}

impl Rung {
    /// The rung `name`, at its bitrate.
    pub fn of(name: RungName) -> Rung {
        let kbps = match name {
            RungName::P1080 => 4500,
            RungName::P720 => 2500,
            RungName::P480 => 1200,
            RungName::P360 => 800,
            RungName::P240 => 400,
            RungName::P180 => 250,
        };
        Rung {
            name,
            height: name.height(),
            kbps,
        }
    }

    /// Its name (`360p`).
    pub fn name(self) -> String {
        self.name.as_str().to_owned()
    }

    /// The stream it is published as: `{stream}~{name}`.
    pub fn stream_of(self, source: &StreamId) -> Result<StreamId, LadderError> {
        StreamId::new(format!("{source}~{}", self.name.as_str()))
            .map_err(|_| LadderError::StreamTooLong(source.clone()))
    }
}

/// Why a ladder was refused.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LadderError {
    /// No rung given.
    #[error("the ladder is empty: give rungs such as [\"720p\", \"360p\"]")]
    Empty,
    /// The same rung twice.
    #[error("rung {0} is in the ladder twice")]
    Repeated(&'static str),
    /// A rung's stream name would be too long.
    #[error("stream {0} is too long to name its rungs ({0}~360p must fit 64 bytes)")]
    StreamTooLong(StreamId),
    /// A rung of a rung.
    #[error("stream {0} is a rung already (its name holds ~): transcode its source")]
    OfARung(StreamId),
}

/// The rungs `names` give, highest first; refused when empty or repeated, or when the source
/// cannot name them.
pub fn parse(source: &StreamId, names: &[RungName]) -> Result<Vec<Rung>, LadderError> {
    if source.as_str().contains('~') {
        return Err(LadderError::OfARung(source.clone()));
    }
    if names.is_empty() {
        return Err(LadderError::Empty);
    }
    let mut rungs: Vec<Rung> = Vec::with_capacity(names.len());
    for &n in names {
        if rungs.iter().any(|r| r.name == n) {
            return Err(LadderError::Repeated(n.as_str()));
        }
        let rung = Rung::of(n);
        rung.stream_of(source)?;
        rungs.push(rung);
    }
    rungs.sort_by_key(|r| std::cmp::Reverse(r.height));
    Ok(rungs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladders_parse_and_refuse() {
        let cam = StreamId::new("cam").unwrap();
        let l = parse(&cam, &[RungName::P360, RungName::P720]).unwrap();
        assert_eq!(
            l.iter().map(|r| (r.height, r.kbps)).collect::<Vec<_>>(),
            [(720, 2500), (360, 800)],
            "highest first"
        );
        assert_eq!(l[1].stream_of(&cam).unwrap().as_str(), "cam~360p");
        assert_eq!(parse(&cam, &[]), Err(LadderError::Empty));
        assert_eq!(
            parse(&cam, &[RungName::P360, RungName::P360]),
            Err(LadderError::Repeated("360p"))
        );
        let long = StreamId::new("x".repeat(60)).unwrap();
        assert!(matches!(
            parse(&long, &[RungName::P360]),
            Err(LadderError::StreamTooLong(_))
        ));
        let rung = StreamId::new("cam~360p").unwrap();
        assert!(matches!(
            parse(&rung, &[RungName::P180]),
            Err(LadderError::OfARung(_))
        ));
        // The names as the API spells them.
        let names: Vec<RungName> = serde_json::from_str(r#"["1080p","180p"]"#).unwrap();
        assert_eq!(names, [RungName::P1080, RungName::P180]);
        assert!(serde_json::from_str::<Vec<RungName>>(r#"["360"]"#).is_err());
    }
}
