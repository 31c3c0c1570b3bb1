//! Differential property tests: every queue against the exact oracle under random
//! interleavings of push, pop, peek, remove (live and stale handles), requeue (a move to a new
//! rank, of any item or of the first, as a scheduler re-ranks the member it has just served)
//! and time advance.
//!
//! Ranks are drawn around a moving time cursor that starts beyond 2^40, so moving-range
//! structures wrap around their arrays many times per case; offsets aim at the interesting
//! places: inside the window, exactly at its edges, below the front and far beyond the horizon.
//! Capacities are small so that `Full` is hit too.

use proptest::prelude::*;
use sluice_queue::bucket_heap::HeapIndex;
use sluice_queue::ffs::FlatBitmap;
use sluice_queue::fixed::BucketIndex;
use sluice_queue::gradient::GradientIndex;
use sluice_queue::oracle::{KeyModel, Oracle};
use sluice_queue::{
    AnyQueue, BinaryHeapQueue, CircularApproxQueue, CircularConfig, CircularFfsQueue,
    CircularQueue, Handle, Overflow, PushError, QueueKind, QueueSpec, QueueStats, RankQueue,
    StaleHandle, UPCOMING,
};
use std::collections::HashMap;

#[derive(Clone, Debug)]
enum Op {
    /// Push at cursor + offset (offset may be negative), in units of the structure's span.
    Push(RankPick),
    Pop,
    Peek,
    /// Remove the n-th live item (modulo), then try the same handle again.
    Remove(usize),
    /// Move the n-th live item (modulo) to a new rank: the oracle removes and pushes.
    Requeue(usize, RankPick),
    /// Move the item that leaves first (`peek_min`'s) to a new rank, as a scheduler re-ranks
    /// the member it has just served (the binary heap sifts it in place).
    RequeueFirst(RankPick),
    /// Advance the time cursor by this fraction of the span (in 1/64ths) and `pop_due`.
    Due(u64),
    /// Advance the time cursor by this fraction of the span (in 1/64ths) and `advance` to it
    /// (a wheel's front moves, never past a queued item).
    Advance(u64),
}

/// The live item a requeue op moves (its index among `live` items; `first`: the index of the
/// one that leaves first) and how it picks the new rank; `None` if there is none to move.
fn requeue_target(op: &Op, live: usize, first: Option<usize>) -> Option<(usize, RankPick)> {
    match *op {
        Op::Requeue(n, pick) if live > 0 => Some((n % live, pick)),
        Op::RequeueFirst(pick) => first.map(|i| (i, pick)),
        _ => None,
    }
}

#[derive(Clone, Copy, Debug)]
enum RankPick {
    /// Anywhere in [0, span).
    Inside(u64),
    /// Within two granules of the span's end, either side.
    Edge(i64),
    /// Below the cursor.
    Below(u64),
    /// Far beyond the horizon.
    Beyond(u64),
    /// The same rank as the previous push (ties must leave FIFO).
    Repeat,
}

fn rank_pick() -> impl Strategy<Value = RankPick> {
    prop_oneof![
        6 => any::<u64>().prop_map(RankPick::Inside),
        2 => (-2i64..=2).prop_map(RankPick::Edge),
        1 => any::<u64>().prop_map(RankPick::Below),
        1 => any::<u64>().prop_map(RankPick::Beyond),
        2 => Just(RankPick::Repeat),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => rank_pick().prop_map(Op::Push),
        4 => Just(Op::Pop),
        1 => Just(Op::Peek),
        2 => any::<usize>().prop_map(Op::Remove),
        2 => (any::<usize>(), rank_pick()).prop_map(|(n, p)| Op::Requeue(n, p)),
        2 => (0u64..96).prop_map(Op::Due),
        1 => (0u64..96).prop_map(Op::Advance),
    ]
}

/// [`op`], with a requeue of the first item in two operations of five: the binary heap's
/// in-place path, taken often, between removals that leave tombstones for it to sink past.
fn op_serving() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => op(),
        2 => rank_pick().prop_map(Op::RequeueFirst),
    ]
}

