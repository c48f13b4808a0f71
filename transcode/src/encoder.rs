//! How one rung is made: the ffmpeg command line that reads the source's video (VP8 in IVF, or
//! H.264 in Annex B) on its stdin and writes the rung (H.264 Constrained Baseline in Annex B,
//! one access unit per source frame, each led by an access unit delimiter) on its stdout.
//!
//! Pure: the driver spawns what this builds.

use crate::ladder::Rung;

/// The encoder a node uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoder {
    /// NVIDIA's hardware encoder (`h264_nvenc`), where the node has a GPU that ffmpeg reaches.
    Nvenc,
    /// x264 on the CPU (`libx264`).
    X264,
}

impl Encoder {
    /// ffmpeg's name for it.
    pub fn ffmpeg_name(self) -> &'static str {
        match self {
            Encoder::Nvenc => "h264_nvenc",
            Encoder::X264 => "libx264",
        }
    }
}

/// What the source sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// VP8 frames, fed as IVF.
    Vp8,
    /// H.264 access units, fed as Annex B.
    H264,
}

impl Input {
    fn demuxer(self) -> &'static str {
        match self {
            Input::Vp8 => "ivf",
            Input::H264 => "h264",
        }
    }
}

/// Frames between keyframes of a rung: one a second at 30 fps, so a viewer joins (or switches to a
/// moved transcode) within a second.
pub const GOP: u32 = 30;

/// ffmpeg's arguments (after the program name) for `rung` of a source sending `input`.
pub fn ffmpeg_args(input: Input, rung: Rung, encoder: Encoder) -> Vec<String> {
    let mut a: Vec<String> = [
        "-hide_banner",
        "-loglevel",
        "error",
        "-nostdin",
        // Start at once and hold nothing back: a live source. (Not `-fflags nobuffer`: with
        // it ffmpeg 5.1 decodes no VP8 frame read from a pipe.)
        "-flags",
        "low_delay",
        "-probesize",
        "4096",
        "-analyzeduration",
        "0",
        "-f",
        input.demuxer(),
        "-i",
        "pipe:0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    a.extend(encode_args(rung, encoder));
    a.push("pipe:1".to_owned());
    a
}

/// The encoding half of a rung's command line (after its input, before its output): no audio,
/// scaled to the rung's height, H.264 with the rung's bitrate, a keyframe every [`GOP`] frames,
/// no B-frames, an access unit delimiter before every picture, raw Annex B out.
pub fn encode_args(rung: Rung, encoder: Encoder) -> Vec<String> {
    let kbps = rung.kbps;
    let mut a: Vec<String> = vec!["-an".to_owned(), "-vf".to_owned()];
    a.push(format!("scale=-2:{},format=yuv420p", rung.height));
    // One output frame per input frame: the driver pairs them to time the rung's frames.
    a.extend(["-fps_mode", "passthrough"].map(String::from));
    a.extend(["-c:v", encoder.ffmpeg_name()].map(String::from));
    match encoder {
        Encoder::X264 => a.extend(
            [
                "-preset",
                "veryfast",
                "-tune",
                "zerolatency",
                "-profile:v",
                "baseline",
            ]
            .map(String::from),
        ),
        Encoder::Nvenc => a.extend(
            [
                "-preset",
                "p1",
                "-tune",
                "ll",
                "-zerolatency",
                "1",
                "-profile:v",
                "baseline",
                "-rc",
                "cbr",
            ]
            .map(String::from),
        ),
    }
    a.extend([
        "-bf".to_owned(),
        "0".to_owned(),
        "-g".to_owned(),
        GOP.to_string(),
        "-keyint_min".to_owned(),
        GOP.to_string(),
        "-b:v".to_owned(),
        format!("{kbps}k"),
        "-maxrate".to_owned(),
        format!("{kbps}k"),
        "-bufsize".to_owned(),
        format!("{}k", kbps * 2),
        // An access unit delimiter before every picture: the driver cuts the stream there.
        "-bsf:v".to_owned(),
        "h264_metadata=aud=insert".to_owned(),
        "-flush_packets".to_owned(),
        "1".to_owned(),
        "-f".to_owned(),
        "h264".to_owned(),
    ]);
    a
}

/// ffmpeg's arguments for a probe that encodes one frame with `encoder` and throws it away:
/// whether the node can use it.
pub fn probe_args(encoder: Encoder) -> Vec<String> {
    [
        "-hide_banner",
        "-loglevel",
        "error",
        "-nostdin",
        "-f",
        "lavfi",
        "-i",
        "testsrc=size=320x240:rate=30",
        "-frames:v",
        "1",
        "-c:v",
        encoder.ffmpeg_name(),
        "-f",
        "null",
        "-",
    ]
    .map(String::from)
    .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rung_s_command_line() {
        let rung = crate::ladder::Rung::of(ferry_proto::api::RungName::P360);
        let a = ffmpeg_args(Input::Vp8, rung, Encoder::X264);
        let s = a.join(" ");
        assert!(s.contains("-f ivf -i pipe:0"), "{s}");
        assert!(s.contains("scale=-2:360"), "{s}");
        assert!(
            s.contains("-c:v libx264 -preset veryfast -tune zerolatency"),
            "{s}"
        );
        assert!(s.contains("-bf 0 -g 30"), "{s}");
        assert!(s.contains("-b:v 800k"), "{s}");
        assert!(s.ends_with("-f h264 pipe:1"), "{s}");
        let n = ffmpeg_args(Input::H264, rung, Encoder::Nvenc).join(" ");
        assert!(
            n.contains("-f h264 -i pipe:0") && n.contains("-c:v h264_nvenc -preset p1"),
            "{n}"
        );
        assert!(
            probe_args(Encoder::Nvenc)
                .join(" ")
                .contains("-c:v h264_nvenc")
        );
    }
}
