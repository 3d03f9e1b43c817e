//! The librdkafka client context of the relay's producer and admin client: librdkafka's log
//! lines and global errors go to `tracing`, and repeats are rate-limited.
//!
//! The context also keeps the last broker failure librdkafka reported ([`ClientFailure`]):
//! a request that fails says only `BrokerTransportFailure`, while the reason (`SASL
//! authentication error: ...`, `certificate verify failed`) comes through the error callback.
//! The sink's startup and `check` name it, and stop at once on a [`ClientFailure::is_definite`]
//! one.
//!
//! While a broker is down librdkafka reports the same condition (`Connection refused`,
//! `AllBrokersDown`) every few milliseconds per client; the relay already logs what matters
//! (delivery failures, resends, producer rebuilds) through its own events. So each distinct
//! message is logged at most once per [`REPEAT_INTERVAL`], with the count of suppressed
//! repeats.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Least time between two log lines with the same text.
pub const REPEAT_INTERVAL: Duration = Duration::from_secs(30);

/// Most distinct messages remembered; the memory is cleared when it is full.
const REMEMBERED_MESSAGES: usize = 256;

/// libcurl's words for a token endpoint it could not reach (as librdkafka passes them on).
const TOKEN_ENDPOINT_UNREACHABLE: [&str; 5] = [
    "Failed to connect",
    "Could not connect",
    "Could not resolve",
    "timed out",
    "Connection reset",
];

/// A failure to talk to a broker, as librdkafka's error callback reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFailure {
    /// librdkafka's error code (`Authentication`, `SSL`, `BrokerTransportFailure`, ...).
    pub code: RDKafkaErrorCode,
    /// librdkafka's own words, e.g. `sasl_ssl://127.0.0.1:9094/bootstrap: SASL authentication
    /// error: Authentication failed during authentication due to invalid credentials with
    /// SASL mechanism SCRAM-SHA-512`: the only place that says what is wrong.
    pub reason: String,
}

impl ClientFailure {
    /// True when retrying cannot help: the broker refused the credentials, or its
    /// certificate did not verify. Both need the operator to change the config (or the
    /// broker's), so the relay stops at once instead of retrying for minutes.
    pub fn is_definite(&self) -> bool {
        match self.code {
            // An OAUTHBEARER token endpoint that cannot be reached (the identity provider
            // down, a network blip) may answer later; one that answers with a refusal
            // (`{"error":"invalid_client"}`) will not.
            RDKafkaErrorCode::Authentication
                if self.reason.contains("OAUTHBEARER token")
                    && TOKEN_ENDPOINT_UNREACHABLE
                        .iter()
                        .any(|words| self.reason.contains(words)) =>
            {
                false
            }
            RDKafkaErrorCode::Authentication
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed => true,
            RDKafkaErrorCode::SSL => self.reason.contains("certificate verify failed"),
            _ => false,
        }
    }
}

impl std::fmt::Display for ClientFailure {
    /// librdkafka's reason, and what it usually means where librdkafka does not say.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)?;
        if self.reason.contains("Disconnected") && self.reason.contains("APIVERSION_QUERY") {
            f.write_str(" (a broker that closes the connection at the first request usually expects another protocol: check [kafka.security] protocol against the listener)")?;
        }
        Ok(())
    }
}

/// librdkafka's configuration warning that `enable.gapless.guarantee` (which the relay
/// always sets) is experimental: said at every client's creation, it reads as something to
/// worry about. [`explain_confwarn`] keeps it at DEBUG and says once, at INFO, what it means.
const GAPLESS_WARNING: &str = "enable.gapless.guarantee is experimental";

/// Whether librdkafka's log line is its `enable.gapless.guarantee` warning; if so it is
/// logged at DEBUG, and the first time in the process the relay's own INFO line explains it.
/// Used by every client context of the crate.
///
/// Also kept at DEBUG: "is a producer property and will be ignored by this consumer
/// instance". The relay hands `[kafka.properties]` to its own consumers too (the `[ha]`
/// lease, the checkpoint store's reader) so that security and connection settings reach
/// them; the producer settings there are meant for the producer, and a WARN at every start
/// would only ask the user to worry.
pub(crate) fn explain_confwarn(facility: &str, message: &str) -> bool {
    static EXPLAINED: std::sync::Once = std::sync::Once::new();
    if facility != "CONFWARN" {
        return false;
    }
    if message.contains("is a producer property and will be ignored by this consumer") {
        tracing::debug!(target: "librdkafka", facility, "{message}");
        return true;
    }
    if !message.contains(GAPLESS_WARNING) {
        return false;
    }
    tracing::debug!(target: "librdkafka", facility, "{message}");
    EXPLAINED.call_once(|| {
        tracing::info!(
            "enable.gapless.guarantee is on (librdkafka calls it experimental): a failed \
             batch that could leave a gap in a partition stops the producer instead, and the \
             relay rebuilds it and resends every unacked record in order; nothing to do"
        );
    });
    true
}

