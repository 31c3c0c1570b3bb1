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

    fn next_deadline(&self) -> Option<Rank> {
        self.peek_min().map(|e| e.rank)
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
