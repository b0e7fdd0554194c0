//! Shared fixtures for riffle benchmarks.
