//! Kafka Streams' topology optimizations (`topology.optimization`), applied to the graph when
//! `StreamsBuilder::build_with` finishes it, as `InternalStreamsBuilder.optimizeTopology` applies
//! them to Kafka's graph before writing the topology:
//!
//! - [`reuse_ktable_source_topics`]: a source table's store takes its topic as its changelog;
//! - [`merge_repartition_topics`]: the optimizable repartition topics (groupings', joins',
//!   `to_table`'s) below one key-changing operation become one, written right after it and
//!   named `<first topic>-filter`, `-sink` and `-source`; the nodes between the operation and
//!   each replaced topic move below the merged topic's source.
//!
//! Kafka's `single.store.self.join` is accepted and not applied (docs/porting.md).

use std::collections::HashMap;

use super::graph::{GraphBuilder, RepartitionDef, Shape};

/// Gives each table `StreamsBuilder::table` read its changelog: its source topic when `reuse`
/// (Kafka's `reuse.ktable.source.topics`: always logged, restored from the topic), else a topic
/// of its own if its `Materialized` logs it.
pub(super) fn reuse_ktable_source_topics(g: &mut GraphBuilder, reuse: bool) {
    for table in &g.table_sources {
        let store = &mut g.stores[table.store];
        if reuse {
            store.source_topic = Some(table.topic.clone());
            store.logged = true;
        } else {
            store.source_topic = None;
            store.logged = table.logging;
        }
    }
}

/// The node Kafka's graph has above `node`: a repartition topic's source stands for the whole
/// repartition (Kafka's one graph node), whose parent is the node writing the topic.
fn graph_parents(g: &GraphBuilder, node: usize) -> Vec<usize> {
    match g.repartitions.iter().find(|r| r.source == node) {
        Some(r) => vec![r.writer],
        None => g.nodes[node].parents.clone(),
    }
}

/// Kafka's `InternalStreamsBuilder.findParentNodeMatching`: `start` if it matches, else the
/// first of its parents that matches, else what the search from its last parent finds (Kafka's
/// loop keeps the last parent's answer).
fn find_matching(g: &GraphBuilder, start: usize, matches: &dyn Fn(usize) -> bool) -> Option<usize> {
    if matches(start) {
        return Some(start);
    }
    let mut found = None;
    for parent in graph_parents(g, start) {
        if matches(parent) {
            return Some(parent);
        }
        found = find_matching(g, parent, matches);
    }
    found
}

/// The key-changing operation a repartition (its source `source`) is for: the nearest
/// key- or value-changing node above it, if that one changes keys (Kafka's
/// `getKeyChangingParentNode`: a value change between them leaves the repartition alone).
fn key_changing_parent(g: &GraphBuilder, source: usize) -> Option<usize> {
    let shape = |n: usize| g.nodes[n].shape;
    let changing = |n: usize| matches!(shape(n), Shape::KeyChanging | Shape::ValueChanging);
    let nearest = find_matching(g, source, &changing)?;
    let key_changing = find_matching(g, source, &|n| shape(n) == Shape::KeyChanging)?;
    (nearest == key_changing).then_some(nearest)
}

/// Kafka's `merge.repartition.topics`: for each key-changing operation (or merge of such, as
/// Kafka's `maybeUpdateKeyChangingRepartitionNodeMap` groups them) with optimizable repartition
/// topics below it, one repartition topic, named after the first, replaces them all; the
/// nodes are renumbered so parents still come before children and sub-topologies are numbered
/// as Kafka numbers them (the merged topic's nodes right after the operation).
pub(super) fn merge_repartition_topics(g: &mut GraphBuilder) {
    // Each key-changing node, in the order they were added, with its repartitions (their
    // index in `g.repartitions`).
    let mut owners: Vec<(usize, Vec<usize>)> = (0..g.nodes.len())
        .filter(|&n| g.nodes[n].shape == Shape::KeyChanging)
        .map(|n| (n, Vec::new()))
        .collect();
    for (i, r) in g.repartitions.iter().enumerate() {
        if r.maker.is_none() {
            continue;
        }
        if let Some(owner) = key_changing_parent(g, r.source)
            && let Some((_, list)) = owners.iter_mut().find(|(k, _)| *k == owner)
        {
            list.push(i);
        }
    }
    group_by_merges(g, &mut owners);
    let mut inserted: HashMap<usize, [usize; 3]> = HashMap::new();
    let mut deleted = vec![false; g.nodes.len()];
    let mut merged: Vec<RepartitionDef> = Vec::new();
    for (owner, list) in owners {
        if list.is_empty() {
            continue;
        }
        // A processor between the operation and a topic may change the types (Kafka merges
        // regardless and breaks); such a set is left as it is.
        let out = g.nodes[owner].output;
        if list
            .iter()
            .any(|&i| g.nodes[g.repartitions[i].source].output != out)
        {
            continue;
        }
        let first = g.repartitions[list[0]].clone();
        let topic = first.topic.clone();
        let Some(maker) = first.maker.clone() else {
            continue;
        };
        // Kafka's `createRepartitionedSource` with the topic's name: three counter values, and
        // names from the topic (never generated ones).
        for prefix in ["KSTREAM-SINK", "KSTREAM-FILTER", "KSTREAM-SOURCE"] {
            g.next_name(prefix);
        }
        let names = ["filter", "sink", "source"].map(|n| format!("{topic}-{n}"));
        for name in &names {
            if g.nodes.iter().any(|node| node.name == *name) {
                g.errors.push(format!(
                    "a node named {name:?} already exists: merge.repartition.topics names the \
                     merged repartition topic's nodes so"
                ));
            }
        }
        let [filter, sink, source] = maker(g, owner, names, topic.clone());
        deleted.resize(g.nodes.len(), false);
        inserted.insert(owner, [filter, sink, source]);
        for &i in &list {
            let r = g.repartitions[i].clone();
            replace(g, owner, source, &r);
            for id in [r.filter, Some(r.sink), Some(r.source)]
                .into_iter()
                .flatten()
            {
                deleted[id] = true;
            }
        }
        merged.push(RepartitionDef {
            topic,
            writer: owner,
            filter: Some(filter),
            sink,
            source,
            maker: Some(maker),
        });
    }
    if inserted.is_empty() {
        return;
    }
    let original = deleted.len() - inserted.len() * 3;
    let mut order = Vec::with_capacity(g.nodes.len());
    for (id, &gone) in deleted.iter().enumerate().take(original) {
        if !gone {
            order.push(id);
        }
        if let Some(triple) = inserted.get(&id) {
            order.extend(triple);
        }
    }
    g.repartitions
        .retain(|r| r.filter.is_none_or(|f| !deleted[f]) && !deleted[r.source]);
    g.repartitions.extend(merged);
    renumber(g, &order);
}

