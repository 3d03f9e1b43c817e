//! Opening connections to the server, and turning the client library's errors into
//! [`BinlogError`]s that name the server and the position.
//!
//! Every connection the live source opens (the replication stream, the side connection for
//! metadata lookups, the startup check) goes through [`ServerEndpoint`], so all of them get
//! the same options: a 1 GiB client `max_allowed_packet` (rows of tens of MiB must fit in one
//! packet), TCP keepalive, no switch to a Unix socket (the address in errors stays the one
//! the operator configured), and the same TLS mode and credentials (`crate::tls`).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, DriverError, Opts, OptsBuilder};

use super::replication_connection::{
    describe_tls_failure, ConnectSecurity, ReplicationConnection, TlsRefusal,
};
use crate::internal_events::{InternalEvent, PlaintextFallback};
use crate::tls::{TlsMode, TlsOptions, TlsSession, TlsVersion};
use crate::BinlogError;

/// The largest packet the server may send: 1 GiB, the protocol's and the server's maximum.
const CLIENT_MAX_ALLOWED_PACKET_BYTES: usize = 1 << 30;

/// How often the OS probes an idle replication socket.
const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// Where and how to connect: parsed once from the URL.
#[derive(Debug, Clone)]
pub(crate) struct ServerEndpoint {
    /// Connection options for every connection to this server (see the module docs),
    /// without TLS: the replication connection does its own TLS, and `preferred` falls back
    /// to these when the server offers none.
    pub(crate) opts: Opts,
    /// `opts` with the client library's TLS settings of the mode; `None` for `disabled`.
    tls_opts: Option<Opts>,
    /// The TLS mode and the credential files, applied at every connect.
    pub(crate) tls: TlsOptions,
    /// `host:port`, used in every error and log line (never the password).
    pub(crate) address: String,
}

/// The servers (`host:port`) this process already warned about for `preferred` falling
/// back to plaintext: one warning per server and process, not per connection (a reader
/// reconnects, `check`, the reader and the purge horizon each connect).
static PLAINTEXT_WARNED: std::sync::LazyLock<Mutex<HashSet<String>>> =
    std::sync::LazyLock::new(Mutex::default);

impl ServerEndpoint {
    /// Parses a `mysql://user:pass@host:port` URL; TLS as MySQL clients default to
    /// (`preferred`).
    #[cfg(test)]
    pub(crate) fn from_url(url: &str) -> Result<ServerEndpoint, BinlogError> {
        Self::new(url, &TlsOptions::default())
    }

    /// Parses a `mysql://user:pass@host:port` URL and takes the TLS settings.
    pub(crate) fn new(url: &str, tls: &TlsOptions) -> Result<ServerEndpoint, BinlogError> {
        let parsed = Opts::from_url(url).map_err(|error| BinlogError::InvalidReaderConfig {
            server: crate::redact_url(url),
            field: "url".into(),
            message: error.to_string(),
        })?;
        let address = format!("{}:{}", parsed.ip_or_hostname(), parsed.tcp_port());
        if parsed.ssl_opts().is_some() {
            // Two places to set TLS would disagree sooner or later.
            return Err(BinlogError::InvalidReaderConfig {
                server: address,
                field: "url".into(),
                message: "TLS options in the URL (`require_ssl`, `verify_ca`, ...) are not \
                          read; set [source.tls] mode (and ca_file, cert_file, key_file) instead"
                    .into(),
            });
        }
        tls.validate()
            .map_err(|message| BinlogError::InvalidReaderConfig {
                server: address.clone(),
                field: "tls".into(),
                message,
            })?;
        let opts: Opts = OptsBuilder::from_opts(parsed)
            .max_allowed_packet(Some(CLIENT_MAX_ALLOWED_PACKET_BYTES))
            .tcp_keepalive(Some(TCP_KEEPALIVE_INTERVAL))
            .prefer_socket(false)
            .ssl_opts(None)
            .into();
        let tls_opts = tls
            .client_library_ssl_opts()
            .map(|ssl| OptsBuilder::from_opts(opts.clone()).ssl_opts(ssl).into());
        Ok(ServerEndpoint {
            opts,
            tls_opts,
            tls: tls.clone(),
            address,
        })
    }

    /// `preferred` connected in plaintext: warns the first time for this server.
    fn note_plaintext(&self) {
        let first = PLAINTEXT_WARNED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(self.address.clone());
        if first {
            PlaintextFallback {
                server: &self.address,
            }
            .emit();
        }
    }

