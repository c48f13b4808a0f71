//! `--config ferry.toml` (or `$FERRY_CONFIG`): every flag of a command has a key in the file's
//! table named after the command (`[node]`, `[scheduler]`, `[dev]`, `[edge]`, `[status]`, …;
//! `[bench.ha]` for `ferry bench ha`), spelled like the flag without its dashes (`max-sessions`
//! or `max_sessions`). Precedence: flags, then environment variables, then the file, then the
//! defaults. Keys the command does not have are an error (a typo must not pass silently); tables
//! of other commands are ignored, so one file serves every process of a host.
//!
//! Values: strings, numbers, booleans (`true` sets a switch, `false` leaves it off) and arrays
//! (one flag per element, for repeatable flags such as `ice-server`).

use std::ffi::OsString;
use std::path::Path;

use anyhow::{Context, Result, bail};
use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

/// The flag naming the config file.
pub const FLAG: &str = "--config";
/// Its environment variable.
pub const ENV: &str = "FERRY_CONFIG";

/// The config file named by `args` (`--config F` / `--config=F`) or `$FERRY_CONFIG`, and `args`
/// without the flag.
pub fn take_path(args: Vec<OsString>) -> Result<(Option<std::path::PathBuf>, Vec<OsString>)> {
    let mut path = None;
    let mut rest = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == FLAG {
            let v = it.next().context("--config needs a file")?;
            path = Some(v.into());
        } else if let Some(v) = s.strip_prefix("--config=") {
            path = Some(v.into());
        } else {
            rest.push(a);
        }
    }
    if path.is_none() {
        path = std::env::var_os(ENV)
            .filter(|v| !v.is_empty())
            .map(Into::into);
    }
    Ok((path, rest))
}

/// `args` with the file's values for the invoked command added where neither a flag nor an
/// environment variable set them.
pub fn apply(cli: &Command, args: Vec<OsString>, file: &Path) -> Result<Vec<OsString>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", file.display()))?;
    merge(cli, args, &table).with_context(|| format!("in {}", file.display()))
}

