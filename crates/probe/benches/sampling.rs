//! Placeholder replaced by the sampling benchmark.
fn main() {}
