//! Fuzz target `durability_records`: see `riffle_fuzz_harness::durability_records` for what it feeds in and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| riffle_fuzz_harness::durability_records::run(data));
