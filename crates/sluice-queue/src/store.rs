//! The bucket store: FIFO buckets over one global pool of pre-allocated chunks.
//!
//! This is Carousel's "global pool of memory" (§3.4.1): a bucket is a doubly linked list of
//! chunks, each chunk holds up to [`CHUNK_SLOTS`] item references with their ranks, and chunks
//! come from (and return to) one free stack shared by all buckets. A push appends to the tail
//! chunk of its bucket (taking a fresh chunk when it is full), a pop takes from the head chunk.
//! Allocating and freeing is amortized over up to eight items and never calls the allocator:
//! the chunk vector is reserved at construction for the worst case.
//!
//! ```text
//!  bucket 3:  [chunk 17: r r r r r r r r] <-> [chunk 5: r r r . . . . .]
//!              head --^                         tail --^        ^-- free slots
//!  free stack: 9 -> 2 -> 40 -> ...   (then never-used chunks, bump-allocated)
//! ```
//!
//! **Removal in O(1)** marks the entry dead (a bit in the chunk). A chunk whose entries are all
//! dead or consumed is unlinked and freed at once, so every chunk on a list holds at least one
//! live item: chunks in use <= items queued <= capacity, which is what the pool reserves.
//!
//! **Handles** name (chunk, slot) and carry the chunk's generation, bumped every time the chunk
//! is freed. A handle is valid while its slot is between the chunk's head and tail and not
//! dead; anything else is stale. Generations start at a per-store seed so that handles of two
//! queues rarely share one (foreign handles are caught unless the 32-bit generations collide).
//!
//! Invariants (checked by [`BucketStore::check`] in tests):
//! - `head` of a linked chunk is a live slot; `head < tail <= CHUNK_SLOTS`; so a bucket is
//!   occupied exactly when its list has a chunk, and needs no count of its own.
//! - `len` is the number of live entries on all lists.
//! - every chunk is either on exactly one bucket list or on the free stack.

use crate::error::{filled, reserved};
use crate::{
    ConfigError, Entry, Handle, PushError, QueueStats, Rank, StaleHandle, UPCOMING, Upcoming,
};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};

/// Item references per chunk. Eight u32 items and their ranks fill two cache lines.
pub(crate) const CHUNK_SLOTS: usize = 8;
const SLOT_BITS: u32 = 3;
const NIL: u32 = u32::MAX;
/// Most chunks a store can address (the handle index keeps 3 bits for the slot).
pub(crate) const MAX_CHUNKS: usize = 1 << (32 - SLOT_BITS);

/// Field order matters: with u32 items the header, all items and the first rank share the
/// first cache line, so a bucket holding one item (the sparse case) touches one line.
#[derive(Clone)]
#[repr(C, align(64))]
struct Chunk<T> {
    next: u32,
    prev: u32,
    bucket: u32,
    generation: NonZeroU32,
    head: u8,
    tail: u8,
    /// Bit i set: slot i was removed.
    dead: u8,
    items: [T; CHUNK_SLOTS],
    ranks: [Rank; CHUNK_SLOTS],
}

// A chunk of u32 items is exactly two cache lines, its first rank in the first one.
const _: () = assert!(std::mem::size_of::<Chunk<u32>>() == 128);
const _: () = assert!(std::mem::offset_of!(Chunk<u32>, ranks) == 56);

impl<T> Chunk<T> {
    /// Live entries (for the invariant check).
    #[cfg(test)]
    fn live(&self) -> u32 {
        let span = u32::from(self.tail - self.head);
        let window = if self.tail as usize == CHUNK_SLOTS {
            0xffu32
        } else {
            (1u32 << self.tail) - 1
        } & !((1u32 << self.head) - 1);
        span - (u32::from(self.dead) & window).count_ones()
    }

    /// Move `head` past removed slots.
    #[inline]
    fn skip_dead(&mut self) {
        if self.dead != 0 {
            // The run of dead slots from `head` on, in one count (head <= 8 < 32).
            let run = (!(u32::from(self.dead) >> self.head)).trailing_zeros();
            self.head = (u32::from(self.head) + run).min(u32::from(self.tail)) as u8;
        }
    }
}

/// A bucket: the first and last chunk of its list (8 bytes, eight buckets per cache line).
#[derive(Clone, Copy, Debug)]
struct BucketList {
    head: u32,
    tail: u32,
}

const EMPTY_LIST: BucketList = BucketList {
    head: NIL,
    tail: NIL,
};

