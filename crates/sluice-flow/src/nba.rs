//! The NIC-level bandwidth allocator (NBA, Carousel §3.4.3): aggregate rate limits shared by
//! per-core engines, redistributed periodically by max-min water-filling.
//!
//! Flows are hashed to engines, so the flows of one aggregate ("the tenant's 1 Gbit/s") land on
//! several engines, each with its own shaper. Every engine reports its usage of each aggregate
//! as cumulative `(bytes sent, timestamp)` samples ([`Usage`]); every interval (~100 ms,
//! [`NbaConfig::interval_ns`]) the allocator turns the samples into one demand per engine and
//! splits the aggregate's rate between the engines ([`water_fill`]). Each engine installs its
//! share as the rate of the aggregate's node in its own scheduler.
//!
//! **Demand** is the rate of the *last interval*: bytes between the sample used at the previous
//! allocation and the newest one, over the time between them. It is not smoothed (no EWMA): an
//! allocation already averages over a whole interval, and smoothing would spread the reaction
//! to a demand change over several intervals, each of which leaves capacity unused. A measured
//! rate only says what an engine *sent*, which its allocation caps; so an engine that used
//! (nearly) all of its allocation (more than its allocation minus half the headroom) is
//! *limited*: its demand is unknown and treated as [`Demand::Unbounded`]. An engine that has
//! not reported twice yet is unbounded too; an engine with no new sample keeps its estimate.
//!
//! **Water-filling**, per aggregate of rate `A` over `N` engines, with headroom
//! `h = max(1, A x headroom_bp / 10 000)` (1% by default, Carousel's figure):
//! 1. an idle engine (zero demand) gets exactly `h`, to ramp up from;
//! 2. every other engine wants its demand plus `h` of growth room (unbounded if limited);
//! 3. over the rest, `C = A - h x idle`, engines in increasing order of want take their want
//!    while it is at most an equal share of what is left; the others share what remains
//!    equally (the max-min level);
//! 4. if every want was met, what is left is spread equally over the non-idle engines (work
//!    conservation: nobody waits an interval to grow into spare capacity).
//!
//! Invariants (unit tests and proptests below): the allocations of an aggregate sum to `A` when
//! an engine is active and to `N x h <= A` when all are idle, never more; an idle engine gets
//! exactly `h`; every other engine gets at least `min(demand, floor(A / N))`; every allocation
//! is at least 1 bit/s, so it is a [`Rate`]. `N x h <= A` is checked at construction.
//!
//! Cost: recording a sample is O(1); an allocation is O(aggregates x N log N) and allocates
//! nothing (scratch space is reserved at construction). Time is passed in; nothing here reads a
//! clock or spawns a thread.

use sluice_sched::Rate;
use std::collections::HashSet;

/// Index of an aggregate: its position in the list given to [`Nba::new`].
pub type AggregateId = usize;

/// A named aggregate rate limit, shared by all engines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Aggregate {
    /// Its name; engines find the scheduler node to limit by this name.
    pub name: String,
    /// Its rate in bit/s, as configured (zero is refused at construction).
    pub rate_bps: u64,
}

impl Aggregate {
    /// An aggregate `name` limited to `rate`.
    pub fn new(name: &str, rate: Rate) -> Self {
        Aggregate {
            name: name.to_string(),
            rate_bps: rate.bps(),
        }
    }
}

/// Allocator settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NbaConfig {
    /// Time between allocations, ns (Carousel: ~100 ms).
    pub interval_ns: u64,
    /// Headroom for idle engines and growth room for the others, in basis points of the
    /// aggregate (100 = 1%, Carousel's figure); 1 to 10 000.
    pub headroom_bp: u32,
}

impl Default for NbaConfig {
    /// 100 ms, 1% headroom.
    fn default() -> Self {
        NbaConfig {
            interval_ns: 100_000_000,
            headroom_bp: 100,
        }
    }
}

