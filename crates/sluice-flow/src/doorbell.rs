//! Doorbell queues (Backdraft §4.1): producers tell the engine *which* data queues have packets,
//! so the engine polls a few doorbell rings instead of every per-flow data queue.
//!
//! ```text
//!  producer (core 0) ── push ──> data queue of flow 7 (DPFQ) ───────────┐ take 3
//!         └──── post (7, 3) ──> doorbell ring 0 ──┐                      │
//!  producer (core 1) ── post ──> doorbell ring 1 ──┴─> engine polls rings ┴─> sink(flow, item)
//!                                                      (never an idle data queue)
//! ```
//!
//! A [`Doorbell`] is `(flow, count)`: `count` more packets of `flow` are in its data queue. The
//! engine ([`DoorbellEngine`]) visits its rings round-robin, up to [`RING_BURST`] doorbells per
//! ring per visit (Backdraft reads a ring's messages in a batch), and takes exactly `count`
//! packets from the flow's [`Dpfq`] queue for each. Its cost per packet does not depend on the
//! number of data queues, only on the number of rings. [`PollAllEngine`] is the comparison: it
//! scans every data queue round-robin the way BESS polls its ports, so an idle queue costs a
//! check on every pass.
//!
//! **Two kinds of ring.**
//! - [`LocalRing`]: single-threaded, for producers that run on the engine's own thread (the
//!   pipeline's ingress, ports the engine reads itself). No atomics: a cross-thread ring here
//!   would charge every doorbell an acquire/release pair that nothing needs, which is why the
//!   benchmark (`sluice bench flow`) uses this one. The engine owns the data queues, so
//!   [`DoorbellEngine::send`] queues the packet and posts its doorbell in one step.
//! - [`lane`]: cross-thread, a pair of wait-free single-producer single-consumer rings from the
//!   `rtrb` crate, one of doorbells and one of packet items. [`Dpfq`] is owned by one engine
//!   (`&mut`), so another thread cannot push into it: the producer sends a run of one flow's
//!   items followed by their doorbell ([`LaneTx::send`]), and the engine, on reading the
//!   doorbell, moves exactly those items into the flow's data queue and takes them from there.
//!   The doorbell's release store orders the items before it, so the engine never reads a
//!   doorbell whose items are not there.
//!
//! **Lossless.** Nothing is dropped. A post to a full ring is refused as a whole (the packet is
//! not queued either), counted in the ring's `full` counter, and the producer retries after
//! the engine drains; likewise at the data queues' memory bound. An engine that stops taking
//! because of its budget keeps the rest of the doorbell and resumes it on the next call.
//!
//! **Coalescing.** A [`LocalRing`] merges a post for the same flow as its newest unread
//! doorbell into that doorbell (counted in `coalesced`), even when the ring is full, so a burst
//! of one flow costs one ring slot and one engine poll. Lane doorbells are not merged after they
//! are published; a producer coalesces by sending a flow's run in one [`LaneTx::send`].
//!
//! **Invariants** (checked by [`DoorbellEngine::check`] in tests): for every flow, the counts
//! of its unread doorbells plus the engine's partly taken one equal the packets in its data
//! queue, so every packet is taken exactly once, in its flow's order (each data queue is FIFO).
//!
//! | operation | cost |
//! |---|---|
//! | `send` / `post` | O(1): one data-queue push, one ring slot (or a merge) |
//! | `drain`, per packet | O(1) plus one ring poll per doorbell, independent of the queue count |
//! | `PollAllEngine::poll`, per pass | O(queues): one emptiness check per data queue |
//! | state | 8 bytes per ring slot; nothing per flow beyond its data queue |

use crate::dpfq::{Dpfq, RingPool};
use std::sync::Arc;

/// Doorbells an engine reads from one ring before it visits the next.
pub const RING_BURST: usize = 32;

/// `count` more packets of `flow` are in its data queue. Eight bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Doorbell {
    /// The flow (data queue) id.
    pub flow: u32,
    /// Packets posted.
    pub count: u32,
}

const _: () = assert!(std::mem::size_of::<Doorbell>() == 8);

