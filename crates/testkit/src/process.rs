//! Process plumbing shared by the JVM harnesses (Kafka broker, Kafka Connect): free ports,
//! signals, log tails, the jar folders, and [`JvmProcess`], a Java child process that cannot
//! outlive the test process that started it.

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;

/// Why a harness process (broker, worker, console consumer) could not be run.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// An I/O error (spawning, signalling, files).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// `scripts/fetch-jars.sh` failed or printed no folder for a jar set.
    #[error(
        "the Java side of the test harness is not available: {reason}. Run the README's test \
         command `scripts/test.sh` (it installs a JRE and Maven's jars), or \
         `scripts/fetch-jars.sh` by hand (needs `java` and `mvn`)"
    )]
    Jars {
        /// What went wrong, with the script's output.
        reason: String,
    },
    /// A process exited or did not become ready in time.
    #[error("{what} did not become ready within {waited:?} ({reason}); its log {log}:\n{tail}")]
    StartTimeout {
        /// Which process (e.g. `Kafka broker on 127.0.0.1:PORT`).
        what: String,
        /// How long we waited.
        waited: std::time::Duration,
        /// Why we stopped waiting (exited, timeout, last client error).
        reason: String,
        /// Path of the process's log.
        log: String,
        /// The end of that log.
        tail: String,
    },
    /// The harness was set up in the wrong order (e.g. a JVM profile chosen after the first
    /// JVM started).
    #[error("{0}")]
    Setup(String),
    /// A Kafka client operation (admin, metadata, consumer) failed.
    #[error("{what}: {source}")]
    Kafka {
        /// What was being done.
        what: String,
        /// The underlying client error.
        source: rdkafka::error::KafkaError,
    },
    /// Creating a topic failed on the broker side.
    #[error("creating topic `{topic}` failed: {code:?}")]
    CreateTopic {
        /// The topic.
        topic: String,
        /// The broker's error code.
        code: rdkafka::types::RDKafkaErrorCode,
    },
    /// A topic did not show up in metadata with leaders for all its partitions in time.
    #[error("topic `{topic}` did not appear in metadata with {partitions} led partitions within {waited:?}")]
    TopicTimeout {
        /// The topic.
        topic: String,
        /// The partition count that was expected.
        partitions: i32,
        /// How long we waited.
        waited: std::time::Duration,
    },
    /// The operation needs a running process, but it was killed or stopped.
    #[error("{what} is not running (killed or stopped); restart it first")]
    NotRunning {
        /// Which process.
        what: String,
    },
    /// The operation is not allowed on a broker shared by the tests of one process.
    #[error(
        "{operation} is not allowed on the shared broker: start a private one (KafkaBroker::start)"
    )]
    SharedBroker {
        /// What was attempted.
        operation: &'static str,
    },
    /// Kafka Connect or its connector reported a failure.
    #[error("Kafka Connect: {reason}; its log {log}:\n{tail}")]
    Connect {
        /// What failed.
        reason: String,
        /// Path of the worker's log.
        log: String,
        /// The end of that log.
        tail: String,
    },
    /// A blocking helper task panicked or was cancelled.
    #[error("a blocking client task failed: {0}")]
    Join(String),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> HarnessError {
    let what = what.into();
    move |source| HarnessError::Io { what, source }
}

pub(crate) fn kafka_err(
    what: impl Into<String>,
) -> impl FnOnce(rdkafka::error::KafkaError) -> HarnessError {
    let what = what.into();
    move |source| HarnessError::Kafka { what, source }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub(crate) fn free_port() -> Result<u16, HarnessError> {
    loopback_port_free_now().map_err(io_err("finding a free port"))
}

/// Binds port 0 on 127.0.0.1 and returns the port the kernel chose (free until someone else
/// binds it: callers retry when a server exits at once).
pub(crate) fn loopback_port_free_now() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Sends a signal with the `kill` program (no libc dependency in this crate).
pub(crate) fn send_signal(pid: u32, signal: &str) -> Result<(), HarnessError> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(io_err(format!("running `kill -{signal} {pid}`")))?;
    if status.success() {
        Ok(())
    } else {
        Err(HarnessError::Io {
            what: format!("`kill -{signal} {pid}`"),
            source: io::Error::other(status.to_string()),
        })
    }
}

