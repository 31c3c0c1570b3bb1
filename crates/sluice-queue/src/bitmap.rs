//! `HierBitmap`: a w-ary tree of 64-bit occupancy words (Eiffel Fig. 4.3, PIQ).
//!
//! Level 0 has one bit per bucket; bit j of a word on level l+1 is set iff word j of level l is
//! non-zero. Finding the first set bit descends from the single top word with one
//! trailing-zeros per level; setting or clearing a bit touches a parent only when a word turns
//! non-zero or zero. With 64-bit words:
//!
//! | buckets | levels | words touched by `first` |
//! |---|---|---|
//! | <= 64 | 1 | 1 |
//! | <= 4096 | 2 | 2 |
//! | <= 262 144 | 3 | 3 |
//! | <= 16 777 216 | 4 | 4 |
//!
//! The cost depends on the configured number of buckets, never on how many items are queued.
//! Used by [`crate::HierFfsQueue`], [`crate::CircularFfsQueue`] (one per range) and
//! [`crate::TimingWheel`] (one over its slots, searched circularly from the front slot).

/// Most levels: 64^6 buckets is more than a bucket id can name.
const MAX_LEVELS: usize = 6;

/// A hierarchical occupancy bitmap over `n` buckets.
#[derive(Clone, Debug)]
pub struct HierBitmap {
    /// All levels, leaves first; level `l` starts at word `offsets[l]`.
    words: Vec<u64>,
    /// Kept inline: the walk up and down the levels must not chase a pointer.
    offsets: [usize; MAX_LEVELS],
    /// Words per level.
    widths: [usize; MAX_LEVELS],
    levels: usize,
    bits: usize,
}

impl HierBitmap {
    /// An empty bitmap over `bits` buckets (at least 1), or `OutOfMemory`.
    pub fn new(bits: usize) -> Result<Self, crate::ConfigError> {
        let bits = bits.clamp(1, 1 << 32);
        let (mut offsets, mut widths) = ([0; MAX_LEVELS], [0; MAX_LEVELS]);
        let mut levels = 0;
        let mut offset = 0;
        let mut width = bits;
        loop {
            let words = width.div_ceil(64);
            offsets[levels] = offset;
            widths[levels] = words;
            levels += 1;
            offset += words;
            if words == 1 {
                break;
            }
            width = words;
        }
        Ok(HierBitmap {
            words: crate::error::filled(offset, 0, "bitmap words")?,
            offsets,
            widths,
            levels,
            bits,
        })
    }

    /// Number of buckets covered.
    pub fn bits(&self) -> usize {
        self.bits
    }

