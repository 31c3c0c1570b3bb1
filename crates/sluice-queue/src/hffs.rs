//! `HierFfsQueue`: hierarchical FFS-based queue (Eiffel §4.2.1, Fig. 4.3).
//!
//! A fixed range of buckets indexed by a [`HierBitmap`]: a 64-ary tree of occupancy words, so
//! finding the first non-empty bucket costs one trailing-zeros per level, O(log64 N) for N
//! buckets (3 levels up to 262 144 buckets). The bucket count is fixed at configuration, so the
//! cost per operation is a constant independent of how many items are queued.
//!
//! The first non-empty bucket is held apart from the bitmap ([`FrontBitmap`]): a per-flow
//! policy that serves the first member and re-ranks it below itself (pFabric, whose served
//! flow's remaining size shrinks on almost every packet) then neither searches the bitmap for
//! the next service nor writes it for the move.

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

/// No front bucket: the index is empty.
const NO_FRONT: usize = usize::MAX;

/// The index of a [`HierFfsQueue`]: its first non-empty bucket (the front), and a
/// [`HierBitmap`] of the other non-empty buckets.
///
/// `first` reads the front without a search, and moving the front's last item to a lower
/// bucket (it stays first) only changes the front: no bitmap word is written. The bitmap is
/// searched when the front empties or moves above another bucket. pFabric at 1e3 flows
/// (callgrind, `sched_probe pfabric sluice 1000 200000`): 968.5 -> 892.3 instructions per
/// packet, from a three-level search in every dequeue and a bitmap move (one word, or two
/// three-level walks when the move crosses a word) in every re-rank.
#[derive(Clone, Debug)]
pub struct FrontBitmap {
    /// The first non-empty bucket, or [`NO_FRONT`]; never marked in `rest`.
    front: usize,
    /// Every other non-empty bucket.
    rest: HierBitmap,
}

impl FrontBitmap {
    /// An empty index over `buckets` buckets, or `OutOfMemory`.
    pub fn new(buckets: usize) -> Result<Self, ConfigError> {
        Ok(FrontBitmap {
            front: NO_FRONT,
            rest: HierBitmap::new(buckets)?,
        })
    }

    /// Whether bucket `i` is marked non-empty.
    pub fn contains(&self, i: usize) -> bool {
        i == self.front || self.rest.contains(i)
    }

    /// The front left its bucket: the first of the rest (if any) takes its place.
    #[inline]
    fn next_front(&mut self) {
        self.front = match self.rest.first() {
            Some(f) => {
                self.rest.clear(f);
                f
            }
            None => NO_FRONT,
        };
    }
}

impl BucketIndex for FrontBitmap {
    #[inline]
    fn insert(&mut self, bucket: usize) {
        if bucket < self.front {
            if self.front != NO_FRONT {
                self.rest.set(self.front);
            }
            self.front = bucket;
        } else {
            self.rest.set(bucket);
        }
    }

    #[inline]
    fn remove(&mut self, bucket: usize) {
        if bucket == self.front {
            self.next_front();
        } else {
            self.rest.clear(bucket);
        }
    }

    #[inline]
    fn moved(&mut self, from: usize, to: usize) {
        if from == self.front {
            if to < from {
                // Still first: the bitmap does not change.
                self.front = to;
                return;
            }
            match self.rest.first() {
                // Another bucket comes first now; `to` joins the rest.
                Some(f) if f < to => {
                    self.rest.replace(f, to);
                    self.front = f;
                }
                _ => self.front = to,
            }
        } else if to < self.front {
            // `to` comes first; the old front joins the rest in `from`'s place.
            self.rest.replace(from, self.front);
            self.front = to;
        } else {
            self.rest.replace(from, to);
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.front == NO_FRONT
    }

    #[inline]
    fn first<F: Fn(usize) -> bool>(&self, _occupied: F) -> Option<usize> {
        (self.front != NO_FRONT).then_some(self.front)
    }
}

/// Fixed-range bucketed queue over a hierarchical FFS bitmap. See the module note.
pub type HierFfsQueue<T> = FixedRangeQueue<T, FrontBitmap>;

impl<T: Copy> FixedRangeQueue<T, FrontBitmap> {
    /// A hierarchical FFS queue over `cfg`'s range.
    pub fn new(cfg: RangeConfig) -> Result<Self, ConfigError> {
        let g = cfg.validate(MAX_BUCKETS)?;
        Self::from_parts(&cfg, g, FrontBitmap::new(cfg.buckets)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// The cases that could leave the front stale, one by one: its last item leaves, moves
    /// below itself, moves above another bucket or above all; a bucket is filled below it; a
    /// bucket of the rest moves below it.
    #[test]
    fn the_front_follows_every_change() {
        let first = |x: &FrontBitmap| x.first(|_| true);
        let mut x = FrontBitmap::new(10_000).unwrap();
        assert!(x.is_empty());
        x.insert(500);
        x.insert(9000);
        assert_eq!(first(&x), Some(500));
        x.moved(500, 300); // below itself
        assert_eq!(first(&x), Some(300));
        x.moved(300, 9500); // above another: 9000 comes first
        assert_eq!(first(&x), Some(9000));
        x.insert(100); // below the front
        assert_eq!(first(&x), Some(100));
        x.moved(9500, 50); // a bucket of the rest below the front
        assert_eq!(first(&x), Some(50));
        x.moved(50, 60); // above itself, still below the rest
        assert_eq!(first(&x), Some(60));
        x.remove(60); // the front empties
        assert_eq!(first(&x), Some(100));
        x.remove(9000);
        x.remove(100);
        assert!(x.is_empty());
        assert_eq!(first(&x), None);
        x.insert(7);
        x.moved(7, 8); // alone: above itself
        assert_eq!(first(&x), Some(8));
    }

    proptest! {
        #[test]
        fn agrees_with_a_set(bits in 1usize..20_000, ops in prop::collection::vec((0u8..3, any::<u32>(), any::<u32>()), 0..300)) {
            let mut x = FrontBitmap::new(bits).unwrap();
            let mut set = BTreeSet::new();
            for (op, a, b) in ops {
                let (i, j) = (a as usize % bits, b as usize % bits);
                match op {
                    0 if !set.contains(&i) => { x.insert(i); set.insert(i); }
                    1 if set.contains(&i) => { x.remove(i); set.remove(&i); }
                    // A move from a marked bucket to an unmarked one, often the first (the
                    // front) and often near it.
                    2 => {
                        let from = if a % 2 == 0 { set.iter().next().copied() } else { Some(i) };
                        let to = if b % 2 == 0 { from.map(|f: usize| (f + j % 100) % bits) } else { Some(j) };
                        if let (Some(from), Some(to)) = (from, to) {
                            if set.contains(&from) && !set.contains(&to) {
                                x.moved(from, to);
                                set.remove(&from);
                                set.insert(to);
                            }
                        }
                    }
                    _ => {}
                }
                prop_assert_eq!(x.first(|_| true), set.iter().next().copied());
                prop_assert_eq!(x.is_empty(), set.is_empty());
                prop_assert_eq!(x.contains(i), set.contains(&i));
                prop_assert_eq!(x.contains(j), set.contains(&j));
            }
        }
    }
}