/// Why an allocator cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NbaError {
    /// No engine to allocate to.
    #[error("the allocator needs at least one engine")]
    NoEngines,
    /// A zero allocation interval.
    #[error("the allocation interval must be positive")]
    ZeroInterval,
    /// An aggregate with a zero rate.
    #[error("aggregate `{name}` has a zero rate")]
    ZeroRate {
        /// The aggregate.
        name: String,
    },
    /// An aggregate rate of 2^63 bit/s or more.
    #[error("aggregate `{name}`: {bps} bit/s is above the largest rate (2^63 - 1 bit/s)")]
    RateTooLarge {
        /// The aggregate.
        name: String,
        /// Its rate.
        bps: u64,
    },
    /// Two aggregates with one name.
    #[error("aggregate `{0}` is named twice")]
    DuplicateName(String),
    /// Headroom outside 1..=10 000 basis points.
    #[error("headroom must be 1 to 10000 basis points, got {0}")]
    Headroom(u32),
    /// The engines' headroom alone exceeds an aggregate's rate.
    #[error(
        "aggregate `{name}`: {engines} engines x {headroom_bps} bit/s of headroom exceed its \
         {rate_bps} bit/s"
    )]
    HeadroomExceedsRate {
        /// The aggregate.
        name: String,
        /// Engines.
        engines: usize,
        /// Headroom per engine, bit/s.
        headroom_bps: u64,
        /// The aggregate's rate, bit/s.
        rate_bps: u64,
    },
}

/// One usage sample: an engine has sent `bytes` bytes of `aggregate` in all, as of `at` ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// The aggregate.
    pub aggregate: AggregateId,
    /// Bytes sent since the engine started (cumulative, so a lost sample loses nothing).
    pub bytes: u64,
    /// When the count was taken, ns.
    pub at: u64,
}

/// What an engine wants of an aggregate, as the water-filling sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Demand {
    /// A measured rate in bit/s; 0 is idle.
    Bounded(u64),
    /// Limited by its allocation (or not measured yet): it may want any share.
    Unbounded,
}

/// Split `total` bit/s over engines with these demands, max-min, with `headroom` bit/s for idle
/// engines and as growth room; see the module note. Returns one allocation per engine.
///
/// Requires `demands.len() x headroom <= total` (which [`Nba::new`] checks); otherwise idle
/// engines still get `headroom` each and the others share nothing.
pub fn water_fill(total: u64, headroom: u64, demands: &[Demand]) -> Vec<u64> {
    let mut out = vec![0; demands.len()];
    fill(total, headroom, demands, &mut out, &mut Vec::new());
    out
}

/// [`water_fill`] into `out`, with `order` as scratch (no allocation once it has capacity).
fn fill(total: u64, headroom: u64, demands: &[Demand], out: &mut [u64], order: &mut Vec<usize>) {
    let want = |d: Demand| match d {
        Demand::Bounded(bps) => bps.saturating_add(headroom),
        Demand::Unbounded => u64::MAX,
    };
    order.clear();
    let mut idle = 0u64;
    for (i, &d) in demands.iter().enumerate() {
        if d == Demand::Bounded(0) {
            out[i] = headroom;
            idle += 1;
        } else {
            order.push(i);
        }
    }
    if order.is_empty() {
        return;
    }
    let mut rem = total.saturating_sub(idle.saturating_mul(headroom));
    order.sort_unstable_by_key(|&i| want(demands[i]));
    // Engines in increasing order of want take it while it fits in an equal share of what is
    // left; the share can only grow as they do.
    let mut met = 0;
    while met < order.len() {
        let i = order[met];
        let level = rem / (order.len() - met) as u64;
        if want(demands[i]) > level {
            break;
        }
        out[i] = want(demands[i]);
        rem -= out[i];
        met += 1;
    }
    // The rest share what remains equally (contended); or, if every want was met, what is
    // left is spread over all active engines (work conservation).
    let (takers, base): (&[usize], bool) = if met < order.len() {
        (&order[met..], false)
    } else {
        (&order[..], true)
    };
    let k = takers.len() as u64;
    let (each, extra) = (rem / k, rem % k);
    for (j, &i) in takers.iter().enumerate() {
        let share = each + u64::from((j as u64) < extra);
        out[i] = if base { out[i] + share } else { share };
    }
}

/// Per engine and aggregate: samples, demand, allocation.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The sample the last demand was measured up to (bytes, at).
    baseline: Option<(u64, u64)>,
    /// The newest sample.
    latest: Option<(u64, u64)>,
    /// The last measured rate, bit/s.
    measured: Option<u64>,
    /// What the last allocation took it to want.
    demand: Demand,
    /// The allocation in force, bit/s.
    alloc: u64,
}

/// An aggregate as the allocator holds it.
#[derive(Clone, Debug)]
struct Agg {
    name: String,
    rate: Rate,
    headroom: u64,
}

