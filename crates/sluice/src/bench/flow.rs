//! `sluice bench flow`: the lossless flow-control path of one engine, in one process.
//!
//! - **`doorbell` vs `poll_all`** (Backdraft Fig. 16): engine throughput in million packets
//!   per second over 1 to 16 384 data queues (DPFQ per-flow queues), traffic skewed over the
//!   queues by a Zipf law (s = 0.99, YCSB's; hot flows scattered over the ids). One thread plays
//!   producer and engine on one core: the producer sends a burst of 32 packets (DPDK's burst),
//!   each queued in its flow's data queue, then the engine takes them all. The doorbell engine
//!   ([`DoorbellEngine`], single-threaded rings, four of them as for four producer cores, a
//!   post per packet merged into the ring's newest doorbell when the flow repeats) polls only
//!   its rings; the poll-all engine ([`PollAllEngine`], BESS) scans the data queues
//!   round-robin, up to 32 packets per non-empty queue, until it has found the burst (a check
//!   reads the queue's 4-byte length, 16 queues per cache line: cheaper than polling a BESS
//!   ring, so a generous baseline). One thread rather than a producer thread: on a shared
//!   2-core machine a second busy thread measures the neighbours, and the producer's work (a
//!   DPFQ push per packet, plus the doorbell post for the doorbell engine) is the same on both
//!   sides and is timed with them. Mpps = packets / time of the whole loop.
//! - **`admission`**: ns per packet of the zD regulator and its admission path over N flows,
//!   N in {1e3 .. 1e6}, with a trivial scheduler (a FIFO of fixed capacity) so that no
//!   scheduler cost is in the number. Every flow has one packet in flight and sends the next
//!   when it leaves (closed loop, TSQ-like); the scheduled buffer holds 256 packets whatever N
//!   (zD), so all other flows wait paused, resumed in FIFO order (the pipeline's default). One
//!   timed packet is exactly what `Pipeline::egress` plus the `Pipeline::ingress` of the next
//!   packet do around the scheduler, minus its source-key map and descriptor table (flows are
//!   dense ids here): FIFO pop; completion `complete`; admission `departed`, which resumes the
//!   oldest paused flow; for it `Dpfq::peek`, admission `offer` (admitted into the reserved
//!   slot), `Dpfq::pop`, completion `admit`, FIFO push, `Dpfq::peek` and admission `idle`;
//!   then the departed flow's next packet: `Dpfq::push`, `offer` (paused: the buffer is full),
//!   into the paused queue. Flows start paused in a random order, so the flow resumed next is
//!   a random one, as with real arrivals.
//! - **memory**: bytes per idle flow and per active flow (one packet queued) of the pipeline's
//!   per-flow state, measured as the address space each structure reserves per flow (the
//!   difference of `VmData` in `/proc/self/status` across building it for 2^20 flows, or 2^16
//!   with `--quick`), with `size_of` alongside where the type is public.
//!
//! Method, as in `sluice bench queues`: every runner (each engine at each queue count, the
//! admission loop at each flow count) is built and warmed first, then all are timed
//! round-robin, `--repeats` rounds of a short warm-up and `--packets` timed packets each; a cell
//! is the median of its rounds. Timing every size in the same rounds makes the ratios between
//! sizes (the targets) hold on a noisy machine. Every runner checks afterwards that it handed
//! out every packet it queued, exactly once (the engines: as many as sent, and the sum of their
//! flows and items is the sum of those sent; the admission loop: one completion per packet).

use super::common::{fmt_n, median, no_duplicates, parse_count, parse_repeats, pick};
use crate::report::{self, Panel, Series, Table};
use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use sluice_flow::admission::{AdmissionConfig, Verdict};
use sluice_flow::completion::{Outcome, Ticket};
use sluice_flow::doorbell::{DoorbellEngine, LocalRing, PollAllEngine};
use sluice_flow::dpfq::{FlowQueue, INLINE, RingPool};
use sluice_flow::flows::{FlowRecord, FlowTable};
use sluice_flow::pipeline::{Pipeline, PipelineConfig};
use sluice_queue::workload::Rng;
use sluice_sched::{NodeSpec, PolicyKind, SchedConfig, Scheduler, TreeBuilder};
use std::collections::VecDeque;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

