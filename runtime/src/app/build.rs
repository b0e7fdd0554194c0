//! Building an application instance: checking the configuration against the topology and the
//! backend, resolving the topology's topics (partition counts, co-partitioning, internal and
//! missing sink topics, the dead-letter queue), opening the state directory, the store database
//! and the global tables, joining the group — and making the parts the threads share from them.

use std::sync::Arc;

use riffle_state_dir::StateDirectory;

use crate::backend::group::{GroupInfo, GroupSettings, SubtopologyInfo};
use crate::backend::{Backend, TopicKind};
use crate::config::{ProcessingGuarantee, StreamsConfig};
use crate::engine::global::{GlobalState, GlobalTables};
use crate::engine::instance::InstanceWiring;
use crate::engine::lifecycle::Lifecycle;
use crate::engine::metrics::InstanceMetrics;
use crate::engine::query::QueryInbox;
use crate::engine::thread::ThreadParts;
use crate::processor::collector::TopicTable;
use crate::state::StoreDatabase;
use crate::topology::{TopicRef, Topology, changelog_topic};
use crate::types::error::{Error, Result};

/// Resolves `topology` against `backend`: checks the source topics, creates the internal
/// topics, and locks the state directory. The instance's parts, and its global tables' state
/// for the global thread.
pub(crate) fn build(
    mut topology: Topology,
    config: StreamsConfig,
    backend: Arc<dyn Backend>,
) -> Result<(ThreadParts, GlobalState)> {
    config.validate()?;
    topology.configure_caching(config.statestore_cache_max_bytes);
    if topology.nodes.is_empty() {
        return Err(Error::Topology(
            "the topology has no nodes; add a source".into(),
        ));
    }
    if config.processing_guarantee == ProcessingGuarantee::ExactlyOnce
        && !backend.supports_exactly_once()
    {
        return Err(Error::Config(
            "processing_guarantee exactly_once: this backend cannot commit atomically; use at_least_once".into(),
        ));
    }
    let app_id = config.application_id.clone();
    let (mut topics, subtopologies) = resolve_topics(&topology, &app_id, &*backend)?;
    add_dead_letter_queue(&mut topics, &config, &*backend)?;
    let state_dir = StateDirectory::open(&config.state_dir, &app_id)?;
    let store_db = open_store_database(&topology, &config, &state_dir)?;
    let group = GroupInfo {
        application_id: app_id.clone(),
        process_id: state_dir.process_id().to_owned(),
        subtopologies,
        user_endpoint: config
            .application_server
            .as_deref()
            .map(str::parse)
            .transpose()?,
        processing_guarantee: config.processing_guarantee,
        settings: GroupSettings::of(&config),
    };
    let coordinator = backend.group_coordinator(&group)?;
    let global_state = GlobalState::open(
        &topology,
        &*backend,
        store_db.as_ref(),
        config.deserialization_exception_handler.clone(),
    )?;
    let threads = config.num_stream_threads;
    let parts = ThreadParts {
        globals: Arc::new(GlobalTables::new(global_state.stores().to_vec())),
        lifecycle: Arc::new(Lifecycle::new(threads)),
        metrics: Arc::new(InstanceMetrics::new(threads)),
        queries: Arc::new(QueryInbox::new(threads)),
        wiring: Arc::new(InstanceWiring {
            coordinator,
            group,
            config,
            topology,
            backend,
            topics: Arc::new(topics),
            state_dir,
            store_db,
        }),
    };
    Ok((parts, global_state))
}

/// Puts the dead-letter queue among the application's topics, creating it (one partition) if
/// it is missing.
pub(crate) fn add_dead_letter_queue(
    topics: &mut TopicTable,
    config: &StreamsConfig,
    backend: &dyn Backend,
) -> Result<()> {
    let Some(name) = &config.errors_dead_letter_queue_topic_name else {
        return Ok(());
    };
    let partitions = match backend.partitions(name)? {
        Some(p) => p,
        None => {
            tracing::info!(topic = %name, "creating the dead-letter queue");
            backend.create_topic(name, 1, TopicKind::User)?;
            1
        }
    };
    topics.insert(name, partitions);
    Ok(())
}

