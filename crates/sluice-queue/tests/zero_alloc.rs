//! A counting global allocator proves that no Sluice queue allocates after construction.
//!
//! Each structure is built, filled, and then driven through a long mix of push, pop, remove,
//! requeue and time advance; the allocator's call count must not change during the mix. (The
//! BTreeMap baseline is excluded: it allocates nodes by design; the others here do not.)

use sluice_queue::{QueueKind, QueueSpec, RankQueue};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Count only this thread's calls: the test harness's own threads may allocate meanwhile
    /// (seen on a loaded machine), which says nothing about the queues.
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count() {
    if COUNTING.with(|c| c.get()) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
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
        let buckets = if matches!(kind, QueueKind::ApproxGradient | QueueKind::CircularApprox) {
            600
        } else {
            4096
        };
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
        let before = ALLOCS.load(Ordering::Relaxed);
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
        let after = ALLOCS.load(Ordering::Relaxed);
        assert_eq!(
            after,
            before,
            "{kind} allocated {} times during 200k operations",
            after - before
        );
    }
}