/// A structure under test with the model of its documented semantics.
struct Case {
    spec: QueueSpec,
    model: KeyModel,
    /// Rank units the structure orders ahead of its minimum.
    span: u64,
    granule: u64,
}

fn case(
    kind: QueueKind,
    buckets: usize,
    granularity: u64,
    capacity: usize,
    overflow: Overflow,
    start: u64,
) -> Case {
    let mut spec = QueueSpec::new(kind, buckets, granularity, capacity);
    spec.overflow = overflow;
    let b = buckets as u64;
    let (model, span) = match kind {
        QueueKind::TimingWheel => {
            spec.base = start;
            (
                KeyModel::Wheel {
                    front: start / granularity,
                    slot_ns: granularity,
                    slots: b,
                    overflow,
                },
                b * granularity,
            )
        }
        QueueKind::Cffs => (
            KeyModel::Circular {
                base: 0,
                granularity,
                buckets: b,
                overflow,
            },
            2 * b * granularity,
        ),
        k if k.exact() => (KeyModel::Exact, b * granularity),
        _ => {
            spec.base = start;
            (
                KeyModel::Fixed {
                    base: start,
                    granularity,
                    buckets: b,
                    overflow,
                },
                b * granularity,
            )
        }
    };
    Case {
        spec,
        model,
        span,
        granule: granularity,
    }
}

fn entry_eq<T: PartialEq + std::fmt::Debug>(
    a: Option<sluice_queue::Entry<T>>,
    b: Option<sluice_queue::Entry<T>>,
    what: &str,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(a, b, "{}", what);
    Ok(())
}

/// A push (or the push of a requeue) and the oracle's agree: both queued the item (its handle
/// and oracle id), or both handed it back for the same reason (`None`).
fn same_push(
    what: &str,
    got: Result<Handle, PushError<u32>>,
    want: Result<u64, PushError<u32>>,
) -> Result<Option<(Handle, u64)>, TestCaseError> {
    match (got, want) {
        (Ok(h), Ok(id)) => Ok(Some((h, id))),
        (Err(PushError::Full { item: a, .. }), Err(PushError::Full { item: b, .. }))
        | (
            Err(PushError::OutOfRange { item: a, .. }),
            Err(PushError::OutOfRange { item: b, .. }),
        ) => {
            prop_assert_eq!(a, b, "{}", what);
            Ok(None)
        }
        (got, want) => Err(TestCaseError::fail(format!(
            "{what}: got {:?}, oracle {:?}",
            got.map(|_| ()),
            want.map(|_| ())
        ))),
    }
}

fn run(c: &Case, start: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let q: AnyQueue<u32> = c.spec.build().expect("valid spec");
    run_on(q, c, start, ops)
}