/// The allocator; see the module note. Pure logic: samples and time are passed in.
#[derive(Clone, Debug)]
pub struct Nba {
    engines: usize,
    aggs: Vec<Agg>,
    cfg: NbaConfig,
    /// `aggregate * engines + engine`.
    slots: Vec<Slot>,
    last_tick: Option<u64>,
    allocations: u64,
    scratch_demand: Vec<Demand>,
    scratch_out: Vec<u64>,
    scratch_order: Vec<usize>,
}

/// An aggregate's headroom: `max(1, rate x headroom_bp / 10 000)`, which `engines` engines
/// must be able to hold at once.
fn headroom_for(name: &str, rate: Rate, engines: usize, cfg: NbaConfig) -> Result<u64, NbaError> {
    let headroom = ((u128::from(rate.bps()) * u128::from(cfg.headroom_bp) / 10_000) as u64).max(1);
    if u128::from(headroom) * engines as u128 > u128::from(rate.bps()) {
        return Err(NbaError::HeadroomExceedsRate {
            name: name.to_string(),
            engines,
            headroom_bps: headroom,
            rate_bps: rate.bps(),
        });
    }
    Ok(headroom)
}

impl Nba {
    /// An allocator splitting `aggregates` over `engines` engines. Until the first allocation
    /// every engine has an equal share of every aggregate.
    pub fn new(engines: usize, aggregates: &[Aggregate], cfg: NbaConfig) -> Result<Self, NbaError> {
        if engines == 0 {
            return Err(NbaError::NoEngines);
        }
        if cfg.interval_ns == 0 {
            return Err(NbaError::ZeroInterval);
        }
        if cfg.headroom_bp == 0 || cfg.headroom_bp > 10_000 {
            return Err(NbaError::Headroom(cfg.headroom_bp));
        }
        let mut names = HashSet::new();
        let mut aggs = Vec::with_capacity(aggregates.len());
        for a in aggregates {
            if !names.insert(a.name.as_str()) {
                return Err(NbaError::DuplicateName(a.name.clone()));
            }
            let rate = match Rate::new(a.rate_bps) {
                Some(r) => r,
                None if a.rate_bps == 0 => {
                    return Err(NbaError::ZeroRate {
                        name: a.name.clone(),
                    });
                }
                None => {
                    return Err(NbaError::RateTooLarge {
                        name: a.name.clone(),
                        bps: a.rate_bps,
                    });
                }
            };
            let headroom = headroom_for(&a.name, rate, engines, cfg)?;
            aggs.push(Agg {
                name: a.name.clone(),
                rate,
                headroom,
            });
        }
        let mut slots = Vec::with_capacity(aggs.len() * engines);
        let mut out = vec![0; engines];
        for a in &aggs {
            fill(
                a.rate.bps(),
                a.headroom,
                &vec![Demand::Unbounded; engines],
                &mut out,
                &mut Vec::new(),
            );
            slots.extend(out.iter().map(|&alloc| Slot {
                baseline: None,
                latest: None,
                measured: None,
                demand: Demand::Unbounded,
                alloc,
            }));
        }
        Ok(Nba {
            engines,
            aggs,
            cfg,
            slots,
            last_tick: None,
            allocations: 0,
            scratch_demand: Vec::with_capacity(engines),
            scratch_out: vec![0; engines],
            scratch_order: Vec::with_capacity(engines),
        })
    }

    /// Change aggregate `a`'s rate at run time. The engines' allocations are rescaled to the
    /// new rate at once, so the sum never exceeds it while the next allocation measures demand
    /// again: each engine keeps 1 bit/s, and what it has above that is scaled in proportion
    /// (an unchanged rate changes nothing). A rate the engines' headroom would exceed (any
    /// rate below 1 bit/s per engine does) is refused and changes nothing.
    pub fn set_rate(&mut self, a: AggregateId, rate: Rate) -> Result<(), NbaError> {
        let Some(agg) = self.aggs.get(a) else {
            return Ok(());
        };
        let headroom = headroom_for(&agg.name, rate, self.engines, self.cfg)?;
        let n = self.engines;
        // The headroom checks (here and at construction) make both rates at least `n` bit/s.
        // The allocations sum to at most the old rate and are at least 1 bit/s each, so their
        // parts above 1 bit/s sum to at most `old - n`: scaled to `new - n`, plus the 1 bit/s
        // each keeps, they sum to at most the new rate. (Scaling the whole allocation and
        // raising a result of 0 to 1 added bit/s nobody gave up.)
        let spare_old = u128::from(agg.rate.bps().saturating_sub(n as u64));
        let spare_new = u128::from(rate.bps().saturating_sub(n as u64));
        for s in &mut self.slots[a * n..(a + 1) * n] {
            let above = u128::from(s.alloc.saturating_sub(1));
            // With no spare at the old rate every engine had exactly 1 bit/s: they share the
            // new spare equally.
            let scaled = (above * spare_new)
                .checked_div(spare_old)
                .unwrap_or_else(|| spare_new / n as u128);
            s.alloc = 1 + scaled as u64;
        }
        self.aggs[a].rate = rate;
        self.aggs[a].headroom = headroom;
        Ok(())
    }

