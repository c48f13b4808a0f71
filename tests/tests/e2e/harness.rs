//! The harness checking itself, without a Ferry server: Chromium's flags, the fake camera and
//! microphone, stats collection and reporting (`loopback.html`), error reporting (`broken.html`),
//! and the `ferry dev` demo page rendering without JS errors.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use ferry_tests::{Browser, Collector, num};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);

fn has_errors(report: &Value) -> bool {
    report["errors"].as_array().is_some_and(|e| !e.is_empty())
}

#[tokio::test]
async fn loopback_page_plays_the_fake_camera_without_freezes() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let started = Instant::now();
    let collector = Collector::start()?;
    let browser =
        Browser::open(&collector.page_url("loopback.html", &[("id", "L"), ("codec", "vp8")]))?;

    let reports = collector
        .wait_until(TIMEOUT, |reports| {
            reports.get("L").is_some_and(|l| {
                has_errors(l)
                    || l["phase"] == "failed"
                    || num(l, "/receiver/inbound/video/framesDecoded") > 60.0
            })
        })
        .await?;
    let l = &reports["L"];
    eprintln!("loopback report after {:?}: {l}", started.elapsed());

    assert_eq!(l["errors"], json!([]), "page errors");
    assert_eq!(l["phase"], "negotiated");
    assert_eq!(l["receiver"]["connectionState"], "connected");
    assert_eq!(l["receiver"]["transport"]["dtlsState"], "connected");
    let video = &l["receiver"]["inbound"]["video"];
    assert!(num(video, "/framesDecoded") > 60.0, "{video}");
    assert_eq!(video["freezeCount"], json!(0), "{video}");
    assert_eq!(video["codec"], "video/VP8");
    assert!(
        num(l, "/receiver/inbound/audio/packetsReceived") > 0.0,
        "{l}"
    );
    let sent = &l["sender"]["outbound"]["video"];
    assert!(num(sent, "/framesEncoded") > 60.0, "{sent}");
    assert!(
        num(l, "/element/videoWidth") > 0.0,
        "the <video> shows frames: {l}"
    );

    // Dropping the browser ends every process it started, the crash handler outside its
    // process group included. (Zombies don't count: reaping them is init's job.)
    let (group, dir) = (browser.pid(), browser.dir().to_owned());
    assert!(
        !processes_naming(&dir).is_empty(),
        "the scan below sees Chromium"
    );
    drop(browser);
    assert_eq!(processes_in_group(group), Vec::<String>::new());
    assert_eq!(processes_naming(&dir), Vec::<String>::new());
    assert!(!dir.exists(), "temp dir removed");
    Ok(())
}

#[tokio::test]
async fn broken_page_reports_its_errors() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let collector = Collector::start()?;
    let _browser = Browser::open(&collector.page_url("broken.html", &[("id", "X")]))?;

    let reports = collector
        .wait_until(TIMEOUT, |reports| {
            reports
                .get("X")
                .is_some_and(|x| x["errors"].as_array().is_some_and(|e| e.len() >= 2))
        })
        .await?;
    let errors = reports["X"]["errors"].to_string();
    assert!(errors.contains("missing.js"), "{errors}");
    assert!(errors.contains("thrown on purpose"), "{errors}");
    Ok(())
}

#[tokio::test]
async fn demo_page_renders_without_errors() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let collector = Collector::start()?;
    let _browser = Browser::open(&collector.demo_url("demo"))?;

    // The second report comes a second after load: time for anything the page starts to fail.
    let reports = collector
        .wait_until(TIMEOUT, |reports| {
            reports
                .get("demo")
                .is_some_and(|d| has_errors(d) || num(d, "/seq") >= 2.0)
        })
        .await?;
    let demo = &reports["demo"];
    assert_eq!(demo["errors"], json!([]), "page errors");
    assert_eq!(demo["title"], "Ferry dev");
    assert_eq!(demo["headings"], json!(["Publish", "Play"]));
    assert_eq!(
        demo["controls"],
        json!([
            "server",
            "stream",
            "codec",
            "publish",
            "publish-stop",
            "play",
            "play-stop",
            "local",
            "remote"
        ])
    );
    assert_eq!(
        demo["server"],
        collector.url(""),
        "defaults to the page's origin"
    );
    assert_eq!(demo["codecs"], json!(["VP8", "H.264"]));
    Ok(())
}

/// `pid (comm)` of every live process in process group `group`.
fn processes_in_group(group: u32) -> Vec<String> {
    let group = group.to_string();
    processes(|stat, _| stat.split_whitespace().nth(2) == Some(group.as_str()))
}

/// `pid (comm)` of every live process whose command line mentions `dir`.
fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    processes(|_, cmdline| cmdline.contains(&needle))
}

/// `pid (comm)` of every live (not zombie) process for which `keep(stat, cmdline)` holds, where
/// `stat` is what follows the command name in `/proc/PID/stat` (`state ppid pgrp ...`).
fn processes(keep: impl Fn(&str, &str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if rest
            .split_whitespace()
            .next()
            .is_some_and(|state| state == "Z" || state == "X")
        {
            continue;
        }
        let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if keep(rest, &cmdline) {
            found.push(format!("{head})"));
        }
    }
    found
}