fn run_on<Q: RankQueue<u32>>(
    mut q: Q,
    c: &Case,
    start: u64,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let mut o: Oracle<u32> = Oracle::new(c.model, c.spec.capacity);
    let mut live: Vec<(u32, Handle, u64)> = Vec::new();
    let mut pos: HashMap<u32, usize> = HashMap::new();
    let mut now = start;
    let mut last_rank = start;
    let mut next_item = 0u32;

    let forget = |live: &mut Vec<(u32, Handle, u64)>, pos: &mut HashMap<u32, usize>, item: u32| {
        let i = pos.remove(&item).expect("popped item was live");
        live.swap_remove(i);
        if i < live.len() {
            pos.insert(live[i].0, i);
        }
    };

    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Push(pick) => {
                let rank = pick_rank(pick, c, now, last_rank);
                last_rank = rank;
                let item = next_item;
                next_item += 1;
                let what = format!("step {step}: push({rank})");
                if let Some((h, id)) = same_push(&what, q.push(rank, item), o.push(rank, item))? {
                    pos.insert(item, live.len());
                    live.push((item, h, id));
                }
            }
            Op::Pop => {
                let (a, b) = (q.pop_min(), o.pop_min());
                entry_eq(a, b, &format!("step {step}: pop_min"))?;
                if let Some(e) = a {
                    forget(&mut live, &mut pos, e.item);
                }
            }
            Op::Peek => {
                entry_eq(
                    q.peek_min(),
                    o.peek_min(),
                    &format!("step {step}: peek_min"),
                )?;
                // The prefetch hint starts with the item that leaves next, and names only
                // items that were queued.
                let up: Vec<_> = q.upcoming().iter().collect();
                let both = q.peek_upcoming();
                prop_assert_eq!(both.map(|(e, _)| e), q.peek_min(), "step {}", step);
                let both_up: Vec<_> = both.map_or(vec![], |(_, u)| u.iter().collect());
                prop_assert_eq!(&both_up, &up, "step {}", step);
                if let Some(&first) = up.first() {
                    prop_assert_eq!(Some(first), q.peek_min().map(|e| e.item), "step {}", step);
                }
                prop_assert!(up.iter().all(|&i| i < next_item), "step {}: upcoming", step);
                // Across a chunk boundary only when the first chunk names few.
                let u = q.upcoming();
                prop_assert!(
                    u.after.is_empty() || u.front.len() < UPCOMING,
                    "step {}",
                    step
                );
                prop_assert_eq!(
                    q.next_deadline(),
                    o.next_deadline(),
                    "step {}: next_deadline",
                    step
                );
            }
            Op::Remove(n) => {
                if live.is_empty() {
                    continue;
                }
                let (item, h, id) = live[n % live.len()];
                prop_assert_eq!(q.rank_of(h), o.rank_of(id), "step {}: rank_of", step);
                let a = q.remove(h).ok();
                let b = o.remove(id);
                entry_eq(a, b, &format!("step {step}: remove"))?;
                forget(&mut live, &mut pos, item);
                prop_assert!(
                    q.remove(h).is_err(),
                    "step {}: second remove must be stale",
                    step
                );
                prop_assert_eq!(q.rank_of(h), None, "step {}: rank_of a stale handle", step);
            }
            Op::Requeue(..) | Op::RequeueFirst(_) => {
                let first = q.peek_min().map(|e| pos[&e.item]);
                let Some((i, pick)) = requeue_target(op, live.len(), first) else {
                    continue;
                };
                let rank = pick_rank(pick, c, now, last_rank);
                last_rank = rank;
                let (item, h, id) = live[i];
                let got = q.requeue(h, rank, item);
                prop_assert!(
                    o.remove(id).is_some(),
                    "step {}: oracle lost {}",
                    step,
                    item
                );
                let what = format!("step {step}: requeue({rank})");
                if let Some((h, id)) = same_push(&what, got, o.push(rank, item))? {
                    live[i] = (item, h, id);
                    prop_assert_eq!(q.rank_of(h), o.rank_of(id), "{}: rank_of", what);
                } else {
                    forget(&mut live, &mut pos, item);
                }
            }
            Op::Due(sixty_fourths) => {
                now += c.span * sixty_fourths / 64;
                let (a, b) = (q.pop_due(now), o.pop_due(now));
                entry_eq(a, b, &format!("step {step}: pop_due({now})"))?;
                if let Some(e) = a {
                    forget(&mut live, &mut pos, e.item);
                }
            }
            Op::Advance(sixty_fourths) => {
                now += c.span * sixty_fourths / 64;
                q.advance(now);
                o.advance(now);
                prop_assert_eq!(
                    q.next_deadline(),
                    o.next_deadline(),
                    "step {}: next_deadline after advance({})",
                    step,
                    now
                );
            }
        }
        prop_assert_eq!(q.len(), o.len(), "step {}: len", step);
    }
    // Drain: everything still queued comes out in the oracle's order.
    loop {
        let (a, b) = (q.pop_min(), o.pop_min());
        entry_eq(a, b, "drain")?;
        if a.is_none() {
            break;
        }
    }
    prop_assert!(q.is_empty());
    Ok(())
}

/// The rank `pick` names from the cursor `now` (see [`RankPick`]).
fn pick_rank(pick: RankPick, c: &Case, now: u64, last_rank: u64) -> u64 {
    match pick {
        RankPick::Inside(x) => now + x % c.span,
        RankPick::Edge(d) => (now + c.span).saturating_add_signed(d * c.granule as i64),
        RankPick::Below(x) => now.saturating_sub(1 + x % (2 * c.span)),
        RankPick::Beyond(x) => now + c.span * (2 + x % 8) + x % c.span,
        RankPick::Repeat => last_rank,
    }
}

