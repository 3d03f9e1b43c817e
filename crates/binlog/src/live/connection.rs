//! Opening connections to the server, and turning the client library's errors into
//! [`BinlogError`]s that name the server and the position.
//!
//! Every connection the live source opens (the replication stream, the side connection for
//! metadata lookups, the startup check) goes through [`ServerEndpoint`], so all of them get
//! the same options: a 1 GiB client `max_allowed_packet` (rows of tens of MiB must fit in one
//! packet), TCP keepalive, and no switch to a Unix socket (the address in errors stays the one
//! the operator configured).

use std::time::Duration;

use mysql_async::{Conn, Opts, OptsBuilder};

use crate::BinlogError;

/// The largest packet the server may send: 1 GiB, the protocol's and the server's maximum.
const CLIENT_MAX_ALLOWED_PACKET_BYTES: usize = 1 << 30;

/// How often the OS probes an idle replication socket.
const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// Where and how to connect: parsed once from the URL.
#[derive(Debug, Clone)]
pub(crate) struct ServerEndpoint {
    /// Connection options for every connection to this server (see the module docs).
    pub(crate) opts: Opts,
    /// `host:port`, used in every error and log line (never the password).
    pub(crate) address: String,
}

impl ServerEndpoint {
    /// Parses a `mysql://user:pass@host:port` URL.
    pub(crate) fn from_url(url: &str) -> Result<ServerEndpoint, BinlogError> {
        let parsed = Opts::from_url(url).map_err(|error| BinlogError::InvalidReaderConfig {
            server: url_without_password(url),
            field: "url".into(),
            message: error.to_string(),
        })?;
        let address = format!("{}:{}", parsed.ip_or_hostname(), parsed.tcp_port());
        if parsed.ssl_opts().is_some() {
            // Neither the replication connection nor this build of the client library speaks
            // TLS: refusing here beats a handshake error on every connect.
            return Err(BinlogError::InvalidReaderConfig {
                server: address,
                field: "url".into(),
                message: "TLS (`require_ssl`) is not supported; connect over a trusted network \
                          or through a TLS tunnel (e.g. stunnel) on the relay's host"
                    .into(),
            });
        }
        let opts: Opts = OptsBuilder::from_opts(parsed)
            .max_allowed_packet(Some(CLIENT_MAX_ALLOWED_PACKET_BYTES))
            .tcp_keepalive(Some(TCP_KEEPALIVE_INTERVAL))
            .prefer_socket(false)
            .into();
        Ok(ServerEndpoint { opts, address })
    }

    /// Opens one connection, failing with a transient error after `timeout`.
    /// `position` only labels errors.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
        position: &str,
    ) -> Result<Conn, BinlogError> {
        match tokio::time::timeout(timeout, Conn::new(self.opts.clone())).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(error)) => Err(self.connect_error(error, position)),
            Err(_elapsed) => Err(BinlogError::ConnectTimeout {
                server: self.address.clone(),
                position: position.to_owned(),
                waited: timeout,
            }),
        }
    }

    /// Maps an error of opening a connection or of a setup query.
    pub(crate) fn connect_error(&self, error: mysql_async::Error, position: &str) -> BinlogError {
        match classify(&error) {
            ErrorKind::Transient => BinlogError::Connection {
                server: self.address.clone(),
                message: format!("{error} (stream at {position})"),
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
                message: error.to_string(),
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
            mysql_async::Error::Server(server_error) => {
                if is_access_denied_code(server_error.code) {
                    BinlogError::AccessDenied {
                        server,
                        position,
                        message: format!("error {}: {}", server_error.code, server_error.message),
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
        // TLS errors (only with the TLS features of mysql_async).
        #[allow(unreachable_patterns)]
        Error::Io(_) => ErrorKind::Transient,
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

/// The URL with any password replaced by `***`, safe for error messages.
fn url_without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _password)) => {
                    format!("{}{}:***{}", &url[..scheme_end + 3], user, &url[at..])
                }
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_hidden_in_urls() {
        assert_eq!(
            url_without_password("mysql://relay:secret@db:3306/x"),
            "mysql://relay:***@db:3306/x"
        );
        assert_eq!(
            url_without_password("mysql://relay@db:3306"),
            "mysql://relay@db:3306"
        );
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
