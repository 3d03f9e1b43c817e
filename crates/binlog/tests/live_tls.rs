//! TLS and authentication against real scratch MariaDB servers with certificates generated
//! at test time: every mode streams where it should, every refusal names the mode and the
//! cause, client certificates and ed25519 users work, a password file is read, and a raw
//! capture of the replication bytes shows neither the password nor the payload under TLS
//! (while the same capture of a plaintext stream does show the payload, so the check can
//! fail).

mod live_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use live_support::{config, ids_until, unique_server_id};
use mysql_async::prelude::Queryable;
use outbox_binlog::{
    connect_to_server, BinlogError, BinlogReader, StartPosition, TlsMode, TlsOptions,
};
use outbox_testkit::certs::TestCertificates;
use outbox_testkit::{ScratchMariadb, ScratchOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RELAY_PASSWORD: &str = "tls-Relay-Pass-8841";
const PAYLOAD_MARKER: &str = "PAYLOAD-MARKER-5d1c0b";

/// A server presenting `cert`/`key` (signed by the test CA), with the `relay` user
/// (`REQUIRE SSL`), an X509 user, an ed25519 user and `app.outbox`; TLS required of every
/// TCP client once set up (`require_secure_transport` is set last: the harness itself
/// connects in plaintext).
async fn tls_server(
    certs: &TestCertificates,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> ScratchMariadb {
    let server = ScratchMariadb::start_with(ScratchOptions {
        extra_args: certs.mariadb_args(cert, key),
        ..ScratchOptions::default()
    })
    .await
    .expect("scratch MariaDB with TLS starts");
    let relay_user = format!("CREATE USER relay@'%' IDENTIFIED BY '{RELAY_PASSWORD}' REQUIRE SSL");
    server
        .exec(&[
            "CREATE DATABASE app",
            "CREATE TABLE app.outbox (id INT PRIMARY KEY, payload TEXT) ENGINE=InnoDB",
            &relay_user,
            "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT ON *.* TO relay@'%'",
            "CREATE USER certuser@'%' IDENTIFIED BY 'cert-pass' REQUIRE X509",
            "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT ON *.* TO certuser@'%'",
            "INSTALL SONAME 'auth_ed25519'",
            "CREATE USER eduser@'%' IDENTIFIED VIA ed25519 USING PASSWORD('ed-Pass-4471')",
            "GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR, REPLICATION CLIENT ON *.* TO eduser@'%'",
            "SET GLOBAL require_secure_transport = ON",
        ])
        .await
        .expect("set up the TLS server");
    server
}

fn url(server: &ScratchMariadb, user: &str, password: &str, host: &str) -> String {
    format!("mysql://{user}:{password}@{host}:{}", server.port())
}

fn tls(mode: TlsMode, ca: Option<&std::path::Path>) -> TlsOptions {
    TlsOptions {
        mode,
        ca_file: ca.map(std::path::Path::to_path_buf),
        ..TlsOptions::default()
    }
}

/// Inserts one outbox row over a TLS connection (root has no password; TCP needs TLS).
async fn insert(server: &ScratchMariadb, id: i64) {
    let (mut conn, session) = connect_to_server(
        &server.url(),
        &tls(TlsMode::Required, None),
        Duration::from_secs(20),
    )
    .await
    .expect("writer connects over TLS");
    assert!(
        !session.version.is_empty(),
        "the writer's connection is TLS"
    );
    conn.exec_drop(
        "INSERT INTO app.outbox VALUES (?, ?)",
        (id, format!("{PAYLOAD_MARKER}-{id}")),
    )
    .await
    .expect("insert");
    let _ = conn.disconnect().await;
}

async fn stream_one(
    server: &ScratchMariadb,
    url: String,
    options: TlsOptions,
    id: i64,
) -> Result<(), BinlogError> {
    let mut reader_config = config(server, StartPosition::Latest, &["app.outbox"]);
    reader_config.url = url;
    reader_config.tls = options;
    let mut reader = BinlogReader::connect(reader_config).await?;
    insert(server, id).await;
    let seen = tokio::time::timeout(Duration::from_secs(60), ids_until(&mut reader, id))
        .await
        .expect("the row arrives");
    assert!(seen.contains(&id));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_streams_over_tls_and_each_refusal_names_the_mode_and_the_cause() {
    let certs = TestCertificates::generate().unwrap();
    let server = tls_server(&certs, &certs.server_cert, &certs.server_key).await;
    let ca = Some(certs.ca_cert.as_path());
    let mut id = 0;
    for (mode, host) in [
        (TlsMode::Preferred, "127.0.0.1"),
        (TlsMode::Required, "127.0.0.1"),
        (TlsMode::VerifyCa, "127.0.0.1"),
        (TlsMode::VerifyIdentity, "127.0.0.1"),
        (TlsMode::VerifyIdentity, "localhost"),
    ] {
        id += 1;
        let url = url(&server, "relay", RELAY_PASSWORD, host);
        let report = outbox_binlog::check_server(&url, &tls(mode, ca))
            .await
            .unwrap_or_else(|error| panic!("check under {mode:?} via {host}: {error}"));
        assert!(
            report.tls.version.starts_with("TLSv1."),
            "{mode:?}: {}",
            report.tls
        );
        if mode.verifies_certificate() {
            assert!(report.tls.verification.contains("ca.pem"), "{}", report.tls);
        }
        stream_one(&server, url, tls(mode, ca), id)
            .await
            .unwrap_or_else(|error| panic!("streaming under {mode:?} via {host}: {error}"));
    }

    // TLS 1.3 only: OpenSSL 3 speaks it.
    id += 1;
    let strict = TlsOptions {
        min_version: outbox_binlog::TlsVersion::Tls13,
        ..tls(TlsMode::VerifyIdentity, ca)
    };
    stream_one(
        &server,
        url(&server, "relay", RELAY_PASSWORD, "127.0.0.1"),
        strict,
        id,
    )
    .await
    .expect("TLS 1.3 only");

    // A CA that did not sign the server's certificate.
    let wrong_ca = tls(TlsMode::VerifyCa, Some(&certs.other_ca_cert));
    let error = BinlogReader::connect({
        let mut c = config(&server, StartPosition::Latest, &["app.outbox"]);
        c.url = url(&server, "relay", RELAY_PASSWORD, "127.0.0.1");
        c.tls = wrong_ca.clone();
        c
    })
    .await
    .expect_err("an untrusted certificate is refused");
    let text = error.to_string();
    assert!(matches!(error, BinlogError::Tls { .. }), "{error:?}");
    assert!(!error.is_transient(), "a certificate refusal is definite");
    assert!(
        text.contains("verify_ca") && text.contains("UnknownIssuer"),
        "{text}"
    );
    assert!(
        text.contains(&format!("tls.ca_file {}", certs.other_ca_cert.display())),
        "the hint names the CA file that was set: {text}"
    );
    assert!(!text.contains(RELAY_PASSWORD), "{text}");
    // Issue 31 item 9: without a ca_file the hint says so, and names no ca_file.
    let error = BinlogReader::connect({
        let mut c = config(&server, StartPosition::Latest, &["app.outbox"]);
        c.url = url(&server, "relay", RELAY_PASSWORD, "127.0.0.1");
        c.tls = tls(TlsMode::VerifyCa, None);
        c
    })
    .await
    .expect_err("a private CA is not among the built-in roots");
    let text = error.to_string();
    assert!(
        text.contains("no tls.ca_file is set") && text.contains("Mozilla root certificates"),
        "{text}"
    );
    assert!(!text.contains("signed by a CA in tls.ca_file"), "{text}");
    // The same through the check (the client library's connection).
    let error = outbox_binlog::check_server(
        &url(&server, "relay", RELAY_PASSWORD, "127.0.0.1"),
        &wrong_ca,
    )
    .await
    .unwrap_err();
    assert!(matches!(error, BinlogError::Tls { .. }), "{error:?}");
    assert!(error.to_string().contains("verify_ca"), "{error}");

    // Plaintext against require_secure_transport.
    let error = outbox_binlog::check_server(&server.url(), &tls(TlsMode::Disabled, None))
        .await
        .unwrap_err();
    // MariaDB refuses it as "access denied" (MySQL: error 3159, "insecure transport"); the
    // message says the connection was plaintext and which setting made it so.
    assert!(
        matches!(error, BinlogError::AccessDenied { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("tls.mode = disabled"), "{error}");
    // An account created REQUIRE SSL refuses plaintext as "access denied": the message
    // says the connection was plaintext and which setting made it so.
    let error = outbox_binlog::check_server(
        &url(&server, "relay", RELAY_PASSWORD, "127.0.0.1"),
        &tls(TlsMode::Disabled, None),
    )
    .await
    .unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, BinlogError::AccessDenied { .. }),
        "{error:?}"
    );
    assert!(text.contains("tls.mode = disabled"), "{text}");
    assert!(!text.contains(RELAY_PASSWORD), "{text}");

    // A client-certificate user: refused without the certificate, streams with it.
    let cert_url = url(&server, "certuser", "cert-pass", "127.0.0.1");
    let error = outbox_binlog::check_server(&cert_url, &tls(TlsMode::VerifyCa, ca))
        .await
        .unwrap_err();
    assert!(
        matches!(error, BinlogError::AccessDenied { .. }),
        "{error:?}"
    );
    let with_cert = TlsOptions {
        cert_file: Some(certs.client_cert.clone()),
        key_file: Some(certs.client_key.clone()),
        ..tls(TlsMode::VerifyCa, ca)
    };
    id += 1;
    stream_one(&server, cert_url, with_cert, id)
        .await
        .expect("the X509 user streams with its client certificate");

    // MariaDB's ed25519 authentication, the password from a file (the URL has none).
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, "ed-Pass-4471\n").unwrap();
    let ed = TlsOptions {
        password_file: Some(password_file),
        ..tls(TlsMode::VerifyIdentity, ca)
    };
    id += 1;
    stream_one(
        &server,
        format!("mysql://eduser@127.0.0.1:{}", server.port()),
        ed,
        id,
    )
    .await
    .expect("the ed25519 user streams, password from the file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_host_fails_verify_identity_but_passes_verify_ca() {
    let certs = TestCertificates::generate().unwrap();
    let server = tls_server(&certs, &certs.wrong_host_cert, &certs.wrong_host_key).await;
    let ca = Some(certs.ca_cert.as_path());
    let relay = url(&server, "relay", RELAY_PASSWORD, "127.0.0.1");
    let mut reader_config = config(&server, StartPosition::Latest, &["app.outbox"]);
    reader_config.url = relay.clone();
    reader_config.tls = tls(TlsMode::VerifyIdentity, ca);
    let error = BinlogReader::connect(reader_config)
        .await
        .expect_err("refused");
    let text = error.to_string();
    assert!(matches!(error, BinlogError::Tls { .. }), "{error:?}");
    assert!(
        text.contains("verify_identity") && text.contains("NotValidForName"),
        "{text}"
    );
    stream_one(&server, relay, tls(TlsMode::VerifyCa, ca), 1)
        .await
        .expect("verify_ca does not check the name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_tls_against_a_server_without_tls_names_the_mode() {
    let server = ScratchMariadb::start().await.unwrap();
    let mut reader_config = config(&server, StartPosition::Latest, &["app.outbox"]);
    reader_config.tls = tls(TlsMode::Required, None);
    let error = BinlogReader::connect(reader_config)
        .await
        .expect_err("no TLS on offer");
    assert!(matches!(error, BinlogError::Tls { .. }), "{error:?}");
    assert!(error.to_string().contains("required"), "{error}");
}

/// A TCP proxy that records every byte the server sends and the client sends.
async fn recording_proxy(target_port: u16) -> (u16, Arc<Mutex<Vec<u8>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await
            else {
                return;
            };
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let up = recorded.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 65536];
                while let Ok(n) = client_read.read(&mut buffer).await {
                    if n == 0 || server_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                    up.lock().unwrap().extend_from_slice(&buffer[..n]);
                }
            });
            let down = recorded.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 65536];
                while let Ok(n) = server_read.read(&mut buffer).await {
                    if n == 0 || client_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                    down.lock().unwrap().extend_from_slice(&buffer[..n]);
                }
            });
        }
    });
    (port, seen)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wire_carries_no_password_or_payload_in_the_clear_under_tls() {
    let certs = TestCertificates::generate().unwrap();
    let server = tls_server(&certs, &certs.server_cert, &certs.server_key).await;
    let (proxy_port, captured) = recording_proxy(server.port()).await;
    let via_proxy = format!("mysql://relay:{RELAY_PASSWORD}@127.0.0.1:{proxy_port}");
    stream_one(
        &server,
        via_proxy,
        tls(TlsMode::VerifyIdentity, Some(&certs.ca_cert)),
        1,
    )
    .await
    .expect("streams through the proxy");
    let bytes = captured.lock().unwrap().clone();
    assert!(
        bytes.len() > 1000,
        "the proxy saw the stream ({} bytes)",
        bytes.len()
    );
    assert!(!contains(&bytes, PAYLOAD_MARKER), "payload in the clear");
    assert!(!contains(&bytes, RELAY_PASSWORD), "password in the clear");

    // The control: a plaintext stream through the same kind of proxy shows the payload, so
    // the capture above would have caught it.
    let plain = ScratchMariadb::start().await.unwrap();
    plain
        .exec(&[
            "CREATE DATABASE app",
            "CREATE TABLE app.outbox (id INT PRIMARY KEY, payload TEXT) ENGINE=InnoDB",
        ])
        .await
        .unwrap();
    let (plain_proxy, plain_captured) = recording_proxy(plain.port()).await;
    let mut reader_config = config(&plain, StartPosition::Latest, &["app.outbox"]);
    reader_config.url = format!("mysql://root@127.0.0.1:{plain_proxy}");
    reader_config.server_id = unique_server_id();
    let mut reader = BinlogReader::connect(reader_config).await.unwrap();
    plain
        .exec(&[&format!(
            "INSERT INTO app.outbox VALUES (7, '{PAYLOAD_MARKER}-7')"
        )])
        .await
        .unwrap();
    ids_until(&mut reader, 7).await;
    assert!(contains(&plain_captured.lock().unwrap(), PAYLOAD_MARKER));
}
