//! A topic on storage: `topics/<name>/<partition>/` directories and the `partitions` file that
//! records the count.
//!
//! A topic is created whole or not at all: its partition directories, first segments and
//! `partitions` file are written in a staging directory under `tmp/`, made durable, and renamed
//! to `topics/<name>` in one step. A creation that fails leaves nothing in `topics/` (and
//! removes its staging directory); one that crashes leaves only a staging directory, which the
//! next writable open removes. Two processes creating the same topic race on the rename: one
//! wins, the other loads the winner's topic. Creating N partitions costs O(N) on either storage
//! backend. This module never deletes anything under `topics/`, except a directory with
//! neither a `partitions` file nor a partition directory (an unfinished creation of an older
//! version of the log, holding no partition). A directory with partitions is a topic whatever
//! its metadata files say: `topic_meta.rs` checks them, and a missing or disagreeing one is an
//! `Error::Corrupt`, never a reason to replace the topic.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, IoContext, Result};
use crate::names::{scratch_name, validate_name};
use crate::options::LogOptions;
use crate::partition::{LOCK_FILE, Partition};
use crate::segment::segment_file_name;
use crate::storage::Storage;
use crate::topic_config::TopicConfig;
use crate::topic_meta::{CONFIG_FILE, Listing, PARTITIONS_FILE, TopicMeta};
use riffle_record::TopicPartition;

/// In a staging directory: locked by its creator while it works, so a cleaner can tell a live
/// creation from a crashed one.
const CREATING: &str = "creating";

/// A topic's partitions, each behind its own lock.
#[derive(Debug)]
pub(crate) struct Topic {
    pub(crate) partitions: Vec<Mutex<Partition>>,
    /// Its configuration, fixed at creation.
    pub(crate) config: TopicConfig,
}

fn topics_dir(root: &Path) -> PathBuf {
    root.join("topics")
}

fn staging_root(root: &Path) -> PathBuf {
    root.join("tmp")
}

/// Whether the process named in a staging directory's name (`<topic>.<pid>.<n>`) is alive:
/// this one, or one `/proc` lists (`procfs`). Where that cannot be told, only the `creating`
/// lock decides.
fn creator_alive(entry: &str) -> bool {
    let Some(pid) = entry.rsplit('.').nth(1).and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    pid == std::process::id() || listed_in_proc(pid)
}

/// Whether `/proc` lists process `pid`.
#[cfg(target_os = "linux")]
fn listed_in_proc(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|pid| procfs::process::Process::new(pid).is_ok())
}

/// No `/proc` to tell.
#[cfg(not(target_os = "linux"))]
fn listed_in_proc(_pid: u32) -> bool {
    false
}

