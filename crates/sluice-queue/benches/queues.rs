//! Criterion micro-benchmarks: the hold workload (pop the minimum, push it back a random delta
//! later) on every structure at 10^3 and 10^5 queued items, through the same code as
//! `sluice bench queues` ([`sluice_queue::workload`]). `sluice bench queues` is the side-by-side
//! report; these give criterion's statistics and regression tracking for single structures.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sluice_queue::workload::{self, Rng, Visit, Workload, with_bench_queue};
use sluice_queue::{QueueKind, RankQueue};
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

criterion_group!(benches, hold);
criterion_main!(benches);
