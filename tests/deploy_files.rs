//! The files an operator starts from must not lie: `deploy/outbox-relay.toml` is a valid
//! config whose commented `# key = value` lines are the real defaults, `docker-compose.yml`
//! only mounts files that exist, and the README's test command is the one CI runs.

use outbox_relay::RelayConfig;
use outbox_system_tests::repo_root;

fn read(relative: &str) -> String {
    let path = repo_root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `# key = value` (exactly one space after `#`, a bare key): a documented default. Returns
/// the line uncommented, without a trailing comment.
fn documented_default(line: &str) -> Option<String> {
    let rest = line.strip_prefix("# ")?;
    let (key, value) = rest.split_once(" = ")?;
    if key.is_empty() || !key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
        return None;
    }
    // Values in this file hold no `#`, so the first one starts the trailing comment.
    let value = value.split('#').next().unwrap_or(value).trim();
    Some(format!("{key} = {value}"))
}

#[test]
fn the_example_config_is_valid_and_its_commented_defaults_are_the_real_ones() {
    let text = read("deploy/outbox-relay.toml");
    let as_shipped = RelayConfig::parse(&text).expect("deploy/outbox-relay.toml is valid");
    let mut uncommented = 0;
    let spelled_out: String = text
        .lines()
        .map(|line| match documented_default(line) {
            Some(setting) => {
                uncommented += 1;
                setting
            }
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        uncommented >= 10,
        "only {uncommented} documented defaults found"
    );
    let with_defaults_spelled_out = RelayConfig::parse(&spelled_out)
        .unwrap_or_else(|e| panic!("uncommented defaults do not parse: {e}\n{spelled_out}"));
    // Debug shows every field (the password redacted): equal means every documented default
    // is the value the relay uses when the key is absent.
    let shipped = format!("{as_shipped:#?}");
    let spelled = format!("{with_defaults_spelled_out:#?}");
    let differences: Vec<(&str, &str)> = shipped
        .lines()
        .zip(spelled.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert!(
        differences.is_empty() && shipped.lines().count() == spelled.lines().count(),
        "documented defaults differ from the code's (shipped, documented): {differences:#?}"
    );
}

#[test]
fn docker_compose_mounts_only_files_that_exist() {
    let compose = read("docker-compose.yml");
    let mut checked = 0;
    for line in compose.lines() {
        let line = line.trim().trim_start_matches("- ");
        let source = line
            .strip_prefix("./")
            .map(|rest| rest.split(':').next().unwrap_or(rest))
            .or_else(|| line.strip_prefix("dockerfile: "));
        if let Some(relative) = source {
            assert!(
                repo_root().join(relative).is_file(),
                "docker-compose.yml refers to {relative}, which does not exist"
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "found only {checked} file references");
}

#[test]
fn the_readme_test_command_is_what_ci_runs() {
    let readme = read("README.md");
    let ci = read(".ci/run");
    assert!(
        readme.contains("scripts/test.sh"),
        "README names no test command"
    );
    assert!(
        ci.contains("scripts/test.sh"),
        ".ci/run does not call scripts/test.sh"
    );
    let script = repo_root().join("scripts/test.sh");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&script)
            .expect("scripts/test.sh")
            .permissions(),
    );
    assert!(mode & 0o111 != 0, "scripts/test.sh is not executable");
}

/// docker-compose.yml runs the Kafka version the tests run (tests/jars/kafka/pom.xml).
#[test]
fn docker_compose_runs_the_tested_kafka_version() {
    let pom = read("tests/jars/kafka/pom.xml");
    let tested = pom
        .split("<kafka.version>")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .expect("tests/jars/kafka/pom.xml sets kafka.version");
    let compose = read("docker-compose.yml");
    let image = compose
        .lines()
        .find_map(|line| line.trim().strip_prefix("image: apache/kafka:"))
        .expect("docker-compose.yml runs apache/kafka");
    let image_version = image.split_whitespace().next().unwrap_or(image);
    assert_eq!(
        image_version, tested,
        "docker-compose.yml runs Kafka {image_version}, the tests {tested}"
    );
}

/// The image runs the relay as the non-root user the Helm chart expects (UID 10001) and
/// builds it with the workspace's locked dependencies (the binary CI tests).
#[test]
fn the_dockerfile_runs_as_the_charts_non_root_user() {
    let dockerfile = read("deploy/Dockerfile");
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("USER "))
        .expect("the Dockerfile sets USER");
    assert_eq!(user.trim(), "10001:10001");
    assert!(dockerfile.contains("--uid 10001"));
    assert!(dockerfile.contains("cargo build --release --locked -p outbox-relay"));
    let values = read("deploy/helm/outbox-relay/values.yaml");
    assert!(values.contains("runAsUser: 10001") && values.contains("fsGroup: 10001"));
}
