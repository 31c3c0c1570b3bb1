//! `sluice bench queues`: every integer priority queue and baseline, in one process, over
//! N in {1e3 .. 1e7} queued items and the hold, pacing and drain workloads of
//! [`sluice_queue::workload`]. Prints ns per operation (one push plus one pop) and each
//! structure's speedup over std's `BinaryHeap`, writes a CSV and an SVG plot.
//!
//! For each (workload, N) every structure is built and filled first, then all are timed
//! round-robin, `--repeats` rounds of `--ops` operations each (after a short warm-up, since the
//! previous structure evicted the caches); a cell is the median of its rounds. Round-robin
//! spreads machine noise over all structures, so the ratios of one run hold even when absolute
//! times drift. Drain timings fill and empty the queue as many times as `--ops` needs. Each
//! fill draws N ranks in a range of 2^20 above the queue's base: 0 for every structure whose
//! range is fixed or that orders any rank, and for the moving-range ones (timing wheel, cFFS) the
//! last rank the previous drain handed out, since their range only moves forward (a wheel files
//! a rank behind its front in the front slot, so ranks below it would leave in arrival order,
//! unsorted).
//! At N above `--ops` a round is one fill and empty of N items, and there are fewer rounds
//! (about `--repeats * --ops` items in all, at least one round).

use super::common::{fmt_n, median, no_duplicates, parse_count, parse_repeats, pick};
use super::machine;
use crate::report::{self, Panel, Series, Table};
use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use sluice_queue::workload::{self, DrainRounds, Rng, Visit, Workload, with_bench_queue};
use sluice_queue::{QueueKind, RankQueue};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

/// The most items a cell may queue: every structure of a cell is built and filled at once, so
/// memory grows ten times faster than N (about 3x the default's largest N, 1e7).
const MAX_N: usize = 1 << 25;

/// Options of `sluice bench queues`.
#[derive(Args, Debug)]
pub struct QueuesArgs {
    /// CI-sized run: N in {1e3, 1e4, 1e5} and 200k operations per timing.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object per measurement on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// Queued items, comma separated (e.g. 1e3,1e6), at most 2^25. Default: 1e3,1e4,1e5,1e6,1e7.
    #[arg(long, value_delimiter = ',', value_parser = parse_count, allow_negative_numbers = true)]
    n: Vec<usize>,
    /// Workloads: hold, pacing, drain. Default: all.
    #[arg(long, value_delimiter = ',')]
    workload: Vec<String>,
    /// Structures by name (timing_wheel, ffs, hffs, cffs, gradient, approx_gradient,
    /// binary_heap, btree, bucket_heap, skiplist). Default: all.
    #[arg(long, value_delimiter = ',')]
    structure: Vec<String>,
    /// Buckets (slots) per structure, a power of two. The default, 2048, gives the pacing
    /// workload 8.2 us slots (Carousel's granularity) and hold 512 rank units per bucket.
    #[arg(long, default_value_t = 2048)]
    buckets: usize,
    /// Operations per timing (default 1e6, or 2e5 with --quick).
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    ops: Option<usize>,
    /// Timed repeats per cell; the median is reported (the upper of the middle two for an
    /// even count).
    #[arg(long, default_value_t = 5, value_parser = parse_repeats, allow_negative_numbers = true)]
    repeats: usize,
    /// Directory for bench-queues.csv and bench-queues.svg.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

#[derive(Serialize)]
struct JsonLine<'a> {
    bench: &'static str,
    workload: &'a str,
    structure: &'a str,
    n: usize,
    ns_per_op: f64,
}

struct Cell {
    workload: Workload,
    kind: QueueKind,
    n: usize,
    ns_per_op: f64,
}

/// One structure, filled and ready to be timed. Boxed per structure so that the timed loops
/// are monomorphized for each queue type (one dynamic call per timing, none per operation).
trait Runner {
    /// Run `ops` untimed operations (to warm caches after another structure ran).
    fn warm(&mut self, ops: usize);
    /// Time `ops` operations; ns per operation.
    fn timed(&mut self, ops: usize) -> f64;
}

struct QueueRunner<Q> {
    q: Q,
    workload: Workload,
    n: usize,
    rng: Rng,
    gaps: Vec<u64>,
    drain: DrainRounds,
}

