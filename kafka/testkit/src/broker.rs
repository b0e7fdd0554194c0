//! [`KafkaBroker`]: one broker process started by `start-broker.sh`, owned by a test.

use std::fs::File;
use std::io::Read;
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
fn run(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("running {what}")))?;
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
    let cached = cache_root.is_some_and(|root| {
        let version = std::env::var("RIFFLE_KAFKA_VERSION").unwrap_or_else(|_| "4.4.0".into());
        root.join(format!("kafka-{version}/libs/.complete"))
            .exists()
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

/// Options of a broker to start; [`KafkaBroker::builder`].
#[derive(Debug, Default, Clone)]
pub struct KafkaBrokerBuilder {
    overrides: Vec<(String, String)>,
}

impl KafkaBrokerBuilder {
    /// Sets a broker configuration (`--override name=value`), e.g.
    /// `group.streams.num.standby.replicas`.
    pub fn config(mut self, name: &str, value: &str) -> Self {
        self.overrides.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Starts the broker and waits until it is ready (at most two minutes).
    pub fn start(self) -> Result<KafkaBroker> {
        let libs = kafka_libs()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io("finding a free port on 127.0.0.1"))?
            .port();
        let dir = tempfile::Builder::new()
            .prefix("riffle-kafka-")
            .tempdir()
            .map_err(io("creating the broker's directory"))?;
        let console = dir.path().join("console.log");
        let log = File::create(&console).map_err(io(format!("creating {}", console.display())))?;
        let log2 = log
            .try_clone()
            .map_err(io(format!("opening {}", console.display())))?;
        let mut cmd = Command::new("bash");
        cmd.arg(scripts().join("start-broker.sh"))
            .arg(dir.path())
            .arg(port.to_string())
            .arg("--");
        for (name, value) in &self.overrides {
            cmd.arg("--override").arg(format!("{name}={value}"));
        }
        let child = cmd
            .env("KAFKA_LIBS", &libs)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(io("spawning kafka/testkit/start-broker.sh"))?;
        // The script execs java, so the child's pid is the broker's. The watchdog stops it when
        // this process is gone without having dropped the broker.
        let watchdog = Command::new("sh")
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
        let mut broker = KafkaBroker {
            bootstrap: String::new(),
            libs,
            child: Some(child),
            watchdog,
            dir,
        };
        // Wait for readiness, but stop waiting as soon as the broker's process is gone (a
        // failed format or start would otherwise cost the whole timeout).
        let mut wait = Command::new("bash");
        let mut waiter = wait
            .arg(scripts().join("wait-broker.sh"))
            .arg(broker.dir.path())
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
                    broker.bootstrap = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                    return Ok(broker);
                }
                break format!(
                    "kafka/testkit/wait-broker.sh failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            let exited = broker
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
        if let Ok(mut f) = File::open(broker.dir.path().join("console.log")) {
            let _ = f.read_to_string(&mut console);
        }
        Err(Error::Command {
            what: format!("starting Kafka on 127.0.0.1:{port}"),
            status: failure,
            output: tail(&console, 4_000).to_owned(),
        })
    }
}

/// A running single-node Kafka broker, stopped and deleted on drop.
#[derive(Debug)]
pub struct KafkaBroker {
    bootstrap: String,
    libs: PathBuf,
    child: Option<Child>,
    watchdog: Option<Child>,
    // Last: the directory is deleted after the broker stopped.
    dir: tempfile::TempDir,
}

impl KafkaBroker {
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

    /// The broker's directory (`server.properties`, `data/`, `logs/server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs a Kafka tool's main class (`kafka-run.sh`) and returns its stdout.
    pub fn run_tool(&self, main_class: &str, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new("bash");
        cmd.arg(scripts().join("kafka-run.sh"))
            .arg(main_class)
            .args(args)
            .env("KAFKA_LIBS", &self.libs);
        let short = main_class.rsplit('.').next().unwrap_or(main_class);
        run(cmd, &format!("{short} {}", args.join(" ")))
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
