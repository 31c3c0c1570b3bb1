//! `FfsQueue`: Eiffel's basic FFS-based queue (§4.2.1, Fig. 4.2).
//!
//! One bit per bucket in a flat array of 64-bit words; the first non-empty bucket is the
//! trailing-zeros of the first non-zero word. Finding that word is a linear scan, so the cost
//! grows with the number of *buckets* (M words, O(M)), not with the number of items; the Linux
//! real-time scheduler uses this shape for its 100 priorities. To keep repeated pops cheap the
//! index remembers a low-water mark: every word below `low` is zero, so the scan resumes where
//! the last one stopped and only moves forward until a lower bucket is filled again.
//!
//! Use it for small fixed ranges (up to a few thousand buckets); [`crate::HierFfsQueue`] scales
//! to millions of buckets.

use crate::ConfigError;
use crate::fixed::{BucketIndex, FixedRangeQueue, RangeConfig};

/// Flat occupancy bitmap with a low-water mark.
#[derive(Clone, Debug)]
pub struct FlatBitmap {
    words: Vec<u64>,
    /// Every word below `low` is zero; `low == words.len()` when all are.
    low: usize,
}

impl FlatBitmap {
    /// An empty bitmap over `bits` buckets, or `OutOfMemory`.
    pub fn new(bits: usize) -> Result<Self, ConfigError> {
        let words = bits.div_ceil(64).max(1);
        Ok(FlatBitmap {
            words: crate::error::filled(words, 0, "bitmap words")?,
            low: words,
        })
    }
}

impl BucketIndex for FlatBitmap {
    #[inline]
    fn insert(&mut self, bucket: usize) {
        let w = bucket / 64;
        self.words[w] |= 1 << (bucket % 64);
        self.low = self.low.min(w);
    }

    #[inline]
    fn remove(&mut self, bucket: usize) {
        let w = bucket / 64;
        self.words[w] &= !(1 << (bucket % 64));
        if w == self.low {
            // The linear scan: advance to the next non-zero word.
            while self.low < self.words.len() && self.words[self.low] == 0 {
                self.low += 1;
            }
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.low == self.words.len()
    }

    #[inline]
    fn first<F: Fn(usize) -> bool>(&self, _occupied: F) -> Option<usize> {
        let word = *self.words.get(self.low)?;
        Some(self.low * 64 + word.trailing_zeros() as usize)
    }
}

/// Fixed-range bucketed queue over a flat FFS bitmap. See the module note.
pub type FfsQueue<T> = FixedRangeQueue<T, FlatBitmap>;

/// Most buckets an `FfsQueue` accepts: past this a flat scan is the wrong structure.
pub const FFS_MAX_BUCKETS: usize = 1 << 24;

impl<T: Copy> FixedRangeQueue<T, FlatBitmap> {
    /// A flat FFS queue over `cfg`'s range.
    pub fn new(cfg: RangeConfig) -> Result<Self, ConfigError> {
        let g = cfg.validate(FFS_MAX_BUCKETS)?;
        Self::from_parts(&cfg, g, FlatBitmap::new(cfg.buckets)?)
    }
}