impl<Q: RankQueue<u32>> QueueRunner<Q> {
    fn new(mut q: Q, kind: QueueKind, workload: Workload, n: usize) -> Self {
        let mut rng = Rng::new(0x5eed ^ n as u64);
        let mut gaps = Vec::new();
        match workload {
            Workload::Hold => workload::fill(&mut q, n, workload.range(), &mut rng),
            Workload::Pacing => {
                gaps = workload::pacing_gaps(n, &mut rng);
                workload::pacing_fill(&mut q, &gaps, &mut rng);
            }
            Workload::Drain => {}
        }
        QueueRunner {
            q,
            workload,
            n,
            rng,
            gaps,
            drain: DrainRounds::new(kind, n),
        }
    }

    fn run(&mut self, ops: usize) -> usize {
        let range = self.workload.range();
        match self.workload {
            Workload::Hold => {
                black_box(workload::hold(&mut self.q, ops, range, &mut self.rng));
                ops
            }
            Workload::Pacing => {
                black_box(workload::pacing(&mut self.q, ops, &self.gaps));
                ops
            }
            Workload::Drain => {
                let rounds = (ops / self.n).max(1);
                black_box(self.drain.run(&mut self.q, rounds, range, &mut self.rng));
                rounds * self.n
            }
        }
    }
}

impl<Q: RankQueue<u32>> Runner for QueueRunner<Q> {
    fn warm(&mut self, ops: usize) {
        self.run(ops);
    }

    fn timed(&mut self, ops: usize) -> f64 {
        let t = Instant::now();
        let done = self.run(ops);
        t.elapsed().as_nanos() as f64 / done as f64
    }
}

/// Builds a filled [`QueueRunner`] for whatever queue type it is given.
struct MakeRunner {
    kind: QueueKind,
    workload: Workload,
    n: usize,
}

impl Visit for MakeRunner {
    type Out = Box<dyn Runner>;
    fn visit<Q: RankQueue<u32> + 'static>(self, q: Q) -> Box<dyn Runner> {
        Box::new(QueueRunner::new(q, self.kind, self.workload, self.n))
    }
}

/// Build and fill `kind` for one cell.
fn runner(
    kind: QueueKind,
    w: Workload,
    n: usize,
    buckets: usize,
) -> anyhow::Result<Box<dyn Runner>> {
    let make = MakeRunner {
        kind,
        workload: w,
        n,
    };
    with_bench_queue(kind, w, buckets, n, make)
        .with_context(|| format!("configuring {kind} for {n} items"))
}

/// Timed rounds of a cell. Drain at large N is one fill-and-empty of N items per round; do about
/// `repeats * ops` items in all rather than `repeats` rounds of N (minutes of skip-list inserts
/// at 1e7).
fn timed_rounds(w: Workload, n: usize, ops: usize, repeats: usize) -> usize {
    match w {
        Workload::Drain => (repeats * ops / n).clamp(1, repeats),
        _ => repeats,
    }
}

/// Time every structure for one (workload, n): all are built first, then timed round-robin so
/// that machine noise spreads over all of them instead of landing on one.
fn measure_cell(
    kinds: &[QueueKind],
    w: Workload,
    n: usize,
    buckets: usize,
    ops: usize,
    repeats: usize,
) -> anyhow::Result<Vec<f64>> {
    let mut runners = kinds
        .iter()
        .map(|&k| runner(k, w, n, buckets))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for r in &mut runners {
        r.warm(ops.min(n.max(10_000)));
    }
    let rounds = timed_rounds(w, n, ops, repeats);
    let mut samples = vec![Vec::with_capacity(rounds); kinds.len()];
    for _ in 0..rounds {
        for (r, s) in runners.iter_mut().zip(&mut samples) {
            r.warm(ops / 10);
            s.push(r.timed(ops));
        }
    }
    Ok(samples.into_iter().map(median).collect())
}

