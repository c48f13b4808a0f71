//! The deployment files (`deploy/`) name only metrics Ferry exports: every metric in every PromQL
//! expression of the Grafana dashboard and of the Prometheus alert rules must be exported by a
//! running process — `ferry dev`'s scheduler and both its nodes, with a session published so the
//! per-session series exist, and a `ferry edge` with its metrics endpoint. A name that no process
//! exports fails the test with the panel (or alert) and the metric.
//!
//! A series counts as exported when a sample of it is on a `/metrics` page or when a `# TYPE`
//! line declares it: a counter or gauge `X` declares `X`, a summary `X` declares `X`, `X_sum` and
//! `X_count`, a histogram `X` declares `X_bucket`, `X_sum` and `X_count`. Counters with labels
//! (`ferry_migrations_total{role,outcome}`) have no sample until something happens, but their
//! `# TYPE` line is always there.

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail, ensure};
use ferry_tests::cluster::{start_dev, start_edge, wait_registered};
use ferry_tests::http;
use serde_json::Value;

const DASHBOARD: &str = include_str!("../../../deploy/grafana/ferry-dashboard.json");
const ALERTS: &str = include_str!("../../../deploy/prometheus/alerts.yml");
const OFFER: &str = include_str!("../../../rtc/src/sdp/testdata/chrome_offer.sdp");

/// Series Prometheus adds to every target itself.
const SYNTHETIC: &[&str] = &["up"];

#[test]
fn dashboard_and_alerts_use_exported_metrics() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let dev = start_dev(true)?;
    let (_edge, _, edge_http) =
        start_edge(dev.state.join("cluster").to_str().context("state dir")?)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(wait_registered(&dev.gateway, 2))?;

    // One publisher through the gateway (307 to the placed node): sessions, placements and the
    // per-stream series come to life.
    let sdp = ("Content-Type", "application/sdp");
    let bearer = format!("Bearer {}", dev.token);
    let r = http(
        &format!("{}/whip/deploy-check", dev.gateway),
        "POST",
        &[sdp, ("Authorization", &bearer)],
        OFFER.as_bytes(),
    )?;
    ensure!(r.status == 307, "gateway WHIP: {} {}", r.status, r.body);
    let location = r.header("location").context("307 without Location")?;
    let r = http(location, "POST", &[sdp], OFFER.as_bytes())?;
    ensure!(r.status == 201, "node WHIP: {} {}", r.status, r.body);

    let mut exported = BTreeSet::new();
    let mut created = 0.0;
    for (who, base) in [
        ("gateway", &dev.gateway),
        ("node-a", &dev.node_a),
        ("node-b", &dev.node_b),
        ("edge", &edge_http),
    ] {
        let r = http(&format!("{base}/metrics"), "GET", &[], b"")?;
        ensure!(r.status == 200, "{who} /metrics: {} {}", r.status, r.body);
        created += sample(&r.body, "ferry_node_sessions_created_total").unwrap_or(0.0);
        let names = exported_series(&r.body);
        ensure!(!names.is_empty(), "{who} /metrics exports nothing");
        exported.extend(names);
    }
    ensure!(created >= 1.0, "no node counted the published session");

    let mut uses = dashboard_uses(DASHBOARD)?;
    let alerts = alert_uses(ALERTS)?;
    ensure!(!alerts.is_empty(), "no alert rule found in alerts.yml");
    uses.extend(alerts);
    let missing = unexported(&uses, &exported);
    if !missing.is_empty() {
        bail!(
            "deploy/ uses metrics that no Ferry process exports:\n  {}",
            missing.join("\n  ")
        );
    }
    eprintln!(
        "{} expressions checked against {} exported series",
        uses.len(),
        exported.len()
    );
    Ok(())
}

/// One PromQL expression of the deployment files and where it is.
#[derive(Debug, Clone)]
struct Use {
    place: String,
    expr: String,
}

/// `place: metric` for every metric in `uses` that is neither exported, pending nor synthetic.
fn unexported(uses: &[Use], exported: &BTreeSet<String>) -> Vec<String> {
    let mut missing = Vec::new();
    for u in uses {
        for name in metric_names(&u.expr) {
            let known = exported.contains(&name) || SYNTHETIC.contains(&name.as_str());
            if !known {
                missing.push(format!("{}: {name}", u.place));
            }
        }
    }
    missing
}

