//! # sluice-queue: integer priority queues whose cost does not grow with the number of flows
//!
//! Every scheduler in Sluice stands on one contract, [`RankQueue`]: push an item with an integer
//! rank, pop the smallest, remove any item by its [`Handle`] (in O(1), but O(words) in the flat
//! FFS and O(log n) in the B-tree and skip list baselines). Items are small `Copy` handles (an
//! index into a caller-owned packet or flow table); queues never hold packet bytes.
//!
//! ## The structures
//!
//! | structure | module | range | find-min cost | source |
//! |---|---|---|---|---|
//! | [`TimingWheel`] | [`timing_wheel`] | moving (time) | O(log64 slots), bitmap over slots | Carousel Alg. 1 |
//! | [`FfsQueue`] | [`ffs`] | fixed | O(words), linear scan with trailing-zeros | Eiffel §4.2.1 |
//! | [`HierFfsQueue`] | [`hffs`] | fixed | O(log64 buckets) | Eiffel Fig. 4.3 |
//! | [`CircularFfsQueue`] (cFFS) | [`cffs`] | moving | O(log64 buckets) | Eiffel Fig. 4.4 |
//! | [`GradientQueue`] | [`gradient`] | fixed | O(log32 buckets), one division per level | Eiffel App. A |
//! | [`ApproxGradientQueue`] | [`approx_gradient`] | fixed | one division (approximate) | Eiffel §4.2.1 |
//! | [`BinaryHeapQueue`] (baseline) | [`binary_heap`] | any | O(log n) | std `BinaryHeap` |
//! | [`BTreeQueue`] (baseline) | [`btree`] | any | O(log n) | rb-tree stand-in (Linux fq) |
//! | [`BucketHeapQueue`] (baseline "BH") | [`bucket_heap`] | fixed | O(log buckets) | Eiffel §4.4.2 |
//! | [`SkipListQueue`] (baseline) | [`skiplist`] | any | O(1) pop, O(log n) push | TAS flow scheduler |
//!
//! ## Shared semantics
//!
//! - **Rank** is a `u64`; smaller leaves first. Bucketed queues map a rank to a bucket of
//!   `granularity` rank units; items in one bucket leave in FIFO order, and so do items of equal
//!   rank in the exact queues. [`Entry::rank`] is always the rank the caller pushed.
//! - **Out of range** is never a silent misorder: each bucketed queue follows its [`Overflow`]
//!   policy (clamp to the edge bucket and count it, or reject and return the item to the caller).
//! - **Memory** is reserved at construction; no operation allocates afterwards (see
//!   `tests/zero_alloc.rs`), but in the [`BTreeQueue`] baseline, whose `BTreeMap` allocates
//!   its nodes as it grows. A push beyond [`RankQueue::capacity`] returns [`PushError::Full`].
//! - **Handles** carry a generation: removing with a stale handle (already popped or removed)
//!   returns [`StaleHandle`], never undefined behaviour, and so does a handle from another
//!   queue unless that queue has issued the same one. A handle names a slot and its 32-bit
//!   generation, not its queue; each queue starts its generations at a seed of its own, and a
//!   slot's generation moves on each time it is freed, so another queue's handle is caught
//!   until one of this queue's slots has been freed as many times as the seeds lie apart
//!   (11 703 frees of one slot for two queues made 75 025 queues apart; 117 257 for 17 711).
//!   A host keeps each handle with the queue that issued it, and drops it once its item
//!   leaves: generations wrap after 2^32 frees of one slot, so a handle kept that long could
//!   name a newer item in the same slot.
//! - **Time** is passed in: [`RankQueue::pop_due`] and [`RankQueue::next_deadline`] treat ranks
//!   as nanoseconds for the time-indexed use (Eiffel's `SoonestDeadline`); nothing reads a clock.
//!
//! [`oracle`] holds the plain, exact reference model every structure is tested against.

// The one `unsafe` block is the cache prefetch hint in [`prefetch`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod any;
pub mod approx_gradient;
pub mod binary_heap;
pub mod bitmap;
pub mod btree;
pub mod bucket_heap;
pub mod cffs;
mod error;
pub mod ffs;
pub mod fixed;
pub mod gradient;
pub mod hffs;
pub mod oracle;
pub mod skiplist;
mod slab;
mod store;
pub mod timing_wheel;
pub mod workload;

