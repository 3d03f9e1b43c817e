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

/// A string that must not be printed.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that hands it to a client library.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

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

/// `security.protocol` of the Kafka connections.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum KafkaProtocol {
    /// No TLS, no authentication (trusted networks and tests).
    #[default]
    Plaintext,
    /// TLS (optionally with a client certificate: mTLS).
    Ssl,
    /// SASL without TLS: the credentials cross the network readable (PLAIN) or hashed
    /// (SCRAM); for trusted networks only.
    SaslPlaintext,
    /// SASL inside TLS (Confluent Cloud, MSK SCRAM, Aiven SASL, ...).
    SaslSsl,
}

impl KafkaProtocol {
    fn property(self) -> &'static str {
        match self {
            KafkaProtocol::Plaintext => "plaintext",
            KafkaProtocol::Ssl => "ssl",
            KafkaProtocol::SaslPlaintext => "sasl_plaintext",
            KafkaProtocol::SaslSsl => "sasl_ssl",
        }
    }

    fn uses_tls(self) -> bool {
        matches!(self, KafkaProtocol::Ssl | KafkaProtocol::SaslSsl)
    }

    fn uses_sasl(self) -> bool {
        matches!(self, KafkaProtocol::SaslPlaintext | KafkaProtocol::SaslSsl)
    }
}

/// SASL mechanisms this build of librdkafka has (GSSAPI/Kerberos needs cyrus-sasl, which
/// is not linked; AWS_MSK_IAM is not part of librdkafka).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum SaslMechanism {
    /// Username and password as they are (use with TLS only).
    #[serde(rename = "PLAIN")]
    Plain,
    /// Salted challenge-response, SHA-256.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// Salted challenge-response, SHA-512.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    /// OAuth bearer tokens (librdkafka's OIDC client-credentials flow via
    /// `[kafka.properties]` `sasl.oauthbearer.*`).
    #[serde(rename = "OAUTHBEARER")]
    OauthBearer,
}

impl SaslMechanism {
    fn property(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OauthBearer => "OAUTHBEARER",
        }
    }
}

/// `[kafka.security]`: TLS and SASL to the brokers, the common cases as first-class keys
/// (anything else stays in `[kafka.properties]`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct KafkaSecurityConfig {
    /// `plaintext` (default), `ssl`, `sasl_plaintext` or `sasl_ssl`.
    #[serde(default)]
    pub protocol: KafkaProtocol,
    /// PEM CA certificate(s) the brokers' certificates must chain to (default: the system's
    /// CA store as librdkafka finds it).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (mTLS, e.g. Aiven).
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Check that the broker's certificate names the host it was reached at (default on;
    /// off only for brokers whose certificates name no usable host).
    #[serde(default = "default_true")]
    pub verify_hostname: bool,
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or `OAUTHBEARER`; needed with the SASL
    /// protocols.
    #[serde(default)]
    pub sasl_mechanism: Option<SaslMechanism>,
    /// SASL user name (API key on Confluent Cloud).
    #[serde(default)]
    pub sasl_username: Option<String>,
    /// SASL password in the file itself (discouraged: prefer `sasl_password_file` or
    /// `sasl_password_env`).
    #[serde(default)]
    pub sasl_password: Option<Secret>,
    /// File holding the SASL password (trailing newline ignored).
    #[serde(default)]
    pub sasl_password_file: Option<PathBuf>,
    /// Environment variable holding the SASL password.
    #[serde(default)]
    pub sasl_password_env: Option<String>,
}

fn default_true() -> bool {
    true
}

/// The librdkafka properties `[kafka.security]` sets; `[kafka.properties]` may not set them
/// too.
pub const KAFKA_SECURITY_PROPERTIES: &[&str] = &[
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanisms",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
];

impl KafkaSecurityConfig {
    /// True when nothing is set (the pass-through properties decide everything).
    pub fn is_default(&self) -> bool {
        self == &KafkaSecurityConfig {
            verify_hostname: true,
            ..KafkaSecurityConfig::default()
        }
    }

    /// How the connection is secured, for `check` (never the password): e.g. `sasl_ssl,
    /// SCRAM-SHA-512 as relay, broker certificate verified against CA file /ca.pem and the
    /// host name`.
    pub fn describe(&self) -> String {
        let mut text = self.protocol.property().to_owned();
        if self.protocol.uses_sasl() {
            if let Some(mechanism) = self.sasl_mechanism {
                text.push_str(&format!(", {}", mechanism.property()));
            }
            if let Some(username) = &self.sasl_username {
                text.push_str(&format!(" as {username}"));
            }
        }
        if self.protocol.uses_tls() {
            let against = match &self.ca_file {
                Some(path) => format!("CA file {}", path.display()),
                None => "the system CA store".into(),
            };
            text.push_str(&format!(
                ", broker certificate verified against {against}{}",
                if self.verify_hostname {
                    " and the host name"
                } else {
                    " (host name not checked)"
                }
            ));
            if self.cert_file.is_some() {
                text.push_str(", client certificate presented");
            }
        } else {
            text.push_str(" (not encrypted)");
        }
        text
    }

