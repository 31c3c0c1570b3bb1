//! Choosing a queue at run time: [`QueueKind`] names every structure, [`QueueSpec`] configures
//! any of them, and [`AnyQueue`] holds one behind the [`RankQueue`] contract with static
//! dispatch (one predictable `match` per call, no virtual call).

use crate::approx_gradient::Window;
use crate::{
    ApproxGradientQueue, BTreeQueue, BinaryHeapQueue, BucketHeapQueue, CircularApproxQueue,
    CircularConfig, CircularFfsQueue, ConfigError, Entry, FfsQueue, GradientQueue, Handle,
    HierFfsQueue, Overflow, PushError, QueueStats, RangeConfig, Rank, RankQueue, SkipListQueue,
    StaleHandle, TimingWheel, Upcoming, WheelConfig,
};
use std::fmt;
use std::str::FromStr;

/// Every queue structure, by its stable name (used in policy files and benchmark output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueueKind {
    /// Carousel's timing wheel.
    TimingWheel,
    /// Flat FFS bitmap.
    Ffs,
    /// Hierarchical FFS.
    HierFfs,
    /// Circular hierarchical FFS.
    Cffs,
    /// Exact gradient queue.
    Gradient,
    /// Approximate gradient queue.
    ApproxGradient,
    /// std BinaryHeap baseline.
    BinaryHeap,
    /// BTreeMap baseline (rb-tree stand-in).
    BTree,
    /// Bucket heap baseline.
    BucketHeap,
    /// Skip list baseline.
    SkipList,
    /// Circular approximate gradient queue (a moving range; Eiffel's "circular approximate
    /// queue"). Not one of the benchmarked ten: the `approx_gradient` row of the moving
    /// workloads runs this same construction.
    CircularApprox,
}

impl QueueKind {
    /// Every kind.
    pub const ALL: [QueueKind; 11] = [
        QueueKind::TimingWheel,
        QueueKind::Ffs,
        QueueKind::HierFfs,
        QueueKind::Cffs,
        QueueKind::Gradient,
        QueueKind::ApproxGradient,
        QueueKind::BinaryHeap,
        QueueKind::BTree,
        QueueKind::BucketHeap,
        QueueKind::SkipList,
        QueueKind::CircularApprox,
    ];

    /// The ten structures `sluice bench queues` compares, Sluice's first: all but
    /// `circular_approx`, which the moving workloads run as `approx_gradient`.
    pub const BENCHMARKED: &'static [QueueKind] = Self::ALL.split_at(10).0;

    /// The stable name: `timing_wheel`, `ffs`, `hffs`, `cffs`, `gradient`, `approx_gradient`,
    /// `binary_heap`, `btree`, `bucket_heap`, `skiplist`.
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::TimingWheel => "timing_wheel",
            QueueKind::Ffs => "ffs",
            QueueKind::HierFfs => "hffs",
            QueueKind::Cffs => "cffs",
            QueueKind::Gradient => "gradient",
            QueueKind::ApproxGradient => "approx_gradient",
            QueueKind::BinaryHeap => "binary_heap",
            QueueKind::BTree => "btree",
            QueueKind::BucketHeap => "bucket_heap",
            QueueKind::SkipList => "skiplist",
            QueueKind::CircularApprox => "circular_approx",
        }
    }

    /// Whether the structure follows a moving range (the others have a fixed one or none).
    pub fn moving_range(self) -> bool {
        matches!(
            self,
            QueueKind::TimingWheel | QueueKind::Cffs | QueueKind::CircularApprox
        )
    }

    /// Whether ranks are ordered exactly (no buckets).
    pub fn exact(self) -> bool {
        matches!(
            self,
            QueueKind::BinaryHeap | QueueKind::BTree | QueueKind::SkipList
        )
    }

    /// Whether the structure may pop an entry of a later bucket before one of the first
    /// (the approximate gradient queues, within their error bound).
    pub fn approximate(self) -> bool {
        matches!(self, QueueKind::ApproxGradient | QueueKind::CircularApprox)
    }
}

impl fmt::Display for QueueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown queue name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown queue kind `{0}`; expected one of: timing_wheel, ffs, hffs, cffs, gradient, approx_gradient, circular_approx, binary_heap, btree, bucket_heap, skiplist"
)]
pub struct UnknownKind(pub String);

