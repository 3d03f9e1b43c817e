//! `[ha]`: standby failover. Several relays with the same connector name
//! (`checkpoint.connector`) run; exactly one (the owner of the lease topic's partition 0 in
//! the consumer group `outbox-relay-lease-<connector>`) publishes, the others wait. See
//! [`crate::ha`] and `outbox_kafka::lease`.

use serde::Deserialize;

use crate::config::ConfigError;

/// Default of `ha.lease_topic`.
pub const DEFAULT_LEASE_TOPIC: &str = "outbox-relay-lease";

/// Default of `ha.session_timeout_ms`.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 10_000;

/// `[ha]`: standby failover through Kafka's group coordinator.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaConfig {
    /// Off (the default): this relay publishes alone, no lease. On: it joins its
    /// connector's lease group and publishes only while it leads.
    #[serde(default)]
    pub enabled: bool,
    /// The one-partition topic whose partition 0 is the lease (one topic can serve many
    /// connectors: each has its own group). Created when missing if `kafka.create_topics`,
    /// else it must exist.
    #[serde(default = "default_lease_topic")]
    pub lease_topic: String,
    /// How long a silent leader (crashed, paused, cut off from Kafka) keeps leadership
    /// before a standby takes over: the failover time is about this plus the new leader's
    /// start. The broker allows `group.min.session.timeout.ms` (6 s by default) to
    /// `group.max.session.timeout.ms` (30 min).
    #[serde(default = "default_session_timeout_ms")]
    pub session_timeout_ms: u64,
}

impl Default for HaConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            lease_topic: default_lease_topic(),
            session_timeout_ms: DEFAULT_SESSION_TIMEOUT_MS,
        }
    }
}

fn default_lease_topic() -> String {
    DEFAULT_LEASE_TOPIC.to_owned()
}

fn default_session_timeout_ms() -> u64 {
    DEFAULT_SESSION_TIMEOUT_MS
}

/// Kafka topic names: 1 to 249 of `[a-zA-Z0-9._-]`.
fn is_valid_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl HaConfig {
    /// Checks the `[ha]` keys (also when disabled, so a typo is heard of before it matters).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.to_owned(),
            message,
        };
        if !is_valid_topic_name(&self.lease_topic) {
            return Err(invalid(
                "ha.lease_topic",
                format!(
                    "`{}` is not a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, `.`, `_`, `-`); the default is `{DEFAULT_LEASE_TOPIC}`",
                    self.lease_topic
                ),
            ));
        }
        if !(1_000..=1_800_000).contains(&self.session_timeout_ms) {
            return Err(invalid(
                "ha.session_timeout_ms",
                format!(
                    "{} is outside 1000..=1800000 (the broker's group.min/max.session.timeout.ms default to 6000 and 1800000); the default is {DEFAULT_SESSION_TIMEOUT_MS}",
                    self.session_timeout_ms
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_the_key() {
        HaConfig::default().validate().unwrap();
        let bad_topic = HaConfig {
            lease_topic: "has space".to_owned(),
            ..HaConfig::default()
        };
        let message = bad_topic.validate().unwrap_err().to_string();
        assert!(message.contains("ha.lease_topic"), "{message}");
        for timeout in [0, 999, 1_800_001] {
            let bad = HaConfig {
                session_timeout_ms: timeout,
                ..HaConfig::default()
            };
            let message = bad.validate().unwrap_err().to_string();
            assert!(message.contains("ha.session_timeout_ms"), "{message}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let error = toml::from_str::<HaConfig>("enabled = true\nsession_timeout = 5\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("session_timeout"), "{error}");
        let parsed: HaConfig =
            toml::from_str("enabled = true\nlease_topic = \"t\"\nsession_timeout_ms = 6000\n")
                .unwrap();
        assert!(parsed.enabled);
        assert_eq!(parsed.session_timeout_ms, 6000);
    }
}
