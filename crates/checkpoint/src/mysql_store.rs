//! A checkpoint row in a MySQL/MariaDB table (like Maxwell's `positions` table), one row
//! per connector name, so several relays can share one table.
//!
//! # Table
//! Created on first use with `CREATE TABLE IF NOT EXISTS` in the configured database, which
//! must exist (the store does not create databases: that needs privileges a relay should
//! not have):
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS `database`.`table` (
//!   connector_name  VARCHAR(191) NOT NULL PRIMARY KEY,
//!   binlog_file     VARCHAR(512) NOT NULL,
//!   binlog_position BIGINT UNSIGNED NOT NULL,
//!   gtid_set        TEXT NOT NULL,
//!   checkpoint_json TEXT NOT NULL,
//!   updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
//! ) ENGINE=InnoDB
//! ```
//!
//! `checkpoint_json` is the source of truth (the same document as the file store);
//! the other columns are for people reading the table.
//!
//! # Durability
//! A commit is one InnoDB transaction: `SELECT ... FOR UPDATE` of the connector's row, the
//! commit rule ([`crate::check_commit`]: leader epoch, then no regression) against what the
//! row holds, then an upsert (`INSERT ... ON DUPLICATE KEY UPDATE`); it is durable when it
//! returns as far as the server's `innodb_flush_log_at_trx_commit=1` (the default) makes it
//! so.
//!
//! # Leader epochs (`[ha]`)
//! The rule is enforced by the database, not by this process's memory: the row lock makes
//! the read, the check and the write one step, so of two relays (two processes, two hosts)
//! committing at once the one with the older leader epoch is refused
//! ([`CheckpointStoreError::StaleLeader`]) once the newer one's write is in, whatever each
//! remembered. A new leader's [`CheckpointStore::take_over`] stamps the stored row with its
//! epoch in the same kind of transaction, so no older leader's commit lands after it. Two
//! first inserts of a missing row may deadlock on the gap lock; the loser's commit fails as a
//! database error and is retried.
//!
//! # Timeouts
//! Every operation (getting a connection, the statement) is bounded by the store's
//! operation timeout ([`MysqlCheckpointStore::with_operation_timeout`], default
//! [`DEFAULT_OPERATION_TIMEOUT`]); past it the call fails with
//! [`CheckpointStoreError::Timeout`], so a hung server or a half-open connection cannot
//! hold the relay (or its shutdown) forever. A commit that timed out may still have been
//! stored; the next commit stores a newer position either way.
//!
//! # Where to put it
//! The source may be a read-only replica, so the table can live on any server. If it lives on
//! the source itself, each commit is a transaction in the source's binlog; the relay reads it
//! as an empty transaction, which only moves the checkpoint (commits are batched, so this
//! costs one small write per commit interval, not a loop).

use std::future::Future;
use std::time::Duration;

use mysql_async::prelude::Queryable;

use crate::checkpoint::Checkpoint;
use crate::store::{check_commit, CheckpointStore, CheckpointStoreError, StoreFuture};

/// How long one store operation may take unless [`MysqlCheckpointStore::with_operation_timeout`]
/// says otherwise.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// A checkpoint kept as a row of a MySQL/MariaDB table. See the module docs.
#[derive(Debug)]
pub struct MysqlCheckpointStore {
    /// Connections to the server holding the table (not necessarily the source).
    pool: mysql_async::Pool,
    /// `` `database`.`table` ``, quoted for SQL.
    qualified_table: String,
    /// `database.table connector 'name'`, for errors and logs.
    location: String,
    /// The row key: several relays can share a table.
    connector: String,
    /// Set once the table is known to exist (created or found) in this process.
    table_ready: tokio::sync::OnceCell<()>,
    /// Bound of each operation (connection plus statement): a server that stops answering
    /// must not hang the committer or the relay's shutdown.
    operation_timeout: Duration,
}

fn quote_identifier(identifier: &str) -> String {
    format!("`{}`", identifier.replace('`', "``"))
}

impl MysqlCheckpointStore {
    /// A store using `pool` (any database), keeping the row `connector` in
    /// `database`.`table`. No I/O happens until the first call.
    pub fn new(pool: mysql_async::Pool, database: &str, table: &str, connector: &str) -> Self {
        Self {
            pool,
            qualified_table: format!("{}.{}", quote_identifier(database), quote_identifier(table)),
            location: format!("{database}.{table} (connector `{connector}`)"),
            connector: connector.to_owned(),
            table_ready: tokio::sync::OnceCell::new(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        }
    }

    /// The same store with each operation bounded by `timeout` instead of
    /// [`DEFAULT_OPERATION_TIMEOUT`].
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The same store naming `server` (`host:port`, never a password) in its errors and
    /// description: `Connection refused` alone does not say where.
    pub fn on_server(mut self, server: &str) -> Self {
        self.location = format!("{} on {server}", self.location);
        self
    }

    /// Runs `operation`, failing with [`CheckpointStoreError::Timeout`] after the
    /// operation timeout.
    async fn bounded<T>(
        &self,
        what: &'static str,
        operation: impl Future<Output = Result<T, CheckpointStoreError>>,
    ) -> Result<T, CheckpointStoreError> {
        match tokio::time::timeout(self.operation_timeout, operation).await {
            Ok(outcome) => outcome,
            Err(_elapsed) => Err(CheckpointStoreError::Timeout {
                location: self.location.clone(),
                operation: what,
                after: self.operation_timeout,
            }),
        }
    }

    /// A store connecting with `url` (`mysql://user:password@host:port[/db]`); see
    /// [`MysqlCheckpointStore::new`]. Fails only if the URL is malformed.
    pub fn from_url(
        url: &str,
        database: &str,
        table: &str,
        connector: &str,
    ) -> Result<Self, CheckpointStoreError> {
        let location = format!("{database}.{table} (connector `{connector}`)");
        let options =
            mysql_async::Opts::from_url(url).map_err(|error| CheckpointStoreError::Database {
                location,
                source: mysql_async::Error::Url(error),
            })?;
        Ok(Self::new(
            mysql_async::Pool::new(options),
            database,
            table,
            connector,
        ))
    }

    /// Closes the pool's connections (call before dropping it at shutdown).
    pub async fn disconnect(self) -> Result<(), CheckpointStoreError> {
        let location = self.location;
        self.pool
            .disconnect()
            .await
            .map_err(|source| CheckpointStoreError::Database { location, source })
    }

    fn database_error(&self) -> impl FnOnce(mysql_async::Error) -> CheckpointStoreError + '_ {
        move |source| CheckpointStoreError::Database {
            location: self.location.clone(),
            source,
        }
    }

    async fn connection(&self) -> Result<mysql_async::Conn, CheckpointStoreError> {
        let mut conn = self.pool.get_conn().await.map_err(self.database_error())?;
        self.table_ready
            .get_or_try_init(|| async {
                let statement = format!(
                    "CREATE TABLE IF NOT EXISTS {} (\
                       connector_name VARCHAR(191) NOT NULL PRIMARY KEY, \
                       binlog_file VARCHAR(512) NOT NULL, \
                       binlog_position BIGINT UNSIGNED NOT NULL, \
                       gtid_set TEXT NOT NULL, \
                       checkpoint_json TEXT NOT NULL, \
                       updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)\
                     ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
                    self.qualified_table
                );
                conn.query_drop(statement)
                    .await
                    .map_err(self.database_error())
            })
            .await?;
        Ok(conn)
    }

    async fn read(&self) -> Result<Option<Checkpoint>, CheckpointStoreError> {
        let mut conn = self.connection().await?;
        let json: Option<String> = conn
            .exec_first(
                format!(
                    "SELECT checkpoint_json FROM {} WHERE connector_name = ?",
                    self.qualified_table
                ),
                (self.connector.as_str(),),
            )
            .await
            .map_err(self.database_error())?;
        self.parse(json)
    }

    fn parse(&self, json: Option<String>) -> Result<Option<Checkpoint>, CheckpointStoreError> {
        match json {
            None => Ok(None),
            Some(json) => Checkpoint::from_json(&json).map(Some).map_err(|source| {
                CheckpointStoreError::Corrupt {
                    location: self.location.clone(),
                    source,
                }
            }),
        }
    }

    /// Starts a transaction and reads the connector's row with `FOR UPDATE`: until the
    /// transaction ends no other writer can change (or insert) it.
    async fn lock_row<'c>(
        &self,
        conn: &'c mut mysql_async::Conn,
    ) -> Result<(mysql_async::Transaction<'c>, Option<Checkpoint>), CheckpointStoreError> {
        let mut transaction = conn
            .start_transaction(mysql_async::TxOpts::default())
            .await
            .map_err(self.database_error())?;
        let json: Option<String> = transaction
            .exec_first(
                format!(
                    "SELECT checkpoint_json FROM {} WHERE connector_name = ? FOR UPDATE",
                    self.qualified_table
                ),
                (self.connector.as_str(),),
            )
            .await
            .map_err(self.database_error())?;
        let stored = self.parse(json)?;
        Ok((transaction, stored))
    }

    /// Applies the commit rule to the locked row and upserts `checkpoint` in one transaction.
    async fn commit_checked(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointStoreError> {
        let mut conn = self.connection().await?;
        let (mut transaction, stored) = self.lock_row(&mut conn).await?;
        if let Err(refused) = check_commit(&self.location, stored.as_ref(), checkpoint) {
            transaction
                .rollback()
                .await
                .map_err(self.database_error())?;
            return Err(refused);
        }
        self.upsert(&mut transaction, checkpoint).await?;
        transaction.commit().await.map_err(self.database_error())
    }

    /// [`CheckpointStore::take_over`] in one transaction: the row is stamped with `epoch`
    /// under its lock, so no older leader's commit can land between the read and the stamp.
    async fn take_over_locked(
        &self,
        epoch: u64,
    ) -> Result<Option<Checkpoint>, CheckpointStoreError> {
        let mut conn = self.connection().await?;
        let (mut transaction, stored) = self.lock_row(&mut conn).await?;
        let Some(stored) = stored else {
            transaction.commit().await.map_err(self.database_error())?;
            return Ok(None);
        };
        let stamped = stored.clone().with_leader_epoch(Some(epoch));
        if let Err(refused) = check_commit(&self.location, Some(&stored), &stamped) {
            transaction
                .rollback()
                .await
                .map_err(self.database_error())?;
            return Err(refused);
        }
        self.upsert(&mut transaction, &stamped).await?;
        transaction.commit().await.map_err(self.database_error())?;
        Ok(Some(stamped))
    }

    /// `checkpoint set`: stores unconditionally (one autocommitted upsert).
    async fn write(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointStoreError> {
        let mut conn = self.connection().await?;
        self.upsert(&mut conn, checkpoint).await
    }

    async fn upsert(
        &self,
        conn: &mut impl Queryable,
        checkpoint: &Checkpoint,
    ) -> Result<(), CheckpointStoreError> {
        conn.exec_drop(
            format!(
                "INSERT INTO {} \
                   (connector_name, binlog_file, binlog_position, gtid_set, checkpoint_json, updated_at) \
                 VALUES (?, ?, ?, ?, ?, CURRENT_TIMESTAMP(6)) \
                 ON DUPLICATE KEY UPDATE \
                   binlog_file = VALUES(binlog_file), \
                   binlog_position = VALUES(binlog_position), \
                   gtid_set = VALUES(gtid_set), \
                   checkpoint_json = VALUES(checkpoint_json), \
                   updated_at = VALUES(updated_at)",
                self.qualified_table
            ),
            (
                self.connector.as_str(),
                checkpoint.position.binlog.file.as_str(),
                checkpoint.position.binlog.position,
                checkpoint.position.gtid_set.to_string(),
                checkpoint.to_json(),
            ),
        )
        .await
        .map_err(self.database_error())
    }

    async fn delete(&self) -> Result<(), CheckpointStoreError> {
        let mut conn = self.connection().await?;
        conn.exec_drop(
            format!(
                "DELETE FROM {} WHERE connector_name = ?",
                self.qualified_table
            ),
            (self.connector.as_str(),),
        )
        .await
        .map_err(self.database_error())
    }
}

impl CheckpointStore for MysqlCheckpointStore {
    fn describe(&self) -> String {
        format!("table {}", self.location)
    }

    fn load(&self) -> StoreFuture<'_, Option<Checkpoint>> {
        Box::pin(self.bounded("loading", self.read()))
    }

    fn commit<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()> {
        Box::pin(self.bounded("committing", self.commit_checked(checkpoint)))
    }

    fn set<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()> {
        Box::pin(self.bounded("setting", self.write(checkpoint)))
    }

    fn reset(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.bounded("resetting", self.delete()))
    }

    fn take_over(&self, epoch: u64) -> StoreFuture<'_, Option<Checkpoint>> {
        Box::pin(self.bounded("taking over", self.take_over_locked(epoch)))
    }
}
