//! Kafka's WordCountProcessorDemo
//! (`org.apache.kafka.streams.examples.wordcount.WordCountProcessorDemo`), ported one for one
//! to the processor API: a source, a processor counting words in a key-value store `Counts`,
//! and a sink; every second of wall-clock time a punctuator forwards every word's count as a
//! string, stamped with the punctuation time.
//!
//! | Kafka Streams | riffle |
//! |---|---|
//! | `topology.addSource("Source", INPUT)` | `topology.add_source("Source", Consumed::with(..), &[INPUT])` |
//! | `topology.addProcessor("Process", new MyProcessorSupplier(), "Source")` | `topology.add_processor("Process", \|\| WordCount, &["Source"])` |
//! | `Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore("Counts"), ..)` | `Stores::key_value_store_builder(Stores::in_memory_key_value_store(STORE), ..)` |
//! | `context.schedule(Duration.ofSeconds(1), PunctuationType.WALL_CLOCK_TIME, ..)` | `ctx.schedule(Duration::from_secs(1), PunctuationType::WallClockTime, ..)` |
//! | `topology.addSink("Sink", OUTPUT, "Process")` | `topology.add_sink("Sink", OUTPUT, Produced::with(..), &["Process"])` |

use std::time::Duration;

use riffle::processor::PunctuationType;
use riffle::{
    Consumed, Processor, ProcessorContext, Produced, Record, Result, Serdes, Stores, Topology,
};

use crate::word_count::split_words;

/// The demo's input topic.
pub const INPUT: &str = "streams-plaintext-input";
/// The demo's output topic.
pub const OUTPUT: &str = "streams-wordcount-processor-output";
/// The store of counts per word.
pub const STORE: &str = "Counts";
/// How often the counts are forwarded (wall-clock time).
pub const EVERY: Duration = Duration::from_secs(1);

/// The processor (the demo's `MyProcessorSupplier`'s processor).
#[derive(Debug, Default)]
pub struct WordCount;

impl Processor<Option<String>, String, String, String> for WordCount {
    fn init(&mut self, ctx: &mut ProcessorContext<'_, String, String>) -> Result<()> {
        ctx.schedule(EVERY, PunctuationType::WallClockTime, |ctx, timestamp| {
            let counts = ctx.get_state_store::<String, i64>(STORE)?.all()?;
            for (word, count) in counts {
                ctx.forward(Record::new(word, count.to_string(), timestamp))?;
            }
            Ok(())
        })?;
        Ok(())
    }

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        record: Record<Option<String>, String>,
    ) -> Result<()> {
        let mut store = ctx.get_state_store::<String, i64>(STORE)?;
        for word in split_words(&record.value().to_lowercase()) {
            let count = store.get(&word)?.unwrap_or(0);
            store.put(&word, &(count + 1))?;
        }
        Ok(())
    }
}

/// The topology: `Source` (reading `INPUT`) → `Process` (with `Counts`) → `Sink`.
pub fn topology() -> Result<Topology> {
    topology_reading(INPUT)
}

/// The topology reading `input`. As in Kafka's demo, each task counts the words of its own
/// input partitions (there is no repartition by word): the counts are the application's only
/// on an input of one partition.
pub fn topology_reading(input: &str) -> Result<Topology> {
    let mut topology = Topology::new();
    topology
        .add_source(
            "Source",
            Consumed::with(Serdes::optional(Serdes::string()), Serdes::string()),
            &[input],
        )?
        .add_processor("Process", || WordCount, &["Source"])?
        .add_state_store(
            Stores::key_value_store_builder(
                Stores::in_memory_key_value_store(STORE),
                Serdes::string(),
                Serdes::i64(),
            ),
            &["Process"],
        )?
        .add_sink(
            "Sink",
            OUTPUT,
            Produced::with(Serdes::string(), Serdes::string()),
            &["Process"],
        )?;
    Ok(topology)
}