/// FIFO buckets over a pre-allocated chunk pool. See the module note.
pub(crate) struct BucketStore<T> {
    chunks: Vec<Chunk<T>>,
    free: u32,
    lists: Vec<BucketList>,
    len: usize,
    capacity: usize,
    seed: NonZeroU32,
    /// Pushes, pops, removes, stale handles and full rejections (range counters are the
    /// queues' own).
    stats: QueueStats,
}

/// A generation to start a new queue's handles from, different for each queue made, so that a
/// handle of one queue is stale in another (unless 32-bit generations happen to meet).
pub(crate) fn next_seed() -> NonZeroU32 {
    static COUNTER: AtomicU32 = AtomicU32::new(1);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Spread consecutive stores far apart in generation space (golden-ratio stride).
    NonZeroU32::new(n.wrapping_mul(0x9E37_79B9) | 1).unwrap_or(NonZeroU32::MIN)
}

/// The chunk and slot a handle names (valid or not).
#[inline(always)]
fn split(handle: Handle) -> (u32, u8) {
    let i = handle.index();
    (i >> SLOT_BITS, (i & ((1 << SLOT_BITS) - 1)) as u8)
}

fn bump(generation: NonZeroU32) -> NonZeroU32 {
    generation.checked_add(1).unwrap_or(NonZeroU32::MIN)
}

