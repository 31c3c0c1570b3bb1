//! The exact reference model every queue is tested against.
//!
//! [`Oracle`] is deliberately plain: a `BTreeMap` ordered by (key, arrival sequence), so the
//! first entry is the answer and ties leave FIFO. What differs between structures is only the
//! *key* an item is filed under, and [`KeyModel`] states each structure's rule from its
//! documentation, independently of its code: exact rank, fixed-range bucket, timing-wheel slot
//! relative to a moving front, or cFFS bucket relative to a moving base. A differential test
//! runs the same operations on a structure and on `Oracle::new(model)` and demands identical
//! answers. The oracle is also used by `sluice-sched`'s tests.

use crate::{Entry, Overflow, PushError, Rank};
use std::collections::{BTreeMap, HashMap};

/// How a structure turns a rank into the key it orders by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyModel {
    /// The rank itself (binary heap, B-tree, skip list).
    Exact,
    /// Bucket `(rank - base) / granularity` of `buckets`; outside: edge bucket or reject.
    Fixed {
        /// First rank.
        base: Rank,
        /// Rank units per bucket.
        granularity: u64,
        /// Buckets.
        buckets: u64,
        /// Out-of-range policy.
        overflow: Overflow,
    },
    /// Timing wheel: slot `max(rank / slot_ns, front)`; beyond `front + slots - 1`: last slot
    /// or reject. `front` moves to each popped slot and, on a `pop_due` that finds nothing due,
    /// to `now`'s slot.
    Wheel {
        /// Current front slot.
        front: u64,
        /// Slot width.
        slot_ns: u64,
        /// Slots.
        slots: u64,
        /// Beyond-horizon policy.
        overflow: Overflow,
    },
    /// cFFS: bucket `max(rank / granularity, base)`; beyond `base + 2n - 1`: that bucket or
    /// reject. A push into an empty queue re-bases to `bucket - bucket % n`; a push into
    /// `[base - n, base)` that will be stored, while no key is queued in `[base + n, base + 2n)`
    /// and no item filed from below `base` is queued, moves `base` back by `n` first; when no
    /// key is left in `[base, base + n)` but some are queued, `base += n`.
    Circular {
        /// First bucket of the primary range.
        base: u64,
        /// Rank units per bucket.
        granularity: u64,
        /// Buckets per range (n).
        buckets: u64,
        /// Beyond-secondary policy.
        overflow: Overflow,
    },
}

impl KeyModel {
    /// Key for `rank`, or `None` if rejected. `max`: the largest key queued now (`None`:
    /// empty); `room`: whether the push will be stored if its rank is in range; `below`:
    /// whether an item filed from below the circular base is queued.
    fn key(&mut self, rank: Rank, max: Option<u64>, room: bool, below: bool) -> Option<u64> {
        match self {
            KeyModel::Exact => Some(rank),
            KeyModel::Fixed {
                base,
                granularity,
                buckets,
                overflow,
            } => {
                let k = if rank < *base {
                    None
                } else {
                    Some((rank - *base) / *granularity).filter(|&k| k < *buckets)
                };
                match (k, overflow) {
                    (Some(k), _) => Some(k),
                    (None, Overflow::Reject) => None,
                    (None, Overflow::Clamp) => Some(if rank < *base { 0 } else { *buckets - 1 }),
                }
            }
            KeyModel::Wheel {
                front,
                slot_ns,
                slots,
                overflow,
            } => {
                let k = (rank / *slot_ns).max(*front);
                if k - *front < *slots {
                    Some(k)
                } else if *overflow == Overflow::Clamp {
                    Some(*front + *slots - 1)
                } else {
                    None
                }
            }
            KeyModel::Circular {
                base,
                granularity,
                buckets,
                overflow,
            } => {
                let k = rank / *granularity;
                match max {
                    None => *base = k - k % *buckets,
                    // Stored keys are at least `base`; written without sums that could wrap
                    // near u64::MAX, where the queue works too.
                    Some(m)
                        if k < *base
                            && k >= base.saturating_sub(*buckets)
                            && m - *base < *buckets
                            && !below =>
                    {
                        if room {
                            *base -= *buckets;
                        }
                    }
                    Some(_) => {}
                }
                let k = k.max(*base);
                if k - *base < 2 * *buckets {
                    Some(k)
                } else if *overflow == Overflow::Clamp {
                    Some(base.saturating_add(2 * *buckets - 1))
                } else {
                    None
                }
            }
        }
    }

    /// The time at which an item with key `key` is due.
    fn deadline(&self, key: u64) -> Rank {
        match self {
            KeyModel::Exact => key,
            KeyModel::Fixed {
                base, granularity, ..
            } => base + key * granularity,
            KeyModel::Wheel { slot_ns, .. } => key * slot_ns,
            KeyModel::Circular { granularity, .. } => key * granularity,
        }
    }
}

/// The reference queue. Push returns an id (not a [`crate::Handle`]) for [`Oracle::remove`].
#[derive(Clone, Debug)]
pub struct Oracle<T> {
    entries: BTreeMap<(u64, u64), (Rank, T, u64)>,
    by_id: HashMap<u64, (u64, u64)>,
    model: KeyModel,
    capacity: usize,
    seq: u64,
}

