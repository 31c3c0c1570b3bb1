//! `FixedRangeQueue`: a bucketed queue over a fixed rank range, generic over how it finds the
//! first non-empty bucket.
//!
//! The range is `[base, base + buckets * granularity)`; rank r files under bucket
//! `(r - base) / granularity`. Items leave by bucket, FIFO within a bucket. A rank outside the
//! range follows the [`Overflow`] policy: `Clamp` files it under the first or last bucket
//! (counted), `Reject` hands it back. The bucket lists live in the shared chunk store (O(1)
//! push, pop and remove); only the [`BucketIndex`] differs between
//! [`FfsQueue`](crate::FfsQueue), [`HierFfsQueue`](crate::HierFfsQueue),
//! [`GradientQueue`](crate::GradientQueue), [`ApproxGradientQueue`](crate::ApproxGradientQueue)
//! and the [`BucketHeapQueue`](crate::BucketHeapQueue) baseline.

use crate::error::check_capacity;
use crate::store::{BucketStore, MAX_CHUNKS};
use crate::{
    ConfigError, Entry, Handle, Overflow, PushError, QueueStats, Rank, RankQueue, StaleHandle,
    Upcoming,
};

/// How a bucketed queue finds its first non-empty bucket.
///
/// The queue calls `insert` when a bucket turns non-empty and `remove` when it turns empty;
/// `first` returns the bucket to serve next (exact for every index but the approximate one,
/// which may use `occupied` to check its estimate).
pub trait BucketIndex {
    /// Bucket `bucket` has become non-empty.
    fn insert(&mut self, bucket: usize);
    /// Bucket `bucket` has become empty.
    fn remove(&mut self, bucket: usize);
    /// Bucket `from` has become empty and bucket `to` non-empty (an item moved).
    fn moved(&mut self, from: usize, to: usize) {
        self.remove(from);
        self.insert(to);
    }
    /// The bucket to serve next, if any is non-empty.
    fn first<F: Fn(usize) -> bool>(&self, occupied: F) -> Option<usize>;
    /// True when no bucket is marked non-empty.
    fn is_empty(&self) -> bool;
    /// Lookups that missed (approximate indexes only).
    fn misses(&self) -> u64 {
        0
    }
}

/// Division by the granularity: a shift when it is a power of two.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Granularity {
    units: u64,
    shift: Option<u32>,
}

impl Granularity {
    pub(crate) fn new(units: u64) -> Result<Self, ConfigError> {
        if units == 0 {
            return Err(ConfigError::ZeroGranularity);
        }
        Ok(Granularity {
            units,
            shift: units.is_power_of_two().then(|| units.trailing_zeros()),
        })
    }

    pub(crate) fn units(self) -> u64 {
        self.units
    }

    #[inline]
    pub(crate) fn bucket(self, rank: Rank) -> u64 {
        match self.shift {
            Some(s) => rank >> s,
            None => rank / self.units,
        }
    }
}

/// Validate a bucket count against the store's limits.
pub(crate) fn check_buckets(buckets: usize, max: usize) -> Result<(), ConfigError> {
    if buckets == 0 {
        return Err(ConfigError::ZeroBuckets);
    }
    if buckets > max {
        return Err(ConfigError::TooManyBuckets {
            buckets: buckets as u64,
            max: max as u64,
        });
    }
    Ok(())
}

/// Largest bucket count of a store (bucket ids are u32, one value is reserved).
pub(crate) const MAX_BUCKETS: usize = (u32::MAX - 1) as usize;

/// Configuration of a fixed-range bucketed queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeConfig {
    /// First rank of the range.
    pub base: Rank,
    /// Rank units per bucket (>= 1).
    pub granularity: u64,
    /// Number of buckets (>= 1).
    pub buckets: usize,
    /// What to do with ranks outside the range.
    pub overflow: Overflow,
    /// Most items held at once.
    pub capacity: usize,
}

impl RangeConfig {
    /// `buckets` buckets of `granularity` from rank 0, clamping, for `capacity` items.
    pub fn new(buckets: usize, granularity: u64, capacity: usize) -> Self {
        RangeConfig {
            base: 0,
            granularity,
            buckets,
            overflow: Overflow::Clamp,
            capacity,
        }
    }

    pub(crate) fn validate(&self, max_buckets: usize) -> Result<Granularity, ConfigError> {
        let g = Granularity::new(self.granularity)?;
        check_buckets(self.buckets, max_buckets.min(MAX_BUCKETS))?;
        check_capacity(self.capacity)?;
        debug_assert!(self.capacity <= MAX_CHUNKS);
        let span = (self.buckets as u64).checked_mul(self.granularity);
        if span.and_then(|s| s.checked_add(self.base)).is_none() {
            return Err(ConfigError::RangeOverflow {
                base: self.base,
                buckets: self.buckets as u64,
                granularity: self.granularity,
            });
        }
        Ok(g)
    }
}

/// A bucketed queue over a fixed range; see the module note.
pub struct FixedRangeQueue<T, I> {
    store: BucketStore<T>,
    index: I,
    base: Rank,
    granularity: Granularity,
    overflow: Overflow,
    stats: QueueStats,
}

