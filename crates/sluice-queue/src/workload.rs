//! Benchmark workloads, shared by `sluice bench queues` and the criterion benches so that both
//! measure exactly the same loops.
//!
//! - **hold**: the classic priority-queue benchmark. The queue holds `n` items; each operation
//!   pops the minimum and pushes it back at `min + delta`, `delta` uniform in `[0, range)`.
//! - **pacing**: Carousel's use. `n` flows, rates log-uniform over four orders of magnitude
//!   (1 Mbit/s to 10 Gbit/s), 1500-byte packets; the queue holds each flow's next send time.
//!   Each operation pops the earliest flow and pushes it back at `t + len / rate`.
//! - **drain**: fill with `n` uniform ranks in `[base, base + range)`, then empty, round after
//!   round ([`DrainRounds`]). `base` is 0, except on a moving-range structure, whose range only
//!   moves forward: there it is the last rank the previous round handed out.
//!
//! One *operation* is one push plus one pop in every workload, so ns/op compare directly.
//!
//! Hold and pacing move their ranks forward forever. Moving-range structures (timing wheel,
//! cFFS) and the exact baselines take them as they are; a fixed-range index cannot, so in those
//! two workloads it runs inside Eiffel's circular construction (Fig. 4.4: two ranges that swap
//! as the minimum advances, [`crate::CircularQueue`]), the way a policy with a moving range
//! would deploy it. cFFS *is* that construction over the hierarchical bitmap, so the `hffs` and
//! `cffs` rows of hold and pacing run the same code (their difference is measurement noise).
//! Drain runs every structure as itself: a fixed-range index stays inside `[0, range)`.
//! [`with_bench_queue`] builds every structure sized for a `range` with `buckets` buckets.

use crate::approx_gradient::Window;
use crate::bucket_heap::HeapIndex;
use crate::ffs::FlatBitmap;
use crate::gradient::GradientIndex;
use crate::{
    CircularApproxQueue, CircularConfig, CircularFfsQueue, CircularQueue, ConfigError, QueueKind,
    QueueSpec, RankQueue, with_any_queue,
};

/// Bytes per packet in the pacing workload.
pub const PACKET_BYTES: u64 = 1500;

/// A fast deterministic generator (xorshift64*); benchmarks must not measure their RNG.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator (seed 0 is replaced).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    /// Next value.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The three workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// Pop the minimum, push it back a random delta later.
    Hold,
    /// Pop the earliest flow, push it back one packet time later.
    Pacing,
    /// Fill, then empty.
    Drain,
}

impl Workload {
    /// All workloads.
    pub const ALL: [Workload; 3] = [Workload::Hold, Workload::Pacing, Workload::Drain];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Hold => "hold",
            Workload::Pacing => "pacing",
            Workload::Drain => "drain",
        }
    }

    /// Whether ranks move forward without bound.
    pub fn moves(self) -> bool {
        !matches!(self, Workload::Drain)
    }

    /// Rank range the workload needs ahead of its minimum, a power of two: 2^20 rank units for
    /// hold and drain, 2^24 ns (16.8 ms, more than one 1500-byte packet at 1 Mbit/s) for pacing.
    pub fn range(self) -> u64 {
        match self {
            Workload::Pacing => 1 << 24,
            Workload::Hold | Workload::Drain => 1 << 20,
        }
    }
}

/// Configure `kind` to order `range` rank units ahead of its minimum with `buckets` buckets
/// (both powers of two, so every granularity is a shift), for `capacity` items.
pub fn bench_spec(kind: QueueKind, range: u64, buckets: usize, capacity: usize) -> QueueSpec {
    let g = (range / buckets as u64).max(1);
    let mut spec = QueueSpec::new(kind, buckets, g, capacity);
    match kind {
        // One extra slot: min's offset within its slot plus a delta < range spans buckets + 1.
        QueueKind::TimingWheel => spec.buckets = buckets + 1,
        QueueKind::ApproxGradient | QueueKind::CircularApprox => {
            let window = Window::for_alpha(spec.alpha).map_or(1, |w| w.buckets());
            spec.buckets = window;
            spec.granularity = range.div_ceil(window as u64).next_power_of_two();
        }
        _ => {}
    }
    spec
}

