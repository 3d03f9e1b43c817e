//! `deploy/grafana/outbox-relay.json` only queries metrics the relay exports: every metric
//! name in a panel's query is a family in the relay's `/metrics` text (a histogram's
//! `_bucket`/`_sum`/`_count` series count as its family).

use std::collections::BTreeSet;

use outbox_system_tests::repo_root;

/// Families named by `# TYPE` lines of a scrape.
fn exported_families(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Identifiers in a PromQL expression that look like metric names of ours or the process
/// collector's (functions, labels and keywords never start like that).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut current = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            current.push(c);
        } else {
            if current.starts_with("outbox_") || current.starts_with("process_") {
                names.push(current.clone());
            }
            current.clear();
        }
    }
    names
}

fn family_of(series: &str, families: &BTreeSet<String>) -> bool {
    families.contains(series)
        || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            series
                .strip_suffix(suffix)
                .is_some_and(|family| families.contains(family))
        })
}

#[test]
fn every_dashboard_query_names_an_exported_metric() {
    let metrics = outbox_relay::Metrics::new();
    // Labelled families show in a scrape once a series exists: a poll-mode relay's first
    // claim, mark, expiry and backlog measurement.
    emit_one_of_each_poll_event();
    let families = exported_families(&metrics.render());
    assert!(families.len() > 20, "{families:?}");
    let path = repo_root().join("deploy/grafana/outbox-relay.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let mut checked = 0;
    for panel in panels.iter().filter(|panel| panel["type"] != "row") {
        let title = panel["title"].as_str().unwrap_or("?");
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        assert!(!targets.is_empty(), "panel `{title}` has no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or("");
            let names = metric_names(expr);
            assert!(
                !names.is_empty(),
                "panel `{title}`: `{expr}` names no metric"
            );
            for name in names {
                assert!(
                    family_of(&name, &families),
                    "panel `{title}` queries `{name}`, which the relay does not export; exported: {families:?}"
                );
                checked += 1;
            }
        }
    }
    // The panels the issue asks for are there.
    let titles: Vec<&str> = panels.iter().filter_map(|p| p["title"].as_str()).collect();
    for wanted in [
        "Throughput",
        "Lag",
        "Purge horizon",
        "latency",
        "In flight",
        "Retries",
        "Dead letters",
        "Checkpoint position",
        "Poll backlog",
    ] {
        assert!(
            titles.iter().any(|t| t.contains(wanted)),
            "no `{wanted}` panel in {titles:?}"
        );
    }
    assert!(checked >= 20, "only {checked} metric names checked");
}

/// What a poll-mode relay emits in its first seconds.
fn emit_one_of_each_poll_event() {
    use outbox_poll::internal_events::{
        BacklogMeasured, ClaimMarked, InternalEvent, LeasesExpired, RowsClaimed,
    };
    let table = "shop.outbox";
    RowsClaimed { table, rows: 1 }.emit();
    let settled = outbox_poll::SettledClaim {
        number: 0,
        table: 0,
        claim: outbox_poll::Claim {
            token: "t".into(),
            rows: Vec::new(),
        },
        dead: Vec::new(),
        failed: Vec::new(),
    };
    ClaimMarked {
        table,
        settled: &settled,
        outcome: &outbox_poll::SettleOutcome {
            marked: 1,
            dead: 1,
            retrying: 1,
            fenced: 1,
        },
    }
    .emit();
    LeasesExpired { table, rows: 1 }.emit();
    BacklogMeasured {
        table,
        status: &outbox_poll::TableStatus::default(),
    }
    .emit();
}
