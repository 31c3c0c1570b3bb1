//! Criterion micro-benchmarks: the hold workload (pop the minimum, push it back a random delta
//! later) on every structure at 10^3 and 10^5 queued items, through the same code as
//! `sluice bench queues` ([`sluice_queue::workload`]). `sluice bench queues` is the side-by-side
//! report; these give criterion's statistics and regression tracking for single structures.
//!
//! `srpt_move` times the other way a scheduler uses a queue: it serves the first member and
//! moves it one rank down by handle (pFabric's flow with a packet less to send), through
//! `requeue` and through `remove` then `push`, at 10^3 and 10^5 members over 2^16 ranks
//! (`cargo bench -p sluice-queue --bench queues -- srpt_move`).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sluice_queue::workload::{self, Rng, Visit, Workload, with_bench_queue};
use sluice_queue::{Handle, QueueKind, QueueSpec, RankQueue};
use std::hint::black_box;
use std::time::{Duration, Instant};

const BUCKETS: usize = 2048;

/// Fill a queue, then hand criterion a closure that times `iters` hold operations on it.
struct HoldBench<'a, 'b> {
    group: &'a mut criterion::BenchmarkGroup<'b, criterion::measurement::WallTime>,
    kind: QueueKind,
    n: usize,
}

impl Visit for HoldBench<'_, '_> {
    type Out = ();
    fn visit<Q: RankQueue<u32> + 'static>(self, mut q: Q) {
        let range = Workload::Hold.range();
        let mut rng = Rng::new(42);
        workload::fill(&mut q, self.n, range, &mut rng);
        workload::hold(&mut q, self.n.max(10_000), range, &mut rng);
        self.group
            .bench_function(BenchmarkId::new(self.kind.name(), self.n), |b| {
                b.iter_custom(|iters| {
                    let t = Instant::now();
                    black_box(workload::hold(&mut q, iters as usize, range, &mut rng));
                    t.elapsed()
                })
            });
    }
}

fn hold(c: &mut Criterion) {
    let mut group = c.benchmark_group("hold");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for n in [1_000, 100_000] {
        for &kind in QueueKind::BENCHMARKED {
            with_bench_queue(
                kind,
                Workload::Hold,
                BUCKETS,
                n,
                HoldBench {
                    group: &mut group,
                    kind,
                    n,
                },
            )
            .expect("bench configuration is valid");
        }
    }
    group.finish();
}

/// Ranks of the `srpt_move` members: remaining sizes in packets.
const SRPT_RANKS: u64 = 1 << 16;

/// Serve the first member and move it one rank down (a finished one restarts at the top), by
/// `requeue` or by `remove` then `push`, `iters` times.
fn srpt_moves(q: &mut impl RankQueue<u32>, handles: &mut [Handle], iters: u64, requeue: bool) {
    for _ in 0..iters {
        let Some(e) = q.peek_min() else { return };
        let rank = if e.rank == 0 {
            SRPT_RANKS - 1
        } else {
            e.rank - 1
        };
        let h = handles[e.item as usize];
        let moved = if requeue {
            q.requeue(h, rank, e.item)
        } else {
            let _ = q.remove(h);
            q.push(rank, e.item)
        };
        handles[e.item as usize] = moved.expect("in range, and room for the member it took");
    }
}

fn srpt_move(c: &mut Criterion) {
    let mut group = c.benchmark_group("srpt_move");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for n in [1_000u32, 100_000] {
        for kind in [QueueKind::HierFfs, QueueKind::BinaryHeap] {
            for requeue in [true, false] {
                let spec = QueueSpec::new(kind, SRPT_RANKS as usize, 1, n as usize);
                let mut q = spec.build::<u32>().expect("bench configuration is valid");
                let mut rng = Rng::new(7);
                let mut handles: Vec<Handle> = (0..n)
                    .map(|i| {
                        q.push(rng.next_u64() % SRPT_RANKS, i)
                            .expect("within capacity and range")
                    })
                    .collect();
                let how = if requeue { "requeue" } else { "remove_push" };
                let id = BenchmarkId::new(format!("{}/{how}", kind.name()), n);
                group.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let t = Instant::now();
                        srpt_moves(&mut q, &mut handles, iters, requeue);
                        t.elapsed()
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, hold, srpt_move);
criterion_main!(benches);
