//! [`KafkaBroker`]: one broker process started by `start-broker.sh`, owned by a test.

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Why a broker could not be started or a tool could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A program the test kit needs is not installed.
    #[error(
        "{program} not found: the Kafka integration tests need Java 17+ and Maven \
         (apt-get install -y openjdk-17-jre-headless maven); {detail}"
    )]
    MissingProgram {
        /// `java` or `mvn`.
        program: &'static str,
        /// What running it said.
        detail: String,
    },
    /// A test-kit script or Kafka tool failed.
    #[error("{what} failed ({status}): {output}")]
    Command {
        /// The command, as a person would type it.
        what: String,
        /// Its exit status.
        status: String,
        /// The end of its output.
        output: String,
    },
    /// Local I/O (temporary directory, free port, spawning) failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The user every SASL mechanism of a [`KafkaBrokerBuilder::secure`] broker knows.
pub const SASL_USER: &str = "alice";
/// [`SASL_USER`]'s password.
pub const SASL_PASSWORD: &str = "alice-secret";

/// The test kit's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// The directory of the test-kit scripts (this crate's directory).
fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The last `max` bytes of `text`, on a character boundary.
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Runs `cmd` to completion; its stdout, or an error with the end of its output.
fn run(cmd: Command, what: &str) -> Result<String> {
    run_with_stdin(cmd, what, None)
}

/// [`run`], feeding `stdin` (then end of file) to the command's standard input, or none.
fn run_with_stdin(mut cmd: Command, what: &str, stdin: Option<&[u8]>) -> Result<String> {
    let out = match stdin {
        None => cmd
            .stdin(Stdio::null())
            .output()
            .map_err(io(format!("running {what}")))?,
        Some(input) => {
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(io(format!("running {what}")))?;
            // Written from another thread: the command's output is read meanwhile, so neither
            // side can block on a full pipe. A command that exits early breaks the pipe: its
            // status says why.
            let mut pipe = child.stdin.take();
            let input = input.to_vec();
            let writer = std::thread::spawn(move || {
                if let Some(pipe) = pipe.as_mut() {
                    let _ = pipe.write_all(&input);
                }
            });
            let out = child
                .wait_with_output()
                .map_err(io(format!("waiting for {what}")))?;
            let _ = writer.join();
            out
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Command {
            what: what.to_owned(),
            status: out.status.to_string(),
            output: format!("{}{}", tail(&stdout, 2_000), tail(&stderr, 4_000)),
        });
    }
    Ok(stdout)
}

fn require(program: &'static str, version_arg: &str) -> Result<()> {
    match Command::new(program)
        .arg(version_arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(Error::MissingProgram {
            program,
            detail: format!("`{program} {version_arg}` exited with {s}"),
        }),
        Err(e) => Err(Error::MissingProgram {
            program,
            detail: format!("`{program} {version_arg}`: {e}"),
        }),
    }
}

/// Fetches (once) and returns the directory of Kafka's jars.
fn kafka_libs() -> Result<PathBuf> {
    require("java", "-version")?;
    let cache_root = std::env::var_os("RIFFLE_KAFKA_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/riffle")));
    // Complete, and with kafka-streams (a cache from before it joined lacks its jar).
    let cached = cache_root.is_some_and(|root| {
        let version = std::env::var("RIFFLE_KAFKA_VERSION").unwrap_or_else(|_| "4.4.0".into());
        let libs = root.join(format!("kafka-{version}/libs"));
        libs.join(".complete").exists()
            && libs.join(format!("kafka-streams-{version}.jar")).exists()
    });
    if !cached {
        require("mvn", "-v")?;
    }
    let mut cmd = Command::new("bash");
    cmd.arg(scripts().join("fetch-kafka.sh"));
    let out = run(cmd, "kafka/testkit/fetch-kafka.sh")?;
    let libs = out.lines().last().unwrap_or_default().trim();
    if libs.is_empty() {
        return Err(Error::Command {
            what: "kafka/testkit/fetch-kafka.sh".into(),
            status: "success".into(),
            output: "printed no libs directory".into(),
        });
    }
    Ok(PathBuf::from(libs))
}

