//! Dev-only test harness: a **scratch MariaDB** server started as its own process for one
//! test, with binary logging set up the way outbox-relay needs it (`log_bin`,
//! `binlog_format=ROW`, `binlog_row_image=FULL`, `binlog_row_metadata=FULL`, a `server_id`).
//!
//! Tests never touch the machine's MariaDB service on port 3306: each [`ScratchMariadb`] has its
//! own temporary data directory, a free loopback port and its own socket, and is killed and
//! removed when dropped.
//!
//! `mariadb-install-db` runs once per test process into a template directory; each server
//! copies the template, so starting one costs about a second.
//!
//! Besides MariaDB, the kit runs the Java side of the integration tests:
//! * [`kafka`]: an Apache Kafka 4.4 KRaft broker (one shared per test process, private ones
//!   for tests that kill or freeze theirs);
//! * [`consume`]: reading back what was produced, with a fresh rdkafka consumer or with Apache
//!   Kafka's own console consumer;
//! * [`connect`]: Debezium's MySQL connector + Outbox Event Router in a Kafka Connect worker,
//!   the reference outbox-relay must match.
//!
//! The jars come from Maven through `scripts/fetch-jars.sh` (see [`process::jar_folders`]).

pub mod certs;
pub mod connect;
pub mod consume;
pub mod kafka;
pub mod oidc;
pub mod process;

use std::sync::atomic::{AtomicU64, Ordering};

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Why a scratch server could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// A MariaDB program is not installed.
    #[error("`{program}` not found on PATH or in /usr/sbin: install MariaDB server binaries (apt-get install mariadb-server)")]
    MissingProgram {
        /// The missing program.
        program: &'static str,
    },
    /// An I/O error while preparing directories or spawning processes.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// `mariadb-install-db` failed.
    #[error("mariadb-install-db failed ({status}); its output:\n{output}")]
    InstallFailed {
        /// Exit status.
        status: String,
        /// Combined output.
        output: String,
    },
    /// The server did not accept connections in time.
    #[error("scratch MariaDB on port {port} did not accept connections within {waited:?}; error log {log}:\n{tail}")]
    StartTimeout {
        /// The port it was told to listen on.
        port: u16,
        /// How long we waited.
        waited: Duration,
        /// Path of its error log.
        log: String,
        /// The end of its error log.
        tail: String,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TestkitError {
    let what = what.into();
    move |source| TestkitError::Io { what, source }
}

/// How often [`ScratchMariadb::start_with`] tries a new port when the server exits at once
/// (its port was taken between choosing and binding it).
const START_ATTEMPTS: u32 = 3;

/// Settings for one scratch server.
#[derive(Debug, Clone)]
pub struct ScratchOptions {
    /// `--server-id` of the scratch server.
    pub server_id: u32,
    /// `--binlog-row-metadata` (`FULL` by default; `MINIMAL` to test the name lookup path).
    pub binlog_row_metadata: &'static str,
    /// Extra `--option=value` arguments for `mariadbd`.
    pub extra_args: Vec<String>,
}

impl Default for ScratchOptions {
    fn default() -> Self {
        Self {
            server_id: 1,
            binlog_row_metadata: "FULL",
            extra_args: Vec::new(),
        }
    }
}

/// A running scratch MariaDB. Killed, and its data directory removed, on drop.
pub struct ScratchMariadb {
    /// The server process; `None` while stopped (see [`ScratchMariadb::stop`]).
    child: Option<Child>,
    /// Owns the temporary directory (data, socket, logs) so it lives as long as the server.
    dir: tempfile::TempDir,
    /// TCP port on 127.0.0.1 the server listens on; kept across restarts.
    port: u16,
    /// Options it was started with; reused by [`ScratchMariadb::restart`].
    options: ScratchOptions,
    /// Unique among all scratch servers this process started (and, through the process id
    /// and start time, across processes): a prefix for names a test creates on a shared
    /// resource, such as topics on the shared Kafka broker.
    tag: String,
}

/// Numbers scratch servers within this process for [`ScratchMariadb::tag`].
static SERVER_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A tag no other scratch server of this or another test process has: the process id, the
/// process's start second (pids are reused across runs against an external broker) and a
/// sequence number.
fn unique_tag() -> String {
    static PROCESS_START: OnceLock<u64> = OnceLock::new();
    let start = *PROCESS_START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs() % 100_000)
            .unwrap_or(0)
    });
    format!(
        "t{}p{start}n{}",
        std::process::id(),
        SERVER_SEQUENCE.fetch_add(1, Ordering::Relaxed)
    )
}

fn find_program(name: &'static str) -> Result<PathBuf, TestkitError> {
    let path_dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_dirs)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or(TestkitError::MissingProgram { program: name })
}