fn params() -> impl Strategy<Value = (usize, u64, usize, bool, u64)> {
    (
        prop_oneof![1usize..4, 4usize..70, 60usize..300],
        prop_oneof![Just(1u64), 2u64..8, Just(1000u64)],
        1usize..48,
        any::<bool>(),
        (1u64 << 40)..(1u64 << 41),
    )
}

/// A differential test of queue `$kind` against the oracle, `$cases` cases of ops from `$ops`
/// (default: [`op`], 256 cases).
macro_rules! differential {
    ($name:ident, $kind:expr) => {
        differential!($name, $kind, op, 256);
    };
    ($name:ident, $kind:expr, $ops:ident, $cases:expr) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: $cases, ..ProptestConfig::default() })]
            #[test]
            fn $name((buckets, g, cap, reject, start) in params(), ops in prop::collection::vec($ops(), 1..400)) {
                let overflow = if reject { Overflow::Reject } else { Overflow::Clamp };
                let c = case($kind, buckets, g, cap, overflow, start);
                run(&c, start, &ops)?;
            }
        }
    };
}

differential!(timing_wheel_matches_oracle, QueueKind::TimingWheel);
differential!(ffs_matches_oracle, QueueKind::Ffs);
differential!(hffs_matches_oracle, QueueKind::HierFfs);
differential!(cffs_matches_oracle, QueueKind::Cffs);
differential!(gradient_matches_oracle, QueueKind::Gradient);
differential!(binary_heap_matches_oracle, QueueKind::BinaryHeap);
differential!(btree_matches_oracle, QueueKind::BTree);
differential!(bucket_heap_matches_oracle, QueueKind::BucketHeap);
differential!(skiplist_matches_oracle, QueueKind::SkipList);

// Every queue again, re-ranking the first item often (the ops of [`op_serving`]).
differential!(
    binary_heap_serving_matches_oracle,
    QueueKind::BinaryHeap,
    op_serving,
    128
);
differential!(
    timing_wheel_serving_matches_oracle,
    QueueKind::TimingWheel,
    op_serving,
    128
);
differential!(ffs_serving_matches_oracle, QueueKind::Ffs, op_serving, 128);
differential!(
    hffs_serving_matches_oracle,
    QueueKind::HierFfs,
    op_serving,
    128
);
differential!(
    cffs_serving_matches_oracle,
    QueueKind::Cffs,
    op_serving,
    128
);
differential!(
    gradient_serving_matches_oracle,
    QueueKind::Gradient,
    op_serving,
    128
);
differential!(
    btree_serving_matches_oracle,
    QueueKind::BTree,
    op_serving,
    128
);
differential!(
    bucket_heap_serving_matches_oracle,
    QueueKind::BucketHeap,
    op_serving,
    128
);
differential!(
    skiplist_serving_matches_oracle,
    QueueKind::SkipList,
    op_serving,
    128
);

/// A queue whose `requeue` is the trait's default, a remove and a push.
struct ByRemoveAndPush<Q>(Q);