    /// The security of one replication connection, files read now.
    fn connect_security(&self) -> Result<ConnectSecurity, BinlogError> {
        Ok(ConnectSecurity {
            mode: self.tls.mode,
            tls: self.tls.client_config(&self.address)?,
            verification: self.tls.verification(),
            ca_file: self.tls.ca_file.clone(),
            pinned_server_key: self.tls.pinned_server_key(&self.address)?,
            allow_public_key_retrieval: self.tls.allow_public_key_retrieval,
            password: self.tls.read_password(&self.address)?,
        })
    }

    /// Opens the replication connection (our own protocol code, TLS by the mode).
    /// `position` only labels errors.
    pub(crate) async fn open_replication(
        &self,
        position: &str,
    ) -> Result<ReplicationConnection, BinlogError> {
        let security = self.connect_security()?;
        let connection = ReplicationConnection::open(&self.opts, &security)
            .await
            .map_err(|error| self.connect_error(error, position))?;
        match connection.tls_session() {
            Some(session) => self.refuse_old_tls(&session.version, position)?,
            None if self.tls.mode == TlsMode::Preferred => self.note_plaintext(),
            None => {}
        }
        Ok(connection)
    }

    /// A TLS version below `min_version` is a definite error.
    fn refuse_old_tls(&self, version: &str, position: &str) -> Result<(), BinlogError> {
        if self.tls.min_version == TlsVersion::Tls13 && version != TlsVersion::Tls13.as_str() {
            return Err(BinlogError::AccessDenied {
                server: self.address.clone(),
                position: position.to_owned(),
                message: format!(
                    "the server negotiated {version}, below tls.min_version = \"1.3\"; enable \
                     TLSv1.3 on the server (tls_version) or lower tls.min_version"
                ),
            });
        }
        Ok(())
    }

