//! Security settings: TLS to the MySQL/MariaDB connections (`[source.tls]`,
//! `[checkpoint.tls]`), TLS and SASL to Kafka (`[kafka.security]`), and where secrets come
//! from.
//!
//! # Secrets
//! * A secret comes from the file (`password_file`, `sasl.password_file`), an environment
//!   variable (`OUTBOX_RELAY_SOURCE_PASSWORD`, `sasl.password_env`) or, discouraged, the TOML
//!   itself; never more than one ([`KafkaSecurityConfig::validate`] refuses two).
//! * The source and checkpoint password files are re-read at every connect, so a rotated
//!   password applies at the next reconnect. The Kafka SASL password is read when a
//!   producer is created (start and every producer rebuild): librdkafka keeps it for the
//!   client's life.
//! * No secret is ever logged, printed by `check`, or shown in an error: [`Secret`]'s
//!   `Debug`/`Display` print `***`, and [`redacted_properties`] masks every librdkafka
//!   property whose name says it holds one.

use std::path::{Path, PathBuf};

use outbox_binlog::{TlsMode, TlsOptions, TlsVersion};
use serde::Deserialize;

pub use outbox_kafka::security::{
    is_secret_property, redacted_properties, KafkaProtocol, KafkaSecurityConfig, SaslMechanism,
    Secret, KAFKA_SECURITY_PROPERTIES,
};

/// `[source.tls]` and `[checkpoint.tls]`: how a MySQL connection uses TLS (MySQL's
/// `--ssl-mode` semantics; see the README's Security section).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MysqlTlsConfig {
    /// `disabled`, `preferred` (default), `required`, `verify_ca` or `verify_identity`.
    /// Production: `verify_ca` with the provider's CA bundle, or `verify_identity`.
    #[serde(default)]
    pub mode: TlsMode,
    /// PEM CA certificate(s) the server's certificate must chain to; without it the Mozilla
    /// root set built into the relay.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, for users created `REQUIRE X509`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// `"1.2"` (default) or `"1.3"`.
    #[serde(default)]
    pub min_version: TlsVersion,
    /// `caching_sha2_password` over plaintext: the server's RSA public key (PEM), pinned.
    #[serde(default)]
    pub server_public_key_path: Option<PathBuf>,
    /// `caching_sha2_password` over plaintext without a pinned key: fetch the key from the
    /// server unauthenticated (a man in the middle can then read the password). Off.
    #[serde(default)]
    pub allow_public_key_retrieval: bool,
}

impl MysqlTlsConfig {
    /// The reader's options, with the password file of the section.
    pub fn options(&self, password_file: Option<&Path>) -> TlsOptions {
        TlsOptions {
            mode: self.mode,
            ca_file: self.ca_file.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            min_version: self.min_version,
            server_public_key_path: self.server_public_key_path.clone(),
            allow_public_key_retrieval: self.allow_public_key_retrieval,
            password_file: password_file.map(Path::to_path_buf),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> KafkaSecurityConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn sasl_ssl_with_scram_maps_to_librdkafka_properties() {
        let dir = tempfile::tempdir().unwrap();
        let password = dir.path().join("sasl-password");
        std::fs::write(&password, "s3cret-value\n").unwrap();
        let security = parse(&format!(
            "protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"relay\"\nsasl_password_file = \"{}\"\n",
            password.display()
        ));
        assert!(security.validate().is_empty(), "{:?}", security.validate());
        let properties = security.properties().unwrap();
        let get = |key: &str| {
            properties
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.username"), Some("relay"));
        assert_eq!(
            get("sasl.password"),
            Some("s3cret-value"),
            "newline trimmed"
        );
        assert_eq!(get("ssl.endpoint.identification.algorithm"), Some("https"));
        let shown = format!("{:?}", redacted_properties(&properties));
        assert!(!shown.contains("s3cret-value"), "{shown}");
    }

    #[test]
    fn mistakes_are_named_with_their_fix() {
        let security = parse("protocol = \"sasl_ssl\"\nsasl_username = \"relay\"\n");
        let problems = security.validate();
        assert!(
            problems
                .iter()
                .any(|(key, _)| *key == "kafka.security.sasl_mechanism"),
            "{problems:?}"
        );
        let security =
            parse("protocol = \"plaintext\"\nsasl_mechanism = \"PLAIN\"\nsasl_username = \"u\"\n");
        assert!(security
            .validate()
            .iter()
            .any(|(_, message)| message.contains("sasl_ssl")));
        let error = toml::from_str::<KafkaSecurityConfig>("protocol = \"tls\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("sasl_ssl"), "{error}");
    }

    fn relay_config(extra: &str) -> Result<crate::config::RelayConfig, crate::config::ConfigError> {
        let mut text = crate::demo::demo_config_text(
            "mysql://relay@127.0.0.1:3306",
            "127.0.0.1:9092",
            "/tmp/cp.json",
        );
        text.push_str(extra);
        crate::config::RelayConfig::parse(&text)
    }

    #[test]
    fn the_relay_config_refuses_tls_and_secret_mistakes_naming_the_key() {
        let error =
            relay_config("\n[source.tls]\nmode = \"verify_ca\"\nkey_file = \"/etc/hosts\"\n")
                .unwrap_err()
                .to_string();
        assert!(
            error.contains("source.tls") && error.contains("cert_file"),
            "{error}"
        );
        let error = relay_config(
            "\n[source.tls]\nmode = \"verify_ca\"\nca_file = \"/nonexistent/ca.pem\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("source.tls.ca_file") && error.contains("/nonexistent/ca.pem"),
            "{error}"
        );
        let error = relay_config("\n[source.tls]\nmode = \"verify-ca\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("verify_ca"),
            "the accepted values are listed: {error}"
        );
        let error = relay_config(
            "\n[kafka.security]\nprotocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\n\
             sasl_username = \"u\"\nsasl_password_env = \"OUTBOX_TEST_UNSET_VARIABLE_1\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("OUTBOX_TEST_UNSET_VARIABLE_1"), "{error}");
        let text = crate::demo::demo_config_text(
            "mysql://relay@127.0.0.1:3306",
            "127.0.0.1:9092",
            "/tmp/cp.json",
        );
        if text.contains("[kafka.properties]") {
            let conflicting = text.replace(
                "[kafka.properties]\n",
                "[kafka.properties]\n\"security.protocol\" = \"ssl\"\n",
            ) + "\n[kafka.security]\nprotocol = \"ssl\"\n";
            let error = crate::config::RelayConfig::parse(&conflicting)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("security.protocol") && error.contains("one place"),
                "{error}"
            );
        }
        let fine = relay_config(
            "\n[source.tls]\nmode = \"required\"\nmin_version = \"1.3\"\n\n[kafka.security]\nprotocol = \"ssl\"\n",
        )
        .unwrap();
        assert_eq!(
            fine.source.tls_options().mode,
            outbox_binlog::TlsMode::Required
        );
    }

    #[test]
    fn a_secret_never_prints() {
        let security = parse(
            "protocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\nsasl_username = \"u\"\n\
             sasl_password = \"hunter2-secret\"\n",
        );
        assert!(!format!("{security:?}").contains("hunter2"));
        assert_eq!(security.properties().unwrap().len(), 5);
    }
}