pub use any::{AnyQueue, QueueKind, QueueSpec};
pub use approx_gradient::ApproxGradientQueue;
pub use binary_heap::BinaryHeapQueue;
pub use btree::BTreeQueue;
pub use bucket_heap::BucketHeapQueue;
pub use cffs::{CircularApproxQueue, CircularConfig, CircularFfsQueue, CircularQueue};
pub use error::{ConfigError, PushError, StaleHandle};
pub use ffs::FfsQueue;
pub use fixed::{FixedRangeQueue, RangeConfig};
pub use gradient::GradientQueue;
pub use hffs::HierFfsQueue;
pub use skiplist::SkipListQueue;
pub use timing_wheel::{TimingWheel, WheelConfig};

use std::num::NonZeroU32;

/// A priority value: smaller ranks leave first. For time-indexed use, nanoseconds.
pub type Rank = u64;

/// An item and the rank it was pushed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<T> {
    /// The rank given to `push` (not the bucket it was filed under).
    pub rank: Rank,
    /// The caller's item.
    pub item: T,
}

/// Identifies one queued item for [`RankQueue::remove`].
///
/// Eight bytes; `Option<Handle>` is eight bytes too. A handle stays valid until its item leaves
/// the queue; after that `remove` returns [`StaleHandle`], as it does for a handle of another
/// queue unless that queue issued the same one (see the crate note: a handle does not name its
/// queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    index: u32,
    generation: NonZeroU32,
}

impl Handle {
    pub(crate) fn new(index: u32, generation: NonZeroU32) -> Self {
        Handle { index, generation }
    }
    pub(crate) fn index(self) -> u32 {
        self.index
    }
    pub(crate) fn generation(self) -> NonZeroU32 {
        self.generation
    }
}

/// What a bucketed queue does with a rank outside the ranks it can order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Overflow {
    /// File it under the nearest edge bucket (the last slot of a timing wheel: pacing keeps
    /// every packet and overshoots briefly). Counted in [`QueueStats::clamped`].
    #[default]
    Clamp,
    /// Return it to the caller as [`PushError::OutOfRange`] (hard limits). Counted in
    /// [`QueueStats::rejected_range`].
    Reject,
}

/// Counters every queue keeps. Cheap plain integers, read with [`RankQueue::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Pushes accepted.
    pub pushed: u64,
    /// Items that left through `pop_min` / `pop_due`.
    pub popped: u64,
    /// Items that left through `remove`.
    pub removed: u64,
    /// Pushes filed under an edge bucket because their rank was out of range.
    pub clamped: u64,
    /// Pushes rejected because their rank was out of range.
    pub rejected_range: u64,
    /// Pushes rejected because the queue was full.
    pub rejected_full: u64,
    /// `remove` calls with a stale or foreign handle.
    pub stale_handles: u64,
    /// Approximate queues only: lookups whose estimate hit an empty bucket.
    pub misses: u64,
}

impl QueueStats {
    /// These counters with the range counters (`clamped`, `rejected_range`) of `range`.
    pub fn with_range(self, range: &QueueStats) -> QueueStats {
        QueueStats {
            clamped: range.clamped,
            rejected_range: range.rejected_range,
            ..self
        }
    }
}

/// The queue contract every Sluice queue and baseline implements.
///
/// Ordering: smallest rank first (for bucketed queues: smallest bucket first), FIFO among
/// items of equal rank or of one bucket. Complexities are per structure (see the crate table);
/// `remove` is O(1) for every Sluice structure.
pub trait RankQueue<T: Copy> {
    /// Queue `item` with `rank`. Returns a handle for [`RankQueue::remove`], or gives the item
    /// back when the queue is full or the rank is out of range under [`Overflow::Reject`].
    fn push(&mut self, rank: Rank, item: T) -> Result<Handle, PushError<T>>;

    /// Remove and return the first item.
    fn pop_min(&mut self) -> Option<Entry<T>>;

    /// The item `pop_min` would return, left in place.
    fn peek_min(&self) -> Option<Entry<T>>;

    /// Remove the item behind `handle`, wherever it is.
    fn remove(&mut self, handle: Handle) -> Result<Entry<T>, StaleHandle>;

    /// Move the item behind `handle` to `rank`, as [`RankQueue::remove`] then
    /// [`RankQueue::push`] of `item` would: to the back of the items of its new rank, with a new
    /// handle in place of `handle` (which the queue may hand back as it was). A stale handle
    /// removes nothing (it is counted) and `item` is pushed all the same. The bucketed queues
    /// over a bucket store (fixed-range and circular: FFS, hierarchical FFS, cFFS, the
    /// gradient queues, the bucket heap) move an item that is alone in its bucket into an empty
    /// one in place, without giving up and taking back its storage: a per-flow policy
    /// re-ranking the flow it serves does this on most packets (pFabric, LQF), a fair queue
    /// over sparse flows on many (WFQ).
    fn requeue(&mut self, handle: Handle, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        let _ = self.remove(handle);
        self.push(rank, item)
    }

