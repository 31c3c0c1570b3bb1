//! Dynamic per-flow queues (Backdraft §4.2): a queue for every active flow, from a pool of
//! fixed-size rings allocated once, linked into longer queues for bursts, and returned to the
//! pool as soon as they empty.
//!
//! ```text
//!  pool (lock-free stack of free rings)      flow 7:  [ring 3: ########] -> [ring 9: ###.....]
//!   top -> 12 -> 4 -> 30 -> ...                        head ^                        tail ^
//!  flow 2 (idle): no ring at all
//! ```
//!
//! - A flow with no packets owns no ring: an idle flow costs its 32-byte [`FlowQueue`] only.
//!   Its first [`INLINE`] packets stay in that record too, so a flow with one or two packets
//!   queued (the usual case under TSQ and zD) needs no ring either.
//! - `push` appends to the flow's tail ring; when it is full, a ring is taken from the pool and
//!   linked behind it. `pop` takes from the head ring; a ring that empties goes straight back to
//!   the pool (Backdraft reclaims queues "once there are no outstanding packets").
//! - **Memory is bounded globally**, not per flow: at most `rings` rings and `max_packets`
//!   packets over all flows. At the bound `push` refuses with [`AtBound`], and the caller applies
//!   the configured action ([`BoundAction`]): pause the source (lossless) or drop the packet
//!   with a counted reason (lossy).
//!
//! The pool is shared between per-core engines (`Arc<RingPool>`), so one engine's burst can use
//! memory another engine is not using. Its free list is a Treiber stack whose head carries a tag
//! (32-bit ring index, 32-bit version) so a pop racing with a pop and a push cannot take a ring
//! twice (the ABA problem); see `tests/dpfq.rs` for the multi-threaded test. A ring's slots are
//! `AtomicU32` so that rings can live in one shared array without `unsafe`; only the engine
//! that owns a flow touches that flow's rings, so every slot access is `Relaxed` (a plain load
//! or store on x86).

use crate::Slots;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

const NIL: u32 = u32::MAX;

/// What to do with a packet that arrives at the memory bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BoundAction {
    /// Refuse it and pause its source (lossless): the source keeps the packet.
    #[default]
    Pause,
    /// Drop it and count the drop (lossy).
    Drop,
}

/// `push` found the memory bound reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("per-flow queue memory bound reached ({what})")]
pub struct AtBound {
    /// Which bound: `"packets"` or `"rings"`.
    pub what: &'static str,
}

/// Why a pool cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DpfqError {
    /// Zero rings, slots or packets.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// More than the 2^31 rings or packets ids can name.
    #[error("{0} must be below 2^31")]
    TooLarge(&'static str),
}

struct Ring {
    slots: Box<[AtomicU32]>,
    /// Next ring of the same flow queue, or the next free ring on the stack.
    next: AtomicU32,
}

/// The shared pool of rings. See the module note.
pub struct RingPool {
    rings: Box<[Ring]>,
    /// Top of the free stack: version << 32 | ring index (NIL when empty).
    top: AtomicU64,
    free: AtomicUsize,
    packets: AtomicUsize,
    max_packets: usize,
    ring_slots: u32,
}

impl RingPool {
    /// A pool of `rings` rings of `ring_slots` packets, holding at most `max_packets` packets.
    pub fn new(
        rings: usize,
        ring_slots: usize,
        max_packets: usize,
    ) -> Result<Arc<Self>, DpfqError> {
        for (v, name) in [
            (rings, "rings"),
            (ring_slots, "ring_slots"),
            (max_packets, "max_packets"),
        ] {
            if v == 0 {
                return Err(DpfqError::Zero(name));
            }
            if v >= 1 << 31 {
                return Err(DpfqError::TooLarge(name));
            }
        }
        let rings: Box<[Ring]> = (0..rings)
            .map(|i| Ring {
                slots: (0..ring_slots).map(|_| AtomicU32::new(0)).collect(),
                next: AtomicU32::new(if i + 1 < rings { i as u32 + 1 } else { NIL }),
            })
            .collect();
        let count = rings.len();
        Ok(Arc::new(RingPool {
            rings,
            top: AtomicU64::new(0),
            free: AtomicUsize::new(count),
            packets: AtomicUsize::new(0),
            max_packets,
            ring_slots: ring_slots as u32,
        }))
    }

