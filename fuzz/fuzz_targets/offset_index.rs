//! Fuzz target `offset_index`: see `riffle_fuzz_harness::offset_index` for what it feeds in and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| riffle_fuzz_harness::offset_index::run(data));
