//! `riffle reset`: lets an application process its input again from scratch, as Kafka's
//! `kafka-streams-application-reset` does — its input offsets moved (to the earliest offsets by
//! default), its internal topics (`<application-id>-…-changelog`, `…-repartition`) deleted,
//! and its local state (`<state-dir>/<application-id>`) wiped. Refused while an instance runs:
//! one holding the state directory's lock, or any member of the application's group (on the
//! embedded log, an instance on the log directory with any state directory); on the embedded
//! log `--force` removes the members instead (fencing them: their commits fail from then on).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use riffle::EmbeddedBackend;
use riffle::backend::Backend;
use riffle::log::{Log, LogOptions, TopicPartition};
use riffle_kafka::{KafkaBackend, KafkaConfig};
use riffle_state_dir::StateDirectory;

/// Arguments of `riffle reset`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("backend").args(["log_dir", "bootstrap_servers"]).required(true)))]
#[command(group(clap::ArgGroup::new("to").args(["to_earliest", "to_latest", "to_datetime"])))]
pub(crate) struct Args {
    /// The application to reset (its group and the prefix of its internal topics).
    #[arg(long)]
    application_id: String,
    /// The embedded log the application runs on.
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// The Kafka cluster the application runs on.
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap_servers: Option<String>,
    /// The input topics to reset, comma-separated (default: every topic the application has
    /// committed offsets for, except its internal topics).
    #[arg(long, value_delimiter = ',')]
    input_topics: Vec<String>,
    /// Move the input offsets to each partition's first offset (the default).
    #[arg(long)]
    to_earliest: bool,
    /// Move the input offsets to each partition's end: only new records will be processed.
    #[arg(long)]
    to_latest: bool,
    /// Move the input offsets to the first record at or after this time, UTC:
    /// `YYYY-MM-DDTHH:MM:SS[.sss][Z]` (a partition without one goes to its end).
    #[arg(long, value_name = "DATETIME")]
    to_datetime: Option<String>,
    /// The application's state directory, whose `<application-id>` directory is wiped
    /// (default with --log-dir: `<log-dir>/state`, as the samples use; on Kafka without it, no
    /// local state is wiped).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Print what would be done, and do nothing.
    #[arg(long)]
    dry_run: bool,
    /// On the embedded log: reset even though instances of the application are alive, removing
    /// them from its group first (they are fenced: their commits and transactions fail, and
    /// they rejoin as new members). Their state directories are not wiped.
    #[arg(long)]
    force: bool,
}

/// Where the input offsets go.
#[derive(Clone, Copy, Debug)]
enum Target {
    Earliest,
    Latest,
    Time(i64),
}

/// The application's backend, as the reset needs it.
enum Cluster {
    Embedded(Log),
    Kafka(KafkaBackend),
}

impl Cluster {
    fn backend(&self) -> Arc<dyn Backend> {
        match self {
            Cluster::Embedded(log) => EmbeddedBackend::new(log.clone()).shared(),
            Cluster::Kafka(kafka) => kafka.shared(),
        }
    }

    fn topics(&self) -> anyhow::Result<Vec<(String, u32)>> {
        Ok(match self {
            Cluster::Embedded(log) => log.topics(),
            Cluster::Kafka(kafka) => kafka.topics()?,
        })
    }

    fn group_offsets(&self, group: &str) -> anyhow::Result<Vec<(TopicPartition, u64)>> {
        Ok(match self {
            Cluster::Embedded(log) => log.committed_offsets(group)?,
            Cluster::Kafka(kafka) => kafka.group_offsets(group)?,
        })
    }

    /// Fails if an instance of the group is running, naming them; on the embedded log with
    /// `force`, removes them from the group instead.
    fn check_no_members(&self, group: &str, force: bool, dry_run: bool) -> anyhow::Result<()> {
        let kafka = match self {
            Cluster::Embedded(log) => {
                return check_no_embedded_members(log, group, force, dry_run);
            }
            Cluster::Kafka(kafka) => kafka,
        };
        if force {
            bail!(
                "--force is for the embedded log: on Kafka, stop every instance of {group} first"
            );
        }
        match kafka.describe_streams_group(group) {
            Ok(g) if !g.members.is_empty() => {
                let members: Vec<&str> = g.members.iter().map(|m| m.member_id.as_str()).collect();
                bail!(
                    "refused: the streams group {group} has {} running member(s) ({}); stop every \
                     instance of the application first",
                    members.len(),
                    members.join(", ")
                )
            }
            Ok(_) => Ok(()),
            // GROUP_ID_NOT_FOUND: nothing runs, nothing was committed.
            Err(riffle_kafka::Error::Broker { code, .. }) if code.0 == 69 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("describing the streams group {group}")),
        }
    }

    fn commit(&self, group: &str, offsets: &[(TopicPartition, u64)]) -> anyhow::Result<()> {
        match self {
            Cluster::Embedded(log) => log.commit_offsets(group, offsets)?,
            Cluster::Kafka(kafka) => kafka.alter_group_offsets(group, offsets)?,
        }
        Ok(())
    }

    fn delete_topics(&self, topics: &[String]) -> anyhow::Result<()> {
        match self {
            Cluster::Embedded(log) => {
                for topic in topics {
                    log.delete_topic(topic)
                        .with_context(|| format!("deleting topic {topic}"))?;
                }
            }
            Cluster::Kafka(kafka) => kafka.delete_topics(topics)?,
        }
        Ok(())
    }
}