/// The last `lines` lines of a text file (empty when unreadable).
pub(crate) fn file_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The three jar folders `scripts/fetch-jars.sh` resolves.
#[derive(Debug, Clone)]
pub struct JarFolders {
    /// Apache Kafka 4.4.0: broker (`kafka.Kafka`, `kafka.tools.StorageTool`) and tools
    /// (`org.apache.kafka.tools.consumer.ConsoleConsumer`).
    pub kafka: PathBuf,
    /// The Kafka Connect worker that runs Debezium (see tests/jars/connect/pom.xml for why
    /// its version differs from the broker's).
    pub connect: PathBuf,
    /// Debezium's MySQL connector and the Outbox Event Router, as a Connect plugin folder.
    pub debezium: PathBuf,
}

/// The repository root (this crate lives in `crates/testkit`).
pub(crate) fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `scripts/fetch-jars.sh` once per process (it resolves the jars with Maven the first
/// time on a machine, and only hashes the poms after that) and returns its folders.
pub fn jar_folders() -> Result<&'static JarFolders, HarnessError> {
    static FOLDERS: OnceLock<Result<JarFolders, String>> = OnceLock::new();
    FOLDERS
        .get_or_init(fetch_jar_folders)
        .as_ref()
        .map_err(|reason| HarnessError::Jars {
            reason: reason.clone(),
        })
}

fn fetch_jar_folders() -> Result<JarFolders, String> {
    let script = repository_root().join("scripts/fetch-jars.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg("--quiet")
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("cannot run {}: {error}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{} exited with {}: {}{}",
            script.display(),
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let folder = |name: &str| -> Result<PathBuf, String> {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .map(PathBuf::from)
            .ok_or_else(|| format!("{} printed no `{name}=` folder: {stdout}", script.display()))
    };
    Ok(JarFolders {
        kafka: folder("kafka")?,
        connect: folder("connect")?,
        debezium: folder("debezium")?,
    })
}

/// `$JAVA_HOME/bin/java` when set, else `java` from `PATH`.
pub(crate) fn java_program() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin/java"))
        .filter(|java| java.is_file())
        .unwrap_or_else(|| PathBuf::from("java"))
}

/// A log4j2 configuration that writes everything at INFO and above to standard output (which
/// the harness sends to the process's log file).
pub(crate) const LOG4J2_PROPERTIES: &str = "\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = org.apache.kafka
logger.kafka.level = INFO
";

/// Which JVM flags the harness's broker and Kafka Connect worker start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JvmProfile {
    /// For tests (the default): a small heap that starts at 64 MiB, the serial collector (no
    /// GC threads competing with the tests) and the client compiler only (quick start-up;
    /// these processes never run long enough to profit from C2). Slower per record than a
    /// production JVM.
    Test,
    /// For benchmarks: the flags Kafka's own start scripts give the broker and Kafka Connect
    /// (`kafka-run-class.sh`'s performance options: G1 with a 20 ms pause goal, full tiered
    /// compilation) and a fixed heap (`-Xms` = `-Xmx`, as `kafka-server-start.sh` sets it),
    /// so the broker and Debezium's worker run as they do in production.
    Production,
}

/// The profile every JVM the harness starts from now on uses; [`JvmProfile::Test`] until
/// [`use_jvm_profile`] is called.
static JVM_PROFILE: std::sync::OnceLock<JvmProfile> = std::sync::OnceLock::new();

/// Sets the JVM profile of the broker and Connect workers this process starts; call it
/// before the first one starts. Fails when a profile was set already or a JVM already
/// started with the default.
pub fn use_jvm_profile(profile: JvmProfile) -> Result<(), HarnessError> {
    JVM_PROFILE.set(profile).map_err(|_| {
        HarnessError::Setup(format!(
            "the JVM profile is {:?} already: set {profile:?} before the first broker or worker starts",
            jvm_profile()
        ))
    })
}

/// The profile in use (fixed from the first JVM started on).
fn jvm_profile() -> JvmProfile {
    *JVM_PROFILE.get_or_init(|| JvmProfile::Test)
}

