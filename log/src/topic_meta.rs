//! A topic's metadata files — `topics/<t>/partitions` (the partition count, and the config the
//! topic was created with) and `topics/<t>/config` — read and checked against what the topic's
//! directory holds (log/FORMAT.md, *Directory layout*).
//!
//! What it owns: the `partitions` file's syntax ([`TopicMeta`]), the listing of a topic
//! directory's partition directories ([`Listing`]), and [`check`], which says whether a
//! directory under `topics/` is a topic, and with which count and config.
//!
//! What it must never do: guess. The partition directories are what the data shows; a
//! `partitions` file that is missing or disagrees with them, or a `config` file that disagrees
//! with what `partitions` recorded at creation, is an [`Error::Corrupt`] naming the file and
//! what the directory holds — never "no topic", which would let the next writer replace it.
//! Only a directory with neither a `partitions` file nor any partition directory is no topic.
//! Rebuilding the files is `repair`'s (`log/src/repair/topic.rs`), on request.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::segment::parse_segment_file_name;
use crate::storage::Storage;
use crate::topic_config::{TOPIC_CONFIG_KEYS, TopicConfig};

/// The partition count (and the recorded config), `topics/<t>/partitions`.
pub(crate) const PARTITIONS_FILE: &str = "partitions";
/// The topic's config overrides, `key=value` lines (absent: the defaults).
pub(crate) const CONFIG_FILE: &str = "config";

/// What a `partitions` file says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TopicMeta {
    /// The partition count (≥ 1).
    pub(crate) count: u32,
    /// The config the topic was created with, recorded on the file's `config` line, which the
    /// `config` file must agree with; `None`: a file without that line (the count alone), whose
    /// topic's `config` file is taken as it is.
    pub(crate) config: Option<TopicConfig>,
}

impl TopicMeta {
    /// The file's content: the count and a newline, then (if recorded) `config` followed by
    /// each override as ` key=value`, in [`TOPIC_CONFIG_KEYS`] order, and a newline.
    pub(crate) fn render(&self) -> String {
        let mut text = format!("{}\n", self.count);
        if let Some(config) = &self.config {
            text.push_str("config");
            for (key, value) in config.overrides() {
                let _ = write!(text, " {key}={value}");
            }
            text.push('\n');
        }
        text
    }

    /// Parses a `partitions` file; on failure, the byte position of the bad line and why.
    /// Blank lines and the whitespace around a line are ignored.
    pub(crate) fn parse(bytes: &[u8]) -> std::result::Result<Self, (u64, String)> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| (e.valid_up_to() as u64, "not UTF-8".to_owned()))?;
        let mut count = None;
        let mut config: Option<TopicConfig> = None;
        let mut at = 0u64;
        for (n, line) in text.split('\n').enumerate() {
            let pos = at;
            at += line.len() as u64 + 1;
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let n = n + 1;
            if count.is_none() {
                let parsed = line.parse::<u32>().ok().filter(|&c| c > 0);
                count = Some(parsed.ok_or_else(|| {
                    (
                        pos,
                        format!("line {n}: expected a positive partition count, not {line:?}"),
                    )
                })?);
                continue;
            }
            let mut words = line.split_whitespace();
            if words.next() != Some("config") {
                return Err((
                    pos,
                    format!(
                        "line {n}: expected `config` and the topic's config overrides, not {line:?}"
                    ),
                ));
            }
            if config.is_some() {
                return Err((pos, format!("line {n}: a second `config` line")));
            }
            let mut recorded = TopicConfig::default();
            for word in words {
                let Some((key, value)) = word.split_once('=') else {
                    return Err((pos, format!("line {n}: {word:?} is not key=value")));
                };
                recorded
                    .set(key, value)
                    .map_err(|reason| (pos, format!("line {n} ({key}): {reason}")))?;
            }
            config = Some(recorded);
        }
        let count =
            count.ok_or_else(|| (0, "empty: expected a positive partition count".to_owned()))?;
        Ok(Self { count, config })
    }
}

/// Parses a `config` file; why not, if it is not one.
pub(crate) fn parse_config(bytes: &[u8]) -> std::result::Result<TopicConfig, String> {
    std::str::from_utf8(bytes)
        .map_err(|_| "not UTF-8".to_owned())
        .and_then(TopicConfig::from_file)
}