    /// Engines.
    pub fn engines(&self) -> usize {
        self.engines
    }

    /// Aggregates.
    pub fn aggregates(&self) -> usize {
        self.aggs.len()
    }

    /// An aggregate's name.
    pub fn name(&self, a: AggregateId) -> &str {
        &self.aggs[a].name
    }

    /// An aggregate by name.
    pub fn aggregate_id(&self, name: &str) -> Option<AggregateId> {
        self.aggs.iter().position(|a| a.name == name)
    }

    /// An aggregate's total rate.
    pub fn total(&self, a: AggregateId) -> Rate {
        self.aggs[a].rate
    }

    /// An aggregate's headroom (and growth room) per engine, bit/s.
    pub fn headroom(&self, a: AggregateId) -> u64 {
        self.aggs[a].headroom
    }

    /// The configuration.
    pub fn config(&self) -> NbaConfig {
        self.cfg
    }

    /// Allocations computed so far.
    pub fn allocations(&self) -> u64 {
        self.allocations
    }

    /// Engine `engine`'s slot for aggregate `a`. Panics on an engine or aggregate out of
    /// range (a caller's bug): the slots are one flat array, and an engine past the end would
    /// otherwise read another aggregate's slot.
    fn slot(&self, engine: usize, a: AggregateId) -> &Slot {
        assert!(
            engine < self.engines,
            "engine {engine} out of range (there are {})",
            self.engines
        );
        &self.slots[a * self.engines + engine]
    }

    /// Record a usage sample from `engine`. Returns false (and ignores it) for an unknown
    /// engine or aggregate, or a sample older or smaller than the newest one.
    pub fn record(&mut self, engine: usize, u: Usage) -> bool {
        if engine >= self.engines || u.aggregate >= self.aggs.len() {
            return false;
        }
        let s = &mut self.slots[u.aggregate * self.engines + engine];
        if let Some((bytes, at)) = s.latest {
            if u.at < at || u.bytes < bytes {
                return false;
            }
        }
        s.latest = Some((u.bytes, u.at));
        if s.baseline.is_none() {
            s.baseline = s.latest;
        }
        true
    }

    /// When the next allocation is due (`None` before the first [`Nba::tick`]). The first comes
    /// after a tenth of an interval: until then the engines run on an equal split made without
    /// any measurement, and waiting a whole interval to correct a guess wastes up to half the
    /// aggregate for that long. Later allocations come every interval.
    pub fn next_due(&self) -> Option<u64> {
        let wait = if self.allocations == 0 {
            (self.cfg.interval_ns / 10).max(1)
        } else {
            self.cfg.interval_ns
        };
        self.last_tick.map(|t| t.saturating_add(wait))
    }

    /// Allocate if an interval has passed since the last allocation; true if it did. The first
    /// call only starts the clock.
    pub fn tick(&mut self, now: u64) -> bool {
        match self.next_due() {
            None => {
                self.last_tick = Some(now);
                false
            }
            Some(due) if now >= due => {
                self.allocate(now);
                true
            }
            Some(_) => false,
        }
    }

