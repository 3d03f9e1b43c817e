//! TLS to the source server: MySQL's `--ssl-mode` semantics for every connection the reader
//! opens (the replication stream, which speaks TLS through `tokio-rustls` itself, and the
//! `mysql_async` side connections, which use the same rustls settings), and the credentials
//! that can change while the relay runs (a password file re-read on every connect).
//!
//! # Modes
//! | mode | encrypted | certificate chain checked | host name checked |
//! |---|---|---|---|
//! | `disabled` | no | - | - |
//! | `preferred` (default, as the MySQL client) | when the server offers TLS | no | no |
//! | `required` | yes, or the connection fails | no | no |
//! | `verify_ca` | yes | against `ca_file` (else the Mozilla roots) | no |
//! | `verify_identity` | yes | against `ca_file` (else the Mozilla roots) | yes |
//!
//! `preferred` and `required` protect against eavesdropping only: without a checked
//! certificate a man in the middle can still answer. Production settings are `verify_ca`
//! with the provider's CA bundle, or `verify_identity`.
//!
//! # Contract
//! * Only TLS 1.2 and 1.3 are spoken (rustls has nothing older); `min_version = "1.3"` refuses
//!   a TLS 1.2 session on every connection (the side connections check the server's
//!   `Ssl_version` after connecting, since the client library does not take a minimum).
//! * The certificate and key files are read when a connection is set up, so replaced
//!   certificates apply at the next reconnect; an unreadable or unparsable file is a definite
//!   [`BinlogError::InvalidReaderConfig`] naming the field and the path.
//! * Secrets (the password, the key's bytes) never appear in an error or a log line.
//! * [`connect_to_server`] is the one way other code opens a client-library connection to
//!   the source with these settings (`preferred` falls back to plaintext only when the
//!   server offers no TLS at all).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use crate::BinlogError;

/// How connections to the source use TLS (see the module docs' table). Deserializes from
/// MySQL's names (`verify_ca`, ...), as configuration files spell them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsMode {
    /// Plaintext only.
    Disabled,
    /// TLS when the server offers it, plaintext otherwise; no certificate check.
    #[default]
    Preferred,
    /// TLS or fail; no certificate check.
    Required,
    /// TLS with the server's certificate chain checked against the CA.
    VerifyCa,
    /// Like `VerifyCa`, and the certificate must name the host the URL names.
    VerifyIdentity,
}

impl TlsMode {
    /// The name used in configuration and messages (`verify_ca`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disabled => "disabled",
            TlsMode::Preferred => "preferred",
            TlsMode::Required => "required",
            TlsMode::VerifyCa => "verify_ca",
            TlsMode::VerifyIdentity => "verify_identity",
        }
    }

    /// Whether the server's certificate chain is checked.
    pub fn verifies_certificate(self) -> bool {
        matches!(self, TlsMode::VerifyCa | TlsMode::VerifyIdentity)
    }
}

/// The lowest TLS version accepted; `"1.2"` or `"1.3"` in configuration files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, serde::Deserialize)]
pub enum TlsVersion {
    /// TLS 1.2 (and 1.3).
    #[default]
    #[serde(rename = "1.2")]
    Tls12,
    /// TLS 1.3 only.
    #[serde(rename = "1.3")]
    Tls13,
}

impl TlsVersion {
    /// `TLSv1.2` / `TLSv1.3`, as the server's `Ssl_version` status variable spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLSv1.2",
            TlsVersion::Tls13 => "TLSv1.3",
        }
    }
}

/// TLS and credential settings for the connections to the source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// The mode (module docs).
    pub mode: TlsMode,
    /// PEM file with the CA certificate(s) the server's chain must lead to (`verify_ca`,
    /// `verify_identity`); without it the Mozilla root set built into the relay is used.
    pub ca_file: Option<PathBuf>,
    /// PEM file with the client certificate chain, for users created `REQUIRE X509` /
    /// `REQUIRE SUBJECT`. Needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM file with the client certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// The lowest TLS version accepted.
    pub min_version: TlsVersion,
    /// `caching_sha2_password` over plaintext: the server's RSA public key (PEM), pinned, so
    /// the password is encrypted to a key the operator trusts.
    pub server_public_key_path: Option<PathBuf>,
    /// `caching_sha2_password` over plaintext without a pinned key: allow asking the server
    /// for its key over the unauthenticated connection (a man in the middle can substitute
    /// his own and read the password). Off by default, as in MySQL Connector/J.
    pub allow_public_key_retrieval: bool,
    /// A file holding the source password (trailing newline ignored), read at every connect
    /// so a rotated secret applies at the next reconnect. Overrides the URL's password.
    pub password_file: Option<PathBuf>,
}