    /// Opens one connection, failing with a transient error after `timeout`.
    /// `position` only labels errors.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        position: &str,
    ) -> Result<Conn, BinlogError> {
        let timed_out = || BinlogError::ConnectTimeout {
            server: self.address.clone(),
            position: position.to_owned(),
            waited: timeout,
        };
        let mut opts = self.tls_opts.clone().unwrap_or_else(|| self.opts.clone());
        if self.tls.mode == TlsMode::VerifyCa {
            // The client library checks the host name even when told not to (it looks for
            // a rustls error text newer rustls no longer prints): give it a name the
            // certificate lists, found by our own handshake, which checked the chain.
            let security = self.connect_security()?;
            let probe = ReplicationConnection::certificate_dns_name(&self.opts, &security);
            let name = tokio::time::timeout(timeout, probe)
                .await
                .map_err(|_| timed_out())?
                .map_err(|error| self.connect_error(error, position))?;
            if let (Some(name), Some(ssl)) = (name, opts.ssl_opts().cloned()) {
                opts = OptsBuilder::from_opts(opts)
                    .ssl_opts(ssl.with_danger_tls_hostname_override(Some(name)))
                    .into();
            }
        }
        if let Some(password) = self.tls.read_password(&self.address)? {
            opts = OptsBuilder::from_opts(opts).pass(Some(password)).into();
        }
        let mut conn = match tokio::time::timeout(timeout, Conn::new(opts.clone())).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(mysql_async::Error::Driver(DriverError::NoClientSslFlagFromServer)))
                if self.tls.mode == TlsMode::Preferred =>
            {
                // `preferred`: the server offers no TLS, so plaintext (as the MySQL client).
                let plain: Opts = OptsBuilder::from_opts(opts).ssl_opts(None).into();
                match tokio::time::timeout(timeout, Conn::new(plain)).await {
                    Ok(Ok(conn)) => {
                        self.note_plaintext();
                        conn
                    }
                    Ok(Err(error)) => return Err(self.connect_error(error, position)),
                    Err(_elapsed) => return Err(timed_out()),
                }
            }
            Ok(Err(error)) => return Err(self.connect_error(error, position)),
            Err(_elapsed) => return Err(timed_out()),
        };
        if self.tls.min_version == TlsVersion::Tls13 {
            let session = tokio::time::timeout(timeout, session_tls(&mut conn, &self.tls))
                .await
                .map_err(|_| timed_out())?
                .map_err(|error| self.connect_error(error, position))?;
            self.refuse_old_tls(&session.version, position)?;
        }
        Ok(conn)
    }

    /// Maps an error of opening a connection or of a setup query.
    ///
    /// A TLS refusal by the client library (certificate, host name) is definite: the same
    /// certificate fails the same way on every retry.
    pub(crate) fn connect_error(&self, error: mysql_async::Error, position: &str) -> BinlogError {
        match classify(&error) {
            ErrorKind::Transient => BinlogError::Connection {
                server: self.address.clone(),
                message: format!("{} (stream at {position})", describe_client_error(&error)),
            },
            _ => self.definite_error(error, position),
        }
    }

    /// Maps an error that ended a running replication stream.
    pub(crate) fn stream_error(&self, error: mysql_async::Error, position: &str) -> BinlogError {
        match classify(&error) {
            ErrorKind::Transient => BinlogError::StreamLost {
                server: self.address.clone(),
                position: position.to_owned(),
                message: describe_client_error(&error),
            },
            _ => self.definite_error(error, position),
        }
    }

    /// The non-transient cases shared by both mappings. Error 1236 (purged position,
    /// duplicate server_id) is refined by the caller, which can query the server.
    fn definite_error(&self, error: mysql_async::Error, position: &str) -> BinlogError {
        let server = self.address.clone();
        let position = position.to_owned();
        match error {
            // MySQL 3159 / MariaDB 4151 (require_secure_transport) and the like.
            mysql_async::Error::Server(server_error)
                if server_error.message.contains("insecure transport") =>
            {
                BinlogError::Tls {
                    server,
                    mode: self.tls.mode.as_str().into(),
                    message: format!(
                        "the server requires TLS (require_secure_transport): error {}: {}; set \
                         tls.mode = \"verify_identity\" (or at least \"required\")",
                        server_error.code, server_error.message
                    ),
                }
            }
            mysql_async::Error::Server(server_error) => {
                if is_access_denied_code(server_error.code) {
                    let plaintext_hint = if self.tls.mode == TlsMode::Disabled {
                        " (the connection was plaintext because tls.mode = disabled; an \
                         account created REQUIRE SSL / X509 is refused this way)"
                    } else {
                        ""
                    };
                    BinlogError::AccessDenied {
                        server,
                        position,
                        message: format!(
                            "error {}: {}{plaintext_hint}",
                            server_error.code, server_error.message
                        ),
                    }
                } else {
                    BinlogError::Server {
                        server,
                        position,
                        code: server_error.code,
                        message: server_error.message,
                    }
                }
            }
            mysql_async::Error::Io(mysql_async::IoError::Tls(tls_error)) => BinlogError::Tls {
                server,
                mode: self.tls.mode.as_str().into(),
                message: tls_error.to_string(),
            },
            mysql_async::Error::Driver(DriverError::NoClientSslFlagFromServer) => BinlogError::Tls {
                server,
                mode: self.tls.mode.as_str().into(),
                message: "the server does not offer TLS (its `have_ssl` is not YES); give the \
                          server a certificate (ssl_cert, ssl_key in its config) or set tls.mode = preferred"
                    .into(),
            },
            mysql_async::Error::Io(mysql_async::IoError::Io(io_error))
                if io_error
                    .get_ref()
                    .is_some_and(|inner| inner.is::<rustls::Error>()) =>
            {
                let message = match io_error
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                {
                    Some(cause) => describe_tls_failure(&server, cause, self.tls.ca_file.as_deref()),
                    None => io_error.to_string(),
                };
                BinlogError::Tls {
                    server,
                    mode: self.tls.mode.as_str().into(),
                    message,
                }
            }
            mysql_async::Error::Io(mysql_async::IoError::Io(io_error))
                if io_error
                    .get_ref()
                    .is_some_and(|inner| inner.is::<TlsRefusal>()) =>
            {
                BinlogError::Tls {
                    server,
                    mode: self.tls.mode.as_str().into(),
                    message: io_error.to_string(),
                }
            }
            mysql_async::Error::Url(url_error) => BinlogError::InvalidReaderConfig {
                server,
                field: "url".into(),
                message: url_error.to_string(),
            },
            other => BinlogError::Protocol {
                server,
                position,
                message: other.to_string(),
            },
        }
    }
}

