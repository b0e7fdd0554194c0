//! The windowed aggregations behind [`crate::TimeWindowedKStream`] and
//! [`crate::SessionWindowedKStream`]: time (tumbling and hopping), sliding and session windows,
//! each over a segmented window or session store (`store/window.rs`), with Kafka Streams' rules
//! for which records a window takes and when it closes. What they share (their store, stream
//! time, emit-on-close and commit) is their [`WindowedCore`] (`windowed_core.rs`).

use std::collections::HashSet;

use crate::dsl::window::windowed_core::{FoldFn, MergeFn, WindowedCore};
use crate::processor::Lifecycle;
use crate::processor::node::{FlushNode, Node, ProcessingContext};
use crate::state::{key_bounds, session_entry_key, window_entry_key};
use crate::types::error::{Error, Result};
use crate::types::window::{SessionWindows, SlidingWindows, TimeWindows, Window};

/// A windowed aggregation's commit (`flush`) and start (`init`) are its core's.
macro_rules! core_delegates {
    ($node:ident) => {
        impl<K: Clone + 'static, V, A: Clone + 'static> FlushNode for $node<K, V, A> {
            fn flush(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
                self.core.flush(ctx)
            }
        }

        impl<K: Clone + 'static, V, A: Clone + 'static> Lifecycle for $node<K, V, A> {
            fn init(&mut self, ctx: &mut ProcessingContext<'_>) -> Result<()> {
                self.core.load(ctx)
            }
            fn close(&mut self) {}
        }
    };
}

/// Count, reduce and aggregate over tumbling and hopping windows (Kafka's
/// `KStreamWindowAggregate`).
pub(crate) struct TimeWindowAggregate<K, V, A> {
    pub(crate) core: WindowedCore<K, A>,
    pub(crate) windows: TimeWindows,
    pub(crate) fold: FoldFn<K, V, A>,
}

impl<K: Clone + 'static, V: Clone, A: Clone + 'static> Node<K, V> for TimeWindowAggregate<K, V, A> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let timestamp = ctx.timestamp;
        self.core.observe(timestamp);
        let close = self.core.observed - self.windows.grace_ms;
        self.core.serialize_key(ctx, &key)?;
        let mut entry = std::mem::take(&mut self.core.entry);
        let mut value = Some(value);
        let mut starts = self.windows.window_starts(timestamp).peekable();
        while let Some(start) = starts.next() {
            let end = start.saturating_add(self.windows.size_ms);
            if end <= close {
                self.core.dropped(ctx, Window::new(start, end));
                continue;
            }
            entry.clear();
            window_entry_key(&ctx.scratch.key, start, 0, &mut entry);
            let found = self.core.read(ctx, &entry)?;
            let is_new = found.is_none();
            let (old, ts) = match found {
                Some((old, ts)) => (Some(old), ts.max(timestamp)),
                None => (None, timestamp),
            };
            let v = if starts.peek().is_some() {
                value.clone()
            } else {
                value.take()
            };
            let Some(v) = v else { break };
            let new = (self.fold)(&key, v, old);
            let window = Window::new(start, end);
            if let Err(e) = self
                .core
                .write(ctx, &key, &entry, window, Some(&new), ts, is_new)
            {
                self.core.entry = entry;
                return Err(e);
            }
        }
        self.core.entry = entry;
        self.core.emit_closed(ctx)
    }
}

core_delegates!(TimeWindowAggregate);

/// Count, reduce and aggregate over sliding windows (Kafka's `KStreamSlidingWindowAggregate`,
/// KIP-450): a record updates every window of its key that holds it, creates the window that
/// ends at it, and the windows that start just after it and just after the record before it
/// when another record falls in them. Records earlier than the time difference share one
/// window, `[0, difference]`.
pub(crate) struct SlidingWindowAggregate<K, V, A> {
    pub(crate) core: WindowedCore<K, A>,
    pub(crate) windows: SlidingWindows,
    pub(crate) fold: FoldFn<K, V, A>,
}

/// A window found for a sliding-window record: its start, aggregate and timestamp.
type Found<A> = (i64, A, i64);

impl<K: Clone + 'static, V: Clone, A: Clone + 'static> SlidingWindowAggregate<K, V, A> {
    fn entry(&mut self, ctx: &ProcessingContext<'_>, start: i64) -> Vec<u8> {
        let mut entry = std::mem::take(&mut self.core.entry);
        entry.clear();
        window_entry_key(&ctx.scratch.key, start, 0, &mut entry);
        entry
    }

