//! A counting global allocator proves that no Sluice queue allocates after construction.
//!
//! Each structure is built, filled, and then driven through a long mix of push, pop, remove,
//! requeue and time advance; the allocator's call count must not change during the mix. (The
//! BTreeMap baseline is excluded: it allocates nodes by design; the others here do not.)

use sluice_queue::{QueueKind, QueueSpec, RankQueue};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Count only this thread's calls: the test harness's own threads (and the other tests
    /// here, run in parallel) may allocate meanwhile (seen on a loaded machine), which says
    /// nothing about the queues.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    if COUNTING.with(|c| c.get()) {
        ALLOCS.with(|a| a.set(a.get() + 1));
    }
}

/// Allocator calls made by this thread while counting.
fn allocs() -> u64 {
    ALLOCS.with(|a| a.get())
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

#[test]
fn no_allocation_per_operation_after_construction() {
    COUNTING.with(|c| c.set(true));
    for kind in QueueKind::ALL {
        if kind == QueueKind::BTree {
            continue;
        }
        let buckets = if kind.approximate() { 600 } else { 4096 };
        let mut q = QueueSpec::new(kind, buckets, 1, 20_000)
            .build::<u32>()
            .unwrap();
        let mut handles = Vec::with_capacity(20_000);
        let mut rng = 0x1234_5678_9ABC_DEF1u64;
        let mut now = 0u64;
        // Reach steady state first (the skip list and slabs grow into their reserved memory).
        for i in 0..20_000u32 {
            handles.push(q.push(u64::from(i) % 3000, i).unwrap());
        }
        while q.pop_min().is_some() {}
        handles.clear();
        let before = allocs();
        for i in 0..200_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            match rng % 9 {
                0..=3 => {
                    if let Ok(h) = q.push(now + rng % 3000, i) {
                        if handles.len() < handles.capacity() {
                            handles.push(h);
                        }
                    }
                }
                4 | 5 => {
                    q.pop_min();
                }
                6 => {
                    if let Some(h) = handles.pop() {
                        let _ = q.remove(h);
                    }
                }
                7 => {
                    // A move, kept by its new handle (a stale one pushes afresh).
                    if let Some(h) = handles.pop() {
                        if let Ok(h) = q.requeue(h, now + rng % 3000, i) {
                            handles.push(h);
                        }
                    }
                }
                _ => {
                    now += rng % 50;
                    q.pop_due(now);
                }
            }
        }
        let after = allocs();
        assert_eq!(
            after,
            before,
            "{kind} allocated {} times during 200k operations",
            after - before
        );
    }
}

/// Removals behind a minimum that never leaves: the binary heap's removed keys stay in the heap
/// (nothing pops them off its top), so only its compaction keeps them within the reserved memory.
#[test]
fn removals_behind_a_pinned_minimum_do_not_allocate() {
    COUNTING.with(|c| c.set(true));
    for kind in QueueKind::ALL {
        if kind == QueueKind::BTree {
            continue;
        }
        let mut q = QueueSpec::new(kind, 64, 1, 8).build::<u32>().unwrap();
        q.push(0, 0).unwrap();
        // Steady state first, as above.
        for i in 1..8u32 {
            let h = q.push(5, i).unwrap();
            q.remove(h).unwrap();
        }
        let before = allocs();
        for i in 0..100_000u32 {
            let h = q.push(5, i).unwrap();
            q.remove(h).unwrap();
        }
        let after = allocs();
        assert_eq!(after, before, "{kind} allocated {} times", after - before);
        assert_eq!(q.pop_min().map(|e| e.item), Some(0), "{kind}");
    }
}
