//! Builds the checkpoint store `[checkpoint]` names (file or MySQL table) as a
//! [`SharedCheckpointStore`], chosen at runtime.

use std::sync::Arc;

use outbox_checkpoint::{
    CheckpointStoreError, FileCheckpointStore, MysqlCheckpointStore, SharedCheckpointStore,
};

use crate::config::CheckpointConfig;

/// Opens the configured store. No I/O happens yet (the first `load` or `commit` does it).
pub async fn open_checkpoint_store(
    config: &CheckpointConfig,
) -> Result<SharedCheckpointStore, CheckpointStoreError> {
    match config.store.as_str() {
        "mysql" => {
            let url = config.url.as_deref().unwrap_or_default();
            let store = MysqlCheckpointStore::from_url(
                url,
                &config.database,
                &config.table,
                &config.connector,
            )?
            .with_operation_timeout(std::time::Duration::from_millis(
                config.operation_timeout_ms,
            ));
            Ok(Arc::new(store))
        }
        // `validate` allows only `file` and `mysql`; `file` needs a path.
        _ => {
            let path = config.path.clone().unwrap_or_default();
            Ok(Arc::new(FileCheckpointStore::new(path)))
        }
    }
}