/// Every series name a Prometheus text page exports or declares (see the module docs).
fn exported_series(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "summary" => &["", "_sum", "_count"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            for s in suffixes {
                names.insert(format!("{name}{s}"));
            }
        } else if !line.starts_with('#') {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            if end > 0 {
                names.insert(line[..end].to_owned());
            }
        }
    }
    names
}

/// The value of an unlabelled sample.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Every panel query of a Grafana dashboard, rows' nested panels included.
fn dashboard_uses(json: &str) -> Result<Vec<Use>> {
    let dash: Value = serde_json::from_str(json).context("ferry-dashboard.json")?;
    if let Some(vars) = dash["templating"]["list"].as_array() {
        for v in vars {
            // A query variable names metrics too; this test does not read them yet.
            ensure!(
                v["type"] != "query",
                "template variable {} is a query: teach tests/tests/e2e/deploy.rs to check it",
                v["name"]
            );
        }
    }
    let mut uses = Vec::new();
    let mut ids = BTreeSet::new();
    let mut stack: Vec<&Value> = dash["panels"]
        .as_array()
        .context("dashboard without panels")?
        .iter()
        .collect();
    while let Some(p) = stack.pop() {
        ensure!(
            ids.insert(p["id"].to_string()),
            "two panels with id {}",
            p["id"]
        );
        if let Some(nested) = p["panels"].as_array() {
            stack.extend(nested);
        }
        if p["type"] == "row" {
            continue;
        }
        let place = format!("panel {} {}", p["id"], p["title"]);
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        ensure!(!targets.is_empty(), "{place} has no query");
        for t in targets {
            let expr = t["expr"].as_str().filter(|e| !e.trim().is_empty());
            let expr = expr.with_context(|| format!("{place}: target without expr"))?;
            uses.push(Use {
                place: place.clone(),
                expr: expr.to_owned(),
            });
        }
    }
    ensure!(!uses.is_empty(), "dashboard without queries");
    Ok(uses)
}

/// The `expr` of every rule in a Prometheus rule file. A line reader, not a YAML parser: it knows
/// the shapes alerts.yml uses (`- alert: NAME` / `- record: NAME`, then `expr:` with a plain
/// scalar or a `|` / `>` block); promtool checks the YAML itself.
fn alert_uses(yaml: &str) -> Result<Vec<Use>> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut uses = Vec::new();
    let mut rule = None;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let item = trimmed.strip_prefix("- ").unwrap_or(trimmed);
        if let Some(name) = item
            .strip_prefix("alert:")
            .or_else(|| item.strip_prefix("record:"))
        {
            rule = Some(name.trim().to_owned());
            continue;
        }
        let Some(value) = item.strip_prefix("expr:") else {
            continue;
        };
        let place = format!("alert {}", rule.as_deref().unwrap_or("?"));
        let value = value.trim();
        let expr = if value.starts_with('|') || value.starts_with('>') {
            let indent = line.len() - trimmed.len();
            lines[i + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            value.trim_matches(['"', '\'']).to_owned()
        };
        ensure!(!expr.trim().is_empty(), "{place}: empty expr");
        uses.push(Use { place, expr });
    }
    Ok(uses)
}

/// PromQL words that are never metric names: aggregations, keywords, literals.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
];