/// Runs one of Kafka's tools that needs no broker (`kafka-run.sh <main class> <args>`), such as
/// `kafka.tools.DumpLogSegments` (`kafka-dump-log.sh`), and returns its stdout. Fetches Kafka's
/// jars first if they are not cached.
pub fn run_offline_tool(main_class: &str, args: &[&str]) -> Result<String> {
    let libs = kafka_libs()?;
    let mut cmd = Command::new("bash");
    cmd.arg(scripts().join("kafka-run.sh"))
        .arg(main_class)
        .args(args)
        .env("KAFKA_LIBS", &libs);
    let short = main_class.rsplit('.').next().unwrap_or(main_class);
    run_with_stdin(cmd, &format!("{short} {}", args.join(" ")), None)
}

/// Options of a broker to start; [`KafkaBroker::builder`].
#[derive(Debug, Default, Clone)]
pub struct KafkaBrokerBuilder {
    overrides: Vec<(String, String)>,
    secure: bool,
}

impl KafkaBrokerBuilder {
    /// Also listen with SASL_PLAINTEXT and SASL_SSL ([`KafkaBroker::sasl_plaintext_bootstrap`],
    /// [`KafkaBroker::sasl_ssl_bootstrap`]): mechanisms PLAIN, SCRAM-SHA-256 and
    /// SCRAM-SHA-512, each knowing [`SASL_USER`] with [`SASL_PASSWORD`]; TLS with a
    /// certificate for 127.0.0.1 signed by a CA made for this broker
    /// ([`KafkaBroker::ca_file`]), and SASL_SSL clients must show a certificate signed by it
    /// ([`KafkaBroker::client_cert_files`]).
    pub fn secure(mut self) -> Self {
        self.secure = true;
        self
    }