impl<T: Copy, I: BucketIndex> FixedRangeQueue<T, I> {
    /// Build from a validated configuration and an index over `cfg.buckets` buckets.
    pub(crate) fn from_parts(
        cfg: &RangeConfig,
        granularity: Granularity,
        index: I,
    ) -> Result<Self, ConfigError> {
        Ok(FixedRangeQueue {
            store: BucketStore::new(cfg.buckets, cfg.capacity)?,
            index,
            base: cfg.base,
            granularity,
            overflow: cfg.overflow,
            stats: QueueStats::default(),
        })
    }

    /// The bucket for `rank` and whether it was clamped there, or `None` if it is out of range
    /// and rejected. A clamp is counted by the caller once the item is filed (a push refused as
    /// full is not a clamp).
    #[inline]
    fn bucket_of(&mut self, rank: Rank) -> Option<(usize, bool)> {
        let last = self.store.buckets() - 1;
        let bucket = if rank < self.base {
            0
        } else {
            let b = self.granularity.bucket(rank - self.base);
            if b <= last as u64 {
                return Some((b as usize, false));
            }
            last
        };
        match self.overflow {
            Overflow::Clamp => Some((bucket, true)),
            Overflow::Reject => {
                self.stats.rejected_range += 1;
                None
            }
        }
    }

    #[inline]
    fn first_bucket(&self) -> Option<usize> {
        let store = &self.store;
        self.index.first(|b| store.is_occupied(b))
    }

    /// Append to `bucket` (the one `rank` files under).
    #[inline(always)]
    fn push_in(&mut self, bucket: usize, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        let fresh = !self.store.is_occupied(bucket);
        let handle = self.store.push_back(bucket, rank, item)?;
        if fresh {
            self.index.insert(bucket);
        }
        Ok(handle)
    }

    /// The index, for inspection in tests and benchmarks.
    pub fn index(&self) -> &I {
        &self.index
    }

    /// The first rank of the range and the rank units per bucket.
    pub fn range(&self) -> (Rank, u64) {
        (self.base, self.granularity.units())
    }

    /// The bucket `rank` would be filed under if pushed now (clamped to the edges).
    pub fn bucket_for(&self, rank: Rank) -> usize {
        let last = self.store.buckets() - 1;
        if rank < self.base {
            0
        } else {
            self.granularity.bucket(rank - self.base).min(last as u64) as usize
        }
    }
}

impl<T: Copy, I: BucketIndex> RankQueue<T> for FixedRangeQueue<T, I> {
    #[inline]
    fn push(&mut self, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        let Some((bucket, clamped)) = self.bucket_of(rank) else {
            return Err(PushError::OutOfRange { rank, item });
        };
        let handle = self.push_in(bucket, rank, item)?;
        self.stats.clamped += u64::from(clamped);
        Ok(handle)
    }

    #[inline]
    fn requeue(&mut self, handle: Handle, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        let Some((bucket, clamped)) = self.bucket_of(rank) else {
            let _ = self.remove(handle);
            return Err(PushError::OutOfRange { rank, item });
        };
        if let Some(from) = self.store.relink_alone(handle, bucket, rank, item) {
            if from != bucket {
                self.index.moved(from, bucket);
            }
            self.stats.clamped += u64::from(clamped);
            return Ok(handle);
        }
        let _ = self.remove(handle);
        let handle = self.push_in(bucket, rank, item)?;
        self.stats.clamped += u64::from(clamped);
        Ok(handle)
    }

    #[inline]
    fn pop_min(&mut self) -> Option<Entry<T>> {
        let bucket = self.first_bucket()?;
        let entry = self.store.pop_front(bucket)?;
        if !self.store.is_occupied(bucket) {
            self.index.remove(bucket);
        }
        Some(entry)
    }

    #[inline]
    fn peek_min(&self) -> Option<Entry<T>> {
        self.store.front(self.first_bucket()?)
    }

    #[inline]
    fn peek_upcoming(&self) -> Option<(Entry<T>, Upcoming<'_, T>)> {
        self.store.front_and_items(self.first_bucket()?)
    }

    fn upcoming(&self) -> Upcoming<'_, T> {
        match self.first_bucket() {
            Some(b) => self.store.front_items(b),
            None => Upcoming::EMPTY,
        }
    }

    #[inline]
    fn rank_of(&self, handle: Handle) -> Option<Rank> {
        self.store.rank_of(handle)
    }

    fn remove(&mut self, handle: Handle) -> Result<Entry<T>, StaleHandle> {
        let (bucket, entry) = self.store.remove(handle)?;
        if !self.store.is_occupied(bucket) {
            self.index.remove(bucket);
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
        let b = self.first_bucket()? as u64;
        Some(self.base + b * self.granularity.units())
    }

    fn stats(&self) -> QueueStats {
        QueueStats {
            misses: self.index.misses(),
            ..self.store.stats().with_range(&self.stats)
        }
    }
}
