//! The append notification: the append counter ([`Log::append_version`]), which partitions
//! were appended to since a version ([`Log::appended_since`]), and waiting for the next
//! append ([`Log::wait_for_append`]), woken by appends of this process at once and by those
//! of other processes through the change file (log/src/changes.rs, log/src/wakeup.rs).
//!
//! A waiter must never touch a partition or the topic map: an idle consumer costs only the
//! append counter's mutex (and, on a file-backed log, a look at the change file).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::Log;
use riffle_record::TopicPartition;

/// How often a consumer waiting in [`Log::wait_for_append`] looks at the change file for
/// appends of other processes when inotify cannot watch it (appends of its own process wake
/// it at once; with inotify, so do other processes'): first after
/// [`CHANGE_POLL_MIN`], then twice as long each time nothing changed, up to [`CHANGE_POLL_MAX`]
/// — so a waiter sees a busy producer within about a millisecond and an idle one costs a few
/// hundred `fstat`s a second.
const CHANGE_POLL_MIN: Duration = Duration::from_millis(1);
const CHANGE_POLL_MAX: Duration = Duration::from_millis(5);

/// Counts a thread in [`Log::wait_for_append`] while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(waiters: &'a AtomicUsize) -> Self {
        waiters.fetch_add(1, Ordering::SeqCst);
        Waiting(waiters)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many appended partitions [`Log::appended_since`] remembers; a reader further behind is
/// told to look at every partition.
const APPEND_JOURNAL_LEN: usize = 4_096;

/// The append counter and the partitions of the latest appends, newest last.
#[derive(Debug, Default)]
pub(super) struct AppendJournal {
    version: u64,
    /// Bumped by [`Log::wake_waiters`]: ends every wait without claiming new data.
    wakeups: u64,
    /// Bumped by the change watcher when another process may have appended.
    external: u64,
    /// `(version after the append, partition)`; at most [`APPEND_JOURNAL_LEN`] entries.
    recent: std::collections::VecDeque<(u64, TopicPartition)>,
}

impl AppendJournal {
    /// Moves by anything that may end a wait.
    fn moves(&self) -> (u64, u64, u64) {
        (self.version, self.external, self.wakeups)
    }

    fn record(&mut self, tp: &TopicPartition) {
        self.version += 1;
        if self.recent.len() == APPEND_JOURNAL_LEN {
            self.recent.pop_front();
        }
        self.recent.push_back((self.version, tp.clone()));
    }
}

