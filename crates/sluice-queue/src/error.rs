//! Errors: configuration that cannot hold, pushes that cannot be accepted, stale handles.

use crate::Rank;

/// A queue configuration that cannot be built. Returned by every constructor; never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Granularity (rank units per bucket or nanoseconds per slot) must be at least 1.
    #[error("granularity must be at least 1 rank unit per bucket, got 0")]
    ZeroGranularity,
    /// A queue needs at least one bucket or slot.
    #[error("the number of buckets (or slots) must be at least 1, got 0")]
    ZeroBuckets,
    /// Too many buckets for this structure.
    #[error("{buckets} buckets is more than the {max} this structure supports")]
    TooManyBuckets {
        /// Requested.
        buckets: u64,
        /// Supported maximum.
        max: u64,
    },
    /// base + buckets * granularity does not fit in a 64-bit rank.
    #[error(
        "the range does not fit in a u64 rank: base {base} + {buckets} buckets x granularity {granularity} overflows"
    )]
    RangeOverflow {
        /// First rank of the range.
        base: Rank,
        /// Buckets.
        buckets: u64,
        /// Rank units per bucket.
        granularity: u64,
    },
    /// Capacity must be at least 1.
    #[error("capacity must be at least 1 item, got 0")]
    ZeroCapacity,
    /// Capacity beyond what handles can address.
    #[error("capacity {capacity} is more than the {max} items a queue can address")]
    CapacityTooLarge {
        /// Requested.
        capacity: u64,
        /// Supported maximum.
        max: u64,
    },
    /// The memory the configuration needs could not be reserved.
    #[error(
        "cannot reserve memory for {what} ({bytes} bytes); use a smaller capacity or fewer buckets"
    )]
    OutOfMemory {
        /// What was being reserved.
        what: &'static str,
        /// How much.
        bytes: u64,
    },
    /// The approximate gradient queue's alpha must be in its supported range.
    #[error("alpha must be between 1 and {max}, got {alpha}")]
    BadAlpha {
        /// Requested.
        alpha: u32,
        /// Supported maximum.
        max: u32,
    },
}

/// Why a push was not accepted. The item is handed back so nothing is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PushError<T> {
    /// The queue holds `capacity` items already.
    #[error("queue full")]
    Full {
        /// The rank given to push.
        rank: Rank,
        /// The item, returned to the caller.
        item: T,
    },
    /// The rank is outside the queue's range and its overflow policy is `Reject`.
    #[error("rank {rank} out of range")]
    OutOfRange {
        /// The rank given to push.
        rank: Rank,
        /// The item, returned to the caller.
        item: T,
    },
}

impl<T> PushError<T> {
    /// The item that was not queued.
    pub fn into_item(self) -> T {
        match self {
            PushError::Full { item, .. } | PushError::OutOfRange { item, .. } => item,
        }
    }
}

/// `remove` was given a handle whose item already left this queue, or that belongs to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale or foreign queue handle")]
pub struct StaleHandle;

/// Largest capacity any queue accepts: handles address 2^29 chunks of 8 entries, and the
/// slab-based baselines 2^32 - 1 entries; 2^29 items keeps one limit for all.
pub(crate) const MAX_CAPACITY: usize = 1 << 29;

/// An empty vector with room for `n` items, or `OutOfMemory` (instead of aborting the process).
pub(crate) fn reserved<T>(n: usize, what: &'static str) -> Result<Vec<T>, ConfigError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| ConfigError::OutOfMemory {
            what,
            bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        })?;
    Ok(v)
}

/// `n` copies of `value`, or `OutOfMemory`.
pub(crate) fn filled<T: Clone>(
    n: usize,
    value: T,
    what: &'static str,
) -> Result<Vec<T>, ConfigError> {
    let mut v = reserved(n, what)?;
    v.resize(n, value);
    Ok(v)
}

pub(crate) fn check_capacity(capacity: usize) -> Result<(), ConfigError> {
    if capacity == 0 {
        return Err(ConfigError::ZeroCapacity);
    }
    if capacity > MAX_CAPACITY {
        return Err(ConfigError::CapacityTooLarge {
            capacity: capacity as u64,
            max: MAX_CAPACITY as u64,
        });
    }
    Ok(())
}
