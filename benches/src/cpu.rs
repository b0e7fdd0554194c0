//! The CPU time one thread of this process has used, from `/proc`.

use std::io;
use std::time::Duration;

/// Clock ticks per second of `/proc/.../stat` (`USER_HZ`; 100 on every Linux riffle targets).
const USER_HZ: u64 = 100;

/// CPU time (user + system) used so far by thread `tid` of this process (a Linux tid, e.g.
/// `ThreadMetrics::os_thread_id`), and where it was read.
///
/// Reads `/proc/self/task/<tid>/schedstat` (nanoseconds on the CPU) and falls back to the
/// `utime` + `stime` fields of `/proc/self/task/<tid>/stat` (10 ms ticks) when the kernel has no
/// schedstat.
pub fn thread_cpu_time(tid: u64) -> io::Result<(Duration, &'static str)> {
    let dir = format!("/proc/self/task/{tid}");
    if let Ok(text) = std::fs::read_to_string(format!("{dir}/schedstat"))
        && let Some(Ok(ns)) = text.split_whitespace().next().map(str::parse::<u64>)
    {
        return Ok((Duration::from_nanos(ns), "schedstat"));
    }
    let text = std::fs::read_to_string(format!("{dir}/stat"))?;
    let ticks = parse_stat_ticks(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{dir}/stat: cannot read utime and stime"),
        )
    })?;
    Ok((Duration::from_millis(ticks * 1000 / USER_HZ), "stat"))
}

/// `utime + stime` of a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`: utime and stime are fields 14 and 15.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11); // field 3 (state) is index 0
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0";
        assert_eq!(parse_stat_ticks(line), Some(12));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn this_threads_cpu_time_is_readable() {
        let tid = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok());
        if let Some(tid) = tid {
            // Burn some CPU first: a fresh test thread may not have been charged a tick yet.
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(30) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            let (spent, _) = thread_cpu_time(tid).expect("own thread's CPU time");
            assert!(spent > Duration::ZERO);
        }
    }
}
