//! `BinaryHeapQueue`: the comparison baseline, std's `BinaryHeap` behind the queue contract.
//!
//! To be a fair baseline it is kept lean: each heap entry is one `u128` key,
//! `rank << 64 | arrival << 29 | slot`, 16 bytes (a bare `BinaryHeap<u64>` is only 1.3x faster
//! at 10^3 items; 24-byte tuple entries would be 3x slower at 10^6). The arrival counter makes
//! equal ranks leave FIFO; it has 35 bits, and the rare push that would wrap it renumbers the
//! queued entries in order first (O(n log n) once per 2^35 pushes). The slot indexes a slab
//! holding the item, so handles work as everywhere else.
//!
//! `BinaryHeap` cannot delete from the middle, so `remove` is lazy: the item leaves the slab at
//! once (O(1)) and its key becomes a tombstone, skipped when it reaches the top. The top is kept
//! live after every operation (so `peek_min` needs no mutation), and the heap is compacted when
//! tombstones outnumber live entries. Push and pop are O(log n).
//!
//! `requeue` of the top entry (the member a scheduler has just served and re-ranks: 80 to 100%
//! of the re-ranks in `sluice bench sched`'s heap baselines) changes its key in place and sifts
//! it down once (`BinaryHeap::peek_mut`), as a heap-based scheduler would, keeping its slot and
//! handle; any other `requeue` is a lazy remove and a push. (Sifting any entry in place would
//! take an indexed heap, one that tracks every entry's position through every swap, at a cost
//! on every push and pop; `std`'s heap does not.)

use crate::error::check_capacity;
use crate::slab::Slab;
use crate::{ConfigError, Entry, Handle, PushError, QueueStats, Rank, RankQueue, StaleHandle};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const SLOT_BITS: u32 = 29;
const SEQ_BITS: u32 = 35;
const SLOT_MASK: u128 = (1 << SLOT_BITS) - 1;

fn key(rank: Rank, seq: u64, slot: u32) -> u128 {
    u128::from(rank) << 64 | u128::from(seq) << SLOT_BITS | u128::from(slot)
}

fn seq_of(key: u128) -> u64 {
    ((key >> SLOT_BITS) as u64) & ((1 << SEQ_BITS) - 1)
}

fn slot_of(key: u128) -> u32 {
    (key & SLOT_MASK) as u32
}

/// std `BinaryHeap` baseline. See the module note.
pub struct BinaryHeapQueue<T> {
    heap: BinaryHeap<Reverse<u128>>,
    /// Slot -> (rank, item, arrival); a key is live iff its slot holds its arrival number.
    slab: Slab<(Rank, T, u64)>,
    tombstones: usize,
    seq: u64,
    stats: QueueStats,
}

impl<T: Copy> BinaryHeapQueue<T> {
    /// An empty heap for up to `capacity` items.
    pub fn new(capacity: usize) -> Result<Self, ConfigError> {
        check_capacity(capacity)?;
        let mut heap = BinaryHeap::new();
        heap.try_reserve_exact(2 * capacity + 64)
            .map_err(|_| ConfigError::OutOfMemory {
                what: "heap entries",
                bytes: (2 * capacity as u64 + 64) * 16,
            })?;
        Ok(BinaryHeapQueue {
            heap,
            slab: Slab::new(capacity)?,
            tombstones: 0,
            seq: 0,
            stats: QueueStats::default(),
        })
    }

    fn is_live(slab: &Slab<(Rank, T, u64)>, key: u128) -> bool {
        matches!(slab.at(slot_of(key)), Some((_, _, s)) if s == seq_of(key))
    }

    /// Drop tombstones from the top so that the top is live.
    fn purge_top(&mut self) {
        while self.tombstones > 0 {
            match self.heap.peek() {
                Some(&Reverse(k)) if !Self::is_live(&self.slab, k) => {
                    self.heap.pop();
                    self.tombstones -= 1;
                }
                _ => break,
            }
        }
    }

