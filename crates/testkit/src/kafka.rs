//! A real Apache Kafka 4.4 broker for process-level tests: a single-node KRaft cluster
//! (broker and controller in one JVM) on free loopback ports, with its data in a temporary
//! directory.
//!
//! # Contract
//! * [`KafkaBroker::start`] starts a **private** broker and returns once it answers a metadata
//!   request. Use one only where a test stops, kills, freezes or restarts its broker.
//! * [`KafkaBroker::shared`] is the broker all other tests of one test process share. It is
//!   started on first use and lives until the process exits (a watchdog kills it then and
//!   another removes its directory, see [`crate::process`]). Tests sharing it must use topic names no other test uses:
//!   [`crate::ScratchMariadb::tag`] gives each test a unique prefix. When
//!   `OUTBOX_TEST_KAFKA_BOOTSTRAP` is set, the shared broker is that cluster instead (started
//!   by you, e.g. to watch it with your own tools); nothing is started then.
//! * Topics are never auto-created (`auto.create.topics.enable=false`): create them with
//!   [`KafkaBroker::create_topic`] (idempotent; returns once every partition has a leader), or
//!   let the code under test create them through the admin API.
//! * Replication factors are 1 and transactions work (`transaction.state.log.*` = 1).
//! * [`KafkaBroker::kill`] is SIGKILL (a crash), [`KafkaBroker::stop`] SIGTERM (a clean
//!   shutdown); [`KafkaBroker::restart`] starts it again on the **same ports and data**, so
//!   clients configured with [`KafkaBroker::bootstrap`] see the same cluster come back with
//!   everything it had acknowledged. [`KafkaBroker::restart_empty`] wipes the data first: a
//!   new cluster at the old address (producer ids and topics gone).
//! * [`KafkaBroker::freeze`] / [`KafkaBroker::thaw`] send SIGSTOP / SIGCONT: connections stay
//!   open but nothing answers, which is how a hung broker or a network partition looks.
//! * Each launch's output goes to `kafka-N.log` in the broker's directory
//!   ([`KafkaBroker::log_path`]); failure messages quote its tail. Set `OUTBOX_TEST_KEEP=1` to
//!   keep the directory after the test.
//!
//! # Resources
//! One broker takes about 300 MB of memory (heap capped at 512 MB) and 5-10 s of one core to
//! start (format + start-up); tests share one per process for that reason.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::OnceCell;

use crate::process::{
    file_tail, free_port, io_err, jar_folders, jvm_flags, kafka_err, send_signal, HarnessError,
    JvmProcess, LOG4J2_PROPERTIES,
};

/// How long a launch may take to answer metadata before it counts as failed.
const STARTUP_LIMIT: Duration = Duration::from_secs(90);

/// How many times [`KafkaBroker::start`] tries (new ports each time) before giving up.
const START_ATTEMPTS: u32 = 3;

/// The environment variable naming an external cluster to use as the shared broker.
pub const BOOTSTRAP_ENV: &str = "OUTBOX_TEST_KAFKA_BOOTSTRAP";

/// A Kafka broker process (or, for the shared broker with [`BOOTSTRAP_ENV`] set, an external
/// cluster). A private broker is killed, and its directory removed, on drop.
pub struct KafkaBroker {
    /// The JVM; `None` after [`KafkaBroker::kill`]/[`KafkaBroker::stop`] until a restart, and
    /// always for an external cluster.
    process: Option<JvmProcess>,
    /// Config, data (`data/`) and logs; kept across restarts so the data survives them.
    /// `None` for an external cluster.
    dir: Option<tempfile::TempDir>,
    /// The client listener's address, `127.0.0.1:PORT` (or the external bootstrap list);
    /// kept across restarts so clients find the broker again.
    bootstrap: String,
    /// The client listener's port (0 for an external cluster).
    port: u16,
    /// The KRaft controller listener's port (0 for an external cluster).
    controller_port: u16,
    /// How many times the JVM was launched; numbers the log files so each launch's log is
    /// kept apart.
    launches: u32,
    /// Whether the process is stopped with SIGSTOP, so a kill or stop resumes it first.
    frozen: bool,
    /// True for the process-wide shared broker, which tests must not stop or freeze.
    shared: bool,
    /// The TLS and SASL_SSL listeners, when started with [`KafkaBroker::start_secure`].
    secure: Option<SecureListeners>,
}