impl Topic {
    /// Opens the partitions of an existing topic.
    fn open(
        storage: &Arc<dyn Storage>,
        root: &Path,
        name: &Arc<str>,
        count: u32,
        config: TopicConfig,
        options: &LogOptions,
        locks_open: &Arc<AtomicUsize>,
    ) -> Result<Self> {
        let dir = topics_dir(root).join(&**name);
        let mut options = options.clone();
        if let Some(bytes) = config.segment_bytes {
            options.segment_bytes = bytes;
            options = options.normalized();
        }
        let partitions = (0..count)
            .map(|p| {
                let tp = TopicPartition::new(Arc::clone(name), p);
                let pdir = dir.join(p.to_string());
                Partition::open(
                    Arc::clone(storage),
                    pdir,
                    tp,
                    options.clone(),
                    Arc::clone(locks_open),
                )
                .map(Mutex::new)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { partitions, config })
    }

    /// Creates the topic (see the module docs); if another process created it first, opens
    /// that one (the caller compares the counts).
    pub(crate) fn create(
        storage: &Arc<dyn Storage>,
        root: &Path,
        name: &Arc<str>,
        count: u32,
        config: &TopicConfig,
        options: &LogOptions,
        locks_open: &Arc<AtomicUsize>,
    ) -> Result<Self> {
        if count == 0 {
            return Err(Error::InvalidPartitionCount {
                topic: name.to_string(),
                requested: 0,
            });
        }
        if let Some(existing) = Self::load(storage, root, name, options, locks_open)? {
            return Ok(existing);
        }
        static STAGINGS: AtomicU64 = AtomicU64::new(0);
        let staging = staging_root(root).join(scratch_name(
            name,
            &format!(
                "{}.{}",
                std::process::id(),
                STAGINGS.fetch_add(1, Ordering::Relaxed)
            ),
        ));
        let built = Self::stage(storage, &staging, count, config);
        let target = topics_dir(root).join(&**name);
        let renamed = built.and_then(|()| {
            let renamed = storage.rename(&staging, &target);
            if renamed.is_err()
                && !storage.exists(&target.join(PARTITIONS_FILE))
                && Listing::read(&**storage, &target)?.is_bare()
            {
                // Neither a count nor a partition: an unfinished creation of an older log
                // version, holding nothing. (One with partitions failed `load` above.)
                storage.remove_dir_all(&target).at(&target)?;
                return storage.rename(&staging, &target).at(&target).map(|()| true);
            }
            // Err: another process renamed its staging directory there first.
            Ok(renamed.is_ok())
        });
        let won = match renamed {
            Ok(won) => won,
            Err(e) => {
                Self::remove_staging(storage, &staging);
                return Err(e);
            }
        };
        if won {
            let topics = topics_dir(root);
            storage.sync_dir(&topics).at(&topics)?;
        } else {
            Self::remove_staging(storage, &staging);
        }
        Self::load(storage, root, name, options, locks_open)?.ok_or_else(|| Error::Corrupt {
            path: target.join(PARTITIONS_FILE),
            position: 0,
            reason: "the topic's partition count is missing right after its creation".to_owned(),
        })
    }

    /// Writes a whole topic of `count` partitions into `staging`, durably.
    fn stage(
        storage: &Arc<dyn Storage>,
        staging: &Path,
        count: u32,
        config: &TopicConfig,
    ) -> Result<()> {
        storage.create_dir_all(staging).at(staging)?;
        let creating = staging.join(CREATING);
        let mut guard = storage.open(&creating).at(&creating)?;
        guard.lock(true).at(&creating)?;
        for p in 0..count {
            let pdir = staging.join(p.to_string());
            storage.create_dir_all(&pdir).at(&pdir)?;
            let log = pdir.join(segment_file_name(0));
            let index = log.with_extension("index");
            storage.open(&log).at(&log)?;
            storage.open(&index).at(&index)?;
            if storage.shared_between_processes() {
                // With the partition, not at its first write: creating a file costs more than
                // a hundred appends.
                let lock = pdir.join(LOCK_FILE);
                storage.open(&lock).at(&lock)?;
            }
            storage.sync_dir(&pdir).at(&pdir)?;
        }
        let overrides = config.to_file();
        if !overrides.is_empty() {
            let path = staging.join(CONFIG_FILE);
            storage
                .write_atomic(&path, overrides.as_bytes())
                .at(&path)?;
        }
        // The count, and the config recorded, so that a lost or changed `config` shows.
        let meta = staging.join(PARTITIONS_FILE);
        let content = TopicMeta {
            count,
            config: Some(config.clone()),
        }
        .render();
        storage.write_atomic(&meta, content.as_bytes()).at(&meta)?;
        storage.sync_dir(staging).at(staging)?;
        Ok(())
    }

    fn remove_staging(storage: &Arc<dyn Storage>, staging: &Path) {
        if let Err(e) = storage.remove_dir_all(staging) {
            tracing::warn!(dir = %staging.display(), error = %e, "could not remove a topic's staging directory");
        }
    }

    /// Removes staging directories of creations whose process died (their `creating` lock is
    /// free). A writable open calls this.
    pub(crate) fn remove_abandoned_stagings(storage: &Arc<dyn Storage>, root: &Path) -> Result<()> {
        let dir = staging_root(root);
        for entry in storage.list(&dir).at(&dir)? {
            // A creator that is still alive may not have locked `creating` yet (or may have
            // just renamed its staging directory away): never take its directory.
            if creator_alive(&entry) {
                continue;
            }
            let staging = dir.join(&entry);
            let creating = staging.join(CREATING);
            let abandoned = match storage.open_existing(&creating, true).at(&creating)? {
                Some(mut f) => f.try_lock().at(&creating)?,
                None => true,
            };
            if abandoned {
                tracing::info!(dir = %staging.display(), "removing the staging directory of a topic creation that did not finish");
                storage.remove_dir_all(&staging).at(&staging)?;
            }
        }
        Ok(())
    }

    /// The topic `name` as stored, `None` if it does not exist (or its directory holds neither
    /// a `partitions` file nor a partition: an unfinished creation of an older version of the
    /// log). Metadata that disagrees with the partition directories is an `Error::Corrupt`
    /// (`topic_meta.rs`).
    pub(crate) fn load(
        storage: &Arc<dyn Storage>,
        root: &Path,
        name: &Arc<str>,
        options: &LogOptions,
        locks_open: &Arc<AtomicUsize>,
    ) -> Result<Option<Self>> {
        let dir = topics_dir(root).join(&**name);
        let Some((count, config)) = crate::topic_meta::check(&**storage, &dir)? else {
            return Ok(None);
        };
        Self::open(storage, root, name, count, config, options, locks_open).map(Some)
    }

    /// Every complete topic under `root`.
    pub(crate) fn load_all(
        storage: &Arc<dyn Storage>,
        root: &Path,
        options: &LogOptions,
        locks_open: &Arc<AtomicUsize>,
    ) -> Result<HashMap<Arc<str>, Arc<Topic>>> {
        let dir = topics_dir(root);
        let mut topics = HashMap::new();
        for name in storage.list(&dir).at(&dir)? {
            if validate_name(&name, true).is_err() {
                tracing::warn!(dir = %dir.display(), entry = %name, "ignoring a stray entry");
                continue;
            }
            let name: Arc<str> = name.into();
            match Self::load(storage, root, &name, options, locks_open)? {
                Some(topic) => {
                    topics.insert(name, Arc::new(topic));
                }
                None => {
                    let tdir = dir.join(&*name);
                    tracing::warn!(dir = %tdir.display(), "ignoring a directory with neither a `partitions` file nor a partition (a topic creation of an older version that did not finish)");
                }
            }
        }
        Ok(topics)
    }

    pub(crate) fn partition_count(&self) -> u32 {
        self.partitions.len() as u32
    }
}
