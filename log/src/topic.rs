//! A topic on storage: `topics/<name>/<partition>/` directories and the `partitions` file that
//! records the count. The file is written last (atomically) when a topic is created, so a topic
//! directory without it is an unfinished creation and is ignored on open.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, IoContext, Result};
use crate::options::LogOptions;
use crate::partition::Partition;
use crate::storage::Storage;
use crate::types::{TopicPartition, validate_name};

const TOPIC_META: &str = "partitions";

/// A topic's partitions, each behind its own lock.
#[derive(Debug)]
pub(crate) struct Topic {
    pub(crate) partitions: Vec<Mutex<Partition>>,
}

fn topics_dir(root: &Path) -> PathBuf {
    root.join("topics")
}

impl Topic {
    /// Opens the partitions of an existing (or being created) topic, recovering each.
    fn open(
        storage: &Arc<dyn Storage>,
        root: &Path,
        name: &Arc<str>,
        count: u32,
        options: &LogOptions,
        existing: bool,
    ) -> Result<Self> {
        let dir = topics_dir(root).join(&**name);
        let partitions = (0..count)
            .map(|p| {
                let tp = TopicPartition::new(Arc::clone(name), p);
                let pdir = dir.join(p.to_string());
                Partition::open(Arc::clone(storage), pdir, tp, options.clone(), existing)
                    .map(Mutex::new)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { partitions })
    }

    /// Creates the topic's directories, then its `partitions` file, durably.
    pub(crate) fn create(
        storage: &Arc<dyn Storage>,
        root: &Path,
        name: &Arc<str>,
        count: u32,
        options: &LogOptions,
    ) -> Result<Self> {
        if count == 0 {
            return Err(Error::InvalidPartitionCount {
                topic: name.to_string(),
                requested: 0,
            });
        }
        let topic = Self::open(storage, root, name, count, options, false)?;
        let dir = topics_dir(root).join(&**name);
        let meta = dir.join(TOPIC_META);
        // Partition directories must be durable entries before the count says they exist.
        storage.sync_dir(&dir).at(&dir)?;
        storage
            .write_atomic(&meta, format!("{count}\n").as_bytes())
            .at(&meta)?;
        let topics = topics_dir(root);
        storage.sync_dir(&topics).at(&topics)?;
        Ok(topic)
    }

    /// Every complete topic under `root`.
    pub(crate) fn load_all(
        storage: &Arc<dyn Storage>,
        root: &Path,
        options: &LogOptions,
    ) -> Result<HashMap<Arc<str>, Arc<Topic>>> {
        let dir = topics_dir(root);
        storage.create_dir_all(&dir).at(&dir)?;
        let mut topics = HashMap::new();
        for name in storage.list(&dir).at(&dir)? {
            if validate_name(&name, true).is_err() {
                tracing::warn!(dir = %dir.display(), entry = %name, "ignoring a stray entry");
                continue;
            }
            let meta = dir.join(&name).join(TOPIC_META);
            let Some(bytes) = storage.read(&meta).at(&meta)? else {
                tracing::warn!(file = %meta.display(), "ignoring a topic whose creation did not finish");
                continue;
            };
            let count = std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            let Some(count) = count.filter(|&c| c > 0) else {
                return Err(Error::Corrupt {
                    path: meta,
                    position: 0,
                    reason: "expected a positive partition count".to_owned(),
                });
            };
            let name: Arc<str> = name.into();
            let topic = Self::open(storage, root, &name, count, options, true)?;
            topics.insert(name, Arc::new(topic));
        }
        Ok(topics)
    }

    pub(crate) fn partition_count(&self) -> u32 {
        self.partitions.len() as u32
    }
}
