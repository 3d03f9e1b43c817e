//! `deploy/helm/outbox-relay` renders, without a cluster, for its default values and each
//! documented value set in its `ci/` folder: `helm lint --strict` passes, `helm template`
//! renders, every rendered config passes `outbox-relay check --config-only`, the workload
//! has the shape the store kind needs, and value sets that cannot work are refused with a
//! message naming the fix. Helm is the Go module `helm.sh/helm/v4` (scripts/test.sh runs
//! `go install helm.sh/helm/v4/cmd/helm@v4.3.2`). Without helm the test is skipped on a
//! developer machine and fails in CI (`CI=true`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use outbox_system_tests::{in_ci, on_path, repo_root};

fn chart() -> PathBuf {
    repo_root().join("deploy/helm/outbox-relay")
}

/// helm on the PATH or in Go's install directory; `None` (skip) outside CI when absent.
fn helm() -> Option<PathBuf> {
    if on_path("helm") {
        return Some(PathBuf::from("helm"));
    }
    let go_bin = std::env::var_os("GOBIN")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join("go/bin")));
    if let Some(helm) = go_bin.map(|dir| dir.join("helm")).filter(|p| p.is_file()) {
        return Some(helm);
    }
    assert!(
        !in_ci(),
        "helm is not installed, and CI=true: `go install helm.sh/helm/v4/cmd/helm@v4.3.2` (scripts/test.sh does)"
    );
    eprintln!("skipped: helm is not installed (go install helm.sh/helm/v4/cmd/helm@v4.3.2)");
    None
}

fn run(helm: &Path, args: &[&str]) -> Output {
    Command::new(helm)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run helm {args:?}: {e}"))
}

fn text(output: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The value sets: the defaults (`None`) and every `ci/*.yaml`.
fn value_sets() -> Vec<Option<PathBuf>> {
    let mut sets: Vec<Option<PathBuf>> = std::fs::read_dir(chart().join("ci"))
        .expect("deploy/helm/outbox-relay/ci")
        .map(|entry| Some(entry.expect("ci entry").path()))
        .filter(|path| {
            path.as_ref()
                .is_some_and(|p| p.extension().is_some_and(|e| e == "yaml"))
        })
        .collect();
    sets.sort();
    assert!(
        sets.len() >= 3,
        "the chart documents at least three value sets in ci/"
    );
    sets.insert(0, None);
    sets
}

fn values_args(values: &Option<PathBuf>) -> Vec<String> {
    match values {
        Some(path) => vec!["--values".into(), path.display().to_string()],
        None => Vec::new(),
    }
}

/// `helm template` with the value set and extra `--set`s; the rendered manifests or helm's error.
fn template(helm: &Path, values: &Option<PathBuf>, sets: &[&str]) -> Result<String, String> {
    let chart = chart().display().to_string();
    let mut args: Vec<String> = vec!["template".into(), "relay".into(), chart];
    args.extend(values_args(values));
    for set in sets {
        args.push("--set".into());
        args.push((*set).into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = run(helm, &args);
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(text(&output))
    }
}

/// The manifests of a `helm template` output, one `---` document each.
fn documents(rendered: &str) -> Vec<&str> {
    rendered
        .split("\n---")
        .map(str::trim)
        .filter(|doc| doc.contains("kind:"))
        .collect()
}

fn kind_of(document: &str) -> &str {
    document
        .lines()
        .find_map(|line| line.strip_prefix("kind: "))
        .unwrap_or("")
        .trim()
}

/// The block scalar under `key: |` in a document, unindented.
fn block_scalar(document: &str, key: &str) -> Option<String> {
    let mut lines = document.lines();
    let header = lines
        .by_ref()
        .find(|line| line.trim() == format!("{key}: |"))?;
    let indent = header.len() - header.trim_start().len() + 2;
    let block: Vec<&str> = lines
        .take_while(|line| line.trim().is_empty() || line.len() - line.trim_start().len() >= indent)
        .map(|line| line.get(indent..).unwrap_or(""))
        .collect();
    Some(block.join("\n"))
}

/// A scalar `key: value` of a document (the first one).
fn scalar<'a>(document: &'a str, key: &str) -> Option<&'a str> {
    document
        .lines()
        .find_map(|line| line.trim().strip_prefix(&format!("{key}: ")))
        .map(str::trim)
}

/// The rendered config, with the paths under the chart's Secret mount moved into `dir`
/// where placeholder files stand for the Secret's keys (as the pod would see them).
fn config_as_the_pod_sees_it(config: &str, secret_mount: Option<&str>, dir: &Path) -> String {
    let Some(mount) = secret_mount else {
        return config.to_owned();
    };
    let local = dir.join("secrets");
    std::fs::create_dir_all(&local).expect("secrets dir");
    for line in config.lines() {
        if let Some(start) = line.find(mount) {
            let path = &line[start..];
            let path = path.split('"').next().unwrap_or(path);
            let name = path.trim_start_matches(mount).trim_start_matches('/');
            std::fs::write(local.join(name), "placeholder").expect("placeholder file");
        }
    }
    config.replace(mount, &local.display().to_string())
}