/// Why a post or a send was refused. Nothing was queued or posted in any of these cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The doorbell ring (or a lane's item ring) is full: retry after the engine drains.
    /// Counted in the ring's `full` counter.
    #[error("doorbell ring full")]
    Full,
    /// The flow id is not below the engine's number of flows (counted by the ring, if any).
    #[error("flow {0} out of range")]
    BadFlow(u32),
    /// No such ring.
    #[error("ring {0} out of range")]
    BadRing(usize),
    /// More items than the lane can ever hold at once: send them in smaller runs.
    #[error("{0} items do not fit the lane")]
    TooMany(usize),
    /// The data queues are at their memory bound: retry after packets leave.
    #[error("data queues at their memory bound ({0})")]
    AtBound(&'static str),
}

/// Why an engine or a ring cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DoorbellError {
    /// A zero capacity, flow count or burst.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// More flows than a `u32` id names.
    #[error("flows must be below 2^32")]
    TooManyFlows,
    /// A capacity too large to round up to a power of two.
    #[error("{0} too large")]
    TooLarge(&'static str),
}

/// Counters of one ring's producer side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Doorbells written to the ring (a merge is not a new doorbell).
    pub posted: u64,
    /// Posts merged into the newest unread doorbell of the same flow.
    pub coalesced: u64,
    /// Posts refused because the ring was full (the producer retries).
    pub full: u64,
    /// Posts refused for a flow out of range.
    pub bad_flow: u64,
}

/// A ring an engine polls for doorbells.
pub trait DoorbellRx {
    /// The next doorbell, its packets already in `queues` (the flow's data queue), or `None`
    /// when the ring has nothing the engine can take now.
    fn poll(&mut self, queues: &mut Dpfq) -> Option<Doorbell>;
}

/// A single-threaded doorbell ring of fixed capacity (a power of two); see the module note.
#[derive(Clone, Debug)]
pub struct LocalRing {
    slots: Box<[Doorbell]>,
    /// `slots.len() - 1`.
    mask: usize,
    /// Doorbells ever read; the oldest unread one is at `head & mask`.
    head: usize,
    /// Doorbells ever written; the next is written at `tail & mask`.
    tail: usize,
    stats: RingStats,
}

impl LocalRing {
    /// A ring of at least `capacity` doorbells (rounded up to a power of two).
    pub fn new(capacity: usize) -> Result<Self, DoorbellError> {
        if capacity == 0 {
            return Err(DoorbellError::Zero("ring capacity"));
        }
        let n = capacity
            .checked_next_power_of_two()
            .ok_or(DoorbellError::TooLarge("ring capacity"))?;
        Ok(LocalRing {
            slots: vec![Doorbell::default(); n].into_boxed_slice(),
            mask: n - 1,
            head: 0,
            tail: 0,
            stats: RingStats::default(),
        })
    }

    /// Unread doorbells.
    #[inline]
    pub fn len(&self) -> usize {
        self.tail.wrapping_sub(self.head)
    }

    /// True when no doorbell is unread.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tail == self.head
    }

    /// Doorbells the ring holds.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Counters.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// The slot of the newest unread doorbell, if `d` can merge into it.
    #[inline]
    fn mergeable(&self, d: Doorbell) -> Option<usize> {
        if self.is_empty() {
            return None;
        }
        let last = self.tail.wrapping_sub(1) & self.mask;
        let t = self.slots[last];
        (t.flow == d.flow && t.count.checked_add(d.count).is_some()).then_some(last)
    }

    /// Whether a post of `count` packets of `flow` would be taken now.
    pub fn can_post(&self, flow: u32, count: u32) -> bool {
        self.len() < self.slots.len() || self.mergeable(Doorbell { flow, count }).is_some()
    }

    /// Ring the doorbell: merge into the newest unread doorbell of the same flow, or take a
    /// slot. Refused (and counted) when the ring is full; the caller keeps `d` and retries.
    pub fn post(&mut self, d: Doorbell) -> Result<(), PostError> {
        if let Some(last) = self.mergeable(d) {
            self.slots[last].count += d.count;
            self.stats.coalesced += 1;
            return Ok(());
        }
        if self.len() == self.slots.len() {
            self.stats.full += 1;
            return Err(PostError::Full);
        }
        self.append(d);
        Ok(())
    }

    /// Write `d` into a free slot (the caller checked there is one).
    #[inline]
    fn append(&mut self, d: Doorbell) {
        self.slots[self.tail & self.mask] = d;
        self.tail = self.tail.wrapping_add(1);
        self.stats.posted += 1;
    }

    /// Take the oldest unread doorbell.
    #[inline]
    pub fn pop(&mut self) -> Option<Doorbell> {
        if self.is_empty() {
            return None;
        }
        let d = self.slots[self.head & self.mask];
        self.head = self.head.wrapping_add(1);
        Some(d)
    }

    /// The unread doorbells, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = Doorbell> + '_ {
        (0..self.len()).map(|i| self.slots[self.head.wrapping_add(i) & self.mask])
    }
}