/// Checks that what a join reads on either side is co-partitioned: the user topics above both
/// sides must have one partition count (else an error naming two that differ), and a
/// repartition topic among them gets that count (Kafka Streams' co-partition groups). Returns
/// those repartition topics' counts.
fn copartition(
    topology: &Topology,
    backend: &dyn Backend,
) -> Result<std::collections::BTreeMap<TopicRef, u32>> {
    let mut forced = std::collections::BTreeMap::new();
    for &(a, b) in &topology.copartitioned {
        let mut group = topology.upstream_topics(a);
        group.extend(topology.upstream_topics(b));
        let mut external = Vec::new();
        for topic in &group {
            if let TopicRef::External(name) = topic
                && let Some(n) = backend.partitions(name)?
            {
                external.push((name, n));
            }
        }
        let Some(&(first, n)) = external.first() else {
            continue;
        };
        if let Some(&(other, m)) = external.iter().find(|(_, m)| *m != n) {
            return Err(Error::Topology(format!(
                "{first} has {n} partitions and {other} has {m}, but they are joined: \
                 joined topics must be co-partitioned (the same number of partitions)"
            )));
        }
        for topic in group {
            if let TopicRef::Repartition(_) = topic {
                forced.insert(topic, n);
            }
        }
    }
    Ok(forced)
}