    /// True when no bit is set.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.words[self.offsets[self.levels - 1]] == 0
    }

    /// Whether bucket `i` is marked (false for a bucket beyond [`HierBitmap::bits`]).
    #[inline]
    pub fn contains(&self, i: usize) -> bool {
        // The upper levels' words follow the leaves': past the last leaf word, `i / 64` would
        // name a parent word.
        i < self.bits && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Mark bucket `i` non-empty.
    #[inline]
    pub fn set(&mut self, mut i: usize) {
        for &offset in &self.offsets[..self.levels] {
            let w = &mut self.words[offset + i / 64];
            let was_zero = *w == 0;
            *w |= 1 << (i % 64);
            if !was_zero {
                return;
            }
            i /= 64;
        }
    }

    /// Mark bucket `i` empty.
    #[inline]
    pub fn clear(&mut self, mut i: usize) {
        for &offset in &self.offsets[..self.levels] {
            let w = &mut self.words[offset + i / 64];
            *w &= !(1 << (i % 64));
            if *w != 0 {
                return;
            }
            i /= 64;
        }
    }

    /// Unmark bucket `from` (marked) and mark bucket `to` (unmarked). Within one leaf word,
    /// as when an item moves to a nearby bucket, no parent changes: one word is written.
    #[inline]
    pub fn replace(&mut self, from: usize, to: usize) {
        if from / 64 == to / 64 {
            debug_assert!(self.contains(from) && !self.contains(to));
            self.words[from / 64] ^= 1 << (from % 64) | 1 << (to % 64);
        } else {
            self.clear(from);
            self.set(to);
        }
    }

    /// The first marked bucket.
    #[inline]
    pub fn first(&self) -> Option<usize> {
        let top = self.levels - 1;
        if self.words[self.offsets[top]] == 0 {
            return None;
        }
        Some(self.descend(top, 0))
    }

    /// From word `pos` of level `level` (known non-zero), follow first set bits to a leaf.
    #[inline]
    fn descend(&self, level: usize, mut pos: usize) -> usize {
        for l in (0..=level).rev() {
            let word = self.words[self.offsets[l] + pos];
            pos = pos * 64 + word.trailing_zeros() as usize;
        }
        pos
    }

    /// The first marked bucket at or after `i`, without wrapping.
    #[inline]
    pub fn find_from(&self, i: usize) -> Option<usize> {
        let mut idx = i;
        for level in 0..self.levels {
            let (offset, words) = (self.offsets[level], self.widths[level]);
            let w = idx / 64;
            if w >= words {
                return None;
            }
            let word = self.words[offset + w] & (!0u64 << (idx % 64));
            if word != 0 {
                let pos = w * 64 + word.trailing_zeros() as usize;
                return Some(if level == 0 {
                    pos
                } else {
                    self.descend(level - 1, pos)
                });
            }
            // Nothing left in this word: look from the next word, one level up.
            idx = w + 1;
        }
        None
    }

    /// The first marked bucket at or after `i`, wrapping around to 0.
    #[inline]
    pub fn find_circular(&self, i: usize) -> Option<usize> {
        self.find_from(i).or_else(|| self.first())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn levels_match_the_table() {
        assert_eq!(HierBitmap::new(64).unwrap().levels, 1);
        assert_eq!(HierBitmap::new(65).unwrap().levels, 2);
        assert_eq!(HierBitmap::new(4096).unwrap().levels, 2);
        assert_eq!(HierBitmap::new(4097).unwrap().levels, 3);
        assert_eq!(HierBitmap::new(262_144).unwrap().levels, 3);
        assert_eq!(HierBitmap::new(262_145).unwrap().levels, 4);
    }

    /// A bucket past the end is never marked: the word after the last leaf word is a parent
    /// word, set as soon as any bucket is (it answered `true` for bucket 128 of 100).
    #[test]
    fn buckets_past_the_end_are_not_marked() {
        for bits in [1, 63, 64, 65, 100, 4096, 4097] {
            let mut bm = HierBitmap::new(bits).unwrap();
            bm.set(0);
            bm.set(bits - 1);
            let past = bm.words.len() * 64;
            assert!((bits..past).all(|i| !bm.contains(i)), "{bits} buckets");
            assert!(bm.contains(0) && bm.contains(bits - 1));
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_set(bits in 1usize..20_000, ops in prop::collection::vec((0u8..3, any::<u32>(), 0usize..200), 0..300)) {
            let mut bm = HierBitmap::new(bits).unwrap();
            let mut set = BTreeSet::new();
            for (op, x, step) in ops {
                let i = x as usize % bits;
                match op {
                    0 => { bm.set(i); set.insert(i); }
                    1 => { bm.clear(i); set.remove(&i); }
                    // Move a marked bucket to an unmarked one nearby (often in the same word).
                    _ => {
                        let to = (i + step) % bits;
                        if set.contains(&i) && !set.contains(&to) {
                            bm.replace(i, to);
                            set.remove(&i);
                            set.insert(to);
                        }
                    }
                }
                prop_assert_eq!(bm.first(), set.iter().next().copied());
                prop_assert_eq!(bm.is_empty(), set.is_empty());
                let probe = (x as usize / 7) % bits;
                prop_assert_eq!(bm.find_from(probe), set.range(probe..).next().copied());
                let wrapped = set.range(probe..).next().or_else(|| set.iter().next()).copied();
                prop_assert_eq!(bm.find_circular(probe), wrapped);
                prop_assert_eq!(bm.contains(i), set.contains(&i));
            }
        }
    }
}
