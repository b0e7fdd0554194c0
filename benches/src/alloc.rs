//! Reading the counting allocator's per-thread totals.
//!
//! The counters move only in a binary whose global allocator is
//! `riffle_task_manager::alloc_counter::CountingAllocator`; [`counting`] tells whether that is so,
//! so a report can say "not measured" instead of a false 0 B.

use std::hint::black_box;

pub use riffle_task_manager::alloc_counter::thread_totals;

/// Whether this binary counts allocations (its global allocator is the counting one).
pub fn counting() -> bool {
    let (before, _) = thread_totals();
    drop(black_box(Box::new(black_box(7u64))));
    let (after, _) = thread_totals();
    after > before
}