#[test]
fn the_chart_passes_helm_lint_for_every_documented_value_set() {
    let Some(helm) = helm() else { return };
    for values in value_sets() {
        let chart = chart().display().to_string();
        let mut args = vec!["lint".to_string(), "--strict".into(), chart];
        args.extend(values_args(&values));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = run(&helm, &args);
        assert!(
            output.status.success(),
            "helm lint {values:?} failed:\n{}",
            text(&output)
        );
    }
}

#[test]
fn every_rendered_config_passes_check_config_only_and_the_workload_fits_the_store() {
    let Some(helm) = helm() else { return };
    let dir = std::env::temp_dir().join(format!("outbox-helm-{}", std::process::id()));
    for values in value_sets() {
        let rendered = template(&helm, &values, &[]).unwrap_or_else(|e| panic!("{values:?}: {e}"));
        let docs = documents(&rendered);
        let config_map = docs
            .iter()
            .find(|doc| kind_of(doc) == "ConfigMap" && doc.contains("outbox-relay.toml: |"))
            .unwrap_or_else(|| panic!("{values:?}: no ConfigMap with outbox-relay.toml"));
        let config = block_scalar(config_map, "outbox-relay.toml").expect("the config block");
        let workload = docs
            .iter()
            .find(|doc| matches!(kind_of(doc), "Deployment" | "StatefulSet"))
            .unwrap_or_else(|| panic!("{values:?}: no workload"));
        let secret_mount = workload
            .lines()
            .skip_while(|line| line.trim() != "- name: secret")
            .find_map(|line| line.trim().strip_prefix("mountPath: "));

        let case_dir = dir.join(format!("set-{}", docs.len()));
        std::fs::create_dir_all(&case_dir).expect("temp dir");
        let path = case_dir.join("outbox-relay.toml");
        std::fs::write(
            &path,
            config_as_the_pod_sees_it(&config, secret_mount, &case_dir),
        )
        .expect("write the rendered config");
        let mut out = Vec::new();
        let status =
            outbox_relay::commands::check_config_only(&path, &mut out).unwrap_or_else(|e| {
                panic!("{values:?}: the rendered config is refused: {e:#}\n{config}")
            });
        assert_eq!(status, 0, "{values:?}");
        let parsed = outbox_relay::RelayConfig::load(&path).expect("loads");

        // The shape the store kind needs: a volume only for the file store (poll mode has
        // no checkpoint).
        let poll_mode = parsed.source.mode == outbox_relay::poll_config::SourceMode::Poll;
        let file_store = parsed.checkpoint.store == "file" && !poll_mode;
        assert_eq!(
            kind_of(workload),
            if file_store {
                "StatefulSet"
            } else {
                "Deployment"
            },
            "{values:?}"
        );
        assert_eq!(
            workload.contains("volumeClaimTemplates:"),
            file_store,
            "{values:?}"
        );
        let replicas: u32 = scalar(workload, "replicas")
            .and_then(|r| r.parse().ok())
            .expect("replicas");
        // replicas > 1 only under [ha] (poll mode: relays claim in parallel).
        assert!(
            replicas == 1 || parsed.ha.enabled || poll_mode,
            "{values:?}: {replicas} replicas without [ha]"
        );
        // The grace period outlasts the relay's shutdown.
        let grace: u64 = scalar(workload, "terminationGracePeriodSeconds")
            .and_then(|g| g.parse().ok())
            .expect("terminationGracePeriodSeconds");
        assert!(
            grace * 1000 > parsed.pipeline.shutdown_timeout_ms,
            "{values:?}: grace {grace} s, shutdown {} ms",
            parsed.pipeline.shutdown_timeout_ms
        );
        // Probes and the Service on the relay's metrics port.
        let listen = parsed
            .metrics
            .listen
            .as_deref()
            .expect("metrics.listen is set");
        let port = listen.rsplit(':').next().expect("port").to_owned();
        assert!(workload.contains("path: /healthz") && workload.contains("path: /readyz"));
        assert_eq!(
            scalar(workload, "containerPort"),
            Some(port.as_str()),
            "{values:?}"
        );
        let service = docs
            .iter()
            .find(|doc| kind_of(doc) == "Service")
            .expect("a Service");
        assert_eq!(scalar(service, "port"), Some(port.as_str()), "{values:?}");
        assert!(docs.iter().any(|doc| kind_of(doc) == "PodDisruptionBudget"));
        // Runs as non-root.
        assert!(workload.contains("runAsNonRoot: true"), "{values:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn value_sets_that_cannot_work_are_refused_naming_the_fix() {
    let Some(helm) = helm() else { return };
    let defaults = None;
    let cases: [(&[&str], &str); 5] = [
        (
            &["config.metrics.listen="],
            "config.metrics.listen is needed",
        ),
        (&["replicas=2"], "needs config.ha.enabled = true"),
        (
            &["replicas=3", "config.ha.enabled=true"],
            "needs a shared checkpoint store",
        ),
        (
            &["terminationGracePeriodSeconds=30"],
            "is not longer than config.pipeline.shutdown_timeout_ms",
        ),
        (&["secret.env.X=y"], "need a Secret"),
    ];
    for (sets, expected) in cases {
        match template(&helm, &defaults, sets) {
            Ok(_) => panic!("{sets:?} rendered; it must be refused"),
            Err(message) => assert!(message.contains(expected), "{sets:?}: {message}"),
        }
    }
    // The HA value set is accepted with 3 replicas (the refusal above is not a blanket one).
    let ha = Some(chart().join("ci/kafka-ha-values.yaml"));
    let rendered = template(&helm, &ha, &[]).expect("the ha value set renders");
    assert!(rendered.contains("replicas: 3"));
}

#[test]
fn the_prometheus_rules_and_the_dashboard_are_those_of_deploy() {
    for (copy, original) in [
        ("files/alerts.yml", "deploy/prometheus/alerts.yml"),
        (
            "files/outbox-relay.json",
            "deploy/grafana/outbox-relay.json",
        ),
    ] {
        let copy_text = std::fs::read_to_string(chart().join(copy)).expect(copy);
        let original_text = std::fs::read_to_string(repo_root().join(original)).expect(original);
        assert!(
            copy_text == original_text,
            "deploy/helm/outbox-relay/{copy} differs from {original}: cp {original} deploy/helm/outbox-relay/{copy}"
        );
    }
    let Some(helm) = helm() else { return };
    let monitored = Some(chart().join("ci/file-store-values.yaml"));
    let rendered = template(&helm, &monitored, &[]).expect("renders");
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/alerts.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .collect();
    assert!(!alerts.is_empty());
    let rule_doc = documents(&rendered)
        .into_iter()
        .find(|doc| kind_of(doc) == "PrometheusRule")
        .expect("a PrometheusRule");
    for alert in alerts {
        assert!(
            rule_doc.contains(&format!("alert: {alert}")),
            "{alert} missing"
        );
    }
    assert!(documents(&rendered)
        .iter()
        .any(|doc| kind_of(doc) == "ServiceMonitor"));
    assert!(rendered.contains("grafana_dashboard: \"1\""));
}

/// Every rendered manifest decodes strictly (unknown or duplicate fields, wrong types and
/// unknown kinds fail) into the Kubernetes API types or prometheus-operator's, by the Go
/// program in deploy/helm/validate (k8s.io/api v0.37): the schemas, offline. It cannot
/// check what only an API server does (required fields, value ranges).
#[test]
fn every_rendered_manifest_decodes_strictly_into_the_kubernetes_types() {
    let Some(helm) = helm() else { return };
    if !on_path("go") {
        assert!(!in_ci(), "go is not installed, and CI=true");
        eprintln!("skipped: go is not installed");
        return;
    }
    for values in value_sets() {
        let rendered = template(&helm, &values, &[]).unwrap_or_else(|e| panic!("{values:?}: {e}"));
        let output = go_validate(&rendered);
        assert!(
            output.status.success(),
            "{values:?}: the manifests do not fit the Kubernetes types:\n{}",
            text(&output)
        );
        let report = String::from_utf8_lossy(&output.stdout);
        assert!(report.contains("0 invalid"), "{report}");
    }
    // The validator can fail: a misspelt field is caught.
    let rendered = template(&helm, &None, &[]).expect("renders");
    let broken = rendered.replacen(
        "terminationGracePeriodSeconds:",
        "terminationGracePeriod:",
        1,
    );
    let output = go_validate(&broken);
    assert!(
        !output.status.success(),
        "a misspelt field passed:\n{}",
        text(&output)
    );
    assert!(
        text(&output).contains("terminationGracePeriod"),
        "{}",
        text(&output)
    );
}

/// `go run .` in deploy/helm/validate with the manifests on stdin.
fn go_validate(manifests: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new("go")
        .args(["run", "."])
        .current_dir(repo_root().join("deploy/helm/validate"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run go");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(manifests.as_bytes())
        .expect("write the manifests");
    child.wait_with_output().expect("go run")
}