/// JVM flags for the harness's Java processes on a 2-core machine with at most `max_heap`
/// of heap, by [`JvmProfile`].
pub(crate) fn jvm_flags(max_heap: &str) -> Vec<String> {
    match jvm_profile() {
        JvmProfile::Test => vec![
            format!("-Xmx{max_heap}"),
            "-Xms64m".into(),
            "-XX:+UseSerialGC".into(),
            "-XX:TieredStopAtLevel=1".into(),
            "-XX:-UsePerfData".into(),
            "-Djava.awt.headless=true".into(),
        ],
        JvmProfile::Production => vec![
            format!("-Xmx{max_heap}"),
            format!("-Xms{max_heap}"),
            "-server".into(),
            "-XX:+UseG1GC".into(),
            "-XX:MaxGCPauseMillis=20".into(),
            "-XX:InitiatingHeapOccupancyPercent=35".into(),
            "-XX:+ExplicitGCInvokesConcurrent".into(),
            "-Djava.awt.headless=true".into(),
        ],
    }
}

/// Removes `dir` once this test process has ended, however it ends, unless
/// `OUTBOX_TEST_KEEP` is set.
///
/// For directories kept in a `static` (the shared broker's, the MariaDB template): statics
/// are never dropped, so their `TempDir` never cleans up, and a test suite of ~80 binaries
/// would leave a broker's data (every record its tests wrote) and a template data directory
/// behind per binary, until the disk fills (a CI run failed with `No space left on device`).
/// Like [`JvmProcess`]'s watchdog: a `sh` blocks reading a pipe only this process holds; the
/// pipe closes when the process exits, and the `sh` then waits a second (the JVM watchdog
/// kills the broker first) and removes the directory.
pub(crate) fn remove_when_process_exits(dir: &Path) -> Result<(), HarnessError> {
    if std::env::var_os("OUTBOX_TEST_KEEP").is_some() {
        return Ok(());
    }
    static PIPES: std::sync::Mutex<Vec<ChildStdin>> = std::sync::Mutex::new(Vec::new());
    let mut reaper = Command::new("sh")
        .arg("-c")
        .arg(r#"read -r _; sleep 1; rm -rf -- "$1""#)
        .arg("remove-when-process-exits")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io_err(format!(
            "spawning the remover of {} for the process's exit",
            dir.display()
        )))?;
    if let Some(pipe) = reaper.stdin.take() {
        // Held until the process exits; a poisoned lock still holds the pipes.
        let mut pipes = PIPES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        pipes.push(pipe);
    }
    // Not waited for: it outlives this process by design (init reaps it).
    drop(reaper);
    Ok(())
}

/// A Java child process with its output in a log file, paired with a watchdog: a `sh` that
/// blocks reading a pipe only this test process holds, and kills the JVM (SIGKILL) once the
/// pipe closes. The pipe closes when this value is dropped *or when the test process dies in
/// any way* (a panic, `exit`, SIGKILL), so a broker started by a test can never outlive it,
/// not even a shared broker kept in a `static` (statics are never dropped).
pub(crate) struct JvmProcess {
    /// The JVM itself.
    child: Child,
    /// The watchdog `sh`; reaped after its pipe is closed.
    watchdog: Child,
    /// The write end of the watchdog's stdin: dropping it releases the watchdog.
    watchdog_pipe: Option<ChildStdin>,
}

/// The watchdog's script for the JVM `pid`: wait for the pipe to close, then SIGKILL the
/// JVM, but only if `pid` is still that JVM. A JVM that exited and was reaped frees its pid,
/// and with Linux's default `pid_max` of 32 768 a test suite that spawns thousands of
/// processes reuses pids within minutes: a watchdog firing later must not kill whatever
/// process got the pid since (another test process's broker, say). The JVM is recognised
/// by its start time (`/proc/PID/stat`, field 22), read right after the spawn; where it
/// cannot be read, the watchdog kills by pid alone.
fn watchdog_script(pid: u32) -> String {
    watchdog_script_for(pid, process_start_time(pid))
}

/// [`watchdog_script`] for a JVM that started at `start_time` (`None`: unknown).
fn watchdog_script_for(pid: u32, start_time: Option<u64>) -> String {
    match start_time {
        Some(start_time) => format!(
            "read -r _; stat=$(cat /proc/{pid}/stat 2>/dev/null) || exit 0; \
             set -- ${{stat##*) }}; [ \"${{20}}\" = \"{start_time}\" ] && kill -9 {pid} 2>/dev/null"
        ),
        None => format!("read -r _; kill -9 {pid} 2>/dev/null"),
    }
}

