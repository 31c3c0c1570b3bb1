//! `CircularFfsQueue` (cFFS): Eiffel's circular hierarchical FFS queue (§4.2.1, Fig. 4.4), and
//! the same circular construction over any [`BucketIndex`] ([`CircularQueue`]).
//!
//! Two bucketed queues of `n` buckets each cover two adjacent ranges: the **primary**
//! `[base, base + n)` and the **secondary** `[base + n, base + 2n)` (in buckets of
//! `granularity` rank units; `base` is a multiple of `n`). The minimum always lies in the
//! primary. When the primary empties, the two swap roles: the secondary becomes the primary and
//! the emptied one takes over the next range, `base += n`. Nothing is moved or re-sorted; only
//! a pointer flips, so ranks can advance forever (well past 2^40) at O(log64 n) per operation.
//!
//! ```text
//!   base          base+n          base+2n
//!    |  primary     |  secondary     |   beyond: clamped into the last bucket, or rejected
//!    [#..#...#.....][.#....#....#...]#
//! ```
//!
//! Edge rules (the reference semantics in [`crate::oracle::KeyModel::Circular`]):
//! - A push into an **empty** queue re-bases: `base = bucket - bucket % n`, so an idle queue
//!   follows the ranks wherever they go.
//! - A rank in the range **just below** `base`, `[base - n, base)`, while the secondary range
//!   is empty and nothing filed from below `base` (next rule) is queued, swaps the ranges back
//!   (`base -= n`) and is filed exactly. This is the range the
//!   primary held until its last item left: a re-rank (remove, then push) of the one member
//!   left there must not land behind members of the next range, or a fair queue would serve
//!   them first and lose that member's place (WFQ gave 65% instead of 50% to a flow of
//!   64 KB packets against one of 1500 B before this rule).
//! - Any other rank **below** `base` files under the first primary bucket, behind what is there
//!   (it is already the most urgent; like the timing wheel's past timestamps). Not counted.
//!   While such an item is queued the ranges do not swap back: it would end up in the
//!   secondary range, behind later pushes of its own rank (FIFO among equal ranks broken).
//! - A rank **beyond the secondary range** follows [`Overflow`]: `Clamp` files it under the last
//!   secondary bucket, FIFO with what is there, and counts it (Eiffel: "their values are not
//!   sorted properly"); it stays in that bucket when the ranges swap, so it comes out after
//!   everything filed before it there. `Reject` returns it to the caller. Size the range so that
//!   `n * granularity` covers the largest rank jump above the current minimum the policy
//!   makes, and neither happens.
//!
//! The construction only needs "first non-empty bucket" from each range, so it works over any
//! [`BucketIndex`]: [`CircularFfsQueue`] is `CircularQueue<T, HierBitmap>`, and
//! [`CircularApproxQueue`] is Eiffel's circular approximate queue ("for cases of a moving
//! range, a circular approximate queue can be implemented as with cFFS").

use crate::approx_gradient::{ApproxGradient, Window};
use crate::bitmap::HierBitmap;
use crate::error::check_capacity;
use crate::fixed::{BucketIndex, Granularity, MAX_BUCKETS, check_buckets};
use crate::store::BucketStore;
use crate::{
    ConfigError, Entry, Handle, Overflow, PushError, QueueStats, Rank, RankQueue, StaleHandle,
    Upcoming,
};

/// Configuration of a [`CircularQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircularConfig {
    /// Rank units per bucket (>= 1).
    pub granularity: u64,
    /// Buckets per range; the queue orders `2 * buckets` buckets ahead of its minimum.
    pub buckets: usize,
    /// What to do with ranks beyond the secondary range.
    pub overflow: Overflow,
    /// Most items held at once.
    pub capacity: usize,
}

impl CircularConfig {
    /// `buckets` buckets per range of `granularity`, clamping, for `capacity` items.
    pub fn new(buckets: usize, granularity: u64, capacity: usize) -> Self {
        CircularConfig {
            granularity,
            buckets,
            overflow: Overflow::Clamp,
            capacity,
        }
    }
}

