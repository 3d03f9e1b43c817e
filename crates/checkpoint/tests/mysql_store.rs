//! The MySQL/MariaDB table store against a real scratch MariaDB.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use outbox_binlog::{BinlogPosition, Flavor, Gtid, GtidSet};
use outbox_checkpoint::contract::{run_contract, StoreLocations};
use outbox_checkpoint::{
    Checkpoint, CheckpointPosition, CheckpointStore, CheckpointStoreError, MysqlCheckpointStore,
    SharedCheckpointStore, SourceIdentity,
};
use outbox_testkit::ScratchMariadb;

fn checkpoint_at(server_id: u32, file: &str, position: u64, sequence: u64) -> Checkpoint {
    Checkpoint::new(
        SourceIdentity {
            flavor: Flavor::Mariadb,
            server_id,
            server_uuid: None,
        },
        CheckpointPosition {
            binlog: BinlogPosition::new(file, position),
            gtid: Some(Gtid::Mariadb {
                domain_id: 0,
                server_id,
                sequence,
            }),
            gtid_set: GtidSet::parse(Flavor::Mariadb, &format!("0-{server_id}-{sequence},3-9-1"))
                .unwrap(),
            timestamp: 1_700_000_000 + sequence as u32,
        },
    )
}

/// Starts a scratch server, retrying twice: on this shared machine a start occasionally
/// fails (seen once in ~10 runs, e.g. a port taken between choosing and binding it).
async fn start_scratch() -> ScratchMariadb {
    let mut last_error = None;
    for _ in 0..3 {
        match ScratchMariadb::start().await {
            Ok(server) => return server,
            Err(error) => {
                eprintln!("scratch MariaDB did not start, retrying: {error}");
                last_error = Some(error);
            }
        }
    }
    panic!("scratch MariaDB did not start: {last_error:?}");
}