    /// Renumber queued entries 0.. in their current order (before the counter would wrap), in
    /// the heap's own storage: nothing is allocated (collected into a new vector, as before,
    /// it allocated once per 2^35 pushes).
    fn renumber(&mut self) {
        let slab = &self.slab;
        let mut keys = std::mem::take(&mut self.heap).into_vec();
        keys.retain(|&Reverse(k)| Self::is_live(slab, k));
        // Reversed keys: descending order of the reversal is ascending order of the keys.
        keys.sort_unstable_by(|a, b| b.cmp(a));
        self.tombstones = 0;
        for (seq, Reverse(k)) in keys.iter_mut().enumerate() {
            let slot = slot_of(*k);
            if let Some((rank, item, _)) = self.slab.at(slot) {
                self.slab.set_at(slot, (rank, item, seq as u64));
                *k = key(rank, seq as u64, slot);
            }
        }
        self.seq = keys.len() as u64;
        self.heap = BinaryHeap::from(keys);
    }
}

impl<T: Copy> RankQueue<T> for BinaryHeapQueue<T> {
    fn push(&mut self, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        if self.seq == 1 << SEQ_BITS {
            self.renumber();
        }
        let Some(handle) = self.slab.insert((rank, item, self.seq)) else {
            self.stats.rejected_full += 1;
            return Err(PushError::Full { rank, item });
        };
        self.heap.push(Reverse(key(rank, self.seq, handle.index())));
        self.seq += 1;
        self.stats.pushed += 1;
        Ok(handle)
    }

    /// The top entry in place (see the module note). Its new key is the one a remove and a
    /// push would give it: `rank`, the next arrival number, and its slot (which the push would
    /// take back first from the free list). That key is larger than the old one unless `rank`
    /// is smaller, so it sifts down from the top or stays there, never up. The live keys, and
    /// so the order of everything after, are the remove and push's; so are `len` and the
    /// counters (one removal, one push). Only the handle differs: the slot keeps its
    /// generation, so the handle stays valid and is handed back as it was, as the contract
    /// allows. When the arrival counter is due for renumbering, the fallback's push does it.
    fn requeue(&mut self, handle: Handle, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        // The handle's own (generation checked) and live: the top is always live, but that
        // is checked here rather than assumed.
        let on_top = self.seq < 1 << SEQ_BITS
            && matches!(self.heap.peek(), Some(&Reverse(k)) if slot_of(k) == handle.index()
                && matches!(self.slab.get(handle), Some((_, _, s)) if s == seq_of(k)));
        if on_top {
            let (seq, slot) = (self.seq, handle.index());
            self.seq += 1;
            self.slab.set_at(slot, (rank, item, seq));
            if let Some(mut top) = self.heap.peek_mut() {
                // Dropping `top` sifts the new key down to its place.
                *top = Reverse(key(rank, seq, slot));
            }
            self.purge_top();
            self.stats.removed += 1;
            self.stats.pushed += 1;
            return Ok(handle);
        }
        let _ = self.remove(handle);
        self.push(rank, item)
    }

    fn pop_min(&mut self) -> Option<Entry<T>> {
        let Reverse(k) = self.heap.pop()?;
        let (rank, item, _) = self.slab.take_at(slot_of(k))?;
        self.purge_top();
        self.stats.popped += 1;
        Some(Entry { rank, item })
    }

    fn peek_min(&self) -> Option<Entry<T>> {
        let &Reverse(k) = self.heap.peek()?;
        self.slab
            .at(slot_of(k))
            .map(|(rank, item, _)| Entry { rank, item })
    }

    fn rank_of(&self, handle: Handle) -> Option<Rank> {
        self.slab.get(handle).map(|(rank, _, _)| rank)
    }