/// The embedded log's part of [`Cluster::check_no_members`]: the live members of the
/// application's group on the log, by their member files' locks.
fn check_no_embedded_members(
    log: &Log,
    group: &str,
    force: bool,
    dry_run: bool,
) -> anyhow::Result<()> {
    let Some(view) = log.describe_group(group)? else {
        return Ok(());
    };
    let alive: Vec<String> = view
        .members
        .iter()
        .filter(|(_, (_, alive))| *alive)
        .map(|(id, (record, _))| match record {
            Some(r) => format!("{id} (pid {})", r.pid),
            None => id.clone(),
        })
        .collect();
    if alive.is_empty() {
        return Ok(());
    }
    if !force {
        bail!(
            "refused: {} instance thread(s) of {group} run on this log: {}; stop them first (or \
             --force to remove them from the group, which fences them)",
            alive.len(),
            alive.join(", ")
        );
    }
    if dry_run {
        println!(
            "would remove {} member(s) from group {group} (--force)",
            alive.len()
        );
        return Ok(());
    }
    let removed = log.remove_group_members(group)?;
    println!(
        "removed {} member(s) from group {group} (--force): {}",
        removed.len(),
        removed.join(", ")
    );
    Ok(())
}

/// Whether `topic` is one of `application_id`'s internal topics (Kafka's reset tool's rule:
/// changelogs, repartition topics and a foreign-key join's subscription topics, named
/// `<name>-subscription-registration-topic` or, unnamed,
/// `KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n>-topic`, and the same for responses).
fn is_internal(application_id: &str, topic: &str) -> bool {
    const SUFFIXES: [&str; 4] = [
        "-changelog",
        "-repartition",
        "-subscription-registration-topic",
        "-subscription-response-topic",
    ];
    let generated = |rest: &str| {
        ["REGISTRATION-", "RESPONSE-"].iter().any(|kind| {
            rest.rsplit_once("KTABLE-FK-JOIN-SUBSCRIPTION-")
                .and_then(|(_, tail)| tail.strip_prefix(kind))
                .and_then(|tail| tail.strip_suffix("-topic"))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    topic
        .strip_prefix(application_id)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|rest| SUFFIXES.iter().any(|s| rest.ends_with(s)) || generated(rest))
}

fn parse_datetime(text: &str) -> anyhow::Result<i64> {
    let time = humantime::parse_rfc3339_weak(text).with_context(|| {
        format!("--to-datetime {text:?}: expected YYYY-MM-DDTHH:MM:SS[.sss][Z], in UTC")
    })?;
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .with_context(|| format!("--to-datetime {text:?} is before 1970"))?;
    Ok(since.as_millis() as i64)
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let app = args.application_id.as_str();
    let target = match (&args.to_datetime, args.to_latest) {
        (Some(text), _) => Target::Time(parse_datetime(text)?),
        (None, true) => Target::Latest,
        (None, false) => Target::Earliest,
    };
    let (cluster, state_dir) = match (&args.log_dir, &args.bootstrap_servers) {
        (Some(dir), _) => {
            let log = Log::open(dir, LogOptions::default())
                .with_context(|| format!("opening {}", dir.display()))?;
            let state = args.state_dir.clone().unwrap_or_else(|| dir.join("state"));
            (Cluster::Embedded(log), Some(state))
        }
        (None, Some(servers)) => {
            let kafka = KafkaBackend::connect(KafkaConfig::new(servers.as_str()))
                .with_context(|| format!("connecting to Kafka at {servers}"))?;
            (Cluster::Kafka(kafka), args.state_dir.clone())
        }
        (None, None) => bail!("--log-dir or --bootstrap-servers is required"),
    };
    let prefix = if args.dry_run { "would " } else { "" };

    // Refused while an instance runs. The state directory's lock is held until the end, so
    // none starts on it meanwhile.
    let state = match &state_dir {
        Some(root) if root.join(app).exists() => Some(lock_state(root, app)?),
        _ => None,
    };
    cluster.check_no_members(app, args.force, args.dry_run)?;

    let backend = cluster.backend();
    let topics = cluster.topics()?;
    let internal: Vec<String> = topics
        .iter()
        .map(|(t, _)| t.clone())
        .filter(|t| is_internal(app, t))
        .collect();
    let inputs: Vec<String> = if args.input_topics.is_empty() {
        let mut from_group: Vec<String> = cluster
            .group_offsets(app)?
            .into_iter()
            .map(|(tp, _)| tp.topic.to_string())
            .filter(|t| !is_internal(app, t))
            .collect();
        from_group.dedup();
        from_group
    } else {
        args.input_topics.clone()
    };
    let committed = cluster.group_offsets(app)?;
    let mut offsets = Vec::new();
    for topic in &inputs {
        let Some(partitions) = backend.partitions(topic)? else {
            bail!("input topic {topic} does not exist");
        };
        for p in 0..partitions {
            let tp = TopicPartition::new(topic.as_str(), p);
            let to = match target {
                Target::Earliest => backend.start_offset(&tp)?,
                Target::Latest => backend.end_offset(&tp)?,
                Target::Time(ms) => backend.offset_for_timestamp(&tp, ms)?,
            };
            let from = committed
                .iter()
                .find(|(c, _)| *c == tp)
                .map_or_else(|| "none".to_owned(), |(_, o)| o.to_string());
            println!("{prefix}reset {tp}: committed {from} -> {to}");
            offsets.push((tp, to));
        }
    }
    if inputs.is_empty() {
        println!(
            "no input offsets to reset: the application has none committed (name them with --input-topics)"
        );
    }
    for topic in &internal {
        println!("{prefix}delete internal topic {topic}");
    }
    match &state {
        Some((_, dir)) => println!("{prefix}wipe local state {}", dir.display()),
        None => println!(
            "no local state to wipe{}",
            match &state_dir {
                Some(root) => format!(" (no {} directory)", root.join(app).display()),
                None => " (no --state-dir given)".to_owned(),
            }
        ),
    }
    if args.dry_run {
        return Ok(());
    }
    cluster
        .commit(app, &offsets)
        .with_context(|| format!("committing the reset offsets of {app}"))?;
    cluster.delete_topics(&internal)?;
    if let Some((lock, dir)) = state {
        wipe(lock, &dir)?;
    }
    println!("reset {app}: its next run processes its input again from the offsets above");
    Ok(())
}

/// Takes `<root>/<app>`'s process lock (refused, naming the pid, if a running instance holds
/// it).
fn lock_state(root: &Path, app: &str) -> anyhow::Result<(Arc<StateDirectory>, PathBuf)> {
    let dir = root.join(app);
    match StateDirectory::open(root, app) {
        Ok(state) => Ok((state, dir)),
        Err(riffle_state_dir::Error::Locked { holder, path }) => bail!(
            "refused: process {} runs application {app} (it holds {}); stop it first",
            holder.map_or_else(|| "?".to_owned(), |pid| pid.to_string()),
            path.display()
        ),
        Err(e) => Err(e).with_context(|| format!("opening {}", dir.display())),
    }
}

/// Removes the application's state directory: everything but the lock while it is held, then
/// the rest.
fn wipe(lock: Arc<StateDirectory>, dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if entry.file_name() == ".lock" {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.with_context(|| format!("removing {}", path.display()))?;
    }
    drop(lock);
    std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_topics_are_the_applications_changelogs_and_repartitions() {
        assert!(is_internal("app", "app-counts-changelog"));
        assert!(is_internal(
            "app",
            "app-KSTREAM-AGGREGATE-0000000001-repartition"
        ));
        assert!(is_internal(
            "app",
            "app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic"
        ));
        assert!(is_internal(
            "app",
            "app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic"
        ));
        assert!(is_internal("app", "app-orders-subscription-response-topic"));
        assert!(!is_internal(
            "app",
            "app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-x-topic"
        ));
        assert!(!is_internal("app", "app-input"));
        assert!(!is_internal("app", "other-counts-changelog"));
        assert!(!is_internal("app", "application-counts-changelog"));
    }

    #[test]
    fn datetimes_are_utc_milliseconds() {
        assert_eq!(parse_datetime("1970-01-01T00:00:01Z").ok(), Some(1_000));
        assert_eq!(
            parse_datetime("2024-01-01T00:00:00.250").ok(),
            Some(1_704_067_200_250)
        );
        assert!(parse_datetime("yesterday").is_err());
    }
}