    /// Measure every engine's demand from its samples and redistribute every aggregate now.
    pub fn allocate(&mut self, now: u64) {
        self.last_tick = Some(now);
        self.allocations += 1;
        let n = self.engines;
        for (a, agg) in self.aggs.iter().enumerate() {
            self.scratch_demand.clear();
            for s in &mut self.slots[a * n..(a + 1) * n] {
                if let (Some((b0, t0)), Some((b1, t1))) = (s.baseline, s.latest) {
                    if t1 > t0 {
                        let bps = u128::from(b1 - b0) * 8_000_000_000 / u128::from(t1 - t0);
                        s.measured = Some(bps.min(u128::from(u64::MAX)) as u64);
                        s.baseline = s.latest;
                    }
                }
                s.demand = match s.measured {
                    None => Demand::Unbounded,
                    Some(0) => Demand::Bounded(0),
                    Some(bps) if bps.saturating_add(agg.headroom / 2) >= s.alloc => {
                        Demand::Unbounded
                    }
                    Some(bps) => Demand::Bounded(bps),
                };
                self.scratch_demand.push(s.demand);
            }
            fill(
                agg.rate.bps(),
                agg.headroom,
                &self.scratch_demand,
                &mut self.scratch_out,
                &mut self.scratch_order,
            );
            for (s, &alloc) in self.slots[a * n..(a + 1) * n]
                .iter_mut()
                .zip(&self.scratch_out)
            {
                s.alloc = alloc;
            }
        }
    }

    /// The allocation of aggregate `a` to `engine`, bit/s.
    pub fn allocation(&self, engine: usize, a: AggregateId) -> u64 {
        self.slot(engine, a).alloc
    }

    /// The rate `engine` installs for aggregate `a`.
    pub fn rate(&self, engine: usize, a: AggregateId) -> Rate {
        // Every allocation is at least the headroom, at least 1 bit/s, and at most the
        // aggregate's rate, itself a valid rate.
        Rate::new(self.slot(engine, a).alloc).unwrap_or(self.aggs[a].rate)
    }

    /// The rate `engine` sent aggregate `a` at over the last measured interval, bit/s.
    pub fn measured(&self, engine: usize, a: AggregateId) -> Option<u64> {
        self.slot(engine, a).measured
    }

