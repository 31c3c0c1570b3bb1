//! Drive one structure through a workload, as `sluice bench queues` does, for profiling with
//! callgrind or perf. Usage: hold_probe STRUCTURE N OPS [hold|pacing|drain] [BUCKETS]
use sluice_queue::workload::{self, DrainRounds, Rng, Visit, Workload, with_bench_queue};
use sluice_queue::{QueueKind, RankQueue};

struct Probe {
    kind: QueueKind,
    workload: Workload,
    n: usize,
    ops: usize,
}

impl Visit for Probe {
    type Out = u64;
    fn visit<Q: RankQueue<u32> + 'static>(self, mut q: Q) -> u64 {
        let mut rng = Rng::new(1);
        let range = self.workload.range();
        match self.workload {
            Workload::Hold => {
                workload::fill(&mut q, self.n, range, &mut rng);
                workload::hold(&mut q, self.ops, range, &mut rng)
            }
            Workload::Pacing => {
                let gaps = workload::pacing_gaps(self.n, &mut rng);
                workload::pacing_fill(&mut q, &gaps, &mut rng);
                workload::pacing(&mut q, self.ops, &gaps)
            }
            Workload::Drain => {
                let rounds = (self.ops / self.n).max(1);
                DrainRounds::new(self.kind, self.n).run(&mut q, rounds, range, &mut rng)
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind: QueueKind = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(QueueKind::Cffs);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let ops: usize = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let workload = match args.get(4).map(String::as_str) {
        Some("pacing") => Workload::Pacing,
        Some("drain") => Workload::Drain,
        _ => Workload::Hold,
    };
    let buckets: usize = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(1 << 14);
    let sum = with_bench_queue(
        kind,
        workload,
        buckets,
        n,
        Probe {
            kind,
            workload,
            n,
            ops,
        },
    )
    .expect("spec");
    println!("{kind} {} n={n} ops={ops} checksum={sum}", workload.name());
}
