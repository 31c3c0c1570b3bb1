//! `BTreeQueue`: std's `BTreeMap` keyed by (rank, arrival sequence), the stand-in for the
//! red-black tree Linux fq keeps its flows in. O(log n) push, pop and remove; it allocates as
//! the tree grows and shrinks, as an rb-tree of kernel objects would not, so it is a baseline
//! for ordering cost only.

use crate::error::check_capacity;
use crate::slab::Slab;
use crate::{ConfigError, Entry, Handle, PushError, QueueStats, Rank, RankQueue, StaleHandle};
use std::collections::BTreeMap;

/// `BTreeMap` baseline. See the module note.
pub struct BTreeQueue<T> {
    tree: BTreeMap<(Rank, u64), (T, u32)>,
    /// Slot -> the tree key, for `remove`.
    slab: Slab<(Rank, u64)>,
    seq: u64,
    stats: QueueStats,
}

impl<T: Copy> BTreeQueue<T> {
    /// An empty tree for up to `capacity` items.
    pub fn new(capacity: usize) -> Result<Self, ConfigError> {
        check_capacity(capacity)?;
        Ok(BTreeQueue {
            tree: BTreeMap::new(),
            slab: Slab::new(capacity)?,
            seq: 0,
            stats: QueueStats::default(),
        })
    }
}

impl<T: Copy> RankQueue<T> for BTreeQueue<T> {
    fn push(&mut self, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        let Some(handle) = self.slab.insert((rank, self.seq)) else {
            self.stats.rejected_full += 1;
            return Err(PushError::Full { rank, item });
        };
        self.tree.insert((rank, self.seq), (item, handle.index()));
        self.seq += 1;
        self.stats.pushed += 1;
        Ok(handle)
    }

    fn pop_min(&mut self) -> Option<Entry<T>> {
        let ((rank, _), (item, slot)) = self.tree.pop_first()?;
        self.slab.take_at(slot);
        self.stats.popped += 1;
        Some(Entry { rank, item })
    }

    fn peek_min(&self) -> Option<Entry<T>> {
        let (&(rank, _), &(item, _)) = self.tree.first_key_value()?;
        Some(Entry { rank, item })
    }

    fn rank_of(&self, handle: Handle) -> Option<Rank> {
        self.slab.get(handle).map(|(rank, _)| rank)
    }

    fn remove(&mut self, handle: Handle) -> Result<Entry<T>, StaleHandle> {
        let Some(key) = self.slab.take(handle) else {
            self.stats.stale_handles += 1;
            return Err(StaleHandle);
        };
        let (item, _) = self.tree.remove(&key).ok_or(StaleHandle)?;
        self.stats.removed += 1;
        Ok(Entry { rank: key.0, item })
    }

    fn len(&self) -> usize {
        self.slab.len()
    }

    fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    fn next_deadline(&self) -> Option<Rank> {
        self.tree.first_key_value().map(|(&(rank, _), _)| rank)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }
}