impl<Q: RankQueue<u32>> RankQueue<u32> for ByRemoveAndPush<Q> {
    fn push(&mut self, rank: u64, item: u32) -> Result<Handle, PushError<u32>> {
        self.0.push(rank, item)
    }
    fn pop_min(&mut self) -> Option<sluice_queue::Entry<u32>> {
        self.0.pop_min()
    }
    fn peek_min(&self) -> Option<sluice_queue::Entry<u32>> {
        self.0.peek_min()
    }
    fn remove(&mut self, handle: Handle) -> Result<sluice_queue::Entry<u32>, StaleHandle> {
        self.0.remove(handle)
    }
    fn rank_of(&self, handle: Handle) -> Option<u64> {
        self.0.rank_of(handle)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn capacity(&self) -> usize {
        self.0.capacity()
    }
    fn next_deadline(&self) -> Option<u64> {
        self.0.next_deadline()
    }
    fn pop_due(&mut self, now: u64) -> Option<sluice_queue::Entry<u32>> {
        self.0.pop_due(now)
    }
    fn advance(&mut self, now: u64) {
        self.0.advance(now)
    }
    fn stats(&self) -> QueueStats {
        self.0.stats()
    }
}

fn run_heap_twins(c: &Case, start: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let cap = c.spec.capacity;
    let mut a = BinaryHeapQueue::<u32>::new(cap).unwrap();
    let mut b = ByRemoveAndPush(BinaryHeapQueue::<u32>::new(cap).unwrap());
    // (item, a's handle, b's handle); `pos` finds an item in `live`.
    let mut live: Vec<(u32, Handle, Handle)> = Vec::new();
    let mut pos: HashMap<u32, usize> = HashMap::new();
    let forget = |live: &mut Vec<(u32, Handle, Handle)>, pos: &mut HashMap<u32, usize>, item| {
        let i = pos.remove(&item).expect("item was live");
        live.swap_remove(i);
        if i < live.len() {
            pos.insert(live[i].0, i);
        }
    };
    let (mut now, mut last_rank, mut next_item) = (start, start, 0u32);
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Push(pick) => {
                let rank = pick_rank(pick, c, now, last_rank);
                last_rank = rank;
                let item = next_item;
                next_item += 1;
                match (a.push(rank, item), b.push(rank, item)) {
                    (Ok(ha), Ok(hb)) => {
                        pos.insert(item, live.len());
                        live.push((item, ha, hb));
                    }
                    (Err(_), Err(_)) => {}
                    (x, y) => prop_assert!(false, "step {}: push {:?} {:?}", step, x, y),
                }
            }
            Op::Pop | Op::Due(_) => {
                if let Op::Due(sixty_fourths) = *op {
                    now += c.span * sixty_fourths / 64;
                }
                let (x, y) = match *op {
                    Op::Pop => (a.pop_min(), b.pop_min()),
                    _ => (a.pop_due(now), b.pop_due(now)),
                };
                prop_assert_eq!(x, y, "step {}", step);
                if let Some(e) = x {
                    forget(&mut live, &mut pos, e.item);
                }
            }
            Op::Peek => prop_assert_eq!(a.peek_min(), b.peek_min(), "step {}", step),
            Op::Advance(sixty_fourths) => {
                now += c.span * sixty_fourths / 64;
                a.advance(now);
                b.advance(now);
            }
            Op::Remove(n) => {
                if live.is_empty() {
                    continue;
                }
                let (item, ha, hb) = live[n % live.len()];
                prop_assert_eq!(a.remove(ha).ok(), b.remove(hb).ok(), "step {}", step);
                forget(&mut live, &mut pos, item);
                prop_assert!(a.remove(ha).is_err() && b.remove(hb).is_err());
            }
            Op::Requeue(..) | Op::RequeueFirst(_) => {
                let first = a.peek_min().map(|e| pos[&e.item]);
                let Some((i, pick)) = requeue_target(op, live.len(), first) else {
                    continue;
                };
                let rank = pick_rank(pick, c, now, last_rank);
                last_rank = rank;
                let (item, ha, hb) = live[i];
                let (x, y) = (a.requeue(ha, rank, item), b.requeue(hb, rank, item));
                prop_assert!(x.is_ok() && y.is_ok(), "step {}: {:?} {:?}", step, x, y);
                let (ha2, hb2) = (x.unwrap(), y.unwrap());
                prop_assert_ne!(
                    hb2,
                    hb,
                    "step {}: a remove and a push give a new handle",
                    step
                );
                prop_assert_eq!(a.rank_of(ha2), Some(rank), "step {}", step);
                live[i] = (item, ha2, hb2);
            }
        }
        prop_assert_eq!(a.len(), b.len(), "step {}: len", step);
        prop_assert_eq!(a.stats(), b.stats(), "step {}: stats", step);
        prop_assert_eq!(a.peek_min(), b.peek_min(), "step {}: first", step);
    }
    loop {
        let (x, y) = (a.pop_min(), b.pop_min());
        prop_assert_eq!(x, y, "drain");
        if x.is_none() {
            break;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    /// The binary heap's requeue, in place when it moves the first item, against the same heap
    /// moving every item by a remove and a push (the trait's default, which it used before):
    /// the same answers to every operation, and the same length, first item and counters after
    /// each, under the ops of [`op_serving`]. Only the handles may differ (an in-place move
    /// keeps its own).
    #[test]
    fn binary_heap_requeue_matches_a_remove_and_a_push(
        (buckets, g, cap, _reject, start) in params(),
        ops in prop::collection::vec(op_serving(), 1..400),
    ) {
        let c = case(QueueKind::BinaryHeap, buckets, g, cap, Overflow::Clamp, start);
        run_heap_twins(&c, start, &ops)?;
    }
}

/// The circular construction over the other indexes (how the fixed-range structures follow a
/// moving range) obeys the same model as cFFS.
macro_rules! circular_differential {
    ($name:ident, $index:expr) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
            #[test]
            fn $name((buckets, g, cap, reject, start) in params(), ops in prop::collection::vec(op(), 1..400)) {
                let overflow = if reject { Overflow::Reject } else { Overflow::Clamp };
                let c = case(QueueKind::Cffs, buckets, g, cap, overflow, start);
                let cfg = CircularConfig { granularity: g, buckets, overflow, capacity: cap };
                let q = CircularQueue::<u32, _>::with_index(cfg, $index).unwrap();
                run_on(q, &c, start, &ops)?;
            }
        }
    };
}