/// Options of `sluice bench flow`.
#[derive(Args, Debug)]
pub struct FlowArgs {
    /// CI-sized run: 1, 16, 1024 and 16384 queues, 1e3 to 1e5 flows, 1e5 packets per timing,
    /// memory at 2^16 flows.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object per measurement on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// Cases: doorbell, poll_all, admission, memory. Default: all.
    #[arg(long, value_delimiter = ',')]
    case: Vec<String>,
    /// Data queue counts for doorbell and poll_all, comma separated.
    /// Default: 1,16,256,1024,4096,16384.
    #[arg(long, value_delimiter = ',', value_parser = parse_count, allow_negative_numbers = true)]
    queues: Vec<usize>,
    /// Flow counts for admission, comma separated. Default: 1e3,1e4,1e5,1e6.
    #[arg(long, value_delimiter = ',', value_parser = parse_count, allow_negative_numbers = true)]
    flows: Vec<usize>,
    /// Packets per timing (default 1e6, or 1e5 with --quick).
    #[arg(long, value_parser = parse_count, allow_negative_numbers = true)]
    packets: Option<usize>,
    /// Timed repeats per cell; the median is reported (the slower of the middle two for an
    /// even count: the higher ns per packet, the lower Mpps).
    #[arg(long, default_value_t = 5, value_parser = parse_repeats, allow_negative_numbers = true)]
    repeats: usize,
    /// Directory for bench-flow.csv, bench-flow-memory.csv and bench-flow.svg.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

/// Packets the producer sends before the engine drains (a DPDK burst).
const BURST: usize = 32;
/// Doorbell rings (producer cores).
const RINGS: usize = 4;
/// Packets the poll-all engine takes from one queue per visit.
const POLL_BURST: usize = 32;
/// Zipf exponent of the traffic over the data queues.
const ZIPF_S: f64 = 0.99;
/// Flow choices precomputed per queue count (the producer cycles through them).
const TRACE: usize = 1 << 16;
/// The scheduled buffer of the admission loop, packets (fixed, whatever the flow count).
const BUFFER: usize = 256;
/// How many resumes ahead the admission loop prefetches (the pipeline's constant).
const PREFETCH_AHEAD: usize = sluice_flow::pipeline::PREFETCH_AHEAD;
/// Packets per DPFQ ring (the pipeline's default).
const RING_SLOTS: usize = 16;
/// Most data queues.
const MAX_QUEUES: usize = 1 << 24;
/// Most flows of the admission loop.
const MAX_FLOWS: usize = 1 << 24;

/// The benchmark cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Doorbell,
    PollAll,
    Admission,
    Memory,
}

impl Case {
    const ALL: [Case; 4] = [Case::Doorbell, Case::PollAll, Case::Admission, Case::Memory];

    fn name(self) -> &'static str {
        match self {
            Case::Doorbell => "doorbell",
            Case::PollAll => "poll_all",
            Case::Admission => "admission",
            Case::Memory => "memory",
        }
    }
}

#[derive(Serialize)]
struct QueuesLine<'a> {
    bench: &'static str,
    case: &'a str,
    queues: usize,
    mpps: f64,
}

#[derive(Serialize)]
struct FlowsLine<'a> {
    bench: &'static str,
    case: &'a str,
    flows: usize,
    ns_per_packet: f64,
}

/// A `memory` row as JSON (`null` where the state cannot be measured).
#[derive(Serialize)]
struct MemoryLine<'a> {
    bench: &'static str,
    case: &'static str,
    state: &'a str,
    flows: usize,
    bytes_per_idle_flow: Option<f64>,
    bytes_per_active_flow: Option<f64>,
}

/// One measured cell: a throughput cell has `queues`, an admission cell `flows`.
struct Cell {
    case: Case,
    size: usize,
    ns_per_packet: f64,
}

impl Cell {
    fn mpps(&self) -> f64 {
        1e3 / self.ns_per_packet
    }
}

/// Something timed: runs `packets` packets and returns how many it ran.
trait Runner {
    fn run(&mut self, packets: usize) -> usize;
    /// Everything queued came out exactly once, and the loop is in its steady state.
    fn verify(&self) -> anyhow::Result<()>;
}

/// `TRACE` flow ids over `queues` queues, Zipf-distributed by rank, ranks scattered over ids.
fn zipf_trace(queues: usize, rng: &mut Rng) -> Vec<u32> {
    let mut cdf = Vec::with_capacity(queues);
    let mut sum = 0.0;
    for r in 1..=queues {
        sum += 1.0 / (r as f64).powf(ZIPF_S);
        cdf.push(sum);
    }
    let mut ids: Vec<u32> = (0..queues as u32).collect();
    for i in (1..ids.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        ids.swap(i, j);
    }
    (0..TRACE)
        .map(|_| {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * sum;
            let rank = cdf.partition_point(|&c| c < u).min(queues - 1);
            ids[rank]
        })
        .collect()
}

/// What the engines' sink adds up (`flow ^ item`, wrapping) over the first `sent` packets the
/// runners send: packet `k` is item `k` (wrapping) of flow `trace[k % TRACE]`. Equal to the
/// sink's sum when every packet sent came out exactly once.
fn sent_sum(trace: &[u32], sent: u64) -> u64 {
    (0..sent).fold(0u64, |sum, k| {
        let f = trace[k as usize & (TRACE - 1)];
        sum.wrapping_add(u64::from(f ^ k as u32))
    })
}

/// The pool both engines take their data queues' rings from: at most a burst is queued.
fn engine_pool() -> anyhow::Result<std::sync::Arc<RingPool>> {
    RingPool::new(4 * BURST, RING_SLOTS, 4 * BURST).context("building the ring pool")
}

struct DoorbellRunner {
    engine: DoorbellEngine<LocalRing>,
    trace: Vec<u32>,
    pos: usize,
    item: u32,
    sent: u64,
    taken: u64,
    refused: u64,
    sum: u64,
}

impl DoorbellRunner {
    fn new(queues: usize, trace: Vec<u32>) -> anyhow::Result<Self> {
        Ok(DoorbellRunner {
            engine: DoorbellEngine::local(engine_pool()?, queues, RINGS, 2 * BURST)
                .context("building the doorbell engine")?,
            trace,
            pos: 0,
            item: 0,
            sent: 0,
            taken: 0,
            refused: 0,
            sum: 0,
        })
    }
}

