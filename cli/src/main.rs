//! `riffle`: produce to, consume from and describe topics of the embedded log; run the bundled
//! samples; inspect state directories; run the benchmarks.

mod bench;
mod consume;
mod produce;
mod sample;
mod state;
mod topics;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// riffle: a stream-processing runtime in the class of Kafka Streams.
#[derive(Parser, Debug)]
#[command(name = "riffle", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Append `key<TAB>value` lines to a topic of the embedded log.
    Produce(produce::Args),
    /// Print a topic's records as `key<TAB>value`.
    Consume(consume::Args),
    /// List the topics of the embedded log with their partitions and end offsets.
    Topics {
        /// The embedded log's directory.
        #[arg(long)]
        log_dir: PathBuf,
    },
    /// Run a bundled sample application.
    #[command(subcommand)]
    Sample(sample::Sample),
    /// Look into a state directory.
    #[command(subcommand)]
    State(state::State),
    /// Run a benchmark (docs/design.md §6).
    #[command(subcommand)]
    Bench(bench::Bench),
}

fn main() -> std::process::ExitCode {
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
        Command::Topics { log_dir } => topics::run(&log_dir),
        Command::Sample(sample) => sample::run(sample),
        Command::State(state) => state::run(state),
        Command::Bench(bench) => bench::run(bench),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
