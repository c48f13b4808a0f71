//! `ferry record …`: recordings through the scheduler (default; `--scheduler URL[,URL…]`),
//! which places each on a node where its stream is published and keeps it going through drains
//! and node failures — or on one node directly (`--node URL`, that node's own API):
//! `ferry record start --stream S [--target T]`, `ferry record list`, `ferry record stop ID`
//! (answers once the playlist with `EXT-X-ENDLIST` is stored). With the operator token.
//! Exit status as the other operator commands: 0 done, 2 an error.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use ferry_sfu::driver::scheduler_link::SchedulerLink;
use serde_json::Value;

use crate::ops::{HTTP_TIMEOUT, expect, table, text};

/// How long `stop` waits for the recording's end to be stored.
const STOP_TIMEOUT: Duration = Duration::from_secs(40);

/// Whom to ask and how to talk to them.
#[derive(clap::Args, Debug, Clone)]
pub struct NodeApiArgs {
    /// Scheduler replicas' base URLs, comma-separated (the default way: it places the
    /// recording and keeps it going).
    #[arg(long, env = "FERRY_SCHEDULER", default_value = "http://127.0.0.1:8080")]
    scheduler: String,
    /// One node's base URL instead of the scheduler: a recording started there stays there.
    #[arg(long, env = "FERRY_NODE")]
    pub(crate) node: Option<String>,
    /// API bearer token (default: $FERRY_API_TOKEN).
    #[arg(long, env = "FERRY_API_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// CA certificates (PEM) to trust for `https://` URLs.
    #[arg(long, env = "FERRY_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

impl NodeApiArgs {
    /// Puts `on` (the node the scheduler is to run a task on) into `body`; refused with
    /// `--node`, which talks to one node and runs it there.
    pub(crate) fn pin(&self, on: Option<&String>, body: &mut Value, what: &str) -> Result<()> {
        if let Some(n) = on {
            if self.node.is_some() {
                bail!(
                    "--on names a node for the scheduler to {what} on; with --node, leave it out"
                );
            }
            body["node"] = Value::String(n.clone());
        }
        Ok(())
    }

    pub(crate) fn link(&self) -> Result<SchedulerLink> {
        let token = self.token.clone().unwrap_or_default();
        if token.is_empty() {
            bail!("an API token is needed: --token or $FERRY_API_TOKEN");
        }
        let link = match &self.node {
            Some(node) => {
                let link = SchedulerLink::new(node, &token);
                if link.urls.len() != 1 {
                    bail!("--node names one URL");
                }
                link
            }
            None => {
                let link = SchedulerLink::new(&self.scheduler, &token);
                if link.urls.is_empty() {
                    bail!("--scheduler names no URL");
                }
                link
            }
        };
        let mut link = link;
        link.tls =
            ferry_sfu::driver::tls::client_tls(self.tls_ca.as_deref()).context("--tls-ca")?;
        Ok(link)
    }
}

/// `ferry record`.
#[derive(clap::Subcommand, Debug)]
pub enum RecordCommand {
    /// Start recording a stream.
    Start {
        #[command(flatten)]
        api: NodeApiArgs,
        /// The stream to record.
        #[arg(long)]
        stream: String,
        /// Where: a directory, file:///dir or s3://bucket/prefix (default: the node's
        /// recordings directory).
        #[arg(long)]
        target: Option<String>,
        /// The node to record on (default: the scheduler records where the stream is
        /// published).
        #[arg(long)]
        on: Option<String>,
    },
    /// The recordings.
    List {
        #[command(flatten)]
        api: NodeApiArgs,
    },
    /// Stop a recording (its playlist gets EXT-X-ENDLIST).
    Stop {
        #[command(flatten)]
        api: NodeApiArgs,
        /// The recording's id.
        id: String,
    },
}

fn rows(list: &[Value]) -> Vec<Vec<String>> {
    list.iter()
        .map(|r| {
            vec![
                text(&r["id"]),
                text(&r["stream"]),
                text(&r["state"]),
                text(&r["node"]),
                text(&r["segments"]),
                text(&r["bytes"]),
                text(&r["target"]),
            ]
        })
        .collect()
}

const HEADER: [&str; 7] = [
    "RECORDING",
    "STREAM",
    "STATE",
    "NODE",
    "SEGMENTS",
    "BYTES",
    "TARGET",
];

/// `list` as JSON: the one view alone, else the array (`--json` of the task commands).
pub(crate) fn print_json(out: &mut dyn Write, list: &[Value]) -> Result<()> {
    let v = if list.len() == 1 {
        list[0].clone()
    } else {
        Value::Array(list.to_vec())
    };
    writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    Ok(())
}

fn print(out: &mut dyn Write, json: bool, list: &[Value]) -> Result<()> {
    if json {
        return print_json(out, list);
    }
    table(out, &HEADER, &rows(list))
}

/// Runs `ferry record …`.
pub fn run(cmd: &RecordCommand, out: &mut dyn Write) -> Result<i32> {
    match cmd {
        RecordCommand::Start {
            api,
            stream,
            target,
            on,
        } => {
            let mut body = serde_json::json!({ "stream": stream });
            if let Some(t) = target {
                body["target"] = Value::String(t.clone());
            }
            api.pin(on.as_ref(), &mut body, "record")?;
            let v = expect(
                api.link()?
                    .call("/v1/recordings", Some(&body), HTTP_TIMEOUT)?,
                &[201],
            )?;
            print(out, api.json, &[v])?;
        }
        RecordCommand::List { api } => {
            let link = api.link()?;
            let v = expect(link.call("/v1/recordings", None, HTTP_TIMEOUT)?, &[200])?;
            let list = v.as_array().cloned().unwrap_or_default();
            if api.json {
                writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                table(out, &HEADER, &rows(&list))?;
            }
        }
        RecordCommand::Stop { api, id } => {
            if ferry_proto::RecordingId::new(id.as_str()).is_err() {
                bail!("{id:?} is not a recording id");
            }
            let path = format!("/v1/recordings/{id}");
            let v = expect(api.link()?.delete(&path, STOP_TIMEOUT)?, &[200])?;
            print(out, api.json, &[v])?;
        }
    }
    Ok(0)
}
