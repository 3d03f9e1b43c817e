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
    let events = TRANSACTIONS * ROWS_PER_TRANSACTION;
    assert_eq!(number(&report, "setup.events"), events as f64);
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
            assert_positive(&report, &format!("{side}.{field}"));
        }
    }
    for ratio in [
        "relay_to_raw_pull",
        "relay_to_bare_producer",
        "relay_to_limit",
        "relay_to_debezium",
        "debezium_cpu_to_relay_cpu",
    ] {
        assert_positive(&report, &format!("ratios.{ratio}"));
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
    // The table is printed from the same figures.
    assert!(stderr.contains("outbox-relay"), "progress lines: {stderr}");
}
