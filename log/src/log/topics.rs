//! The topics of a log: loading them (those other processes created since included),
//! creating and deleting them, and finding the topic of a partition.
//!
//! It must never let a topic be seen half made or half deleted: creation and deletion are
//! each the rename of a whole directory (log/FORMAT.md, *Directory layout* and *Deleting a
//! topic*). It takes several partitions' locks only under the transaction lock, in
//! partition order.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Log, Topics, lock, poisoned_topics};
use crate::error::{Error, IoContext, Result};
use crate::names::{scratch_name, validate_name};
use crate::topic::Topic;
use crate::topic_config::TopicConfig;
use riffle_record::TopicPartition;

impl Log {
    pub(crate) fn load_topics(&self) -> Result<()> {
        let shared = &self.shared;
        if !shared.options.read_only {
            Topic::remove_abandoned_stagings(&shared.storage, &shared.root)?;
        }
        let map = Topic::load_all(
            &shared.storage,
            &shared.root,
            &shared.options,
            &shared.locks_open,
        )?;
        let mut topics = Topics::default();
        for (name, topic) in map {
            topics.insert(name, topic);
        }
        *shared.topics.write().map_err(|_| poisoned_topics())? = topics;
        if shared.options.read_only {
            return Ok(());
        }
        self.recover_journal()
    }

    /// `name` as another process may have created it since this log loaded its topics.
    pub(crate) fn load_topic(&self, name: &str) -> Result<Option<Arc<Topic>>> {
        let shared = &self.shared;
        let mut topics = shared.topics.write().map_err(|_| poisoned_topics())?;
        if let Some(topic) = topics.by_name.get(name) {
            return Ok(Some(Arc::clone(topic)));
        }
        if validate_name(name, true).is_err() {
            return Ok(None);
        }
        let name: Arc<str> = name.into();
        let loaded = Topic::load(
            &shared.storage,
            &shared.root,
            &name,
            &shared.options,
            &shared.locks_open,
        )?;
        Ok(loaded.map(|topic| {
            let topic = Arc::new(topic);
            topics.insert(name, Arc::clone(&topic));
            topic
        }))
    }

    /// Loads every topic another process created since this log loaded its topics.
    pub(super) fn refresh_topics(&self) -> Result<()> {
        let dir = self.shared.root.join("topics");
        for name in self.shared.storage.list(&dir).at(&dir)? {
            let known = self
                .shared
                .topics
                .read()
                .map_err(|_| poisoned_topics())?
                .by_name
                .contains_key(name.as_str());
            if !known {
                self.load_topic(&name)?;
            }
        }
        Ok(())
    }

