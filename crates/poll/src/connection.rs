//! The poll source's connections: opened with the session setup, dropped after a transient
//! failure and reopened after a backoff; lock conflicts retried at once.

use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use outbox_binlog::{BinlogError, TlsOptions};
use tokio::sync::watch;

use crate::claim::SESSION_SETUP;
use crate::error::PollError;
use crate::retry::retry_delay;

/// Where and how the poll source connects.
#[derive(Debug, Clone)]
pub struct ConnectionSettings {
    /// `source.url`, password included.
    pub url: String,
    /// `[source.tls]`.
    pub tls: TlsOptions,
    /// How long one connect may take.
    pub connect_timeout: Duration,
    /// The first reconnect delay; it doubles per failure up to `reconnect_max_backoff`.
    pub reconnect_initial_backoff: Duration,
    /// The largest reconnect delay.
    pub reconnect_max_backoff: Duration,
}

impl ConnectionSettings {
    /// A connection with the poll session set up ([`open_poll_session`]).
    pub async fn open(&self) -> Result<mysql_async::Conn, BinlogError> {
        open_poll_session(&self.url, &self.tls, self.connect_timeout).await
    }
}

/// Told how a connection fares: the claims connection's state is the source's readiness
/// (`/readyz`); the others report nothing, so a mark's retry does not flap it.
pub trait ConnectionHealth: Send + Sync {
    /// The connection is open.
    fn connected(&self);
    /// It failed with `error` and will be retried.
    fn retrying(&self, error: &str);
}

/// Whether a connection's failure stops the source.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// Connecting failed for good (a refused password, a bad TLS setting).
    #[error(transparent)]
    Connect(BinlogError),
    /// A statement failed for good (a missing column or grant).
    #[error(transparent)]
    Statement(PollError),
}

/// A connection to the source with the poll session set up ([`SESSION_SETUP`]): the
/// poll source's, and the `poll` commands'.
pub async fn open_poll_session(
    url: &str,
    tls: &TlsOptions,
    timeout: Duration,
) -> Result<mysql_async::Conn, BinlogError> {
    let (mut conn, _tls) = outbox_binlog::connect_to_server(url, tls, timeout).await?;
    for &statement in SESSION_SETUP {
        conn.query_drop(statement)
            .await
            .map_err(|error| BinlogError::Connection {
                server: outbox_binlog::redact_url(url),
                message: format!("setting up the poll session (`{statement}`): {error}"),
            })?;
    }
    Ok(conn)
}

/// Completes once `stop` holds `true` (at once if it does), or its sender is gone.
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// One connection of the poll source.
pub struct PollConnection {
    /// Where to connect.
    settings: ConnectionSettings,
    /// For messages: which task's connection.
    purpose: &'static str,
    /// The open connection, if any.
    conn: Option<mysql_async::Conn>,
    /// Failures since the last successful connect: the reconnect delay's exponent.
    failures: u32,
    /// Set after a failure: wait this long before reconnecting.
    retry_in: Option<Duration>,
    /// Told of connects and failures, when this connection reports readiness.
    health: Option<Arc<dyn ConnectionHealth>>,
}

impl PollConnection {
    /// A connection for `purpose` (`claims`, `marks`, `leases`), opened on first use.
    pub fn new(settings: ConnectionSettings, purpose: &'static str) -> Self {
        Self {
            settings,
            purpose,
            conn: None,
            failures: 0,
            retry_in: None,
            health: None,
        }
    }

    /// This connection's state is the source's readiness.
    pub fn reporting_health(mut self, health: Arc<dyn ConnectionHealth>) -> Self {
        self.health = Some(health);
        self
    }

    /// Uses `conn`, opened by the caller (with [`open_poll_session`], under its startup
    /// rule), from now on.
    pub fn adopt(&mut self, conn: mysql_async::Conn) -> &mut mysql_async::Conn {
        self.connected();
        self.conn.insert(conn)
    }

    /// The connection, reconnecting after the backoff a failure asked for; `None` once
    /// `stop` holds. A definite connect error (a refused password) is returned.
    pub async fn get(
        &mut self,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<&mut mysql_async::Conn>, ConnectionError> {
        loop {
            if self.conn.is_some() {
                return Ok(self.conn.as_mut());
            }
            if let Some(delay) = self.retry_in.take() {
                tokio::select! {
                    _ = stopped(stop) => return Ok(None),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            match self.open().await {
                Ok(conn) => {
                    self.failures = 0;
                    self.connected();
                    self.conn = Some(conn);
                }
                Err(error) if error.is_transient() => {
                    self.retrying(&error.to_string());
                    let delay = self.next_delay();
                    tracing::warn!(%error, connection = self.purpose, retry_in_ms = delay.as_millis() as u64, "poll source: reconnecting");
                    self.retry_in = Some(delay);
                }
                Err(error) => return Err(ConnectionError::Connect(error)),
            }
        }
    }

    /// After a failed statement: a lock conflict is retried at once; another transient
    /// error drops the connection (reopened after a backoff by the next
    /// [`PollConnection::get`]); a definite one is returned.
    pub fn failed(&mut self, error: PollError) -> Result<(), ConnectionError> {
        if error.is_lock_conflict() {
            // Deadlocks between claims and marks are part of the protocol: at once again.
            tracing::debug!(%error, connection = self.purpose, "poll source: lock conflict; retrying at once");
            return Ok(());
        }
        if !error.is_transient() {
            return Err(ConnectionError::Statement(error));
        }
        self.retrying(&error.to_string());
        let delay = self.next_delay();
        tracing::warn!(%error, connection = self.purpose, retry_in_ms = delay.as_millis() as u64, "poll source: retrying after a transient failure");
        self.conn = None;
        self.retry_in = Some(delay);
        Ok(())
    }

    /// The reconnect delay: doubling per failure, bounded, with up to a quarter of jitter
    /// so relays that lost one server do not come back in step.
    fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        retry_delay(
            self.failures,
            self.settings.reconnect_initial_backoff,
            self.settings.reconnect_max_backoff,
            0.75 + rand::random::<f64>() / 4.0,
        )
    }

    fn connected(&self) {
        if let Some(health) = &self.health {
            health.connected();
        }
    }

    fn retrying(&self, error: &str) {
        if let Some(health) = &self.health {
            health.retrying(error);
        }
    }

    async fn open(&self) -> Result<mysql_async::Conn, BinlogError> {
        self.settings.open().await
    }
}