    /// Rings in the pool.
    pub fn rings(&self) -> usize {
        self.rings.len()
    }

    /// Rings free now.
    pub fn free_rings(&self) -> usize {
        self.free.load(Ordering::Relaxed)
    }

    /// Packets held by all flows now, plus the budget engines reserved for their next
    /// packets (a batch or two each; see [`Dpfq`]). Never above [`RingPool::max_packets`].
    pub fn packets(&self) -> usize {
        self.packets.load(Ordering::Relaxed)
    }

    /// The packet bound.
    pub fn max_packets(&self) -> usize {
        self.max_packets
    }

    /// Packets per ring.
    pub fn ring_slots(&self) -> usize {
        self.ring_slots as usize
    }

    /// Bytes the pool occupies (rings and their slots).
    pub fn bytes(&self) -> usize {
        self.rings.len() * (std::mem::size_of::<Ring>() + self.ring_slots as usize * 4)
    }

    /// Take a free ring (lock-free).
    pub fn take(&self) -> Option<u32> {
        let mut top = self.top.load(Ordering::Acquire);
        loop {
            let idx = top as u32;
            if idx == NIL {
                return None;
            }
            let next = self.rings[idx as usize].next.load(Ordering::Relaxed);
            let new = (top >> 32).wrapping_add(1) << 32 | u64::from(next);
            match self
                .top
                .compare_exchange_weak(top, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.free.fetch_sub(1, Ordering::Relaxed);
                    self.rings[idx as usize].next.store(NIL, Ordering::Relaxed);
                    return Some(idx);
                }
                Err(seen) => top = seen,
            }
        }
    }

    /// Return ring `idx` to the pool (lock-free).
    pub fn give(&self, idx: u32) {
        let mut top = self.top.load(Ordering::Acquire);
        loop {
            self.rings[idx as usize]
                .next
                .store(top as u32, Ordering::Relaxed);
            let new = (top >> 32).wrapping_add(1) << 32 | u64::from(idx);
            match self
                .top
                .compare_exchange_weak(top, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.free.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(seen) => top = seen,
            }
        }
    }
}

/// Packets a flow keeps inline in its [`FlowQueue`]: a flow holding at most this many packets
/// (the common case: TSQ and zD keep one or two per flow) needs no ring at all.
pub const INLINE: usize = 2;

/// Most free rings one engine keeps for itself in front of the shared stack (each CAS on the
/// stack's head costs as much as the rest of a push). Capped at an eighth of the pool so that
/// small pools stay shared.
pub const RING_CACHE: usize = 32;

/// Most packets of the pool's budget one engine reserves at once (one atomic per batch instead
/// of one per packet). Capped at a 64th of the bound so that small bounds stay exact.
pub const PACKET_BATCH: usize = 32;

/// One flow's queue: 32 bytes (two per cache line), and no ring while it holds at most
/// [`INLINE`] packets.
///
/// The inline packets are always older than the packets in rings: a packet goes inline only
/// while the flow holds no ring, and `pop` empties the inline slots first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowQueue {
    /// The oldest packets, `inline[..n_inline]`, oldest first.
    inline: [u32; INLINE],
    head: u32,
    tail: u32,
    /// Read position in the head ring, write position in the tail ring.
    head_pos: u32,
    tail_pos: u32,
    n_inline: u32,
    /// Packets in all (inline and in rings).
    len: u32,
}

const _: () = assert!(std::mem::size_of::<FlowQueue>() == 32);

impl Default for FlowQueue {
    fn default() -> Self {
        FlowQueue {
            inline: [0; INLINE],
            head: NIL,
            tail: NIL,
            head_pos: 0,
            tail_pos: 0,
            n_inline: 0,
            len: 0,
        }
    }
}