    /// Creates `topic` with `partitions` partitions (at least 1). Ok if it exists with that
    /// count; [`Error::PartitionCountMismatch`] if with another. The topic is created whole or
    /// not at all, and two processes creating it at once get one topic (log/FORMAT.md).
    pub fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        self.create_topic_with(topic, partitions, &TopicConfig::default())
    }

    /// [`create_topic`](Self::create_topic) with a configuration (Kafka's topic configs:
    /// [`TopicConfig`]), stored with the topic. A topic that exists keeps the configuration it
    /// was created with.
    pub fn create_topic_with(
        &self,
        topic: &str,
        partitions: u32,
        config: &TopicConfig,
    ) -> Result<()> {
        validate_name(topic, true)?;
        if self.shared.options.read_only {
            return Err(Error::ReadOnly {
                what: format!("create topic {topic:?}"),
            });
        }
        let existing = match self.load_topic(topic)? {
            Some(existing) => existing,
            None => {
                let name: Arc<str> = topic.into();
                let shared = &self.shared;
                let mut topics = shared.topics.write().map_err(|_| poisoned_topics())?;
                match topics.by_name.get(topic) {
                    Some(existing) => Arc::clone(existing),
                    None => {
                        let created = Arc::new(Topic::create(
                            &shared.storage,
                            &shared.root,
                            &name,
                            partitions,
                            config,
                            &shared.options,
                            &shared.locks_open,
                        )?);
                        topics.insert(name, Arc::clone(&created));
                        created
                    }
                }
            }
        };
        let existing = existing.partition_count();
        if existing == partitions {
            return Ok(());
        }
        Err(Error::PartitionCountMismatch {
            topic: topic.to_owned(),
            existing,
            requested: partitions,
        })
    }

    /// The topic's partition count, `None` if it does not exist.
    pub fn partitions(&self, topic: &str) -> Option<u32> {
        self.load_topic(topic).ok()?.map(|t| t.partition_count())
    }

    /// Every topic and its partition count, sorted by name (including topics other processes
    /// created since this log was opened).
    pub fn topics(&self) -> Vec<(String, u32)> {
        if let Err(e) = self.refresh_topics() {
            tracing::warn!(error = %e, "could not look for topics created by other processes");
        }
        let mut all: Vec<(String, u32)> = match self.shared.topics.read() {
            Ok(topics) => topics
                .by_name
                .iter()
                .map(|(n, t)| (n.to_string(), t.partition_count()))
                .collect(),
            Err(_) => Vec::new(),
        };
        all.sort();
        all
    }

    /// The topic of `tp`, checking that it has that partition.
    pub(crate) fn topic(&self, tp: &TopicPartition) -> Result<Arc<Topic>> {
        let known = {
            let topics = self.shared.topics.read().map_err(|_| poisoned_topics())?;
            topics.by_name.get(&*tp.topic).cloned()
        };
        let topic = match known {
            Some(topic) => topic,
            None => self
                .load_topic(&tp.topic)?
                .ok_or_else(|| Error::UnknownTopic {
                    topic: tp.topic.to_string(),
                })?,
        };
        if tp.partition >= topic.partition_count() {
            return Err(Error::UnknownPartition {
                topic: tp.topic.to_string(),
                partition: tp.partition,
            });
        }
        Ok(topic)
    }

    /// The configuration `topic` was created with; `None` if it does not exist.
    pub fn topic_config(&self, topic: &str) -> Result<Option<TopicConfig>> {
        Ok(self.load_topic(topic)?.map(|t| t.config.clone()))
    }

    /// Deletes `topic`: its records and every group's committed offsets of it. Writers in
    /// other processes that still have it open fail with [`Error::TopicDeleted`]; a topic
    /// created later under the name starts empty. Readers that had it open keep reading what
    /// it held until they reopen it (log/FORMAT.md, *Deleting a topic*).
    ///
    /// Under the transaction lock (exclusive, after a checkpoint, so the journal holds none of
    /// its batches) and every partition's lock: each partition is marked deleted in its lock
    /// file, the groups' offsets of the topic are removed, and `topics/<topic>` is renamed into
    /// `tmp/` (atomic: `topics/` only ever holds whole topics), then removed. A crash after the
    /// rename leaves a directory the next writable open removes.
    pub fn delete_topic(&self, topic: &str) -> Result<()> {
        validate_name(topic, true)?;
        if self.shared.options.read_only {
            return Err(Error::ReadOnly {
                what: format!("delete topic {topic:?}"),
            });
        }
        let shared = &self.shared;
        let mut txn = self.txn_lock(true)?;
        self.checkpoint(&mut txn)?;
        let Some(existing) = self.load_topic(topic)? else {
            return Err(Error::UnknownTopic {
                topic: topic.to_owned(),
            });
        };
        let mut locked = Vec::with_capacity(existing.partitions.len());
        for (p, partition) in existing.partitions.iter().enumerate() {
            let tp = TopicPartition::new(topic, p as u32);
            let mut guard = lock(partition, &tp)?;
            guard.lock_for_write(true)?;
            guard.mark_deleted()?;
            locked.push(guard);
        }
        txn.files_changed()?;
        {
            let mut groups = lock(&shared.groups, &"the group offsets")?;
            groups.generation = txn.generation();
            groups.delete_topic(&shared.storage, &shared.root, topic)?;
        }
        static DELETIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let from = shared.root.join("topics").join(topic);
        let to = shared.root.join("tmp").join(scratch_name(
            topic,
            &format!(
                "{}.d{}",
                std::process::id(),
                DELETIONS.fetch_add(1, Ordering::Relaxed)
            ),
        ));
        let tmp = shared.root.join("tmp");
        shared.storage.create_dir_all(&tmp).at(&tmp)?;
        shared.storage.rename(&from, &to).at(&from)?;
        let topics = shared.root.join("topics");
        shared.storage.sync_dir(&topics).at(&topics)?;
        shared
            .topics
            .write()
            .map_err(|_| poisoned_topics())?
            .remove(topic);
        for mut guard in locked {
            guard.unlock();
        }
        drop(txn);
        drop(existing);
        if let Err(e) = shared.storage.remove_dir_all(&to) {
            tracing::warn!(dir = %to.display(), error = %e, "could not remove a deleted topic's files; the next writable open will");
        }
        Ok(())
    }
}
