#!/usr/bin/env bash
# A short run of every fuzz target (CI; docs/FUZZING.md has the long runs and what each target
# checks). Needs rustup's nightly toolchain; installs cargo-fuzz if it is missing.
#
#   fuzz/ci-short.sh [all|build|run]     FUZZ_SECONDS per target (default 25)
#
# `build` writes the seed corpora and builds the targets, `run` runs each target for
# FUZZ_SECONDS from the seeds, the committed regression inputs (fuzz/regressions/<target>/) and
# what earlier runs kept (fuzz/corpus/<target>/). A crash fails the script, leaving the input in
# fuzz/artifacts/<target>/ (replay it: cargo +nightly fuzz run -s none -a <target> <file>).
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-all}
seconds=${FUZZ_SECONDS:-25}
# Same flags for build and run, or `cargo fuzz run` rebuilds: no sanitizer (the code under test
# is safe Rust; ASan would halve the executions for nothing) and debug assertions on, so
# arithmetic overflow panics.
flags=(--sanitizer none --debug-assertions)
start=$(date +%s)
say() { echo "== fuzz [$(( $(date +%s) - start ))s] $*"; }

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz/ci-short.sh: \`cargo +nightly\` does not work: cargo-fuzz needs a nightly toolchain." >&2
  echo "Install it with: rustup toolchain install nightly --profile minimal" >&2
  exit 1
fi
cargo +nightly --version

if [ "$phase" != run ]; then
  if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    say "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
  fi
  cargo +nightly fuzz --version
  say "seed corpora"
  cargo run --locked --quiet --manifest-path fuzz/Cargo.toml -p riffle-fuzz-harness --bin seeds -- fuzz/corpus
  say "build"
  cargo +nightly fuzz build "${flags[@]}"
fi

if [ "$phase" != build ]; then
  for target in $(cargo +nightly fuzz list); do
    say "run $target for ${seconds}s"
    mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
    extra=()
    [ -d "fuzz/regressions/$target" ] && extra+=("fuzz/regressions/$target")
    log="fuzz/artifacts/$target.log"
    if ! cargo +nightly fuzz run "${flags[@]}" "$target" "fuzz/corpus/$target" "${extra[@]}" -- \
      -max_total_time="$seconds" -max_len=4096 -malloc_limit_mb=512 -rss_limit_mb=2048 \
      -print_final_stats=1 >"$log" 2>&1; then
      tail -n 60 "$log" >&2
      echo "fuzz target $target failed; its log is $log, a crashing input in fuzz/artifacts/$target/" >&2
      exit 1
    fi
    grep -E '^#[0-9]+.*cov:' "$log" | tail -n 1 || true
    grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)' "$log" || true
  done
fi
say "done"
