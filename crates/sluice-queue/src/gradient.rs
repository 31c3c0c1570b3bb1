//! `GradientQueue`: Eiffel's exact gradient queue, hierarchical (§4.2.1, Appendix A).
//!
//! Instead of bit scans, each node keeps the "curvature" of its children's occupancy: a
//! non-empty child with index i (1..=32) adds weight 2^i to `a` and i * 2^i to `b`. Appendix A's
//! Theorem 1: the largest non-empty index is `ceil(b / a)`. Children are numbered so that the
//! first bucket has the largest index (i = 32 - position), which turns the max-queue of the
//! paper into a min-queue. A bucket turning non-empty or empty adds or subtracts its weights
//! (and propagates to the parent only when a node turns non-empty or empty), and finding the
//! first bucket is one division per level.
//!
//! | fan-out | a, b per node | levels for 1 024 / 32 768 / 1 048 576 buckets |
//! |---|---|---|
//! | 32 | u64 each (b < 2^38) | 2 / 3 / 4 |
//!
//! This exact form is an FFS computed with arithmetic, so it is slower than the bitmap queues
//! (a division costs more than a trailing-zeros); it is here as the ground the approximate
//! queue ([`crate::ApproxGradientQueue`]) stands on, and as a baseline. A debug assertion checks
//! every answer against the occupancy bits.

use crate::ConfigError;
use crate::fixed::{BucketIndex, FixedRangeQueue, MAX_BUCKETS, RangeConfig};

const FANOUT: usize = 32;

/// One node: the curvature of up to 32 children.
#[derive(Clone, Copy, Debug, Default)]
struct Curvature {
    a: u64,
    b: u64,
}

impl Curvature {
    /// Weight index of child `pos` (0 = first bucket = largest index).
    #[inline]
    fn index(pos: usize) -> u64 {
        (FANOUT - pos) as u64
    }

    #[inline]
    fn add(&mut self, pos: usize) {
        let i = Self::index(pos);
        self.a += 1 << i;
        self.b += i << i;
    }

    #[inline]
    fn sub(&mut self, pos: usize) {
        let i = Self::index(pos);
        self.a -= 1 << i;
        self.b -= i << i;
    }

    /// The first non-empty child: Theorem 1's ceil(b / a), mapped back to a position.
    #[inline]
    fn first(&self) -> usize {
        let i = self.b.div_ceil(self.a);
        debug_assert!(
            self.a & (1 << i) != 0,
            "ceil(b/a) must name a non-empty child"
        );
        FANOUT - i as usize
    }
}

/// Hierarchical exact gradient index over a fixed number of buckets.
#[derive(Clone, Debug)]
pub struct GradientIndex {
    /// Nodes of all levels, leaves first; `levels[l]` is (offset, nodes).
    nodes: Vec<Curvature>,
    levels: Vec<(usize, usize)>,
}

impl GradientIndex {
    /// An empty index over `buckets` buckets, or `OutOfMemory`.
    pub fn new(buckets: usize) -> Result<Self, ConfigError> {
        let mut levels = Vec::new();
        let mut offset = 0;
        let mut width = buckets.max(1);
        loop {
            let n = width.div_ceil(FANOUT);
            levels.push((offset, n));
            offset += n;
            if n == 1 {
                break;
            }
            width = n;
        }
        Ok(GradientIndex {
            nodes: crate::error::filled(offset, Curvature::default(), "gradient curvatures")?,
            levels,
        })
    }
}

impl BucketIndex for GradientIndex {
    #[inline]
    fn insert(&mut self, mut bucket: usize) {
        for &(offset, _) in &self.levels {
            let node = &mut self.nodes[offset + bucket / FANOUT];
            let was_empty = node.a == 0;
            node.add(bucket % FANOUT);
            if !was_empty {
                return;
            }
            bucket /= FANOUT;
        }
    }

    #[inline]
    fn remove(&mut self, mut bucket: usize) {
        for &(offset, _) in &self.levels {
            let node = &mut self.nodes[offset + bucket / FANOUT];
            node.sub(bucket % FANOUT);
            if node.a != 0 {
                return;
            }
            bucket /= FANOUT;
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.nodes[self.levels[self.levels.len() - 1].0].a == 0
    }

    #[inline]
    fn first<F: Fn(usize) -> bool>(&self, _occupied: F) -> Option<usize> {
        let top = self.levels.len() - 1;
        if self.nodes[self.levels[top].0].a == 0 {
            return None;
        }
        let mut pos = 0;
        for l in (0..=top).rev() {
            let node = self.nodes[self.levels[l].0 + pos];
            pos = pos * FANOUT + node.first();
        }
        Some(pos)
    }
}

/// Fixed-range bucketed queue over the exact gradient index. See the module note.
pub type GradientQueue<T> = FixedRangeQueue<T, GradientIndex>;

impl<T: Copy> FixedRangeQueue<T, GradientIndex> {
    /// An exact gradient queue over `cfg`'s range.
    pub fn new(cfg: RangeConfig) -> Result<Self, ConfigError> {
        let g = cfg.validate(MAX_BUCKETS)?;
        Self::from_parts(&cfg, g, GradientIndex::new(cfg.buckets)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theorem_one_on_every_single_and_full_pattern() {
        for pos in 0..FANOUT {
            let mut c = Curvature::default();
            c.add(pos);
            assert_eq!(c.first(), pos, "only child {pos}");
            for later in pos + 1..FANOUT {
                c.add(later);
            }
            assert_eq!(c.first(), pos, "children {pos}.. all set");
        }
    }

    #[test]
    fn first_is_exact_for_every_pattern_of_one_node_prefix() {
        // Exhaustive over the first 12 children (4096 patterns), with the rest empty.
        for mask in 1u32..(1 << 12) {
            let mut c = Curvature::default();
            for pos in 0..12 {
                if mask & (1 << pos) != 0 {
                    c.add(pos);
                }
            }
            assert_eq!(c.first(), mask.trailing_zeros() as usize);
        }
    }
}