/// The template data directory, installed once per test process.
fn template_datadir() -> Result<&'static Path, TestkitError> {
    static TEMPLATE: OnceLock<Result<tempfile::TempDir, String>> = OnceLock::new();
    let result = TEMPLATE.get_or_init(|| {
        let dir = install_template().map_err(|e| e.to_string())?;
        // A static is never dropped: its directory goes when the process exits.
        process::remove_when_process_exits(dir.path()).map_err(|e| e.to_string())?;
        Ok(dir)
    });
    match result {
        Ok(dir) => Ok(dir.path()),
        Err(message) => Err(TestkitError::Io {
            what: "installing the template data directory".into(),
            source: io::Error::other(message.clone()),
        }),
    }
}

fn install_template() -> Result<tempfile::TempDir, TestkitError> {
    // mariadb-install-db fails now and then when several test processes bootstrap at
    // once (a temporary table vanishing from the shared /tmp); each attempt uses its own
    // tmpdir, and a failed attempt is retried in a fresh directory.
    let mut last_error = None;
    for _attempt in 0..3 {
        match install_template_once() {
            Ok(dir) => return Ok(dir),
            Err(error @ TestkitError::InstallFailed { .. }) => last_error = Some(error),
            Err(other) => return Err(other),
        }
    }
    Err(last_error.unwrap_or(TestkitError::MissingProgram {
        program: "mariadb-install-db",
    }))
}

