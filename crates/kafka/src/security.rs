//! `[kafka.security]`: TLS and SASL to the Kafka brokers as first-class keys, the SASL
//! password's sources, and the masking of secret librdkafka properties.
//!
//! * A secret comes from the file (`sasl_password_file`), an environment variable
//!   (`sasl_password_env`) or, discouraged, the TOML itself; never more than one
//!   ([`KafkaSecurityConfig::validate`] refuses two). The SASL password is read when a
//!   client is created (start and every producer rebuild): librdkafka keeps it for the
//!   client's life.
//! * No secret is ever logged or shown in an error: [`Secret`]'s `Debug` prints `***`, and
//!   [`redacted_properties`] masks every librdkafka property whose name says it holds one.

use std::path::PathBuf;

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