/// Kafka's `maybeUpdateKeyChangingRepartitionNodeMap`: a `KStream::merge` below key-changing
/// operations whose repartitions all lie below it takes their repartitions as its own (the
/// merged topic then goes right after the merge).
fn group_by_merges(g: &GraphBuilder, owners: &mut Vec<(usize, Vec<usize>)>) {
    let merges: Vec<usize> = (0..g.nodes.len())
        .filter(|&n| g.nodes[n].shape == Shape::Merge)
        .collect();
    let mut taken: Vec<usize> = Vec::new();
    let mut added: Vec<(usize, Vec<usize>)> = Vec::new();
    for merge in merges {
        let mut list = Vec::new();
        for (owner, repartitions) in owners.iter() {
            let below = repartitions.iter().all(|&i| {
                let source = g.repartitions[i].source;
                find_matching(g, source, &|n| graph_parents(g, n).contains(&merge)).is_some()
            });
            let above = find_matching(g, merge, &|n| graph_parents(g, n).contains(owner));
            if below && above.is_some() {
                list.extend(repartitions.iter().copied());
                taken.push(*owner);
            }
        }
        added.push((merge, list));
    }
    owners.retain(|(owner, _)| !taken.contains(owner));
    owners.extend(added);
}

/// Replaces the repartition `r` below `owner` with the merged one whose source is `source`:
/// the node below `owner` on the way to `r` moves below `source`, and what read `r`'s source
/// reads what was above `r` (Kafka's `mergeRepartitionTopics`).
fn replace(g: &mut GraphBuilder, owner: usize, source: usize, r: &RepartitionDef) {
    let Some(filter) = r.filter else {
        return;
    };
    // The node whose parents include `owner`: `r` itself (its filter) or one between, which
    // an earlier topic of the same set may have moved already (Kafka fails on that case; the
    // node is below the merged topic either way).
    let child = find_matching(g, r.source, &|n| graph_parents(g, n).contains(&owner));
    if let Some(child) = child {
        let child = if child == r.source { filter } else { child };
        g.nodes[owner].children.retain(|&c| c != child);
        g.nodes[child].parents.retain(|&p| p != owner);
        g.nodes[child].parents.push(source);
        g.nodes[source].children.push(child);
    }
    // `r`'s readers now read from above `r`.
    let above = g.nodes[filter].parents[0];
    g.nodes[above].children.retain(|&c| c != filter);
    for reader in g.nodes[r.source].children.clone() {
        let parents = &mut g.nodes[reader].parents;
        for p in parents.iter_mut() {
            if *p == r.source {
                *p = above;
            }
        }
        if !g.nodes[above].children.contains(&reader) {
            g.nodes[above].children.push(reader);
        }
    }
    for pair in &mut g.copartitioned {
        for side in [&mut pair.0, &mut pair.1] {
            if *side == r.source {
                *side = source;
            }
        }
    }
}

/// Keeps the nodes `order` lists (old ids), in that order, with every reference to a node
/// renumbered.
fn renumber(g: &mut GraphBuilder, order: &[usize]) {
    let mut new_id = vec![usize::MAX; g.nodes.len()];
    for (new, &old) in order.iter().enumerate() {
        new_id[old] = new;
    }
    let mut old_nodes: Vec<Option<_>> =
        std::mem::take(&mut g.nodes).into_iter().map(Some).collect();
    for &old in order {
        let Some(mut node) = old_nodes[old].take() else {
            continue;
        };
        node.parents = node.parents.iter().map(|&p| new_id[p]).collect();
        node.children = node.children.iter().map(|&c| new_id[c]).collect();
        g.nodes.push(node);
    }
    for pair in &mut g.copartitioned {
        *pair = (new_id[pair.0], new_id[pair.1]);
    }
    for r in &mut g.repartitions {
        r.writer = new_id[r.writer];
        r.filter = r.filter.map(|f| new_id[f]);
        r.sink = new_id[r.sink];
        r.source = new_id[r.source];
    }
}
