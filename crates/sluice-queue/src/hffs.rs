//! `HierFfsQueue`: hierarchical FFS-based queue (Eiffel §4.2.1, Fig. 4.3).
//!
//! A fixed range of buckets indexed by a [`HierBitmap`]: a 64-ary tree of occupancy words, so
//! finding the first non-empty bucket costs one trailing-zeros per level, O(log64 N) for N
//! buckets (3 levels up to 262 144 buckets). The bucket count is fixed at configuration, so the
//! cost per operation is a constant independent of how many items are queued.

use crate::ConfigError;
use crate::bitmap::HierBitmap;
use crate::fixed::{BucketIndex, FixedRangeQueue, MAX_BUCKETS, RangeConfig};

impl BucketIndex for HierBitmap {
    #[inline]
    fn insert(&mut self, bucket: usize) {
        self.set(bucket);
    }
    #[inline]
    fn remove(&mut self, bucket: usize) {
        self.clear(bucket);
    }
    #[inline]
    fn moved(&mut self, from: usize, to: usize) {
        self.replace(from, to);
    }
    #[inline]
    fn is_empty(&self) -> bool {
        HierBitmap::is_empty(self)
    }
    #[inline]
    fn first<F: Fn(usize) -> bool>(&self, _occupied: F) -> Option<usize> {
        HierBitmap::first(self)
    }
}

/// Fixed-range bucketed queue over a hierarchical FFS bitmap. See the module note.
pub type HierFfsQueue<T> = FixedRangeQueue<T, HierBitmap>;

impl<T: Copy> FixedRangeQueue<T, HierBitmap> {
    /// A hierarchical FFS queue over `cfg`'s range.
    pub fn new(cfg: RangeConfig) -> Result<Self, ConfigError> {
        let g = cfg.validate(MAX_BUCKETS)?;
        Self::from_parts(&cfg, g, HierBitmap::new(cfg.buckets)?)
    }
}