/// The body of [`CircularQueue`]'s requeue, shared by the trait method (`#[inline]`, for
/// [`crate::AnyQueue`]'s dispatch) and [`CircularQueue::requeue_inlined`] (`#[inline(always)]`).
/// A macro rather than one calling the other: the trait method as a call of the always-inlined
/// one changed how the dispatch was compiled, and eiffel_fig47 in `sluice bench sched`, whose
/// leaves re-rank through it, took 17 more instructions per packet (callgrind, 1e3 flows).
macro_rules! requeue_body {
    ($q:ident, $handle:ident, $rank:ident, $item:ident) => {{
        let Some((from, old)) = $q.store.alone($handle) else {
            let _ = $q.remove($handle);
            return $q.push($rank, $item);
        };
        // Its bucket empties first, as the remove would empty it (the ranges may swap), and
        // `rank` is placed as a push after it would place it.
        $q.left(old);
        $q.emptied(from);
        let key = $q.granularity.bucket($rank);
        let Some((range, off, d)) = $q.slot_for(key, $q.store.len() - 1) else {
            let _ = $q.store.remove($handle);
            return Err(PushError::OutOfRange {
                rank: $rank,
                item: $item,
            });
        };
        let to = $q.bucket(range, off);
        // In place if `to` is empty or its own bucket (the store checks), else behind `to`'s
        // items, whose range already marks it.
        let handle = if $q.store.relink_alone($handle, to, $rank, $item).is_some() {
            $q.ranges[range].insert(off as usize);
            $handle
        } else {
            let _ = $q.store.remove($handle);
            $q.store.push_back(to, $rank, $item)?
        };
        $q.filed(key, d);
        Ok(handle)
    }};
}

/// The circular construction over index `I`. See the module note.
pub struct CircularQueue<T, I> {
    store: BucketStore<T>,
    /// Occupancy of range 0 (store buckets `0..n`) and range 1 (`n..2n`).
    ranges: [I; 2],
    primary: usize,
    /// First bucket number (absolute, in granularity units) of the primary range.
    base: u64,
    /// Items filed under the primary's first bucket from below `base` (module note): while
    /// there are any, the ranges do not swap back.
    below: usize,
    n: u64,
    granularity: Granularity,
    overflow: Overflow,
    stats: QueueStats,
}

/// The circular hierarchical FFS queue (cFFS).
pub type CircularFfsQueue<T> = CircularQueue<T, HierBitmap>;

/// Eiffel's circular approximate gradient queue.
pub type CircularApproxQueue<T> = CircularQueue<T, ApproxGradient>;

impl<T: Copy> CircularQueue<T, HierBitmap> {
    /// A cFFS queue; errors for zero granularity, buckets or capacity, or too many buckets.
    pub fn new(cfg: CircularConfig) -> Result<Self, ConfigError> {
        Self::with_index(cfg, HierBitmap::new)
    }
}

impl<T: Copy> CircularQueue<T, ApproxGradient> {
    /// A circular approximate queue; `cfg.buckets` may be at most alpha's window
    /// ([`Window::buckets`]).
    pub fn new(cfg: CircularConfig, alpha: u32) -> Result<Self, ConfigError> {
        Window::for_alpha(alpha)?;
        let mut made = Vec::with_capacity(2);
        for _ in 0..2 {
            made.push(ApproxGradient::new(alpha, cfg.buckets)?);
        }
        let mut made = made.into_iter();
        Self::with_index(cfg, |_| Ok(made.next().expect("two indexes made above")))
    }
}

