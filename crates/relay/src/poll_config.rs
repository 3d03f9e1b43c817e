//! `[source] mode` and `[source.poll]`: the polling source (crate `outbox-poll`), for
//! servers whose binlog the relay may not read. The outbox table is the queue: rows are
//! claimed under a lease and a fencing token, published, and marked SENT (or DEAD).

use serde::Deserialize;

use crate::config::ConfigError;

/// Where the relay reads events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceMode {
    /// Tail the binlog (REPLICATION SLAVE and REPLICATION CLIENT grants): lowest latency,
    /// no load on the outbox table, a checkpoint in `[checkpoint]`.
    #[default]
    Binlog,
    /// Poll the outbox table (SELECT and UPDATE on it, DELETE for cleanup): for servers
    /// where replication grants are not to be had. The table's poll-mode columns hold the
    /// state; no checkpoint store.
    Poll,
}

/// `[source.poll]`: the polling source's timing, limits and column names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollConfig {
    /// How long the poller waits before claiming again after a claim that found fewer rows
    /// than `batch_size` (a full claim is followed by the next at once): the latency floor
    /// of an idle table, and its query rate.
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// Rows per claim (one transaction); a claim holds their row locks briefly. Fewer rows
    /// per claim cost the database more per row: a drain measured 19 700 events/s with
    /// 2 000-row claims, 15 900 with 500 (docs/benchmarks.md).
    #[serde(default = "default_batch_size")]
    pub batch_size: u32,
    /// How long a claim holds its rows before another relay may take them over. The relay
    /// renews the lease of claims it is still publishing every third of it, so it only
    /// runs out when the relay died or lost the database: then the rows are claimed again
    /// (same ids: duplicates, never losses).
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Publish attempts (claims) after which a row whose publish keeps failing becomes
    /// DEAD (`outbox-relay poll replay` revives it).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// First delay before a failed row is due again; doubles per attempt, with full jitter.
    #[serde(default = "default_retry_initial_backoff_ms")]
    pub retry_initial_backoff_ms: u64,
    /// Bound of that delay.
    #[serde(default = "default_retry_max_backoff_ms")]
    pub retry_max_backoff_ms: u64,
    /// SENT rows older than this are deleted by the relay (0: never; then a job of yours
    /// must delete them, or the table grows without bound).
    #[serde(default = "default_sent_retention_s")]
    pub sent_retention_s: u64,
    /// Rows deleted per statement by the cleanup (short locks).
    #[serde(default = "default_cleanup_batch")]
    pub cleanup_batch: u32,
    /// The poll-mode state columns, if named otherwise than outbox-poll's DDL names them.
    #[serde(default)]
    pub columns: PollColumnNames,
}

/// `[source.poll.columns]`: names of the poll-mode state columns.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollColumnNames {
    /// PENDING / PROCESSING / SENT / DEAD.
    #[serde(default = "default_status")]
    pub status: String,
    /// Claims so far.
    #[serde(default = "default_attempts")]
    pub attempts: String,
    /// When a PENDING row is due.
    #[serde(default = "default_next_attempt_at")]
    pub next_attempt_at: String,
    /// The lease.
    #[serde(default = "default_locked_until")]
    pub locked_until: String,
    /// The fencing token.
    #[serde(default = "default_claim_token")]
    pub claim_token: String,
    /// Why the last attempt failed.
    #[serde(default = "default_last_error")]
    pub last_error: String,
    /// When the row was marked SENT.
    #[serde(default = "default_sent_at")]
    pub sent_at: String,
    /// Insertion order (AUTO_INCREMENT).
    #[serde(default = "default_sequence")]
    pub sequence: String,
}

impl Default for PollConfig {
    fn default() -> Self {
        Self {
            interval_ms: default_interval_ms(),
            batch_size: default_batch_size(),
            lease_ms: default_lease_ms(),
            max_attempts: default_max_attempts(),
            retry_initial_backoff_ms: default_retry_initial_backoff_ms(),
            retry_max_backoff_ms: default_retry_max_backoff_ms(),
            sent_retention_s: default_sent_retention_s(),
            cleanup_batch: default_cleanup_batch(),
            columns: PollColumnNames::default(),
        }
    }
}

impl Default for PollColumnNames {
    fn default() -> Self {
        let columns = outbox_poll::PollColumns::default();
        Self {
            status: columns.status,
            attempts: columns.attempts,
            next_attempt_at: columns.next_attempt_at,
            locked_until: columns.locked_until,
            claim_token: columns.claim_token,
            last_error: columns.last_error,
            sent_at: columns.sent_at,
            sequence: columns.sequence,
        }
    }
}

