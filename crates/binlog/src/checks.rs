//! Startup check: is the server set up so that a replication stream carries everything
//! outbox-relay needs, and may our user read it?
//!
//! [`check_server`] connects with a normal connection and reports every wrong setting as
//! `setting / expected / actual` with a [`Severity`]:
//!
//! | setting | expected | severity when wrong |
//! |---|---|---|
//! | `log_bin` | `ON` | Error: no binlog, nothing to stream |
//! | `binlog_format` | `ROW` | Error: STATEMENT/MIXED carry SQL text, not rows |
//! | `binlog_row_image` | `FULL` | Error: MINIMAL/NOBLOB images lack columns |
//! | `binlog_row_metadata` | `FULL` | Warning (MINIMAL, MariaDB's default NO_LOG, or absent before MySQL 8.0.1 / MariaDB 10.5): column names then come from `information_schema`, which is racy against `ALTER TABLE` (a rename between the write and the lookup goes unnoticed when the column count stays the same) |
//! | `log_bin_compress` (MariaDB) | `OFF` | Error: compressed row events |
//! | grant `REPLICATION SLAVE` | on `*.*` | Error: the dump command is refused |
//! | grant `REPLICATION CLIENT` (MariaDB 10.5+: `BINLOG MONITOR`) | on `*.*` | Error: `SHOW BINARY LOGS` / `SHOW MASTER STATUS` are refused |
//!
//! Grants are read from `SHOW GRANTS FOR CURRENT_USER()`; `ALL PRIVILEGES ON *.*` counts.
//! Privileges that reach the user only through a role cannot be seen there, so a missing
//! grant of a user that has roles is a Warning instead of an Error.
//!
//! [`crate::BinlogReader::connect`] runs the same check and refuses to start (a definite
//! [`crate::BinlogError::ServerMisconfigured`]) when any Error-severity item is present.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::live::{session_tls, ServerEndpoint};
use crate::{BinlogError, Flavor};
use crate::{TlsOptions, TlsSession};

/// How long [`check_server`] waits for the connection.
const CHECK_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Who the server is: shown at startup (and by the relay's `check` command), so an operator
/// can tell which server a position belongs to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServerIdentity {
    /// `host:port` we connected to (as configured, not resolved).
    pub address: String,
    /// `SELECT VERSION()`, e.g. `10.11.6-MariaDB-0+deb12u1` or `8.4.3`.
    pub version: String,
    /// Server family, detected from the version string; decides GTID syntax and dump command.
    pub flavor: Flavor,
    /// `@@server_id` of the server (not ours).
    pub server_id: u32,
    /// `@@server_uuid` (MySQL only; MariaDB has none, so this is `None` there).
    pub server_uuid: Option<String>,
    /// `@@hostname`: with `server_id` the best identity a MariaDB server offers.
    pub hostname: Option<String>,
}

/// How bad a wrong setting is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The relay cannot work correctly with this: it refuses to start.
    Error,
    /// The relay works, with a limitation the operator should know about.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One setting or grant that is not as outbox-relay needs it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SettingCheck {
    /// The server variable (e.g. `binlog_format`) or grant (e.g. `grant REPLICATION SLAVE`).
    pub setting: String,
    /// What it should be.
    pub expected: String,
    /// What the server has (`absent` when the variable does not exist).
    pub actual: String,
    /// Whether this stops the relay (Error) or is only reported (Warning).
    pub severity: Severity,
}

impl fmt::Display for SettingCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, actual {} ({})",
            self.setting, self.expected, self.actual, self.severity
        )
    }
}

/// Result of [`check_server`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServerReport {
    /// Which server was checked.
    pub identity: ServerIdentity,
    /// The wrong settings and missing grants; empty when everything is as needed.
    pub checks: Vec<SettingCheck>,
    /// The TLS state of the checking connection (the relay's connections use the same
    /// settings): version and cipher, or plaintext, and what the certificate was verified
    /// against.
    pub tls: TlsSession,
}

impl ServerReport {
    /// The Error-severity items (the ones that stop the relay).
    pub fn errors(&self) -> impl Iterator<Item = &SettingCheck> {
        self.checks
            .iter()
            .filter(|check| check.severity == Severity::Error)
    }

