//! The harness on a small log, so it cannot rot: one round of every measurement (raw pull,
//! bare producer, outbox-relay, Debezium, both latency phases) over 2 000 transactions with
//! 2 outbox rows each. No timing is asserted (the harness is the check for that); every
//! figure must be present, finite and positive, and every count must match what was written
//! (the harness itself fails when a side delivered a different number of records).

use std::process::Command;

use serde_json::Value;

const TRANSACTIONS: u64 = 2_000;
const ROWS_PER_TRANSACTION: u64 = 2;
const LATENCY_RATE: u64 = 1_000;
const LATENCY_SECONDS: u64 = 2;

fn number(value: &Value, path: &str) -> f64 {
    let mut at = value;
    for part in path.split('.') {
        at = &at[part];
    }
    at.as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number: {at}"))
}

fn assert_positive(report: &Value, path: &str) {
    let figure = number(report, path);
    assert!(
        figure.is_finite() && figure > 0.0,
        "{path} = {figure}, expected a positive figure"
    );
}

#[test]
fn one_small_run_reports_every_figure() {
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay-bench"))
        .args([
            "--transactions",
            &TRANSACTIONS.to_string(),
            "--rows-per-transaction",
            &ROWS_PER_TRANSACTION.to_string(),
            "--noise-tables",
            "1",
            "--rounds",
            "1",
            "--latency-rate",
            &LATENCY_RATE.to_string(),
            "--latency-seconds",
            &LATENCY_SECONDS.to_string(),
            "--json",
        ])
        .output()
        .expect("the harness runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the harness failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("--json printed no JSON ({error}):\n{stdout}"));
    check_report(&report);
    // The progress lines name every phase.
    for phase in [
        "raw pull",
        "bare producer",
        "outbox-relay",
        "Debezium",
        "latency",
    ] {
        assert!(
            stderr.contains(phase),
            "no `{phase}` progress line: {stderr}"
        );
    }
}

/// Every figure of a `--json` report present and positive, every count the log's.
fn check_report(report: &Value) {
    let events = TRANSACTIONS * ROWS_PER_TRANSACTION;
    assert_eq!(number(report, "setup.events"), events as f64);
    let rounds = report["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 1, "{report}");
    for side in ["raw_pull", "bare_producer", "relay", "debezium"] {
        let figure = &rounds[0][side];
        assert_eq!(
            number(figure, "events"),
            events as f64,
            "{side} covered another count of events: {figure}"
        );
        for field in [
            "seconds",
            "events_per_second",
            "cpu_seconds",
            "cpu_seconds_per_million_events",
            "peak_rss_bytes",
        ] {
            assert_positive(figure, field);
        }
        for field in [
            "events_per_second",
            "cpu_seconds_per_million_events",
            "peak_rss_mib",
        ] {
            assert_positive(report, &format!("{side}.{field}"));
        }
    }
    for ratio in [
        "relay_to_raw_pull",
        "relay_to_bare_producer",
        "relay_to_limit",
        "relay_to_debezium",
        "debezium_cpu_to_relay_cpu",
    ] {
        assert_positive(report, &format!("ratios.{ratio}"));
    }
    for side in ["relay_latency", "debezium_latency"] {
        let latency = &report[side];
        let samples = number(latency, "samples");
        // The first second is warm-up; the rest of the phase's events are samples.
        assert!(
            samples > 0.0 && samples <= (LATENCY_RATE * LATENCY_SECONDS) as f64,
            "{side}: {samples} samples: {latency}"
        );
        assert!(number(latency, "p50_ms") >= 0.0, "{latency}");
        for field in ["achieved_rate", "p99_ms", "p999_ms", "max_ms"] {
            assert_positive(latency, field);
        }
        assert!(
            number(latency, "p50_ms") <= number(latency, "p99_ms")
                && number(latency, "p99_ms") <= number(latency, "p999_ms"),
            "{side}: percentiles out of order: {latency}"
        );
    }
}

/// The checks themselves can fail: a report whose relay CPU figure is 0 (a child whose
/// accounting broke) or whose Debezium covered fewer events is refused.
#[test]
fn a_report_with_a_zero_or_missing_figure_is_refused() {
    let figure = |events: u64| {
        serde_json::json!({"events": events, "seconds": 1.0, "events_per_second": events as f64,
            "cpu_seconds": 0.5, "cpu_seconds_per_million_events": 1.0, "peak_rss_bytes": 1_000_000})
    };
    let summary = serde_json::json!({"events_per_second": 1.0,
        "cpu_seconds_per_million_events": 1.0, "peak_rss_mib": 1.0});
    let latency = serde_json::json!({"samples": 100, "achieved_rate": 900.0, "p50_ms": 5.0,
        "p99_ms": 9.0, "p999_ms": 12.0, "max_ms": 13.0});
    let events = TRANSACTIONS * ROWS_PER_TRANSACTION;
    let good = serde_json::json!({
        "setup": {"events": events},
        "rounds": [{"raw_pull": figure(events), "bare_producer": figure(events),
                    "relay": figure(events), "debezium": figure(events)}],
        "raw_pull": summary, "bare_producer": summary, "relay": summary, "debezium": summary,
        "ratios": {"relay_to_raw_pull": 0.1, "relay_to_bare_producer": 0.5, "relay_to_limit": 0.5,
                   "relay_to_debezium": 4.0, "debezium_cpu_to_relay_cpu": 7.0},
        "relay_latency": latency, "debezium_latency": latency,
    });
    check_report(&good);
    let mut zero_cpu = good.clone();
    zero_cpu["rounds"][0]["relay"]["cpu_seconds"] = serde_json::json!(0.0);
    let mut short_count = good.clone();
    short_count["rounds"][0]["debezium"]["events"] = serde_json::json!(events - 1);
    let mut no_latency = good.clone();
    no_latency["debezium_latency"] = Value::Null;
    for (what, bad) in [
        ("zero CPU", zero_cpu),
        ("short count", short_count),
        ("no latency", no_latency),
    ] {
        let refused = std::panic::catch_unwind(|| check_report(&bad)).is_err();
        assert!(refused, "a report with {what} passed the checks");
    }
}