impl FromStr for QueueKind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        QueueKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownKind(s.to_string()))
    }
}

/// Configuration for any structure. Fields a structure does not use are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSpec {
    /// Which structure.
    pub kind: QueueKind,
    /// Rank units per bucket or slot.
    pub granularity: u64,
    /// Buckets (fixed range), buckets per range (cFFS), slots (wheel). For the approximate
    /// queue, at most its window ([`QueueSpec::approx_buckets`]).
    pub buckets: usize,
    /// First rank of a fixed range; start time of a timing wheel.
    pub base: Rank,
    /// Out-of-range policy.
    pub overflow: Overflow,
    /// Most items held.
    pub capacity: usize,
    /// Approximate gradient queue's alpha.
    pub alpha: u32,
}

impl QueueSpec {
    /// A spec with `buckets` of `granularity` from rank 0, clamping, alpha 16.
    pub fn new(kind: QueueKind, buckets: usize, granularity: u64, capacity: usize) -> Self {
        QueueSpec {
            kind,
            granularity,
            buckets,
            base: 0,
            overflow: Overflow::Clamp,
            capacity,
            alpha: 16,
        }
    }

    /// Buckets available to the approximate queue with `alpha`.
    pub fn approx_buckets(alpha: u32) -> Result<usize, ConfigError> {
        Ok(Window::for_alpha(alpha)?.buckets())
    }

    fn range(&self) -> RangeConfig {
        RangeConfig {
            base: self.base,
            granularity: self.granularity,
            buckets: self.buckets,
            overflow: self.overflow,
            capacity: self.capacity,
        }
    }

    /// Build the queue.
    pub fn build<T: Copy>(&self) -> Result<AnyQueue<T>, ConfigError> {
        Ok(match self.kind {
            QueueKind::TimingWheel => AnyQueue::TimingWheel(TimingWheel::new(WheelConfig {
                slot_ns: self.granularity,
                slots: self.buckets,
                overflow: self.overflow,
                capacity: self.capacity,
                start_ns: self.base,
            })?),
            QueueKind::Ffs => AnyQueue::Ffs(FfsQueue::new(self.range())?),
            QueueKind::HierFfs => AnyQueue::HierFfs(HierFfsQueue::new(self.range())?),
            QueueKind::Cffs => AnyQueue::Cffs(CircularFfsQueue::new(CircularConfig {
                granularity: self.granularity,
                buckets: self.buckets,
                overflow: self.overflow,
                capacity: self.capacity,
            })?),
            QueueKind::Gradient => AnyQueue::Gradient(GradientQueue::new(self.range())?),
            QueueKind::ApproxGradient => {
                AnyQueue::ApproxGradient(ApproxGradientQueue::new(self.range(), self.alpha)?)
            }
            QueueKind::BinaryHeap => AnyQueue::BinaryHeap(BinaryHeapQueue::new(self.capacity)?),
            QueueKind::BTree => AnyQueue::BTree(BTreeQueue::new(self.capacity)?),
            QueueKind::BucketHeap => AnyQueue::BucketHeap(BucketHeapQueue::new(self.range())?),
            QueueKind::SkipList => AnyQueue::SkipList(SkipListQueue::new(self.capacity)?),
            QueueKind::CircularApprox => AnyQueue::CircularApprox(CircularApproxQueue::new(
                CircularConfig {
                    granularity: self.granularity,
                    buckets: self.buckets,
                    overflow: self.overflow,
                    capacity: self.capacity,
                },
                self.alpha,
            )?),
        })
    }
}

/// Any structure behind the contract.
///
/// An explicit one-byte tag (`repr(u8)`): the dispatch of every call reads it and jumps,
/// where the niche the compiler chose (in one variant's first word) took a 64-bit compare and
/// a select to decode first; callgrind at 1e3 flows, instructions per packet: pfabric 847.6 ->
/// 835.6, hclock 1325.5 -> 1306.3, fq_pacing 1341.4 -> 1323.3, eiffel_fig47 1928.4 -> 1896.0.
#[allow(missing_docs)]
#[repr(u8)]
pub enum AnyQueue<T> {
    TimingWheel(TimingWheel<T>),
    Ffs(FfsQueue<T>),
    HierFfs(HierFfsQueue<T>),
    Cffs(CircularFfsQueue<T>),
    Gradient(GradientQueue<T>),
    ApproxGradient(ApproxGradientQueue<T>),
    BinaryHeap(BinaryHeapQueue<T>),
    BTree(BTreeQueue<T>),
    BucketHeap(BucketHeapQueue<T>),
    SkipList(SkipListQueue<T>),
    CircularApprox(CircularApproxQueue<T>),
}