/// Run the benchmark.
pub fn run(args: &QueuesArgs) -> anyhow::Result<()> {
    if !args.buckets.is_power_of_two() || args.buckets < 4 {
        bail!(
            "--buckets must be a power of two of at least 4, got {}",
            args.buckets
        );
    }
    let kinds = pick(
        &args.structure,
        QueueKind::BENCHMARKED,
        QueueKind::name,
        "structure",
    )?;
    let workloads = pick(&args.workload, &Workload::ALL, Workload::name, "workload")?;
    let ns: Vec<usize> = if !args.n.is_empty() {
        args.n.clone()
    } else if args.quick {
        vec![1_000, 10_000, 100_000]
    } else {
        vec![1_000, 10_000, 100_000, 1_000_000, 10_000_000]
    };
    no_duplicates(&ns, "--n")?;
    if let Some(&n) = ns.iter().find(|&&n| n > MAX_N) {
        bail!("--n {n} is more than the {MAX_N} supported");
    }
    report::prepare_out_files(
        &args.out,
        "--out",
        &["bench-queues.csv", "bench-queues.svg"],
    )?;
    let ops = args
        .ops
        .unwrap_or(if args.quick { 200_000 } else { 1_000_000 });

    // Before the cells, whose allocations it would otherwise follow.
    let speed = (!args.json).then(machine::measure);
    let pb = report::progress((workloads.len() * ns.len()) as u64);
    let mut cells = Vec::new();
    for &w in &workloads {
        for &n in &ns {
            pb.set_message(format!("{} n={}", w.name(), fmt_n(n)));
            let results = measure_cell(&kinds, w, n, args.buckets, ops, args.repeats)?;
            for (&kind, ns_per_op) in kinds.iter().zip(results) {
                if args.json {
                    let line = JsonLine {
                        bench: "queues",
                        workload: w.name(),
                        structure: kind.name(),
                        n,
                        ns_per_op: report::one_decimal(ns_per_op),
                    };
                    pb.suspend(|| println!("{}", serde_json::to_string(&line).unwrap_or_default()));
                }
                cells.push(Cell {
                    workload: w,
                    kind,
                    n,
                    ns_per_op,
                });
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();

    let baseline = |w: Workload, n: usize| {
        cells
            .iter()
            .find(|c| c.workload == w && c.n == n && c.kind == QueueKind::BinaryHeap)
            .map(|c| c.ns_per_op)
    };
    if !args.json {
        // The speedups need the heap's cells: without it (`--structure` leaves it out) the
        // table has no parentheses to explain.
        let speedups = cells.iter().any(|c| c.kind == QueueKind::BinaryHeap);
        println!(
            "ns per operation (one push + one pop){}",
            if speedups {
                "; in parentheses: times faster than binary_heap"
            } else {
                " (no speedups: --structure leaves binary_heap out)"
            }
        );
        println!(
            "{} buckets per structure; {} operations per timing, median of {}",
            args.buckets, ops, args.repeats
        );
        // Drain cells above `--ops` were timed otherwise (see `timed_rounds`).
        if workloads.contains(&Workload::Drain) {
            for &n in ns.iter().filter(|&&n| n > ops) {
                println!(
                    "drain n={}: one fill and empty of {n} items per timing, median of {}",
                    fmt_n(n),
                    timed_rounds(Workload::Drain, n, ops, args.repeats)
                );
            }
        }
        if let Some(speed) = speed {
            println!("{}", machine::line(speed));
        }
        println!();
        for &w in &workloads {
            let mut header = vec![w.name().to_string()];
            header.extend(ns.iter().map(|&n| format!("n={}", fmt_n(n))));
            let mut t = Table::new(header, 1);
            for &kind in &kinds {
                let mut row = vec![kind.name().to_string()];
                for &n in &ns {
                    let c = cells
                        .iter()
                        .find(|c| c.workload == w && c.n == n && c.kind == kind);
                    row.push(match (c, baseline(w, n)) {
                        (Some(c), Some(b)) => {
                            format!("{:.1} ({:.1}x)", c.ns_per_op, b / c.ns_per_op)
                        }
                        (Some(c), None) => format!("{:.1}", c.ns_per_op),
                        _ => "-".into(),
                    });
                }
                t.row(row);
            }
            println!("{}", t.render());
        }
    }

    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            let speedup = baseline(c.workload, c.n)
                .map_or(String::new(), |b| format!("{:.3}", b / c.ns_per_op));
            vec![
                c.workload.name().into(),
                c.kind.name().into(),
                c.n.to_string(),
                format!("{:.2}", c.ns_per_op),
                speedup,
            ]
        })
        .collect();
    let csv = args.out.join("bench-queues.csv");
    report::write_csv(
        &csv,
        &[
            "workload",
            "structure",
            "n",
            "ns_per_op",
            "speedup_vs_binary_heap",
        ],
        &rows,
    )?;
    let panels: Vec<Panel> = workloads
        .iter()
        .map(|&w| Panel {
            title: format!("{} workload", w.name()),
            series: kinds
                .iter()
                .map(|&k| Series {
                    label: k.name().into(),
                    points: cells
                        .iter()
                        .filter(|c| c.workload == w && c.kind == k)
                        .map(|c| (c.n as f64, c.ns_per_op))
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let svg = args.out.join("bench-queues.svg");
    report::plot_loglog(&svg, &panels, "items queued (N)", "ns per push+pop")?;
    eprintln!("wrote {} and {}", csv.display(), svg.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_queue::{Entry, Handle, PushError, QueueStats, Rank, StaleHandle};

    /// A queue that notes the rank of every item it hands out.
    struct Recorder<Q> {
        q: Q,
        popped: Vec<Rank>,
    }

    impl<Q: RankQueue<u32>> RankQueue<u32> for Recorder<Q> {
        fn push(&mut self, rank: Rank, item: u32) -> Result<Handle, PushError<u32>> {
            self.q.push(rank, item)
        }
        fn pop_min(&mut self) -> Option<Entry<u32>> {
            let e = self.q.pop_min()?;
            self.popped.push(e.rank);
            Some(e)
        }
        fn peek_min(&self) -> Option<Entry<u32>> {
            self.q.peek_min()
        }
        fn remove(&mut self, handle: Handle) -> Result<Entry<u32>, StaleHandle> {
            self.q.remove(handle)
        }
        fn rank_of(&self, handle: Handle) -> Option<Rank> {
            self.q.rank_of(handle)
        }
        fn len(&self) -> usize {
            self.q.len()
        }
        fn capacity(&self) -> usize {
            self.q.capacity()
        }
        fn next_deadline(&self) -> Option<Rank> {
            self.q.next_deadline()
        }
        fn stats(&self) -> QueueStats {
            self.q.stats()
        }
    }

    /// Runs the drain workload for three rounds on the queue it is given, as the report does,
    /// and returns the ranks popped and the queue's counters.
    struct ThreeRounds {
        kind: QueueKind,
        n: usize,
    }

    impl Visit for ThreeRounds {
        type Out = (Vec<Rank>, QueueStats);
        fn visit<Q: RankQueue<u32> + 'static>(self, q: Q) -> Self::Out {
            let q = Recorder {
                q,
                popped: Vec::new(),
            };
            let mut r = QueueRunner::new(q, self.kind, Workload::Drain, self.n);
            assert_eq!(r.run(3 * self.n), 3 * self.n);
            let stats = r.q.stats();
            (r.q.popped, stats)
        }
    }

    /// Every round of drain sorts its N ranks, on every structure: a timing wheel whose front
    /// stayed where the last round ended took the next round's ranks, all behind it, into its
    /// front slot and handed them out in arrival order, a FIFO instead of a sort.
    #[test]
    fn every_drain_round_sorts_its_ranks_on_every_structure() {
        const N: usize = 1000;
        const BUCKETS: usize = 2048;
        let bucket = Workload::Drain.range() / BUCKETS as u64;
        for &kind in QueueKind::BENCHMARKED {
            if kind == QueueKind::ApproxGradient {
                continue; // approximate order by design
            }
            let rounds = ThreeRounds { kind, n: N };
            let (popped, stats) =
                with_bench_queue(kind, Workload::Drain, BUCKETS, N, rounds).unwrap();
            assert_eq!(popped.len(), 3 * N, "{kind}");
            assert_eq!(stats.clamped + stats.rejected_range, 0, "{kind}");
            for (round, ranks) in popped.chunks(N).enumerate() {
                let out_of_order = ranks
                    .windows(2)
                    .filter(|w| w[1] / bucket < w[0] / bucket)
                    .count();
                assert_eq!(out_of_order, 0, "{kind}, round {round}");
            }
        }
    }
}