    /// The key's windows with starts in `[from, to]`, ascending.
    fn fetch(&self, ctx: &mut ProcessingContext<'_>, from: i64, to: i64) -> Result<Vec<Found<A>>> {
        let (lo, hi) = key_bounds(&ctx.scratch.key);
        let from = from.max(self.core.oldest_readable());
        let entries = ctx.stores[self.core.store].scan_window(&lo, &hi, from, to)?;
        let mut found = Vec::with_capacity(entries.len());
        for (entry, value, ts) in entries {
            let decoded = ctx.stores[self.core.store].decode_entry(&entry)?;
            let agg = self
                .core
                .agg_serde
                .deserialize(Some(&value))
                .map_err(|e| self.core.corrupt(ctx, e))?;
            found.push((decoded.time, agg, ts));
        }
        Ok(found)
    }

    /// Kafka's `updateWindowAndForward`: folds the record into the window at `start` holding
    /// `agg` (its timestamp `agg_ts`) if the window is still open.
    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: &K,
        value: &V,
        start: i64,
        agg: Option<A>,
        agg_ts: i64,
        is_new: bool,
        close: i64,
    ) -> Result<()> {
        let end = start.saturating_add(self.windows.difference_ms);
        if end < close {
            self.core.dropped(ctx, Window::new(start, end));
            return Ok(());
        }
        let new = (self.fold)(key, value.clone(), agg);
        let ts = ctx.timestamp.max(agg_ts);
        let entry = self.entry(ctx, start);
        let window = Window::new(start, end);
        let written = self
            .core
            .write(ctx, key, &entry, window, Some(&new), ts, is_new);
        self.core.entry = entry;
        written
    }

    /// Stores `agg` as the window at `start` as it is (a new right window copying the
    /// aggregate of the records after the current one).
    fn put_copy(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: &K,
        start: i64,
        agg: &A,
        ts: i64,
    ) -> Result<()> {
        let end = start.saturating_add(self.windows.difference_ms);
        let entry = self.entry(ctx, start);
        let window = Window::new(start, end);
        let written = self
            .core
            .write(ctx, key, &entry, window, Some(agg), ts, true);
        self.core.entry = entry;
        written
    }

    fn process_in_order(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: &K,
        value: &V,
        close: i64,
    ) -> Result<()> {
        let ts = ctx.timestamp;
        let diff = self.windows.difference_ms;
        let mut starts = HashSet::new();
        let mut left_agg: Option<(A, i64)> = None;
        let mut right_agg: Option<(A, i64)> = None;
        let (mut left_created, mut right_created) = (false, false);
        let mut previous: Option<i64> = None;
        for (start, agg, agg_ts) in self.fetch(ctx, (ts - 2 * diff).max(0), ts + 1)? {
            starts.insert(start);
            let end = start + diff;
            if end < ts {
                left_agg = Some((agg, agg_ts));
                previous = Some(agg_ts);
            } else if end == ts {
                left_created = true;
                if agg_ts < ts {
                    previous = Some(agg_ts);
                }
                self.update(ctx, key, value, start, Some(agg), agg_ts, false, close)?;
            } else if start <= ts {
                right_agg = Some((agg.clone(), agg_ts));
                self.update(ctx, key, value, start, Some(agg), agg_ts, false, close)?;
            } else if start == ts + 1 {
                right_created = true;
            } else {
                return Err(self.unexpected(start, ts));
            }
        }
        // The previous record's right window, if the current record falls in it.
        if let Some(p) = previous {
            let start = p + 1;
            if !starts.contains(&start) && start + diff >= ts {
                self.update(ctx, key, value, start, None, ts, true, close)?;
            }
        }
        // The current record's left window.
        if !left_created {
            let agg = match (previous, left_agg) {
                (Some(p), Some((agg, _))) if ts - diff <= p => Some(agg),
                _ => None,
            };
            self.update(ctx, key, value, ts - diff, agg, ts, true, close)?;
        }
        // The current record's right window, if a later record falls in it.
        if !right_created
            && let Some((agg, agg_ts)) = right_agg
            && agg_ts > ts
        {
            self.put_copy(ctx, key, ts + 1, &agg, agg_ts)?;
        }
        Ok(())
    }

    /// A record before the time difference: the windows that would start before 0 are the one
    /// window `[0, difference]`.
    fn process_early(
        &mut self,
        ctx: &mut ProcessingContext<'_>,
        key: &K,
        value: &V,
        close: i64,
    ) -> Result<()> {
        let ts = ctx.timestamp;
        let mut starts = HashSet::new();
        let mut combined: Option<(A, i64)> = None;
        let mut right_agg: Option<(A, i64)> = None;
        let mut right_created = false;
        let mut previous: Option<i64> = None;
        for (start, agg, agg_ts) in self.fetch(ctx, 0, ts + 1)? {
            starts.insert(start);
            if start == 0 {
                if agg_ts < ts {
                    previous = Some(agg_ts);
                }
                combined = Some((agg, agg_ts));
            } else if start <= ts {
                right_agg = Some((agg.clone(), agg_ts));
                self.update(ctx, key, value, start, Some(agg), agg_ts, false, close)?;
            } else if start == ts + 1 {
                right_created = true;
            } else {
                return Err(self.unexpected(start, ts));
            }
        }
        if right_agg.is_none()
            && let Some((agg, agg_ts)) = &combined
            && *agg_ts > ts
        {
            right_agg = Some((agg.clone(), *agg_ts));
        }
        if !right_created
            && let Some((agg, agg_ts)) = &right_agg
            && *agg_ts > ts
        {
            let (agg, agg_ts) = (agg.clone(), *agg_ts);
            self.put_copy(ctx, key, ts + 1, &agg, agg_ts)?;
        }
        if let Some(p) = previous
            && !starts.contains(&(p + 1))
        {
            self.update(ctx, key, value, p + 1, None, ts, true, close)?;
        }
        match combined {
            None => self.update(ctx, key, value, 0, None, ts, true, close),
            Some((agg, agg_ts)) => self.update(ctx, key, value, 0, Some(agg), agg_ts, false, close),
        }
    }

    fn unexpected(&self, start: i64, ts: i64) -> Error {
        Error::IllegalState(format!(
            "a sliding-window store holds a window starting at {start}, which a record at {ts} cannot have next to it"
        ))
    }
}

