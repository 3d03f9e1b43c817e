//! Builds the checkpoint store `[checkpoint]` names (file, MySQL table or Kafka compacted
//! topic) as a [`SharedCheckpointStore`], chosen at runtime.

use std::sync::Arc;

use outbox_checkpoint::{
    CheckpointStoreError, FileCheckpointStore, MysqlCheckpointStore, SharedCheckpointStore,
};

use crate::config::{CheckpointConfig, KafkaConfig};

/// Opens the configured store; a Kafka store connects as `kafka` says (brokers, security,
/// `create_topics`, `topic_replication_factor`). No I/O happens yet (the first `load` or `commit` does it),
/// except for a MySQL store under `tls.mode = "preferred"`: one connection finds out whether
/// the server offers TLS (the pool then requires it, or stays plaintext when the server has
/// none). When the server cannot be reached for that probe, the pool requires TLS (fail
/// closed: a plaintext fallback must come from the server's own answer).
pub async fn open_checkpoint_store(
    config: &CheckpointConfig,
    kafka: &KafkaConfig,
) -> Result<SharedCheckpointStore, CheckpointStoreError> {
    match config.store.as_str() {
        "kafka" => Ok(Arc::new(outbox_kafka::KafkaCheckpointStore::new(
            kafka_store_settings(config, kafka),
        ))),
        "mysql" => {
            let url = config.url.as_deref().unwrap_or_default();
            let store = MysqlCheckpointStore::new(
                checkpoint_pool(config, url).await?,
                &config.database,
                &config.table,
                &config.connector,
            )
            .with_operation_timeout(std::time::Duration::from_millis(
                config.operation_timeout_ms,
            ))
            .on_server(&crate::redact::redact_url(url));
            Ok(Arc::new(store))
        }
        // `validate` allows only `file`, `mysql` and `kafka`; `file` needs a path.
        _ => {
            let path = config.path.clone().unwrap_or_default();
            Ok(Arc::new(FileCheckpointStore::new(path)))
        }
    }
}

/// [`open_checkpoint_store`] for `outbox-relay run`, the store's one writer: a Kafka store
/// claims its transactional id at once (fencing an older relay with the same connector and
/// aborting a transaction a crashed one left open, so the first `load` need not wait for
/// it), and in exactly-once mode the sink's id too (its transactions hold the checkpoint). [`crate::run_relay`] calls it once per call, not per pipeline attempt (a claim takes
/// a second or more); under `[ha]` every leadership term is a call of its own, so a new
/// term claims again and fences the previous leader. Read-only users (`checkpoint show`,
/// `status`, `check`) use [`open_checkpoint_store`], which never disturbs a running relay.
pub async fn open_checkpoint_store_for_writing(
    config: &CheckpointConfig,
    kafka: &KafkaConfig,
) -> Result<SharedCheckpointStore, CheckpointStoreError> {
    if config.store == "kafka" {
        let store = outbox_kafka::KafkaCheckpointStore::new(kafka_store_settings(config, kafka));
        // In exactly-once mode the sink's transactions hold the checkpoint record: abort a
        // crashed leader's open one now (beside the store's own claim), so the first load
        // reads the newest committed checkpoint at once.
        let fence_sink = async {
            if kafka.delivery == crate::config::DeliveryMode::ExactlyOnce {
                let sink_id = outbox_kafka::exactly_once_transactional_id(&config.connector);
                store.fence_transactional_id(&sink_id).await
            } else {
                Ok(())
            }
        };
        let (claimed, fenced) = tokio::join!(store.claim_writer(), fence_sink);
        claimed?;
        fenced?;
        return Ok(Arc::new(store));
    }
    open_checkpoint_store(config, kafka).await
}

/// The Kafka store's settings from `[checkpoint]` and `[kafka]`: the relay's common client
/// properties ([`crate::sink::kafka_client_properties`]), the topic and connector, and
/// `kafka.create_topics` / `kafka.topic_replication_factor` for creating the topic.
pub fn kafka_store_settings(
    config: &CheckpointConfig,
    kafka: &KafkaConfig,
) -> outbox_kafka::KafkaStoreSettings {
    outbox_kafka::KafkaStoreSettings {
        client_properties: crate::sink::kafka_client_properties(kafka),
        topic: config.kafka_topic().to_owned(),
        connector: config.connector.clone(),
        create_topic: kafka.create_topics,
        replication_factor: kafka.topic_replication_factor,
        operation_timeout: std::time::Duration::from_millis(config.operation_timeout_ms),
    }
}

/// The MySQL store's connection pool, with `[checkpoint.tls]` and `checkpoint.password_file`.
async fn checkpoint_pool(
    config: &CheckpointConfig,
    url: &str,
) -> Result<mysql_async::Pool, CheckpointStoreError> {
    let location = format!(
        "{}.{} (connector `{}`)",
        config.database, config.table, config.connector
    );
    let opts =
        mysql_async::Opts::from_url(url).map_err(|error| CheckpointStoreError::Database {
            location: location.clone(),
            source: mysql_async::Error::Url(error),
        })?;
    let tls = config.tls.options(config.password_file.as_deref());
    let mut builder = mysql_async::OptsBuilder::from_opts(opts);
    if let Some(path) = &config.password_file {
        let password =
            std::fs::read_to_string(path).map_err(|error| CheckpointStoreError::Database {
                location: location.clone(),
                source: mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::new(
                    error.kind(),
                    format!("checkpoint.password_file {}: {error}", path.display()),
                ))),
            })?;
        builder = builder.pass(Some(password.trim_end_matches(['\r', '\n']).to_owned()));
    }
    let use_tls = match tls.mode {
        outbox_binlog::TlsMode::Disabled => false,
        outbox_binlog::TlsMode::Preferred => {
            match outbox_binlog::connect_to_server(url, &tls, std::time::Duration::from_secs(10))
                .await
            {
                Ok((conn, session)) => {
                    let _ = conn.disconnect().await;
                    !session.version.is_empty()
                }
                // Unknown until the server answers: fail (transient: the open is retried at
                // startup) rather than guess TLS for a server that may offer none.
                Err(error) if error.is_transient() => {
                    return Err(CheckpointStoreError::Database {
                        location,
                        source: mysql_async::Error::Io(mysql_async::IoError::Io(
                            std::io::Error::other(format!(
                                "probing the server for tls.mode = preferred: {error}"
                            )),
                        )),
                    })
                }
                Err(_) => true,
            }
        }
        _ => true,
    };
    if use_tls {
        builder = builder.ssl_opts(tls.client_library_ssl_opts());
    }
    Ok(mysql_async::Pool::new(builder))
}
