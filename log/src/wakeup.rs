//! Cross-process wake-ups: a named thread that sleeps in the kernel (inotify) until some process
//! writes the log directory's change file, then wakes this process's waiters — so a consumer
//! waiting for another process's appends wakes once per change, never on a timer.
//!
//! It only signals; what changed is read from the change file (`changes.rs`) by the waiter. It
//! never touches a partition. Where inotify cannot start (not Linux, or the inotify limits are
//! reached) the caller falls back to looking at the change file every few milliseconds.

#[cfg(target_os = "linux")]
pub(crate) use linux::spawn_watcher;

/// Without inotify there is no watcher: waiters look at the change file on a short timer.
#[cfg(not(target_os = "linux"))]
pub(crate) fn spawn_watcher(
    _dir: &std::path::Path,
    _name: &str,
    _on_event: impl FnMut(bool) -> bool + Send + 'static,
) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "no inotify on this system",
    ))
}

#[cfg(target_os = "linux")]
mod linux {
    use std::mem::MaybeUninit;
    use std::path::Path;
    use std::time::Duration;

    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
    use rustix::io::Errno;

    /// How often the watcher asks whether it is still wanted (its log may have been dropped).
    const ALIVE_CHECK: Duration = Duration::from_secs(2);

    /// Starts the watcher of `dir/name`. It calls `on_event(true)` after writes to that file
    /// (coalesced: once per batch of kernel events) and `on_event(false)` every [`ALIVE_CHECK`]
    /// without one; it stops when `on_event` returns `false`.
    pub(crate) fn spawn_watcher(
        dir: &Path,
        name: &str,
        mut on_event: impl FnMut(bool) -> bool + Send + 'static,
    ) -> std::io::Result<()> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        inotify::add_watch(
            &fd,
            dir,
            WatchFlags::MODIFY | WatchFlags::CREATE | WatchFlags::MOVED_TO,
        )?;
        let name = name.as_bytes().to_vec();
        std::thread::Builder::new()
        .name("riffle-log-changes".into())
        .spawn(move || {
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let timeout = Timespec {
                tv_sec: ALIVE_CHECK.as_secs() as i64,
                tv_nsec: 0,
            };
            loop {
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                let ready = match poll(&mut fds, Some(&timeout)) {
                    Ok(n) => n > 0,
                    Err(Errno::INTR) => false,
                    Err(e) => {
                        tracing::warn!(error = %e, "the log's change watcher stopped; waiters fall back to looking every few milliseconds");
                        return;
                    }
                };
                let mut changed = false;
                if ready {
                    let mut events = inotify::Reader::new(&fd, &mut buf);
                    // Drained when the non-blocking read says it would block.
                    while let Ok(event) = events.next() {
                        changed |= event.file_name().is_some_and(|n| n.to_bytes() == name);
                    }
                }
                if !on_event(changed) {
                    return;
                }
            }
        })?;
        Ok(())
    }
}
