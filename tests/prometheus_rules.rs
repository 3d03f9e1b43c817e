//! `deploy/prometheus/alerts.yml` is a valid rule file and every alert fires (and stays
//! quiet) as `deploy/prometheus/alerts_test.yml` says, checked by promtool (Debian package
//! `prometheus`; scripts/test.sh installs it). Without promtool the test is skipped on a
//! developer machine and fails in CI (`CI=true`).

use std::process::Command;

use outbox_system_tests::{in_ci, on_path, repo_root};

/// Runs `promtool ARGS` in deploy/prometheus; `None` when promtool is absent outside CI.
fn promtool(args: &[&str]) -> Option<std::process::Output> {
    if !on_path("promtool") {
        assert!(
            !in_ci(),
            "promtool is not installed, and CI=true: install the Debian package `prometheus` (scripts/test.sh does)"
        );
        eprintln!("skipped: promtool is not installed (apt-get install prometheus)");
        return None;
    }
    Some(
        Command::new("promtool")
            .args(args)
            .current_dir(repo_root().join("deploy/prometheus"))
            .output()
            .expect("run promtool"),
    )
}

fn assert_success(output: &std::process::Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_alert_rules_are_valid() {
    if let Some(output) = promtool(&["check", "rules", "alerts.yml"]) {
        assert_success(&output, "promtool check rules alerts.yml");
    }
}

#[test]
fn every_alert_rule_passes_its_unit_tests() {
    if let Some(output) = promtool(&["test", "rules", "alerts_test.yml"]) {
        assert_success(&output, "promtool test rules alerts_test.yml");
    }
}

/// Every alert in alerts.yml has a test case in alerts_test.yml that expects it to fire:
/// a rule without one could never be shown to work.
#[test]
fn every_alert_has_a_firing_test_case() {
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/alerts.yml")).unwrap();
    let tests =
        std::fs::read_to_string(repo_root().join("deploy/prometheus/alerts_test.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 9, "{alerts:?}");
    for alert in alerts {
        let tested = tests
            .split("alertname: ")
            .skip(1)
            .any(|case| case.starts_with(alert) && case.contains("exp_labels"));
        assert!(
            tested,
            "alert {alert} has no test case in alerts_test.yml where it fires"
        );
    }
}