impl DoorbellRx for LocalRing {
    #[inline]
    fn poll(&mut self, _queues: &mut Dpfq) -> Option<Doorbell> {
        self.pop()
    }
}

/// A cross-thread lane: `doorbells` doorbells and `items` packet items in flight at most, for
/// an engine with `flows` flows. The producer half goes to the producing thread, the consumer
/// half to the engine ([`DoorbellEngine::new`]).
pub fn lane(
    flows: usize,
    doorbells: usize,
    items: usize,
) -> Result<(LaneTx, LaneRx), DoorbellError> {
    for (v, name) in [(flows, "flows"), (doorbells, "doorbells"), (items, "items")] {
        if v == 0 {
            return Err(DoorbellError::Zero(name));
        }
    }
    let flows = u32::try_from(flows).map_err(|_| DoorbellError::TooManyFlows)?;
    let (bells_tx, bells_rx) = rtrb::RingBuffer::new(doorbells);
    let (items_tx, items_rx) = rtrb::RingBuffer::new(items);
    Ok((
        LaneTx {
            bells: bells_tx,
            items: items_tx,
            flows,
            stats: RingStats::default(),
        },
        LaneRx {
            bells: bells_rx,
            items: items_rx,
            partial: None,
            deferred: 0,
            unknown_flow: 0,
        },
    ))
}

/// The producer half of a [`lane`]. `Send`: move it to the producing thread.
pub struct LaneTx {
    bells: rtrb::Producer<Doorbell>,
    items: rtrb::Producer<u32>,
    flows: u32,
    stats: RingStats,
}

impl LaneTx {
    /// Send a run of `flow`'s packet items and its one doorbell, all or nothing: refused with
    /// [`PostError::Full`] (counted) when either ring lacks room, and the producer retries.
    /// An empty run sends nothing.
    pub fn send(&mut self, flow: u32, items: &[u32]) -> Result<(), PostError> {
        if flow >= self.flows {
            self.stats.bad_flow += 1;
            return Err(PostError::BadFlow(flow));
        }
        if items.is_empty() {
            return Ok(());
        }
        if items.len() > self.items.buffer().capacity() {
            return Err(PostError::TooMany(items.len()));
        }
        let count = u32::try_from(items.len()).map_err(|_| PostError::TooMany(items.len()))?;
        // Only this thread adds to the rings, so room seen here is still there below.
        if self.items.slots() < items.len() || self.bells.slots() == 0 {
            self.stats.full += 1;
            return Err(PostError::Full);
        }
        // Items first: the doorbell's release store publishes them.
        let pushed = self.items.push_entire_slice(items).is_ok()
            && self.bells.push(Doorbell { flow, count }).is_ok();
        debug_assert!(pushed, "room was checked and only this thread adds");
        self.stats.posted += 1;
        Ok(())
    }

    /// Counters.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Whether the engine dropped its half.
    pub fn is_abandoned(&self) -> bool {
        self.bells.is_abandoned()
    }
}

/// The engine's half of a [`lane`].
pub struct LaneRx {
    bells: rtrb::Consumer<Doorbell>,
    items: rtrb::Consumer<u32>,
    /// The rest of a doorbell whose items did not all fit the data queues yet.
    partial: Option<Doorbell>,
    deferred: u64,
    unknown_flow: u64,
}

impl LaneRx {
    /// Times a doorbell's items had to wait in the lane for room in the data queues.
    pub fn deferred(&self) -> u64 {
        self.deferred
    }

    /// Doorbells for a flow the engine has no queue for, whose items were discarded (a
    /// host that numbers flows beyond the engine's; before, such a doorbell blocked the lane
    /// for good).
    pub fn unknown_flow(&self) -> u64 {
        self.unknown_flow
    }

    /// Doorbells waiting in the lane (not counting a partly moved one).
    pub fn len(&self) -> usize {
        self.bells.slots()
    }

