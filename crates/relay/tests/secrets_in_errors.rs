//! Issue 31: no secret from the config reaches an operator's screen or log. Each case is a
//! config that `check`, `run` and `status` refuse (in both log formats); the secret must be in
//! none of their output, and the refusal must still name the key that is wrong.
//!
//! These cases fail before any connection is made, so no server is needed.

mod common;

use common::run_relay_command;

/// The password every case hides.
const SECRET: &str = "S3cr3t";

/// A valid config with `url` as `source.url`, the password `S3cr3t` in it.
fn config_with_url(url: &str) -> String {
    format!(
        r#"[source]
url = "{url}"
server_id = 4242

[[outbox]]
table = "shop.outbox"

[kafka]
brokers = "127.0.0.1:1"

[checkpoint]
path = "/nonexistent/outbox-relay-checkpoint.json"
"#
    )
}

/// [`for_each_command_on`] `config_text`: each command fails, names `names`, and never shows
/// [`SECRET`].
fn assert_refused_without_the_secret(config_text: &str, names: &str) {
    for_each_command_on(config_text, |args, code, output| {
        assert_ne!(code, 0, "{args:?} must refuse the config:\n{output}");
        assert!(
            !output.contains(SECRET),
            "{args:?} shows the secret:\n{output}"
        );
        assert!(
            output.contains(names),
            "{args:?} does not name `{names}`:\n{output}"
        );
    });
}

/// Runs `check`, `run`, `status` and `status --json` on `config_text`, each in both log
/// formats, and hands `verdict` the arguments, the exit code and stdout + stderr.
fn for_each_command_on(config_text: &str, mut verdict: impl FnMut(&[&str], i32, &str)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("relay.toml");
    std::fs::write(&path, config_text).expect("write the config");
    let path = path.to_str().expect("utf-8 temp path");
    let commands: [&[&str]; 4] = [
        &["check", "--config", path],
        &["run", "--config", path],
        &["status", "--config", path],
        &["status", "--config", path, "--json"],
    ];
    for command in commands {
        for format in ["human", "json"] {
            let mut args = command.to_vec();
            args.extend(["--log-format", format]);
            let (code, stdout, stderr) = run_relay_command(&args);
            verdict(&args, code, &format!("{stdout}\n{stderr}"));
        }
    }
}

/// Item 1: a `source.url` without `//` (or with a password that has the URL's delimiters in
/// it) is refused without its password.
#[test]
fn a_malformed_source_url_is_refused_without_its_password() {
    for url in [
        "relay:S3cr3t@127.0.0.1:3306",
        "mysql:/relay:S3cr3t@127.0.0.1:3306",
        "mysql//relay:S3cr3t@127.0.0.1:3306",
        "mysq://relay:S3/cr3t@127.0.0.1:3306",
    ] {
        assert_refused_without_the_secret(&config_with_url(url), "source.url");
    }
}

/// Item 2: a TOML syntax error on a line holding a secret (an unclosed quote) is reported with
/// its line and column, the secret masked in the parser's excerpt of the line.
#[test]
fn a_toml_error_on_a_secret_line_does_not_quote_the_secret() {
    let valid = config_with_url("mysql://relay@127.0.0.1:3306");
    for (broken_line, in_section) in [
        ("url = \"mysql://relay:S3cr3t@127.0.0.1:3306", "[source]\n"),
        ("url = 'relay:S3cr3t@127.0.0.1:3306", "[source]\n"),
        (
            "security = { protocol = \"sasl_ssl\", sasl_password = \"S3cr3t }",
            "[kafka]\n",
        ),
        ("\"sasl.oauthbearer.client.secret\" = \"S3cr3t", "[kafka]\n"),
    ] {
        let text = valid.replace(in_section, &format!("{in_section}{broken_line}\n"));
        let text = if in_section == "[source]\n" {
            text.replace("url = \"mysql://relay@127.0.0.1:3306\"\n", "")
        } else {
            text
        };
        assert!(text.contains(SECRET), "{text}");
        assert_refused_without_the_secret(&text, "line");
    }
}

/// Item 3: a `[kafka.properties]` secret that librdkafka refuses is named, its value not shown.
#[test]
fn a_refused_secret_kafka_property_is_named_without_its_value() {
    let valid = config_with_url("mysql://relay@127.0.0.1:3306");
    for property in ["sasl.oauthbearer.client.secret.typo", "ssl.bogus.password"] {
        let text = format!("{valid}\n[kafka.properties]\n\"{property}\" = \"{SECRET}\"\n");
        assert_refused_without_the_secret(&text, property);
    }
}

/// A config with a secret in every place that takes one: the source URL, the MySQL
/// checkpoint store's URL, `[kafka.security] sasl_password`, and secret librdkafka
/// properties. Each secret is its own string, so a leak names which.
fn config_with_every_secret(server_id: u32) -> String {
    format!(
        r#"[source]
url = "mysql://relay:S3cr3t-source@127.0.0.1:1"
server_id = {server_id}
startup_attempts = 1
connect_timeout_ms = 1000

[[outbox]]
table = "shop.outbox"

[kafka]
brokers = "127.0.0.1:1"
startup_attempts = 1
admin_timeout_ms = 1000

[kafka.security]
protocol = "sasl_plaintext"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "relay"
sasl_password = "S3cr3t-sasl"

[kafka.properties]
"ssl.key.password" = "S3cr3t-key"
"ssl.keystore.password" = "S3cr3t-keystore"

[checkpoint]
store = "mysql"
url = "mysql://relay:S3cr3t-checkpoint@127.0.0.1:1"
operation_timeout_ms = 1000
"#
    )
}

/// Every secret-bearing key, through `check`, `run` and `status` in both log formats: when
/// the config is refused (`server_id = 0`), and when it is valid and every connection fails
/// (nothing listens on port 1). No secret may appear in any output.
#[test]
fn no_secret_of_any_key_appears_in_any_command_output() {
    let secrets = [
        "S3cr3t-source",
        "S3cr3t-sasl",
        "S3cr3t-key",
        "S3cr3t-keystore",
        "S3cr3t-checkpoint",
    ];
    for (server_id, refused_for) in [(0, "source.server_id"), (4242, "127.0.0.1:1")] {
        for_each_command_on(
            &config_with_every_secret(server_id),
            |args, code, output| {
                if args[0] != "status" {
                    assert_ne!(code, 0, "{args:?} must fail:\n{output}");
                }
                assert!(
                    output.contains(refused_for),
                    "{args:?} does not name `{refused_for}`:\n{output}"
                );
                for secret in secrets {
                    assert!(
                        !output.contains(secret),
                        "{args:?} shows `{secret}`:\n{output}"
                    );
                }
            },
        );
    }
}
