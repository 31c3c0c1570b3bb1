//! Criterion micro-benchmarks: every case of `sluice bench sched` (hClock, pFabric, FQ/pacing,
//! Eiffel Fig. 4.7), Sluice and its baseline, at 10^3 and 10^5 flows, through the same
//! closed loop ([`sluice_sched::workload`]). One iteration is one packet: a dequeue and the
//! enqueue it triggers. `sluice bench sched` is the side-by-side report; these give criterion's
//! statistics and regression tracking.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sluice_sched::workload::{Case, CaseLoop, Impl};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn sched(c: &mut Criterion) {
    for case in Case::ALL {
        let mut group = c.benchmark_group(case.name());
        group
            .measurement_time(Duration::from_secs(2))
            .warm_up_time(Duration::from_millis(500));
        for flows in [1_000, 100_000] {
            for imp in Impl::ALL {
                let mut l = CaseLoop::new(case, imp, flows).expect("bench configuration is valid");
                // Reach the steady state: every flow cycles at least once.
                l.run(2 * flows as u64);
                group.bench_function(BenchmarkId::new(imp.name(), flows), |b| {
                    b.iter_custom(|iters| {
                        let t = Instant::now();
                        black_box(l.run(iters));
                        t.elapsed()
                    })
                });
                if let Err(e) = l.verify() {
                    panic!("{} {} at {flows} flows: {e}", case.name(), imp.name());
                }
            }
        }
        group.finish();
    }
}

criterion_group!(benches, sched);
criterion_main!(benches);