    /// What the last allocation took `engine`'s demand for `a` to be.
    pub fn demand(&self, engine: usize, a: AggregateId) -> Demand {
        self.slot(engine, a).demand
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_rate_changed_at_run_time_rescales_at_once_and_is_shared_from_then_on() {
        let agg = Aggregate::new("a/root", Rate::mbit(100));
        let mut nba = Nba::new(2, std::slice::from_ref(&agg), NbaConfig::default()).unwrap();
        assert_eq!(nba.allocation(0, 0) + nba.allocation(1, 0), 100_000_000);
        nba.set_rate(0, Rate::mbit(300)).unwrap();
        assert_eq!(nba.total(0), Rate::mbit(300));
        assert_eq!(
            nba.allocation(0, 0) + nba.allocation(1, 0),
            300_000_000,
            "rescaled at once"
        );
        assert_eq!(nba.headroom(0), 3_000_000, "1% of the new rate");
        // Engine 0 busy, engine 1 idle: the next allocation gives engine 1 the headroom.
        nba.tick(0);
        for (e, bytes) in [(0, 0u64), (1, 0)] {
            nba.record(
                e,
                Usage {
                    aggregate: 0,
                    bytes,
                    at: 0,
                },
            );
        }
        nba.record(
            0,
            Usage {
                aggregate: 0,
                bytes: 3_750_000,
                at: 100_000_000,
            },
        );
        nba.record(
            1,
            Usage {
                aggregate: 0,
                bytes: 0,
                at: 100_000_000,
            },
        );
        nba.allocate(100_000_000);
        assert_eq!(nba.allocation(1, 0), 3_000_000);
        assert_eq!(nba.allocation(0, 0), 297_000_000);
        let tiny = nba.set_rate(0, Rate::new(1).unwrap());
        assert!(
            matches!(tiny, Err(NbaError::HeadroomExceedsRate { .. })),
            "{tiny:?}"
        );
        assert_eq!(
            nba.total(0),
            Rate::mbit(300),
            "a refused change changes nothing"
        );
    }

    #[test]
    fn a_lower_rate_set_at_run_time_is_never_exceeded() {
        // Engine 0 busy, engines 1 and 2 idle with the 1% headroom each: 9 800, 100 and 100 of
        // 10 000 bit/s. Rescaled to 3 bit/s, the idle ones' 0.03 bit/s used to be raised to 1
        // without taking it from engine 0: 2 + 1 + 1 = 4 bit/s.
        let agg = [Aggregate::new("a", Rate::new(10_000).unwrap())];
        let mut nba = Nba::new(3, &agg, NbaConfig::default()).unwrap();
        nba.tick(0);
        for e in 0..3 {
            nba.record(
                e,
                Usage {
                    aggregate: 0,
                    bytes: 0,
                    at: 0,
                },
            );
        }
        for (e, bytes) in [(0, 1_000), (1, 0), (2, 0)] {
            nba.record(
                e,
                Usage {
                    aggregate: 0,
                    bytes,
                    at: 1_000_000_000,
                },
            );
        }
        nba.allocate(1_000_000_000);
        let allocs = |nba: &Nba| (0..3).map(|e| nba.allocation(e, 0)).collect::<Vec<_>>();
        assert_eq!(allocs(&nba), [9_800, 100, 100]);
        nba.set_rate(0, Rate::new(3).unwrap()).unwrap();
        assert_eq!(
            allocs(&nba),
            [1, 1, 1],
            "each keeps 1 bit/s, the sum is the rate"
        );
    }

    const G: u64 = 1_000_000_000;
    const M: u64 = 1_000_000;
    const H: u64 = 10 * M; // 1% of 1 Gbit/s

    fn b(m: u64) -> Demand {
        Demand::Bounded(m * M)
    }

    #[test]
    fn equal_demand_splits_equally() {
        // Both above half: equal shares. Both below half: each its want, the rest split.
        assert_eq!(water_fill(G, H, &[b(800), b(800)]), vec![500 * M, 500 * M]);
        assert_eq!(
            water_fill(G, H, &[Demand::Unbounded, Demand::Unbounded]),
            vec![500 * M, 500 * M]
        );
        assert_eq!(water_fill(G, H, &[b(200), b(200)]), vec![500 * M, 500 * M]);
        assert_eq!(
            water_fill(G, 0, &[b(1), b(1), b(1)]),
            vec![333_333_334, 333_333_333, 333_333_333]
        );
    }

    #[test]
    fn skewed_demand_gives_the_small_one_its_demand() {
        // 300 below the 500 share: it gets 300 + 10 of growth room; the other the rest.
        assert_eq!(
            water_fill(G, H, &[Demand::Unbounded, b(300)]),
            vec![690 * M, 310 * M]
        );
        assert_eq!(water_fill(G, H, &[b(900), b(300)]), vec![690 * M, 310 * M]);
        // Three engines: 100 and 250 fit under the shares 333 and 445; the third takes 630.
        assert_eq!(
            water_fill(G, H, &[b(100), Demand::Unbounded, b(250)]),
            vec![110 * M, 630 * M, 260 * M]
        );
    }

    #[test]
    fn all_idle_get_exactly_headroom() {
        assert_eq!(water_fill(G, H, &[b(0); 4]), vec![H; 4]);
    }

    #[test]
    fn one_idle_gets_headroom_the_rest_share() {
        assert_eq!(
            water_fill(G, H, &[b(0), Demand::Unbounded, Demand::Unbounded]),
            vec![H, 495 * M, 495 * M]
        );
        // Uncontended: the spare is spread over the active engines only.
        assert_eq!(water_fill(G, H, &[b(0), b(100)]), vec![H, 990 * M]);
    }

    #[test]
    fn demand_above_the_aggregate_is_capped() {
        assert_eq!(water_fill(G, H, &[b(5000)]), vec![G]);
        assert_eq!(
            water_fill(G, H, &[b(5000), b(3000)]),
            vec![500 * M, 500 * M]
        );
        assert_eq!(water_fill(G, H, &[b(5000), b(0)]), vec![990 * M, H]);
    }

    #[test]
    #[should_panic(expected = "engine 2 out of range")]
    fn an_engine_out_of_range_panics_instead_of_reading_another_aggregate() {
        // Two engines, two aggregates: slot (engine 2, aggregate 0) would be (0, 1).
        let aggs = [
            Aggregate::new("a", Rate::mbit(100)),
            Aggregate::new("b", Rate::mbit(200)),
        ];
        let nba = Nba::new(2, &aggs, NbaConfig::default()).unwrap();
        let _ = nba.allocation(2, 0);
    }

    #[test]
    fn construction_errors_are_typed() {
        let agg = [Aggregate::new("tenant", Rate::gbit(1))];
        let cfg = NbaConfig::default();
        assert_eq!(Nba::new(0, &agg, cfg).unwrap_err(), NbaError::NoEngines);
        let zero = NbaConfig {
            interval_ns: 0,
            ..cfg
        };
        assert_eq!(Nba::new(2, &agg, zero).unwrap_err(), NbaError::ZeroInterval);
        let bad = [Aggregate {
            name: "t".into(),
            rate_bps: 0,
        }];
        assert!(matches!(
            Nba::new(2, &bad, cfg),
            Err(NbaError::ZeroRate { .. })
        ));
        let dup = [agg[0].clone(), agg[0].clone()];
        assert!(matches!(
            Nba::new(2, &dup, cfg),
            Err(NbaError::DuplicateName(_))
        ));
        // 1% headroom: 100 engines fit, 101 do not.
        assert!(Nba::new(100, &agg, cfg).is_ok());
        assert!(matches!(
            Nba::new(101, &agg, cfg),
            Err(NbaError::HeadroomExceedsRate { .. })
        ));
        let hr = NbaConfig {
            headroom_bp: 0,
            ..cfg
        };
        assert_eq!(Nba::new(2, &agg, hr).unwrap_err(), NbaError::Headroom(0));
    }

    /// Report that each engine sent at `rates` (bit/s) for one interval, then allocate.
    fn run(nba: &mut Nba, sent: &mut [u64], now: &mut u64, rates: &[u64]) {
        let dt = nba.config().interval_ns;
        *now += dt;
        for (e, r) in rates.iter().enumerate() {
            sent[e] += r / 8 * dt / 1_000_000_000;
            assert!(nba.record(
                e,
                Usage {
                    aggregate: 0,
                    bytes: sent[e],
                    at: *now,
                }
            ));
        }
        assert!(nba.tick(*now));
    }

    #[test]
    fn limited_engines_grow_and_satisfied_ones_keep_their_demand() {
        let agg = [Aggregate::new("tenant", Rate::gbit(1))];
        let mut nba = Nba::new(2, &agg, NbaConfig::default()).unwrap();
        assert_eq!(nba.allocation(0, 0), 500 * M);
        let (mut sent, mut now) = ([0u64; 2], 0);
        for e in 0..2 {
            nba.record(
                e,
                Usage {
                    aggregate: 0,
                    bytes: 0,
                    at: 0,
                },
            );
        }
        assert!(!nba.tick(0), "the first tick starts the clock");
        // Engine 0 offers 900 but is held to 500: limited. Engine 1 sends 300 of its 500.
        run(&mut nba, &mut sent, &mut now, &[500 * M, 300 * M]);
        assert_eq!(nba.demand(0, 0), Demand::Unbounded);
        assert_eq!(nba.demand(1, 0), Demand::Bounded(300 * M));
        assert_eq!(
            (nba.allocation(0, 0), nba.allocation(1, 0)),
            (690 * M, 310 * M)
        );
        // Steady state.
        run(&mut nba, &mut sent, &mut now, &[690 * M, 300 * M]);
        assert_eq!(
            (nba.allocation(0, 0), nba.allocation(1, 0)),
            (690 * M, 310 * M)
        );
        // Swap: engine 0 drops to 300, engine 1 uses all of its 310.
        run(&mut nba, &mut sent, &mut now, &[300 * M, 310 * M]);
        assert_eq!(
            (nba.allocation(0, 0), nba.allocation(1, 0)),
            (310 * M, 690 * M)
        );
        // Engine 0 goes idle: headroom only.
        run(&mut nba, &mut sent, &mut now, &[0, 690 * M]);
        assert_eq!((nba.allocation(0, 0), nba.allocation(1, 0)), (H, 990 * M));
        assert_eq!(nba.rate(0, 0), Rate::mbit(10));
        // No new sample: the last estimate stands.
        now += nba.config().interval_ns;
        assert!(nba.tick(now));
        assert_eq!((nba.allocation(0, 0), nba.allocation(1, 0)), (H, 990 * M));
        // Stale and foreign samples are ignored.
        let old = Usage {
            aggregate: 0,
            bytes: 0,
            at: 0,
        };
        assert!(!nba.record(0, old));
        assert!(!nba.record(5, Usage { at: now + 1, ..old }));
    }

    fn demand() -> impl Strategy<Value = Demand> {
        prop_oneof![
            2 => Just(Demand::Bounded(0)),
            1 => Just(Demand::Unbounded),
            4 => (1u64..2 * G).prop_map(Demand::Bounded),
        ]
    }

    /// A rate in bit/s: small (near the engine count) or anywhere up to the largest.
    fn any_rate() -> impl Strategy<Value = u64> {
        prop_oneof![1u64..40, 1u64..=i64::MAX as u64]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_rate_set_at_run_time_is_never_exceeded(
            engines in 1usize..12,
            old in any_rate(),
            new in any_rate(),
            weights in prop::collection::vec(prop_oneof![Just(0u64), any::<u64>()], 12),
        ) {
            prop_assume!(old >= engines as u64);
            let agg = [Aggregate::new("a", Rate::new(old).unwrap())];
            let mut nba = Nba::new(engines, &agg, NbaConfig::default()).unwrap();
            // Any allocations the allocator's invariants allow: at least 1 bit/s each, at most
            // the old rate in all.
            let weights = &weights[..engines];
            let total: u128 = weights.iter().map(|&w| u128::from(w)).sum::<u128>().max(1);
            let spare = u128::from(old - engines as u64);
            for (s, &w) in nba.slots.iter_mut().zip(weights) {
                s.alloc = 1 + (spare * u128::from(w) / total) as u64;
            }
            let before: Vec<u64> = (0..engines).map(|e| nba.allocation(e, 0)).collect();
            prop_assert!(before.iter().sum::<u64>() <= old);
            let r = nba.set_rate(0, Rate::new(new).unwrap());
            let after: Vec<u64> = (0..engines).map(|e| nba.allocation(e, 0)).collect();
            if new < engines as u64 {
                prop_assert!(matches!(r, Err(NbaError::HeadroomExceedsRate { .. })), "{:?}", r);
                prop_assert_eq!(&after, &before, "a refused change changes nothing");
                prop_assert_eq!(nba.total(0).bps(), old);
            } else {
                prop_assert!(r.is_ok(), "{:?}", r);
                let sum: u128 = after.iter().map(|&x| u128::from(x)).sum();
                prop_assert!(sum <= u128::from(new), "{:?} sum above {}", after, new);
                prop_assert!(after.iter().all(|&x| x >= 1), "{:?}", after);
                if new == old {
                    prop_assert_eq!(&after, &before);
                }
                for (e, &x) in after.iter().enumerate() {
                    prop_assert_eq!(nba.rate(e, 0).bps(), x, "installable as it is");
                }
            }
        }

        #[test]
        fn water_fill_properties(
            total in 1_000u64..100 * G,
            bp in 1u32..=1000,
            demands in prop::collection::vec(demand(), 1..12),
        ) {
            let n = demands.len() as u64;
            let headroom = (total * u64::from(bp) / 10_000).max(1);
            prop_assume!(n * headroom <= total);
            let out = water_fill(total, headroom, &demands);
            let sum: u64 = out.iter().sum();
            prop_assert!(sum <= total, "sum {} > total {}", sum, total);
            let fair = total / n;
            let any_active = demands.iter().any(|&d| d != Demand::Bounded(0));
            for (&d, &a) in demands.iter().zip(&out) {
                prop_assert!(a >= 1);
                match d {
                    Demand::Bounded(0) => prop_assert_eq!(a, headroom, "idle gets the headroom"),
                    Demand::Bounded(bps) => prop_assert!(a >= bps.min(fair)),
                    Demand::Unbounded => prop_assert!(a >= fair),
                }
            }
            if any_active {
                prop_assert_eq!(sum, total, "work conserving");
            } else {
                prop_assert_eq!(sum, n * headroom);
            }
        }

        #[test]
        fn allocator_never_exceeds_the_aggregate(
            engines in 1usize..6,
            steps in prop::collection::vec(prop::collection::vec(0u64..3 * G, 6), 1..20),
        ) {
            let agg = [Aggregate::new("a", Rate::gbit(1)), Aggregate::new("b", Rate::mbit(3))];
            let mut nba = Nba::new(engines, &agg, NbaConfig::default()).unwrap();
            let mut sent = vec![[0u64; 2]; engines];
            let mut now = 0;
            nba.tick(now);
            for rates in steps {
                now += nba.config().interval_ns;
                for (e, sent) in sent.iter_mut().enumerate() {
                    for (a, bytes) in sent.iter_mut().enumerate() {
                        // An engine sends what it offers, capped by its allocation.
                        *bytes += rates[e].min(nba.allocation(e, a)) / 10 / 8;
                        nba.record(e, Usage { aggregate: a, bytes: *bytes, at: now });
                    }
                }
                prop_assert!(nba.tick(now));
                for a in 0..2 {
                    let sum: u64 = (0..engines).map(|e| nba.allocation(e, a)).sum();
                    prop_assert!(sum <= nba.total(a).bps());
                    prop_assert!((0..engines).all(|e| nba.allocation(e, a) >= nba.headroom(a)));
                }
            }
        }
    }
}