impl TlsOptions {
    /// Plaintext connections, nothing else set (tests and tools on a trusted loopback).
    pub fn disabled() -> TlsOptions {
        TlsOptions {
            mode: TlsMode::Disabled,
            ..TlsOptions::default()
        }
    }

    /// What the certificate is checked against, for reports: `not verified`, `ca_file PATH`
    /// or `built-in Mozilla roots`, plus `+ host name` under `verify_identity`.
    pub fn verification(&self) -> String {
        if !self.mode.verifies_certificate() {
            return "certificate not verified".into();
        }
        let against = match &self.ca_file {
            Some(path) => format!("CA file {}", path.display()),
            None => "the built-in Mozilla root certificates".into(),
        };
        match self.mode {
            TlsMode::VerifyIdentity => {
                format!("chain verified against {against}, host name verified")
            }
            _ => format!("chain verified against {against}, host name not checked"),
        }
    }

    /// Checks the combination without touching files: a client key without a certificate
    /// (or the reverse) is a mistake the operator must hear about.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => Err("tls.cert_file is set but tls.key_file is not: a client certificate \
                                    needs its private key"
                .into()),
            (None, Some(_)) => Err("tls.key_file is set but tls.cert_file is not: set both for a client \
                                    certificate, or neither"
                .into()),
            _ if self.mode == TlsMode::Disabled
                && (self.ca_file.is_some() || self.cert_file.is_some()) =>
            {
                Err("tls.ca_file / tls.cert_file are set but tls.mode is `disabled`, so they would be \
                     ignored; choose `verify_ca` or `verify_identity` (or remove them)"
                    .into())
            }
            _ => Ok(()),
        }
    }

    /// The password from `password_file`, if one is configured.
    pub(crate) fn read_password(&self, server: &str) -> Result<Option<String>, BinlogError> {
        let Some(path) = &self.password_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|error| file_error(server, "password_file", path, &error.to_string()))?;
        Ok(Some(text.trim_end_matches(['\r', '\n']).to_owned()))
    }

    /// The rustls client configuration of this mode (`None` for `disabled`).
    pub(crate) fn client_config(
        &self,
        server: &str,
    ) -> Result<Option<Arc<ClientConfig>>, BinlogError> {
        if self.mode == TlsMode::Disabled {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&'static rustls::SupportedProtocolVersion] = match self.min_version {
            TlsVersion::Tls12 => rustls::DEFAULT_VERSIONS,
            TlsVersion::Tls13 => &[&rustls::version::TLS13],
        };
        let roots = Arc::new(self.root_store(server)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|error| {
                config_error(
                    server,
                    "tls.ca_file",
                    format!("cannot use the CA certificates: {error}"),
                )
            })?;
        let verifier = Arc::new(ModeVerifier {
            mode: self.mode,
            webpki,
            provider: provider.clone(),
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .map_err(|error| config_error(server, "tls.min_version", error.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.cert_file, &self.key_file) {
            (Some(cert_file), Some(key_file)) => {
                let chain = read_certificates(server, "tls.cert_file", cert_file)?;
                let key = PrivateKeyDer::from_pem_file(key_file).map_err(|error| {
                    file_error(
                        server,
                        "tls.key_file",
                        key_file,
                        &format!("no usable private key ({error})"),
                    )
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|error| {
                    config_error(
                        server,
                        "tls.cert_file",
                        format!("the client certificate and key do not fit together: {error}"),
                    )
                })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(Some(Arc::new(config)))
    }

    /// The roots: `ca_file` only when it is set (so a public CA cannot vouch for a private
    /// server), else the Mozilla set.
    fn root_store(&self, server: &str) -> Result<RootCertStore, BinlogError> {
        let mut roots = RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                for certificate in read_certificates(server, "tls.ca_file", path)? {
                    roots.add(certificate).map_err(|error| {
                        file_error(
                            server,
                            "tls.ca_file",
                            path,
                            &format!("not a usable CA certificate ({error})"),
                        )
                    })?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        Ok(roots)
    }

    /// The `mysql_async` TLS options of the mode (`None`: plaintext), for the side
    /// connections and for pools other crates open (the MySQL checkpoint store). Under
    /// `preferred` these require TLS; see [`connect_to_server`] for the fallback.
    pub fn client_library_ssl_opts(&self) -> Option<mysql_async::SslOpts> {
        if self.mode == TlsMode::Disabled {
            return None;
        }
        let mut ssl = mysql_async::SslOpts::default()
            .with_danger_accept_invalid_certs(!self.mode.verifies_certificate())
            .with_danger_skip_domain_validation(self.mode != TlsMode::VerifyIdentity);
        if let Some(ca) = &self.ca_file {
            ssl = ssl
                .with_root_certs(vec![ca.clone().into()])
                .with_disable_built_in_roots(true);
        }
        if let (Some(cert), Some(key)) = (&self.cert_file, &self.key_file) {
            ssl = ssl.with_client_identity(Some(mysql_async::ClientIdentity::new(
                cert.clone().into(),
                key.clone().into(),
            )));
        }
        Some(ssl)
    }

    /// The server key pinned by `server_public_key_path`, read now.
    pub(crate) fn pinned_server_key(&self, server: &str) -> Result<Option<Vec<u8>>, BinlogError> {
        match &self.server_public_key_path {
            Some(path) => std::fs::read(path).map(Some).map_err(|error| {
                file_error(
                    server,
                    "tls.server_public_key_path",
                    path,
                    &error.to_string(),
                )
            }),
            None => Ok(None),
        }
    }
}

/// What a TLS session negotiated, for `check` and the logs.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct TlsSession {
    /// `TLSv1.3`, ... (empty: the connection is plaintext).
    pub version: String,
    /// The cipher suite, as the server or rustls names it.
    pub cipher: String,
    /// What the certificate was verified against ([`TlsOptions::verification`]).
    pub verification: String,
}

impl std::fmt::Display for TlsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.version.is_empty() {
            write!(f, "plaintext (not encrypted)")
        } else {
            write!(f, "{} {}, {}", self.version, self.cipher, self.verification)
        }
    }
}

/// Reads every certificate of a PEM file.
fn read_certificates(
    server: &str,
    field: &str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, BinlogError> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|error| {
            file_error(
                server,
                field,
                path,
                &format!("cannot read PEM certificates ({error})"),
            )
        })?;
    if certificates.is_empty() {
        return Err(file_error(
            server,
            field,
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certificates)
}

fn file_error(server: &str, field: &str, path: &Path, message: &str) -> BinlogError {
    config_error(server, field, format!("{}: {message}", path.display()))
}

fn config_error(server: &str, field: &str, message: String) -> BinlogError {
    BinlogError::InvalidReaderConfig {
        server: server.to_owned(),
        field: field.to_owned(),
        message,
    }
}

/// The certificate check of each mode: everything accepted (`preferred`, `required`; the
/// handshake's signatures are still checked, so the session key is the certificate's), the
/// chain without the name (`verify_ca`), or the chain and the name (`verify_identity`).
#[derive(Debug)]
struct ModeVerifier {
    /// Which checks apply.
    mode: TlsMode,
    /// The standard chain-and-name verifier over the configured roots.
    webpki: Arc<WebPkiServerVerifier>,
    /// For the handshake signature checks.
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for ModeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.mode {
            TlsMode::Disabled | TlsMode::Preferred | TlsMode::Required => {
                Ok(ServerCertVerified::assertion())
            }
            TlsMode::VerifyCa => match self.webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            },
            TlsMode::VerifyIdentity => self.webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Opens a `mysql_async` connection to `url` with the TLS settings (and password file) of
/// `tls`, and reports what TLS it got. For the relay's own side queries (`check`'s table
/// lookups, the checkpoint store's TLS probe).
pub async fn connect_to_server(
    url: &str,
    tls: &TlsOptions,
    timeout: std::time::Duration,
) -> Result<(mysql_async::Conn, TlsSession), BinlogError> {
    let endpoint = crate::live::ServerEndpoint::new(url, tls)?;
    let mut conn = endpoint.connect(timeout, "side connection").await?;
    let session = crate::live::session_tls(&mut conn, tls)
        .await
        .map_err(|error| endpoint.connect_error(error, "side connection"))?;
    Ok((conn, session))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_without_a_certificate_is_refused_with_the_fix() {
        let options = TlsOptions {
            mode: TlsMode::VerifyCa,
            key_file: Some("client.key".into()),
            ..TlsOptions::default()
        };
        assert!(options.validate().unwrap_err().contains("cert_file"));
        let options = TlsOptions {
            mode: TlsMode::Disabled,
            ca_file: Some("ca.pem".into()),
            ..TlsOptions::default()
        };
        assert!(options.validate().unwrap_err().contains("verify_ca"));
    }

    #[test]
    fn a_missing_ca_file_names_the_field_and_the_path() {
        let options = TlsOptions {
            mode: TlsMode::VerifyCa,
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        let error = options.client_config("db:3306").unwrap_err().to_string();
        assert!(
            error.contains("tls.ca_file") && error.contains("/nonexistent/ca.pem"),
            "{error}"
        );
    }

    #[test]
    fn the_verification_text_says_what_was_checked() {
        let mut options = TlsOptions {
            mode: TlsMode::Required,
            ..TlsOptions::default()
        };
        assert_eq!(options.verification(), "certificate not verified");
        options.mode = TlsMode::VerifyIdentity;
        options.ca_file = Some("/etc/ca.pem".into());
        assert_eq!(
            options.verification(),
            "chain verified against CA file /etc/ca.pem, host name verified"
        );
    }
}