/// Resolves partition counts: source topics must exist; a sub-topology has as many tasks as its
/// widest source; a repartition topic has the partitions it was given, else as many as the
/// sub-topology writing it;
/// changelogs as many as their sub-topology. Creates internal topics and missing sink topics.
pub(crate) fn resolve_topics(
    topology: &Topology,
    app_id: &str,
    backend: &dyn Backend,
) -> Result<(TopicTable, Vec<SubtopologyInfo>)> {
    let subs = &topology.subtopologies;
    let mut forced = copartition(topology, backend)?;
    // A repartition topic given its own count (`Repartitioned::with_number_of_partitions`)
    // has it, and so has the sub-topology reading it.
    for (topic, n) in &topology.partition_counts {
        match forced.insert(topic.clone(), *n) {
            Some(m) if m != *n => {
                return Err(Error::Topology(format!(
                    "repartition topic {topic} is given {n} partitions, but what it is joined \
                     with has {m}: joined topics must be co-partitioned"
                )));
            }
            _ => {}
        }
    }
    let mut counts: Vec<Option<u32>> = vec![None; subs.len()];
    let writer_of = |topic: &TopicRef| subs.iter().position(|s| s.sink_topics.contains(topic));
    for _ in 0..=subs.len() {
        for (i, sub) in subs.iter().enumerate() {
            if counts[i].is_some() {
                continue;
            }
            let mut max = Some(0u32);
            for topic in &sub.source_topics {
                let n = match topic {
                    TopicRef::External(name) => match backend.partitions(name)? {
                        Some(n) => Some(n),
                        None => {
                            return Err(Error::MissingSourceTopic {
                                topic: name.clone(),
                            });
                        }
                    },
                    TopicRef::Repartition(_) => match forced.get(topic) {
                        Some(&n) => Some(n),
                        None => writer_of(topic).and_then(|w| counts[w]),
                    },
                };
                max = match (max, n) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
            counts[i] = max;
        }
    }
    let mut table = TopicTable::default();
    let mut infos = Vec::new();
    for (i, sub) in subs.iter().enumerate() {
        let n = counts[i].filter(|&n| n > 0).ok_or_else(|| {
            Error::Topology(format!(
                "cannot resolve the partition count of sub-topology {}",
                sub.id
            ))
        })?;
        for topic in &sub.source_topics {
            let name = topic.resolve(app_id);
            if let TopicRef::Repartition(_) = topic {
                backend.create_topic(&name, n, TopicKind::Repartition)?;
            }
            let partitions = backend.partitions(&name)?.unwrap_or(n);
            table.insert(&name, partitions);
        }
        for topic in &sub.sink_topics {
            let name = topic.resolve(app_id);
            let partitions = match backend.partitions(&name)? {
                Some(p) => p,
                None => {
                    let kind = match topic {
                        TopicRef::Repartition(_) => TopicKind::Repartition,
                        TopicRef::External(_) => TopicKind::User,
                    };
                    let p = match topic {
                        TopicRef::Repartition(_) => writer_of(topic)
                            .and_then(|_| subs.iter().position(|s| s.source_topics.contains(topic)))
                            .and_then(|reader| counts[reader])
                            .unwrap_or(n),
                        TopicRef::External(_) => n,
                    };
                    tracing::info!(topic = %name, partitions = p, "creating topic");
                    backend.create_topic(&name, p, kind)?;
                    p
                }
            };
            table.insert(&name, partitions);
        }
        for &s in &sub.stores {
            let store = &topology.stores[s];
            if store.logged && store.source_topic.is_none() {
                let name = changelog_topic(app_id, &store.name);
                let kind = match store.kind.retention_ms() {
                    Some(retention_ms) => TopicKind::WindowedChangelog { retention_ms },
                    None => TopicKind::Changelog,
                };
                backend.create_topic(&name, n, kind)?;
                table.insert(&name, n);
            }
        }
        let names = |f: fn(&TopicRef) -> bool, topics: &[TopicRef]| -> Vec<String> {
            topics
                .iter()
                .filter(|t| f(t))
                .map(|t| t.resolve(app_id))
                .collect()
        };
        let external = |t: &TopicRef| matches!(t, TopicRef::External(_));
        let repartition = |t: &TopicRef| matches!(t, TopicRef::Repartition(_));
        infos.push(SubtopologyInfo {
            id: sub.id,
            source_topics: names(external, &sub.source_topics),
            repartition_source_topics: names(repartition, &sub.source_topics),
            repartition_sink_topics: names(repartition, &sub.sink_topics),
            changelog_topics: sub
                .stores
                .iter()
                .filter(|&&s| topology.stores[s].has_changelog_topic())
                .map(|&s| changelog_topic(app_id, &topology.stores[s].name))
                .collect(),
            windowed_changelog_retention_ms: sub
                .stores
                .iter()
                .filter(|&&s| topology.stores[s].has_changelog_topic())
                .filter_map(|&s| {
                    let store = &topology.stores[s];
                    let retention = store.kind.retention_ms()?;
                    Some((changelog_topic(app_id, &store.name), retention))
                })
                .collect(),
            partitions: n,
        });
    }
    Ok((table, infos))
}

/// Opens the database of every persistent store in `<app dir>/stores/` if the topology has any
/// persistent store, and deletes the stores of tasks whose directory is gone (deleted by hand,
/// or by a cleanup that stopped between the two).
fn open_store_database(
    topology: &Topology,
    config: &StreamsConfig,
    state_dir: &StateDirectory,
) -> Result<Option<Arc<StoreDatabase>>> {
    if !topology.stores.iter().any(|s| s.persistent)
        && !topology.globals.iter().any(|g| g.persistent)
    {
        return Ok(None);
    }
    let db = StoreDatabase::open(&state_dir.app_dir().join("stores"), config.memory_budget())?;
    let dirs: std::collections::HashSet<_> = state_dir.list_task_dirs()?.into_iter().collect();
    for task in db.tasks() {
        if !dirs.contains(&task) {
            tracing::info!(%task, "deleting the stores of a task whose directory is gone");
            db.delete_task(task)?;
        }
    }
    Ok(Some(db))
}