impl Runner for DoorbellRunner {
    fn run(&mut self, packets: usize) -> usize {
        let mut done = 0;
        let mut sum = self.sum;
        while done < packets {
            for _ in 0..BURST {
                let f = self.trace[self.pos];
                self.pos = (self.pos + 1) & (TRACE - 1);
                // Each flow belongs to one producer core and rings that core's doorbell.
                match self.engine.send(f as usize % RINGS, f, self.item) {
                    Ok(()) => self.sent += 1,
                    Err(_) => self.refused += 1,
                }
                self.item = self.item.wrapping_add(1);
            }
            let got = self.engine.drain(usize::MAX, |f, i| {
                sum = sum.wrapping_add(u64::from(f ^ i));
            });
            if got == 0 {
                break;
            }
            done += got;
        }
        self.taken += done as u64;
        self.sum = black_box(sum);
        done
    }

    fn verify(&self) -> anyhow::Result<()> {
        if self.refused > 0
            || self.sent != self.taken
            || self.engine.stats().short > 0
            || self.sum != sent_sum(&self.trace, self.sent)
        {
            bail!(
                "doorbell engine: {} sent, {} taken, {} refused, {} short, or not the packets sent",
                self.sent,
                self.taken,
                self.refused,
                self.engine.stats().short
            );
        }
        Ok(())
    }
}

struct PollAllRunner {
    engine: PollAllEngine,
    trace: Vec<u32>,
    pos: usize,
    item: u32,
    sent: u64,
    taken: u64,
    refused: u64,
    sum: u64,
}

impl PollAllRunner {
    fn new(queues: usize, trace: Vec<u32>) -> anyhow::Result<Self> {
        Ok(PollAllRunner {
            engine: PollAllEngine::new(engine_pool()?, queues, POLL_BURST)
                .context("building the poll-all engine")?,
            trace,
            pos: 0,
            item: 0,
            sent: 0,
            taken: 0,
            refused: 0,
            sum: 0,
        })
    }
}

impl Runner for PollAllRunner {
    fn run(&mut self, packets: usize) -> usize {
        let mut done = 0;
        let mut sum = self.sum;
        while done < packets {
            let mut queued = 0;
            for _ in 0..BURST {
                let f = self.trace[self.pos];
                self.pos = (self.pos + 1) & (TRACE - 1);
                match self.engine.enqueue(f, self.item) {
                    Ok(()) => {
                        self.sent += 1;
                        queued += 1;
                    }
                    Err(_) => self.refused += 1,
                }
                self.item = self.item.wrapping_add(1);
            }
            // The poller does not know where the packets are: it scans until it found them.
            let mut got = 0;
            while got < queued {
                let n = self.engine.poll(queued - got, |f, i| {
                    sum = sum.wrapping_add(u64::from(f ^ i));
                });
                if n == 0 {
                    break;
                }
                got += n;
            }
            if got == 0 {
                break;
            }
            done += got;
        }
        self.taken += done as u64;
        self.sum = black_box(sum);
        done
    }

    fn verify(&self) -> anyhow::Result<()> {
        if self.refused > 0
            || self.sent != self.taken
            || self.sum != sent_sum(&self.trace, self.sent)
        {
            bail!(
                "poll-all engine: {} sent, {} taken, {} refused, or not the packets sent",
                self.sent,
                self.taken,
                self.refused
            );
        }
        Ok(())
    }
}

/// The admission loop; see the module note. A trivial scheduler (a FIFO of `BUFFER` packets)
/// stands in for the real one.
struct AdmissionRunner {
    flows: usize,
    /// Admission, DPFQ and completions over one record per flow, as in the pipeline.
    t: FlowTable,
    /// The trivial scheduler: (source, completion ticket), oldest first.
    fifo: VecDeque<(u32, Ticket)>,
    next_item: u32,
    sent: u64,
    errors: u64,
    sum: u64,
}