impl<T: Copy> BucketStore<T> {
    /// A store of `buckets` empty buckets able to hold `capacity` items, or `OutOfMemory`.
    /// Callers validate `capacity <= MAX_CHUNKS` and `buckets <= u32::MAX`.
    pub(crate) fn new(buckets: usize, capacity: usize) -> Result<Self, ConfigError> {
        debug_assert!(capacity <= MAX_CHUNKS && buckets < NIL as usize);
        Ok(BucketStore {
            // Worst case one live item per chunk; reserved now, touched only when used.
            chunks: reserved(capacity, "queue chunks")?,
            free: NIL,
            lists: filled(buckets, EMPTY_LIST, "queue buckets")?,
            len: 0,
            capacity,
            seed: next_seed(),
            stats: QueueStats::default(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Counters of everything that went through the store.
    pub(crate) fn stats(&self) -> QueueStats {
        self.stats
    }

    pub(crate) fn buckets(&self) -> usize {
        self.lists.len()
    }

    #[inline(always)]
    pub(crate) fn is_occupied(&self, bucket: usize) -> bool {
        self.lists[bucket].head != NIL
    }

    /// Append to `bucket`; `Full` when the store holds `capacity` items.
    #[inline(always)]
    pub(crate) fn push_back(
        &mut self,
        bucket: usize,
        rank: Rank,
        item: T,
    ) -> Result<Handle, PushError<T>> {
        if self.len == self.capacity {
            self.stats.rejected_full += 1;
            return Err(PushError::Full { rank, item });
        }
        let tail = self.lists[bucket].tail;
        let (chunk, slot) =
            if tail != NIL && (self.chunks[tail as usize].tail as usize) < CHUNK_SLOTS {
                let c = &mut self.chunks[tail as usize];
                let slot = c.tail;
                c.ranks[slot as usize] = rank;
                c.items[slot as usize] = item;
                c.tail += 1;
                (tail, slot)
            } else {
                let c = self.alloc(bucket as u32, tail, rank, item);
                if tail == NIL {
                    self.lists[bucket].head = c;
                } else {
                    self.chunks[tail as usize].next = c;
                }
                self.lists[bucket].tail = c;
                (c, 0)
            };
        self.len += 1;
        self.stats.pushed += 1;
        let generation = self.chunks[chunk as usize].generation;
        Ok(Handle::new(
            chunk << SLOT_BITS | u32::from(slot),
            generation,
        ))
    }

    /// A chunk holding one entry, linked after `prev` (not yet linked from it).
    fn alloc(&mut self, bucket: u32, prev: u32, rank: Rank, item: T) -> u32 {
        if self.free != NIL {
            let idx = self.free;
            let c = &mut self.chunks[idx as usize];
            self.free = c.next;
            c.ranks[0] = rank;
            c.items[0] = item;
            c.next = NIL;
            c.prev = prev;
            c.bucket = bucket;
            c.head = 0;
            c.tail = 1;
            c.dead = 0;
            idx
        } else {
            // Never exceeds the reserved capacity: chunks in use <= len < capacity.
            debug_assert!(self.chunks.len() < self.chunks.capacity());
            let idx = self.chunks.len() as u32;
            let mut ranks = [0; CHUNK_SLOTS];
            ranks[0] = rank;
            self.chunks.push(Chunk {
                ranks,
                items: [item; CHUNK_SLOTS],
                next: NIL,
                prev,
                bucket,
                generation: self.seed,
                head: 0,
                tail: 1,
                dead: 0,
            });
            idx
        }
    }

    /// Unlink chunk `idx` from its bucket and push it on the free stack.
    fn release(&mut self, idx: u32) {
        let (prev, next, bucket) = {
            let c = &self.chunks[idx as usize];
            (c.prev, c.next, c.bucket as usize)
        };
        if prev == NIL {
            self.lists[bucket].head = next;
        } else {
            self.chunks[prev as usize].next = next;
        }
        if next == NIL {
            self.lists[bucket].tail = prev;
        } else {
            self.chunks[next as usize].prev = prev;
        }
        let c = &mut self.chunks[idx as usize];
        c.generation = bump(c.generation);
        c.next = self.free;
        self.free = idx;
    }

    /// The first entry of `bucket`.
    #[inline]
    pub(crate) fn front(&self, bucket: usize) -> Option<Entry<T>> {
        let head = self.lists[bucket].head;
        if head == NIL {
            return None;
        }
        let c = &self.chunks[head as usize];
        let slot = c.head as usize;
        Some(Entry {
            rank: c.ranks[slot],
            item: c.items[slot],
        })
    }

    /// [`BucketStore::front`] and [`BucketStore::front_items`] of one bucket.
    #[inline(always)]
    pub(crate) fn front_and_items(&self, bucket: usize) -> Option<(Entry<T>, Upcoming<'_, T>)> {
        let head = self.lists[bucket].head;
        if head == NIL {
            return None;
        }
        let c = &self.chunks[head as usize];
        let slot = c.head as usize;
        let entry = Entry {
            rank: c.ranks[slot],
            item: c.items[slot],
        };
        Some((entry, self.upcoming_from(c)))
    }

    /// The items of `bucket` that leave next (see [`Upcoming`]): its first chunk's from the
    /// head on (the first is the bucket's front; later ones may have been removed already),
    /// and the next chunk's if those are few.
    #[inline]
    pub(crate) fn front_items(&self, bucket: usize) -> Upcoming<'_, T> {
        match self.lists[bucket].head {
            NIL => Upcoming::EMPTY,
            head => self.upcoming_from(&self.chunks[head as usize]),
        }
    }

    #[inline]
    fn upcoming_from<'a>(&'a self, c: &'a Chunk<T>) -> Upcoming<'a, T> {
        let front = &c.items[c.head as usize..c.tail as usize];
        // Read only when `front` is short: by then pop_front has usually prefetched the next
        // chunk (when it started on `c`, at least UPCOMING pops earlier).
        let after = match c.next {
            next if next != NIL && front.len() < UPCOMING => {
                let n = &self.chunks[next as usize];
                &n.items[n.head as usize..n.tail as usize]
            }
            _ => &[],
        };
        Upcoming { front, after }
    }

    /// Take the first entry of `bucket`.
    #[inline(always)]
    pub(crate) fn pop_front(&mut self, bucket: usize) -> Option<Entry<T>> {
        let head = self.lists[bucket].head;
        if head == NIL {
            return None;
        }
        let c = &mut self.chunks[head as usize];
        let slot = c.head as usize;
        let entry = Entry {
            rank: c.ranks[slot],
            item: c.items[slot],
        };
        let next = c.next;
        if slot == 0 && next != NIL {
            // Starting on a chunk: load the one after it while this one's items go (a bucket
            // that is consumed long after it was filled, a timing wheel's, misses on each).
            if let Some(n) = self.chunks.get(next as usize) {
                crate::prefetch(n);
            }
        }
        let c = &mut self.chunks[head as usize];
        c.head += 1;
        c.skip_dead();
        if c.head == c.tail {
            // The head chunk is used up: unlink it from the front and free it.
            let next = c.next;
            c.generation = bump(c.generation);
            c.next = self.free;
            self.free = head;
            self.lists[bucket].head = next;
            if next == NIL {
                self.lists[bucket].tail = NIL;
            } else {
                self.chunks[next as usize].prev = NIL;
            }
        }
        self.len -= 1;
        self.stats.popped += 1;
        Some(entry)
    }

    /// The chunk and slot behind `handle` if it names a live entry.
    #[inline]
    fn locate(&self, handle: Handle) -> Option<(u32, u8)> {
        let (idx, slot) = split(handle);
        let c = self.chunks.get(idx as usize)?;
        let live = c.generation == handle.generation()
            && slot >= c.head
            && slot < c.tail
            && c.dead & (1 << slot) == 0;
        live.then_some((idx, slot))
    }

    /// The rank of the live entry behind `handle`.
    #[inline]
    pub(crate) fn rank_of(&self, handle: Handle) -> Option<Rank> {
        let (idx, slot) = self.locate(handle)?;
        Some(self.chunks[idx as usize].ranks[slot as usize])
    }

    /// Remove the entry behind `handle`: its bucket and entry, or `StaleHandle`.
    #[inline(always)]
    pub(crate) fn remove(&mut self, handle: Handle) -> Result<(usize, Entry<T>), StaleHandle> {
        let Some((idx, slot)) = self.locate(handle) else {
            self.stats.stale_handles += 1;
            return Err(StaleHandle);
        };
        let next = self.chunks[idx as usize].next;
        if slot == 0 && next != NIL {
            // Taking a chunk's first entry, as pop_front does when it starts a chunk: a queue
            // whose front leaves by handle (a per-flow policy re-ranking the member it served)
            // walks its first bucket this way, and `upcoming_from` reads the next chunk soon.
            if let Some(n) = self.chunks.get(next as usize) {
                crate::prefetch(n);
            }
        }
        let c = &mut self.chunks[idx as usize];
        c.dead |= 1 << slot;
        let entry = Entry {
            rank: c.ranks[slot as usize],
            item: c.items[slot as usize],
        };
        let bucket = c.bucket as usize;
        c.skip_dead();
        // The head is now a live slot or the tail: the chunk holds nothing live exactly when
        // it reached the tail.
        if c.head == c.tail {
            self.release(idx);
        }
        self.len -= 1;
        self.stats.removed += 1;
        Ok((bucket, entry))
    }

    /// The bucket and rank of the entry behind `handle` when it is the only entry of its
    /// bucket, which [`BucketStore::relink_alone`] can move in place; `None` when it is not
    /// alone or the handle is stale.
    #[inline(always)]
    pub(crate) fn alone(&self, handle: Handle) -> Option<(usize, Rank)> {
        let (idx, slot) = split(handle);
        let c = self.chunks.get(idx as usize)?;
        // `locate` and the test in one (pfabric at 1e3 flows, callgrind: 892.3 -> 874.4
        // instructions per packet): the head of a linked chunk is live (module note) and a
        // freed chunk's generation has moved on, so with the generation matching,
        // [head, tail) = [slot, slot + 1) holds this entry alone, and no dead bit need be read.
        let alone = c.generation == handle.generation()
            && c.head == slot
            && c.tail == slot + 1
            && c.prev == NIL
            && c.next == NIL;
        alone.then_some((c.bucket as usize, c.ranks[slot as usize]))
    }

    /// Move the entry behind `handle` to `bucket` as `rank` and `item` without freeing its
    /// chunk, when it is the only entry of its bucket and `bucket` is empty (or its own): the
    /// chunk is relinked as `bucket`'s one chunk, and `handle` stays valid. Returns the bucket
    /// it left, or `None` (nothing changed) when the entry is not alone, `bucket` is occupied
    /// or the handle is stale; the caller then removes and pushes.
    #[inline(always)]
    pub(crate) fn relink_alone(
        &mut self,
        handle: Handle,
        bucket: usize,
        rank: Rank,
        item: T,
    ) -> Option<usize> {
        let (from, _) = self.alone(handle)?;
        // Through slices: each store through the vectors would otherwise reload their pointer
        // and length (callgrind, pfabric at 1e3 flows: 874.4 -> 870.4 instructions per packet).
        let lists = &mut self.lists[..];
        if from != bucket && lists[bucket].head != NIL {
            return None;
        }
        let (idx, slot) = split(handle);
        let c = &mut self.chunks[idx as usize];
        c.ranks[slot as usize] = rank;
        c.items[slot as usize] = item;
        c.bucket = bucket as u32;
        lists[from] = EMPTY_LIST;
        lists[bucket] = BucketList {
            head: idx,
            tail: idx,
        };
        // Counted as the remove and push it stands for.
        self.stats.removed += 1;
        self.stats.pushed += 1;
        Some(from)
    }

    /// Verify the invariants of the module note. For tests and debug builds; O(chunks).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut total = 0usize;
        let mut seen = vec![false; self.chunks.len()];
        for (b, list) in self.lists.iter().enumerate() {
            let mut prev = NIL;
            let mut cur = list.head;
            while cur != NIL {
                assert!(!seen[cur as usize], "chunk {cur} linked twice");
                seen[cur as usize] = true;
                let c = &self.chunks[cur as usize];
                assert_eq!(c.bucket as usize, b);
                assert_eq!(c.prev, prev);
                assert!(c.head < c.tail && c.tail as usize <= CHUNK_SLOTS);
                assert_eq!(c.dead & (1 << c.head), 0, "head slot is dead");
                assert!(c.live() > 0);
                total += c.live() as usize;
                prev = cur;
                cur = c.next;
            }
            assert_eq!(list.tail, prev);
        }
        assert_eq!(total, self.len);
        let mut cur = self.free;
        while cur != NIL {
            assert!(!seen[cur as usize], "free chunk {cur} also linked");
            seen[cur as usize] = true;
            cur = self.chunks[cur as usize].next;
        }
        assert!(
            seen.iter().all(|&s| s),
            "a chunk is neither linked nor free"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_items_name_the_next_items_of_the_head_chunk() {
        let mut s = BucketStore::new(2, 100).unwrap();
        let named = |s: &BucketStore<u32>, b| {
            let up = s.front_items(b);
            (up.front.to_vec(), up.after.to_vec())
        };
        assert_eq!(named(&s, 1), (vec![], vec![]));
        let handles: Vec<Handle> = (0..10u32)
            .map(|i| s.push_back(1, u64::from(i), i).unwrap())
            .collect();
        assert_eq!(named(&s, 1), (vec![0, 1, 2, 3, 4, 5, 6, 7], vec![]));
        s.pop_front(1);
        s.remove(handles[1]).unwrap();
        // Removing the front moves the head past it: the first item is always live.
        assert_eq!(named(&s, 1), (vec![2, 3, 4, 5, 6, 7], vec![]));
        s.pop_front(1);
        s.pop_front(1);
        assert_eq!(
            named(&s, 1),
            (vec![4, 5, 6, 7], vec![]),
            "UPCOMING in the head chunk"
        );
        s.pop_front(1);
        // Fewer than UPCOMING left in the head chunk: the next chunk's come too.
        assert_eq!(named(&s, 1), (vec![5, 6, 7], vec![8, 9]));
        assert_eq!(s.front_items(1).get(3), Some(8));
        assert_eq!(s.front_items(1).iter().collect::<Vec<_>>(), [5, 6, 7, 8, 9]);
        for _ in 0..3 {
            s.pop_front(1);
        }
        assert_eq!(
            named(&s, 1),
            (vec![8, 9], vec![]),
            "the next chunk, and none after it"
        );
        assert_eq!(named(&s, 0), (vec![], vec![]));
    }

    #[test]
    fn fifo_within_a_bucket_across_chunks() {
        let mut s = BucketStore::new(2, 100).unwrap();
        for i in 0..20u32 {
            s.push_back(1, u64::from(i), i).unwrap();
        }
        s.check();
        for i in 0..20u32 {
            assert_eq!(s.pop_front(1).unwrap().item, i);
            s.check();
        }
        assert!(s.pop_front(1).is_none());
        assert!(!s.is_occupied(1));
    }

    #[test]
    fn remove_frees_dead_chunks_and_rejects_stale_handles() {
        let mut s = BucketStore::new(1, 100).unwrap();
        let hs: Vec<_> = (0..24u32).map(|i| s.push_back(0, 0, i).unwrap()).collect();
        // Kill the whole middle chunk: it must be unlinked at once.
        for h in &hs[8..16] {
            assert!(s.remove(*h).is_ok());
            s.check();
        }
        assert!(s.remove(hs[8]).is_err(), "double remove is stale");
        assert_eq!(s.pop_front(0).unwrap().item, 0);
        assert!(s.remove(hs[0]).is_err(), "popped item's handle is stale");
        let rest: Vec<u32> = std::iter::from_fn(|| s.pop_front(0).map(|e| e.item)).collect();
        assert_eq!(rest, (1..8).chain(16..24).collect::<Vec<_>>());
        s.check();
        // Chunks were recycled: a new push reuses one, old handles stay stale.
        let h = s.push_back(0, 0, 99).unwrap();
        for old in &hs {
            assert!(s.remove(*old).is_err());
        }
        assert_eq!(s.remove(h).unwrap().1.item, 99);
    }

    #[test]
    fn an_entry_alone_in_its_bucket_is_relinked_in_place() {
        let mut s = BucketStore::new(4, 100).unwrap();
        let h = s.push_back(0, 5, 1u32).unwrap();
        // Alone, to an empty bucket: the chunk moves, the handle stays valid.
        assert_eq!(s.relink_alone(h, 2, 17, 1), Some(0));
        s.check();
        assert!(!s.is_occupied(0));
        assert_eq!(s.rank_of(h), Some(17));
        assert_eq!(s.front(2).map(|e| (e.rank, e.item)), Some((17, 1)));
        // Its own bucket, a new rank: in place too.
        assert_eq!(s.relink_alone(h, 2, 16, 1), Some(2));
        assert_eq!(s.rank_of(h), Some(16));
        // A later push to the bucket goes behind it, in the same chunk.
        let g = s.push_back(2, 18, 2).unwrap();
        s.check();
        // Not alone any more; nor is `g`; an occupied destination; a stale handle: no change.
        assert_eq!(s.relink_alone(h, 3, 9, 1), None);
        assert_eq!(s.relink_alone(g, 3, 9, 2), None);
        let k = s.push_back(3, 30, 3).unwrap();
        assert_eq!(s.relink_alone(k, 2, 9, 3), None);
        assert!(s.remove(k).is_ok());
        assert_eq!(s.relink_alone(k, 1, 9, 3), None, "stale");
        s.check();
        // Pushes and removes counted as the remove and push a move stands for.
        let st = s.stats();
        assert_eq!((st.pushed, st.removed), (2 + 3, 2 + 1));
        let order: Vec<u32> = std::iter::from_fn(|| s.pop_front(2).map(|e| e.item)).collect();
        assert_eq!(order, [1, 2]);
        s.check();
    }

    /// `alone` reads no dead bit: an entry is alone only as its chunk's live head and tail,
    /// and the handles of entries that left, freed chunks and reused ones are all refused.
    #[test]
    fn alone_tells_a_lone_entry_from_a_gone_one() {
        let mut s = BucketStore::new(2, 100).unwrap();
        let a = s.push_back(0, 1, 1u32).unwrap();
        let b = s.push_back(0, 2, 2u32).unwrap();
        assert_eq!(s.alone(a), None, "b follows it");
        assert_eq!(s.alone(b), None, "behind a");
        // Removing the head moves it past the dead slot: b is alone, a is gone.
        assert!(s.remove(a).is_ok());
        assert_eq!(s.alone(a), None);
        assert_eq!(s.alone(b), Some((0, 2)));
        // Popped: the chunk is freed, then reused by the next push; neither old handle is alone.
        assert_eq!(s.pop_front(0).map(|e| e.item), Some(2));
        assert_eq!(s.alone(b), None);
        let c = s.push_back(1, 3, 3u32).unwrap();
        assert_eq!(split(c).0, split(b).0, "the freed chunk is reused");
        assert_eq!((s.alone(a), s.alone(b)), (None, None));
        assert_eq!(s.alone(c), Some((1, 3)));
        // A middle entry removed: the one after it is not alone while the head is live.
        let d = s.push_back(1, 4, 4u32).unwrap();
        let e = s.push_back(1, 5, 5u32).unwrap();
        assert!(s.remove(d).is_ok());
        assert_eq!((s.alone(d), s.alone(e)), (None, None));
        s.check();
    }
    #[test]
    fn full_store_refuses() {
        let mut s = BucketStore::new(3, 2).unwrap();
        assert!(s.push_back(0, 0, 1u32).is_ok());
        assert!(s.push_back(2, 0, 2u32).is_ok());
        assert!(s.push_back(1, 0, 3u32).is_err());
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn handles_of_two_stores_differ() {
        let mut a = BucketStore::new(1, 4).unwrap();
        let mut b = BucketStore::new(1, 4).unwrap();
        let ha = a.push_back(0, 0, 1u32).unwrap();
        let _hb = b.push_back(0, 0, 2u32).unwrap();
        assert!(b.remove(ha).is_err(), "foreign handle must be stale");
        assert_eq!(b.len(), 1);
    }
}