    /// The rank the item behind `handle` was pushed with, while it is queued (`None` for a
    /// stale handle, and for a foreign one unless this queue issued the same). A scheduler re-ranking a member reads it to leave a member
    /// whose rank did not change where it is, ahead of later pushes of the same rank.
    fn rank_of(&self, handle: Handle) -> Option<Rank>;

    /// Number of queued items.
    fn len(&self) -> usize;

    /// True when nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most items the queue holds; a push beyond it returns [`PushError::Full`].
    fn capacity(&self) -> usize;

    /// Eiffel's `SoonestDeadline`: the earliest rank (time) at which the first item is due.
    /// For bucketed queues this is the start of the first non-empty bucket.
    fn next_deadline(&self) -> Option<Rank>;

    /// Pop the first item if it is due at `now` (its bucket starts at or before `now`).
    fn pop_due(&mut self, now: Rank) -> Option<Entry<T>> {
        match self.next_deadline() {
            Some(deadline) if deadline <= now => self.pop_min(),
            _ => None,
        }
    }

    /// Let time pass without popping: a time-indexed queue moves its front to `now` (never past
    /// a queued item), as `pop_due` does when nothing is due, so that later pushes are placed
    /// relative to `now`. Nothing for the others (the default).
    fn advance(&mut self, _now: Rank) {}

    /// The queue's counters.
    fn stats(&self) -> QueueStats;

    /// A few of the items that leave next, in order, as far as the queue can tell without
    /// work (see [`Upcoming`]): the first is the one `peek_min` returns; later ones may since
    /// have been removed. A hint, so that a host can prefetch what they point to; empty if the
    /// queue cannot tell cheaply (the default, and the baselines).
    fn upcoming(&self) -> Upcoming<'_, T> {
        Upcoming::EMPTY
    }

    /// [`RankQueue::peek_min`] and [`RankQueue::upcoming`] together, with one search for the
    /// first item where the two would search twice.
    fn peek_upcoming(&self) -> Option<(Entry<T>, Upcoming<'_, T>)> {
        let e = self.peek_min()?;
        Some((e, self.upcoming()))
    }
}

/// How many items a bucketed queue's [`Upcoming`] names at least, if its first bucket's first
/// two chunks hold them: enough for a host to prefetch a few items ahead of the one it handles.
pub const UPCOMING: usize = 4;

/// The items that leave next ([`RankQueue::upcoming`]): the first bucket's items from its
/// first chunk's head to that chunk's end (`front`), and, when those are fewer than
/// [`UPCOMING`], the bucket's next chunk (`after`), so that a look-ahead keeps its distance
/// across a chunk boundary.
#[derive(Debug)]
pub struct Upcoming<'a, T> {
    /// From the first item on, to the end of its chunk.
    pub front: &'a [T],
    /// The next chunk's items, if `front` is short.
    pub after: &'a [T],
}

impl<T> Clone for Upcoming<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Upcoming<'_, T> {}

impl<T: Copy> Upcoming<'_, T> {
    /// Nothing known.
    pub const EMPTY: Self = Upcoming {
        front: &[],
        after: &[],
    };

    /// The `k`-th item to leave (0: the first), if named.
    #[inline]
    pub fn get(&self, k: usize) -> Option<T> {
        match self.front.get(k) {
            Some(&item) => Some(item),
            None => self.after.get(k - self.front.len()).copied(),
        }
    }

    /// Every item named, in order.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.front.iter().chain(self.after).copied()
    }
}

/// Start loading the cache line holding `*r`, so that a later access finds it in the cache. A
/// hint only: it has no effect on the program's results, and is a no-op on targets other than
/// x86-64. With millions of flows, per-flow and per-packet state misses the cache on nearly
/// every access; loading the next few that [`RankQueue::upcoming`] names while the current one
/// is handled overlaps those misses.
#[inline(always)]
#[allow(unsafe_code)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is a hint: it never faults, never reads memory architecturally
    // (no value is returned, nothing is written) and changes no program state, whatever the
    // address. The pointer comes from a valid reference in any case. SSE is part of the
    // x86-64 baseline, so the instruction is always available.
    unsafe {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>((r as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefetch_is_a_harmless_hint() {
        let v = vec![7u64; 1 << 12];
        for x in v.iter().step_by(8) {
            super::prefetch(x);
        }
        super::prefetch(&());
        assert!(v.iter().all(|&x| x == 7));
    }
}