impl<T: Copy, I: BucketIndex> CircularQueue<T, I> {
    /// The circular construction over indexes made by `index(n)`; errors for zero granularity,
    /// buckets or capacity, too many buckets, or an index `index` could not make.
    pub fn with_index(
        cfg: CircularConfig,
        mut index: impl FnMut(usize) -> Result<I, ConfigError>,
    ) -> Result<Self, ConfigError> {
        let granularity = Granularity::new(cfg.granularity)?;
        check_buckets(cfg.buckets, MAX_BUCKETS / 2)?;
        check_capacity(cfg.capacity)?;
        Ok(CircularQueue {
            store: BucketStore::new(2 * cfg.buckets, cfg.capacity)?,
            ranges: [index(cfg.buckets)?, index(cfg.buckets)?],
            primary: 0,
            base: 0,
            below: 0,
            n: cfg.buckets as u64,
            granularity,
            overflow: cfg.overflow,
            stats: QueueStats::default(),
        })
    }

    /// [`RankQueue::requeue`], always inlined, for a caller whose re-ranks nearly all go to
    /// one cFFS queue: hClock's share queue in `sluice-sched`'s tree, where the dispatch
    /// through [`crate::AnyQueue`] (its jump, register saves and the answer written to
    /// memory) cost 22 instructions per packet (callgrind, hclock at 1e3 flows).
    #[inline(always)]
    pub fn requeue_inlined(
        &mut self,
        handle: Handle,
        rank: Rank,
        item: T,
    ) -> Result<Handle, PushError<T>> {
        requeue_body!(self, handle, rank, item)
    }

    /// The first rank of the primary range and the rank units per bucket.
    pub fn window(&self) -> (Rank, u64) {
        (
            self.base * self.granularity.units(),
            self.granularity.units(),
        )
    }

    /// Store bucket of range `range`, offset `off`.
    #[inline]
    fn bucket(&self, range: usize, off: u64) -> usize {
        range * self.n as usize + off as usize
    }

    /// A push of bucket `key`, below `base`, into a queue that holds items: back into the range
    /// the primary held before its last item left, if `key` is in it (module note); only when
    /// the push will succeed, so that the primary never stays empty. Otherwise it is filed
    /// from below.
    /// `others` is the number of items queued besides the one being filed.
    #[cold]
    fn below_base(&mut self, key: u64, others: usize) {
        if key >= self.base.saturating_sub(self.n)
            && self.ranges[1 - self.primary].is_empty()
            && self.below == 0
            && others < self.store.capacity()
        {
            self.primary = 1 - self.primary;
            self.base -= self.n;
        }
    }

    /// An item of `rank` left: one filed from below `base` is no longer there. (Such an item
    /// is the only kind whose bucket lies below `base`: `base` moves up only once the primary
    /// is empty, and back only while none is queued.)
    #[inline(always)]
    fn left(&mut self, rank: Rank) {
        if self.below > 0 && self.granularity.bucket(rank) < self.base {
            self.below -= 1;
        }
    }

    /// Where bucket number `key` is filed while `others` items are queued besides it: its range,
    /// its offset there and its distance from `base`, after an empty queue re-bases or a key
    /// just below `base` swaps the ranges back (module note). `None` (counted) when it lies
    /// beyond the secondary range and [`Overflow::Reject`] refuses it.
    #[inline(always)]
    fn slot_for(&mut self, key: u64, others: usize) -> Option<(usize, u64, u64)> {
        if others == 0 {
            self.base = key - key % self.n;
        } else if key < self.base {
            self.below_base(key, others);
        }
        let d = key.saturating_sub(self.base);
        if d < self.n {
            Some((self.primary, d, d))
        } else if d < 2 * self.n {
            Some((1 - self.primary, d - self.n, d))
        } else {
            match self.overflow {
                Overflow::Clamp => Some((1 - self.primary, self.n - 1, d)),
                Overflow::Reject => {
                    self.stats.rejected_range += 1;
                    None
                }
            }
        }
    }

    /// An item of bucket number `key` was filed at distance `d` from `base`: count it if it
    /// came from below `base` or was clamped (a push refused as full is neither).
    #[inline(always)]
    fn filed(&mut self, key: u64, d: u64) {
        if key < self.base {
            self.below += 1;
        }
        self.stats.clamped += u64::from(d >= 2 * self.n);
    }

