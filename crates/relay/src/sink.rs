//! The Kafka sink: `outbox-kafka`'s ([`outbox_kafka::sink`], re-exported whole), hosted by
//! the relay: [`crate::metrics::Metrics`] is its [`SinkObserver`], the relay's
//! [`Shutdown`] its [`ShutdownSignal`], and [`RelayConfig`] the [`SinkConfigSource`] its
//! settings come from ([`KafkaSinkSettings::from_relay_config`]).

use std::future::Future;
use std::time::Duration;

pub use outbox_kafka::sink::*;

use crate::config::{DeadLetterConfig, KafkaConfig, RelayConfig};
use crate::shutdown::Shutdown;

impl SinkConfigSource for RelayConfig {
    fn kafka(&self) -> &KafkaConfig {
        &self.kafka
    }

    fn dead_letter(&self) -> &DeadLetterConfig {
        &self.dead_letter
    }

    fn max_in_flight(&self) -> usize {
        self.pipeline.max_in_flight
    }

    fn drain_timeout(&self) -> Duration {
        self.pipeline.shutdown_timeout()
    }
}

impl ShutdownSignal for Shutdown {
    fn recv(&mut self) -> impl Future<Output = ()> + Send {
        Shutdown::recv(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_the_relay_config_take_its_kafka_dead_letter_and_pipeline_values() {
        let config = RelayConfig::parse(
            r#"
[source]
url = "mysql://root@127.0.0.1:3306"

[[outbox]]
table = "shop.outbox"

[kafka]
brokers = "kafka-1:9092"
linger_ms = 7

[checkpoint]
path = "/tmp/checkpoint.json"

[pipeline]
max_in_flight = 123
shutdown_timeout_ms = 4321

[dead_letter]
topic = "orders.dlq"
max_attempts = 9
"#,
        )
        .unwrap();
        let settings = KafkaSinkSettings::from_relay_config(&config);
        assert_eq!(settings.max_in_flight, 123);
        assert_eq!(settings.drain_timeout, Duration::from_millis(4321));
        assert_eq!(settings.dead_letter.topic, "orders.dlq");
        assert_eq!(settings.dead_letter.max_attempts, 9);
        let property = |key: &str| {
            settings
                .client_properties
                .iter()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value.as_str())
        };
        assert_eq!(property("bootstrap.servers"), Some("kafka-1:9092"));
        assert_eq!(property("linger.ms"), Some("7"));
    }

    #[tokio::test]
    async fn the_relay_shutdown_is_the_sinks_signal() {
        let controller = crate::shutdown::ShutdownController::new();
        let mut signal = controller.subscribe();
        controller.trigger();
        tokio::time::timeout(Duration::from_secs(5), ShutdownSignal::recv(&mut signal))
            .await
            .unwrap();
    }
}