    /// The Warning-severity items.
    pub fn warnings(&self) -> impl Iterator<Item = &SettingCheck> {
        self.checks
            .iter()
            .filter(|check| check.severity == Severity::Warning)
    }

    /// True when no Error-severity item is present.
    pub fn is_usable(&self) -> bool {
        self.errors().next().is_none()
    }
}

/// Connects to `url` (`mysql://user:pass@host:port`) and checks settings and grants (see the
/// module docs). Fails only when the server cannot be reached or queried; wrong settings are
/// reported in the [`ServerReport`].
pub async fn check_server(url: &str, tls: &TlsOptions) -> Result<ServerReport, BinlogError> {
    check_server_within(url, tls, CHECK_CONNECT_TIMEOUT).await
}

/// Like [`check_server`], giving up after `timeout` for connecting and again for the
/// check's queries (a half-open connection must not hang the caller, e.g. the relay's
/// server check before a reconnect): a server that stops answering is the transient
/// [`BinlogError::ConnectTimeout`].
pub async fn check_server_within(
    url: &str,
    tls: &TlsOptions,
    timeout: Duration,
) -> Result<ServerReport, BinlogError> {
    let endpoint = ServerEndpoint::new(url, tls)?;
    let mut conn = endpoint.connect(timeout, "startup check").await?;
    let inspect = async {
        let mut report = inspect_server(&mut conn, &endpoint).await?;
        report.tls = session_tls(&mut conn, tls)
            .await
            .map_err(|error| endpoint.connect_error(error, "startup check"))?;
        Ok(report)
    };
    let report = match tokio::time::timeout(timeout, inspect).await {
        Ok(report) => report,
        Err(_) => Err(BinlogError::ConnectTimeout {
            server: endpoint.address.clone(),
            position: "startup check".into(),
            waited: timeout,
        }),
    };
    // A server that stopped answering does not answer COM_QUIT either.
    let _ = tokio::time::timeout(timeout, conn.disconnect()).await;
    report
}

/// Reads identity, settings and grants on an open connection.
pub(crate) async fn inspect_server(
    conn: &mut Conn,
    endpoint: &ServerEndpoint,
) -> Result<ServerReport, BinlogError> {
    let position = "startup check";
    let query_error = |error| endpoint.connect_error(error, position);
    let identity_row: Option<(String, u32, Option<String>)> = conn
        .query_first("SELECT VERSION(), @@server_id, @@hostname")
        .await
        .map_err(query_error)?;
    let Some((version, server_id, hostname)) = identity_row else {
        return Err(BinlogError::Protocol {
            server: endpoint.address.clone(),
            position: position.into(),
            message: "SELECT VERSION() returned no row".into(),
        });
    };
    let flavor = flavor_from_version(&version);
    let variables: Vec<(String, String)> = conn
        .query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', \
             'binlog_row_image', 'binlog_row_metadata', 'log_bin_compress', 'server_uuid')",
        )
        .await
        .map_err(query_error)?;
    let variables: BTreeMap<String, String> = variables
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value))
        .collect();
    let grants: Vec<String> = conn
        .query("SHOW GRANTS FOR CURRENT_USER()")
        .await
        .map_err(query_error)?;
    let server_uuid = match flavor {
        Flavor::Mysql => variables.get("server_uuid").cloned(),
        Flavor::Mariadb => None,
    };
    let mut checks = settings_checks(flavor, &variables);
    checks.extend(grant_checks(flavor, &version, &grants));
    Ok(ServerReport {
        identity: ServerIdentity {
            address: endpoint.address.clone(),
            version,
            flavor,
            server_id,
            server_uuid,
            hostname,
        },
        checks,
        tls: TlsSession::default(),
    })
}

/// MariaDB says so in its version string (`10.11.6-MariaDB...`, or `5.5.5-10.11.6-MariaDB`
/// in the handshake); everything else is treated as MySQL.
pub(crate) fn flavor_from_version(version: &str) -> Flavor {
    if version.to_ascii_lowercase().contains("mariadb") {
        Flavor::Mariadb
    } else {
        Flavor::Mysql
    }
}