/// True when `error` is transient before any server-specific refinement (network trouble,
/// temporary server conditions).
pub(crate) fn is_transient_client_error(error: &mysql_async::Error) -> bool {
    classify(error) == ErrorKind::Transient
}

/// Rough kind of a client library error, before the server-specific refinements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    /// Network trouble or a temporary server condition: reconnecting may help.
    Transient,
    /// Anything else: the same request would fail the same way.
    Definite,
}

fn classify(error: &mysql_async::Error) -> ErrorKind {
    use mysql_async::{DriverError, Error, IoError};
    match error {
        Error::Io(IoError::Io(io_error)) => match io_error.kind() {
            // Parse failures of the binlog event reader come back as these kinds.
            std::io::ErrorKind::InvalidData
            | std::io::ErrorKind::InvalidInput
            | std::io::ErrorKind::Unsupported => ErrorKind::Definite,
            _ => ErrorKind::Transient,
        },
        // TLS refusals: certificate, host name, protocol (a retry fails the same way).
        Error::Io(IoError::Tls(_)) => ErrorKind::Definite,
        Error::Driver(DriverError::ConnectionClosed) => ErrorKind::Transient,
        Error::Driver(_) => ErrorKind::Definite,
        Error::Server(server_error) => {
            let transient = BinlogError::Server {
                server: String::new(),
                position: String::new(),
                code: server_error.code,
                message: String::new(),
            }
            .is_transient();
            if transient {
                ErrorKind::Transient
            } else {
                ErrorKind::Definite
            }
        }
        Error::Url(_) => ErrorKind::Definite,
        Error::Other(_) => ErrorKind::Transient,
    }
}

/// 1044 db access denied, 1045 access denied (login), 1142/1143 table/column command denied,
/// 1227 specific privilege needed (e.g. REPLICATION SLAVE), 1698 access denied (auth plugin).
fn is_access_denied_code(code: u16) -> bool {
    matches!(code, 1044 | 1045 | 1142 | 1143 | 1227 | 1698)
}

/// The TLS state of a client-library connection, from the server's session status
/// (`Ssl_version` empty: plaintext).
pub(crate) async fn session_tls(
    conn: &mut Conn,
    tls: &TlsOptions,
) -> Result<TlsSession, mysql_async::Error> {
    let rows: Vec<(String, String)> = conn
        .query("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        .await?;
    let value = |name: &str| {
        rows.iter()
            .find(|(variable, _)| variable.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
            .unwrap_or_default()
    };
    let version = value("Ssl_version");
    Ok(TlsSession {
        verification: if version.is_empty() {
            String::new()
        } else {
            tls.verification()
        },
        cipher: value("Ssl_cipher"),
        version,
    })
}

/// The client library's error as one short clause: an I/O error is said once
/// (`Connection refused (os error 111)`), not as the library nests it
/// (`Input/output error: Input/output error: Connection refused ...`).
pub fn describe_client_error(error: &mysql_async::Error) -> String {
    match error {
        mysql_async::Error::Io(mysql_async::IoError::Io(io_error)) => {
            format!("I/O error: {io_error}")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_is_said_once() {
        let error = mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        let text = describe_client_error(&error);
        assert_eq!(text.matches("rror").count(), 1, "{text}");
        assert!(text.contains("refused"), "{text}");
    }

    #[test]
    fn endpoint_names_host_and_port() {
        let endpoint = ServerEndpoint::from_url("mysql://u:p@127.0.0.1:3307/db").unwrap();
        assert_eq!(endpoint.address, "127.0.0.1:3307");
        assert_eq!(
            endpoint.opts.max_allowed_packet(),
            Some(CLIENT_MAX_ALLOWED_PACKET_BYTES)
        );
        let tls =
            ServerEndpoint::from_url("mysql://u:secret@h:3306/db?require_ssl=true").unwrap_err();
        assert!(!tls.is_transient());
        assert!(tls.to_string().contains("TLS"), "{tls}");
        let bad = ServerEndpoint::from_url("postgres://u:secret@h/db").unwrap_err();
        assert!(!bad.is_transient());
        assert!(!bad.to_string().contains("secret"), "{bad}");
    }

    #[test]
    fn io_parse_errors_are_definite_and_resets_transient() {
        let reset = mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        )));
        assert_eq!(classify(&reset), ErrorKind::Transient);
        let garbage = mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "bad event",
        )));
        assert_eq!(classify(&garbage), ErrorKind::Definite);
    }
}
