//! `riffle`: produce to, consume from and describe topics of the embedded log; run the bundled
//! samples; inspect state directories. The benchmarks are another binary, `riffle-bench`
//! (benches/).

mod consume;
mod groups;
mod produce;
mod repair;
mod reset;
mod state;
mod topics;

use clap::{Parser, Subcommand};
use riffle_cli::{limit_malloc_arenas, render_error, sample};

/// riffle: a stream-processing runtime in the class of Kafka Streams.
#[derive(Parser, Debug)]
#[command(name = "riffle", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Append `key<TAB>value` lines to a topic of the embedded log; with --headers,
    /// `h1:v1,h2:v2<TAB>key<TAB>value` lines (Kafka's console producer layout with
    /// `parse.key=true parse.headers=true`; `NO_HEADERS` for none); with --timestamps, each
    /// line starts with the record's timestamp: `timestamp_ms<TAB>[headers<TAB>]key<TAB>value`.
    ///
    /// Not atomic: a partition's records are appended when its batch fills (256 KiB) or
    /// --linger-ms after the first of them was read (5 ms), and fsynced at the end. A line
    /// that is not `key<TAB>value` (with --headers: `headers<TAB>key<TAB>value`, every header
    /// `key:value`; with --timestamps: a non-negative integer first) or not UTF-8 stops it with
    /// an error naming the line; every record before that line is then written and fsynced,
    /// none from it on, and the error says how many were written. SIGINT or SIGTERM stops it
    /// the same way (exit code 1): what was read before the signal is written and fsynced,
    /// and the error says how many records that was. A failed write or sync says how many
    /// records were written before it.
    Produce(produce::Args),
    /// Print a topic's records as `key<TAB>value`; with --print-headers, as
    /// `h1:v1,h2:v2<TAB>key<TAB>value` (Kafka's console consumer layout with `print.key=true
    /// print.headers=true`; `NO_HEADERS` for none), which `produce --headers` reads back; with
    /// --print-timestamps, `timestamp_ms<TAB>` first, which `produce --timestamps` reads back.
    /// With --key-serde windowed-string or session-windowed-string, windowed keys (Kafka
    /// Streams' windowed serdes) print as `key@start/end`.
    Consume(consume::Args),
    /// List the topics of the embedded log with their partitions and end offsets; with
    /// --create, create one (with Kafka's topic configs: --config retention.ms=…); with
    /// --describe, show each topic's configs and each partition's offsets and files.
    Topics(topics::Args),
    /// List the groups of application instances on the embedded log (every instance of an
    /// application on one log directory is a member of its group, one member per stream
    /// thread); with --describe APP, its members (process, pid, host, thread, last heartbeat),
    /// the group and member epochs, and each member's active, standby and warm-up tasks with
    /// their lag, as Kafka's `kafka-streams-groups.sh --describe`.
    Groups(groups::Args),
    /// Maintain the embedded log.
    #[command(subcommand)]
    Log(repair::LogCommand),
    /// Run a bundled sample application.
    #[command(subcommand)]
    Sample(Box<sample::Sample>),
    /// Let an application process its input again from scratch, as Kafka's
    /// `kafka-streams-application-reset`: its input offsets moved (--to-earliest by default,
    /// --to-latest, --to-datetime), its internal topics (`<application-id>-…-changelog`,
    /// `…-repartition`) deleted, its local state (`<state-dir>/<application-id>`) wiped.
    /// Refused while an instance runs — one holding the state directory's lock, or any member
    /// of the application's group (on the embedded log, any instance on the log directory,
    /// whatever its state directory) — naming them; on the embedded log --force removes the
    /// members instead, which fences them.
    Reset(reset::Args),
    /// Look into a state directory.
    #[command(subcommand)]
    State(state::State),
}

fn main() -> std::process::ExitCode {
    limit_malloc_arenas();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Topics(args) => topics::run(args),
        Command::Groups(args) => groups::run(args),
        Command::Log(command) => repair::run(command),
        Command::Sample(sample) => sample::run(*sample),
        Command::Reset(args) => reset::run(args),
        Command::State(state) => state::run(state),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", render_error(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