    /// Sets a broker configuration (`--override name=value`), e.g.
    /// `group.streams.num.standby.replicas`.
    pub fn config(mut self, name: &str, value: &str) -> Self {
        self.overrides.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the broker and waits until it is ready (at most two minutes). Its ports are found
    /// free before the broker binds them, so another process can take one in between: a start
    /// that fails with "Address already in use" is tried again with new ports (three times).
    pub fn start(self) -> Result<KafkaBroker> {
        let mut attempt = 1;
        loop {
            match self.start_once() {
                Err(Error::Command { output, .. })
                    if attempt < 3 && output.contains("Address already in use") =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn start_once(&self) -> Result<KafkaBroker> {
        let mut broker = self.spawn(None)?;
        broker.wait_ready()?;
        Ok(broker)
    }

    /// A broker whose start script runs, not yet ready: in its own directory, on a port free
    /// now, as `node` of a cluster if given.
    pub(crate) fn spawn(&self, node: Option<NodeSpec>) -> Result<KafkaBroker> {
        let libs = kafka_libs()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io("finding a free port on 127.0.0.1"))?
            .port();
        let dir = tempfile::Builder::new()
            .prefix("riffle-kafka-")
            .tempdir()
            .map_err(io("creating the broker's directory"))?;
        if self.secure {
            crate::tls::write_certificates(&dir.path().join("tls"))?;
        }
        let mut broker = KafkaBroker {
            bootstrap: format!("127.0.0.1:{port}"),
            port,
            sasl_plaintext: None,
            sasl_ssl: None,
            libs,
            builder: self.clone(),
            node,
            child: None,
            watchdog: None,
            dir,
        };
        broker.launch()?;
        Ok(broker)
    }
}

/// What a node of a cluster needs beyond a single broker: its id, its controller port, the
/// quorum's voters and the cluster id every node is formatted with.
#[derive(Debug, Clone)]
pub(crate) struct NodeSpec {
    pub(crate) id: u32,
    pub(crate) controller_port: u16,
    pub(crate) voters: String,
    pub(crate) cluster_id: String,
}

/// A running single-node Kafka broker, stopped and deleted on drop.
#[derive(Debug)]
pub struct KafkaBroker {
    bootstrap: String,
    port: u16,
    sasl_plaintext: Option<String>,
    sasl_ssl: Option<String>,
    libs: PathBuf,
    /// How it was started, to start it again.
    builder: KafkaBrokerBuilder,
    node: Option<NodeSpec>,
    child: Option<Child>,
    watchdog: Option<Child>,
    // Last: the directory is deleted after the broker stopped.
    dir: tempfile::TempDir,
}

impl KafkaBroker {
    /// Runs the start script on this broker's directory and port, and a watchdog that stops
    /// the broker when this process is gone without having dropped it.
    fn launch(&mut self) -> Result<()> {
        let console = self.dir.path().join("console.log");
        let log = File::create(&console).map_err(io(format!("creating {}", console.display())))?;
        let log2 = log
            .try_clone()
            .map_err(io(format!("opening {}", console.display())))?;
        let mut cmd = Command::new("bash");
        cmd.env(
            "RIFFLE_KAFKA_SECURE",
            if self.builder.secure { "1" } else { "0" },
        );
        if let Some(node) = &self.node {
            cmd.env("RIFFLE_KAFKA_NODE_ID", node.id.to_string())
                .env(
                    "RIFFLE_KAFKA_CONTROLLER_PORT",
                    node.controller_port.to_string(),
                )
                .env("RIFFLE_KAFKA_VOTERS", &node.voters)
                .env("RIFFLE_KAFKA_CLUSTER_ID", &node.cluster_id);
        }
        cmd.arg(scripts().join("start-broker.sh"))
            .arg(self.dir.path())
            .arg(self.port.to_string())
            .arg("--");
        for (name, value) in &self.builder.overrides {
            cmd.arg("--override").arg(format!("{name}={value}"));
        }
        let child = cmd
            .env("KAFKA_LIBS", &self.libs)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(io("spawning kafka/testkit/start-broker.sh"))?;
        // The script execs java, so the child's pid is the broker's.
        self.watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; kill -TERM {} 2>/dev/null",
                std::process::id(),
                child.id()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        self.child = Some(child);
        Ok(())
    }

    /// Waits until the broker serves clients, but stops waiting as soon as its process is gone
    /// (a failed format or start would otherwise cost the whole timeout).
    pub(crate) fn wait_ready(&mut self) -> Result<()> {
        let mut wait = Command::new("bash");
        let mut waiter = wait
            .arg(scripts().join("wait-broker.sh"))
            .arg(self.dir.path())
            .arg("120")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io("spawning kafka/testkit/wait-broker.sh"))?;
        let failure = loop {
            if let Ok(Some(_)) = waiter.try_wait() {
                let out = waiter
                    .wait_with_output()
                    .map_err(io("reading kafka/testkit/wait-broker.sh's output"))?;
                if out.status.success() {
                    self.bootstrap = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                    if self.builder.secure {
                        let env = std::fs::read_to_string(self.dir.path().join("broker.env"))
                            .map_err(io("reading broker.env"))?;
                        let port = |name: &str| {
                            env.lines()
                                .find_map(|l| l.strip_prefix(name))
                                .map(|p| format!("127.0.0.1:{}", p.trim()))
                        };
                        self.sasl_plaintext = port("SASL_PLAINTEXT_PORT=");
                        self.sasl_ssl = port("SASL_SSL_PORT=");
                    }
                    return Ok(());
                }
                break format!(
                    "kafka/testkit/wait-broker.sh failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                let _ = waiter.kill();
                let _ = waiter.wait();
                break format!("the broker process exited ({status}) before it was ready");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut console = String::new();
        if let Ok(mut f) = File::open(self.dir.path().join("console.log")) {
            let _ = f.read_to_string(&mut console);
        }
        Err(Error::Command {
            what: format!("starting Kafka on 127.0.0.1:{}", self.port),
            status: failure,
            output: tail(&console, 4_000).to_owned(),
        })
    }

    /// Kills the broker with SIGKILL (no clean shutdown, as a machine failing), keeping its
    /// directory for [`KafkaBroker::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = std::fs::remove_file(self.dir.path().join("broker.pid"));
    }

    /// Starts a killed or stopped broker again on its directory (its data kept) and port, and
    /// waits until it serves clients.
    pub fn restart(&mut self) -> Result<()> {
        if self.child.is_some() {
            self.kill();
        }
        self.launch()?;
        self.wait_ready()
    }

    /// Starts a broker with the test kit's defaults.
    pub fn start() -> Result<KafkaBroker> {
        Self::builder().start()
    }

    /// Options for a broker to start.
    pub fn builder() -> KafkaBrokerBuilder {
        KafkaBrokerBuilder::default()
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// `127.0.0.1:PORT` of the SASL_PLAINTEXT listener (a [`KafkaBrokerBuilder::secure`]
    /// broker; `None` otherwise).
    pub fn sasl_plaintext_bootstrap(&self) -> Option<&str> {
        self.sasl_plaintext.as_deref()
    }

    /// `127.0.0.1:PORT` of the SASL_SSL listener (a [`KafkaBrokerBuilder::secure`] broker;
    /// `None` otherwise).
    pub fn sasl_ssl_bootstrap(&self) -> Option<&str> {
        self.sasl_ssl.as_deref()
    }

    /// The CA certificate (PEM) that signed a secure broker's certificate: a client's
    /// `ssl.ca.location`.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("tls").join("ca.pem")
    }

    /// A CA certificate (PEM) that signed nothing the broker shows: trusting only it, a client
    /// must refuse the broker.
    pub fn untrusted_ca_file(&self) -> PathBuf {
        self.dir.path().join("tls").join("other-ca.pem")
    }

    /// A client certificate and its key (PEM) signed by [`KafkaBroker::ca_file`]'s CA:
    /// `ssl.certificate.location` and `ssl.key.location`.
    pub fn client_cert_files(&self) -> (PathBuf, PathBuf) {
        let tls = self.dir.path().join("tls");
        (tls.join("client.pem"), tls.join("client-key.pem"))
    }

    /// The broker's directory (`server.properties`, `data/`, `logs/server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs a Kafka tool's main class (`kafka-run.sh`) and returns its stdout.
    pub fn run_tool(&self, main_class: &str, args: &[&str]) -> Result<String> {
        self.tool(main_class, args, None)
    }

    /// [`KafkaBroker::run_tool`], feeding `stdin` (then end of file) to the tool's standard
    /// input.
    pub fn run_tool_with_stdin(
        &self,
        main_class: &str,
        args: &[&str],
        stdin: &[u8],
    ) -> Result<String> {
        self.tool(main_class, args, Some(stdin))
    }

    fn tool(&self, main_class: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<String> {
        let mut cmd = Command::new("bash");
        cmd.arg(scripts().join("kafka-run.sh"))
            .arg(main_class)
            .args(args)
            .env("KAFKA_LIBS", &self.libs);
        let short = main_class.rsplit('.').next().unwrap_or(main_class);
        run_with_stdin(cmd, &format!("{short} {}", args.join(" ")), stdin)
    }

    /// Appends `lines` to `topic` with Kafka's console producer (`kafka-console-producer.sh`,
    /// `org.apache.kafka.tools.ConsoleProducer`), one record per line fed on its standard input,
    /// `props` passed to its line reader as `--reader-property name=value` (the successor of the
    /// deprecated `--property`): `parse.key=true`, `parse.headers=true`, `null.marker=…`, ….
    /// Returns once the producer has sent every line and exited.
    pub fn console_produce(
        &self,
        topic: &str,
        lines: &[&str],
        props: &[(&str, &str)],
    ) -> Result<()> {
        self.console_produce_with(topic, lines, props, &[])
    }

    /// [`KafkaBroker::console_produce`] with producer configurations too, passed as
    /// `--command-property name=value` (the successor of `--producer-property`) — except
    /// `compression.type`, passed as `--compression-codec VALUE`: the console producer sets
    /// `compression.type` from that option (`none` without it) over any property, so
    /// `--command-property compression.type=lz4` alone would send uncompressed batches.
    pub fn console_produce_with(
        &self,
        topic: &str,
        lines: &[&str],
        props: &[(&str, &str)],
        producer_props: &[(&str, &str)],
    ) -> Result<()> {
        let mut args: Vec<String> = ["--bootstrap-server", &self.bootstrap, "--topic", topic]
            .map(str::to_owned)
            .into();
        for (name, value) in props {
            args.push("--reader-property".to_owned());
            args.push(format!("{name}={value}"));
        }
        for &(name, value) in producer_props {
            if name == "compression.type" {
                args.extend(["--compression-codec".to_owned(), value.to_owned()]);
            } else {
                args.push("--command-property".to_owned());
                args.push(format!("{name}={value}"));
            }
        }
        let mut input = String::new();
        for line in lines {
            input.push_str(line);
            input.push('\n');
        }
        self.run_tool_with_stdin(
            "org.apache.kafka.tools.ConsoleProducer",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            input.as_bytes(),
        )
        .map(drop)
    }

    /// Reads `topic` from the beginning with Kafka's console consumer
    /// (`kafka-console-consumer.sh`, `org.apache.kafka.tools.consumer.ConsoleConsumer`) until
    /// `max_messages` records (`--max-messages`) and returns the lines it printed. `props` go
    /// to its formatter as `--formatter-property name=value` (the successor of the deprecated
    /// `--property`): `print.key=true`, `print.headers=true`, `null.literal=…`, …. If no record
    /// comes for 30 seconds (`--timeout-ms`) it stops early, so fewer lines come back.
    pub fn console_consume(
        &self,
        topic: &str,
        max_messages: usize,
        props: &[(&str, &str)],
    ) -> Result<Vec<String>> {
        self.console_consume_with(topic, max_messages, props, &[])
    }

    /// [`KafkaBroker::console_consume`] with more of the console consumer's arguments, e.g.
    /// `["--isolation-level", "read_committed"]`.
    pub fn console_consume_with(
        &self,
        topic: &str,
        max_messages: usize,
        props: &[(&str, &str)],
        extra_args: &[&str],
    ) -> Result<Vec<String>> {
        let max = max_messages.to_string();
        let mut args: Vec<String> = [
            "--bootstrap-server",
            &self.bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            &max,
            "--timeout-ms",
            "30000",
        ]
        .map(str::to_owned)
        .into();
        for (name, value) in props {
            args.push("--formatter-property".to_owned());
            args.push(format!("{name}={value}"));
        }
        args.extend(extra_args.iter().map(|a| (*a).to_owned()));
        let out = self.run_tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )?;
        Ok(out.lines().map(str::to_owned).collect())
    }

    /// Creates `topic` with `partitions` partitions (`kafka-topics.sh --create`).
    pub fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        self.run_tool(
            "org.apache.kafka.tools.TopicCommand",
            &[
                "--bootstrap-server",
                &self.bootstrap,
                "--create",
                "--topic",
                topic,
                "--partitions",
                &partitions.to_string(),
            ],
        )
        .map(drop)
    }

    /// `kafka-streams-groups.sh --describe --group GROUP` with extra flags (`--members`,
    /// `--verbose`, `--offsets`, …).
    pub fn describe_streams_group(&self, group: &str, flags: &[&str]) -> Result<String> {
        let mut args = vec![
            "--bootstrap-server",
            &self.bootstrap,
            "--describe",
            "--group",
            group,
        ];
        args.extend_from_slice(flags);
        self.run_tool("org.apache.kafka.tools.streams.StreamsGroupCommand", &args)
    }

    /// Stops the broker now (also done on drop).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("bash")
            .arg(scripts().join("stop-broker.sh"))
            .arg(self.dir.path())
            .arg("20")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        for _ in 0..100 {
            if matches!(child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        self.stop();
    }
}
