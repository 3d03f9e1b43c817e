//! Kafka over TLS, SASL_SSL/SCRAM-SHA-512 and OAUTHBEARER through OIDC (a token endpoint of
//! the harness) against a real Apache Kafka broker with certificates generated at test time:
//! the relay delivers and checkpoints over each listener (zstd compressed); a wrong password,
//! a refused OIDC client and an untrusted broker certificate stop it with errors that say
//! what is wrong; the relay's whole output never shows the secrets.

mod common;

use std::time::Duration;

use common::*;
use outbox_testkit::certs::TestCertificates;
use outbox_testkit::kafka::{BrokerSecurity, KafkaBroker};
use outbox_testkit::oidc::TokenEndpoint;

const SCRAM_USER: &str = "relay-scram";
const SCRAM_PASSWORD: &str = "scram-Secret-77421";
const SOURCE_PASSWORD: &str = "source-Secret-99017";
const OIDC_CLIENT: &str = "outbox-relay-client";
const OIDC_SECRET: &str = "oidc-Secret-31337";
/// What the relay's final error says when the token endpoint refuses the client.
const OIDC_REFUSAL: &str = "Failed to acquire SASL OAUTHBEARER token";
/// How long a definite refusal (credentials, certificate) may take to stop the relay: one
/// metadata request (`kafka.admin_timeout_ms`, 10 s) and the start around it, where the
/// default 10 attempts with backoff took minutes.
const DEFINITE: Duration = Duration::from_secs(40);

/// Appends `[kafka.security]` (and optionally more lines) to the relay's config.
fn add_security(relay: &Relay, security: &str) {
    let mut text = std::fs::read_to_string(&relay.config_path).expect("read config");
    text.push_str("\n[kafka.security]\n");
    text.push_str(security);
    std::fs::write(&relay.config_path, text).expect("write config");
}

async fn delivers_over(
    db: &outbox_testkit::ScratchMariadb,
    broker: &KafkaBroker,
    listener: &str,
    security: &str,
    properties: &[(&str, &str)],
    prefix: &str,
) -> String {
    let mut setup = RelaySetup::new(db, listener);
    setup.kafka_properties.extend(
        properties
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string())),
    );
    // The relay's own user, with a password in the URL: it must never be printed.
    setup.mysql_url = format!(
        "mysql://secure_relay:{SOURCE_PASSWORD}@127.0.0.1:{}",
        db.port()
    );
    let mut relay = Relay::prepare(&setup);
    relay.edit_config(&[("[kafka]\n", "[kafka]\ncompression = \"zstd\"\n")]);
    add_security(&relay, security);
    let mut writer = ShopWriter::connect(db, prefix).await;
    writer
        .transaction("order", &format!("{prefix}-1"), 2, true, true)
        .await;
    writer
        .transaction("order", &format!("{prefix}-2"), 1, true, true)
        .await;
    let end = writer.master_position().await;
    relay.start();
    // Read back over the PLAINTEXT listener with the harness's own client.
    assert_all_arrive(
        &relay,
        &broker.bootstrap(),
        &[topic_for(db, "order")],
        &writer.committed,
        Duration::from_secs(60),
    )
    .await;
    wait_for_checkpoint(&relay, &end, Duration::from_secs(30)).await;
    let status = relay.terminate(Duration::from_secs(20)).await;
    assert!(status.success(), "{status:?}: {}", relay.log_tail(30));
    relay.log()
}

/// Waits for the relay to stop with an error whose log names `cause` and `listener`, and whose
/// final error line (the one an operator reads first) names `cause` too; returns the log.
/// `within` bounds the wait: a definite refusal must not be retried for minutes.
async fn stops_naming(relay: &mut Relay, cause: &str, listener: &str, within: Duration) -> String {
    let started = std::time::Instant::now();
    let status = relay.wait_for_exit(Duration::from_secs(150)).await;
    let waited = started.elapsed();
    assert!(!status.success());
    let log = relay.log();
    assert!(
        waited < within,
        "the relay took {waited:?} (more than {within:?}) to give up on `{cause}`:\n{}",
        relay.log_tail(30)
    );
    let final_error = final_error_line(&log);
    assert!(
        final_error.contains(cause),
        "the final error names the cause `{cause}`:\n{}",
        relay.log_tail(30)
    );
    assert!(
        log.contains(listener),
        "the error names the listener:\n{}",
        relay.log_tail(30)
    );
    log
}