/// Words followed by a list of label names in parentheses.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression selects: every identifier that is not a function call,
/// an aggregation, a keyword or a number, outside label matchers (`{…}`), ranges (`[…]`),
/// label lists (`by (…)`) and strings. Grafana variables (`$__rate_interval`) are skipped.
fn metric_names(expr: &str) -> Vec<String> {
    let s: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < s.len() {
        let c = s[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&s, i),
            '{' => i = skip_until(&s, i, '}'),
            '[' => i = skip_until(&s, i, ']'),
            '#' => {
                while i < s.len() && s[i] != '\n' {
                    i += 1;
                }
            }
            '$' => {
                i += 1;
                if s.get(i) == Some(&'{') {
                    i = skip_until(&s, i, '}');
                } else {
                    while i < s.len() && ident(s[i]) {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit()
                || (c == '.' && s.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                while i < s.len() && (ident(s[i]) || s[i] == '.') {
                    i += 1;
                }
            }
            c if ident(c) => {
                let start = i;
                while i < s.len() && ident(s[i]) {
                    i += 1;
                }
                let word: String = s[start..i].iter().collect();
                let mut next = i;
                while next < s.len() && s[next].is_whitespace() {
                    next += 1;
                }
                let lower = word.to_ascii_lowercase();
                if LABEL_LISTS.contains(&lower.as_str()) {
                    if s.get(next) == Some(&'(') {
                        i = skip_until(&s, next, ')');
                    }
                } else if KEYWORDS.contains(&lower.as_str()) || s.get(next) == Some(&'(') {
                    // An aggregation, a keyword or a function call.
                } else {
                    names.push(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Index after the string literal starting at `i`.
fn skip_string(s: &[char], i: usize) -> usize {
    let quote = s[i];
    let mut j = i + 1;
    while j < s.len() && s[j] != quote {
        if s[j] == '\\' && quote != '`' {
            j += 1;
        }
        j += 1;
    }
    j + 1
}

/// Index after the `close` that ends the group opened at `i`, skipping strings inside.
fn skip_until(s: &[char], i: usize, close: char) -> usize {
    let mut j = i + 1;
    while j < s.len() && s[j] != close {
        if matches!(s[j], '"' | '\'' | '`') {
            j = skip_string(s, j);
        } else {
            j += 1;
        }
    }
    j + 1
}

#[test]
fn metric_names_come_out_of_promql() {
    let _area = ferry_tests::area(module_path!());
    let cases: &[(&str, &[&str])] = &[
        (
            "histogram_quantile(0.99, sum(rate(ferry_migration_blackout_seconds_bucket[5m])) by (le))",
            &["ferry_migration_blackout_seconds_bucket"],
        ),
        (
            "max without (instance) (ferry_scheduler_placement_skew) > 1.15\nand on ()\nmax(ferry_scheduler_sessions) >= 100",
            &["ferry_scheduler_placement_skew", "ferry_scheduler_sessions"],
        ),
        (
            r#"sum(increase(a_total{role="source",outcome=~"x}|y"}[10m])) / ignoring(kind) group_left b:rule"#,
            &["a_total", "b:rule"],
        ),
        (
            "8 * sum by (instance) (rate(ferry_node_rx_bytes_total[$__rate_interval])) offset 5m",
            &["ferry_node_rx_bytes_total"],
        ),
        (r#"up{job=~"ferry-.*"} == 0"#, &["up"]),
        ("sum(rate(x[${__range}])) / .5e3 + Inf", &["x"]),
    ];
    for (expr, want) in cases {
        assert_eq!(metric_names(expr), *want, "{expr}");
    }
}

#[test]
fn a_metric_nobody_exports_is_named_with_its_panel() -> Result<()> {
    let _area = ferry_tests::area(module_path!());
    let page = "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n\
                # TYPE lat_seconds summary\nlat_seconds_sum 0\nlat_seconds_count 0\n\
                # TYPE size_bytes histogram\n# TYPE quiet_total counter\n";
    let exported = exported_series(page);
    let dashboard = r#"{"panels": [
        {"id": 1, "type": "row", "title": "R", "panels": [
            {"id": 2, "type": "timeseries", "title": "Nested", "targets": [{"expr": "rate(a_totl[5m])"}]}
        ]},
        {"id": 3, "type": "timeseries", "title": "Fine", "targets": [
            {"expr": "rate(a_total[5m]) + rate(quiet_total[5m]) + lat_seconds_sum / lat_seconds_count"},
            {"expr": "histogram_quantile(0.5, sum by (le) (rate(size_bytes_bucket[5m])))"}
        ]},
        {"id": 4, "type": "stat", "title": "Summary is no histogram", "targets": [
            {"expr": "histogram_quantile(0.5, sum by (le) (rate(lat_seconds_bucket[5m])))"}
        ]}
    ]}"#;
    let alerts = "groups:\n  - name: g\n    rules:\n      - alert: Plain\n        expr: size_bytes_count > 0\n      \
                  - alert: Block\n        expr: |\n          sum(a_total)\n            > b_total\n        for: 1m\n";
    let mut uses = dashboard_uses(dashboard)?;
    uses.extend(alert_uses(alerts)?);
    let mut missing = unexported(&uses, &exported);
    missing.sort();
    assert_eq!(
        missing,
        [
            "alert Block: b_total",
            "panel 2 \"Nested\": a_totl",
            "panel 4 \"Summary is no histogram\": lat_seconds_bucket",
        ]
    );
    Ok(())
}
