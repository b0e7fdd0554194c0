//! Fuzz target `recovery_point`: see `riffle_fuzz_harness::recovery_point` for what it feeds in and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| riffle_fuzz_harness::recovery_point::run(data));
