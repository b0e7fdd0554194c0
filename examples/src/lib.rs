//! Examples live as `[[example]]` targets of this package; the applications they share with
//! the package's tests live here. The ports of Kafka Streams' own examples (docs/porting.md
//! maps their methods) are `word_count`, `word_count_processor`, `page_views`, `sessions`,
//! `router` (`split` and a `TopicNameExtractor`) and `activity` (a cogroup of three streams).

pub mod activity;
pub mod page_views;
pub mod router;
pub mod sessions;
pub mod word_count;
pub mod word_count_processor;

pub mod dedup {
    //! De-duplication by key with the processor API: a record passes unless its key was seen
    //! less than `ttl` ms earlier (by record time); seen keys live in a persistent store, and a
    //! wall-clock punctuator deletes the ones too old to matter.

    use std::time::Duration;

    use riffle::{
        Consumed, Processor, ProcessorContext, Produced, Record, Result, Serdes, Stores,
        StreamsBuilder, Topology, processor::PunctuationType,
    };

    /// The store of first-seen timestamps per key.
    pub const STORE: &str = "dedup-seen";

    /// The processor: one per task.
    #[derive(Debug)]
    pub struct Dedup {
        ttl: i64,
        expire_every: Duration,
    }

    impl Processor<String, String, String, String> for Dedup {
        fn init(&mut self, ctx: &mut ProcessorContext<'_, String, String>) -> Result<()> {
            let ttl = self.ttl;
            ctx.schedule(
                self.expire_every,
                PunctuationType::WallClockTime,
                move |ctx, _now| {
                    // Keys first seen before stream time − ttl can no longer drop a record
                    // (inputs arrive in time order): forget them.
                    let horizon = ctx.current_stream_time_ms().saturating_sub(ttl);
                    let mut store = ctx.get_state_store::<String, i64>(STORE)?;
                    for (key, seen) in store.all()? {
                        if seen < horizon {
                            store.delete(&key)?;
                        }
                    }
                    Ok(())
                },
            )?;
            Ok(())
        }

        fn process(
            &mut self,
            ctx: &mut ProcessorContext<'_, String, String>,
            record: Record<String, String>,
        ) -> Result<()> {
            let mut store = ctx.get_state_store::<String, i64>(STORE)?;
            match store.get(record.key())? {
                Some(seen) if record.timestamp() - seen < self.ttl => Ok(()),
                _ => {
                    store.put(record.key(), &record.timestamp())?;
                    ctx.forward(record)
                }
            }
        }
    }

    /// `input` → dedup → `output`, strings both ways.
    pub fn topology(
        input: &str,
        output: &str,
        ttl: Duration,
        expire_every: Duration,
    ) -> Result<Topology> {
        let builder = StreamsBuilder::new();
        builder.add_state_store(
            Stores::key_value_store_builder(
                Stores::persistent_key_value_store(STORE),
                Serdes::string(),
                Serdes::i64(),
            )
            .with_caching_enabled(),
        );
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        builder
            .stream(input, Consumed::with(Serdes::string(), Serdes::string()))
            .process(move || Dedup { ttl, expire_every }, &[STORE])
            .to(output, Produced::with(Serdes::string(), Serdes::string()));
        builder.build()
    }

    /// The model: which `(key, value, timestamp)` records pass, by brute force.
    pub fn model(records: &[(String, String, i64)], ttl: Duration) -> Vec<(String, String, i64)> {
        let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let mut out: Vec<(String, String, i64)> = Vec::new();
        for (k, v, ts) in records {
            let last_passed = out.iter().rev().find(|(ok, _, _)| ok == k).map(|r| r.2);
            if last_passed.is_none_or(|seen| ts - seen >= ttl) {
                out.push((k.clone(), v.clone(), *ts));
            }
        }
        out
    }
}