impl AdmissionRunner {
    fn new(flows: usize) -> anyhow::Result<Self> {
        let pool = RingPool::new(flows + BUFFER, RING_SLOTS, flows + BUFFER)
            .context("building the ring pool")?;
        let t = FlowTable::new(AdmissionConfig::new(BUFFER, flows), pool, 2)
            .context("building the admission regulator")?;
        let mut r = AdmissionRunner {
            flows,
            t,
            fifo: VecDeque::with_capacity(BUFFER),
            next_item: 0,
            sent: 0,
            errors: 0,
            sum: 0,
        };
        // Every flow sends its first packet, in a random order: BUFFER are admitted, the rest
        // pause in that order.
        let mut order: Vec<u32> = (0..flows as u32).collect();
        let mut rng = Rng::new(0xad31 ^ flows as u64);
        for i in (1..order.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        for f in order {
            r.ingress(f);
        }
        Ok(r)
    }

    /// The source's next packet arrives.
    #[inline]
    fn ingress(&mut self, src: u32) {
        let item = self.next_item;
        self.next_item = self.next_item.wrapping_add(1);
        if self.t.push(src, item).is_err() {
            self.errors += 1;
            return;
        }
        self.pump(src);
    }

    /// Move `src`'s packets into the scheduler while admission lets them, as `Pipeline::pump`
    /// does; a source with nothing left hands a reserved slot on (`idle`), and the source it
    /// resumes is pumped next.
    #[inline]
    fn pump(&mut self, mut s: u32) {
        loop {
            let Some(item) = self.t.peek(s) else {
                match self.t.idle(s) {
                    Some(next) => {
                        s = next;
                        continue;
                    }
                    None => return,
                }
            };
            if self.t.offer(s, 0) != Verdict::Admit {
                return;
            }
            self.t.pop(s);
            match self.t.admit(s, u64::from(item)) {
                Some(t) => self.fifo.push_back((s, t)),
                None => self.errors += 1,
            }
        }
    }

    /// One packet leaves (the oldest in the FIFO) and its flow sends the next.
    #[inline]
    fn step(&mut self) -> bool {
        let Some((src, t)) = self.fifo.pop_front() else {
            return false;
        };
        // As `Pipeline::egress` does: start loading the state of the source resumed a few
        // departures from now, so that its cache misses overlap this packet's work.
        if let Some(f) = self.t.upcoming(PREFETCH_AHEAD) {
            self.t.prefetch(f);
        }
        match self.t.complete(t, Outcome::Sent) {
            Ok(c) => self.sum = self.sum.wrapping_add(c.token),
            Err(_) => self.errors += 1,
        }
        if let Some(next) = self.t.departed(src) {
            self.pump(next);
        }
        self.sent += 1;
        self.ingress(src);
        true
    }
}

impl Runner for AdmissionRunner {
    fn run(&mut self, packets: usize) -> usize {
        let mut done = 0;
        while done < packets && self.step() {
            done += 1;
        }
        self.sum = black_box(self.sum);
        done
    }