/// `(major, minor, patch)` of a version string like `8.4.3-log` or `10.11.6-MariaDB`
/// (missing or unparsable parts are 0).
pub(crate) fn version_numbers(version: &str) -> (u32, u32, u32) {
    let version = version.strip_prefix("5.5.5-").unwrap_or(version);
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

fn settings_checks(flavor: Flavor, variables: &BTreeMap<String, String>) -> Vec<SettingCheck> {
    let mut checks = Vec::new();
    let actual = |name: &str| {
        variables
            .get(name)
            .cloned()
            .unwrap_or_else(|| "absent".to_owned())
    };
    let mut require = |name: &str, expected: &str, accepted: &[&str], severity: Severity| {
        let value = actual(name);
        if !accepted.iter().any(|ok| value.eq_ignore_ascii_case(ok)) {
            checks.push(SettingCheck {
                setting: name.to_owned(),
                expected: expected.to_owned(),
                actual: value,
                severity,
            });
        }
    };
    require("log_bin", "ON", &["ON", "1"], Severity::Error);
    require("binlog_format", "ROW", &["ROW"], Severity::Error);
    require("binlog_row_image", "FULL", &["FULL"], Severity::Error);
    require("binlog_row_metadata", "FULL", &["FULL"], Severity::Warning);
    if flavor == Flavor::Mariadb {
        require("log_bin_compress", "OFF", &["OFF", "0"], Severity::Error);
    }
    checks
}

/// The global privileges of the current user, from `SHOW GRANTS` lines.
#[derive(Debug, Default, PartialEq, Eq)]
struct GlobalPrivileges {
    /// Upper-case privilege names granted `ON *.*`.
    privileges: BTreeSet<String>,
    /// `ALL [PRIVILEGES] ON *.*` was granted.
    all: bool,
    /// Roles granted to the user (their privileges are not visible in `SHOW GRANTS`).
    roles: Vec<String>,
}

impl GlobalPrivileges {
    fn parse(grant_lines: &[String]) -> GlobalPrivileges {
        let mut result = GlobalPrivileges::default();
        for line in grant_lines {
            let Some(rest) = strip_prefix_ignore_case(line.trim(), "GRANT ") else {
                continue;
            };
            let upper = rest.to_ascii_uppercase();
            match upper.find(" ON ") {
                Some(on) => {
                    let target_and_more = rest[on + 4..].trim_start();
                    let target = target_and_more
                        .split_whitespace()
                        .next()
                        .unwrap_or_default();
                    if target != "*.*" {
                        continue;
                    }
                    for privilege in upper[..on].split(',') {
                        let privilege = privilege.split_whitespace().collect::<Vec<_>>().join(" ");
                        if privilege == "ALL" || privilege == "ALL PRIVILEGES" {
                            result.all = true;
                        }
                        result.privileges.insert(privilege);
                    }
                }
                None => {
                    if let Some(to) = upper.find(" TO ") {
                        result.roles.push(rest[..to].trim().to_owned());
                    }
                }
            }
        }
        result
    }

    fn has_any(&self, names: &[&str]) -> bool {
        self.all || names.iter().any(|name| self.privileges.contains(*name))
    }
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        text.get(prefix.len()..)
    } else {
        None
    }
}