/// [`apply`] on a parsed file.
pub fn merge(cli: &Command, args: Vec<OsString>, table: &toml::Table) -> Result<Vec<OsString>> {
    // What the command line and the environment set; errors (a required flag that only the
    // file gives, --help) are left to the real parse of the merged arguments.
    let matches = cli
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(&args)?;
    // The invoked (sub)command path: `node`, or `bench` + `ha`.
    let mut path = Vec::new();
    let (mut m, mut cmd): (&ArgMatches, &Command) = (&matches, cli);
    while let Some((name, sub)) = m.subcommand() {
        path.push(name.to_owned());
        cmd = cmd
            .find_subcommand(name)
            .with_context(|| format!("no command {name}"))?;
        m = sub;
    }
    let mut found = Some(table);
    for name in &path {
        found = found.and_then(|t| t.get(name)).and_then(|v| v.as_table());
    }
    let mut section = found.cloned().unwrap_or_default();
    shared_turn(table, cmd, &mut section)?;
    if section.is_empty() {
        return Ok(args);
    }
    let mut extra: Vec<OsString> = Vec::new();
    for (key, value) in &section {
        if value.is_table() {
            // A nested command's table (`[bench.ha]` under `[bench]`).
            continue;
        }
        // The flag's name (`ice-server`) or its field's (`ice_servers`).
        let (snake, kebab) = (key.replace('-', "_"), key.replace('_', "-"));
        let Some(arg) = cmd
            .get_arguments()
            .find(|a| a.get_id() == snake.as_str() || a.get_long() == Some(kebab.as_str()))
        else {
            bail!(
                "[{}] has no key {key:?} (`ferry {} --help` lists the flags)",
                path.join("."),
                path.join(" ")
            );
        };
        let Some(long) = arg.get_long() else {
            bail!(
                "[{}] {key}: a positional argument goes on the command line",
                path.join(".")
            );
        };
        if matches!(
            m.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let values = match value {
            toml::Value::Array(items) => items.iter().collect::<Vec<_>>(),
            v => vec![v],
        };
        for v in values {
            match v {
                toml::Value::Boolean(true) => extra.push(format!("--{long}").into()),
                toml::Value::Boolean(false) => {}
                toml::Value::String(s) => extra.push(format!("--{long}={s}").into()),
                toml::Value::Integer(n) => extra.push(format!("--{long}={n}").into()),
                toml::Value::Float(f) => extra.push(format!("--{long}={f}").into()),
                other => bail!(
                    "[{}] {key}: {} is not a flag value",
                    path.join("."),
                    other.type_str()
                ),
            }
        }
    }
    // After the command's name(s), before its own arguments.
    let at = position_after(&args, &path);
    let mut out = args;
    out.splice(at..at, extra);
    Ok(out)
}

/// The shared `[turn]` table — the TURN fleet that every scheduler replica (and `ferry dev`)
/// hands out — fills the `--turn-…` flags (`uris` → `--turn-uris`) of a command that has them,
/// below the command's own table. Its keys must all be such flags.
fn shared_turn(root: &toml::Table, cmd: &Command, section: &mut toml::Table) -> Result<()> {
    let Some(turn) = root.get("turn").and_then(toml::Value::as_table) else {
        return Ok(());
    };
    let has = |long: &str| cmd.get_arguments().any(|a| a.get_long() == Some(long));
    if !cmd
        .get_arguments()
        .any(|a| a.get_long().is_some_and(|l| l.starts_with("turn-")))
    {
        return Ok(());
    }
    for (key, value) in turn {
        let long = format!("turn-{}", key.replace('_', "-"));
        if !has(&long) {
            bail!("[turn] has no key {key:?} (the --turn-… flags of `ferry scheduler --help`)");
        }
        if !section.contains_key(&long) && !section.contains_key(&long.replace('-', "_")) {
            section.insert(long, value.clone());
        }
    }
    Ok(())
}

/// The index just after the words of `path` in `args`.
fn position_after(args: &[OsString], path: &[String]) -> usize {
    let mut i = 1;
    for name in path {
        while i < args.len() && args[i].to_string_lossy() != name.as_str() {
            i += 1;
        }
        i += 1;
    }
    i.min(args.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Parser, Subcommand};

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Subcommand, Debug)]
    enum Cmd {
        Node {
            #[arg(long, default_value_t = 100)]
            max_sessions: u32,
            #[arg(long, default_value = "default")]
            zone: String,
            #[arg(long)]
            canary: bool,
            #[arg(long = "ice-server")]
            ice_servers: Vec<String>,
        },
        Other,
    }

    fn run(args: &[&str], toml: &str) -> Result<Cli> {
        let table: toml::Table = toml::from_str(toml)?;
        let args: Vec<OsString> = args.iter().map(Into::into).collect();
        let merged = merge(&<Cli as clap::CommandFactory>::command(), args, &table)?;
        Ok(Cli::try_parse_from(merged)?)
    }

    #[test]
    fn flags_beat_the_file_which_beats_defaults() {
        let file = "[node]\nmax-sessions = 7\nzone = \"file\"\ncanary = true\nice-server = [\"stun:a\", \"stun:b\"]\n[other]\nx = 1\n";
        let Cli {
            command:
                Cmd::Node {
                    max_sessions,
                    zone,
                    canary,
                    ice_servers,
                },
        } = run(&["ferry", "node"], file).unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("not node");
        };
        assert_eq!((max_sessions, zone.as_str(), canary), (7, "file", true));
        assert_eq!(ice_servers, ["stun:a", "stun:b"]);
        let Cli {
            command: Cmd::Node { max_sessions, .. },
        } = run(&["ferry", "node", "--max-sessions", "9"], file).unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("not node");
        };
        assert_eq!(max_sessions, 9, "the flag wins");
        // No table for the command: defaults.
        let Cli {
            command: Cmd::Node { max_sessions, .. },
        } = run(&["ferry", "node"], "[other]\n").unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("not node");
        };
        assert_eq!(max_sessions, 100);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let e = run(&["ferry", "node"], "[node]\nmax-sesions = 7\n").unwrap_err();
        assert!(e.to_string().contains("max-sesions"), "{e}");
        let e = run(&["ferry", "node"], "[node]\nmax-sessions = \"many\"\n").unwrap_err();
        assert!(e.to_string().contains("many"), "{e}");
        let e = run(&["ferry", "node"], "[node]\nzone = 2024-01-01\n").unwrap_err();
        assert!(e.to_string().contains("datetime"), "{e}");
    }

    /// Every table of `docs/ferry.example.toml` fits its command.
    #[test]
    fn the_example_file_fits_the_commands() {
        let table: toml::Table = toml::from_str(include_str!("../../docs/ferry.example.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        let cli = <crate::Cli as clap::CommandFactory>::command();
        assert!(table.len() >= 4, "{table:?}");
        for name in table.keys() {
            if name == "turn" {
                // Shared by the commands with --turn-… flags, checked through them.
                continue;
            }
            let args = vec![OsString::from("ferry"), OsString::from(name)];
            let merged = merge(&cli, args, &table).unwrap_or_else(|e| panic!("[{name}]: {e:#}"));
            assert!(merged.len() > 2, "[{name}] set nothing");
            if let Err(e) = <crate::Cli as clap::Parser>::try_parse_from(&merged) {
                panic!("[{name}]: {e}");
            }
        }
    }

    /// `[turn]` fills the `--turn-…` flags of the scheduler (and `ferry dev`), below their own
    /// tables; commands without them ignore it; a typo in it is an error.
    #[test]
    fn the_turn_table_is_shared() {
        let cli = <crate::Cli as clap::CommandFactory>::command();
        let file: toml::Table = toml::from_str(
            "[turn]\nuris = \"turn:10.0.0.1:3478\"\nttl-s = 600\n[dev]\nturn-ttl-s = 900\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let words = |cmd: &str| -> Vec<String> {
            let args = vec![OsString::from("ferry"), OsString::from(cmd)];
            merge(&cli, args, &file)
                .unwrap_or_else(|e| panic!("{e:#}"))
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let sched = words("scheduler");
        assert!(
            sched.contains(&"--turn-uris=turn:10.0.0.1:3478".to_owned()),
            "{sched:?}"
        );
        assert!(sched.contains(&"--turn-ttl-s=600".to_owned()), "{sched:?}");
        let dev = words("dev");
        assert!(
            dev.contains(&"--turn-ttl-s=900".to_owned()),
            "[dev] wins: {dev:?}"
        );
        assert!(!dev.contains(&"--turn-ttl-s=600".to_owned()), "{dev:?}");
        assert_eq!(
            words("edge"),
            ["ferry", "edge"],
            "no --turn-… flags: [turn] ignored"
        );
        let typo: toml::Table =
            toml::from_str("[turn]\nurs = \"x\"\n").unwrap_or_else(|e| panic!("{e}"));
        let e = merge(
            &cli,
            vec![OsString::from("ferry"), OsString::from("scheduler")],
            &typo,
        )
        .unwrap_err();
        assert!(e.to_string().contains("[turn] has no key \"urs\""), "{e}");
    }

    #[test]
    fn the_config_flag_is_taken_out() {
        let args = ["ferry", "--config", "f.toml", "node", "--config=g.toml"]
            .iter()
            .map(OsString::from)
            .collect();
        let (path, rest) = take_path(args).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(path, Some("g.toml".into()));
        assert_eq!(rest, ["ferry", "node"].map(OsString::from));
    }
}