    /// True when no doorbell waits.
    pub fn is_empty(&self) -> bool {
        self.partial.is_none() && self.bells.is_empty()
    }
}

impl DoorbellRx for LaneRx {
    /// Move the next doorbell's items into the flow's data queue (as many as the memory bound
    /// admits; the rest stay in the lane, in order, for the next poll) and return the doorbell
    /// for what was moved.
    fn poll(&mut self, queues: &mut Dpfq) -> Option<Doorbell> {
        let d = loop {
            let d = match self.partial.take() {
                Some(d) => d,
                None => self.bells.pop().ok()?,
            };
            if (d.flow as usize) < queues.flows() {
                break d;
            }
            // No queue will ever take these items: discard them (counted) and go on with the
            // next doorbell (`None` here would tell the engine the lane is empty).
            for _ in 0..d.count {
                let _ = self.items.pop();
            }
            self.unknown_flow += 1;
        };
        let mut moved = 0;
        while moved < d.count {
            // The producer published these items before the doorbell (release/acquire).
            let Ok(&item) = self.items.peek() else {
                break;
            };
            if queues.push(d.flow, item).is_err() {
                break;
            }
            let _ = self.items.pop();
            moved += 1;
        }
        if moved < d.count {
            self.deferred += 1;
            self.partial = Some(Doorbell {
                flow: d.flow,
                count: d.count - moved,
            });
        }
        (moved > 0).then_some(Doorbell {
            flow: d.flow,
            count: moved,
        })
    }
}

/// Counters of an engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Doorbells read (doorbell engine) or non-empty queues visited (poll-all engine).
    pub doorbells: u64,
    /// Packets taken.
    pub packets: u64,
    /// Ring polls (doorbell engine) or queue checks (poll-all engine) that found nothing.
    pub empty_polls: u64,
    /// Doorbells whose data queue held fewer packets than announced (a foreign pop; never
    /// happens through this module's API).
    pub short: u64,
}

fn flow_count(flows: usize) -> Result<u32, DoorbellError> {
    if flows == 0 {
        return Err(DoorbellError::Zero("flows"));
    }
    u32::try_from(flows).map_err(|_| DoorbellError::TooManyFlows)
}

/// An engine that polls doorbell rings only; see the module note.
pub struct DoorbellEngine<R: DoorbellRx = LocalRing> {
    queues: Dpfq,
    flows: u32,
    rings: Vec<R>,
    /// The ring visited next.
    cursor: usize,
    /// The rest of a doorbell cut short by a budget.
    current: Option<Doorbell>,
    stats: EngineStats,
}

impl<R: DoorbellRx> DoorbellEngine<R> {
    /// An engine over data queues for `flows` flows from `pool`, polling `rings`.
    pub fn new(pool: Arc<RingPool>, flows: usize, rings: Vec<R>) -> Result<Self, DoorbellError> {
        let n = flow_count(flows)?;
        if rings.is_empty() {
            return Err(DoorbellError::Zero("rings"));
        }
        Ok(DoorbellEngine {
            queues: Dpfq::new(pool, flows),
            flows: n,
            rings,
            cursor: 0,
            current: None,
            stats: EngineStats::default(),
        })
    }

    /// The data queues.
    pub fn queues(&self) -> &Dpfq {
        &self.queues
    }

    /// The rings.
    pub fn rings(&self) -> &[R] {
        &self.rings
    }

    /// Flows (data queues).
    pub fn flows(&self) -> usize {
        self.flows as usize
    }

    /// Counters.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Take up to `count` packets of `d.flow`, at most `budget`; keep the rest for later.
    #[inline]
    fn take(&mut self, d: Doorbell, budget: usize, sink: &mut impl FnMut(u32, u32)) -> usize {
        let want = (d.count as usize).min(budget);
        let mut got = 0;
        while got < want {
            let Some(item) = self.queues.pop(d.flow) else {
                // Fewer packets than announced: only a pop outside this engine could do it.
                self.stats.short += 1;
                return got;
            };
            sink(d.flow, item);
            got += 1;
        }
        if want < d.count as usize {
            self.current = Some(Doorbell {
                flow: d.flow,
                count: d.count - want as u32,
            });
        }
        got
    }

