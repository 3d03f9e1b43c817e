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

/// Held by each test that runs the harness: one harness at a time. Each starts its own
/// broker, MariaDB and (the first) a Kafka Connect worker; two at once on 2 cores starve
/// each other, and one harness's exit (its watchdogs and directory removers firing) then
/// lands in the middle of the other's run.
static ONE_HARNESS_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`ONE_HARNESS_AT_A_TIME`] (a test that failed while holding it leaves it poisoned,
/// which is no reason to fail the next one).
fn one_harness_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_HARNESS_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

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

/// Runs the harness with `args`: its JSON report and its progress lines (stderr); panics
/// with both when it fails.
fn run_harness(args: &[&str]) -> (Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay-bench"))
        .args(args)
        .output()
        .expect("the harness runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the harness failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|error| panic!("--json printed no JSON ({error}):\n{stdout}"));
    (report, stderr)
}

/// [`run_harness`] on the small workload (`TRANSACTIONS` x `ROWS_PER_TRANSACTION`) with
/// the short latency phase and `--json`, plus `args`.
fn run_small_harness(args: &[&str]) -> (Value, String) {
    let (transactions, rows) = (TRANSACTIONS.to_string(), ROWS_PER_TRANSACTION.to_string());
    let (rate, seconds) = (LATENCY_RATE.to_string(), LATENCY_SECONDS.to_string());
    let mut all = vec![
        "--transactions",
        &transactions,
        "--rows-per-transaction",
        &rows,
    ];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--latency-rate",
        &rate,
        "--latency-seconds",
        &seconds,
        "--json",
    ]);
    run_harness(&all)
}

#[test]
fn one_small_run_reports_every_figure() {
    let _harness = one_harness_at_a_time();
    let (report, stderr) = run_small_harness(&["--noise-tables", "1", "--rounds", "1"]);
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

/// `--delivery both`: each round drains at-least-once and exactly-once (the drain's end
/// seen from the Kafka store's committed checkpoint record), and both latency phases run
/// (exactly-once until visible to `read_committed`). Debezium is skipped: the first test
/// covers it.
#[test]
fn both_delivery_modes_in_one_run_report_their_figures_and_ratio() {
    let _harness = one_harness_at_a_time();
    let (report, stderr) =
        run_small_harness(&["--rounds", "2", "--delivery", "both", "--skip-debezium"]);
    check_exactly_once_report(&report);
    // Round 1 runs at-least-once first, round 2 exactly-once first.
    let first_of = |round: &str| {
        let alo = stderr.find(&format!("{round}: outbox-relay (at-least-once)"));
        let eo = stderr.find(&format!("{round}: outbox-relay (exactly-once)"));
        match (alo, eo) {
            (Some(alo), Some(eo)) => alo < eo,
            _ => panic!("{round}: a drain is missing from the progress lines: {stderr}"),
        }
    };
    assert!(first_of("round 1/2"), "{stderr}");
    assert!(!first_of("round 2/2"), "{stderr}");
}

/// The exactly-once parts of a `--delivery both` report: a figure per round covering every
/// event, the within-round ratios, and a latency phase of its own.
fn check_exactly_once_report(report: &Value) {
    let events = TRANSACTIONS * ROWS_PER_TRANSACTION;
    assert_eq!(report["setup"]["delivery"], "both", "{report}");
    let rounds = report["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 2, "{report}");
    for round in rounds {
        for side in ["relay", "relay_exactly_once"] {
            let figure = &round[side];
            assert_eq!(number(figure, "events"), events as f64, "{side}: {figure}");
            for field in [
                "seconds",
                "events_per_second",
                "cpu_seconds",
                "peak_rss_bytes",
            ] {
                assert_positive(figure, field);
            }
        }
    }
    for path in [
        "relay_exactly_once.events_per_second",
        "ratios.exactly_once_to_at_least_once",
        "ratios.exactly_once_cpu_to_at_least_once_cpu",
    ] {
        assert_positive(report, path);
    }
    for side in ["relay_latency", "relay_exactly_once_latency"] {
        let latency = &report[side];
        let samples = number(latency, "samples");
        assert!(
            samples > 0.0 && samples <= (LATENCY_RATE * LATENCY_SECONDS) as f64,
            "{side}: {samples} samples: {latency}"
        );
        for field in ["achieved_rate", "p99_ms", "p999_ms", "max_ms"] {
            assert_positive(latency, field);
        }
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
        // Every drain into the harness's broker costs the broker CPU; the raw pull does
        // not touch it.
        if side != "raw_pull" {
            assert_positive(figure, "broker_cpu_seconds_per_million_events");
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
            "cpu_seconds": 0.5, "cpu_seconds_per_million_events": 1.0, "peak_rss_bytes": 1_000_000,
            "broker_cpu_seconds_per_million_events": 2.0})
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
    // The exactly-once checks refuse a report without the exactly-once drain.
    let mut both = good.clone();
    both["setup"]["delivery"] = serde_json::json!("both");
    both["rounds"] = serde_json::json!([
        {"relay": figure(events), "relay_exactly_once": figure(events)},
        {"relay": figure(events), "relay_exactly_once": figure(events)},
    ]);
    both["relay_exactly_once"] = summary.clone();
    both["ratios"]["exactly_once_to_at_least_once"] = serde_json::json!(0.7);
    both["ratios"]["exactly_once_cpu_to_at_least_once_cpu"] = serde_json::json!(1.2);
    both["relay_exactly_once_latency"] = latency.clone();
    check_exactly_once_report(&both);
    let mut no_exactly_once = both.clone();
    no_exactly_once["rounds"][1]["relay_exactly_once"] = Value::Null;
    let refused = std::panic::catch_unwind(|| check_exactly_once_report(&no_exactly_once)).is_err();
    assert!(
        refused,
        "a report without an exactly-once drain passed the checks"
    );
    for (what, bad) in [
        ("zero CPU", zero_cpu),
        ("short count", short_count),
        ("no latency", no_latency),
    ] {
        let refused = std::panic::catch_unwind(|| check_report(&bad)).is_err();
        assert!(refused, "a report with {what} passed the checks");
    }
}

/// `--source poll`: the polling source drains the same rows after the binlog relay, with
/// the database's load, and has a latency phase of its own. Debezium is skipped: the first
/// test covers it.
#[test]
fn the_polling_source_reports_its_drain_database_load_and_latency() {
    let _harness = one_harness_at_a_time();
    let (report, stderr) =
        run_small_harness(&["--rounds", "1", "--source", "poll", "--skip-debezium"]);
    for path in [
        "relay_poll.events_per_second",
        "relay_poll.cpu_seconds_per_million_events",
        "relay_poll_latency.p50_ms",
        "relay_poll_latency.p99_ms",
        "relay.events_per_second",
    ] {
        assert_positive(&report, path);
    }
    let load = &report["poll_database"];
    assert!(
        load[0].as_f64().is_some_and(|queries| queries > 0.0)
            && load[1].as_f64().is_some_and(|cpu| cpu > 0.0),
        "the database's load: {load}"
    );
    assert!(stderr.contains("polling source"), "{stderr}");
}
