//! Runs a [`StateUpdater`] on its own named thread.
//!
//! The stream thread sends tasks in with [`StateUpdaterThread::add`] and collects restored ones
//! with [`StateUpdaterThread::drain_events`] (non-blocking, no allocation when there is nothing).
//! If the thread dies, every later call returns [`Error::UpdaterStopped`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use riffle_state_dir::TaskId;
use tracing::warn;

use crate::error::{Error, Result};
use crate::live_offsets::LiveOffsets;
use crate::updater::{ChangelogReader, StateUpdater, UpdaterEvent, UpdaterTask};

enum Command {
    Add(UpdaterTask),
    Remove(TaskId, Sender<Option<UpdaterTask>>),
    Shutdown,
}

/// Settings of a [`StateUpdaterThread`].
#[derive(Clone, Debug)]
pub struct StateUpdaterConfig {
    /// The thread's name.
    pub thread_name: String,
    /// Records read per partition per tick.
    pub batch_size: usize,
    /// How long to wait for commands when no task made progress.
    pub idle_wait: Duration,
    /// Where to publish, after each tick, the records the restoring tasks have left
    /// ([`StateUpdater::remaining_records`]), for metrics.
    pub remaining_records: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl Default for StateUpdaterConfig {
    fn default() -> Self {
        Self {
            thread_name: "riffle-state-updater".to_owned(),
            batch_size: crate::updater::DEFAULT_RESTORE_BATCH,
            idle_wait: Duration::from_millis(10),
            remaining_records: None,
        }
    }
}

/// Handle to a running state updater thread; dropping it stops and joins the thread.
#[derive(Debug)]
pub struct StateUpdaterThread {
    commands: Sender<Command>,
    events: Receiver<UpdaterEvent>,
    stopped: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

/// Marks the updater stopped however the thread ends, panics included.
struct StopGuard(Arc<AtomicBool>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl StateUpdaterThread {
    /// Starts the thread; it reports positions to `live`.
    pub fn spawn(
        config: StateUpdaterConfig,
        mut reader: Box<dyn ChangelogReader>,
        live: Arc<LiveOffsets>,
    ) -> Result<Self> {
        let (commands, command_rx) = mpsc::channel::<Command>();
        let (event_tx, events) = mpsc::channel();
        let stopped = Arc::new(AtomicBool::new(false));
        let guard = StopGuard(Arc::clone(&stopped));
        let join = std::thread::Builder::new()
            .name(config.thread_name.clone())
            .spawn(move || {
                let _guard = guard;
                let mut core = StateUpdater::new(config.batch_size);
                loop {
                    let mut progressed = false;
                    if !core.is_empty() {
                        let (out, moved) = {
                            let _span =
                                tracing::debug_span!("restore", tasks = core.len()).entered();
                            core.tick(reader.as_mut(), &live)
                        };
                        progressed = moved;
                        if let Some(remaining) = &config.remaining_records {
                            remaining.store(core.remaining_records(), Ordering::Relaxed);
                        }
                        for e in out {
                            if event_tx.send(e).is_err() {
                                return;
                            }
                        }
                    }
                    // Busy tasks: just drain commands. No tasks: sleep until a command comes
                    // (an updater with nothing to restore or follow never wakes by itself).
                    // Caught-up tasks (standbys): look at their changelogs every `idle_wait`.
                    let first = if progressed {
                        command_rx.try_recv().ok()
                    } else if core.is_empty() {
                        match command_rx.recv() {
                            Ok(c) => Some(c),
                            Err(_) => return,
                        }
                    } else {
                        match command_rx.recv_timeout(config.idle_wait) {
                            Ok(c) => Some(c),
                            Err(RecvTimeoutError::Timeout) => None,
                            Err(RecvTimeoutError::Disconnected) => return,
                        }
                    };
                    for cmd in first.into_iter().chain(command_rx.try_iter()) {
                        match cmd {
                            Command::Add(task) => {
                                if let Some(old) = core.add(task, &live) {
                                    warn!(task = %old.id, "task added to state updater twice");
                                }
                            }
                            Command::Remove(id, reply) => {
                                let _ = reply.send(core.remove(id));
                            }
                            Command::Shutdown => return,
                        }
                    }
                }
            })
            .map_err(Error::Spawn)?;
        Ok(Self {
            commands,
            events,
            stopped,
            join: Some(join),
        })
    }

    fn check(&self) -> Result<()> {
        if self.stopped.load(Ordering::Acquire) {
            Err(Error::UpdaterStopped)
        } else {
            Ok(())
        }
    }

    /// Hands a task to the updater.
    pub fn add(&self, task: UpdaterTask) -> Result<()> {
        self.check()?;
        self.commands
            .send(Command::Add(task))
            .map_err(|_| Error::UpdaterStopped)
    }

    /// Takes a task back (blocking until the updater answers); `None` if it did not hold it
    /// (perhaps already restored: look in [`drain_events`](Self::drain_events)).
    pub fn remove(&self, task: TaskId) -> Result<Option<UpdaterTask>> {
        self.check()?;
        let (tx, rx) = mpsc::channel();
        self.commands
            .send(Command::Remove(task, tx))
            .map_err(|_| Error::UpdaterStopped)?;
        rx.recv().map_err(|_| Error::UpdaterStopped)
    }

    /// Appends to `out` the tasks restored or failed since the last call; never blocks.
    /// Errors only when the thread has stopped and nothing is left to drain.
    pub fn drain_events(&self, out: &mut Vec<UpdaterEvent>) -> Result<()> {
        let before = out.len();
        out.extend(self.events.try_iter());
        if out.len() == before {
            self.check()?;
        }
        Ok(())
    }

    /// Stops the thread and waits for it.
    pub fn shutdown(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        let _ = self.commands.send(Command::Shutdown);
        match self.join.take() {
            Some(j) => j.join().map_err(|_| Error::UpdaterStopped),
            None => Ok(()),
        }
    }
}

impl Drop for StateUpdaterThread {
    fn drop(&mut self) {
        if self.stop().is_err() {
            warn!("state updater thread panicked");
        }
    }
}
