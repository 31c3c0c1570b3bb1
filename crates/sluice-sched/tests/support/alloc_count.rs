//! A global allocator that counts one thread's allocations, for the tests that the scheduler
//! does not allocate after construction: `tests/zero_alloc.rs` and the crate's own unit tests
//! (a rebase, which no public call reaches in a test's time), each including this file as a
//! module.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Count only this thread's calls: the test harness's own threads, and the other tests
    /// running beside this one, may allocate meanwhile, which says nothing about its scheduler.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    if COUNTING.with(|c| c.get()) {
        ALLOCS.with(|a| a.set(a.get() + 1));
    }
}

/// Count this thread's allocations from now on.
pub fn count_this_thread() {
    COUNTING.with(|c| c.set(true));
}

/// The allocations this thread makes in `f` (counted once [`count_this_thread`] was called).
pub fn allocations_in(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(|a| a.get());
    f();
    ALLOCS.with(|a| a.get()) - before
}

// SAFETY: every call is forwarded unchanged to the system allocator; we only count calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
