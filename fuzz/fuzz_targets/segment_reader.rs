//! Fuzz target `segment_reader`: see `riffle_fuzz_harness::segment_reader` for what it feeds in and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| riffle_fuzz_harness::segment_reader::run(data));
