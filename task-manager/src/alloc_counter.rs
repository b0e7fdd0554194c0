//! A counting global allocator for tests and benchmarks (feature `alloc-counter`).
//!
//! Install it in a test or bench binary, then measure a closure:
//!
//! ```ignore
//! use riffle_task_manager::alloc_counter::{CountingAllocator, measure};
//! #[global_allocator]
//! static ALLOC: CountingAllocator = CountingAllocator;
//! let (bytes, allocations, result) = measure(|| do_work());
//! ```
//!
//! Counts are per thread, so other threads of the test harness do not disturb a measurement.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

thread_local! {
    // `const` initialisers: touching them never allocates (no lazy registration).
    static BYTES: Cell<u64> = const { Cell::new(0) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting bytes and allocations made by the current thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAllocator;

/// Whether allocations are also counted process-wide (off by default: then the only cost is one
/// relaxed load of an uncontended flag per allocation).
static PROCESS_WIDE: AtomicBool = AtomicBool::new(false);
static PROCESS_BYTES: AtomicU64 = AtomicU64::new(0);
static PROCESS_COUNT: AtomicU64 = AtomicU64::new(0);

fn record(size: usize) {
    if PROCESS_WIDE.load(Ordering::Relaxed) {
        PROCESS_BYTES.fetch_add(size as u64, Ordering::Relaxed);
        PROCESS_COUNT.fetch_add(1, Ordering::Relaxed);
    }
    // `try_with`: during thread teardown the counters may be gone; then just don't count.
    let _ = BYTES.try_with(|b| b.set(b.get() + size as u64));
    let _ = COUNT.try_with(|c| c.set(c.get() + 1));
}

// Safety: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees carry over; the bookkeeping only touches const-initialised thread-locals, which
// neither allocate nor unwind.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // Safety: same contract as our caller's (`layout` has non-zero size).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // Safety: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Safety: `ptr` was allocated by `System` (via us) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // Safety: `ptr`/`layout` come from us (hence `System`); `new_size` is non-zero per contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Bytes and allocations made so far by the current thread.
pub fn thread_totals() -> (u64, u64) {
    (BYTES.with(Cell::get), COUNT.with(Cell::get))
}

/// Turns process-wide counting on or off: for work spread over threads the caller does not
/// run on (stream threads, for instance). Costs a contended atomic add per allocation while on.
pub fn count_process_wide(on: bool) {
    PROCESS_WIDE.store(on, Ordering::Relaxed);
}

/// Bytes and allocations counted process-wide while [`count_process_wide`] was on.
pub fn process_totals() -> (u64, u64) {
    (
        PROCESS_BYTES.load(Ordering::Relaxed),
        PROCESS_COUNT.load(Ordering::Relaxed),
    )
}

/// Runs `f` and returns (bytes allocated, number of allocations, `f`'s result) on this thread.
/// Only meaningful when [`CountingAllocator`] is the global allocator.
pub fn measure<R>(f: impl FnOnce() -> R) -> (u64, u64, R) {
    let (b0, c0) = thread_totals();
    let r = f();
    let (b1, c1) = thread_totals();
    (b1 - b0, c1 - c0, r)
}