impl<K: Clone + 'static, V: Clone, A: Clone + 'static> Node<K, V>
    for SlidingWindowAggregate<K, V, A>
{
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let ts = ctx.timestamp;
        self.core.observe(ts);
        let close = self.core.observed - self.windows.grace_ms;
        let diff = self.windows.difference_ms;
        if ts.saturating_add(diff) < close {
            self.core
                .dropped(ctx, Window::new(ts, ts.saturating_add(diff)));
            return self.core.emit_closed(ctx);
        }
        self.core.serialize_key(ctx, &key)?;
        if ts < diff {
            self.process_early(ctx, &key, &value, close)?;
        } else {
            self.process_in_order(ctx, &key, &value, close)?;
        }
        self.core.emit_closed(ctx)
    }
}

core_delegates!(SlidingWindowAggregate);

/// Count, reduce and aggregate over session windows (Kafka's `KStreamSessionWindowAggregate`):
/// a record joins every session of its key within the inactivity gap of it, merging them into
/// one; the merged-away sessions are deleted (tombstones downstream).
pub(crate) struct SessionWindowAggregate<K, V, A> {
    pub(crate) core: WindowedCore<K, A>,
    pub(crate) windows: SessionWindows,
    pub(crate) fold: FoldFn<K, V, A>,
    pub(crate) merge: MergeFn<K, A>,
}

impl<K: Clone + 'static, V, A: Clone + 'static> Node<K, V> for SessionWindowAggregate<K, V, A> {
    fn process(&mut self, ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let ts = ctx.timestamp;
        self.core.observe(ts);
        let gap = self.windows.gap_ms;
        let close = self.core.observed - self.windows.grace_ms - gap;
        self.core.serialize_key(ctx, &key)?;
        // The sessions within the gap: ending at or after ts - gap, starting at or before
        // ts + gap.
        let (lo, hi) = key_bounds(&ctx.scratch.key);
        let from = ts.saturating_sub(gap).max(self.core.oldest_readable());
        let found = ctx.stores[self.core.store].scan_window(&lo, &hi, from, i64::MAX)?;
        let mut merged = Window::new(ts, ts);
        let mut agg: Option<A> = None;
        let mut sessions = Vec::new();
        for (entry, bytes, _) in found {
            let decoded = ctx.stores[self.core.store].decode_entry(&entry)?;
            let (start, end) = (decoded.second, decoded.time);
            // A closed session is final: no record joins it any more (Kafka would merge one its
            // store still holds, which depends on when segments were dropped).
            if start > ts.saturating_add(gap)
                || self.core.kind.close_time(end) <= self.core.observed
            {
                continue;
            }
            let value = self
                .core
                .agg_serde
                .deserialize(Some(&bytes))
                .map_err(|e| self.core.corrupt(ctx, e))?;
            agg = Some((self.merge)(&key, agg, value));
            merged = Window::new(merged.start.min(start), merged.end.max(end));
            sessions.push((entry, Window::new(start, end)));
        }
        if merged.end < close {
            self.core.dropped(ctx, merged);
            return self.core.emit_closed(ctx);
        }
        if merged != Window::new(ts, ts) {
            for (old, window) in &sessions {
                self.core
                    .write(ctx, &key, old, *window, None, window.end, false)?;
            }
        }
        let new = (self.fold)(&key, value, agg);
        let mut entry = std::mem::take(&mut self.core.entry);
        entry.clear();
        session_entry_key(&ctx.scratch.key, merged.end, merged.start, &mut entry);
        let is_new = merged != Window::new(ts, ts) || sessions.is_empty();
        let written = self
            .core
            .write(ctx, &key, &entry, merged, Some(&new), merged.end, is_new);
        self.core.entry = entry;
        written?;
        self.core.emit_closed(ctx)
    }
}

core_delegates!(SessionWindowAggregate);