/// Receives the queue [`with_bench_queue`] builds, whatever its type.
pub trait Visit {
    /// What the visitor returns.
    type Out;
    /// Use the queue.
    fn visit<Q: RankQueue<u32> + 'static>(self, q: Q) -> Self::Out;
}

/// Build `kind` as the benchmarks run it for `workload` (see the module note) and hand it to
/// `visitor`: the visitor's code is monomorphized for each queue type.
pub fn with_bench_queue<V: Visit>(
    kind: QueueKind,
    workload: Workload,
    buckets: usize,
    capacity: usize,
    visitor: V,
) -> Result<V::Out, ConfigError> {
    let spec = bench_spec(kind, workload.range(), buckets, capacity);
    if !workload.moves() || kind.moving_range() || kind.exact() {
        let any = spec.build::<u32>()?;
        return Ok(with_any_queue!(any, q => visitor.visit(q)));
    }
    let cfg = CircularConfig::new(spec.buckets, spec.granularity, capacity);
    Ok(match kind {
        QueueKind::Ffs => visitor.visit(CircularQueue::<u32, _>::with_index(cfg, FlatBitmap::new)?),
        QueueKind::Gradient => visitor.visit(CircularQueue::<u32, _>::with_index(
            cfg,
            GradientIndex::new,
        )?),
        QueueKind::ApproxGradient => {
            visitor.visit(CircularApproxQueue::<u32>::new(cfg, spec.alpha)?)
        }
        QueueKind::BucketHeap => {
            visitor.visit(CircularQueue::<u32, _>::with_index(cfg, HeapIndex::new)?)
        }
        _ => visitor.visit(CircularFfsQueue::<u32>::new(cfg)?),
    })
}

/// Push `n` items with ranks uniform in `[0, range)`; items are `0..n`.
pub fn fill<Q: RankQueue<u32>>(q: &mut Q, n: usize, range: u64, rng: &mut Rng) {
    for i in 0..n as u32 {
        let _ = q.push(rng.next_u64() & (range - 1), i);
    }
}

/// `ops` hold operations. Returns a checksum so the work cannot be optimized away.
#[inline(never)]
pub fn hold<Q: RankQueue<u32>>(q: &mut Q, ops: usize, range: u64, rng: &mut Rng) -> u64 {
    let mut sum = 0u64;
    for _ in 0..ops {
        let Some(e) = q.pop_min() else { break };
        sum = sum.wrapping_add(e.rank);
        let next = e.rank + (rng.next_u64() & (range - 1));
        let _ = q.push(next, e.item);
    }
    sum
}

/// Per-flow packet gaps in ns for `flows` flows with rates log-uniform in [1 Mbit/s, 10 Gbit/s].
pub fn pacing_gaps(flows: usize, rng: &mut Rng) -> Vec<u64> {
    (0..flows)
        .map(|_| {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let rate_bps = 10f64.powf(6.0 + 4.0 * u);
            ((PACKET_BYTES * 8) as f64 * 1e9 / rate_bps) as u64
        })
        .collect()
}

/// Queue every flow once, at a random phase within its gap.
pub fn pacing_fill<Q: RankQueue<u32>>(q: &mut Q, gaps: &[u64], rng: &mut Rng) {
    for (flow, &gap) in gaps.iter().enumerate() {
        let _ = q.push(rng.next_u64() % gap.max(1), flow as u32);
    }
}

