//! Fuzz target `txn_journal`: see `riffle_fuzz_harness::txn_journal` for what it feeds in and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| riffle_fuzz_harness::txn_journal::run(data));
