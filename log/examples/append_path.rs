//! The single-process append path, for comparing builds of riffle-log with each other
//! (docs/BENCHMARKS.md, *The embedded log across processes*): `batches` appends of `records`
//! records (`value_bytes` each, 16-byte keys) into a fresh file-backed log, round-robin over
//! `partitions`, under the default policy with no commit (so no fsync: the path measured is
//! sealing, writing and bookkeeping). Prints one JSON line: the median and best of `runs`.
//!
//! ```text
//! cargo run --release -p riffle-log --example append_path -- [batches] [records] [value_bytes] [partitions] [runs]
//! ```

use std::time::Instant;

use riffle_log::{BatchBuilder, Compression, Log, LogOptions, TopicPartition};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let arg = |i: usize, default: u64| args.get(i).copied().unwrap_or(default);
    let (batches, records, value_bytes, partitions, runs) = (
        arg(0, 20_000),
        arg(1, 100),
        arg(2, 100),
        arg(3, 1) as u32,
        arg(4, 5),
    );
    let value = vec![b'v'; value_bytes as usize];
    // Keys are formatted before the clock starts: the loop measures building and appending
    // batches, not `format!` (whose cost moved with the heap's state between builds).
    let keys: Vec<String> = (0..100_000u64).map(|k| format!("key-{k:012}")).collect();
    let mut rates = Vec::new();
    for _ in 0..runs {
        let dir = tempfile::tempdir()?;
        let log = Log::open(dir.path(), LogOptions::default())?;
        log.create_topic("bench", partitions)?;
        let tps: Vec<TopicPartition> = (0..partitions)
            .map(|p| TopicPartition::new("bench", p))
            .collect();
        let mut b = BatchBuilder::new(Compression::None);
        let start = Instant::now();
        for i in 0..batches {
            for r in 0..records {
                let key = &keys[((i * records + r) % 100_000) as usize];
                b.push(1_700_000_000_000, Some(key.as_bytes()), Some(&value));
            }
            let tp = &tps[(i % u64::from(partitions)) as usize];
            log.append(tp, &mut b)?;
        }
        let secs = start.elapsed().as_secs_f64();
        rates.push((batches * records) as f64 / secs);
    }
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    let best = rates[rates.len() - 1];
    println!(
        "{{\"bench\":\"append_path\",\"batches\":{batches},\"records_per_batch\":{records},\"value_bytes\":{value_bytes},\"partitions\":{partitions},\"runs\":{runs},\"median_records_per_s\":{median:.0},\"best_records_per_s\":{best:.0},\"median_appends_per_s\":{:.0}}}",
        median / records as f64
    );
    Ok(())
}
