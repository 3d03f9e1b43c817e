//! Certificates generated at test time (rcgen): a test CA, a server certificate for
//! `localhost` / `127.0.0.1` signed by it, a client certificate signed by it, and an
//! unrelated CA, written as PEM files into a temporary directory.
//!
//! Keys are ECDSA P-256 in PKCS#8 PEM, which rustls, OpenSSL (MariaDB, librdkafka) and
//! Java (Kafka's `PEM` key store type) all read.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::process::HarnessError;

/// The PEM files of one test PKI. The directory is removed on drop.
pub struct TestCertificates {
    /// Holds the files.
    dir: tempfile::TempDir,
    /// The CA's certificate (what clients trust).
    pub ca_cert: PathBuf,
    /// The server certificate (SAN `localhost`, `127.0.0.1`), signed by the CA.
    pub server_cert: PathBuf,
    /// The server certificate's private key.
    pub server_key: PathBuf,
    /// Server key and certificate in one file (Kafka's `PEM` key store).
    pub server_key_and_cert: PathBuf,
    /// A client certificate (CN `outbox-relay-client`), signed by the CA.
    pub client_cert: PathBuf,
    /// The client certificate's private key.
    pub client_key: PathBuf,
    /// Another CA that signed nothing here: trusting it must fail verification.
    pub other_ca_cert: PathBuf,
    /// A server certificate naming only `db.example.invalid` (wrong host name), signed by
    /// the CA.
    pub wrong_host_cert: PathBuf,
    /// Its key.
    pub wrong_host_key: PathBuf,
}

fn pki_err(what: &str) -> impl Fn(rcgen::Error) -> HarnessError + '_ {
    move |error| HarnessError::Io {
        what: format!("generating the test certificates: {what}"),
        source: std::io::Error::other(error.to_string()),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf, HarnessError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|source| HarnessError::Io {
        what: format!("writing {}", path.display()),
        source,
    })?;
    Ok(path)
}

fn ca(name: &str) -> Result<(rcgen::Certificate, KeyPair), HarnessError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki_err("CA params"))?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().map_err(pki_err("CA key"))?;
    let cert = params
        .self_signed(&key)
        .map_err(pki_err("CA certificate"))?;
    Ok((cert, key))
}

fn leaf(
    names: &[&str],
    common_name: &str,
    purpose: ExtendedKeyUsagePurpose,
    issuer: &rcgen::Certificate,
    issuer_key: &KeyPair,
) -> Result<(rcgen::Certificate, KeyPair), HarnessError> {
    let mut params = CertificateParams::new(
        names
            .iter()
            .map(|name| (*name).to_owned())
            .collect::<Vec<_>>(),
    )
    .map_err(pki_err("leaf params"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![purpose];
    let key = KeyPair::generate().map_err(pki_err("leaf key"))?;
    let cert = params
        .signed_by(&key, issuer, issuer_key)
        .map_err(pki_err("leaf certificate"))?;
    Ok((cert, key))
}

impl TestCertificates {
    /// Generates the PKI into a new temporary directory.
    pub fn generate() -> Result<TestCertificates, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("outbox-certs-")
            .tempdir()
            .map_err(|source| HarnessError::Io {
                what: "creating the certificates' directory".into(),
                source,
            })?;
        let (ca_cert, ca_key) = ca("outbox-relay test CA")?;
        let (other_ca, _other_key) = ca("some other CA")?;
        let (server, server_key) = leaf(
            &["localhost", "127.0.0.1"],
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca_cert,
            &ca_key,
        )?;
        let (client, client_key) = leaf(
            &[],
            "outbox-relay-client",
            ExtendedKeyUsagePurpose::ClientAuth,
            &ca_cert,
            &ca_key,
        )?;
        let (wrong_host, wrong_host_key) = leaf(
            &["db.example.invalid"],
            "db.example.invalid",
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca_cert,
            &ca_key,
        )?;
        let path = dir.path();
        Ok(TestCertificates {
            ca_cert: write(path, "ca.pem", &ca_cert.pem())?,
            server_cert: write(path, "server-cert.pem", &server.pem())?,
            server_key: write(path, "server-key.pem", &server_key.serialize_pem())?,
            server_key_and_cert: write(
                path,
                "server-keystore.pem",
                &format!("{}{}", server_key.serialize_pem(), server.pem()),
            )?,
            client_cert: write(path, "client-cert.pem", &client.pem())?,
            client_key: write(path, "client-key.pem", &client_key.serialize_pem())?,
            other_ca_cert: write(path, "other-ca.pem", &other_ca.pem())?,
            wrong_host_cert: write(path, "wrong-host-cert.pem", &wrong_host.pem())?,
            wrong_host_key: write(path, "wrong-host-key.pem", &wrong_host_key.serialize_pem())?,
            dir,
        })
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `mariadbd` arguments that serve `cert`/`key` (signed by the test CA). TLS is offered,
    /// not required: the harness connects in plaintext to see the server come up; a test
    /// then runs `SET GLOBAL require_secure_transport = ON`.
    pub fn mariadb_args(&self, cert: &Path, key: &Path) -> Vec<String> {
        vec![
            format!("--ssl-cert={}", cert.display()),
            format!("--ssl-key={}", key.display()),
            format!("--ssl-ca={}", self.ca_cert.display()),
        ]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_files_are_pem() {
        let certs = super::TestCertificates::generate().unwrap();
        for path in [&certs.ca_cert, &certs.server_cert, &certs.client_cert] {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(text.starts_with("-----BEGIN CERTIFICATE-----"), "{text}");
        }
        let key = std::fs::read_to_string(&certs.server_key).unwrap();
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}");
    }
}
