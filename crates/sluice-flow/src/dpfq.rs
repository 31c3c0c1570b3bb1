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
//! - A flow with no packets owns no ring: an idle flow costs its 16-byte [`FlowQueue`] only.
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

    /// Packets held by all flows now.
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

/// One flow's queue: 16 bytes, and no ring while it is empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowQueue {
    head: u32,
    tail: u32,
    /// Read position in the head ring, write position in the tail ring.
    head_pos: u32,
    tail_pos: u32,
}

const _: () = assert!(std::mem::size_of::<FlowQueue>() == 16);

impl Default for FlowQueue {
    fn default() -> Self {
        FlowQueue {
            head: NIL,
            tail: NIL,
            head_pos: 0,
            tail_pos: 0,
        }
    }
}

impl FlowQueue {
    /// True when the flow holds no packet (and no ring).
    pub fn is_empty(&self) -> bool {
        self.head == NIL
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
}

/// The per-flow queues of one engine, over a shared pool. See the module note.
pub struct Dpfq {
    pool: Arc<RingPool>,
    flows: Vec<FlowQueue>,
    /// Packets per flow (to answer `len` in O(1)).
    lens: Vec<u32>,
    stats: DpfqStats,
}

impl Dpfq {
    /// Queues for flow ids `0..flows` over `pool`.
    pub fn new(pool: Arc<RingPool>, flows: usize) -> Self {
        Dpfq {
            pool,
            flows: vec![FlowQueue::default(); flows],
            lens: vec![0; flows],
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

    /// Packets `flow` holds.
    pub fn len(&self, flow: u32) -> usize {
        self.lens.get(flow as usize).map_or(0, |&l| l as usize)
    }

    /// Whether `flow` holds nothing.
    pub fn is_empty(&self, flow: u32) -> bool {
        self.len(flow) == 0
    }

    /// Append `item` to `flow`'s queue, or refuse at the memory bound. `flow` must be below the
    /// number of flows given to `new` (out of range counts as at the bound).
    pub fn push(&mut self, flow: u32, item: u32) -> Result<(), AtBound> {
        let Some(q) = self.flows.get_mut(flow as usize) else {
            self.stats.bound_packets += 1;
            return Err(AtBound { what: "packets" });
        };
        let pool = &*self.pool;
        // Count the packet only if it fits: the counter never exceeds the bound, even for an
        // instant, whatever other engines do.
        let counted = pool
            .packets
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                (p < pool.max_packets).then_some(p + 1)
            });
        if counted.is_err() {
            self.stats.bound_packets += 1;
            return Err(AtBound { what: "packets" });
        }
        if q.tail == NIL || q.tail_pos == pool.ring_slots {
            let Some(ring) = pool.take() else {
                pool.packets.fetch_sub(1, Ordering::Relaxed);
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
        self.lens[flow as usize] += 1;
        self.stats.pushed += 1;
        Ok(())
    }

    /// The first item of `flow`'s queue.
    pub fn peek(&self, flow: u32) -> Option<u32> {
        let q = self.flows.get(flow as usize)?;
        if q.head == NIL {
            return None;
        }
        Some(self.pool.rings[q.head as usize].slots[q.head_pos as usize].load(Ordering::Relaxed))
    }

    /// Take the first item of `flow`'s queue; rings that empty go back to the pool.
    pub fn pop(&mut self, flow: u32) -> Option<u32> {
        let q = self.flows.get_mut(flow as usize)?;
        if q.head == NIL {
            return None;
        }
        let pool = &*self.pool;
        let ring = &pool.rings[q.head as usize];
        let item = ring.slots[q.head_pos as usize].load(Ordering::Relaxed);
        q.head_pos += 1;
        if q.head == q.tail && q.head_pos == q.tail_pos {
            // Empty: the flow gives its last ring back and holds nothing.
            pool.give(q.head);
            *q = FlowQueue::default();
        } else if q.head_pos == pool.ring_slots {
            let next = ring.next.load(Ordering::Relaxed);
            pool.give(q.head);
            q.head = next;
            q.head_pos = 0;
        }
        pool.packets.fetch_sub(1, Ordering::Relaxed);
        self.lens[flow as usize] -= 1;
        self.stats.popped += 1;
        Some(item)
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
    /// Give back every ring this engine's flows still hold.
    fn drop(&mut self) {
        for f in 0..self.flows.len() as u32 {
            while self.pop(f).is_some() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_across_linked_rings_and_rings_come_back() {
        let pool = RingPool::new(8, 4, 100).unwrap();
        let mut q = Dpfq::new(pool.clone(), 3);
        for i in 0..10 {
            q.push(1, i).unwrap();
        }
        assert_eq!(q.rings_of(1), 3);
        assert_eq!(pool.free_rings(), 5);
        assert_eq!(q.stats().extended, 2);
        for i in 0..10 {
            assert_eq!(q.peek(1), Some(i));
            assert_eq!(q.pop(1), Some(i));
        }
        assert_eq!(q.pop(1), None);
        assert_eq!(pool.free_rings(), 8, "an idle flow holds no ring");
        assert_eq!(pool.packets(), 0);
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
            c.push(f, 0).unwrap();
        }
        assert_eq!(c.push(2, 0), Err(AtBound { what: "rings" }));
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
