//! `ferry rooms [ROOM]`: the operator's view of the rooms across the cluster. The scheduler
//! lists the nodes; every node asked answers for the rooms it hosts a replica of
//! (`GET /v1/rooms`, `GET /v1/rooms/{room}`, docs/rooms.md).
//!
//! Without ROOM: a row per room — the nodes hosting it, its participants, connections,
//! operations per second, the nodes that isolated it as hot, and whether its replicas agree
//! (equal digests). With ROOM: a row per replica (peers, digest, push tree, snapshots) and the
//! room's participants as the first replica sees them.
//!
//! Exit status: 0 done, 1 ROOM is hosted by no node, 2 a usage or HTTP error (printed). A node
//! that does not answer is named on standard error and left out.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context, Result};
use ferry_sfu::driver::scheduler_link::SchedulerLink;
use serde_json::{Value, json};

use crate::ops::{ApiArgs, HTTP_TIMEOUT, expect, get, table, text};

/// Options of `ferry rooms`.
#[derive(clap::Args, Debug)]
pub struct RoomsArgs {
    /// One room: each node's replica of it, and its participants.
    room: Option<String>,
    #[command(flatten)]
    api: ApiArgs,
    /// Print what the nodes answered as JSON (`[{node, rooms}]`, or `[{node, room}]` for ROOM).
    #[arg(long)]
    json: bool,
}

/// Asks each node the scheduler knows (not down) for `path`; `(node id, answer)` of those that
/// answered 200. `None` for a node that answered 404 (not hosted there).
fn ask_nodes(link: &SchedulerLink, path: &str) -> Result<Vec<(String, Option<Value>)>> {
    let nodes = get(link, "/v1/nodes")?;
    let mut out = Vec::new();
    for n in nodes.as_array().into_iter().flatten() {
        let (id, http) = (text(&n["id"]), text(&n["http"]));
        if n["state"] == "down" || http == "-" {
            continue;
        }
        let mut node = SchedulerLink::new(&http, "");
        node.tls = link.tls.clone();
        let answer = node
            .call(path, None, HTTP_TIMEOUT)
            .map_err(anyhow::Error::from)
            .and_then(|a| {
                if a.status == 404 {
                    Ok(None)
                } else {
                    expect(a, &[200]).map(Some)
                }
            });
        match answer {
            Ok(v) => out.push((id, v)),
            Err(e) => eprintln!("ferry rooms: {id} ({http}) did not answer: {e:#}"),
        }
    }
    Ok(out)
}

/// `[{"node": …, key: …}]`, pretty.
fn print_by_node<'a, V: serde::Serialize + 'a>(
    out: &mut dyn Write,
    key: &str,
    answers: impl Iterator<Item = (&'a String, &'a V)>,
) -> Result<()> {
    let all: Vec<Value> = answers
        .map(|(node, v)| json!({"node": node, key: v}))
        .collect();
    writeln!(out, "{}", serde_json::to_string_pretty(&all)?)?;
    Ok(())
}

/// The first 12 hex digits of a digest.
fn short(digest: &Value) -> String {
    text(digest).chars().take(12).collect()
}

/// `ferry rooms`.
pub fn run(args: &RoomsArgs, out: &mut dyn Write) -> Result<i32> {
    let link = args.api.link(false)?;
    match &args.room {
        None => list(args, &link, out),
        Some(room) => show(args, &link, room, out),
    }
}