/// Client context for every Kafka client the relay creates.
#[derive(Debug, Default)]
pub struct RelayClientContext {
    /// Per message key: when it was last logged and how many repeats were suppressed since.
    recent: Mutex<HashMap<String, (Instant, u64)>>,
    /// The last broker failure librdkafka reported (not `AllBrokersDown`, which only
    /// follows one and says nothing of why), for the errors that a failed request returns.
    last_failure: LastClientFailure,
}

/// The last broker failure of one client, shared by its context (which sets it) and the code
/// that reports why a request of the client failed (rdkafka gives no way back from a
/// `FutureProducer` to its context).
#[derive(Debug, Clone, Default)]
pub struct LastClientFailure(std::sync::Arc<Mutex<Option<ClientFailure>>>);

impl LastClientFailure {
    /// The failure, if the client reported one.
    pub fn get(&self) -> Option<ClientFailure> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Keeps `failure` as the last one, unless the one kept is definite and `failure` is
    /// not: the disconnect librdkafka logs after refusing the credentials must not hide why.
    fn set(&self, failure: ClientFailure) {
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !last
            .as_ref()
            .is_some_and(|kept| kept.is_definite() && !failure.is_definite())
        {
            *last = Some(failure);
        }
    }
}

impl RelayClientContext {
    /// The last broker failure librdkafka reported through the error callback, if any.
    pub fn last_failure(&self) -> Option<ClientFailure> {
        self.last_failure.get()
    }

    /// A handle on [`RelayClientContext::last_failure`] that outlives handing the context to
    /// a client.
    pub fn last_failure_handle(&self) -> LastClientFailure {
        self.last_failure.clone()
    }

    /// Remembers a failure from the error callback (see [`RelayClientContext::last_failure`]).
    fn remember_failure(&self, error: &KafkaError, reason: &str) {
        let Some(code) = error.rdkafka_error_code() else {
            return;
        };
        if code == RDKafkaErrorCode::AllBrokersDown {
            return;
        }
        self.last_failure.set(ClientFailure {
            code,
            reason: reason.to_owned(),
        });
    }

    /// `Some(suppressed repeats)` when a message with this key should be logged now.
    fn should_log(&self, key: &str) -> Option<u64> {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        if let Some((last, suppressed)) = recent.get_mut(key) {
            if now.duration_since(*last) < REPEAT_INTERVAL {
                *suppressed += 1;
                return None;
            }
            let repeats = *suppressed;
            *last = now;
            *suppressed = 0;
            return Some(repeats);
        }
        if recent.len() >= REMEMBERED_MESSAGES {
            recent.clear();
        }
        recent.insert(key.to_owned(), (now, 0));
        Some(0)
    }
}

/// The part of a librdkafka message that identifies it: without the varying tail
/// (`(after 12ms in state CONNECT, 3 identical error(s) suppressed)`).
fn message_key(facility: &str, message: &str) -> String {
    let stable = message.split(" (after ").next().unwrap_or(message);
    format!(
        "{facility}:{}",
        stable.chars().take(160).collect::<String>()
    )
}