fn grant_checks(flavor: Flavor, version: &str, grant_lines: &[String]) -> Vec<SettingCheck> {
    let granted = GlobalPrivileges::parse(grant_lines);
    let mariadb_10_5_or_later = flavor == Flavor::Mariadb && version_numbers(version) >= (10, 5, 0);
    let monitor_grant: (&str, &[&str]) = if mariadb_10_5_or_later {
        ("BINLOG MONITOR", &["BINLOG MONITOR", "REPLICATION CLIENT"])
    } else {
        ("REPLICATION CLIENT", &["REPLICATION CLIENT"])
    };
    let needed: [(&str, &[&str]); 2] = [
        (
            "REPLICATION SLAVE",
            &["REPLICATION SLAVE", "REPLICATION REPLICA"],
        ),
        monitor_grant,
    ];
    let mut checks = Vec::new();
    for (name, accepted) in needed {
        if granted.has_any(accepted) {
            continue;
        }
        let (actual, severity) = if granted.roles.is_empty() {
            ("not granted".to_owned(), Severity::Error)
        } else {
            (
                format!(
                    "not granted directly (roles {} may grant it; not verified)",
                    granted.roles.join(", ")
                ),
                Severity::Warning,
            )
        };
        checks.push(SettingCheck {
            setting: format!("grant {name}"),
            expected: "granted ON *.*".to_owned(),
            actual,
            severity,
        });
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| line.to_string()).collect()
    }

    #[test]
    fn flavor_and_version_numbers_come_from_the_version_string() {
        assert_eq!(
            flavor_from_version("10.11.6-MariaDB-0+deb12u1"),
            Flavor::Mariadb
        );
        assert_eq!(flavor_from_version("8.4.3"), Flavor::Mysql);
        assert_eq!(version_numbers("5.5.5-10.11.6-MariaDB"), (10, 11, 6));
        assert_eq!(version_numbers("8.0.36-log"), (8, 0, 36));
    }

    #[test]
    fn all_privileges_on_star_counts_for_every_grant() {
        let checks = grant_checks(
            Flavor::Mariadb,
            "10.11.6-MariaDB",
            &lines(&["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"]),
        );
        assert_eq!(checks, vec![]);
    }

    #[test]
    fn grants_on_one_database_do_not_count() {
        let checks = grant_checks(
            Flavor::Mysql,
            "8.0.36",
            &lines(&[
                "GRANT USAGE ON *.* TO `relay`@`%`",
                "GRANT ALL PRIVILEGES ON `shop`.* TO `relay`@`%`",
            ]),
        );
        let settings: Vec<_> = checks.iter().map(|c| c.setting.as_str()).collect();
        assert_eq!(
            settings,
            vec!["grant REPLICATION SLAVE", "grant REPLICATION CLIENT"]
        );
        assert!(checks.iter().all(|c| c.severity == Severity::Error));
    }

    #[test]
    fn mariadb_needs_binlog_monitor_and_accepts_the_old_name() {
        let granted = lines(&["GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `relay`@`%`"]);
        assert_eq!(
            grant_checks(Flavor::Mariadb, "10.11.6-MariaDB", &granted),
            vec![]
        );
        let old_name =
            lines(&["GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`"]);
        assert_eq!(
            grant_checks(Flavor::Mariadb, "10.6.1-MariaDB", &old_name),
            vec![]
        );
        let missing = grant_checks(
            Flavor::Mariadb,
            "10.11.6-MariaDB",
            &lines(&["GRANT REPLICATION SLAVE ON *.* TO `relay`@`%`"]),
        );
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].setting, "grant BINLOG MONITOR");
        assert_eq!(missing[0].actual, "not granted");
    }

    #[test]
    fn roles_turn_missing_grants_into_warnings() {
        let checks = grant_checks(
            Flavor::Mysql,
            "8.0.36",
            &lines(&[
                "GRANT USAGE ON *.* TO `relay`@`%`",
                "GRANT `replicator`@`%` TO `relay`@`%`",
            ]),
        );
        assert_eq!(checks.len(), 2);
        assert!(checks.iter().all(|c| c.severity == Severity::Warning));
        assert!(
            checks[0].actual.contains("`replicator`@`%`"),
            "{}",
            checks[0].actual
        );
    }

    #[test]
    fn settings_report_expected_and_actual() {
        let variables: BTreeMap<String, String> = [
            ("log_bin", "ON"),
            ("binlog_format", "STATEMENT"),
            ("binlog_row_image", "FULL"),
            ("binlog_row_metadata", "MINIMAL"),
            ("log_bin_compress", "ON"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let checks = settings_checks(Flavor::Mariadb, &variables);
        let rendered: Vec<String> = checks.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            rendered,
            vec![
                "binlog_format: expected ROW, actual STATEMENT (error)",
                "binlog_row_metadata: expected FULL, actual MINIMAL (warning)",
                "log_bin_compress: expected OFF, actual ON (error)",
            ]
        );
        // MySQL 5.7 has no binlog_row_metadata and no log_bin_compress.
        let mysql_57: BTreeMap<String, String> = [
            ("log_bin", "ON"),
            ("binlog_format", "ROW"),
            ("binlog_row_image", "FULL"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let checks = settings_checks(Flavor::Mysql, &mysql_57);
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].setting, "binlog_row_metadata");
        assert_eq!(checks[0].actual, "absent");
        assert_eq!(checks[0].severity, Severity::Warning);
    }
}