    /// Store bucket `bucket` has become empty.
    #[inline(always)]
    fn emptied(&mut self, bucket: usize) {
        let n = self.n as usize;
        self.ranges[bucket / n].remove(bucket % n);
        self.settle();
    }

    /// After the primary empties, let the secondary take over.
    #[inline]
    fn settle(&mut self) {
        let secondary = 1 - self.primary;
        if self.ranges[self.primary].is_empty() && !self.ranges[secondary].is_empty() {
            self.primary = secondary;
            self.base += self.n;
        }
    }

    #[inline]
    fn first(&self) -> Option<(usize, u64)> {
        let start = self.primary * self.n as usize;
        let store = &self.store;
        let off = self.ranges[self.primary].first(|j| store.is_occupied(start + j))?;
        Some((start + off, self.base + off as u64))
    }
}

impl<T: Copy, I: BucketIndex> RankQueue<T> for CircularQueue<T, I> {
    // `push` and `remove` are always inlined, so that a requeue that cannot move its item in
    // place (remove, then push) is one call: 3% of hClock's instructions per packet
    // (callgrind, 1e3 flows).
    #[inline(always)]
    fn push(&mut self, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        let key = self.granularity.bucket(rank);
        let Some((range, off, d)) = self.slot_for(key, self.store.len()) else {
            return Err(PushError::OutOfRange { rank, item });
        };
        let bucket = self.bucket(range, off);
        let fresh = !self.store.is_occupied(bucket);
        let handle = self.store.push_back(bucket, rank, item)?;
        if fresh {
            self.ranges[range].insert(off as usize);
        }
        self.filed(key, d);
        Ok(handle)
    }

    /// As remove, then push; but an item alone in its bucket that goes to an empty bucket (or
    /// back to its own) keeps its chunk, relinked there with its handle, as in
    /// [`crate::FixedRangeQueue`]: a fair queue re-ranking the member it served does this when
    /// its members are sparse over the buckets (WFQ over a few hundred flows in 4096 buckets,
    /// as in the `eiffel_fig47` case of `sluice bench sched`; hClock's share tags share
    /// buckets, and it rarely does).
    #[inline]
    fn requeue(&mut self, handle: Handle, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        requeue_body!(self, handle, rank, item)
    }

    #[inline]
    fn pop_min(&mut self) -> Option<Entry<T>> {
        let (bucket, _) = self.first()?;
        let entry = self.store.pop_front(bucket)?;
        self.left(entry.rank);
        if !self.store.is_occupied(bucket) {
            self.ranges[self.primary].remove(bucket - self.primary * self.n as usize);
            self.settle();
        }
        Some(entry)
    }

    #[inline]
    fn peek_min(&self) -> Option<Entry<T>> {
        self.store.front(self.first()?.0)
    }

    #[inline(always)]
    fn peek_upcoming(&self) -> Option<(Entry<T>, Upcoming<'_, T>)> {
        self.store.front_and_items(self.first()?.0)
    }

    fn upcoming(&self) -> Upcoming<'_, T> {
        match self.first() {
            Some((b, _)) => self.store.front_items(b),
            None => Upcoming::EMPTY,
        }
    }

    #[inline]
    fn rank_of(&self, handle: Handle) -> Option<Rank> {
        self.store.rank_of(handle)
    }

    #[inline(always)]
    fn remove(&mut self, handle: Handle) -> Result<Entry<T>, StaleHandle> {
        let (bucket, entry) = self.store.remove(handle)?;
        self.left(entry.rank);
        if !self.store.is_occupied(bucket) {
            self.emptied(bucket);
        }
        Ok(entry)
    }

    fn len(&self) -> usize {
        self.store.len()
    }

    fn capacity(&self) -> usize {
        self.store.capacity()
    }

    fn next_deadline(&self) -> Option<Rank> {
        Some(self.first()?.1 * self.granularity.units())
    }

    fn stats(&self) -> QueueStats {
        QueueStats {
            misses: self.ranges[0].misses() + self.ranges[1].misses(),
            ..self.store.stats().with_range(&self.stats)
        }
    }
}
