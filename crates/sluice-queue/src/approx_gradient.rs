//! `ApproxGradientQueue`: Eiffel's approximate gradient queue (§4.2.1, Appendix B).
//!
//! The exact gradient queue needs a hierarchy because weights 2^i overflow a word after 64
//! buckets. The approximate queue grows the weights slower, 2^(i/alpha), so one pair (a, b)
//! covers hundreds of buckets and the first bucket is estimated with one division:
//! `M ~ b/a - u(alpha)`, with `u(alpha) = 1 / (1 - 2^(1/alpha))` (about -22.6 for alpha = 16).
//!
//! **Window.** §4.2.1 derives the usable index window from alpha; we do the same at
//! construction:
//! - `I0`: the smallest M with `M g / (1 - g) <= 1/2`, `g = 2^(-(M+1)/alpha)` (the shift is then
//!   constant to within half a bucket). alpha = 16 gives I0 = 127 (the paper: 124).
//! - `Imax`: the largest index such that `b` with every bucket non-empty still fits in a u64.
//!   The weights are integers (`round(2^(i/alpha))`) so that adding and subtracting them is
//!   exact forever; floating-point sums would drift over millions of updates. alpha = 16 gives
//!   671 buckets (the paper, with a different word: 523).
//!
//! Bucket j (0 = first) has index `Imax - j`, so the paper's max-queue serves our minimum.
//!
//! **Errors and their bound.** The estimate is exact when the occupied buckets are one
//! contiguous block from the first one (dense occupancy: timestamps, LSTF) at least `I0 + 2`
//! buckets long (129 for alpha = 16), wherever it lies; so a block that runs to the window's
//! end must start that far before it (in the window's first four fifths for alpha = 16, its
//! first 70% for alpha = 64). A shorter block, a lone bucket say, may be a miss (below), still
//! answered exactly. Gaps move it:
//! - towards later buckets than the true first by at most `E(alpha)` buckets (a heavy
//!   concentration far behind the first bucket pulls the curvature; Appendix B, case 2). If that
//!   bucket is occupied it is served: an **order error of at most `E(alpha)` buckets**
//!   ([`ApproxGradient::error_bound`]; E(16) = 31). E is computed at construction as the worst
//!   case over all occupancy patterns (the worst pattern is the first bucket plus a contiguous
//!   block at the far end of the window).
//! - towards earlier, empty buckets (by at most `-u(alpha)`). That is a **miss**: counted, then
//!   a linear search forward from `E(alpha)` buckets before the estimate, which returns the exact
//!   first bucket (everything before it is empty).
//!
//! Items are never lost or duplicated: the estimate only chooses which bucket to serve.

use crate::ConfigError;
use crate::fixed::{BucketIndex, FixedRangeQueue, RangeConfig};
use std::cell::Cell;
use std::sync::OnceLock;

/// Largest supported alpha.
pub const MAX_ALPHA: u32 = 64;

/// The window and error bound derived from one alpha.
#[derive(Clone, Debug)]
pub struct Window {
    /// Alpha.
    pub alpha: u32,
    /// First usable index (I0).
    pub i0: u64,
    /// Last usable index (Imax).
    pub imax: u64,
    /// `-u(alpha)`: what the estimate adds to b/a.
    pub shift: f64,
    /// Worst order error in buckets (E).
    pub error_bound: usize,
    /// Integer weights round(2^(i/alpha)) for i in i0..=imax.
    weights: Vec<u64>,
}

impl Window {
    /// Number of buckets the window holds.
    pub fn buckets(&self) -> usize {
        (self.imax - self.i0 + 1) as usize
    }

    fn weight(&self, index: u64) -> u64 {
        self.weights[(index - self.i0) as usize]
    }

    fn estimate(&self, a: u64, b: u64) -> i64 {
        (b as f64 / a as f64 + self.shift).round() as i64
    }

    fn derive(alpha: u32) -> Window {
        let al = f64::from(alpha);
        let shift = -1.0 / (1.0 - 2f64.powf(1.0 / al));
        let mut i0 = 1u64;
        loop {
            let g = 2f64.powf(-((i0 + 1) as f64) / al);
            if i0 as f64 * g / (1.0 - g) <= 0.5 {
                break;
            }
            i0 += 1;
        }
        let mut weights = Vec::new();
        let mut b_full: u128 = 0;
        let mut i = i0;
        loop {
            let w = 2f64.powf(i as f64 / al).round() as u128;
            b_full += u128::from(i) * w;
            if b_full > u128::from(u64::MAX) {
                break;
            }
            weights.push(w as u64);
            i += 1;
        }
        let mut win = Window {
            alpha,
            i0,
            imax: i - 1,
            shift,
            error_bound: 0,
            weights,
        };
        win.error_bound = win.worst_underestimate();
        win
    }

    /// max over M and t of M - estimate({M} + [i0, t]): how far the estimate can fall behind.
    fn worst_underestimate(&self) -> usize {
        let mut worst = 0i64;
        for m in self.i0..=self.imax {
            let (mut a, mut b) = (self.weight(m), m * self.weight(m));
            worst = worst.max(m as i64 - self.estimate(a, b));
            for t in self.i0..m {
                a += self.weight(t);
                b += t * self.weight(t);
                worst = worst.max(m as i64 - self.estimate(a, b));
            }
        }
        worst.max(0) as usize
    }