/// `ops` pacing operations: pop the earliest flow, push it back one packet time later.
#[inline(never)]
pub fn pacing<Q: RankQueue<u32>>(q: &mut Q, ops: usize, gaps: &[u64]) -> u64 {
    let mut sum = 0u64;
    for _ in 0..ops {
        let Some(e) = q.pop_min() else { break };
        sum = sum.wrapping_add(e.rank);
        let _ = q.push(e.rank + gaps[e.item as usize], e.item);
    }
    sum
}

/// Pop everything; returns a checksum.
#[inline(never)]
pub fn drain<Q: RankQueue<u32>>(q: &mut Q) -> u64 {
    let mut sum = 0u64;
    while let Some(e) = q.pop_min() {
        sum = sum.wrapping_add(e.rank ^ u64::from(e.item));
    }
    sum
}

/// Rounds of the drain workload on one structure: each fills the queue with `n` ranks uniform in
/// `[base, base + range)`, then empties it. A moving-range structure's range only moves forward:
/// a timing wheel files a rank behind its front in its front slot, so a fill below the last rank
/// handed out would leave in arrival order, unsorted. For those, `base` follows the last rank
/// each round handed out; for the others it stays 0.
pub struct DrainRounds {
    n: usize,
    moving: bool,
    base: u64,
}

impl DrainRounds {
    /// Rounds of `n` items on a structure of `kind`.
    pub fn new(kind: QueueKind, n: usize) -> Self {
        DrainRounds {
            n,
            moving: kind.moving_range(),
            base: 0,
        }
    }

    /// Run `rounds` rounds (`rounds * n` operations); returns a checksum.
    #[inline(never)]
    pub fn run<Q: RankQueue<u32>>(
        &mut self,
        q: &mut Q,
        rounds: usize,
        range: u64,
        rng: &mut Rng,
    ) -> u64 {
        let mut sum = 0u64;
        for _ in 0..rounds {
            for i in 0..self.n as u32 {
                let _ = q.push(self.base + (rng.next_u64() & (range - 1)), i);
            }
            let mut last = self.base;
            while let Some(e) = q.pop_min() {
                sum = sum.wrapping_add(e.rank ^ u64::from(e.item));
                last = e.rank;
            }
            if self.moving {
                self.base = last;
            }
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Check(Workload);

    impl Visit for Check {
        type Out = ();
        fn visit<Q: RankQueue<u32> + 'static>(self, mut q: Q) {
            let w = self.0;
            let range = w.range();
            let mut rng = Rng::new(7);
            match w {
                Workload::Hold => {
                    fill(&mut q, 5000, range, &mut rng);
                    hold(&mut q, 50_000, range, &mut rng);
                }
                Workload::Pacing => {
                    let gaps = pacing_gaps(5000, &mut rng);
                    pacing_fill(&mut q, &gaps, &mut rng);
                    pacing(&mut q, 50_000, &gaps);
                }
                Workload::Drain => fill(&mut q, 5000, range, &mut rng),
            }
            assert_eq!(q.len(), 5000, "{}", w.name());
            let st = q.stats();
            assert_eq!(
                st.clamped + st.rejected_range,
                0,
                "{}: sized to fit",
                w.name()
            );
            drain(&mut q);
            assert!(q.is_empty());
        }
    }

    #[test]
    fn every_structure_holds_every_workload_without_loss_or_clamping() {
        for kind in QueueKind::ALL {
            for w in Workload::ALL {
                with_bench_queue(kind, w, 1 << 10, 5000, Check(w)).unwrap();
            }
        }
    }

    #[test]
    fn exact_structures_pop_in_rank_order_in_hold() {
        let mut q = bench_spec(QueueKind::BinaryHeap, 1 << 20, 1 << 10, 100)
            .build::<u32>()
            .unwrap();
        let mut rng = Rng::new(1);
        fill(&mut q, 100, 1 << 20, &mut rng);
        let mut last = 0;
        for _ in 0..1000 {
            let e = q.pop_min().unwrap();
            assert!(e.rank >= last);
            last = e.rank;
            q.push(e.rank + (rng.next_u64() & 1023), e.item).unwrap();
        }
    }
}
