//! Fuzz target `checkpoint`: see `riffle_fuzz_harness::checkpoint` for what it feeds in and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| riffle_fuzz_harness::checkpoint::run(data));