fn list(args: &RoomsArgs, link: &SchedulerLink, out: &mut dyn Write) -> Result<i32> {
    let answers = ask_nodes(link, "/v1/rooms")?;
    if args.json {
        print_by_node(out, "rooms", answers.iter().map(|(n, v)| (n, v)))?;
        return Ok(0);
    }
    // Room → its replicas (node, the node's row).
    let mut rooms: BTreeMap<String, Vec<(String, Value)>> = BTreeMap::new();
    for (node, list) in &answers {
        for r in list
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            rooms
                .entry(text(&r["room"]))
                .or_default()
                .push((node.clone(), r.clone()));
        }
    }
    writeln!(out, "ROOMS ({})", rooms.len())?;
    let rows: Vec<Vec<String>> = rooms
        .iter()
        .map(|(room, replicas)| {
            let sum = |k: &str| {
                replicas
                    .iter()
                    .filter_map(|(_, r)| r[k].as_f64())
                    .sum::<f64>()
            };
            let most = |k: &str| {
                replicas
                    .iter()
                    .filter_map(|(_, r)| r[k].as_u64())
                    .max()
                    .unwrap_or(0)
            };
            let hot: Vec<&str> = replicas
                .iter()
                .filter(|(_, r)| r["isolated"] == true)
                .map(|(n, _)| n.as_str())
                .collect();
            let agree = replicas
                .windows(2)
                .all(|w| w[0].1["digest"] == w[1].1["digest"]);
            vec![
                room.clone(),
                replicas
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                most("participants").to_string(),
                format!("{:.0}", sum("connections")),
                format!("{:.1}", sum("ops_per_s")),
                if hot.is_empty() {
                    "-".into()
                } else {
                    hot.join(",")
                },
                if agree { "yes" } else { "no" }.into(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "ROOM",
            "NODES",
            "PARTICIPANTS",
            "CONNECTIONS",
            "OPS/S",
            "HOT ON",
            "CONVERGED",
        ],
        &rows,
    )?;
    Ok(0)
}

fn show(args: &RoomsArgs, link: &SchedulerLink, room: &str, out: &mut dyn Write) -> Result<i32> {
    // A room id is URL-safe once valid (letters, digits, '.', '_', '-').
    let room = ferry_room::RoomId::new(room).with_context(|| format!("room {room:?}"))?;
    let path = format!("/v1/rooms/{room}");
    let replicas: Vec<(String, Value)> = ask_nodes(link, &path)?
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| (n, v)))
        .collect();
    if args.json {
        print_by_node(out, "room", replicas.iter().map(|(n, v)| (n, v)))?;
        return Ok(if replicas.is_empty() { 1 } else { 0 });
    }
    let Some((_, first)) = replicas.first() else {
        writeln!(out, "room {room}: hosted by no node")?;
        return Ok(1);
    };
    let agree = replicas
        .windows(2)
        .all(|w| w[0].1["digest"] == w[1].1["digest"]);
    writeln!(
        out,
        "ROOM {room}: {} replicas, {}",
        replicas.len(),
        if agree { "converged" } else { "digests differ" }
    )?;
    let rows: Vec<Vec<String>> = replicas
        .iter()
        .map(|(node, r)| {
            let peers: Vec<String> = r["peers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            vec![
                node.clone(),
                short(&r["digest"]),
                if peers.is_empty() {
                    "-".into()
                } else {
                    peers.join(",")
                },
                text(&r["connections"]),
                format!("{:.1}", r["ops_per_s"].as_f64().unwrap_or(0.0)),
                text(&r["isolated"]),
                format!(
                    "{}/{}",
                    text(&r["fanout"]["children"]),
                    text(&r["fanout"]["depth"])
                ),
                match r["sync"]["parent"].as_str() {
                    Some(p) => p.to_owned(),
                    None => "-".into(),
                },
                text(&r["sync"]["tombstones"]),
                format!(
                    "{}{}",
                    if r["snapshots"]["stored"] == true {
                        "stored"
                    } else {
                        "-"
                    },
                    match r["snapshots"]["merged"].as_u64() {
                        Some(n) if n > 0 => format!(", {n} merged"),
                        _ => String::new(),
                    }
                ),
            ]
        })
        .collect();
    table(
        out,
        &[
            "NODE",
            "DIGEST",
            "PEERS",
            "CONNECTIONS",
            "OPS/S",
            "ISOLATED",
            "FANOUT/DEPTH",
            "SYNC-PARENT",
            "TOMBSTONES",
            "SNAPSHOT",
        ],
        &rows,
    )?;
    let participants = first["state"]["participants"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    writeln!(
        out,
        "\nPARTICIPANTS ({}, as {} sees them)",
        participants.len(),
        replicas[0].0
    )?;
    let rows: Vec<Vec<String>> = participants
        .iter()
        .map(|(id, p)| {
            let flags = [
                ("audio muted", &p["audio_muted"]),
                ("video muted", &p["video_muted"]),
                ("hand", &p["hand_raised"]),
            ];
            let on: Vec<&str> = flags
                .iter()
                .filter(|(_, v)| **v == true)
                .map(|(name, _)| *name)
                .collect();
            vec![
                id.clone(),
                text(&p["name"]),
                p["tracks"].as_object().map_or(0, |t| t.len()).to_string(),
                if on.is_empty() {
                    "-".into()
                } else {
                    on.join(", ")
                },
            ]
        })
        .collect();
    table(out, &["ID", "NAME", "TRACKS", "FLAGS"], &rows)?;
    Ok(0)
}