    /// Poll the rings round-robin ([`RING_BURST`] doorbells per ring per visit) and hand at
    /// most `budget` packets to `sink(flow, item)`, each flow's in order. Stops when the budget
    /// is spent or every ring came up empty. Returns the packets taken.
    pub fn drain(&mut self, budget: usize, mut sink: impl FnMut(u32, u32)) -> usize {
        let mut taken = 0;
        if let Some(d) = self.current.take() {
            taken += self.take(d, budget, &mut sink);
        }
        let n = self.rings.len();
        let mut empty_rings = 0;
        while taken < budget && empty_rings < n {
            let mut got = 0;
            while got < RING_BURST && taken < budget {
                let Some(d) = self.rings[self.cursor].poll(&mut self.queues) else {
                    break;
                };
                got += 1;
                self.stats.doorbells += 1;
                taken += self.take(d, budget - taken, &mut sink);
            }
            if got == 0 {
                self.stats.empty_polls += 1;
                empty_rings += 1;
            } else {
                empty_rings = 0;
            }
            self.cursor += 1;
            if self.cursor == n {
                self.cursor = 0;
            }
        }
        self.stats.packets += taken as u64;
        taken
    }
}

impl DoorbellEngine<LocalRing> {
    /// An engine with `rings` local rings of `ring_capacity` doorbells each.
    pub fn local(
        pool: Arc<RingPool>,
        flows: usize,
        rings: usize,
        ring_capacity: usize,
    ) -> Result<Self, DoorbellError> {
        let rings = (0..rings)
            .map(|_| LocalRing::new(ring_capacity))
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(pool, flows, rings)
    }

    /// A producer on the engine's thread: queue `item` in `flow`'s data queue and ring its
    /// doorbell on ring `ring`, all or nothing. [`PostError::Full`] (counted by the ring) and
    /// [`PostError::AtBound`] leave nothing queued: retry after the engine drains.
    #[inline]
    pub fn send(&mut self, ring: usize, flow: u32, item: u32) -> Result<(), PostError> {
        let Some(r) = self.rings.get_mut(ring) else {
            return Err(PostError::BadRing(ring));
        };
        if flow >= self.flows {
            r.stats.bad_flow += 1;
            return Err(PostError::BadFlow(flow));
        }
        let d = Doorbell { flow, count: 1 };
        let merge = r.mergeable(d);
        if merge.is_none() && r.len() == r.slots.len() {
            r.stats.full += 1;
            return Err(PostError::Full);
        }
        self.queues
            .push(flow, item)
            .map_err(|e| PostError::AtBound(e.what))?;
        match merge {
            Some(last) => {
                r.slots[last].count += 1;
                r.stats.coalesced += 1;
            }
            None => r.append(d),
        }
        Ok(())
    }

    /// Check that every flow's unread doorbells add up to the packets in its data queue;
    /// panics otherwise. For tests: O(flows + ring slots).
    pub fn check(&self) {
        let mut announced = vec![0u64; self.flows as usize];
        let pending = self.rings.iter().flat_map(LocalRing::iter);
        for d in pending.chain(self.current) {
            announced[d.flow as usize] += u64::from(d.count);
        }
        for (f, &a) in announced.iter().enumerate() {
            assert_eq!(
                a,
                self.queues.len(f as u32) as u64,
                "flow {f}: doorbells announce {a} packets"
            );
        }
    }
}

/// The comparison engine: scans every data queue round-robin (BESS polls every port queue),
/// taking up to `burst` packets from each one that has any.
pub struct PollAllEngine {
    queues: Dpfq,
    flows: u32,
    burst: u32,
    /// The queue visited next.
    cursor: u32,
    stats: EngineStats,
}

impl PollAllEngine {
    /// An engine over data queues for `flows` flows from `pool`, taking up to `burst` packets
    /// per visit (DPDK's 32 is usual).
    pub fn new(pool: Arc<RingPool>, flows: usize, burst: usize) -> Result<Self, DoorbellError> {
        let n = flow_count(flows)?;
        if burst == 0 {
            return Err(DoorbellError::Zero("burst"));
        }
        Ok(PollAllEngine {
            queues: Dpfq::new(pool, flows),
            flows: n,
            burst: u32::try_from(burst).unwrap_or(u32::MAX),
            cursor: 0,
            stats: EngineStats::default(),
        })
    }

    /// The data queues.
    pub fn queues(&self) -> &Dpfq {
        &self.queues
    }