#[tokio::test]
async fn creates_upserts_loads_and_resets_per_connector() {
    let server = start_scratch().await;
    server.exec(&["CREATE DATABASE relay_state"]).await.unwrap();
    let url = server.url();
    let orders =
        MysqlCheckpointStore::from_url(&url, "relay_state", "checkpoints", "orders").unwrap();
    let billing =
        MysqlCheckpointStore::from_url(&url, "relay_state", "checkpoints", "billing").unwrap();

    // First use creates the table; nothing committed yet.
    assert_eq!(orders.load().await.unwrap(), None);
    assert_eq!(billing.load().await.unwrap(), None);

    let first = checkpoint_at(1, "binlog.000001", 400, 5);
    orders.commit(&first).await.unwrap();
    let second = checkpoint_at(1, "binlog.000002", 4, 6);
    orders.commit(&second).await.unwrap();
    let billing_checkpoint = checkpoint_at(2, "mysql-bin.000007", 1234, 90);
    billing.commit(&billing_checkpoint).await.unwrap();

    // A fresh store instance (as after a restart) reads what was committed.
    let reopened =
        MysqlCheckpointStore::from_url(&url, "relay_state", "checkpoints", "orders").unwrap();
    assert_eq!(reopened.load().await.unwrap(), Some(second.clone()));
    assert_eq!(
        billing.load().await.unwrap(),
        Some(billing_checkpoint.clone())
    );

    // Upsert: one row per connector, readable columns up to date.
    let mut conn = server.conn().await.unwrap();
    let rows: Vec<(String, String, u64, String)> = conn
        .query(
            "SELECT connector_name, binlog_file, binlog_position, gtid_set \
             FROM relay_state.checkpoints ORDER BY connector_name",
        )
        .await
        .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                "billing".to_owned(),
                "mysql-bin.000007".to_owned(),
                1234,
                "0-2-90,3-9-1".to_owned()
            ),
            (
                "orders".to_owned(),
                "binlog.000002".to_owned(),
                4,
                "0-1-6,3-9-1".to_owned()
            ),
        ]
    );
    let updated_recently: Option<i64> = conn
        .query_first(
            "SELECT TIMESTAMPDIFF(SECOND, updated_at, NOW(6)) FROM relay_state.checkpoints \
             WHERE connector_name = 'orders'",
        )
        .await
        .unwrap();
    assert!(
        updated_recently.is_some_and(|s| (0..60).contains(&s)),
        "{updated_recently:?}"
    );

    // Reset touches only its connector (the rest of the contract: the shared suite below).
    orders.reset().await.unwrap();
    assert_eq!(reopened.load().await.unwrap(), None);
    assert_eq!(
        billing.load().await.unwrap(),
        Some(billing_checkpoint.clone())
    );
    let remaining: Option<u64> = conn
        .query_first("SELECT COUNT(*) FROM relay_state.checkpoints")
        .await
        .unwrap();
    assert_eq!(remaining, Some(1));

    // A damaged row is an error naming the table and connector, never `None`.
    conn.query_drop(
        "UPDATE relay_state.checkpoints SET checkpoint_json = '{\"format\": 1, \"binlog' \
         WHERE connector_name = 'billing'",
    )
    .await
    .unwrap();
    let error = MysqlCheckpointStore::from_url(&url, "relay_state", "checkpoints", "billing")
        .unwrap()
        .load()
        .await
        .unwrap_err();
    assert!(
        matches!(error, CheckpointStoreError::Corrupt { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("relay_state.checkpoints") && message.contains("billing"),
        "{message}"
    );
    conn.disconnect().await.unwrap();
    for store in [orders, billing, reopened] {
        store.disconnect().await.unwrap();
    }
}

/// The MySQL store's locations for the shared contract suite: one connector row per name
/// in one table of one scratch server.
struct MysqlLocations {
    /// The scratch server's URL.
    url: String,
}

impl StoreLocations for MysqlLocations {
    fn open<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = SharedCheckpointStore> + Send + 'a>> {
        Box::pin(async move {
            Arc::new(
                MysqlCheckpointStore::from_url(&self.url, "relay_state", "checkpoints", name)
                    .unwrap(),
            ) as SharedCheckpointStore
        })
    }
}

/// The contract every store passes (`outbox_checkpoint::contract`), against a real
/// scratch MariaDB.
#[tokio::test]
async fn the_mysql_store_passes_the_store_contract() {
    let server = start_scratch().await;
    server.exec(&["CREATE DATABASE relay_state"]).await.unwrap();
    run_contract(&MysqlLocations { url: server.url() }, "mysql").await;
}