impl ClientContext for RelayClientContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        // A broker connection that failed: librdkafka says why only here for a disconnect
        // (the error callback then reports just `AllBrokersDown`).
        if facility == "FAIL" {
            self.last_failure.set(ClientFailure {
                code: RDKafkaErrorCode::BrokerTransportFailure,
                reason: message.to_owned(),
            });
        }
        if explain_confwarn(facility, message) {
            return;
        }
        if matches!(level, RDKafkaLogLevel::Debug) {
            tracing::debug!(target: "librdkafka", facility, "{message}");
            return;
        }
        let Some(suppressed) = self.should_log(&message_key(facility, message)) else {
            return;
        };
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility, suppressed, "{message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", facility, suppressed, "{message}")
            }
            _ => tracing::info!(target: "librdkafka", facility, suppressed, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.remember_failure(&error, reason);
        let key = message_key("error", &format!("{error}: {reason}"));
        if let Some(suppressed) = self.should_log(&key) {
            tracing::warn!(target: "librdkafka", %error, suppressed, "Kafka client error: {reason}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gapless_warning_is_explained_and_producer_properties_in_consumers_are_quiet() {
        let gapless = "Configuration property enable.gapless.guarantee is experimental: When set to `true`, ...";
        assert!(explain_confwarn("CONFWARN", gapless));
        assert!(
            explain_confwarn("CONFWARN", gapless),
            "every time, not only the first"
        );
        assert!(!explain_confwarn(
            "CONFWARN",
            "Configuration property fetch.wait.max.ms is a consumer property and will be ignored by this producer instance"
        ));
        assert!(explain_confwarn(
            "CONFWARN",
            "Configuration property queue.buffering.max.ms is a producer property and will be ignored by this consumer instance"
        ), "the relay's own consumers ignore the producer's properties: DEBUG");
        assert!(!explain_confwarn("FAIL", gapless));
    }

    #[test]
    fn the_last_failure_is_kept_and_classified() {
        let context = RelayClientContext::default();
        assert_eq!(context.last_failure(), None);
        let auth = "sasl_ssl://127.0.0.1:9/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512";
        context.error(KafkaError::Global(RDKafkaErrorCode::Authentication), auth);
        context.error(
            KafkaError::Global(RDKafkaErrorCode::AllBrokersDown),
            "1/1 brokers are down",
        );
        context.log(
            RDKafkaLogLevel::Info,
            "FAIL",
            "127.0.0.1:9/bootstrap: Disconnected (after 3ms in state UP)",
        );
        let failure = context.last_failure().expect("the failure is kept");
        assert_eq!(
            failure.reason, auth,
            "neither AllBrokersDown nor the disconnect after it replaces the reason"
        );
        assert!(failure.is_definite());

        let context = RelayClientContext::default();
        let disconnect = "127.0.0.1:9/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 2ms in state APIVERSION_QUERY)";
        context.log(RDKafkaLogLevel::Info, "FAIL", disconnect);
        let failure = context
            .last_failure()
            .expect("a FAIL log line is a failure");
        assert!(!failure.is_definite());
        assert!(failure.to_string().starts_with(disconnect));
        assert!(failure.to_string().contains("[kafka.security] protocol"));
        context.error(
            KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure),
            "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused",
        );
        let failure = context.last_failure().unwrap();
        assert!(failure.reason.ends_with("Connection refused"));
        assert_eq!(failure.to_string(), failure.reason);
        for (code, reason, definite) in [
            (RDKafkaErrorCode::SSL, "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified", true),
            (RDKafkaErrorCode::SSL, "SSL handshake failed: Disconnected", false),
            (
                RDKafkaErrorCode::Authentication,
                "Failed to acquire SASL OAUTHBEARER token: {\"error\":\"invalid_client\"}",
                true,
            ),
            (
                RDKafkaErrorCode::Authentication,
                "Failed to acquire SASL OAUTHBEARER token: Failed to connect to 127.0.0.1:1 after 0 ms: Could not connect to server",
                false,
            ),
        ] {
            let failure = ClientFailure { code, reason: reason.into() };
            assert_eq!(failure.is_definite(), definite, "{reason}");
        }
    }

    #[test]
    fn repeats_are_suppressed_and_counted() {
        let context = RelayClientContext::default();
        let key = message_key(
            "FAIL",
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)",
        );
        let same = message_key(
            "FAIL",
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 3ms in state CONNECT, 1 identical error(s) suppressed)",
        );
        assert_eq!(key, same);
        assert_eq!(context.should_log(&key), Some(0));
        assert_eq!(context.should_log(&same), None);
        assert_eq!(context.should_log(&key), None);
        assert_eq!(context.should_log("FAIL:something else"), Some(0));
        {
            let mut recent = context.recent.lock().unwrap();
            let entry = recent.get_mut(&key).unwrap();
            entry.0 -= REPEAT_INTERVAL;
        }
        assert_eq!(
            context.should_log(&key),
            Some(2),
            "reports the suppressed count"
        );
    }
}
