//! `BucketHeapQueue` ("BH"): the bucketed baseline of Eiffel §4.4.2.
//!
//! The same fixed-range FIFO buckets as the FFS queues, but the non-empty bucket numbers are
//! kept in a binary min-heap, so finding the first bucket is O(1) and a bucket turning
//! non-empty or empty costs O(log B) for B non-empty buckets. The heap is indexed (each bucket
//! knows its heap position), so an emptied bucket leaves the heap at once and the heap never
//! holds more than the number of buckets.

use crate::ConfigError;
use crate::fixed::{BucketIndex, FixedRangeQueue, MAX_BUCKETS, RangeConfig};

const ABSENT: u32 = u32::MAX;

/// Indexed binary min-heap of non-empty bucket numbers.
#[derive(Clone, Debug)]
pub struct HeapIndex {
    heap: Vec<u32>,
    /// Position of each bucket in `heap`, or `ABSENT`.
    pos: Vec<u32>,
}

impl HeapIndex {
    /// An empty index over `buckets` buckets, or `OutOfMemory`.
    pub fn new(buckets: usize) -> Result<Self, ConfigError> {
        Ok(HeapIndex {
            heap: crate::error::reserved(buckets, "bucket heap")?,
            pos: crate::error::filled(buckets, ABSENT, "bucket heap positions")?,
        })
    }

    fn place(&mut self, at: usize, bucket: u32) {
        self.heap[at] = bucket;
        self.pos[bucket as usize] = at as u32;
    }

    fn sift_up(&mut self, mut at: usize) {
        let b = self.heap[at];
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[parent] <= b {
                break;
            }
            let p = self.heap[parent];
            self.place(at, p);
            at = parent;
        }
        self.place(at, b);
    }

    fn sift_down(&mut self, mut at: usize) {
        let b = self.heap[at];
        let n = self.heap.len();
        loop {
            let left = 2 * at + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.heap[right] < self.heap[left] {
                right
            } else {
                left
            };
            if self.heap[child] >= b {
                break;
            }
            let c = self.heap[child];
            self.place(at, c);
            at = child;
        }
        self.place(at, b);
    }
}

impl BucketIndex for HeapIndex {
    fn insert(&mut self, bucket: usize) {
        debug_assert_eq!(self.pos[bucket], ABSENT);
        self.heap.push(bucket as u32);
        let at = self.heap.len() - 1;
        self.sift_up(at);
    }

    fn remove(&mut self, bucket: usize) {
        let at = self.pos[bucket] as usize;
        self.pos[bucket] = ABSENT;
        let last = self.heap.pop().unwrap_or(bucket as u32);
        if at < self.heap.len() {
            self.place(at, last);
            self.sift_down(at);
            self.sift_up(self.pos[last as usize] as usize);
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    #[inline]
    fn first<F: Fn(usize) -> bool>(&self, _occupied: F) -> Option<usize> {
        self.heap.first().map(|&b| b as usize)
    }
}

/// Fixed-range bucketed queue whose non-empty buckets sit in a binary heap.
pub type BucketHeapQueue<T> = FixedRangeQueue<T, HeapIndex>;

impl<T: Copy> FixedRangeQueue<T, HeapIndex> {
    /// A bucket-heap queue over `cfg`'s range.
    pub fn new(cfg: RangeConfig) -> Result<Self, ConfigError> {
        let g = cfg.validate(MAX_BUCKETS)?;
        Self::from_parts(&cfg, g, HeapIndex::new(cfg.buckets)?)
    }
}