/// Two relays (two store instances, as two processes: each remembers only its own writes)
/// under `[ha]`: after the new leader's take-over the old leader's commit is refused by the
/// database, naming both epochs, and nothing of it is stored; a racing pair of commits of
/// the two epochs never leaves the stale one in the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_refuses_a_stale_leader_epoch() {
    let server = start_scratch().await;
    server.exec(&["CREATE DATABASE relay_state"]).await.unwrap();
    let url = server.url();
    let open =
        || MysqlCheckpointStore::from_url(&url, "relay_state", "checkpoints", "orders").unwrap();
    let zombie = open();
    let leader = open();
    assert_eq!(
        leader.take_over(1).await.unwrap(),
        None,
        "nothing stored yet"
    );
    zombie
        .commit(&checkpoint_at(1, "binlog.000001", 400, 5).with_leader_epoch(Some(1)))
        .await
        .unwrap();
    let taken = leader.take_over(2).await.unwrap().unwrap();
    assert_eq!(taken.leader_epoch, Some(2));
    assert_eq!(taken.position.binlog.position, 400);
    let error = zombie
        .commit(&checkpoint_at(1, "binlog.000001", 900, 6).with_leader_epoch(Some(1)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            CheckpointStoreError::StaleLeader {
                stored_epoch: 2,
                offered_epoch: Some(1),
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("orders"), "{error}");
    assert_eq!(open().load().await.unwrap(), Some(taken.clone()));
    // No epoch (a relay without [ha]) is refused too, with the fix.
    let error = zombie
        .commit(&checkpoint_at(1, "binlog.000001", 900, 6))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("without [ha]"), "{error}");

    // Races: epoch 3 and epoch 4 commit at the same time, many rounds; the row ends at 4.
    for round in 0..20u64 {
        let low = open();
        let high = open();
        let base = 1_000 + round * 10;
        let low_checkpoint =
            checkpoint_at(1, "binlog.000002", base + 5, 7).with_leader_epoch(Some(3 + 2 * round));
        let high_checkpoint =
            checkpoint_at(1, "binlog.000002", base, 7).with_leader_epoch(Some(4 + 2 * round));
        let (a, b) = tokio::join!(low.commit(&low_checkpoint), high.commit(&high_checkpoint));
        // The high epoch may lose a deadlock (a transient database error) but never a
        // fencing check; the low one may land first or be refused.
        assert!(
            !matches!(b, Err(CheckpointStoreError::StaleLeader { .. })),
            "{b:?}"
        );
        if b.is_err() {
            high.commit(&high_checkpoint).await.unwrap();
        }
        if let Err(error) = &a {
            assert!(
                matches!(
                    error,
                    CheckpointStoreError::StaleLeader { .. }
                        | CheckpointStoreError::Database { .. }
                ),
                "{error:?}"
            );
        }
        let stored = open().load().await.unwrap().unwrap();
        assert_eq!(stored.leader_epoch, Some(4 + 2 * round), "round {round}");
        assert_eq!(stored.position.binlog.position, base);
        for store in [low, high] {
            store.disconnect().await.unwrap();
        }
    }
    for store in [zombie, leader] {
        store.disconnect().await.unwrap();
    }
}

#[tokio::test]
async fn a_missing_database_or_bad_url_is_a_clear_error() {
    assert!(matches!(
        MysqlCheckpointStore::from_url("not a url", "db", "t", "c"),
        Err(CheckpointStoreError::Database { .. })
    ));
    let server = start_scratch().await;
    let store =
        MysqlCheckpointStore::from_url(&server.url(), "no_such_db", "checkpoints", "c").unwrap();
    let error = store.load().await.unwrap_err();
    assert!(
        matches!(error, CheckpointStoreError::Database { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("no_such_db.checkpoints"),
        "{error}"
    );
    store.disconnect().await.unwrap();
}

/// Issue 11 item 5: a commit to a server that stopped answering (a half-open connection:
/// the process is frozen, its sockets stay open) fails with a timeout naming the table
/// instead of hanging the relay, and the store works again once the server answers.
#[tokio::test]
async fn a_commit_to_a_frozen_server_times_out_instead_of_hanging() {
    let server = start_scratch().await;
    server.exec(&["CREATE DATABASE relay_state"]).await.unwrap();
    let store =
        MysqlCheckpointStore::from_url(&server.url(), "relay_state", "checkpoints", "orders")
            .unwrap()
            .with_operation_timeout(std::time::Duration::from_millis(1000));
    store
        .commit(&checkpoint_at(1, "binlog.000001", 400, 5))
        .await
        .unwrap();
    server.pause();
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        store.commit(&checkpoint_at(1, "binlog.000001", 500, 6)),
    )
    .await;
    let waited = started.elapsed();
    server.resume();
    let error = outcome
        .expect("the commit must not hang on a server that stopped answering")
        .unwrap_err();
    assert!(
        matches!(error, CheckpointStoreError::Timeout { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("relay_state.checkpoints"),
        "{error}"
    );
    assert!(waited < std::time::Duration::from_secs(3), "{waited:?}");
    let later = checkpoint_at(1, "binlog.000001", 600, 7);
    store.commit(&later).await.unwrap();
    assert_eq!(store.load().await.unwrap(), Some(later));
}