/// The start time of process `pid` (`/proc/PID/stat` field 22, in clock ticks since boot):
/// with the pid, it names one process for good.
fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces, in parentheses): field 3 on.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

impl JvmProcess {
    /// Spawns `java FLAGS -cp CLASSPATH MAIN ARGS` in `dir` with stdout and stderr appended to
    /// `log`, and its watchdog.
    pub(crate) fn spawn(
        flags: &[String],
        classpath: &str,
        main_class: &str,
        args: &[String],
        dir: &Path,
        log: &Path,
    ) -> Result<JvmProcess, HarnessError> {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(io_err(format!("opening {}", log.display())))?;
        let log_for_stderr = log_file
            .try_clone()
            .map_err(io_err("duplicating the log file handle"))?;
        let java = java_program();
        let child = Command::new(&java)
            .args(flags)
            .arg("-cp")
            .arg(classpath)
            .arg(main_class)
            .args(args)
            // A developer's KAFKA_* / CLASSPATH settings must not change the scratch process.
            .env_remove("CLASSPATH")
            .env_remove("KAFKA_OPTS")
            .env_remove("KAFKA_HEAP_OPTS")
            .env_remove("JAVA_TOOL_OPTIONS")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(log_for_stderr))
            .spawn()
            .map_err(io_err(format!(
                "spawning {} (install a JRE: apt-get install openjdk-17-jre-headless)",
                java.display()
            )))?;
        let pid = child.id();
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(watchdog_script(pid))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut watchdog = match watchdog {
            Ok(watchdog) => watchdog,
            Err(error) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(io_err("spawning the JVM's watchdog")(error));
            }
        };
        let watchdog_pipe = watchdog.stdin.take();
        Ok(JvmProcess {
            child,
            watchdog,
            watchdog_pipe,
        })
    }

    /// The JVM's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` once the JVM has exited.
    pub(crate) fn try_wait(&mut self) -> Result<Option<std::process::ExitStatus>, HarnessError> {
        self.child
            .try_wait()
            .map_err(io_err("polling the Java process"))
    }

    /// SIGKILL, then reap the JVM and its watchdog.
    pub(crate) fn kill(mut self) {
        self.kill_now();
    }

    /// SIGTERM (the JVM's shutdown hooks run: a clean stop), waiting up to `limit`, then
    /// SIGKILL.
    pub(crate) fn stop(mut self, limit: std::time::Duration) {
        let pid = self.child.id();
        let _ = send_signal(pid, "CONT");
        let _ = send_signal(pid, "TERM");
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.release_watchdog();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        self.kill_now();
    }

    /// SIGKILL (after SIGCONT, so a frozen JVM dies too) and reap the JVM and its watchdog,
    /// unless that was done already.
    fn kill_now(&mut self) {
        if self.watchdog_pipe.is_none() {
            return;
        }
        let _ = send_signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.release_watchdog();
    }

    fn release_watchdog(&mut self) {
        drop(self.watchdog_pipe.take());
        let _ = self.watchdog.wait();
    }
}

impl Drop for JvmProcess {
    fn drop(&mut self) {
        self.kill_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `script` as a watchdog and closes its pipe, as a dropped [`JvmProcess`] does.
    fn fire(script: &str) {
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        drop(watchdog.stdin.take());
        watchdog.wait().unwrap();
    }

    #[test]
    fn the_watchdog_kills_its_process_and_never_one_that_got_the_pid_later() {
        use std::os::unix::process::ExitStatusExt;
        let mut own = Command::new("sleep").arg("30").spawn().unwrap();
        let start_time = process_start_time(own.id());
        assert!(start_time.is_some(), "/proc/PID/stat is readable here");
        fire(&watchdog_script(own.id()));
        assert_eq!(
            own.wait().unwrap().signal(),
            Some(9),
            "its own process: killed"
        );

        // A process with the pid but another start time stands for one that reused the pid.
        let mut other = Command::new("sleep").arg("30").spawn().unwrap();
        let stale = process_start_time(other.id()).map(|time| time + 1);
        fire(&watchdog_script_for(other.id(), stale));
        // A SIGKILL sent would have landed by now.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            other.try_wait().unwrap().is_none(),
            "another process: left alone"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