    /// Checks the combination; each problem is `(key, message with the fix)`.
    pub fn validate(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let sources = [
            self.sasl_password.is_some(),
            self.sasl_password_file.is_some(),
            self.sasl_password_env.is_some(),
        ]
        .into_iter()
        .filter(|set| *set)
        .count();
        if sources > 1 {
            problems.push((
                "kafka.security.sasl_password",
                "set only one of sasl_password, sasl_password_file, sasl_password_env".into(),
            ));
        }
        if self.protocol.uses_sasl() {
            match self.sasl_mechanism {
                None => problems.push((
                    "kafka.security.sasl_mechanism",
                    format!(
                        "protocol = \"{}\" needs a mechanism: PLAIN, SCRAM-SHA-256, \
                         SCRAM-SHA-512 or OAUTHBEARER",
                        self.protocol.property()
                    ),
                )),
                Some(SaslMechanism::OauthBearer) => {}
                Some(_) => {
                    if self.sasl_username.is_none() {
                        problems.push((
                            "kafka.security.sasl_username",
                            "SASL PLAIN/SCRAM needs sasl_username".into(),
                        ));
                    }
                    if sources == 0 {
                        problems.push((
                            "kafka.security.sasl_password_file",
                            "SASL PLAIN/SCRAM needs a password: sasl_password_file or \
                             sasl_password_env (or sasl_password)"
                                .into(),
                        ));
                    }
                }
            }
        } else if self.sasl_mechanism.is_some() || self.sasl_username.is_some() || sources > 0 {
            problems.push((
                "kafka.security.protocol",
                format!(
                    "SASL settings are set but protocol = \"{}\" does not use SASL; set \
                     protocol = \"sasl_ssl\"",
                    self.protocol.property()
                ),
            ));
        }
        if !self.protocol.uses_tls()
            && (self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some())
        {
            problems.push((
                "kafka.security.protocol",
                format!(
                    "TLS files are set but protocol = \"{}\" does not use TLS; set protocol = \
                     \"ssl\" or \"sasl_ssl\"",
                    self.protocol.property()
                ),
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            problems.push((
                "kafka.security.cert_file",
                "a client certificate needs both cert_file and key_file".into(),
            ));
        }
        for (key, path) in [
            ("kafka.security.ca_file", &self.ca_file),
            ("kafka.security.cert_file", &self.cert_file),
            ("kafka.security.key_file", &self.key_file),
            (
                "kafka.security.sasl_password_file",
                &self.sasl_password_file,
            ),
        ] {
            if let Some(path) = path {
                if !path.is_file() {
                    problems.push((key, format!("{} is not a readable file", path.display())));
                }
            }
        }
        if let Some(variable) = &self.sasl_password_env {
            if std::env::var(variable).map_or(true, |value| value.is_empty()) {
                problems.push((
                    "kafka.security.sasl_password_env",
                    format!("the environment variable {variable} is not set"),
                ));
            }
        }
        problems
    }

    /// The librdkafka properties, the password read now. Nothing when the section is
    /// absent, so `[kafka.properties]` alone keeps working as before.
    pub fn properties(&self) -> Result<Vec<(String, String)>, String> {
        if self.is_default() {
            return Ok(Vec::new());
        }
        let mut properties = vec![(
            "security.protocol".to_owned(),
            self.protocol.property().to_owned(),
        )];
        let mut file = |key: &str, path: &Option<PathBuf>| {
            if let Some(path) = path {
                properties.push((key.to_owned(), path.display().to_string()));
            }
        };
        if self.protocol.uses_tls() {
            file("ssl.ca.location", &self.ca_file);
            file("ssl.certificate.location", &self.cert_file);
            file("ssl.key.location", &self.key_file);
            properties.push((
                "ssl.endpoint.identification.algorithm".into(),
                if self.verify_hostname {
                    "https"
                } else {
                    "none"
                }
                .into(),
            ));
        }
        if self.protocol.uses_sasl() {
            if let Some(mechanism) = self.sasl_mechanism {
                properties.push(("sasl.mechanisms".into(), mechanism.property().into()));
            }
            if let Some(username) = &self.sasl_username {
                properties.push(("sasl.username".into(), username.clone()));
            }
            if let Some(password) = self.sasl_password()? {
                properties.push(("sasl.password".into(), password.expose().to_owned()));
            }
        }
        Ok(properties)
    }

    /// The SASL password from wherever it is configured.
    fn sasl_password(&self) -> Result<Option<Secret>, String> {
        if let Some(path) = &self.sasl_password_file {
            let text = std::fs::read_to_string(path).map_err(|error| {
                format!(
                    "kafka.security.sasl_password_file: cannot read {}: {error}",
                    path.display()
                )
            })?;
            return Ok(Some(Secret(text.trim_end_matches(['\r', '\n']).to_owned())));
        }
        if let Some(variable) = &self.sasl_password_env {
            return std::env::var(variable)
                .map(|value| Some(Secret(value)))
                .map_err(|_| format!("kafka.security.sasl_password_env: {variable} is not set"));
        }
        Ok(self.sasl_password.clone())
    }
}

/// True for librdkafka property names that hold a secret.
pub fn is_secret_property(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.contains("password")
        || name.contains("secret")
        || name.ends_with(".pem")
        || name == "ssl.key.pem"
        || name == "sasl.oauthbearer.config"
        || name.contains("token")
}

/// `properties` with every secret value replaced by `***`, for logs and reports.
pub fn redacted_properties(properties: &[(String, String)]) -> Vec<(String, String)> {
    properties
        .iter()
        .map(|(key, value)| {
            if is_secret_property(key) {
                (key.clone(), "***".to_owned())
            } else {
                (key.clone(), value.clone())
            }
        })
        .collect()
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