fn install_template_once() -> Result<tempfile::TempDir, TestkitError> {
    let install = find_program("mariadb-install-db")?;
    let dir = tempfile::Builder::new()
        .prefix("outbox-mariadb-template-")
        .tempdir()
        .map_err(io_err("creating the template directory"))?;
    let tmpdir = dir.path().join("tmp");
    std::fs::create_dir_all(&tmpdir).map_err(io_err("creating the template tmpdir"))?;
    let output = Command::new(&install)
        .arg("--no-defaults")
        .arg("--user=root")
        .arg(format!("--datadir={}", dir.path().join("data").display()))
        .arg(format!("--tmpdir={}", tmpdir.display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .arg("--innodb-log-file-size=8M")
        .output()
        .map_err(io_err(format!("running {}", install.display())))?;
    if !output.status.success() {
        return Err(TestkitError::InstallFailed {
            status: output.status.to_string(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        });
    }
    Ok(dir)
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

fn free_port() -> Result<u16, TestkitError> {
    process::loopback_port_free_now().map_err(io_err("finding a free port"))
}

impl ScratchMariadb {
    /// Starts a scratch server with default options (server_id 1, FULL row metadata).
    pub async fn start() -> Result<Self, TestkitError> {
        Self::start_with(ScratchOptions::default()).await
    }

    /// Starts a scratch server with the given options and waits until it accepts connections.
    pub async fn start_with(options: ScratchOptions) -> Result<Self, TestkitError> {
        let template = template_datadir()?.to_path_buf();
        let dir = tempfile::Builder::new()
            .prefix("outbox-mariadb-")
            .tempdir()
            .map_err(io_err("creating the scratch directory"))?;
        let data = dir.path().join("data");
        let copy_from = template.join("data");
        tokio::task::spawn_blocking(move || copy_dir(&copy_from, &data))
            .await
            .map_err(|e| TestkitError::Io {
                what: "copying the template".into(),
                source: io::Error::other(e.to_string()),
            })?
            .map_err(io_err("copying the template data directory"))?;
        let mut server = ScratchMariadb {
            child: None,
            dir,
            port: free_port()?,
            options,
            tag: unique_tag(),
        };
        // The port was free when chosen but another process may take it before the server
        // binds it; then the server exits at once and a new port is tried.
        let mut attempt = 1;
        loop {
            match server.launch().await {
                Ok(()) => return Ok(server),
                Err(error) => {
                    let exited = server
                        .child
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten())
                        .is_some();
                    server.kill();
                    if !exited || attempt >= START_ATTEMPTS {
                        return Err(error);
                    }
                    attempt += 1;
                    server.port = free_port()?;
                }
            }
        }
    }

    async fn launch(&mut self) -> Result<(), TestkitError> {
        let mariadbd = find_program("mariadbd")?;
        let root = self.dir.path();
        let log = root.join("error.log");
        let mut cmd = Command::new(&mariadbd);
        cmd.arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--datadir={}", root.join("data").display()))
            .arg(format!("--socket={}", root.join("mysqld.sock").display()))
            .arg(format!("--tmpdir={}", root.display()))
            .arg(format!("--pid-file={}", root.join("mysqld.pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!(
                "--log-bin={}",
                root.join("data").join("binlog").display()
            ))
            .arg("--binlog-format=ROW")
            .arg("--binlog-row-image=FULL")
            .arg(format!(
                "--binlog-row-metadata={}",
                self.options.binlog_row_metadata
            ))
            .arg(format!("--server-id={}", self.options.server_id))
            .arg("--innodb-buffer-pool-size=64M")
            .arg("--innodb-log-file-size=8M")
            .arg("--max-allowed-packet=1G")
            .arg("--skip-name-resolve=0")
            .arg("--character-set-server=utf8mb4")
            .arg("--collation-server=utf8mb4_general_ci")
            .args(&self.options.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(io_err(format!("spawning {}", mariadbd.display())))?;
        self.child = Some(child);
        let started = Instant::now();
        let limit = Duration::from_secs(60);
        loop {
            if let Ok(mut conn) = mysql_async::Conn::from_url(self.url()).await {
                use mysql_async::prelude::Queryable;
                let datadir: Result<Option<String>, _> = conn.query_first("SELECT @@datadir").await;
                let _ = conn.disconnect().await;
                // Only our own server counts: another test's server may answer on a port
                // that was taken between choosing and binding it.
                if let Ok(Some(datadir)) = datadir {
                    if self.is_own_datadir(&datadir) {
                        return Ok(());
                    }
                }
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .is_some();
            if exited || started.elapsed() > limit {
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: String = tail
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(TestkitError::StartTimeout {
                    port: self.port,
                    waited: started.elapsed(),
                    log: log.display().to_string(),
                    tail,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// True when `reported` (a server's `@@datadir`) is this server's data directory.
    fn is_own_datadir(&self, reported: &str) -> bool {
        let ours = std::fs::canonicalize(self.datadir()).unwrap_or_else(|_| self.datadir());
        let theirs = Path::new(reported.trim_end_matches('/'));
        let theirs = std::fs::canonicalize(theirs).unwrap_or_else(|_| theirs.to_path_buf());
        ours == theirs
    }

    /// `mysql://root@127.0.0.1:PORT` (root has no password on a scratch server).
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    /// `mysql://root@127.0.0.1:PORT/DATABASE`.
    pub fn url_with_db(&self, database: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{database}", self.port)
    }

    /// A name prefix unique to this server (see the field's docs): tests put it in front of
    /// the topics they use on the shared Kafka broker.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's data directory; binlog files are `binlog.NNNNNN` in it.
    pub fn datadir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's `server_id`.
    pub fn server_id(&self) -> u32 {
        self.options.server_id
    }

    /// Opens a new connection as root.
    pub async fn conn(&self) -> Result<mysql_async::Conn, mysql_async::Error> {
        mysql_async::Conn::from_url(self.url()).await
    }

    /// Runs each statement in order on a fresh connection (a test helper: panics are the
    /// caller's `?`/`unwrap` to decide).
    pub async fn exec(&self, statements: &[&str]) -> Result<(), mysql_async::Error> {
        use mysql_async::prelude::Queryable;
        let mut conn = self.conn().await?;
        for statement in statements {
            conn.query_drop(*statement).await?;
        }
        conn.disconnect().await
    }

    /// Kills the server (SIGKILL: a crash, not a clean shutdown) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server with SIGTERM (clean shutdown) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY-free: use the `kill` program to send SIGTERM without libc.
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            // A paused (SIGSTOP) server only acts on SIGTERM once it runs again.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server process (SIGSTOP): connections stay open but nothing is sent, like
    /// a hung server or a silently dead network path. Undo with [`ScratchMariadb::resume`].
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Sends a signal (as a `kill` argument, e.g. `-STOP`) to the server process, if running.
    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg(signal)
                .arg(child.id().to_string())
                .status();
        }
    }

    /// Starts the server again on the same port and data directory (after `stop` or `kill`).
    pub async fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop();
        self.launch().await
    }
}

impl Drop for ScratchMariadb {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mysql_async::prelude::Queryable;

    #[tokio::test]
    async fn scratch_server_has_binlog_settings() {
        let server = ScratchMariadb::start()
            .await
            .expect("scratch server starts");
        assert_ne!(server.port(), 3306);
        let mut conn = server.conn().await.expect("connects");
        let row: (String, String, String, String, u32) = conn
            .query_first(
                "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@server_id",
            )
            .await
            .expect("query")
            .expect("one row");
        assert_eq!(
            row,
            ("1".into(), "ROW".into(), "FULL".into(), "FULL".into(), 1)
        );
        conn.disconnect().await.expect("disconnect");
    }

    #[tokio::test]
    async fn only_its_own_server_counts_as_started() {
        let first = ScratchMariadb::start().await.expect("first starts");
        let second = ScratchMariadb::start().await.expect("second starts");
        assert_ne!(first.port(), second.port());
        let mut conn = first.conn().await.expect("connects");
        let datadir: String = conn
            .query_first("SELECT @@datadir")
            .await
            .expect("query")
            .expect("one row");
        assert!(first.is_own_datadir(&datadir), "{datadir}");
        assert!(!second.is_own_datadir(&datadir), "{datadir}");
        conn.disconnect().await.expect("disconnect");
    }

    #[tokio::test]
    async fn restart_keeps_data() {
        let mut server = ScratchMariadb::start_with(ScratchOptions {
            server_id: 9,
            ..ScratchOptions::default()
        })
        .await
        .expect("scratch server starts");
        server
            .exec(&[
                "CREATE DATABASE t",
                "CREATE TABLE t.x (a INT) ENGINE=InnoDB",
                "INSERT INTO t.x VALUES (42)",
            ])
            .await
            .expect("setup");
        server.restart().await.expect("restarts");
        let mut conn = server.conn().await.expect("connects");
        let value: Option<i32> = conn.query_first("SELECT a FROM t.x").await.expect("query");
        assert_eq!(value, Some(42));
    }
}