    fn remove(&mut self, handle: Handle) -> Result<Entry<T>, StaleHandle> {
        let Some((rank, item, _)) = self.slab.take(handle) else {
            self.stats.stale_handles += 1;
            return Err(StaleHandle);
        };
        self.tombstones += 1;
        self.purge_top();
        if self.tombstones > 64 && self.tombstones > self.slab.len() {
            let slab = &self.slab;
            self.heap.retain(|&Reverse(k)| Self::is_live(slab, k));
            self.tombstones = 0;
        }
        self.stats.removed += 1;
        Ok(Entry { rank, item })
    }

    fn len(&self) -> usize {
        self.slab.len()
    }

    fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// The top's rank, from its key: the top is live (every operation leaves it so), and a
    /// heap timer reads its deadline from the heap, not from the item's record.
    fn next_deadline(&self) -> Option<Rank> {
        self.heap.peek().map(|&Reverse(k)| (k >> 64) as Rank)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_order_by_rank_then_arrival() {
        let k = key(7, 5, 3);
        assert_eq!((seq_of(k), slot_of(k)), (5, 3));
        assert!(key(7, 5, 9) < key(7, 6, 0));
        assert!(key(7, (1 << SEQ_BITS) - 1, 0) < key(8, 0, 0));
    }

    /// Pop everything, items in order.
    fn drain(q: &mut BinaryHeapQueue<u32>) -> Vec<u32> {
        std::iter::from_fn(|| q.pop_min().map(|e| e.item)).collect()
    }

    /// The top is live, as every operation leaves it.
    fn top_is_live(q: &BinaryHeapQueue<u32>) -> bool {
        q.heap
            .peek()
            .is_none_or(|&Reverse(k)| BinaryHeapQueue::is_live(&q.slab, k))
    }

    #[test]
    fn requeue_of_the_top_sifts_it_in_place_as_a_remove_and_a_push_would_place_it() {
        // `twin` is re-ranked by a remove and a push (the trait's default).
        let mut q = BinaryHeapQueue::new(16).unwrap();
        let mut twin = BinaryHeapQueue::new(16).unwrap();
        let mut handles = Vec::new();
        for (rank, item) in [(5, 0u32), (3, 1), (8, 2), (3, 3), (1, 4)] {
            handles.push((q.push(rank, item).unwrap(), twin.push(rank, item).unwrap()));
        }
        let twin_requeue = |twin: &mut BinaryHeapQueue<u32>, h, rank, item| {
            let _ = twin.remove(h);
            twin.push(rank, item).unwrap()
        };
        // Item 4 (rank 1) is the top; it sinks behind both items of rank 3 (FIFO: it arrives
        // after them), and its handle is handed back as it was.
        let (h4, t4) = handles[4];
        assert_eq!(q.peek_min().map(|e| e.item), Some(4));
        assert_eq!(q.requeue(h4, 3, 4), Ok(h4));
        twin_requeue(&mut twin, t4, 3, 4);
        assert_eq!(q.rank_of(h4), Some(3));
        assert_eq!((q.heap.len(), q.tombstones), (5, 0), "no tombstone left");
        assert_eq!((q.len(), q.stats()), (twin.len(), twin.stats()));
        // Item 1 is the top now; a smaller rank keeps it there (no sift).
        let (h1, t1) = handles[1];
        assert_eq!(q.peek_min().map(|e| e.item), Some(1));
        assert_eq!(q.requeue(h1, 0, 1), Ok(h1));
        twin_requeue(&mut twin, t1, 0, 1);
        assert_eq!(q.peek_min(), Some(Entry { rank: 0, item: 1 }));
        assert_eq!((q.len(), q.stats()), (twin.len(), twin.stats()));
        assert!(top_is_live(&q));
        assert_eq!(drain(&mut q), vec![1, 3, 4, 0, 2]);
        assert_eq!(drain(&mut twin), vec![1, 3, 4, 0, 2]);
    }

    #[test]
    fn requeue_of_the_top_drops_the_tombstones_it_sinks_past() {
        let mut q = BinaryHeapQueue::new(64).unwrap();
        let hs: Vec<Handle> = (0..20u32)
            .map(|i| q.push(u64::from(i), i).unwrap())
            .collect();
        // Removed entries just below the top stay in the heap as tombstones.
        for &h in &hs[1..6] {
            q.remove(h).unwrap();
        }
        assert_eq!(q.tombstones, 5);
        assert_eq!(q.requeue(hs[0], 100, 0), Ok(hs[0]));
        // They reached the top as the entry sank, and left: the top is item 6, live.
        assert_eq!(q.tombstones, 0);
        assert!(top_is_live(&q));
        assert_eq!(q.peek_min().map(|e| e.item), Some(6));
        assert_eq!(q.len(), 15);
        assert_eq!(drain(&mut q), (6..20).chain([0]).collect::<Vec<u32>>());
    }

    #[test]
    fn requeue_of_another_entry_or_with_a_stale_handle_is_a_remove_and_a_push() {
        // Not the top: a lazy remove (a tombstone) and a push, with a new handle.
        let mut q = BinaryHeapQueue::new(8).unwrap();
        let _a = q.push(1, 10u32).unwrap();
        let b = q.push(2, 11).unwrap();
        q.push(3, 12).unwrap();
        let b2 = q.requeue(b, 0, 11).unwrap();
        assert_ne!(b2, b);
        assert_eq!((q.rank_of(b), q.rank_of(b2)), (None, Some(0)));
        assert_eq!(q.tombstones, 1);
        assert_eq!(drain(&mut q), vec![11, 10, 12]);

        // A stale handle naming the top's slot (an earlier generation) moves nothing: it is
        // counted, and its item pushed.
        let mut q = BinaryHeapQueue::new(8).unwrap();
        let old = q.push(1, 20u32).unwrap();
        q.pop_min().unwrap();
        let top = q.push(5, 21).unwrap();
        assert_eq!(top.index(), old.index(), "the slot was reused");
        let pushed = q.requeue(old, 0, 22).unwrap();
        assert_ne!(pushed, top);
        assert_eq!(q.stats().stale_handles, 1);
        assert_eq!(q.rank_of(top), Some(5));
        assert_eq!(drain(&mut q), vec![22, 21]);
    }

    #[test]
    fn requeue_of_the_top_uses_the_last_arrival_number_and_then_leaves_renumbering_to_push() {
        let mut q = BinaryHeapQueue::new(16).unwrap();
        q.seq = (1 << SEQ_BITS) - 4;
        let h0 = q.push(0, 0u32).unwrap();
        let h1 = q.push(1, 1).unwrap();
        q.push(1, 2).unwrap();
        assert_eq!(q.seq, (1 << SEQ_BITS) - 1);
        // In place, with the last arrival number the key can hold.
        assert_eq!(q.requeue(h0, 1, 0), Ok(h0));
        assert_eq!(q.seq, 1 << SEQ_BITS);
        // The counter is spent: item 1, now the top, moves by a remove and a push, which
        // renumbers the queued entries in order first.
        assert_eq!(q.peek_min().map(|e| e.item), Some(1));
        let h1b = q.requeue(h1, 1, 1).unwrap();
        assert_ne!(h1b, h1);
        assert!(q.seq < 10, "renumbered");
        assert_eq!(drain(&mut q), vec![2, 0, 1]);
    }

    #[test]
    fn renumbering_keeps_fifo_order() {
        let mut q = BinaryHeapQueue::new(100).unwrap();
        q.seq = (1 << SEQ_BITS) - 3;
        for i in 0..10u32 {
            q.push(u64::from(i % 2), i).unwrap();
        }
        let h = q.push(0, 99).unwrap();
        q.remove(h).unwrap();
        let order: Vec<u32> = std::iter::from_fn(|| q.pop_min().map(|e| e.item)).collect();
        assert_eq!(order, vec![0, 2, 4, 6, 8, 1, 3, 5, 7, 9]);
        assert!(q.seq < 20, "counter was renumbered");
    }
}