fn default_interval_ms() -> u64 {
    100
}
fn default_batch_size() -> u32 {
    2_000
}
fn default_lease_ms() -> u64 {
    30_000
}
fn default_max_attempts() -> u32 {
    10
}
fn default_retry_initial_backoff_ms() -> u64 {
    1_000
}
fn default_retry_max_backoff_ms() -> u64 {
    300_000
}
fn default_sent_retention_s() -> u64 {
    7 * 24 * 3600
}
fn default_cleanup_batch() -> u32 {
    1_000
}
fn default_status() -> String {
    PollColumnNames::default_columns().status
}
fn default_attempts() -> String {
    PollColumnNames::default_columns().attempts
}
fn default_next_attempt_at() -> String {
    PollColumnNames::default_columns().next_attempt_at
}
fn default_locked_until() -> String {
    PollColumnNames::default_columns().locked_until
}
fn default_claim_token() -> String {
    PollColumnNames::default_columns().claim_token
}
fn default_last_error() -> String {
    PollColumnNames::default_columns().last_error
}
fn default_sent_at() -> String {
    PollColumnNames::default_columns().sent_at
}
fn default_sequence() -> String {
    PollColumnNames::default_columns().sequence
}

impl PollColumnNames {
    fn default_columns() -> outbox_poll::PollColumns {
        outbox_poll::PollColumns::default()
    }

    /// The names as the poller takes them.
    pub fn poll_columns(&self) -> outbox_poll::PollColumns {
        outbox_poll::PollColumns {
            status: self.status.clone(),
            attempts: self.attempts.clone(),
            next_attempt_at: self.next_attempt_at.clone(),
            locked_until: self.locked_until.clone(),
            claim_token: self.claim_token.clone(),
            last_error: self.last_error.clone(),
            sent_at: self.sent_at.clone(),
            sequence: self.sequence.clone(),
        }
    }