/// TLS listeners of a broker started with [`KafkaBroker::start_secure`].
#[derive(Debug, Clone)]
pub struct BrokerSecurity {
    /// PEM file with the broker's private key (PKCS#8) and certificate chain (Kafka's
    /// `PEM` key store), e.g. [`crate::certs::TestCertificates::server_key_and_cert`].
    pub keystore_pem: PathBuf,
    /// SCRAM-SHA-512 users (name, password) created when the storage is formatted.
    pub scram_users: Vec<(String, String)>,
}

/// The extra listeners and what they need.
#[derive(Debug, Clone)]
struct SecureListeners {
    /// What the caller asked for.
    security: BrokerSecurity,
    /// The `SSL` listener's port.
    ssl_port: u16,
    /// The `SASL_SSL` (SCRAM-SHA-512) listener's port.
    sasl_ssl_port: u16,
    /// The `OAUTH` listener's port: `SASL_PLAINTEXT` with OAUTHBEARER, unsecured JWTs
    /// validated by Kafka's default (unsigned, `alg: none`) validator.
    oauth_port: u16,
}

impl KafkaBroker {
    /// Starts a private broker on free loopback ports and waits until it answers metadata.
    ///
    /// A port that was free when chosen can be taken by another process before the broker
    /// binds it; the broker then exits at once, and a new pair of ports is tried (up to
    /// [`START_ATTEMPTS`] times).
    pub async fn start() -> Result<Self, HarnessError> {
        let mut attempt = 1;
        loop {
            match Self::start_once().await {
                Ok(broker) => return Ok(broker),
                Err(error @ HarnessError::StartTimeout { .. }) if attempt < START_ATTEMPTS => {
                    eprintln!("Kafka broker start attempt {attempt} failed, retrying on new ports: {error}");
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// A private broker with three more listeners besides PLAINTEXT (which tests keep for
    /// their own admin and read-back clients): `SSL` ([`KafkaBroker::ssl_bootstrap`]) and
    /// `SASL_SSL` with SCRAM-SHA-512 ([`KafkaBroker::sasl_ssl_bootstrap`]), both serving
    /// `security.keystore_pem`, and `SASL_PLAINTEXT` with OAUTHBEARER
    /// ([`KafkaBroker::oauth_bootstrap`]).
    pub async fn start_secure(security: BrokerSecurity) -> Result<Self, HarnessError> {
        let mut attempt = 1;
        loop {
            match Self::start_once_with(Some(security.clone())).await {
                Ok(broker) => return Ok(broker),
                Err(error @ HarnessError::StartTimeout { .. }) if attempt < START_ATTEMPTS => {
                    eprintln!("Kafka broker start attempt {attempt} failed, retrying on new ports: {error}");
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// `127.0.0.1:PORT` of the `SSL` listener (only with [`KafkaBroker::start_secure`]).
    pub fn ssl_bootstrap(&self) -> Option<String> {
        self.secure
            .as_ref()
            .map(|secure| format!("127.0.0.1:{}", secure.ssl_port))
    }

    /// `127.0.0.1:PORT` of the `SASL_SSL` listener (only with [`KafkaBroker::start_secure`]).
    pub fn sasl_ssl_bootstrap(&self) -> Option<String> {
        self.secure
            .as_ref()
            .map(|secure| format!("127.0.0.1:{}", secure.sasl_ssl_port))
    }

    /// `127.0.0.1:PORT` of the `OAUTH` listener (`SASL_PLAINTEXT`, OAUTHBEARER with
    /// unsecured JWTs such as [`crate::oidc::TokenEndpoint`] issues; only with
    /// [`KafkaBroker::start_secure`]).
    pub fn oauth_bootstrap(&self) -> Option<String> {
        self.secure
            .as_ref()
            .map(|secure| format!("127.0.0.1:{}", secure.oauth_port))
    }

    async fn start_once() -> Result<Self, HarnessError> {
        Self::start_once_with(None).await
    }

    async fn start_once_with(security: Option<BrokerSecurity>) -> Result<Self, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("outbox-kafka-")
            .tempdir()
            .map_err(io_err("creating the broker's scratch directory"))?;
        let port = free_port()?;
        let controller_port = free_port()?;
        let secure = match security {
            Some(security) => Some(SecureListeners {
                security,
                ssl_port: free_port()?,
                sasl_ssl_port: free_port()?,
                oauth_port: free_port()?,
            }),
            None => None,
        };
        let mut broker = KafkaBroker {
            secure,
            process: None,
            dir: Some(dir),
            bootstrap: format!("127.0.0.1:{port}"),
            port,
            controller_port,
            launches: 0,
            frozen: false,
            shared: false,
        };
        broker.write_config()?;
        broker.format_storage().await?;
        broker.launch().await?;
        Ok(broker)
    }

    /// The broker shared by every test of this process (see the module docs).
    pub async fn shared() -> Result<&'static KafkaBroker, HarnessError> {
        static SHARED: OnceCell<KafkaBroker> = OnceCell::const_new();
        SHARED
            .get_or_try_init(|| async {
                let mut broker = match std::env::var(BOOTSTRAP_ENV) {
                    Ok(bootstrap) if !bootstrap.trim().is_empty() => KafkaBroker {
                        secure: None,
                        process: None,
                        dir: None,
                        bootstrap: bootstrap.trim().to_string(),
                        port: 0,
                        controller_port: 0,
                        launches: 0,
                        frozen: false,
                        shared: true,
                    },
                    _ => KafkaBroker::start().await?,
                };
                broker.shared = true;
                // A static is never dropped: its directory goes when the process exits.
                if let Some(dir) = &broker.dir {
                    crate::process::remove_when_process_exits(dir.path())?;
                }
                Ok(broker)
            })
            .await
    }

    fn dir_path(&self) -> Result<PathBuf, HarnessError> {
        match &self.dir {
            Some(dir) => Ok(dir.path().to_path_buf()),
            None => Err(HarnessError::SharedBroker {
                operation: "managing the process of an external cluster",
            }),
        }
    }

    fn describe(&self) -> String {
        format!("Kafka broker on {}", self.bootstrap)
    }

    /// `server.properties` for a single-node KRaft cluster on our two ports.
    fn server_properties(&self, data: &std::path::Path) -> String {
        let port = self.port;
        let controller = self.controller_port;
        let base = self.plain_server_properties(data);
        let Some(secure) = &self.secure else {
            return base;
        };
        let (ssl, sasl, oauth) = (secure.ssl_port, secure.sasl_ssl_port, secure.oauth_port);
        let listeners = format!(
            "listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller},\
             SSL://127.0.0.1:{ssl},SASL_SSL://127.0.0.1:{sasl},OAUTH://127.0.0.1:{oauth}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl},\
             SASL_SSL://127.0.0.1:{sasl},OAUTH://127.0.0.1:{oauth}\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,\
             SSL:SSL,SASL_SSL:SASL_SSL,OAUTH:SASL_PLAINTEXT\n"
        );
        let mut properties: String = base
            .lines()
            .filter(|line| {
                !line.starts_with("listeners=")
                    && !line.starts_with("advertised.listeners=")
                    && !line.starts_with("listener.security.protocol.map=")
            })
            .map(|line| format!("{line}\n"))
            .collect();
        properties.push_str(&listeners);
        properties.push_str(&format!(
            "ssl.keystore.type=PEM\n\
             ssl.keystore.location={}\n\
             sasl.enabled.mechanisms=SCRAM-SHA-512\n\
             listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=\
             org.apache.kafka.common.security.scram.ScramLoginModule required;\n\
             listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER\n\
             listener.name.oauth.oauthbearer.sasl.jaas.config=\
             org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;\n",
            secure.security.keystore_pem.display()
        ));
        properties
    }

    /// The properties of the PLAINTEXT-only broker.
    fn plain_server_properties(&self, data: &std::path::Path) -> String {
        let port = self.port;
        let controller = self.controller_port;
        format!(
            "process.roles=broker,controller\n\
             node.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{controller}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\n\
             inter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={data}\n\
             num.partitions=1\n\
             default.replication.factor=1\n\
             offsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=1\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             transaction.state.log.num.partitions=1\n\
             share.coordinator.state.topic.replication.factor=1\n\
             share.coordinator.state.topic.min.isr=1\n\
             auto.create.topics.enable=false\n\
             group.initial.rebalance.delay.ms=0\n\
             log.flush.interval.messages=9223372036854775807\n\
             num.network.threads=2\n\
             num.io.threads=2\n\
             background.threads=2\n\
             log.cleaner.threads=1\n\
             message.max.bytes=104857600\n\
             replica.fetch.max.bytes=104857600\n\
             socket.request.max.bytes=209715200\n",
            data = data.display()
        )
    }

    fn write_config(&self) -> Result<(), HarnessError> {
        let dir = self.dir_path()?;
        let properties = self.server_properties(&dir.join("data"));
        std::fs::write(dir.join("server.properties"), properties)
            .map_err(io_err("writing server.properties"))?;
        std::fs::write(dir.join("log4j2.properties"), LOG4J2_PROPERTIES)
            .map_err(io_err("writing log4j2.properties"))?;
        Ok(())
    }

    /// `kafka-storage format` with a fresh cluster id (KRaft refuses unformatted storage).
    async fn format_storage(&self) -> Result<(), HarnessError> {
        let dir = self.dir_path()?;
        let jars = jar_folders()?;
        let classpath = format!("{}/*", jars.kafka.display());
        let log = dir.join("format.log");
        let cluster_id = random_cluster_id();
        let mut flags = jvm_flags("256m");
        flags.push(format!(
            "-Dlog4j2.configurationFile={}",
            dir.join("log4j2.properties").display()
        ));
        let args = vec![
            "format".to_string(),
            "-t".to_string(),
            cluster_id,
            "-c".to_string(),
            dir.join("server.properties").display().to_string(),
        ];
        let mut args = args;
        if let Some(secure) = &self.secure {
            for (name, password) in &secure.security.scram_users {
                args.push("--add-scram".into());
                args.push(format!("SCRAM-SHA-512=[name={name},password={password}]"));
            }
        }
        let mut format = JvmProcess::spawn(
            &flags,
            &classpath,
            "kafka.tools.StorageTool",
            &args,
            &dir,
            &log,
        )?;
        let started = Instant::now();
        loop {
            if let Some(status) = format.try_wait()? {
                if status.success() {
                    return Ok(());
                }
                return Err(HarnessError::StartTimeout {
                    what: format!("`kafka-storage format` for {}", self.describe()),
                    waited: started.elapsed(),
                    reason: format!("exited with {status}"),
                    log: log.display().to_string(),
                    tail: file_tail(&log, 30),
                });
            }
            if started.elapsed() > STARTUP_LIMIT {
                format.kill();
                return Err(HarnessError::StartTimeout {
                    what: format!("`kafka-storage format` for {}", self.describe()),
                    waited: started.elapsed(),
                    reason: "timed out".into(),
                    log: log.display().to_string(),
                    tail: file_tail(&log, 30),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The log file of the current (latest) launch.
    pub fn log_path(&self) -> PathBuf {
        match &self.dir {
            Some(dir) => dir
                .path()
                .join(format!("kafka-{}.log", self.launches.max(1))),
            None => PathBuf::from(format!("(external cluster {})", self.bootstrap)),
        }
    }

    /// The last `lines` lines of the current launch's log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        file_tail(&self.log_path(), lines)
    }

    async fn launch(&mut self) -> Result<(), HarnessError> {
        let dir = self.dir_path()?;
        let jars = jar_folders()?;
        self.launches += 1;
        let log = self.log_path();
        let mut flags = jvm_flags("512m");
        flags.push(format!(
            "-Dlog4j2.configurationFile={}",
            dir.join("log4j2.properties").display()
        ));
        flags.push(format!("-Dkafka.logs.dir={}", dir.display()));
        let process = JvmProcess::spawn(
            &flags,
            &format!("{}/*", jars.kafka.display()),
            "kafka.Kafka",
            &[dir.join("server.properties").display().to_string()],
            &dir,
            &log,
        )?;
        self.process = Some(process);
        self.frozen = false;
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> Result<(), HarnessError> {
        let started = Instant::now();
        let mut last_error = String::from("no connection yet");
        loop {
            let exited = match self.process.as_mut() {
                Some(process) => process.try_wait()?,
                None => {
                    return Err(HarnessError::NotRunning {
                        what: self.describe(),
                    })
                }
            };
            if let Some(status) = exited {
                self.process = None;
                return Err(self.start_timeout(started, format!("broker exited: {status}")));
            }
            if started.elapsed() > STARTUP_LIMIT {
                return Err(self.start_timeout(started, format!("timed out: {last_error}")));
            }
            let connectable = tokio::time::timeout(
                Duration::from_millis(200),
                tokio::net::TcpStream::connect(("127.0.0.1", self.port)),
            )
            .await
            .is_ok_and(|connected| connected.is_ok());
            if connectable {
                match fetch_topic_partitions(self.bootstrap(), Duration::from_secs(2)).await {
                    Ok(_) => return Ok(()),
                    Err(error) => last_error = error.to_string(),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn start_timeout(&self, started: Instant, reason: String) -> HarnessError {
        HarnessError::StartTimeout {
            what: self.describe(),
            waited: started.elapsed(),
            reason,
            log: self.log_path().display().to_string(),
            tail: self.log_tail(30),
        }
    }

    /// The `bootstrap.servers` value for clients (`127.0.0.1:PORT` for a started broker).
    pub fn bootstrap(&self) -> String {
        self.bootstrap.clone()
    }

    /// The client listener's loopback port (0 for an external cluster).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The broker's process id, `None` when not running (or external).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(JvmProcess::pid)
    }

    /// Whether the broker process is currently stopped by [`KafkaBroker::freeze`].
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Creates `name` with `partitions` partitions (replication factor 1) and waits until
    /// metadata shows every partition with a leader. Creating an existing topic is not an
    /// error.
    pub async fn create_topic(&self, name: &str, partitions: i32) -> Result<(), HarnessError> {
        self.create_topic_with_config(name, partitions, &[]).await
    }

    /// [`KafkaBroker::create_topic`] with topic configs (e.g. `max.message.bytes`).
    pub async fn create_topic_with_config(
        &self,
        name: &str,
        partitions: i32,
        config: &[(&str, &str)],
    ) -> Result<(), HarnessError> {
        if self.dir.is_some() && self.process.is_none() {
            return Err(HarnessError::NotRunning {
                what: self.describe(),
            });
        }
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("socket.timeout.ms", "10000")
            .create()
            .map_err(kafka_err("creating an admin client"))?;
        let mut new_topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        for (key, value) in config {
            new_topic = new_topic.set(key, value);
        }
        let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(20)));
        let results = admin
            .create_topics([&new_topic], &options)
            .await
            .map_err(kafka_err(format!("creating topic `{name}`")))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => return Err(HarnessError::CreateTopic { topic, code }),
            }
        }
        let started = Instant::now();
        let limit = Duration::from_secs(30);
        loop {
            if let Ok(topics) =
                fetch_topic_partitions(self.bootstrap(), Duration::from_secs(2)).await
            {
                if topics
                    .get(name)
                    .is_some_and(|led| *led >= usize::try_from(partitions).unwrap_or(0))
                {
                    return Ok(());
                }
            }
            if started.elapsed() > limit {
                return Err(HarnessError::TopicTimeout {
                    topic: name.to_string(),
                    partitions,
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Topic names and their count of partitions that have a leader, as metadata reports now.
    pub async fn topics(&self) -> Result<BTreeMap<String, usize>, HarnessError> {
        fetch_topic_partitions(self.bootstrap(), Duration::from_secs(5)).await
    }

    fn refuse_if_shared(&self, operation: &'static str) -> Result<(), HarnessError> {
        if self.shared {
            Err(HarnessError::SharedBroker { operation })
        } else {
            Ok(())
        }
    }

    /// Stops the broker process with SIGSTOP: connections stay open, nothing answers.
    pub fn freeze(&mut self) -> Result<(), HarnessError> {
        self.refuse_if_shared("freeze")?;
        self.signal_running_broker("STOP", true)
    }

    /// Resumes a frozen broker with SIGCONT.
    pub fn thaw(&mut self) -> Result<(), HarnessError> {
        self.refuse_if_shared("thaw")?;
        self.signal_running_broker("CONT", false)
    }

    fn signal_running_broker(&mut self, signal: &str, frozen: bool) -> Result<(), HarnessError> {
        let pid = self.pid().ok_or(HarnessError::NotRunning {
            what: self.describe(),
        })?;
        send_signal(pid, signal)?;
        self.frozen = frozen;
        Ok(())
    }

    /// Kills the broker (SIGKILL: a crash) and waits for it to exit. Its data stays.
    pub fn kill(&mut self) {
        if self.shared {
            return;
        }
        if let Some(process) = self.process.take() {
            process.kill();
        }
        self.frozen = false;
    }

    /// Stops the broker cleanly (SIGTERM; controlled shutdown) and waits for it to exit
    /// (SIGKILL after 30 s). Its data stays.
    pub fn stop(&mut self) -> Result<(), HarnessError> {
        self.refuse_if_shared("stop")?;
        if let Some(process) = self.process.take() {
            process.stop(Duration::from_secs(30));
        }
        self.frozen = false;
        Ok(())
    }

    /// Kills the broker if it runs, then starts it again on the same ports with the same data
    /// and waits until it answers metadata.
    pub async fn restart(&mut self) -> Result<(), HarnessError> {
        self.refuse_if_shared("restart")?;
        self.kill();
        self.wait_ports_free().await;
        self.launch().await
    }

    /// Kills the broker, wipes its data, and starts a new, empty cluster on the same ports:
    /// what clients see as "the broker came back and lost everything".
    pub async fn restart_empty(&mut self) -> Result<(), HarnessError> {
        self.refuse_if_shared("restart_empty")?;
        self.kill();
        let data = self.dir_path()?.join("data");
        if data.exists() {
            std::fs::remove_dir_all(&data).map_err(io_err("wiping the broker's data"))?;
        }
        self.format_storage().await?;
        self.wait_ports_free().await;
        self.launch().await
    }

    /// The old listeners' ports can take a moment to become bindable again. Probe with
    /// SO_REUSEADDR (tokio sets it, as the broker's own listener does), so connections left
    /// in TIME_WAIT do not count as "in use".
    async fn wait_ports_free(&self) {
        let started = Instant::now();
        for port in [self.port, self.controller_port] {
            while tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .is_err()
                && started.elapsed() < Duration::from_secs(10)
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            process.kill();
        }
        if std::env::var_os("OUTBOX_TEST_KEEP").is_some() {
            if let Some(dir) = self.dir.as_mut() {
                eprintln!(
                    "keeping the Kafka broker's directory {}",
                    dir.path().display()
                );
                dir.disable_cleanup(true);
            }
        }
    }
}

/// A KRaft cluster id: 16 random bytes in URL-safe base64 without padding (22 characters),
/// the form `kafka-storage random-uuid` prints, and as Kafka's `Uuid.randomUuid` never one
/// starting with `-`: `kafka-storage format -t -abc..` reads that as an option and fails
/// ("argument --cluster-id/-t: expected one argument", one format in 64 before this).
fn random_cluster_id() -> String {
    loop {
        let id = random_base64_id();
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// 16 random bytes in URL-safe base64 without padding.
fn random_base64_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes: [u8; 16] = rand::random();
    let mut out = String::with_capacity(22);
    let mut bits: u32 = 0;
    let mut bit_count = 0;
    for byte in bytes {
        bits = (bits << 8) | u32::from(byte);
        bit_count += 8;
        while bit_count >= 6 {
            bit_count -= 6;
            out.push(char::from(ALPHABET[((bits >> bit_count) & 0x3f) as usize]));
        }
    }
    if bit_count > 0 {
        out.push(char::from(
            ALPHABET[((bits << (6 - bit_count)) & 0x3f) as usize],
        ));
    }
    out
}

/// Topic name -> number of partitions with a leader, from one metadata request.
pub(crate) async fn fetch_topic_partitions(
    bootstrap: String,
    timeout: Duration,
) -> Result<BTreeMap<String, usize>, HarnessError> {
    tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("socket.timeout.ms", "5000")
            .create()
            .map_err(kafka_err("creating a metadata client"))?;
        let metadata = producer
            .client()
            .fetch_metadata(None, timeout)
            .map_err(kafka_err(format!("fetching metadata from {bootstrap}")))?;
        Ok(metadata
            .topics()
            .iter()
            .filter(|topic| topic.error().is_none())
            .map(|topic| {
                let led = topic
                    .partitions()
                    .iter()
                    .filter(|partition| partition.leader() >= 0)
                    .count();
                (topic.name().to_string(), led)
            })
            .collect())
    })
    .await
    .map_err(|e| HarnessError::Join(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_have_the_kraft_form() {
        let id = random_cluster_id();
        assert_eq!(id.len(), 22, "{id}");
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_ne!(id, random_cluster_id());
        // Never an option-like id (`kafka-storage format -t ID`).
        assert!((0..2000).all(|_| !random_cluster_id().starts_with('-')));
    }
}
