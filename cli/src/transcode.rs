//! `ferry transcode …`: transcodes through the scheduler (default), which places each on the
//! node its GPU-aware score picks — a GPU with NVENC sessions left, else the CPU node with the
//! fewest — or on one node directly (`--node URL`, that node's own API):
//! `ferry transcode start --stream S --ladder 720p,360p [--on NODE]`, `ferry transcode list`,
//! `ferry transcode show ID`, `ferry transcode stop ID`. Each rung plays as `{stream}~{rung}`
//! over WHEP. With the operator token; exit status as the other operator commands.

use std::io::Write;
use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::Value;

use crate::ops::{HTTP_TIMEOUT, expect, table, text};
use crate::record::NodeApiArgs;

/// How long `start` and `stop` wait (the worker plays its source before it answers).
const TASK_TIMEOUT: Duration = Duration::from_secs(40);

/// `ferry transcode`.
#[derive(clap::Subcommand, Debug)]
pub enum TranscodeCommand {
    /// Transcode a stream into a ladder of rungs.
    Start {
        #[command(flatten)]
        api: NodeApiArgs,
        /// The source stream.
        #[arg(long)]
        stream: String,
        /// The rungs: 1080p, 720p, 480p, 360p, 240p, 180p.
        #[arg(long, value_delimiter = ',', required = true)]
        ladder: Vec<String>,
        /// The node to transcode on (default: the scheduler's pick).
        #[arg(long)]
        on: Option<String>,
    },
    /// The transcodes.
    List {
        #[command(flatten)]
        api: NodeApiArgs,
    },
    /// One transcode with its rungs' figures.
    Show {
        #[command(flatten)]
        api: NodeApiArgs,
        /// The transcode's id.
        id: String,
    },
    /// Stop a transcode (its rungs end).
    Stop {
        #[command(flatten)]
        api: NodeApiArgs,
        /// The transcode's id.
        id: String,
    },
}

const HEADER: [&str; 8] = [
    "TRANSCODE",
    "STREAM",
    "STATE",
    "NODE",
    "ENCODER",
    "RUNG",
    "FRAMES",
    "RTF",
];

/// One row per rung.
fn rows(list: &[Value]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for t in list {
        let rungs = t["rungs"].as_array().cloned().unwrap_or_default();
        for r in &rungs {
            out.push(vec![
                text(&t["id"]),
                text(&t["stream"]),
                text(&t["state"]),
                text(&t["node"]),
                text(&t["encoder"]),
                text(&r["stream"]),
                text(&r["frames"]),
                r["realtime_factor"]
                    .as_f64()
                    .map_or_else(String::new, |f| format!("{f:.3}")),
            ]);
        }
    }
    out
}

fn print(out: &mut dyn Write, json: bool, list: &[Value]) -> Result<()> {
    if json {
        return crate::record::print_json(out, list);
    }
    table(out, &HEADER, &rows(list))?;
    for t in list {
        if let Some(n) = t["encoder_note"].as_str() {
            writeln!(out, "{}: {n}", text(&t["id"]))?;
        }
    }
    Ok(())
}

fn checked_id(id: &str) -> Result<()> {
    if ferry_proto::TranscodeId::new(id).is_err() {
        bail!("{id:?} is not a transcode id");
    }
    Ok(())
}

/// Runs `ferry transcode …`.
pub fn run(cmd: &TranscodeCommand, out: &mut dyn Write) -> Result<i32> {
    match cmd {
        TranscodeCommand::Start {
            api,
            stream,
            ladder,
            on,
        } => {
            let mut body = serde_json::json!({ "stream": stream, "ladder": ladder });
            api.pin(on.as_ref(), &mut body, "transcode")?;
            let v = expect(
                api.link()?
                    .call("/v1/transcodes", Some(&body), TASK_TIMEOUT)?,
                &[201],
            )?;
            print(out, api.json, &[v])?;
        }
        TranscodeCommand::List { api } => {
            let v = expect(
                api.link()?.call("/v1/transcodes", None, HTTP_TIMEOUT)?,
                &[200],
            )?;
            print(out, api.json, v.as_array().map_or(&[][..], Vec::as_slice))?;
        }
        TranscodeCommand::Show { api, id } => {
            checked_id(id)?;
            let path = format!("/v1/transcodes/{id}");
            let v = expect(api.link()?.call(&path, None, HTTP_TIMEOUT)?, &[200])?;
            print(out, api.json, &[v])?;
        }
        TranscodeCommand::Stop { api, id } => {
            checked_id(id)?;
            let path = format!("/v1/transcodes/{id}");
            let v = expect(api.link()?.delete(&path, TASK_TIMEOUT)?, &[200])?;
            print(out, api.json, &[v])?;
        }
    }
    Ok(0)
}
