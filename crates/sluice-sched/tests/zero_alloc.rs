//! The scheduler does not allocate after construction: packets, flows, shaper records and every
//! queue are reserved up front. A counting global allocator watches a long random run.

use sluice_sched::classify::Match;
use sluice_sched::{NodeSpec, Packet, PolicyKind, Rate, SchedConfig, TreeBuilder};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Count only this thread's calls: the test harness's own threads may allocate meanwhile,
    /// which says nothing about the scheduler.
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
fn no_allocation_per_packet_after_construction() {
    COUNTING.with(|c| c.set(true));
    // Every kind of node: per-packet internal WFQ with a limited class, per-flow FQ with pacing,
    // hClock dual queues, pFabric, an internal LSTF node on an approximate queue (a leaf's
    // would be a cFFS) over an EDF leaf.
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 4096,
        flows: 256,
        max_packet: 9000,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Wfq).rate(Rate::gbit(10), 30_000));
    let mut fq = NodeSpec::new("fq", PolicyKind::Fq);
    fq.flow_rate = Some(Rate::mbit(200));
    let lstf = b.child(root, NodeSpec::new("lstf", PolicyKind::Lstf));
    let leaves = [
        b.child(root, fq),
        b.child(
            root,
            NodeSpec::new("hclock", PolicyKind::HClock).rate(Rate::gbit(2), 9000),
        ),
        b.child(root, NodeSpec::new("pfabric", PolicyKind::Pfabric)),
        b.child(lstf, NodeSpec::new("edf", PolicyKind::Edf)),
    ];
    for (i, &l) in leaves.iter().enumerate() {
        b.rule(vec![Match::Class(i as u32)], l);
    }
    let mut s = b.build().unwrap();
    assert!(
        s.describe()
            .contains("lstf per-packet, queue circular_approx")
    );
    let mut rng = sluice_queue::workload::Rng::new(5);
    let mut now = 1_000_000_000u64;
    let mut run = |s: &mut sluice_sched::Scheduler, steps: u64| {
        for token in 0..steps {
            let mut p = Packet {
                token,
                len: 64 + (rng.next_u64() % 9000) as u32,
                flow: rng.next_u64() % 300,
                class: Some((rng.next_u64() % 4) as u32),
                ..Packet::default()
            };
            p.fields.remaining = 1 + rng.next_u64() % 10_000_000;
            p.fields.slack = rng.next_u64() % 1_000_000;
            p.fields.deadline = now + rng.next_u64() % 1_000_000;
            let _ = s.enqueue(now, &p);
            for _ in 0..2 {
                let _ = s.dequeue(now);
            }
            // Below the root's 10 Gbit/s on average, so that the hClock leaf's 2 Gbit/s limit
            // does not fill the buffer and turn most packets away: 1200 flow keys go through
            // 256 slots, reclaimed on almost every new flow.
            now += rng.next_u64() % 10_000;
        }
    };
    // Warm up: let every slab and table reach its steady use.
    run(&mut s, 20_000);
    let before = ALLOCS.load(Ordering::Relaxed);
    run(&mut s, 100_000);
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(
        after,
        before,
        "{} allocations during 100k enqueues and 200k dequeues",
        after - before
    );
    assert!(s.stats().enqueued > 100_000);
    assert!(s.stats().flows_reclaimed > 50_000);
}