impl FlowQueue {
    /// True when the flow holds no packet (and no ring).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Packets the flow holds.
    pub(crate) fn len(&self) -> u32 {
        self.len
    }
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DpfqStats {
    /// Packets queued.
    pub pushed: u64,
    /// Packets taken.
    pub popped: u64,
    /// Refused at the packet bound.
    pub bound_packets: u64,
    /// Refused because no ring was free.
    pub bound_rings: u64,
    /// Rings linked behind a full one (bursts).
    pub extended: u64,
    /// Refused because the flow id is beyond the engine's flows.
    pub unknown_flow: u64,
}

/// The per-flow queues of one engine, over a shared pool. See the module note.
///
/// Two engine-local shortcuts keep the shared atomics off the per-packet path: a cache of up to
/// [`RING_CACHE`] free rings in front of the pool's stack, and a reserve of the pool's packet
/// budget taken in batches of up to [`PACKET_BATCH`]. Both stay small against the pool (an
/// eighth of its rings, a 64th of its bound, at most twice that between refills). Both go back
/// to the pool when the engine's queues are dropped, and, if the pool is shared, whenever they
/// empty: only engines holding packets keep any. [`RingPool::packets`] counts reserved budget as
/// used, so the bound is never exceeded; another engine may see it reached up to `2 * batch`
/// packets early per busy engine.
pub struct Dpfq {
    pool: Arc<RingPool>,
    flows: Vec<FlowQueue>,
    /// Free rings this engine took from the pool (or freed) and keeps for its next pushes.
    cache: Vec<u32>,
    cache_cap: usize,
    /// Packets of the pool's budget reserved by this engine and not used by a packet yet.
    reserve: usize,
    batch: usize,
    /// Packets this engine's flows hold.
    packets: usize,
    stats: DpfqStats,
}

/// A ring for a push: from the engine's cache, else from the shared stack.
#[inline]
fn take_ring(cache: &mut Vec<u32>, pool: &RingPool) -> Option<u32> {
    cache.pop().or_else(|| pool.take())
}

/// A ring that emptied: into the engine's cache while it has room, else back to the stack.
#[inline]
fn give_ring(cache: &mut Vec<u32>, cap: usize, pool: &RingPool, ring: u32) {
    if cache.len() < cap {
        pool.rings[ring as usize].next.store(NIL, Ordering::Relaxed);
        cache.push(ring);
    } else {
        pool.give(ring);
    }
}

impl Dpfq {
    /// Queues for flow ids `0..flows` over `pool`.
    pub fn new(pool: Arc<RingPool>, flows: usize) -> Self {
        let cache_cap = RING_CACHE.min(pool.rings() / 8);
        let batch = (pool.max_packets() / 64).clamp(1, PACKET_BATCH);
        Dpfq {
            pool,
            flows: vec![FlowQueue::default(); flows],
            cache: Vec::with_capacity(cache_cap),
            cache_cap,
            reserve: 0,
            batch,
            packets: 0,
            stats: DpfqStats::default(),
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Arc<RingPool> {
        &self.pool
    }

    /// Counters.
    pub fn stats(&self) -> DpfqStats {
        self.stats
    }

    /// Packets all of this engine's flows hold.
    pub fn packets(&self) -> usize {
        self.packets
    }

    /// Free rings this engine keeps in its cache (not on the pool's stack).
    pub fn cached_rings(&self) -> usize {
        self.cache.len()
    }

    /// Flows this engine has queues for (ids `0..flows()`).
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Packets `flow` holds.
    #[inline]
    pub fn len(&self, flow: u32) -> usize {
        Self::len_in(&self.flows[..], flow)
    }

    #[inline]
    pub(crate) fn len_in<S: Slots<FlowQueue> + ?Sized>(ss: &S, flow: u32) -> usize {
        ss.slot(flow).map_or(0, |q| q.len as usize)
    }

    /// A Dpfq whose flow records live elsewhere (the `_in` methods take them).
    pub(crate) fn detached(pool: Arc<RingPool>) -> Self {
        Dpfq::new(pool, 0)
    }

    /// Whether `flow` holds nothing.
    #[inline]
    pub fn is_empty(&self, flow: u32) -> bool {
        self.len(flow) == 0
    }

    /// Start loading `flow`'s queue record into the cache ahead of use (a prefetch hint, see
    /// [`crate::prefetch`]). Out-of-range ids are ignored.
    #[inline]
    pub fn prefetch(&self, flow: u32) {
        if let Some(q) = self.flows.get(flow as usize) {
            crate::prefetch(q);
        }
    }

    /// Reserve a batch of the pool's packet budget (less near the bound); false at the bound.
    #[cold]
    fn refill(&mut self) -> bool {
        let pool = &*self.pool;
        let batch = self.batch;
        // The counter never exceeds the bound, even for an instant, whatever other engines do.
        // (A compare-exchange loop rather than `fetch_update`, which Rust 1.99 deprecates for
        // a name the declared minimum Rust does not have.)
        let mut p = pool.packets.load(Ordering::Relaxed);
        loop {
            let k = batch.min(pool.max_packets.saturating_sub(p));
            if k == 0 {
                return false;
            }
            match pool
                .packets
                .compare_exchange_weak(p, p + k, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.reserve += k;
                    return true;
                }
                Err(now) => p = now,
            }
        }
    }

    /// Append `item` to `flow`'s queue, or refuse at the memory bound. `flow` must be below the
    /// number of flows given to `new` (out of range counts as at the bound).
    #[inline]
    pub fn push(&mut self, flow: u32, item: u32) -> Result<(), AtBound> {
        let mut flows = std::mem::take(&mut self.flows);
        let r = self.push_in(&mut flows[..], flow, item);
        self.flows = flows;
        r
    }

    #[inline]
    pub(crate) fn push_in<S: Slots<FlowQueue> + ?Sized>(
        &mut self,
        ss: &mut S,
        flow: u32,
        item: u32,
    ) -> Result<(), AtBound> {
        if flow as usize >= ss.count() {
            self.stats.unknown_flow += 1;
            return Err(AtBound { what: "flow id" });
        }
        if self.reserve == 0 && !self.refill() {
            self.stats.bound_packets += 1;
            return Err(AtBound { what: "packets" });
        }
        let pool = &*self.pool;
        let q = ss.slot_mut(flow).expect("checked above");
        if q.head == NIL && (q.n_inline as usize) < INLINE {
            // No ring yet and room inline: the packet stays in the flow's own record.
            q.inline[q.n_inline as usize] = item;
            q.n_inline += 1;
        } else {
            if q.tail == NIL || q.tail_pos == pool.ring_slots {
                let Some(ring) = take_ring(&mut self.cache, pool) else {
                    self.stats.bound_rings += 1;
                    return Err(AtBound { what: "rings" });
                };
                if q.tail == NIL {
                    q.head = ring;
                    q.head_pos = 0;
                } else {
                    pool.rings[q.tail as usize]
                        .next
                        .store(ring, Ordering::Relaxed);
                    self.stats.extended += 1;
                }
                q.tail = ring;
                q.tail_pos = 0;
            }
            pool.rings[q.tail as usize].slots[q.tail_pos as usize].store(item, Ordering::Relaxed);
            q.tail_pos += 1;
        }
        q.len += 1;
        self.reserve -= 1;
        self.packets += 1;
        self.stats.pushed += 1;
        Ok(())
    }

    /// The first item of `flow`'s queue.
    #[inline]
    pub fn peek(&self, flow: u32) -> Option<u32> {
        self.peek_in(&self.flows[..], flow)
    }

    #[inline]
    pub(crate) fn peek_in<S: Slots<FlowQueue> + ?Sized>(&self, ss: &S, flow: u32) -> Option<u32> {
        let q = ss.slot(flow)?;
        if q.n_inline > 0 {
            return Some(q.inline[0]);
        }
        if q.head == NIL {
            return None;
        }
        Some(self.pool.rings[q.head as usize].slots[q.head_pos as usize].load(Ordering::Relaxed))
    }

    /// Take the first item of `flow`'s queue; rings that empty go back to the pool (through
    /// the engine's cache).
    #[inline]
    pub fn pop(&mut self, flow: u32) -> Option<u32> {
        let mut flows = std::mem::take(&mut self.flows);
        let r = self.pop_in(&mut flows[..], flow);
        self.flows = flows;
        r
    }

    #[inline]
    pub(crate) fn pop_in<S: Slots<FlowQueue> + ?Sized>(
        &mut self,
        ss: &mut S,
        flow: u32,
    ) -> Option<u32> {
        let q = ss.slot_mut(flow)?;
        let item;
        if q.n_inline > 0 {
            item = q.inline[0];
            q.inline.copy_within(1.., 0);
            q.n_inline -= 1;
        } else {
            if q.head == NIL {
                return None;
            }
            let pool = &*self.pool;
            let ring = &pool.rings[q.head as usize];
            item = ring.slots[q.head_pos as usize].load(Ordering::Relaxed);
            q.head_pos += 1;
            if q.head == q.tail && q.head_pos == q.tail_pos {
                // The rings are empty: the flow gives its last one back.
                give_ring(&mut self.cache, self.cache_cap, pool, q.head);
                q.head = NIL;
                q.tail = NIL;
                q.head_pos = 0;
                q.tail_pos = 0;
            } else if q.head_pos == pool.ring_slots {
                let next = ring.next.load(Ordering::Relaxed);
                give_ring(&mut self.cache, self.cache_cap, pool, q.head);
                q.head = next;
                q.head_pos = 0;
            }
        }
        q.len -= 1;
        self.packets -= 1;
        self.stats.popped += 1;
        // The packet's budget returns to the reserve; a reserve that grew past two batches goes
        // back to the pool down to one batch less one (with a batch of 1: none is kept).
        self.reserve += 1;
        if self.packets == 0 && Arc::strong_count(&self.pool) > 1 {
            self.release_idle();
        } else if self.reserve >= 2 * self.batch - 1 {
            let keep = self.batch - 1;
            self.pool
                .packets
                .fetch_sub(self.reserve - keep, Ordering::Relaxed);
            self.reserve = keep;
        }
        Some(item)
    }

    /// The engine's queues emptied and it shares the pool: give back its reserved budget and
    /// its cached rings. An idle engine may stay idle for good, and what it keeps no other
    /// engine can use: 64 idle engines kept the whole packet bound (a batch is a 64th of it),
    /// eight the whole pool of rings (a cache is an eighth), and then nobody could queue a
    /// packet with none held anywhere. A busy engine keeps both (its next pushes and pops use
    /// them); an engine that empties after every packet pays a refill and a return per packet,
    /// uncontended when the traffic is that light.
    #[cold]
    fn release_idle(&mut self) {
        if self.reserve > 0 {
            self.pool.packets.fetch_sub(self.reserve, Ordering::Relaxed);
            self.reserve = 0;
        }
        for ring in self.cache.drain(..) {
            self.pool.give(ring);
        }
    }

    /// Rings `flow` holds now.
    pub fn rings_of(&self, flow: u32) -> usize {
        let Some(q) = self.flows.get(flow as usize) else {
            return 0;
        };
        let mut n = 0;
        let mut cur = q.head;
        while cur != NIL {
            n += 1;
            if cur == q.tail {
                break;
            }
            cur = self.pool.rings[cur as usize].next.load(Ordering::Relaxed);
        }
        n
    }
}

impl Drop for Dpfq {
    /// Give back every ring this engine's flows still hold or its cache keeps, and its
    /// unused packet budget.
    fn drop(&mut self) {
        for f in 0..self.flows.len() as u32 {
            while self.pop(f).is_some() {}
        }
        for ring in self.cache.drain(..) {
            self.pool.give(ring);
        }
        self.pool.packets.fetch_sub(self.reserve, Ordering::Relaxed);
        self.reserve = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_across_linked_rings_and_rings_come_back() {
        let pool = RingPool::new(8, 4, 100).unwrap();
        let mut q = Dpfq::new(pool.clone(), 3);
        for i in 0..14 {
            q.push(1, i).unwrap();
        }
        // Two inline, twelve in three rings.
        assert_eq!(q.rings_of(1), 3);
        assert_eq!(pool.free_rings(), 5);
        assert_eq!(q.stats().extended, 2);
        for i in 0..14 {
            assert_eq!(q.peek(1), Some(i));
            assert_eq!(q.pop(1), Some(i));
        }
        assert_eq!(q.pop(1), None);
        assert_eq!(q.rings_of(1), 0, "an idle flow holds no ring");
        assert_eq!(pool.free_rings() + q.cached_rings(), 8);
        assert_eq!(q.packets(), 0);
        drop(q);
        assert_eq!(pool.free_rings(), 8, "the cache goes back with the queues");
        assert_eq!(pool.packets(), 0);
    }

    #[test]
    fn one_or_two_packets_need_no_ring_and_order_holds_across_inline_and_rings() {
        let pool = RingPool::new(4, 2, 100).unwrap();
        let mut q = Dpfq::new(pool.clone(), 2);
        q.push(0, 1).unwrap();
        q.push(0, 2).unwrap();
        assert_eq!(q.rings_of(0), 0);
        assert_eq!(pool.free_rings(), 4);
        // The third goes to a ring; after one pop the inline slot is free, but the next packet
        // must go behind the ring's, not inline ahead of them.
        q.push(0, 3).unwrap();
        assert_eq!(q.rings_of(0), 1);
        assert_eq!(q.pop(0), Some(1));
        q.push(0, 4).unwrap();
        q.push(0, 5).unwrap();
        let mut got = Vec::new();
        while let Some(x) = q.pop(0) {
            got.push(x);
        }
        assert_eq!(got, vec![2, 3, 4, 5]);
        assert_eq!(q.len(0), 0);
        // Empty again: inline again.
        q.push(0, 6).unwrap();
        assert_eq!(q.rings_of(0), 0);
        assert_eq!(q.pop(0), Some(6));
    }

    #[test]
    fn reserved_budget_never_exceeds_the_bound_and_comes_back() {
        // A bound of 6400: batches of 32.
        let pool = RingPool::new(1000, 8, 6400).unwrap();
        let mut a = Dpfq::new(pool.clone(), 10);
        let mut b = Dpfq::new(pool.clone(), 10);
        let mut n = 0;
        while a.push(n % 10, n).is_ok() {
            n += 1;
        }
        assert_eq!(a.stats().bound_packets, 1);
        assert!(pool.packets() <= 6400);
        assert_eq!(a.packets() as u32, n);
        assert!(b.push(0, 0).is_err(), "a holds the whole bound");
        for f in 0..10 {
            while a.pop(f).is_some() {}
        }
        // a keeps at most a batch of budget: b can use the rest.
        assert!(pool.packets() < 64);
        for i in 0..6000 {
            b.push(i % 10, i).unwrap();
        }
        drop(a);
        drop(b);
        assert_eq!(pool.packets(), 0);
        assert_eq!(pool.free_rings(), 1000);
    }

    #[test]
    fn the_bound_is_global() {
        let pool = RingPool::new(100, 4, 6).unwrap();
        let mut a = Dpfq::new(pool.clone(), 2);
        let mut b = Dpfq::new(pool.clone(), 2);
        for i in 0..4 {
            a.push(0, i).unwrap();
        }
        b.push(1, 0).unwrap();
        b.push(1, 1).unwrap();
        assert_eq!(a.push(1, 9), Err(AtBound { what: "packets" }));
        assert_eq!(b.push(0, 9), Err(AtBound { what: "packets" }));
        a.pop(0);
        assert!(b.push(0, 9).is_ok(), "room freed by the other engine");
        // Out of rings before packets.
        let pool = RingPool::new(2, 2, 100).unwrap();
        let mut c = Dpfq::new(pool, 4);
        for f in 0..2 {
            // Two inline, the third takes a ring.
            for i in 0..3 {
                c.push(f, i).unwrap();
            }
        }
        c.push(2, 0).unwrap();
        c.push(2, 1).unwrap();
        assert_eq!(c.push(2, 2), Err(AtBound { what: "rings" }));
        assert_eq!(c.stats().bound_rings, 1);
    }

    #[test]
    fn bad_configuration() {
        assert!(RingPool::new(0, 4, 4).is_err());
        assert!(RingPool::new(4, 0, 4).is_err());
        assert!(RingPool::new(4, 4, 0).is_err());
        let pool = RingPool::new(1, 1, 1).unwrap();
        let mut q = Dpfq::new(pool, 1);
        assert!(q.push(5, 0).is_err(), "flow out of range");
        assert_eq!(q.pop(5), None);
    }
}
