//! `ferry turn …`: the operator's view of the TURN fleet — `ferry turn relays` (state, users,
//! drain of each relay), `ferry turn drain RELAY [--deadline-s N] [--wait]` (no new users; the
//! SDK clients on it move to other relays; drained once its users are gone or at the deadline)
//! and `ferry turn undrain RELAY`; `ferry turn add URI` and `ferry turn remove RELAY` (once
//! drained) change the fleet. RELAY is a relay's id or URI (as `ferry turn relays` lists).
//! Exit status as the other operator commands: 0 done, 1 `--wait` timed out, 2 an error.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::ops::{ApiArgs, HTTP_TIMEOUT, expect, get, table, text};

/// `ferry turn`.
#[derive(clap::Subcommand, Debug)]
pub enum TurnCommand {
    /// The relays: state (active, draining, drained, down), users, drain.
    Relays {
        #[command(flatten)]
        api: ApiArgs,
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drain a relay: no new users, clients on it told to move.
    Drain {
        /// The relay's id or URI.
        relay: String,
        #[command(flatten)]
        api: ApiArgs,
        /// Seconds until it counts as drained even with users left.
        #[arg(long, default_value_t = 600)]
        deadline_s: u64,
        /// Follow it until it is drained.
        #[arg(long)]
        wait: bool,
    },
    /// Put a relay back into service.
    Undrain {
        /// The relay's id or URI.
        relay: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Add a relay to the fleet (scale-out): it ramps in.
    Add {
        /// `turn:host:port[?transport=udp|tcp][;zone=Z][;isp=I][;weight=W]`.
        uri: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Remove a drained (or down) relay from the fleet (scale-in).
    Remove {
        /// The relay's id or URI.
        relay: String,
        #[command(flatten)]
        api: ApiArgs,
    },
}

/// The relay `key` names (id or URI) in `list`.
fn find<'a>(list: &'a Value, key: &str) -> Result<&'a Value> {
    list.as_array()
        .and_then(|a| a.iter().find(|r| r["id"] == key || r["uri"] == key))
        .with_context(|| format!("no TURN relay {key:?} (see ferry turn relays)"))
}

/// Runs `ferry turn …`.
pub fn run(cmd: &TurnCommand, out: &mut dyn Write) -> Result<i32> {
    match cmd {
        TurnCommand::Relays { api, json } => {
            let list = get(&api.link(false)?, "/v1/turn/relays")?;
            if *json {
                writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = list
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|r| {
                            vec![
                                text(&r["id"]),
                                text(&r["zone"]),
                                text(&r["weight"]),
                                text(&r["state"]),
                                text(&r["allocations"]),
                                text(&r["drain"]["done_reason"]),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            table(
                out,
                &["RELAY", "ZONE", "WEIGHT", "STATE", "USERS", "DRAINED BY"],
                &rows,
            )?;
            Ok(0)
        }
        TurnCommand::Drain {
            relay,
            api,
            deadline_s,
            wait,
        } => {
            let link = api.link(true)?;
            let list = get(&link, "/v1/turn/relays")?;
            let id = text(&find(&list, relay)?["id"]);
            let body = serde_json::json!({ "deadline_s": deadline_s });
            let path = format!("/v1/turn/relays/{id}/drain");
            expect(link.call(&path, Some(&body), HTTP_TIMEOUT)?, &[202])?;
            writeln!(out, "{id} is draining (deadline {deadline_s} s)")?;
            if !*wait {
                return Ok(0);
            }
            let until = Instant::now() + Duration::from_secs(*deadline_s + 10);
            loop {
                let list = get(&link, "/v1/turn/relays")?;
                let r = find(&list, &id)?;
                if r["state"] == "drained" {
                    let d = &r["drain"];
                    let ms = d["done_unix_ms"].as_u64().unwrap_or(0)
                        - d["since_unix_ms"].as_u64().unwrap_or(0);
                    writeln!(
                        out,
                        "{id} drained ({}) after {:.1} s",
                        text(&d["done_reason"]),
                        ms as f64 / 1000.0
                    )?;
                    return Ok(0);
                }
                if Instant::now() > until {
                    writeln!(out, "{id} is still {}", text(&r["state"]))?;
                    return Ok(1);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        TurnCommand::Add { uri, api } => {
            let link = api.link(true)?;
            let body = serde_json::json!({ "uri": uri });
            let r = expect(
                link.call("/v1/turn/relays", Some(&body), HTTP_TIMEOUT)?,
                &[201],
            )?;
            writeln!(
                out,
                "{} joined the fleet ({})",
                text(&r["id"]),
                text(&r["state"])
            )?;
            Ok(0)
        }
        TurnCommand::Remove { relay, api } => {
            let link = api.link(true)?;
            let list = get(&link, "/v1/turn/relays")?;
            let id = text(&find(&list, relay)?["id"]);
            let a = link.delete(&format!("/v1/turn/relays/{id}"), HTTP_TIMEOUT)?;
            if a.status != 204 {
                expect(a, &[204])?;
            }
            writeln!(out, "{id} left the fleet")?;
            Ok(0)
        }
        TurnCommand::Undrain { relay, api } => {
            let link = api.link(true)?;
            let list = get(&link, "/v1/turn/relays")?;
            let id = text(&find(&list, relay)?["id"]);
            let path = format!("/v1/turn/relays/{id}/drain");
            expect(link.delete(&path, HTTP_TIMEOUT)?, &[200])?;
            writeln!(out, "{id} takes users again")?;
            Ok(0)
        }
    }
}
