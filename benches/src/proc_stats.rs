//! What `/proc` says, read through `procfs`: the one place the benches read it. The CPU time of
//! a thread of this process ([`thread_cpu_time`]), of a process ([`process_cpu_time`]) and of a
//! process's threads of one name ([`named_threads_cpu_time`]); a process's threads, open files
//! and resident memory ([`footprint`]); the machine's load average ([`load_average`]).

use std::io;
use std::time::Duration;

use procfs::Current;
use procfs::process::Process;

/// CPU time (user + system) used so far by thread `tid` of this process (a Linux tid, e.g.
/// `ThreadMetrics::os_thread_id`), and where it was read.
///
/// Reads `/proc/self/task/<tid>/schedstat` (nanoseconds on the CPU) and falls back to the
/// `utime` + `stime` fields of `/proc/self/task/<tid>/stat` (clock ticks, 10 ms) when the
/// kernel has no schedstat.
pub fn thread_cpu_time(tid: u64) -> io::Result<(Duration, &'static str)> {
    let tid = i32::try_from(tid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("tid {tid}")))?;
    let task = Process::myself()
        .and_then(|me| me.task_from_tid(tid))
        .map_err(io_error)?;
    if let Ok(schedstat) = task.schedstat() {
        return Ok((
            Duration::from_nanos(schedstat.sum_exec_runtime),
            "schedstat",
        ));
    }
    let stat = task.stat().map_err(io_error)?;
    Ok((ticks(stat.utime + stat.stime), "stat"))
}

/// `procfs`'s error as an I/O error.
fn io_error(e: procfs::ProcError) -> io::Error {
    io::Error::other(e)
}

/// This process (`None`) or process `pid`.
fn process(pid: Option<i32>) -> io::Result<Process> {
    pid.map_or_else(Process::myself, Process::new)
        .map_err(io_error)
}

/// CPU time (user + system: `utime` + `stime` of `/proc/<pid>/stat`, in clock ticks) used so far
/// by process `pid`, or by this process for `None`.
pub fn process_cpu_time(pid: Option<i32>) -> io::Result<Duration> {
    let stat = process(pid)?.stat().map_err(io_error)?;
    Ok(ticks(stat.utime + stat.stime))
}

/// CPU time (user + system, clock ticks) used so far by the threads of process `pid` whose name
/// starts with `prefix` (Linux keeps the first 15 bytes of a thread's name); threads that end
/// while they are read are left out.
pub fn named_threads_cpu_time(pid: i32, prefix: &str) -> io::Result<Duration> {
    let mut total = 0;
    for task in process(Some(pid))?.tasks().map_err(io_error)? {
        let Ok(stat) = task.and_then(|t| t.stat()) else {
            continue;
        };
        if stat.comm.starts_with(prefix) {
            total += stat.utime + stat.stime;
        }
    }
    Ok(ticks(total))
}

/// A process's OS threads, open file descriptors and resident memory (`VmRSS`, `RssAnon`,
/// `RssFile` of `/proc/<pid>/status`); 0 for what could not be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// OS threads.
    pub threads: u64,
    /// Open file descriptors (for this process, counting the one that reads them).
    pub open_files: u64,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Resident anonymous memory, KiB.
    pub rss_anon_kib: u64,
    /// Resident file-backed memory, KiB.
    pub rss_file_kib: u64,
}

/// The [`Footprint`] of process `pid`, or of this process for `None`.
pub fn footprint(pid: Option<i32>) -> Footprint {
    let Ok(process) = process(pid) else {
        return Footprint::default();
    };
    let status = process.status().ok();
    let status = status.as_ref();
    Footprint {
        threads: status.map_or(0, |s| s.threads),
        open_files: process.fd_count().map_or(0, |n| n as u64),
        rss_kib: status.and_then(|s| s.vmrss).unwrap_or(0),
        rss_anon_kib: status.and_then(|s| s.rssanon).unwrap_or(0),
        rss_file_kib: status.and_then(|s| s.rssfile).unwrap_or(0),
    }
}

/// The 1-, 5- and 15-minute load averages as `/proc/loadavg` shows them (`0.52 0.48 0.40`).
pub fn load_average() -> Option<String> {
    let load = procfs::LoadAverage::current().ok()?;
    Some(format!(
        "{:.2} {:.2} {:.2}",
        load.one, load.five, load.fifteen
    ))
}

/// A count of clock ticks (`utime`, `stime`: `USER_HZ`, 100 a second) as a duration.
fn ticks(ticks: u64) -> Duration {
    Duration::from_millis(ticks * 1000 / procfs::ticks_per_second())
}

/// The Linux tid of the calling thread (`gettid`).
pub(crate) fn current_tid() -> u64 {
    rustix::thread::gettid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        use procfs::FromRead;
        use procfs::process::Stat;
        // The 37 fields every Linux 2.x kernel writes; utime and stime are 14 and 15.
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 123 \
                    4096 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0";
        let stat = Stat::from_read(line.as_bytes()).expect("a stat line");
        assert_eq!(stat.comm, "a (b) c");
        assert_eq!(stat.utime + stat.stime, 12);
        assert!(Stat::from_read(&b"garbage"[..]).is_err());
    }

    #[test]
    fn ticks_are_hundredths_of_a_second() {
        assert_eq!(ticks(12), Duration::from_millis(120));
    }

    #[test]
    fn this_threads_cpu_time_is_readable() {
        // Burn some CPU first: a fresh test thread may not have been charged a tick yet.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let (spent, _) = thread_cpu_time(current_tid()).expect("own thread's CPU time");
        assert!(spent > Duration::ZERO);
        assert!(process_cpu_time(None).is_ok());
    }

    #[test]
    fn this_process_has_a_footprint() {
        let me = footprint(None);
        assert!(me.threads >= 1, "{me:?}");
        assert!(me.open_files >= 3, "{me:?}");
        assert!(me.rss_kib > 0 && me.rss_kib >= me.rss_anon_kib, "{me:?}");
        let pid = i32::try_from(std::process::id()).expect("a pid");
        assert_eq!(footprint(Some(pid)).threads, me.threads);
        assert!(load_average().is_some_and(|l| l.split(' ').count() == 3));
    }
}
