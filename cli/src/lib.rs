//! The library half of the `riffle` command-line tool: what its `riffle` binary shares with the
//! `riffle-bench` binary (package `riffle-bench`, in benches/), which runs the bundled samples'
//! topologies and input generators in its benchmarks and the groupByKey-count sample itself as
//! the child process of `cargo run --release -p riffle-bench -- soak`.
//!
//! - [`sample`]: the bundled sample applications (`riffle sample …`);
//! - [`duration`]: durations on the command line;
//! - [`limit_malloc_arenas`] and [`render_error`]: how both binaries start and report an error.

pub mod duration;
pub mod sample;

/// Limits glibc to two malloc arenas (`M_ARENA_MAX`), unless `MALLOC_ARENA_MAX` says
/// otherwise; called first thing in `main`, before any thread starts. By default glibc gives
/// threads arenas of their own (up to eight per core), and memory freed into one arena is
/// reused by the threads of that arena only: the memtables that stream threads fill and
/// fjall's workers free after a flush were left scattered over arenas, 340 MiB peak RSS for
/// the 1 M-key count against 305 MiB with two arenas and the same throughput
/// (docs/BENCHMARKS.md, "The store budget counted").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: `mallopt` only sets a parameter of glibc's allocator; it is called before
        // this process starts any thread.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Other allocators than glibc's are left as they are.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_malloc_arenas() {}

/// The error and its causes, joined by `: `, each said once: a cause whose text its parent's
/// message already shows (an I/O error's message names the file and quotes the OS error, which
/// is also its source) is left out.
pub fn render_error(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::render_error;

    #[test]
    fn an_io_error_is_said_once() {
        let io = std::io::Error::from_raw_os_error(24);
        let io = riffle_log::Error::Io {
            path: "/l/x".into(),
            source: io,
        };
        let e = anyhow::Error::new(io).context("opening the log at /l");
        let text = render_error(&e);
        assert_eq!(text.matches("os error 24").count(), 1, "{text}");
        assert!(
            text.starts_with("opening the log at /l: I/O error on /l/x: "),
            "{text}"
        );
    }
}
