//! Debezium beside the relay: a Kafka Connect standalone worker (its own JVM) running
//! Debezium 3.6.1's MySQL connector with the Outbox Event Router SMT, against a scratch
//! MariaDB and a Kafka broker of this harness, configured as Debezium's outbox
//! documentation does. The reference outbox-relay's records are compared against.
//!
//! # Contract
//! * [`DebeziumConnect::start`] returns once the connector streams the binlog (its log
//!   says `Connected to binlog at`): rows committed after that are captured. It uses
//!   `snapshot.mode=no_data` (the outbox pattern's choice: old outbox rows were published
//!   already), so rows committed before it are not.
//! * The MariaDB server must be started with [`DEBEZIUM_SERVER_VERSION_ARG`]: Debezium 3.x's
//!   MySQL connector treats a server by its version number, and MariaDB 10.11's real
//!   one makes it issue MySQL 8.4 statements (`SHOW BINARY LOG STATUS`) MariaDB does not
//!   have. The binlog, the replication protocol and the rows are MariaDB's own either way.
//!   (Debezium's separate MariaDB connector is not served by the registry these machines
//!   reach.) outbox-relay still recognises the server as MariaDB from the version's suffix.
//! * The worker's log is `connect.log` in its directory ([`DebeziumConnect::log_path`]);
//!   errors quote its tail. The worker is killed on drop.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::kafka::KafkaBroker;
use crate::process::{
    file_tail, free_port, io_err, jar_folders, jvm_flags, HarnessError, JvmProcess,
    LOG4J2_PROPERTIES,
};
use crate::ScratchMariadb;

/// The `mariadbd` argument that makes a scratch server report a version Debezium's MySQL
/// connector (and the MySQL Connector/J 8.0 driver it runs with here) can work with: a MySQL
/// 5.7 before 5.7.20 uses `SHOW MASTER STATUS` and `@@tx_isolation`, both of which MariaDB
/// 10.11 has. Pass it in [`crate::ScratchOptions::extra_args`].
pub const DEBEZIUM_SERVER_VERSION_ARG: &str = "--version=5.7.19-10.11-MariaDB-debezium-harness";

/// How long the worker may take to start streaming.
const STARTUP_LIMIT: Duration = Duration::from_secs(120);

/// A Kafka Connect converter for keys or values (`key.converter` / `value.converter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Converter {
    /// `org.apache.kafka.connect.storage.StringConverter`.
    String,
    /// `org.apache.kafka.connect.converters.ByteArrayConverter`.
    ByteArray,
    /// `org.apache.kafka.connect.json.JsonConverter` with `schemas.enable` as given.
    Json {
        /// `schemas.enable`: the `{"schema":...,"payload":...}` envelope.
        schemas: bool,
    },
}

impl Converter {
    /// The worker properties that select this converter for `role` (`key` or `value`).
    fn properties(self, role: &str) -> String {
        match self {
            Converter::String => {
                format!("{role}.converter=org.apache.kafka.connect.storage.StringConverter\n")
            }
            Converter::ByteArray => {
                format!("{role}.converter=org.apache.kafka.connect.converters.ByteArrayConverter\n")
            }
            Converter::Json { schemas } => format!(
                "{role}.converter=org.apache.kafka.connect.json.JsonConverter\n\
                 {role}.converter.schemas.enable={schemas}\n"
            ),
        }
    }
}

/// What the Debezium connector reads and how it converts.
#[derive(Debug, Clone)]
pub struct DebeziumOptions {
    /// The connector's name (also Debezium's `topic.prefix`); unique per test on a shared
    /// broker, since it names the schema history topic too.
    pub name: String,
    /// `table.include.list`: the outbox table, `db.table`.
    pub outbox_table: String,
    /// `key.converter`.
    pub key_converter: Converter,
    /// `value.converter`.
    pub value_converter: Converter,
    /// `database.server.id`: the replica id Debezium registers with (unique per server).
    pub server_id: u32,
    /// More connector properties (`transforms.outbox.*` options and the like), appended last
    /// so they override the defaults.
    pub extra: Vec<(String, String)>,
}

impl DebeziumOptions {
    /// Debezium's documented outbox setup for `outbox_table` (Debezium's default column
    /// names: `id`, `aggregatetype`, `aggregateid`, `type`, `payload`), string converters.
    pub fn outbox(name: &str, outbox_table: &str) -> DebeziumOptions {
        DebeziumOptions {
            name: name.to_string(),
            outbox_table: outbox_table.to_string(),
            key_converter: Converter::String,
            value_converter: Converter::String,
            server_id: 54_321,
            extra: Vec::new(),
        }
    }
}

/// A running Kafka Connect standalone worker with one Debezium outbox connector.
pub struct DebeziumConnect {
    /// The worker JVM.
    process: Option<JvmProcess>,
    /// Worker and connector properties, the offsets file, the plugin folder link and the log.
    dir: tempfile::TempDir,
    /// The options it was started with (the connector name and topics derive from them).
    options: DebeziumOptions,
}