    fn named(&self) -> [(&'static str, &str); 8] {
        [
            ("status", &self.status),
            ("attempts", &self.attempts),
            ("next_attempt_at", &self.next_attempt_at),
            ("locked_until", &self.locked_until),
            ("claim_token", &self.claim_token),
            ("last_error", &self.last_error),
            ("sent_at", &self.sent_at),
            ("sequence", &self.sequence),
        ]
    }
}

impl PollConfig {
    /// The claim's lease.
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.lease_ms)
    }

    /// The wait after a claim that was not full.
    pub fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.interval_ms)
    }

    /// Checks ranges and names (also in binlog mode, so a typo is heard of before it
    /// matters); the message names the key and the fix.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: format!("source.poll.{key}"),
            message,
        };
        if self.interval_ms == 0 {
            return Err(invalid(
                "interval_ms",
                "must be at least 1: 0 would claim in a busy loop on an idle table; the default is 100".into(),
            ));
        }
        if !(1..=10_000).contains(&self.batch_size) {
            return Err(invalid(
                "batch_size",
                format!(
                    "{} is outside 1..=10000 (a claim locks its rows in one transaction); the default is {}",
                    self.batch_size,
                    default_batch_size()
                ),
            ));
        }
        if self.lease_ms < 1_000 {
            return Err(invalid(
                "lease_ms",
                format!(
                    "{} ms is too short: the relay renews it every third, and a claim's publish must fit; use at least 1000 (default {})",
                    self.lease_ms,
                    default_lease_ms()
                ),
            ));
        }
        if self.max_attempts == 0 {
            return Err(invalid(
                "max_attempts",
                "must be at least 1 (the first publish is an attempt)".into(),
            ));
        }
        if self.retry_initial_backoff_ms == 0
            || self.retry_max_backoff_ms < self.retry_initial_backoff_ms
        {
            return Err(invalid(
                "retry_max_backoff_ms",
                "needs retry_initial_backoff_ms >= 1 and retry_max_backoff_ms >= retry_initial_backoff_ms".into(),
            ));
        }
        if self.cleanup_batch == 0 {
            return Err(invalid(
                "cleanup_batch",
                format!(
                    "must be at least 1; the default is {}",
                    default_cleanup_batch()
                ),
            ));
        }
        let mut seen: Vec<&str> = Vec::new();
        for (key, name) in self.columns.named() {
            if name.is_empty() || name.len() > 64 {
                return Err(invalid(
                    &format!("columns.{key}"),
                    format!("`{name}` is not a column name (1 to 64 characters)"),
                ));
            }
            if seen.contains(&name) {
                return Err(invalid(
                    &format!("columns.{key}"),
                    format!("`{name}` names another poll column too; each needs its own column"),
                ));
            }
            seen.push(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_name_the_ddls_columns() {
        let config = PollConfig::default();
        config.validate().expect("defaults are valid");
        assert_eq!(
            config.columns.poll_columns(),
            outbox_poll::PollColumns::default()
        );
        let parsed: PollConfig = toml::from_str("").expect("all keys have defaults");
        assert_eq!(parsed, config);
    }

    #[test]
    fn out_of_range_values_name_the_key() {
        for (text, key) in [
            ("interval_ms = 0", "source.poll.interval_ms"),
            ("batch_size = 0", "source.poll.batch_size"),
            ("batch_size = 10001", "source.poll.batch_size"),
            ("lease_ms = 999", "source.poll.lease_ms"),
            ("max_attempts = 0", "source.poll.max_attempts"),
            (
                "retry_initial_backoff_ms = 10\nretry_max_backoff_ms = 5",
                "source.poll.retry_max_backoff_ms",
            ),
            ("cleanup_batch = 0", "source.poll.cleanup_batch"),
            (
                "[columns]\nstatus = \"poll_seq\"",
                "source.poll.columns.sequence",
            ),
            ("[columns]\nstatus = \"\"", "source.poll.columns.status"),
        ] {
            let config: PollConfig = toml::from_str(text).expect(text);
            match config.validate() {
                Err(ConfigError::Invalid { key: got, .. }) => assert_eq!(got, key, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(toml::from_str::<PollConfig>("lease = 5").is_err());
    }

    const POLL_MODE: &str = r#"
[source]
url = "mysql://relay@127.0.0.1:3306"
mode = "poll"

[[outbox]]
table = "shop.outbox"

[kafka]
brokers = "127.0.0.1:9092"
"#;

    #[test]
    fn poll_mode_needs_no_checkpoint_and_refuses_one_it_would_not_use() {
        let config =
            crate::config::RelayConfig::parse(POLL_MODE).expect("valid without [checkpoint]");
        assert_eq!(config.source.mode, SourceMode::Poll);
        // Binlog mode still asks for its checkpoint file.
        let binlog = POLL_MODE.replace("mode = \"poll\"", "");
        let error = crate::config::RelayConfig::parse(&binlog)
            .unwrap_err()
            .to_string();
        assert!(error.contains("checkpoint.path"), "{error}");
        for (extra, key) in [
            ("[checkpoint]\npath = \"/tmp/c.json\"", "checkpoint.path"),
            ("[checkpoint]\nstore = \"kafka\"", "checkpoint.store"),
        ] {
            let error = crate::config::RelayConfig::parse(&format!("{POLL_MODE}\n{extra}"))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(key) && error.contains("outbox table"),
                "{error}"
            );
        }
        let connector = format!("{POLL_MODE}\n[checkpoint]\nconnector = \"orders\"");
        assert_eq!(
            crate::config::RelayConfig::parse(&connector)
                .expect("the connector name is used")
                .checkpoint
                .connector,
            "orders"
        );
        let exactly_once = POLL_MODE.replace(
            "brokers = \"127.0.0.1:9092\"",
            "brokers = \"127.0.0.1:9092\"\ndelivery = \"exactly_once\"",
        );
        let error = crate::config::RelayConfig::parse(&exactly_once)
            .unwrap_err()
            .to_string();
        assert!(error.contains("kafka.delivery"), "{error}");
        let typo = POLL_MODE.replace("mode = \"poll\"", "mode = \"polling\"");
        assert!(crate::config::RelayConfig::parse(&typo).is_err());
    }

    #[test]
    fn fill_from_table_is_refused_where_it_cannot_keep_its_promise() {
        let fill = "mode = \"binlog\"\non_purged = \"fill_from_table\"";
        let binlog = format!(
            "{}\n[checkpoint]\npath = \"/tmp/c.json\"",
            POLL_MODE.replace("mode = \"poll\"", fill)
        );
        let config = crate::config::RelayConfig::parse(&binlog).expect("valid in binlog mode");
        assert_eq!(
            config.source.on_purged,
            crate::config::OnPurged::FillFromTable
        );
        assert_eq!(config.source.fill_margin_s, 1800);
        let exactly_once = format!(
            "{}\n[checkpoint]\nstore = \"kafka\"\ntopic = \"outbox-relay-checkpoints\"",
            POLL_MODE.replace("mode = \"poll\"", fill).replace(
                "brokers = \"127.0.0.1:9092\"",
                "brokers = \"127.0.0.1:9092\"\ndelivery = \"exactly_once\"",
            )
        );
        let error = crate::config::RelayConfig::parse(&exactly_once)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("source.on_purged") && error.contains("exactly_once"),
            "{error}"
        );
        let polling = POLL_MODE.replace(
            "mode = \"poll\"",
            "mode = \"poll\"\non_purged = \"fill_from_table\"",
        );
        let error = crate::config::RelayConfig::parse(&polling)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("source.on_purged") && error.contains("reads no binlog"),
            "{error}"
        );
    }
}
