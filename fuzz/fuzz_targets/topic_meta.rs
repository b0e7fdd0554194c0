//! Fuzz target `topic_meta`: see `riffle_fuzz_harness::topic_meta` for what it feeds in and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| riffle_fuzz_harness::topic_meta::run(data));
