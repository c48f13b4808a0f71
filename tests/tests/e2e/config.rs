//! `ferry --config FILE`: a command's table sets its flags; flags beat environment variables,
//! which beat the file; unknown keys are errors. Checked on `ferry token` (what it signs with)
//! and on a running `ferry node` (its session limit).

use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};
use ferry_proto::auth::{Grant, Verifier};
use ferry_tests::{FerryNode, ferry_bin, http};

const OFFER: &str = include_str!("../../../rtc/src/sdp/testdata/chrome_offer.sdp");

fn ferry(args: &[&str], env: &[(&str, &str)]) -> Result<Output> {
    let mut c = Command::new(ferry_bin()?);
    c.args(args)
        .env_remove("FERRY_TOKEN_SECRET")
        .env_remove("FERRY_CONFIG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().context("running ferry")
}

/// The secret (of `candidates`) that the token `out` printed was signed with.
fn signed_with<'a>(out: &Output, candidates: &[&'a str]) -> Result<&'a str> {
    ensure!(out.status.success(), "ferry token: {out:?}");
    let token = String::from_utf8(out.stdout.clone())?.trim().to_owned();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    candidates
        .iter()
        .find(|s| {
            Verifier::hs256(s.as_bytes()).is_ok_and(|v| {
                v.authorize(Some(&token), Grant::Publish, "cam", now)
                    .is_ok()
            })
        })
        .copied()
        .with_context(|| format!("signed with none of {candidates:?}"))
}

#[test]
fn a_config_file_sets_flags_below_the_environment_and_the_command_line() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dir = std::env::temp_dir().join(format!("ferry-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("ferry.toml");
    std::fs::write(
        &file,
        "[token]\nstream = \"cam\"\npublish = true\nttl = \"1h\"\nsecret = \"file-secret\"\n\
         [node]\nmax-sessions = 1\n[scheduler]\nhttp = \"127.0.0.1:0\"\n",
    )?;
    let f = file.to_str().context("path")?;
    let all = ["file-secret", "env-secret", "flag-secret"];

    let out = ferry(&["--config", f, "token"], &[])?;
    ensure!(
        signed_with(&out, &all)? == "file-secret",
        "the file's secret"
    );
    let out = ferry(&["token"], &[("FERRY_CONFIG", f)])?;
    ensure!(
        signed_with(&out, &all)? == "file-secret",
        "FERRY_CONFIG names the file"
    );
    let env = [("FERRY_TOKEN_SECRET", "env-secret")];
    let out = ferry(&["--config", f, "token"], &env)?;
    ensure!(
        signed_with(&out, &all)? == "env-secret",
        "env beats the file"
    );
    let out = ferry(&["--config", f, "token", "--secret", "flag-secret"], &env)?;
    ensure!(
        signed_with(&out, &all)? == "flag-secret",
        "the flag beats env"
    );

    // A typo is an error that names the key; so is a missing file.
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[token]\nstreem = \"cam\"\n")?;
    let out = ferry(&["--config", bad.to_str().context("path")?, "token"], &[])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("streem"),
        "typo: {out:?}"
    );
    let out = ferry(&["--config", "/nonexistent/ferry.toml", "token"], &[])?;
    ensure!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("/nonexistent"),
        "missing file: {out:?}"
    );

    // A running node takes its session limit from the file.
    let node = FerryNode::spawn(&["--config", f])?;
    let bearer = node.bearer();
    let post = |stream: &str| {
        http(
            &format!("{}/whip/{stream}", node.http),
            "POST",
            &[
                ("Content-Type", "application/sdp"),
                ("Authorization", &bearer),
            ],
            OFFER.as_bytes(),
        )
    };
    ensure!(post("one")?.status == 201, "first session");
    let r = post("two")?;
    ensure!(
        r.status == 503,
        "max-sessions = 1 from the file: {} {}",
        r.status,
        r.body
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