    /// Counters.
    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Queue `item` in `flow`'s data queue (no doorbell: the engine will find it).
    #[inline]
    pub fn enqueue(&mut self, flow: u32, item: u32) -> Result<(), PostError> {
        if flow >= self.flows {
            return Err(PostError::BadFlow(flow));
        }
        self.queues
            .push(flow, item)
            .map_err(|e| PostError::AtBound(e.what))
    }

    /// One pass at most: visit the queues from the cursor on, taking up to `burst` packets
    /// from each non-empty one, until `budget` packets are taken or every queue was visited.
    /// Returns the packets taken.
    pub fn poll(&mut self, budget: usize, mut sink: impl FnMut(u32, u32)) -> usize {
        let mut taken = 0;
        let mut visited = 0;
        while taken < budget && visited < self.flows {
            let f = self.cursor;
            self.cursor += 1;
            if self.cursor == self.flows {
                self.cursor = 0;
            }
            visited += 1;
            if self.queues.is_empty(f) {
                self.stats.empty_polls += 1;
                continue;
            }
            self.stats.doorbells += 1;
            let mut k = 0;
            while k < self.burst && taken < budget {
                let Some(item) = self.queues.pop(f) else {
                    break;
                };
                sink(f, item);
                k += 1;
                taken += 1;
            }
        }
        self.stats.packets += taken as u64;
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn pool() -> Arc<RingPool> {
        RingPool::new(256, 4, 1 << 12).unwrap()
    }

    /// Collects what an engine hands out and checks per-flow order and exactly-once.
    #[derive(Default)]
    struct Seen {
        next: HashMap<u32, u32>,
        count: usize,
    }

    impl Seen {
        /// Items are `flow << 16 | seq`.
        fn take(&mut self, flow: u32, item: u32) {
            assert_eq!(item >> 16, flow, "item {item:#x} delivered for flow {flow}");
            let n = self.next.entry(flow).or_insert(0);
            assert_eq!(item & 0xffff, *n, "flow {flow} out of order or duplicated");
            *n += 1;
            self.count += 1;
        }
    }

    fn rng(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn every_packet_exactly_once_in_flow_order() {
        let mut e = DoorbellEngine::local(pool(), 40, 3, 8).unwrap();
        let mut seq = [0u32; 40];
        let mut seen = Seen::default();
        let (mut sent, mut x) = (0usize, 0x1234_5678u64);
        for _ in 0..20_000 {
            let r = rng(&mut x);
            if r % 3 != 0 {
                // A hot flow half the time, so runs coalesce.
                let flow = if r % 2 == 0 { 7 } else { (r >> 8) as u32 % 40 };
                let item = flow << 16 | seq[flow as usize];
                match e.send((flow % 3) as usize, flow, item) {
                    Ok(()) => {
                        seq[flow as usize] += 1;
                        sent += 1;
                    }
                    Err(PostError::Full | PostError::AtBound(_)) => {}
                    Err(other) => panic!("{other}"),
                }
            } else {
                let budget = (r >> 20) as usize % 12;
                let got = e.drain(budget, |f, i| seen.take(f, i));
                assert!(got <= budget);
            }
            e.check();
        }
        while e.drain(usize::MAX, |f, i| seen.take(f, i)) > 0 {}
        e.check();
        assert_eq!(seen.count, sent);
        assert_eq!(e.stats().packets as usize, sent);
        for f in 0..40 {
            assert!(e.queues().is_empty(f));
        }
        let coalesced: u64 = e.rings().iter().map(|r| r.stats().coalesced).sum();
        assert!(coalesced > 0);
    }

    #[test]
    fn a_full_ring_is_counted_and_loses_nothing() {
        let mut e = DoorbellEngine::local(pool(), 8, 1, 2).unwrap();
        e.send(0, 1, 1 << 16).unwrap();
        e.send(0, 2, 2 << 16).unwrap();
        assert_eq!(e.send(0, 3, 3 << 16), Err(PostError::Full));
        assert_eq!(e.rings()[0].stats().full, 1);
        assert!(e.queues().is_empty(3), "a refused send queues nothing");
        // The same flow as the newest doorbell still merges into it.
        e.send(0, 2, 2 << 16 | 1).unwrap();
        e.check();
        let mut seen = Seen::default();
        assert_eq!(e.drain(usize::MAX, |f, i| seen.take(f, i)), 3);
        // The producer retries.
        e.send(0, 3, 3 << 16).unwrap();
        assert_eq!(e.drain(usize::MAX, |f, i| seen.take(f, i)), 1);
        assert_eq!(seen.count, 4);
        e.check();
    }

    #[test]
    fn repeated_doorbells_of_one_flow_coalesce() {
        let mut e = DoorbellEngine::local(pool(), 8, 1, 4).unwrap();
        for s in 0..5 {
            e.send(0, 5, 5 << 16 | s).unwrap();
        }
        let r = &e.rings()[0];
        assert_eq!((r.len(), r.stats().posted, r.stats().coalesced), (1, 1, 4));
        assert_eq!(r.iter().next(), Some(Doorbell { flow: 5, count: 5 }));
        // Another flow in between starts a new doorbell.
        e.send(0, 6, 6 << 16).unwrap();
        e.send(0, 5, 5 << 16 | 5).unwrap();
        assert_eq!(e.rings()[0].len(), 3);
        let mut seen = Seen::default();
        assert_eq!(e.drain(usize::MAX, |f, i| seen.take(f, i)), 7);
        assert_eq!(e.stats().doorbells, 3);
    }

    #[test]
    fn a_budget_cuts_a_doorbell_and_the_rest_comes_next() {
        let mut e = DoorbellEngine::local(pool(), 8, 2, 4).unwrap();
        for s in 0..10 {
            e.send(0, 1, 1 << 16 | s).unwrap();
        }
        e.send(1, 2, 2 << 16).unwrap();
        let mut seen = Seen::default();
        assert_eq!(e.drain(4, |f, i| seen.take(f, i)), 4);
        e.check();
        assert_eq!(e.drain(4, |f, i| seen.take(f, i)), 4);
        assert_eq!(e.drain(100, |f, i| seen.take(f, i)), 3);
        assert_eq!(seen.count, 11);
        assert_eq!(e.drain(100, |_, _| panic!("nothing left")), 0);
    }

    #[test]
    fn bad_flows_and_rings_are_refused_and_counted() {
        let mut e = DoorbellEngine::local(pool(), 4, 1, 4).unwrap();
        assert_eq!(e.send(0, 4, 0), Err(PostError::BadFlow(4)));
        assert_eq!(e.send(1, 0, 0), Err(PostError::BadRing(1)));
        assert_eq!(e.rings()[0].stats().bad_flow, 1);
        assert!(LocalRing::new(0).is_err());
        assert_eq!(
            LocalRing::new(3).unwrap().capacity(),
            4,
            "rounded to a power of two"
        );
        assert!(DoorbellEngine::local(pool(), 0, 1, 1).is_err());
        assert!(DoorbellEngine::local(pool(), 1, 0, 1).is_err());
        assert!(PollAllEngine::new(pool(), 1, 0).is_err());
        assert!(lane(1, 0, 1).is_err());
    }

    #[test]
    fn at_the_memory_bound_nothing_is_posted() {
        let small = RingPool::new(4, 2, 3).unwrap();
        let mut e = DoorbellEngine::local(small, 4, 1, 8).unwrap();
        for s in 0..3 {
            e.send(0, 0, s).unwrap();
        }
        assert_eq!(e.send(0, 1, 1 << 16), Err(PostError::AtBound("packets")));
        e.check();
        assert_eq!(e.drain(usize::MAX, |_, _| {}), 3);
        e.send(0, 1, 1 << 16).unwrap();
        e.check();
    }

    #[test]
    fn poll_all_delivers_everything_in_order_one_pass_at_a_time() {
        let mut e = PollAllEngine::new(pool(), 100, 2).unwrap();
        let mut seen = Seen::default();
        for s in 0..5 {
            e.enqueue(3, 3 << 16 | s).unwrap();
        }
        e.enqueue(90, 90 << 16).unwrap();
        // One pass visits all 100 queues and takes two from flow 3 and one from flow 90.
        assert_eq!(e.poll(usize::MAX, |f, i| seen.take(f, i)), 3);
        assert_eq!(e.stats().empty_polls, 98);
        assert_eq!(e.poll(1, |f, i| seen.take(f, i)), 1);
        while e.poll(usize::MAX, |f, i| seen.take(f, i)) > 0 {}
        assert_eq!(seen.count, 6);
        assert_eq!(e.enqueue(100, 0), Err(PostError::BadFlow(100)));
    }

    #[test]
    fn a_full_lane_is_counted_and_the_producer_retries() {
        let (mut tx, rx) = lane(8, 2, 4).unwrap();
        let mut e = DoorbellEngine::new(pool(), 8, vec![rx]).unwrap();
        tx.send(1, &[1 << 16, 1 << 16 | 1, 1 << 16 | 2]).unwrap();
        assert_eq!(tx.send(2, &[2 << 16, 2 << 16 | 1]), Err(PostError::Full));
        assert_eq!(tx.send(2, &[0; 5]), Err(PostError::TooMany(5)));
        assert_eq!(tx.send(8, &[0]), Err(PostError::BadFlow(8)));
        tx.send(2, &[2 << 16]).unwrap();
        assert_eq!(
            tx.send(3, &[3 << 16]),
            Err(PostError::Full),
            "no doorbell slot"
        );
        assert_eq!(tx.stats().full, 2);
        let mut seen = Seen::default();
        assert_eq!(e.drain(usize::MAX, |f, i| seen.take(f, i)), 4);
        tx.send(2, &[2 << 16 | 1]).unwrap();
        tx.send(3, &[3 << 16]).unwrap();
        assert_eq!(e.drain(usize::MAX, |f, i| seen.take(f, i)), 2);
        assert_eq!(seen.count, 6);
    }

    #[test]
    fn lane_items_wait_in_order_at_the_memory_bound() {
        let small = RingPool::new(8, 2, 3).unwrap();
        let (mut tx, rx) = lane(4, 4, 16).unwrap();
        let mut e = DoorbellEngine::new(small, 4, vec![rx]).unwrap();
        let run: Vec<u32> = (0..5).map(|s| 1 << 16 | s).collect();
        tx.send(1, &run).unwrap();
        tx.send(2, &[2 << 16]).unwrap();
        let mut seen = Seen::default();
        // Two packets at a time: the doorbell's items move as room allows, in order.
        assert_eq!(e.drain(2, |f, i| seen.take(f, i)), 2);
        assert_eq!(e.drain(usize::MAX, |f, i| seen.take(f, i)), 4);
        assert_eq!(seen.count, 6);
        assert!(e.rings()[0].is_empty());
    }

    #[test]
    fn lanes_across_threads_deliver_every_packet_once_in_order() {
        const FLOWS: u32 = 64;
        const PER_PRODUCER: u32 = 50_000;
        let producers = 2;
        let mut rxs = Vec::new();
        let mut handles = Vec::new();
        for p in 0..producers {
            let (mut tx, rx) = lane(FLOWS as usize, 8, 32).unwrap();
            rxs.push(rx);
            handles.push(std::thread::spawn(move || {
                // Producer p owns the flows f with f % producers == p.
                let mine: Vec<u32> = (0..FLOWS).filter(|f| f % producers == p).collect();
                let mut seq = vec![0u32; FLOWS as usize];
                let (mut sent, mut x) = (0, 0x9E37_79B9u64 + u64::from(p));
                let mut run = Vec::new();
                while sent < PER_PRODUCER {
                    let r = rng(&mut x);
                    let f = mine[r as usize % mine.len()];
                    let n = (1 + (r >> 32) % 4).min(u64::from(PER_PRODUCER - sent)) as u32;
                    run.clear();
                    run.extend((0..n).map(|k| f << 16 | (seq[f as usize] + k)));
                    loop {
                        match tx.send(f, &run) {
                            Ok(()) => break,
                            Err(PostError::Full) => std::thread::yield_now(),
                            Err(e) => panic!("{e}"),
                        }
                    }
                    seq[f as usize] += n;
                    sent += n;
                }
                tx.stats()
            }));
        }
        let pool = RingPool::new(64, 4, 64).unwrap();
        let mut e = DoorbellEngine::new(pool, FLOWS as usize, rxs).unwrap();
        let mut seen = Seen::default();
        let total = (producers * PER_PRODUCER) as usize;
        while seen.count < total {
            if e.drain(64, |f, i| seen.take(f, i)) == 0 {
                std::thread::yield_now();
            }
        }
        for h in handles {
            let st = h.join().unwrap();
            assert!(st.posted > 0);
        }
        assert_eq!(e.drain(usize::MAX, |_, _| panic!("nothing more")), 0);
        assert_eq!(e.stats().packets as usize, total);
    }
}