circular_differential!(circular_flat_ffs_matches_oracle, FlatBitmap::new);
circular_differential!(circular_gradient_matches_oracle, GradientIndex::new);
circular_differential!(circular_bucket_heap_matches_oracle, HeapIndex::new);

/// Many rounds of wrap-around: a 64-slot wheel and a 2x32-bucket cFFS carried from 2^40 to
/// through about ten thousand windows in one long seeded run, against the oracle.
#[test]
fn moving_ranges_survive_many_rounds() {
    for kind in [QueueKind::TimingWheel, QueueKind::Cffs] {
        let start = (1u64 << 40) + 12_345;
        let c = case(kind, 32, 3, 200, Overflow::Clamp, start);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let ops: Vec<Op> = (0..200_000)
            .map(|_| match next() % 10 {
                0..=4 => Op::Push(RankPick::Inside(next())),
                5..=7 => Op::Pop,
                8 => Op::Remove(next() as usize),
                _ => Op::Due(next() % 64),
            })
            .collect();
        run(&c, start, &ops).unwrap();
    }
}

/// The circular queues' in-place move ([`RankQueue::requeue`] of an item alone in its bucket
/// into an empty one) is taken, keeps the handle, and leaves the order a remove and a push
/// would, also when the move empties the primary range or swaps the ranges back.
#[test]
fn a_circular_requeue_moves_an_item_alone_in_place_and_keeps_the_order() {
    // Two ranges of 8 buckets of 10 rank units: [0, 80) and [80, 160) at first.
    let cfg = CircularConfig::new(8, 10, 16);
    check_circular_moves("cffs", CircularFfsQueue::new(cfg).unwrap());
    check_circular_moves(
        "circular_approx",
        CircularApproxQueue::new(cfg, 16).unwrap(),
    );
}