impl<T: Copy> Oracle<T> {
    /// An empty oracle filing items by `model`, holding at most `capacity`.
    pub fn new(model: KeyModel, capacity: usize) -> Self {
        Oracle {
            entries: BTreeMap::new(),
            by_id: HashMap::new(),
            model,
            capacity,
            seq: 0,
        }
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The model, with its current front or base.
    pub fn model(&self) -> KeyModel {
        self.model
    }

    /// Queue `item`; returns its id, or the same error the structure must return.
    pub fn push(&mut self, rank: Rank, item: T) -> Result<u64, PushError<T>> {
        let max = self.entries.last_key_value().map(|(&(k, _), _)| k);
        let room = self.entries.len() < self.capacity;
        // Items filed from below the circular base sit at a key above their rank's bucket.
        let below = match self.model {
            KeyModel::Circular { granularity, .. } => self
                .entries
                .iter()
                .any(|(&(k, _), &(r, _, _))| r / granularity < k),
            _ => false,
        };
        let Some(key) = self.model.key(rank, max, room, below) else {
            return Err(PushError::OutOfRange { rank, item });
        };
        if self.entries.len() == self.capacity {
            return Err(PushError::Full { rank, item });
        }
        let id = self.seq;
        self.seq += 1;
        self.entries.insert((key, id), (rank, item, id));
        self.by_id.insert(id, (key, id));
        Ok(id)
    }

    /// The first item.
    pub fn peek_min(&self) -> Option<Entry<T>> {
        self.entries
            .first_key_value()
            .map(|(_, &(rank, item, _))| Entry { rank, item })
    }

    /// The key of the first item.
    pub fn min_key(&self) -> Option<u64> {
        self.entries.first_key_value().map(|(&(k, _), _)| k)
    }

    /// Due time of the first item.
    pub fn next_deadline(&self) -> Option<Rank> {
        self.min_key().map(|k| self.model.deadline(k))
    }

    /// Take the first item.
    pub fn pop_min(&mut self) -> Option<Entry<T>> {
        let ((key, _), (rank, item, id)) = self.entries.pop_first()?;
        self.by_id.remove(&id);
        if let KeyModel::Wheel { front, .. } = &mut self.model {
            *front = key;
        }
        self.after_leave();
        Some(Entry { rank, item })
    }

    /// Take the first item if due at `now`.
    pub fn pop_due(&mut self, now: Rank) -> Option<Entry<T>> {
        match self.next_deadline() {
            Some(d) if d <= now => self.pop_min(),
            _ => {
                if let KeyModel::Wheel { front, slot_ns, .. } = &mut self.model {
                    *front = (*front).max(now / *slot_ns);
                }
                None
            }
        }
    }

    /// Let time pass: a wheel's front moves to `now`'s slot, never past the first item
    /// ([`crate::RankQueue::advance`]).
    pub fn advance(&mut self, now: Rank) {
        let first = self.min_key();
        if let KeyModel::Wheel { front, slot_ns, .. } = &mut self.model {
            let target = first.map_or(now / *slot_ns, |k| k.min(now / *slot_ns));
            *front = (*front).max(target);
        }
    }

    /// The rank of the item with `id`, while it is queued.
    pub fn rank_of(&self, id: u64) -> Option<Rank> {
        let key = self.by_id.get(&id)?;
        self.entries.get(key).map(|&(rank, _, _)| rank)
    }

    /// Remove the item with `id`; `None` if it already left.
    pub fn remove(&mut self, id: u64) -> Option<Entry<T>> {
        let key = self.by_id.remove(&id)?;
        let (rank, item, _) = self.entries.remove(&key)?;
        self.after_leave();
        Some(Entry { rank, item })
    }

    fn after_leave(&mut self) {
        let min = self.min_key();
        if let KeyModel::Circular { base, buckets, .. } = &mut self.model {
            if let Some(k) = min {
                if k - *base >= *buckets {
                    *base += *buckets;
                }
            }
        }
    }

    /// Items in order, for inspection.
    pub fn items(&self) -> impl Iterator<Item = Entry<T>> + '_ {
        self.entries
            .values()
            .map(|&(rank, item, _)| Entry { rank, item })
    }
}

/// The model of the structure `spec` builds, or `None` for the approximate queues (whose order
/// is not exact by design).
pub fn key_model(spec: &crate::QueueSpec) -> Option<KeyModel> {
    use crate::QueueKind as K;
    let (base, granularity, buckets, overflow) = (
        spec.base,
        spec.granularity,
        spec.buckets as u64,
        spec.overflow,
    );
    Some(match spec.kind {
        K::BinaryHeap | K::BTree | K::SkipList => KeyModel::Exact,
        K::Ffs | K::HierFfs | K::Gradient | K::BucketHeap => KeyModel::Fixed {
            base,
            granularity,
            buckets,
            overflow,
        },
        K::Cffs => KeyModel::Circular {
            base: 0,
            granularity,
            buckets,
            overflow,
        },
        K::TimingWheel => KeyModel::Wheel {
            front: base / granularity,
            slot_ns: granularity,
            slots: buckets,
            overflow,
        },
        K::ApproxGradient | K::CircularApprox => return None,
    })
}