/// A config in a few words: its overrides, or "the defaults".
pub(crate) fn describe_config(config: &TopicConfig) -> String {
    let overrides = config.overrides();
    if overrides.is_empty() {
        return "the defaults (no override)".to_owned();
    }
    overrides
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every key's default value, for a message saying what removing a `config` file would give.
pub(crate) fn describe_defaults() -> String {
    let defaults = TopicConfig::default();
    TOPIC_CONFIG_KEYS
        .iter()
        .map(|&key| match defaults.get(key) {
            Some(value) => format!("{key}={value}"),
            None => format!("{key}=the log's segment size"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The entries of a topic directory that concern its partitions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Listing {
    /// Partition directories: entries named by a partition number as the log names them
    /// (decimal, no leading zero).
    pub(crate) partitions: BTreeSet<u32>,
    /// Other entries named by digits only (`01`, a number past `u32`): no partition of the
    /// log's, but no stray file of another program either.
    pub(crate) strays: Vec<String>,
}

impl Listing {
    /// Lists `dir` (empty if it does not exist).
    pub(crate) fn read(storage: &dyn Storage, dir: &Path) -> Result<Self> {
        let mut listing = Self::default();
        for name in storage.list(dir).at(dir)? {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            match name.parse::<u32>() {
                Ok(p) if p.to_string() == name => {
                    listing.partitions.insert(p);
                }
                _ => listing.strays.push(name),
            }
        }
        listing.strays.sort();
        Ok(listing)
    }

    /// Nothing that could be a partition: a directory that is no topic (with no `partitions`
    /// file either).
    pub(crate) fn is_bare(&self) -> bool {
        self.partitions.is_empty() && self.strays.is_empty()
    }

    /// `Some(n)` if the partition directories are exactly `0..n` (n ≥ 1) and nothing else is
    /// named by digits.
    pub(crate) fn dense(&self) -> Option<u32> {
        let last = *self.partitions.last()?;
        (self.strays.is_empty() && self.partitions.len() as u64 == u64::from(last) + 1)
            .then_some(last + 1)
    }

    /// Whether the partition directories are exactly `0..count`.
    pub(crate) fn matches(&self, count: u32) -> bool {
        self.partitions.len() as u64 == u64::from(count)
            && self.partitions.last().is_some_and(|&l| l + 1 == count)
    }

    /// Which partitions, with their segment files and bytes: "partitions 0 to 2 (4 segments,
    /// 3612 bytes)", "partitions 0, 1 and 5 (…)", "no partition directory".
    pub(crate) fn describe(&self, storage: &dyn Storage, dir: &Path) -> String {
        let mut text = describe_set(&self.partitions);
        if !self.partitions.is_empty() {
            let (segments, bytes) = self.segments(storage, dir);
            let s = if segments == 1 { "" } else { "s" };
            let _ = write!(text, " ({segments} segment{s}, {bytes} bytes)");
        }
        if !self.strays.is_empty() {
            let _ = write!(
                text,
                ", and {} named by digits but not as a partition",
                quote_list(&self.strays)
            );
        }
        text
    }

    /// The segment files (`.log`) of every partition directory, and their bytes (best effort:
    /// for messages).
    fn segments(&self, storage: &dyn Storage, dir: &Path) -> (u64, u64) {
        let (mut segments, mut bytes) = (0u64, 0u64);
        for p in &self.partitions {
            let pdir = dir.join(p.to_string());
            for name in storage.list(&pdir).unwrap_or_default() {
                if parse_segment_file_name(&name).is_none() {
                    continue;
                }
                segments += 1;
                if let Ok(Some(f)) = storage.open_existing(&pdir.join(&name), false) {
                    bytes += f.len();
                }
            }
        }
        (segments, bytes)
    }

    /// The first partition directory that holds no segment file.
    pub(crate) fn without_segment(&self, storage: &dyn Storage, dir: &Path) -> Result<Option<u32>> {
        for &p in &self.partitions {
            let pdir = dir.join(p.to_string());
            let names = storage.list(&pdir).at(&pdir)?;
            if !names.iter().any(|n| parse_segment_file_name(n).is_some()) {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }
}

/// "partition 0", "partitions 0 to 3", "partitions 0, 1 and 5", "no partition directory".
pub(crate) fn describe_set(set: &BTreeSet<u32>) -> String {
    let (Some(&first), Some(&last)) = (set.first(), set.last()) else {
        return "no partition directory".to_owned();
    };
    if set.len() == 1 {
        return format!("partition {first}");
    }
    if set.len() as u64 == u64::from(last - first) + 1 {
        return format!("partitions {first} to {last}");
    }
    let names: Vec<String> = set.iter().take(8).map(u32::to_string).collect();
    format!("partitions {}", name_list(names, set.len() as u64))
}

/// "a", "a and b", "a, b and c", at most 8 named.
fn quote_list(items: &[String]) -> String {
    let shown = items.iter().take(8).cloned().collect();
    name_list(shown, items.len() as u64)
}

/// `shown` (the first few of `total` names) as "a", "a and b", "a, b and c", or "a, b, c and
/// 5 more".
fn name_list(shown: Vec<String>, total: u64) -> String {
    let more = total.saturating_sub(shown.len() as u64);
    match shown.split_last() {
        None => String::new(),
        Some((_, [])) if more > 0 => format!("{} and {more} more", shown[0]),
        Some((last, [])) => last.clone(),
        Some(_) if more > 0 => format!("{} and {more} more", shown.join(", ")),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// What a topic directory holds, read at one moment: `partitions`, `config` and the listing.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) partitions: Option<Vec<u8>>,
    pub(crate) config: Option<Vec<u8>>,
    pub(crate) listing: Listing,
}

impl Snapshot {
    pub(crate) fn read(storage: &dyn Storage, dir: &Path) -> Result<Self> {
        let meta = dir.join(PARTITIONS_FILE);
        let config = dir.join(CONFIG_FILE);
        Ok(Self {
            partitions: storage.read(&meta).at(&meta)?,
            config: storage.read(&config).at(&config)?,
            listing: Listing::read(storage, dir)?,
        })
    }
}

fn corrupt(path: PathBuf, position: u64, reason: String) -> Error {
    Error::Corrupt {
        path,
        position,
        reason,
    }
}

/// The topic in `dir` (`topics/<t>`): its partition count and config, `None` if the directory
/// is no topic (neither a `partitions` file nor a partition directory). Everything else that
/// does not add up is an [`Error::Corrupt`] naming the file (see the module docs).
///
/// Another process may create or delete the topic meanwhile (each one rename of the whole
/// directory): a check that fails is made again on a fresh look while the directory changes
/// under it.
pub(crate) fn check(storage: &dyn Storage, dir: &Path) -> Result<Option<(u32, TopicConfig)>> {
    let mut snapshot = Snapshot::read(storage, dir)?;
    let mut attempts = 0;
    loop {
        match check_snapshot(storage, dir, &snapshot) {
            Ok(found) => return Ok(found),
            Err(e) => {
                let again = Snapshot::read(storage, dir)?;
                attempts += 1;
                if again == snapshot || attempts >= 3 {
                    return Err(e);
                }
                snapshot = again;
            }
        }
    }
}

fn check_snapshot(
    storage: &dyn Storage,
    dir: &Path,
    snapshot: &Snapshot,
) -> Result<Option<(u32, TopicConfig)>> {
    let path = dir.join(PARTITIONS_FILE);
    let listing = &snapshot.listing;
    let Some(raw) = &snapshot.partitions else {
        if listing.is_bare() {
            return Ok(None);
        }
        let holds = listing.describe(storage, dir);
        let repair = rebuild_hint(storage, dir, listing, "writes it back")?;
        return Err(corrupt(
            path,
            0,
            format!(
                "the topic's partition count is missing, but the directory holds {holds}: the \
                 topic exists (a created topic has a segment per partition), and it is neither \
                 guessed nor replaced; {repair}"
            ),
        ));
    };
    let meta = match TopicMeta::parse(raw) {
        Ok(meta) => meta,
        Err((position, reason)) => {
            let holds = listing.describe(storage, dir);
            let repair = rebuild_hint(storage, dir, listing, "rewrites it")?;
            let reason = format!("{reason}; the directory holds {holds}: {repair}");
            return Err(corrupt(path, position, reason));
        }
    };
    if let Some(mismatch) = Mismatch::of(meta.count, listing) {
        let reason = mismatch.explain(storage, dir, meta.count, listing);
        return Err(corrupt(path, 0, reason));
    }
    let config = check_config(dir, &meta, snapshot.config.as_deref())?;
    Ok(Some((meta.count, config)))
}

/// What `riffle log repair` does about a `partitions` file that is missing or does not parse
/// (`does`: "writes it back", "rewrites it"), which depends on whether the directories show the
/// count unambiguously (as `repair/topic.rs` decides).
fn rebuild_hint(
    storage: &dyn Storage,
    dir: &Path,
    listing: &Listing,
    does: &str,
) -> Result<String> {
    let Some(n) = listing.dense() else {
        return Ok(
            "the directories are not partitions 0 to N-1, so `riffle log repair` cannot \
                   tell the count: write it into the file by hand"
                .to_owned(),
        );
    };
    if let Some(p) = listing.without_segment(storage, dir)? {
        return Ok(format!(
            "{} holds no segment, so `riffle log repair` cannot tell the count for sure: write \
             it into the file by hand",
            dir.join(p.to_string()).display()
        ));
    }
    let s = if n == 1 { "" } else { "s" };
    Ok(format!(
        "`riffle log repair` {does} from the directories ({n} partition{s})"
    ))
}

/// How a partition count and the partition directories disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// Directories past the count, and the directories are exactly `0..n` (n > count): the
    /// count was lowered; `n` is what they show.
    Past { n: u32 },
    /// Directories missing below the last one, which is `count - 1`: deleted partitions (the
    /// directories after them show the count reaches past them).
    Gaps,
    /// The last partitions missing (the highest directory is below `count - 1`, or there is
    /// none): deleted, or the count raised; which cannot be told. `n`: the count the
    /// directories show, if they are exactly `0..n`.
    Trailing { n: Option<u32> },
    /// Neither: gaps and directories past the count, or names that are no partition's.
    Tangled,
}

impl Mismatch {
    /// How `count` and the directories of `listing` disagree; `None` if they agree.
    pub(crate) fn of(count: u32, listing: &Listing) -> Option<Self> {
        if listing.matches(count) {
            return None;
        }
        let last = listing.partitions.last().copied();
        Some(match (last, listing.dense()) {
            (Some(last), Some(n)) if last >= count => Self::Past { n },
            (Some(last), _) if last >= count => Self::Tangled,
            (Some(last), _) if last + 1 == count => Self::Gaps,
            (_, n) => Self::Trailing { n },
        })
    }

    /// Why they disagree and what to do, for an error or a repair report.
    pub(crate) fn explain(
        self,
        storage: &dyn Storage,
        dir: &Path,
        count: u32,
        listing: &Listing,
    ) -> String {
        let holds = listing.describe(storage, dir);
        let s = if count == 1 { "" } else { "s" };
        let said = format!("it says {count} partition{s}, but the directory holds {holds}");
        let show = |parts: &mut dyn Iterator<Item = u32>, total: u64| {
            let names: Vec<String> = parts
                .take(8)
                .map(|p| dir.join(p.to_string()).display().to_string())
                .collect();
            let verb = if total == 1 { "is" } else { "are" };
            format!("{} {verb}", name_list(names, total))
        };
        let below = listing.partitions.range(..count).count() as u64;
        let missing_total = u64::from(count) - below;
        let mut missing = (0..count).filter(|p| !listing.partitions.contains(p));
        let (they, them, their) = if missing_total == 1 {
            ("it", "it", "its")
        } else {
            ("they", "them", "their")
        };
        match self {
            Self::Past { n } => {
                let past = listing.partitions.range(count..);
                format!(
                    "{said}: {} past the count (was the file changed?); `riffle log repair` \
                     rewrites the count to {n}, as the directories show",
                    show(
                        &mut past.copied(),
                        (listing.partitions.len() as u64) - below
                    )
                )
            }
            Self::Gaps => format!(
                "{said}: {} missing (deleted, with the records {they} held?); `riffle log repair` \
                 recreates {them} empty, keeping the count {count}",
                show(&mut missing, missing_total)
            ),
            Self::Trailing { n } => {
                let lower = match n {
                    Some(n) => format!(
                        "if the count was changed, write {n} back (`riffle log repair` never \
                         lowers a count); "
                    ),
                    None => String::new(),
                };
                format!(
                    "{said}: {} missing, deleted with the records {they} held or the count \
                     changed, which cannot be told: {lower}if {they} {} deleted, create {them} as \
                     empty directories, and `riffle log repair` recreates {their} segments empty",
                    show(&mut missing, missing_total),
                    if missing_total == 1 { "was" } else { "were" }
                )
            }
            Self::Tangled => format!(
                "{said}: the directories are neither partitions 0 to {} nor partitions 0 to N-1 of \
                 another count, so the count cannot be told (nor by `riffle log repair`): fix the \
                 file or the directories by hand",
                count - 1
            ),
        }
    }
}

/// The topic's config: the `config` file (absent: the defaults), which must agree with what
/// `meta` recorded at creation, if it recorded it.
fn check_config(dir: &Path, meta: &TopicMeta, file: Option<&[u8]>) -> Result<TopicConfig> {
    let path = dir.join(CONFIG_FILE);
    let record = dir.join(PARTITIONS_FILE);
    let parsed = match file {
        None => None,
        Some(bytes) => Some(parse_config(bytes).map_err(|reason| {
            let hint = match &meta.config {
                Some(_) => format!(
                    "`riffle log repair` writes it back from the record in {}",
                    record.display()
                ),
                None => format!(
                    "nothing records what it held: fix it by hand, or remove it to give the \
                     topic the defaults ({})",
                    describe_defaults()
                ),
            };
            corrupt(path.clone(), 0, format!("{reason}; {hint}"))
        })?),
    };
    let Some(recorded) = &meta.config else {
        return Ok(parsed.unwrap_or_default());
    };
    let actual = parsed.unwrap_or_default();
    if &actual == recorded {
        return Ok(actual);
    }
    let found = match file {
        None => "the file is missing (the defaults would apply)".to_owned(),
        Some(_) => format!("it says {}", describe_config(&actual)),
    };
    Err(corrupt(
        path,
        0,
        format!(
            "{found}, but {} records that the topic was created with {}, and a topic's config \
             never changes; `riffle log repair` writes the config back from that record",
            record.display(),
            describe_config(recorded)
        ),
    ))
}