/// Run `$body` with `$q` bound to the inner queue, whatever its type.
#[macro_export]
#[doc(hidden)]
macro_rules! with_any_queue {
    ($any:expr, $q:ident => $body:expr) => {
        match $any {
            $crate::AnyQueue::TimingWheel($q) => $body,
            $crate::AnyQueue::Ffs($q) => $body,
            $crate::AnyQueue::HierFfs($q) => $body,
            $crate::AnyQueue::Cffs($q) => $body,
            $crate::AnyQueue::Gradient($q) => $body,
            $crate::AnyQueue::ApproxGradient($q) => $body,
            $crate::AnyQueue::BinaryHeap($q) => $body,
            $crate::AnyQueue::BTree($q) => $body,
            $crate::AnyQueue::BucketHeap($q) => $body,
            $crate::AnyQueue::SkipList($q) => $body,
            $crate::AnyQueue::CircularApprox($q) => $body,
        }
    };
}

impl<T: Copy> AnyQueue<T> {
    /// Which structure this is.
    pub fn kind(&self) -> QueueKind {
        match self {
            AnyQueue::TimingWheel(_) => QueueKind::TimingWheel,
            AnyQueue::Ffs(_) => QueueKind::Ffs,
            AnyQueue::HierFfs(_) => QueueKind::HierFfs,
            AnyQueue::Cffs(_) => QueueKind::Cffs,
            AnyQueue::Gradient(_) => QueueKind::Gradient,
            AnyQueue::ApproxGradient(_) => QueueKind::ApproxGradient,
            AnyQueue::BinaryHeap(_) => QueueKind::BinaryHeap,
            AnyQueue::BTree(_) => QueueKind::BTree,
            AnyQueue::BucketHeap(_) => QueueKind::BucketHeap,
            AnyQueue::SkipList(_) => QueueKind::SkipList,
            AnyQueue::CircularApprox(_) => QueueKind::CircularApprox,
        }
    }
}

impl<T: Copy> RankQueue<T> for AnyQueue<T> {
    #[inline]
    fn push(&mut self, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        with_any_queue!(self, q => q.push(rank, item))
    }
    #[inline]
    fn pop_min(&mut self) -> Option<Entry<T>> {
        with_any_queue!(self, q => q.pop_min())
    }
    #[inline]
    fn peek_min(&self) -> Option<Entry<T>> {
        with_any_queue!(self, q => q.peek_min())
    }
    #[inline]
    fn remove(&mut self, handle: Handle) -> Result<Entry<T>, StaleHandle> {
        with_any_queue!(self, q => q.remove(handle))
    }
    #[inline]
    fn requeue(&mut self, handle: Handle, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        with_any_queue!(self, q => q.requeue(handle, rank, item))
    }
    #[inline]
    fn rank_of(&self, handle: Handle) -> Option<Rank> {
        with_any_queue!(self, q => q.rank_of(handle))
    }
    #[inline]
    fn len(&self) -> usize {
        with_any_queue!(self, q => q.len())
    }
    fn capacity(&self) -> usize {
        with_any_queue!(self, q => q.capacity())
    }
    #[inline]
    fn next_deadline(&self) -> Option<Rank> {
        with_any_queue!(self, q => q.next_deadline())
    }
    #[inline]
    fn pop_due(&mut self, now: Rank) -> Option<Entry<T>> {
        with_any_queue!(self, q => q.pop_due(now))
    }
    #[inline]
    fn advance(&mut self, now: Rank) {
        with_any_queue!(self, q => q.advance(now))
    }
    fn stats(&self) -> QueueStats {
        with_any_queue!(self, q => q.stats())
    }
    #[inline]
    fn upcoming(&self) -> Upcoming<'_, T> {
        with_any_queue!(self, q => q.upcoming())
    }
    #[inline]
    fn peek_upcoming(&self) -> Option<(Entry<T>, Upcoming<'_, T>)> {
        with_any_queue!(self, q => q.peek_upcoming())
    }
}
