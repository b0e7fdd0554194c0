//! Fuzz target `group_offsets`: see `riffle_fuzz_harness::group_offsets` for what it feeds in and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| riffle_fuzz_harness::group_offsets::run(data));
