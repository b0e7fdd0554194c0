//! A stream thread answers the interactive queries waiting in its slot of the query inbox
//! (runtime/src/app/query.rs puts them there), from its running tasks' stores, in its loop.

use riffle_state_dir::TaskId;
use riffle_task_manager::TaskKind;

use crate::engine::query::{QueryAnswer, QueryOp};
use crate::engine::thread::StreamThread;
use crate::types::error::Result;

impl StreamThread {
    /// Answers the interactive queries waiting for this thread from its running tasks' stores
    /// (`query.rs`).
    pub(super) fn answer_queries(&mut self) {
        let queries = self.queries.drain(self.index);
        for query in queries {
            let answer = self.answer_query(&query.store, &query.op);
            // The asker may have given up.
            let _ = query.reply.send(answer);
        }
    }

    fn answer_query(&self, store: &str, op: &QueryOp) -> Result<QueryAnswer> {
        let topology = &self.wiring.topology;
        let holds = |id: &TaskId| {
            topology
                .subtopologies
                .get(id.subtopology as usize)
                .is_some_and(|sub| sub.stores.iter().any(|&s| topology.stores[s].name == store))
        };
        let mut answer = QueryAnswer {
            restoring: self.restoring.keys().filter(|id| holds(id)).count()
                + self
                    .waiting
                    .iter()
                    .filter(|(id, kind)| **kind == TaskKind::Active && holds(id))
                    .count(),
            ..QueryAnswer::default()
        };
        let mut value = Vec::new();
        for task in self.tasks.values() {
            let Some(i) = task
                .store_metrics
                .iter()
                .position(|(name, _)| name == store)
            else {
                continue;
            };
            let Some(cached) = task.stores.stores.get(i) else {
                continue;
            };
            match op {
                QueryOp::Get(key) => {
                    if cached.get_with_timestamp(key, &mut value)?.is_some() {
                        answer.entries.push((key.clone(), value.clone()));
                    }
                }
                QueryOp::Range(from, to) => {
                    answer
                        .entries
                        .extend(cached.scan(from.as_deref(), to.as_deref())?);
                }
                QueryOp::Count => answer.count += cached.approximate_len() as u64,
                QueryOp::Segmented { lo, hi, from, to } => answer.entries.extend(
                    cached
                        .scan_window(lo, hi, *from, *to)?
                        .into_iter()
                        .map(|(entry, value, _)| (entry, value)),
                ),
            }
        }
        Ok(answer)
    }
}