impl Log {
    /// Bumps the append counter once per partition appended to, remembers which, and wakes
    /// waiting consumers.
    pub(crate) fn notify_append<'a>(&self, appended: impl IntoIterator<Item = &'a TopicPartition>) {
        let mut journal = self
            .shared
            .appends
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &self.shared.changes {
            Some(changes) => {
                let appended: Vec<&TopicPartition> = appended.into_iter().collect();
                changes.record(appended.iter().copied());
                journal.version += appended.len() as u64;
            }
            None => {
                for tp in appended {
                    journal.record(tp);
                }
            }
        }
        // Waiters register under the same mutex before they wait, so none is missed.
        if self.shared.waiters.load(Ordering::Relaxed) > 0 {
            self.shared.appended.notify_all();
        }
    }

    /// A counter bumped by every append to this log (all partitions, by any process sharing
    /// the directory), so an idle consumer can tell "nothing new" without touching a partition.
    pub fn append_version(&self) -> u64 {
        match &self.shared.changes {
            Some(changes) => changes.version(),
            None => {
                self.shared
                    .appends
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .version
            }
        }
    }

    /// Pushes onto `out` the partitions appended to after [`append_version`](Self::append_version)
    /// was `seen` (a partition may appear more than once), and returns the current version —
    /// or `None`, pushing nothing, when `seen` is too far behind for the log to remember them
    /// all (or names a topic this log cannot resolve): the caller then looks at every partition
    /// it reads. Appends of other processes sharing the directory are included (from the change
    /// file). Costs O(appends since `seen`), nothing when nothing was appended.
    pub fn appended_since(&self, seen: u64, out: &mut Vec<TopicPartition>) -> Option<u64> {
        if let Some(changes) = &self.shared.changes {
            let (now, records) = changes.since(seen, APPEND_JOURNAL_LEN as u64);
            let records = records?;
            if records.is_empty() {
                return Some(now);
            }
            let mut found = Vec::with_capacity(records.len());
            let resolve = |found: &mut Vec<TopicPartition>| -> Option<()> {
                let topics = self.shared.topics.read().ok()?;
                for &(hash, partition) in &records {
                    let names = topics.by_hash.get(&hash)?;
                    for name in names {
                        found.push(TopicPartition::new(Arc::clone(name), partition));
                    }
                }
                Some(())
            };
            if resolve(&mut found).is_none() {
                // A topic created since this log loaded its topics: load them and try again.
                self.refresh_topics().ok()?;
                found.clear();
                resolve(&mut found)?;
            }
            out.extend(found);
            return Some(now);
        }
        let journal = self
            .shared
            .appends
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if seen >= journal.version {
            return Some(journal.version);
        }
        // Entries have consecutive versions, so the oldest one tells whether `seen + 1` is kept.
        let oldest = journal.recent.front().map_or(u64::MAX, |&(v, _)| v);
        if oldest > seen + 1 {
            return None;
        }
        let skip = usize::try_from(seen + 1 - oldest).unwrap_or(usize::MAX);
        out.extend(journal.recent.iter().skip(skip).map(|(_, tp)| tp.clone()));
        Some(journal.version)
    }

    /// Ends every [`wait_for_append`](Self::wait_for_append) under way in this process now,
    /// without moving [`append_version`](Self::append_version): for a waiter that has something
    /// else to look at (its group changed, it was asked to stop).
    pub fn wake_waiters(&self) {
        self.appends().wakeups += 1;
        self.shared.appended.notify_all();
    }

    fn appends(&self) -> MutexGuard<'_, AppendJournal> {
        self.shared
            .appends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The number of [`wake_waiters`](Self::wake_waiters) calls so far in this process. A
    /// consumer that looks at something a wake-up signals (a stop flag, its group) reads it
    /// first and hands it to [`wait_for_append_or_wake`](Self::wait_for_append_or_wake), so a
    /// wake-up between its look and its wait ends the wait instead of being lost.
    pub fn wake_count(&self) -> u64 {
        self.appends().wakeups
    }

    /// Blocks until [`append_version`](Self::append_version) differs from `seen`, `timeout`
    /// elapses or [`wake_waiters`](Self::wake_waiters) is called; returns the current version.
    /// An append of this process wakes the waiter at once; one of another process as soon as
    /// the change watcher sees the change file written (inotify, in a thread that sleeps in
    /// the kernel: log/src/wakeup.rs) — or, where inotify cannot start, within 1…5 ms
    /// (`CHANGE_POLL_MIN`…`CHANGE_POLL_MAX`, a backoff of `fstat`s).
    /// Nothing wakes a waiter when nothing is appended.
    ///
    /// Only wake-ups during the call end it; [`wait_for_append_or_wake`](Self::wait_for_append_or_wake)
    /// also counts those since a [`wake_count`](Self::wake_count) read before.
    pub fn wait_for_append(&self, seen: u64, timeout: Duration) -> u64 {
        self.wait_for_append_or_wake(seen, self.wake_count(), timeout)
    }

    /// As [`wait_for_append`](Self::wait_for_append), and returns at once if
    /// [`wake_count`](Self::wake_count) is no longer `woken`: a wake-up since the caller read
    /// it is not lost.
    pub fn wait_for_append_or_wake(&self, seen: u64, woken: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now().checked_add(timeout);
        let left = || match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => Duration::from_secs(3600),
        };
        let _waiting = Waiting::new(&self.shared.waiters);
        let Some(changes) = &self.shared.changes else {
            let mut journal = self.appends();
            while journal.version == seen && journal.wakeups == woken {
                let left = left();
                if left.is_zero() {
                    break;
                }
                journal = match self.shared.appended.wait_timeout(journal, left) {
                    Ok((j, _)) => j,
                    Err(poisoned) => poisoned.into_inner().0,
                };
            }
            return journal.version;
        };
        let watched = self.watch_changes();
        let mut interval = CHANGE_POLL_MIN;
        loop {
            // What the local journal looked like before reading the change file: any move
            // after this (an append here, a write the watcher saw, a wake-up) ends the wait.
            let before = self.appends().moves();
            let now = changes.version();
            let left = left();
            if now != seen || left.is_zero() {
                return now;
            }
            let local = self.appends();
            if local.wakeups != woken {
                return now;
            }
            if local.moves() == before {
                if watched {
                    // The watcher or an append of this process notifies.
                    let _ = self.shared.appended.wait_timeout(local, left);
                } else {
                    let _ = self.shared.appended.wait_timeout(local, left.min(interval));
                    interval = (interval * 2).min(CHANGE_POLL_MAX);
                }
            }
        }
    }

    /// Starts, once per log, the thread that wakes waiters when another process writes the
    /// change file; whether it runs.
    fn watch_changes(&self) -> bool {
        *self.shared.watcher.get_or_init(|| {
            let Some(dir) = self.shared.dir.as_deref() else {
                return false;
            };
            let shared = Arc::downgrade(&self.shared);
            let started = crate::wakeup::spawn_watcher(dir, crate::changes::FILE_NAME, move |changed| {
                let Some(shared) = shared.upgrade() else {
                    return false; // the log was dropped
                };
                if changed {
                    shared
                        .appends
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .external += 1;
                    shared.appended.notify_all();
                }
                true
            });
            match started {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the change file (inotify); a waiter looks at it every millisecond instead");
                    false
                }
            }
        })
    }
}