    /// The window for `alpha`, derived once per process.
    pub fn for_alpha(alpha: u32) -> Result<&'static Window, ConfigError> {
        static WINDOWS: [OnceLock<Window>; MAX_ALPHA as usize] =
            [const { OnceLock::new() }; MAX_ALPHA as usize];
        if alpha == 0 || alpha > MAX_ALPHA {
            return Err(ConfigError::BadAlpha {
                alpha,
                max: MAX_ALPHA,
            });
        }
        Ok(WINDOWS[alpha as usize - 1].get_or_init(|| Window::derive(alpha)))
    }
}

/// The approximate gradient index: one curvature pair over the whole window.
#[derive(Debug)]
pub struct ApproxGradient {
    a: u64,
    b: u64,
    window: &'static Window,
    buckets: usize,
    misses: Cell<u64>,
}

impl ApproxGradient {
    /// An empty index over the first `buckets` buckets of alpha's window.
    pub fn new(alpha: u32, buckets: usize) -> Result<Self, ConfigError> {
        let window = Window::for_alpha(alpha)?;
        if buckets == 0 {
            return Err(ConfigError::ZeroBuckets);
        }
        if buckets > window.buckets() {
            return Err(ConfigError::TooManyBuckets {
                buckets: buckets as u64,
                max: window.buckets() as u64,
            });
        }
        Ok(ApproxGradient {
            a: 0,
            b: 0,
            window,
            buckets,
            misses: Cell::new(0),
        })
    }

    /// Worst order error of a pop, in buckets.
    pub fn error_bound(&self) -> usize {
        self.window.error_bound
    }

    /// The derived window.
    pub fn window(&self) -> &'static Window {
        self.window
    }

    #[inline]
    fn index_of(&self, bucket: usize) -> u64 {
        self.window.imax - bucket as u64
    }
}

impl BucketIndex for ApproxGradient {
    #[inline]
    fn insert(&mut self, bucket: usize) {
        let i = self.index_of(bucket);
        let w = self.window.weight(i);
        self.a += w;
        self.b += i * w;
    }

    #[inline]
    fn remove(&mut self, bucket: usize) {
        let i = self.index_of(bucket);
        let w = self.window.weight(i);
        self.a -= w;
        self.b -= i * w;
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.a == 0
    }

    #[inline]
    fn first<F: Fn(usize) -> bool>(&self, occupied: F) -> Option<usize> {
        if self.a == 0 {
            return None;
        }
        let est = self.window.estimate(self.a, self.b);
        let guess = (self.window.imax as i64 - est).clamp(0, self.buckets as i64 - 1) as usize;
        if occupied(guess) {
            return Some(guess);
        }
        self.misses.set(self.misses.get() + 1);
        let start = guess.saturating_sub(self.window.error_bound);
        let found = (start..self.buckets).find(|&j| occupied(j));
        debug_assert!(found.is_some(), "a > 0 means some bucket is occupied");
        found
    }

    fn misses(&self) -> u64 {
        self.misses.get()
    }
}

/// Fixed-range bucketed queue over the approximate gradient index. See the module note.
pub type ApproxGradientQueue<T> = FixedRangeQueue<T, ApproxGradient>;

impl<T: Copy> FixedRangeQueue<T, ApproxGradient> {
    /// An approximate gradient queue over `cfg`'s range; `cfg.buckets` may be at most the
    /// window of `alpha` ([`Window::for_alpha`]`(alpha)?.buckets()`).
    pub fn new(cfg: RangeConfig, alpha: u32) -> Result<Self, ConfigError> {
        let index = ApproxGradient::new(alpha, cfg.buckets)?;
        let g = cfg.validate(usize::MAX)?;
        Self::from_parts(&cfg, g, index)
    }

    /// Worst order error of a pop, in buckets.
    pub fn error_bound(&self) -> usize {
        self.index().error_bound()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_16_matches_the_paper() {
        let w = Window::for_alpha(16).unwrap();
        assert!((w.shift - 22.58).abs() < 0.01, "u(16) = {}", w.shift);
        assert!((120..=130).contains(&w.i0), "I0 = {}", w.i0);
        assert!(w.buckets() >= 523, "window {} buckets", w.buckets());
        assert!(
            w.error_bound > 0 && w.error_bound < 40,
            "E(16) = {}",
            w.error_bound
        );
    }

    #[test]
    fn windows_grow_with_alpha_and_sums_fit() {
        let mut last = 0;
        for alpha in [1, 2, 4, 8, 16, 32, 64] {
            let w = Window::for_alpha(alpha).unwrap();
            assert!(w.buckets() > last);
            last = w.buckets();
            let b: u128 = (w.i0..=w.imax)
                .map(|i| u128::from(i) * u128::from(w.weight(i)))
                .sum();
            assert!(b <= u128::from(u64::MAX));
        }
        assert!(Window::for_alpha(0).is_err());
        assert!(Window::for_alpha(65).is_err());
    }

    #[test]
    fn dense_occupancy_is_exact_and_never_misses() {
        let mut idx = ApproxGradient::new(16, 600).unwrap();
        let occupied = |j: usize| j >= 100;
        for j in (100..600).rev() {
            idx.insert(j);
        }
        assert_eq!(idx.first(occupied), Some(100));
        assert_eq!(idx.misses(), 0);
    }

    #[test]
    fn a_lone_bucket_misses_then_is_found_exactly() {
        let mut idx = ApproxGradient::new(16, 600).unwrap();
        idx.insert(300);
        assert_eq!(idx.first(|j| j == 300), Some(300));
        assert!(idx.misses() <= 1);
    }
}
