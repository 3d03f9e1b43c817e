//! Which servers can run the claim (`FOR UPDATE SKIP LOCKED`).

use mysql_async::prelude::Queryable;

use crate::error::PollError;

/// A server's version as `SELECT VERSION()` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerVersion {
    /// The text, e.g. `10.11.19-MariaDB-0+deb12u1-log` or `8.4.3`.
    pub text: String,
    /// Whether it is MariaDB.
    pub mariadb: bool,
    /// Major and minor version.
    pub major_minor: (u32, u32),
}

impl ServerVersion {
    /// Parses `SELECT VERSION()`; `None` when it starts with no `major.minor`.
    pub fn parse(text: &str) -> Option<Self> {
        let mariadb = text.to_ascii_lowercase().contains("mariadb");
        // MariaDB's version may carry a MySQL-looking prefix: the handshake's old
        // `5.5.5-`, or one a server was given for clients that check it (`--version=
        // 5.7.19-10.11-MariaDB-...`, as the test harness does for Debezium). The MariaDB
        // version is the one after it.
        let version = match text.split_once('-') {
            Some((_, rest)) if mariadb && rest.starts_with(|c: char| c.is_ascii_digit()) => rest,
            _ => text,
        };
        let mut numbers = version
            .split(|c: char| !c.is_ascii_digit())
            .filter(|part| !part.is_empty())
            .map(|part| part.parse::<u32>());
        let major = numbers.next()?.ok()?;
        let minor = numbers.next()?.ok()?;
        Some(Self {
            text: text.to_owned(),
            mariadb,
            major_minor: (major, minor),
        })
    }

    /// MySQL 8.0+ and MariaDB 10.6+ have `SKIP LOCKED`.
    pub fn supports_skip_locked(&self) -> bool {
        if self.mariadb {
            self.major_minor >= (10, 6)
        } else {
            self.major_minor >= (8, 0)
        }
    }
}

/// Refuses a server without `SKIP LOCKED`, naming its version.
pub async fn check_server(conn: &mut mysql_async::Conn) -> Result<ServerVersion, PollError> {
    let text: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(|source| PollError::Mysql {
            table: String::from("(server)"),
            operation: "reading the server version",
            source,
        })?;
    let text = text.unwrap_or_default();
    match ServerVersion::parse(&text) {
        Some(version) if version.supports_skip_locked() => Ok(version),
        _ => Err(PollError::UnsupportedServer { version: text }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_locked_needs_mysql_8_or_mariadb_10_6() {
        for (text, supported) in [
            ("10.11.19-MariaDB-0+deb12u1-log", true),
            ("10.6.0-MariaDB", true),
            ("10.5.23-MariaDB-log", false),
            ("5.5.5-10.11.6-MariaDB", true),
            ("5.7.19-10.11-MariaDB-debezium-harness", true),
            ("5.7.19-10.5-MariaDB", false),
            ("8.0.36", true),
            ("8.4.3", true),
            ("5.7.44-log", false),
        ] {
            let version = ServerVersion::parse(text).expect("parses");
            assert_eq!(version.supports_skip_locked(), supported, "{text}");
        }
        assert_eq!(ServerVersion::parse("unknown"), None);
    }
}