impl DebeziumConnect {
    /// Starts the worker with the connector and waits until the connector streams the binlog.
    pub async fn start(
        db: &ScratchMariadb,
        broker: &KafkaBroker,
        options: DebeziumOptions,
    ) -> Result<DebeziumConnect, HarnessError> {
        let jars = jar_folders()?;
        let dir = tempfile::Builder::new()
            .prefix("outbox-connect-")
            .tempdir()
            .map_err(io_err("creating the Connect worker's directory"))?;
        let root = dir.path().to_path_buf();
        // plugin.path names folders *containing* plugin folders: link Debezium's in.
        let plugins = root.join("plugins");
        std::fs::create_dir_all(&plugins).map_err(io_err("creating the plugin folder"))?;
        std::os::unix::fs::symlink(&jars.debezium, plugins.join("debezium-connector-mysql"))
            .map_err(io_err("linking Debezium's plugin folder"))?;
        let rest_port = free_port()?;
        let bootstrap = broker.bootstrap();
        let worker = format!(
            "bootstrap.servers={bootstrap}\n\
             {key}{value}\
             offset.storage.file.filename={offsets}\n\
             offset.flush.interval.ms=1000\n\
             plugin.path={plugins}\n\
             listeners=http://127.0.0.1:{rest_port}\n",
            key = options.key_converter.properties("key"),
            value = options.value_converter.properties("value"),
            offsets = root.join("offsets").display(),
            plugins = plugins.display(),
        );
        let mut connector = format!(
            "name={name}\n\
             connector.class=io.debezium.connector.mysql.MySqlConnector\n\
             tasks.max=1\n\
             database.hostname=127.0.0.1\n\
             database.port={port}\n\
             database.user=root\n\
             database.password=\n\
             database.server.id={server_id}\n\
             topic.prefix={name}\n\
             table.include.list={table}\n\
             schema.history.internal.kafka.bootstrap.servers={bootstrap}\n\
             schema.history.internal.kafka.topic={name}.schema-history\n\
             snapshot.mode=no_data\n\
             tombstones.on.delete=false\n\
             topic.creation.default.replication.factor=1\n\
             topic.creation.default.partitions=1\n\
             transforms=outbox\n\
             transforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n",
            name = options.name,
            port = db.port(),
            server_id = options.server_id,
            table = options.outbox_table,
        );
        for (key, value) in &options.extra {
            connector.push_str(&format!("{key}={value}\n"));
        }
        std::fs::write(root.join("worker.properties"), worker)
            .map_err(io_err("writing worker.properties"))?;
        std::fs::write(root.join("connector.properties"), connector)
            .map_err(io_err("writing connector.properties"))?;
        std::fs::write(root.join("log4j2.properties"), LOG4J2_PROPERTIES)
            .map_err(io_err("writing log4j2.properties"))?;

        let mut flags = jvm_flags("512m");
        flags.push(format!(
            "-Dlog4j2.configurationFile={}",
            root.join("log4j2.properties").display()
        ));
        let log = root.join("connect.log");
        let process = JvmProcess::spawn(
            &flags,
            &format!("{}/*", jars.connect.display()),
            "org.apache.kafka.connect.cli.ConnectStandalone",
            &[
                root.join("worker.properties").display().to_string(),
                root.join("connector.properties").display().to_string(),
            ],
            &root,
            &log,
        )?;
        let mut connect = DebeziumConnect {
            process: Some(process),
            dir,
            options,
        };
        connect.wait_streaming().await?;
        Ok(connect)
    }

    async fn wait_streaming(&mut self) -> Result<(), HarnessError> {
        let started = Instant::now();
        loop {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            if log.contains("Connected to binlog at") {
                return Ok(());
            }
            for fatal in [
                "Task threw an uncaught and unrecoverable exception",
                "Stopping after connector error",
                "Stopping due to error",
            ] {
                if log.contains(fatal) {
                    return Err(self.failure(format!("the worker logged `{fatal}`")));
                }
            }
            let exited = match self.process.as_mut() {
                Some(process) => process.try_wait()?,
                None => None,
            };
            if let Some(status) = exited {
                return Err(self.failure(format!("the worker exited: {status}")));
            }
            if started.elapsed() > STARTUP_LIMIT {
                return Err(self.failure(format!(
                    "the connector did not start streaming within {STARTUP_LIMIT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn failure(&self, reason: String) -> HarnessError {
        HarnessError::Connect {
            reason,
            log: self.log_path().display().to_string(),
            tail: file_tail(&self.log_path(), 40),
        }
    }

    /// The worker's log.
    /// The connector's config as one properties file with its converters (the worker's, as
    /// a connector that names its own would have them): what a user hands
    /// `outbox-relay config from-debezium`.
    pub fn connector_config_with_converters(&self) -> Result<String, HarnessError> {
        let connector = std::fs::read_to_string(self.dir.path().join("connector.properties"))
            .map_err(io_err("reading connector.properties"))?;
        Ok(format!(
            "{connector}{}{}",
            self.options.key_converter.properties("key"),
            self.options.value_converter.properties("value")
        ))
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("connect.log")
    }

    /// The worker's offsets file (`offset.storage.file.filename`, flushed every second and
    /// on a clean stop): what `checkpoint import-debezium --offsets-file` reads in a cutover.
    pub fn offsets_path(&self) -> PathBuf {
        self.dir.path().join("offsets")
    }

    /// The worker JVM's process id while it runs (for CPU and memory accounting, e.g. the
    /// benchmark harness reading `/proc/PID`).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(JvmProcess::pid)
    }

    /// The connector's name.
    pub fn name(&self) -> &str {
        &self.options.name
    }

    /// Stops the worker cleanly (SIGTERM: offsets are flushed), waiting up to 30 s.
    pub fn stop(&mut self) {
        if let Some(process) = self.process.take() {
            process.stop(Duration::from_secs(30));
        }
    }
}

impl Drop for DebeziumConnect {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            process.kill();
        }
        if std::env::var_os("OUTBOX_TEST_KEEP").is_some() {
            eprintln!(
                "keeping the Kafka Connect worker's directory {}",
                self.dir.path().display()
            );
            self.dir.disable_cleanup(true);
        }
    }
}