fn check_circular_moves<I: BucketIndex>(kind: &str, mut q: CircularQueue<u32, I>) {
    let a = q.push(5, 1).unwrap();
    let b = q.push(15, 2).unwrap();
    // Alone in its bucket, to an empty one: the same handle names it there.
    assert_eq!(q.requeue(a, 45, 1), Ok(a), "{kind}");
    assert_eq!(q.rank_of(a), Some(45), "{kind}");
    // To its own bucket: in place too.
    assert_eq!(q.requeue(a, 47, 1), Ok(a), "{kind}");
    // To a bucket another item holds: behind it, under a new handle.
    let a2 = q.requeue(a, 16, 1).unwrap();
    assert_ne!(a2, a, "{kind}");
    assert_eq!(q.rank_of(a), None, "{kind}: the old handle is stale");
    // Not alone: moved by a remove and a push.
    q.requeue(b, 90, 2).unwrap();
    // The last item of the primary moves to the secondary range: the ranges swap before it
    // is filed, and it lands in an empty bucket of the new primary, in place.
    assert_eq!(q.requeue(a2, 105, 1), Ok(a2), "{kind}");
    assert_eq!(q.window().0, 80, "{kind}: the secondary took over");
    // A move to just below the new base swaps them back (module note), in place.
    assert_eq!(q.requeue(a2, 75, 1), Ok(a2), "{kind}");
    assert_eq!(q.window().0, 0, "{kind}: swapped back");
    let st = q.stats();
    assert_eq!(
        (st.pushed, st.removed),
        (2 + 6, 6),
        "{kind}: a move counts as both"
    );
    let order: Vec<_> = std::iter::from_fn(|| q.pop_min().map(|e| (e.rank, e.item))).collect();
    assert_eq!(order, [(75, 1), (90, 2)], "{kind}");
}

/// A re-rank (remove, then push) of the last member of cFFS's primary range, to a rank still
/// in that range, lands in its place: ahead of the members of the next range. The remove
/// empties the primary and the ranges swap; the push swaps them back. Filed behind the next
/// range's members instead, a fair queue served them first and charged the member for it (WFQ
/// gave a flow of 64 KB packets 65% of the link against a flow of 1500 B ones).
#[test]
fn cffs_re_ranks_the_last_member_of_its_primary_in_place() {
    let mut q = CircularFfsQueue::<u32>::new(CircularConfig::new(4, 1, 8)).unwrap();
    let x = q.push(2, 0).unwrap();
    q.push(4, 1).unwrap(); // the secondary range, [4, 8)
    let x = q.requeue(x, 3, 0).unwrap();
    assert_eq!(q.rank_of(x), Some(3));
    assert_eq!(q.pop_min().map(|e| (e.rank, e.item)), Some((3, 0)));
    assert_eq!(q.pop_min().map(|e| (e.rank, e.item)), Some((4, 1)));
    // With the secondary range in use the window cannot move back: a rank below it is filed
    // under the first bucket, behind what is there (the module's other rule).
    let mut q = CircularFfsQueue::<u32>::new(CircularConfig::new(4, 1, 8)).unwrap();
    let x = q.push(2, 0).unwrap();
    q.push(4, 1).unwrap();
    q.remove(x).unwrap(); // the ranges swap: [4, 8) and [8, 12)
    q.push(9, 2).unwrap();
    q.push(1, 3).unwrap();
    let order: Vec<u32> = std::iter::from_fn(|| q.pop_min().map(|e| e.item)).collect();
    assert_eq!(order, [1, 3, 2]);
}

/// An item filed from below cFFS's window (under its first bucket) keeps the window from
/// moving back: moved back, the window left it in the secondary range, behind a later push of
/// its own rank and behind a higher rank pushed after it. The oracle's model had the same rule,
/// so the differential test could not see it.
#[test]
fn cffs_keeps_equal_ranks_fifo_when_an_item_came_from_below_its_window() {
    let mut q = CircularFfsQueue::<u32>::new(CircularConfig::new(4, 1, 16)).unwrap();
    q.push(100, 0).unwrap(); // empty: the window is [100, 104)
    q.push(10, 1).unwrap(); // far below: under bucket 100, behind item 0
    q.push(97, 2).unwrap(); // just below: the window may not move back while item 1 is there
    q.push(10, 3).unwrap(); // item 1's rank: behind it
    let order: Vec<u32> = std::iter::from_fn(|| q.pop_min().map(|e| e.item)).collect();
    assert_eq!(order, [0, 1, 2, 3]);
    // Once it has left, the window moves back again.
    let mut q = CircularFfsQueue::<u32>::new(CircularConfig::new(4, 1, 16)).unwrap();
    q.push(100, 0).unwrap();
    let low = q.push(10, 1).unwrap();
    q.remove(low).unwrap();
    q.push(97, 2).unwrap();
    assert_eq!(
        q.pop_min().map(|e| e.item),
        Some(2),
        "filed exactly, ahead of 100"
    );
}