/// `outbox-relay check` on the relay's config (with `env`): fails, and its Kafka line names
/// `cause`. Returns the output.
fn check_names(relay: &Relay, env: &[(&str, &str)], cause: &str) -> String {
    let output = std::process::Command::new(RELAY_BIN)
        .args(["check", "--config"])
        .arg(&relay.config_path)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .output()
        .expect("run outbox-relay check");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("FAIL kafka") && line.contains(cause)),
        "no FAIL kafka line naming `{cause}`:\n{stdout}\n{stderr}"
    );
    format!("{stdout}\n{stderr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_delivers_over_tls_and_sasl_ssl_and_refuses_bad_credentials_clearly() {
    let certs = TestCertificates::generate().unwrap();
    let broker = KafkaBroker::start_secure(BrokerSecurity {
        keystore_pem: certs.server_key_and_cert.clone(),
        scram_users: vec![(SCRAM_USER.into(), SCRAM_PASSWORD.into())],
    })
    .await
    .expect("a broker with SSL and SASL_SSL listeners starts");
    let ssl = broker.ssl_bootstrap().unwrap();
    let sasl_ssl = broker.sasl_ssl_bootstrap().unwrap();
    let db = start_shop_database().await;
    db.exec(&[
        &format!("CREATE USER secure_relay@'%' IDENTIFIED BY '{SOURCE_PASSWORD}'"),
        "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT ON *.* TO secure_relay@'%'",
    ])
    .await
    .expect("create the relay's user");
    let ca = certs.ca_cert.display().to_string();
    let secrets_dir = tempfile::tempdir().unwrap();
    let password_file = secrets_dir.path().join("sasl-password");
    std::fs::write(&password_file, format!("{SCRAM_PASSWORD}\n")).unwrap();

    // 1. TLS, the broker's certificate checked against the test CA (and its name, 127.0.0.1).
    let mut output = delivers_over(
        &db,
        &broker,
        &ssl,
        &format!("protocol = \"ssl\"\nca_file = \"{ca}\"\n"),
        &[],
        "tls",
    )
    .await;

    // 2. SASL_SSL with SCRAM-SHA-512, the password from a file.
    output += &delivers_over(
        &db,
        &broker,
        &sasl_ssl,
        &format!(
            "protocol = \"sasl_ssl\"\nca_file = \"{ca}\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"{SCRAM_USER}\"\nsasl_password_file = \"{}\"\n",
            password_file.display()
        ),
        &[],
        "scram",
    )
    .await;

    // 2b. OAUTHBEARER through OIDC: the relay fetches a token from the token endpoint with
    // its client credentials (librdkafka built with libcurl), the broker accepts it.
    let endpoint = TokenEndpoint::start(OIDC_CLIENT, OIDC_SECRET, "outbox-relay")
        .await
        .expect("the token endpoint starts");
    let oauth = broker.oauth_bootstrap().unwrap();
    let oidc_properties = [
        ("sasl.oauthbearer.method", "oidc"),
        ("sasl.oauthbearer.client.id", OIDC_CLIENT),
        ("sasl.oauthbearer.client.secret", OIDC_SECRET),
        ("sasl.oauthbearer.token.endpoint.url", endpoint.url()),
    ];
    output += &delivers_over(
        &db,
        &broker,
        &oauth,
        "protocol = \"sasl_plaintext\"\nsasl_mechanism = \"OAUTHBEARER\"\n",
        &oidc_properties,
        "oidc",
    )
    .await;
    assert!(
        endpoint.issued() >= 1,
        "no token was fetched from the endpoint"
    );
    assert_eq!(endpoint.refused(), 0);

    // 2c. The token endpoint refuses the client secret: the relay stops at once naming it.
    let mut setup = RelaySetup::new(&db, &oauth);
    setup
        .kafka_properties
        .extend(oidc_properties.iter().map(|(key, value)| {
            let value = if *key == "sasl.oauthbearer.client.secret" {
                "not-the-oidc-secret-5151"
            } else {
                value
            };
            (key.to_string(), value.to_string())
        }));
    let mut relay = Relay::prepare(&setup);
    add_security(
        &relay,
        "protocol = \"sasl_plaintext\"\nsasl_mechanism = \"OAUTHBEARER\"\n",
    );
    relay.start();
    output += &stops_naming(&mut relay, OIDC_REFUSAL, &oauth, DEFINITE).await;
    assert!(
        endpoint.refused() >= 1,
        "the endpoint saw no refused request"
    );

    // 3. A wrong password: the relay stops at its first attempt (the default 10 would take
    // minutes) and its final error says authentication failed; so does `check`.
    let setup = RelaySetup::new(&db, &sasl_ssl);
    let mut relay = Relay::prepare(&setup);
    add_security(
        &relay,
        &format!(
            "protocol = \"sasl_ssl\"\nca_file = \"{ca}\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"{SCRAM_USER}\"\nsasl_password_env = \"OUTBOX_TEST_SASL\"\n"
        ),
    );
    let wrong_password = [("OUTBOX_TEST_SASL", "not-the-password-4242")];
    relay.start_with_env(&wrong_password);
    output += &stops_naming(&mut relay, "Authentication failed", &sasl_ssl, DEFINITE).await;
    output += &check_names(&relay, &wrong_password, "Authentication failed");

    // 4. A broker certificate from a CA the relay does not trust: the same.
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &ssl));
    add_security(
        &relay,
        &format!(
            "protocol = \"ssl\"\nca_file = \"{}\"\n",
            certs.other_ca_cert.display()
        ),
    );
    relay.start();
    output += &stops_naming(&mut relay, "certificate verify failed", &ssl, DEFINITE).await;
    output += &check_names(&relay, &[], "certificate verify failed");

    // 5. Plaintext against the SASL_SSL listener: retried (a broker restarting looks the same
    // for a moment), and the final error and `check` give librdkafka's reason.
    let mut relay = Relay::prepare(&RelaySetup::new(&db, &sasl_ssl));
    relay.edit_config(&[("[kafka]\n", "[kafka]\nstartup_attempts = 2\n")]);
    relay.start();
    let plaintext_reason = "APIVERSION_QUERY";
    output += &stops_naming(
        &mut relay,
        plaintext_reason,
        &sasl_ssl,
        Duration::from_secs(120),
    )
    .await;
    output += &check_names(&relay, &[], plaintext_reason);

    // No secret in anything the relay printed in any of the runs.
    assert!(
        !output.contains(SOURCE_PASSWORD),
        "the source password leaked into the output"
    );
    assert!(
        !output.contains(SCRAM_PASSWORD),
        "the SASL password leaked into the output"
    );
    assert!(
        !output.contains("not-the-password-4242"),
        "the (wrong) SASL password leaked into the output"
    );
    for secret in [OIDC_SECRET, "not-the-oidc-secret-5151"] {
        assert!(
            !output.contains(secret),
            "the OIDC client secret leaked into the output"
        );
    }
}