    fn verify(&self) -> anyhow::Result<()> {
        let paused = self.flows.saturating_sub(BUFFER);
        let ok = self.errors == 0
            && self.fifo.len() == BUFFER.min(self.flows)
            && self.t.completions().len() == self.fifo.len()
            && self.t.admission().occupancy() == self.fifo.len()
            && self.t.admission().paused() == paused
            && self.t.queues().packets() == paused;
        if !ok {
            bail!(
                "admission loop at {} flows left its steady state: {} errors, {} in the FIFO, \
                 {} in flight, {} paused, {} queued",
                self.flows,
                self.errors,
                self.fifo.len(),
                self.t.completions().len(),
                self.t.admission().paused(),
                self.t.queues().packets()
            );
        }
        Ok(())
    }
}

/// Time `runners` round-robin: a warm-up each, then `repeats` rounds of a short warm-up and
/// `packets` timed packets each. ns per packet per runner (median of its rounds).
fn measure(
    runners: &mut [Box<dyn Runner>],
    warm: &[usize],
    packets: usize,
    repeats: usize,
    pb: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<f64>> {
    for (r, &w) in runners.iter_mut().zip(warm) {
        r.run(w);
    }
    let mut samples = vec![Vec::with_capacity(repeats); runners.len()];
    for _ in 0..repeats {
        for (r, s) in runners.iter_mut().zip(&mut samples) {
            r.run(packets / 10);
            let t = Instant::now();
            let done = r.run(packets);
            let ns = t.elapsed().as_nanos() as f64;
            if done == 0 {
                bail!("a runner stopped taking packets");
            }
            s.push(ns / done as f64);
            pb.inc(1);
        }
    }
    for r in runners.iter() {
        r.verify()?;
    }
    Ok(samples.into_iter().map(median).collect())
}

/// Address space the process has reserved for data, bytes (Linux); `None` elsewhere.
fn vm_data() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmData:"))?;
    let kb: usize = line
        .trim_start_matches("VmData:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Bytes per unit (flow or packet) that building `f(n)` reserves: the difference of `VmData`
/// between building it at `big` and at `small` units, divided by `big - small`, so that fixed
/// costs (a scheduler's shaper wheel, say) cancel. Both values are pushed on `held` and stay
/// alive until the caller drops it, so that no measurement reuses memory another one freed.
fn slope<T: 'static>(
    small: usize,
    big: usize,
    held: &mut Vec<Box<dyn std::any::Any>>,
    f: impl Fn(usize) -> anyhow::Result<T>,
) -> anyhow::Result<Option<f64>> {
    let mut delta = |n: usize| -> anyhow::Result<Option<usize>> {
        let before = vm_data();
        let value = f(n)?;
        let after = vm_data();
        held.push(Box::new(value));
        Ok(before.zip(after).map(|(b, a)| a.saturating_sub(b)))
    };
    let s = delta(small)?;
    let b = delta(big)?;
    Ok(s.zip(b)
        .map(|(s, b)| (b as f64 - s as f64) / (big - small) as f64))
}

/// One row of the memory table.
struct MemRow {
    what: &'static str,
    idle: Option<f64>,
    active: Option<f64>,
    how: String,
}

/// A one-leaf FIFO scheduler over `flows` flow slots and `capacity` packets.
fn fifo_scheduler(capacity: usize, flows: usize) -> anyhow::Result<Scheduler> {
    let mut b = TreeBuilder::new(SchedConfig {
        capacity,
        flows,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("fifo", PolicyKind::Fifo));
    b.default_leaf(root);
    b.build().context("building a one-leaf FIFO scheduler")
}

/// Measure the pipeline's per-flow state at `flows` flows; see the module note.
fn measure_memory(flows: usize) -> anyhow::Result<Vec<MemRow>> {
    // The scheduled buffer and the packet bound stay small and fixed; every figure is the
    // slope between `small` and `flows` units.
    const PACKETS: usize = 4096;
    let small = PACKETS.min(flows / 2);
    let mut held = Vec::new();
    let table = slope(small, flows, &mut held, |n| {
        let pool = RingPool::new(1, RING_SLOTS, 1)?;
        Ok(FlowTable::<()>::new(
            AdmissionConfig::new(BUFFER, n),
            pool,
            2,
        )?)
    })?;
    let ring = slope(small, flows, &mut held, |n| {
        Ok(RingPool::new(n, RING_SLOTS, n)?)
    })?;
    let sched = slope(small, flows, &mut held, |n| fifo_scheduler(BUFFER, n))?;
    let build = |sources: usize, max_packets: usize| -> anyhow::Result<Pipeline> {
        let sched = fifo_scheduler(BUFFER, BUFFER)?;
        Pipeline::new(sched, PipelineConfig::new(sources, BUFFER, max_packets))
            .context("building a pipeline")
    };
    // Per source, with the packet bound (so the rings) fixed.
    let pipeline = slope(small, flows, &mut held, |n| build(n, PACKETS))?;
    // Per packet of the bound, with one source: a descriptor, its free-list entry and 1/16 of
    // a ring.
    let desc = slope(small, flows, &mut held, |n| build(1, n))?;
    drop(held);
    memory_rows(&Slopes {
        table,
        ring,
        sched,
        pipeline,
        desc,
    })
}

/// What [`measure_memory`] measures, bytes per unit (`None` where `VmData` cannot be read).
struct Slopes {
    /// Per flow of a `FlowTable`.
    table: Option<f64>,
    /// Per ring of a `RingPool`.
    ring: Option<f64>,
    /// Per flow slot of a one-leaf scheduler.
    sched: Option<f64>,
    /// Per source of a `Pipeline` with a fixed packet bound.
    pipeline: Option<f64>,
    /// Per packet of a `Pipeline`'s bound, with one source.
    desc: Option<f64>,
}

/// The memory table's rows from the measured slopes.
fn memory_rows(s: &Slopes) -> anyhow::Result<Vec<MemRow>> {
    let &Slopes {
        table,
        ring,
        sched,
        pipeline,
        desc,
    } = s;
    // The pipeline's own tables: its slope minus the parts measured alone.
    let own = pipeline.zip(table).map(|(p, t)| p - t);
    let ring_bytes = std::mem::size_of::<u32>() * RING_SLOTS;
    let desc_only = desc.zip(ring).map(|(d, r)| d - r / RING_SLOTS as f64);
    let sum = |xs: &[Option<f64>]| xs.iter().copied().sum::<Option<f64>>();
    let idle_total = pipeline;
    // One packet queued stays inline in the flow's record: no ring.
    let active_total = sum(&[pipeline, desc_only]);
    Ok(vec![
        MemRow {
            what: "flow record (admission, DPFQ queue, in flight) + paused-queue room",
            idle: table,
            active: table,
            how: format!(
                "FlowTable::new: one {} B line per flow (queue head, length and {INLINE} packets \
                 inline: {} B), 4 B of paused FIFO",
                std::mem::size_of::<FlowRecord<()>>(),
                std::mem::size_of::<FlowQueue>()
            ),
        },
        MemRow {
            what: "dpfq ring (only beyond 2 queued packets)",
            idle: Some(0.0),
            active: Some(0.0),
            how: format!(
                "{:.1} B per ring in use: {ring_bytes} B of slots + header + allocator \
                 (RingPool::bytes: {} per ring)",
                ring.unwrap_or(0.0),
                engine_pool()?.bytes() / (4 * BURST)
            ),
        },
        MemRow {
            what: "pipeline source table (key, key map, lists)",
            idle: own,
            active: own,
            how: "Pipeline::new slope minus the flow records".into(),
        },
        MemRow {
            what: "packet descriptor (per packet, not per flow)",
            idle: Some(0.0),
            active: desc_only,
            how: format!(
                "Pipeline::new slope over max_packets (Packet is {} B)",
                std::mem::size_of::<sluice_sched::Packet>()
            ),
        },
        MemRow {
            what: "total: pipeline per source",
            idle: idle_total,
            active: active_total,
            how: "target: <= 64 B per idle flow".into(),
        },
        MemRow {
            // max_packets / (INLINE + 1) >= sources: the reservation is one ring per source.
            what: "+ rings reserved per source if max_packets >= 3 * sources",
            idle: ring,
            active: ring,
            how: format!(
                "Pipeline::new reserves min(sources, max_packets / {}) rings ({} B each) for flows \
                 with more than {INLINE} packets",
                INLINE + 1,
                ring.map_or(0.0, |r| r.round())
            ),
        },
        MemRow {
            what: "scheduler flow entry (while admitted)",
            idle: sched,
            active: sched,
            how: "SchedConfig::flows slope, reserved".into(),
        },
        MemRow {
            what: "doorbell engine, beyond its DPFQ queues",
            idle: Some(0.0),
            active: Some(0.0),
            how: format!(
                "{} B per ring slot, nothing per flow",
                std::mem::size_of::<sluice_flow::doorbell::Doorbell>()
            ),
        },
    ])
}

/// Run the benchmark.
pub fn run(args: &FlowArgs) -> anyhow::Result<()> {
    let cases = pick(&args.case, &Case::ALL, Case::name, "case")?;
    let queue_counts: Vec<usize> = if !args.queues.is_empty() {
        args.queues.clone()
    } else if args.quick {
        vec![1, 16, 1024, 16_384]
    } else {
        vec![1, 16, 256, 1024, 4096, 16_384]
    };
    let flow_counts: Vec<usize> = if !args.flows.is_empty() {
        args.flows.clone()
    } else if args.quick {
        vec![1_000, 10_000, 100_000]
    } else {
        vec![1_000, 10_000, 100_000, 1_000_000]
    };
    if let Some(&q) = queue_counts.iter().find(|&&q| q > MAX_QUEUES) {
        bail!("--queues {q} is more than the {MAX_QUEUES} supported");
    }
    if let Some(&f) = flow_counts.iter().find(|&&f| f > MAX_FLOWS) {
        bail!("--flows {f} is more than the {MAX_FLOWS} supported");
    }
    no_duplicates(&queue_counts, "--queues")?;
    no_duplicates(&flow_counts, "--flows")?;
    let packets = args
        .packets
        .unwrap_or(if args.quick { 100_000 } else { 1_000_000 });
    let mem_flows = if args.quick { 1 << 16 } else { 1 << 20 };
    let engines: Vec<Case> = cases
        .iter()
        .copied()
        .filter(|c| matches!(c, Case::Doorbell | Case::PollAll))
        .collect();
    let admission = cases.contains(&Case::Admission);
    // A list for cases the run leaves out would do nothing: say so rather than measure
    // without it (`--case memory --flows 1e6` is not memory at 1e6 flows).
    if !args.flows.is_empty() && !admission {
        bail!(
            "--flows sets the admission case's flow counts, and --case leaves admission out \
             (memory is measured at 2^20 flows, 2^16 with --quick)"
        );
    }
    if !args.queues.is_empty() && engines.is_empty() {
        bail!(
            "--queues sets the doorbell and poll_all cases' queue counts, and --case leaves both out"
        );
    }
    // The files this run writes (see the end of this function).
    let mut files = Vec::new();
    if !engines.is_empty() || admission {
        files.extend(["bench-flow.csv", "bench-flow.svg"]);
    }
    if cases.contains(&Case::Memory) {
        files.push("bench-flow-memory.csv");
    }
    report::prepare_out_files(&args.out, "--out", &files)?;

    // Memory first, while the allocator has freed little (so reservations show in VmData).
    let memory = if cases.contains(&Case::Memory) {
        Some(measure_memory(mem_flows)?)
    } else {
        None
    };

    let timings = engines.len() * queue_counts.len() + usize::from(admission) * flow_counts.len();
    let pb = report::progress((timings * args.repeats) as u64);
    let mut cells = Vec::new();
    if !engines.is_empty() {
        pb.set_message("doorbell and poll_all: building");
        let mut runners: Vec<Box<dyn Runner>> = Vec::new();
        let mut labels = Vec::new();
        for &q in &queue_counts {
            let trace = zipf_trace(q, &mut Rng::new(0x21bf ^ q as u64));
            for &case in &engines {
                let r: Box<dyn Runner> = match case {
                    Case::Doorbell => Box::new(DoorbellRunner::new(q, trace.clone())?),
                    _ => Box::new(PollAllRunner::new(q, trace.clone())?),
                };
                runners.push(r);
                labels.push((case, q));
            }
        }
        pb.set_message("doorbell and poll_all");
        let warm = vec![TRACE; runners.len()];
        let ns = measure(&mut runners, &warm, packets, args.repeats, &pb)?;
        for ((case, size), ns_per_packet) in labels.into_iter().zip(ns) {
            cells.push(Cell {
                case,
                size,
                ns_per_packet,
            });
        }
    }
    if admission {
        let mut runners: Vec<Box<dyn Runner>> = Vec::new();
        for &f in &flow_counts {
            pb.set_message(format!("admission: building {} flows", fmt_n(f)));
            runners.push(Box::new(AdmissionRunner::new(f)?));
        }
        pb.set_message("admission");
        // Warm-up: every flow goes round once.
        let ns = measure(&mut runners, &flow_counts, packets, args.repeats, &pb)?;
        for (&size, ns_per_packet) in flow_counts.iter().zip(ns) {
            cells.push(Cell {
                case: Case::Admission,
                size,
                ns_per_packet,
            });
        }
    }
    pb.finish_and_clear();

    if args.json {
        for c in &cells {
            let text = if c.case == Case::Admission {
                serde_json::to_string(&FlowsLine {
                    bench: "flow",
                    case: c.case.name(),
                    flows: c.size,
                    ns_per_packet: report::one_decimal(c.ns_per_packet),
                })
            } else {
                serde_json::to_string(&QueuesLine {
                    bench: "flow",
                    case: c.case.name(),
                    queues: c.size,
                    mpps: report::significant(c.mpps(), 3),
                })
            }
            .context("encoding a JSON line")?;
            println!("{text}");
        }
        for r in memory.iter().flatten() {
            let line = MemoryLine {
                bench: "flow",
                case: Case::Memory.name(),
                state: r.what,
                flows: mem_flows,
                bytes_per_idle_flow: r.idle.map(report::one_decimal),
                bytes_per_active_flow: r.active.map(report::one_decimal),
            };
            println!(
                "{}",
                serde_json::to_string(&line).context("encoding a JSON line")?
            );
        }
    }

    let find = |case: Case, size: usize| cells.iter().find(|c| c.case == case && c.size == size);
    // Each throughput relative to its own value at 16 queues (or the smallest count measured).
    let ref_queues = if queue_counts.contains(&16) {
        16
    } else {
        queue_counts.iter().copied().min().unwrap_or(16)
    };
    let ref_flows = flow_counts.iter().copied().min().unwrap_or(1000);
    let relative = |c: &Cell| -> Option<f64> {
        match c.case {
            Case::Admission => find(c.case, ref_flows).map(|r| c.ns_per_packet / r.ns_per_packet),
            _ => find(c.case, ref_queues).map(|r| c.mpps() / r.mpps()),
        }
    };
    let over_poll = |q: usize| -> Option<f64> {
        Some(find(Case::Doorbell, q)?.mpps() / find(Case::PollAll, q)?.mpps())
    };

    if !args.json {
        if !engines.is_empty() {
            println!(
                "engine throughput, million packets per second (producer and engine on one core)"
            );
            println!(
                "bursts of {BURST} packets, Zipf s={ZIPF_S} over the queues; {RINGS} doorbell \
                 rings; poll_all takes up to {POLL_BURST} per queue visit"
            );
            println!("{packets} packets per timing, median of {}\n", args.repeats);
            let mut header = vec!["queues".to_string()];
            for &c in &engines {
                header.push(c.name().into());
            }
            if engines.len() == 2 {
                header.push("doorbell/poll_all".into());
            }
            for &c in &engines {
                header.push(format!("{} vs {ref_queues}q", c.name()));
            }
            let mut t = Table::new(header, 1);
            for &q in &queue_counts {
                let mut row = vec![q.to_string()];
                for &c in &engines {
                    row.push(find(c, q).map_or("-".into(), |c| format!("{:.1}", c.mpps())));
                }
                if engines.len() == 2 {
                    row.push(over_poll(q).map_or("-".into(), |r| format!("{r:.2}x")));
                }
                for &c in &engines {
                    let rel = find(c, q).and_then(relative);
                    row.push(rel.map_or("-".into(), |r| format!("{r:.2}x")));
                }
                t.row(row);
            }
            println!("{}", t.render());
        }
        if admission {
            println!(
                "admission path, ns per packet (DPFQ push/pop, zD offer/departed/resume, \
                 completion admit/complete; trivial FIFO scheduler)"
            );
            println!(
                "closed loop, one packet in flight per flow, scheduled buffer {BUFFER} packets; \
                 {packets} packets per timing, median of {}\n",
                args.repeats
            );
            let mut t = Table::new(
                vec![
                    "flows".into(),
                    "ns/packet".into(),
                    format!("vs {}", fmt_n(ref_flows)),
                ],
                1,
            );
            for &f in &flow_counts {
                let c = find(Case::Admission, f);
                t.row(vec![
                    fmt_n(f),
                    c.map_or("-".into(), |c| format!("{:.1}", c.ns_per_packet)),
                    c.and_then(relative)
                        .map_or("-".into(), |r| format!("{r:.2}x")),
                ]);
            }
            println!("{}", t.render());
        }
        if let Some(rows) = &memory {
            println!(
                "per-flow memory, bytes, at {mem_flows} flows (address space reserved per flow, \
                 from VmData)\n"
            );
            let mut t = Table::new(
                vec![
                    "state".into(),
                    "idle flow".into(),
                    "active flow".into(),
                    "counted".into(),
                ],
                1,
            );
            let b = |x: Option<f64>| x.map_or("n/a".into(), |v| format!("{v:.1}"));
            for r in rows {
                t.row(vec![r.what.into(), b(r.idle), b(r.active), r.how.clone()]);
            }
            println!("{}", t.render());
        }
    }

    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            let (queues, flows) = match c.case {
                Case::Admission => (String::new(), c.size.to_string()),
                _ => (c.size.to_string(), String::new()),
            };
            let over = match c.case {
                Case::Doorbell => over_poll(c.size).map_or(String::new(), |r| format!("{r:.3}")),
                _ => String::new(),
            };
            vec![
                c.case.name().into(),
                queues,
                flows,
                format!("{:.3}", c.mpps()),
                format!("{:.2}", c.ns_per_packet),
                relative(c).map_or(String::new(), |r| format!("{r:.3}")),
                over,
            ]
        })
        .collect();
    // Only the files this run has data for: a run of `memory` alone leaves an earlier run's
    // timings and plot in place.
    let mut written = Vec::new();
    if !cells.is_empty() {
        let csv = args.out.join("bench-flow.csv");
        report::write_csv(
            &csv,
            &[
                "case",
                "queues",
                "flows",
                "mpps",
                "ns_per_packet",
                "relative_to_reference",
                "doorbell_over_poll_all",
            ],
            &rows,
        )?;
        written.push(csv);
    }
    if let Some(rows) = &memory {
        let b = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.2}"));
        let mem_rows: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.what.replace(',', ";"),
                    mem_flows.to_string(),
                    b(r.idle),
                    b(r.active),
                ]
            })
            .collect();
        let csv = args.out.join("bench-flow-memory.csv");
        report::write_csv(
            &csv,
            &[
                "state",
                "flows",
                "bytes_per_idle_flow",
                "bytes_per_active_flow",
            ],
            &mem_rows,
        )?;
        written.push(csv);
    }
    let mut panels = Vec::new();
    if !engines.is_empty() {
        panels.push(Panel {
            title: "engine throughput (Mpps) vs data queues".into(),
            series: engines
                .iter()
                .map(|&case| Series {
                    label: case.name().into(),
                    points: cells
                        .iter()
                        .filter(|c| c.case == case)
                        .map(|c| (c.size as f64, c.mpps()))
                        .collect(),
                })
                .collect(),
        });
    }
    if admission {
        panels.push(Panel {
            title: "admission path (ns per packet) vs flows".into(),
            series: vec![Series {
                label: "admission".into(),
                points: cells
                    .iter()
                    .filter(|c| c.case == Case::Admission)
                    .map(|c| (c.size as f64, c.ns_per_packet))
                    .collect(),
            }],
        });
    }
    if !panels.is_empty() {
        let svg = args.out.join("bench-flow.svg");
        report::plot_loglog(&svg, &panels, "data queues / flows", "Mpps / ns per packet")?;
        written.push(svg);
    }
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    eprintln!("wrote {}", names.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_and_covers_the_range() {
        let t = zipf_trace(1024, &mut Rng::new(1));
        assert!(t.iter().all(|&f| f < 1024));
        let mut counts = vec![0usize; 1024];
        for &f in &t {
            counts[f as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        // Rank 1 of Zipf(0.99) over 1024 takes about 13% of the traffic.
        let top = counts[0] as f64 / t.len() as f64;
        assert!((0.10..0.17).contains(&top), "{top}");
        assert_eq!(zipf_trace(1, &mut Rng::new(1)), vec![0; TRACE]);
    }

    #[test]
    fn runners_hand_out_every_packet() {
        for q in [1, 64] {
            let trace = zipf_trace(q, &mut Rng::new(3));
            let mut d = DoorbellRunner::new(q, trace.clone()).unwrap();
            let mut p = PollAllRunner::new(q, trace).unwrap();
            assert!(d.run(1000) >= 1000);
            assert!(p.run(1000) >= 1000);
            d.verify().unwrap();
            p.verify().unwrap();
        }
        let mut a = AdmissionRunner::new(1000).unwrap();
        assert_eq!(a.run(5000), 5000);
        a.verify().unwrap();
        let mut small = AdmissionRunner::new(10).unwrap();
        assert_eq!(small.run(100), 100);
        small.verify().unwrap();
    }

    /// Equal counts are not "exactly once": a packet handed out twice and another never make
    /// the same count. Each engine runner also checks what it handed out against what it
    /// queued.
    #[test]
    fn runners_refuse_a_packet_handed_out_twice_in_place_of_another() {
        let trace = zipf_trace(64, &mut Rng::new(3));
        let mut d = DoorbellRunner::new(64, trace.clone()).unwrap();
        let mut p = PollAllRunner::new(64, trace).unwrap();
        d.run(1000);
        p.run(1000);
        // Item 5 of flow trace[5] out twice, item 7 never: the sink's sum changes by their
        // difference, the count not at all.
        let (f5, f7) = (u64::from(d.trace[5]), u64::from(d.trace[7]));
        let delta = (f5 ^ 5).wrapping_sub(f7 ^ 7);
        assert_ne!(delta, 0);
        d.sum = d.sum.wrapping_add(delta);
        p.sum = p.sum.wrapping_add(delta);
        assert!(d.verify().is_err());
        assert!(p.verify().is_err());
    }

    /// The memory rows from given slopes: with at least `INLINE + 1` packets of the bound per
    /// source, `Pipeline::new` reserves `min(sources, max_packets / (INLINE + 1))` = one ring
    /// per source, so that row is a whole ring per source.
    #[test]
    fn memory_rows_count_one_reserved_ring_per_source() {
        let rows = memory_rows(&Slopes {
            table: Some(68.0),
            ring: Some(104.0),
            sched: Some(24.0),
            pipeline: Some(118.0),
            desc: Some(146.5),
        })
        .unwrap();
        let row = |what: &str| rows.iter().find(|r| r.what.starts_with(what)).unwrap();
        let reserved = row("+ rings reserved per source");
        assert_eq!((reserved.idle, reserved.active), (Some(104.0), Some(104.0)));
        let own = row("pipeline source table");
        assert_eq!((own.idle, own.active), (Some(50.0), Some(50.0)));
        let desc = row("packet descriptor");
        assert_eq!((desc.idle, desc.active), (Some(0.0), Some(140.0)));
        let total = row("total: pipeline per source");
        assert_eq!((total.idle, total.active), (Some(118.0), Some(258.0)));
    }
}
