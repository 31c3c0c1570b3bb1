//! `SkipListQueue`: a skip list ordered by (rank, arrival sequence), like the flow scheduler
//! of TAS (the userspace TCP stack whose skip list the Carousel report replaced with a timing
//! wheel). Pop takes the first node, O(1) expected; push walks down the levels, O(log n)
//! expected, with the random jumps through memory that hurt it at tens of thousands of flows
//! (TAS report, Table 1). Nodes come from a pool reserved at construction; each node carries
//! its forward links for up to `MAX_LEVEL` levels (promotion probability 1/4, enough for
//! 4^12 = 16.7M entries). `remove` searches for the node's predecessors, O(log n).

use crate::error::check_capacity;
use crate::{ConfigError, Entry, Handle, PushError, QueueStats, Rank, RankQueue, StaleHandle};
use std::num::NonZeroU32;

const MAX_LEVEL: usize = 12;
const NIL: u32 = u32::MAX;
const HEAD: u32 = 0;

#[derive(Clone, Copy)]
struct Node<T> {
    rank: Rank,
    seq: u64,
    item: T,
    generation: NonZeroU32,
    level: u8,
    live: bool,
    next: [u32; MAX_LEVEL],
}

/// TAS-style skip list baseline. See the module note.
pub struct SkipListQueue<T> {
    /// Node 0 is the head sentinel.
    nodes: Vec<Node<T>>,
    free: u32,
    len: usize,
    capacity: usize,
    seq: u64,
    rng: u64,
    stats: QueueStats,
    /// Generation of a node's first use: per queue, so that another queue's handles are stale.
    seed: NonZeroU32,
}

impl<T: Copy> SkipListQueue<T> {
    /// An empty skip list for up to `capacity` items.
    pub fn new(capacity: usize) -> Result<Self, ConfigError> {
        check_capacity(capacity)?;
        let nodes = crate::error::reserved(capacity + 1, "skip list nodes")?;
        Ok(SkipListQueue {
            nodes,
            free: NIL,
            len: 0,
            capacity,
            seq: 0,
            rng: 0x2545_F491_4F6C_DD1D,
            stats: QueueStats::default(),
            seed: crate::store::next_seed(),
        })
    }

    /// Level for a new node: each extra level with probability 1/4 (xorshift64).
    fn random_level(&mut self) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let pairs = (self.rng | 1 << 62).trailing_zeros() as usize / 2;
        (1 + pairs).min(MAX_LEVEL)
    }

    fn key(&self, idx: u32) -> (Rank, u64) {
        let n = &self.nodes[idx as usize];
        (n.rank, n.seq)
    }

    /// For each level, the last node whose key is below `key`.
    fn predecessors(&self, key: (Rank, u64)) -> [u32; MAX_LEVEL] {
        let mut update = [HEAD; MAX_LEVEL];
        let mut x = HEAD;
        for l in (0..MAX_LEVEL).rev() {
            loop {
                let nx = self.nodes[x as usize].next[l];
                if nx == NIL || self.key(nx) >= key {
                    break;
                }
                x = nx;
            }
            update[l] = x;
        }
        update
    }

    fn alloc(&mut self, node: Node<T>) -> u32 {
        if self.free != NIL {
            let idx = self.free;
            let generation = self.nodes[idx as usize].generation;
            self.free = self.nodes[idx as usize].next[0];
            self.nodes[idx as usize] = Node { generation, ..node };
            idx
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        }
    }

    fn release(&mut self, idx: u32) {
        let free = self.free;
        let n = &mut self.nodes[idx as usize];
        n.live = false;
        n.generation = n.generation.checked_add(1).unwrap_or(NonZeroU32::MIN);
        n.next[0] = free;
        self.free = idx;
        self.len -= 1;
    }
}

impl<T: Copy> RankQueue<T> for SkipListQueue<T> {
    fn push(&mut self, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        if self.len == self.capacity {
            self.stats.rejected_full += 1;
            return Err(PushError::Full { rank, item });
        }
        if self.nodes.is_empty() {
            // The head sentinel, created on first use so `new` does not need an item value.
            self.nodes.push(Node {
                rank: 0,
                seq: 0,
                item,
                generation: NonZeroU32::MIN,
                level: MAX_LEVEL as u8,
                live: false,
                next: [NIL; MAX_LEVEL],
            });
        }
        let key = (rank, self.seq);
        let update = self.predecessors(key);
        let level = self.random_level();
        let mut next = [NIL; MAX_LEVEL];
        for l in 0..level {
            next[l] = self.nodes[update[l] as usize].next[l];
        }
        let idx = self.alloc(Node {
            rank,
            seq: self.seq,
            item,
            generation: self.seed,
            level: level as u8,
            live: true,
            next,
        });
        for (l, &u) in update.iter().enumerate().take(level) {
            self.nodes[u as usize].next[l] = idx;
        }
        self.seq += 1;
        self.len += 1;
        self.stats.pushed += 1;
        Ok(Handle::new(idx, self.nodes[idx as usize].generation))
    }

    fn pop_min(&mut self) -> Option<Entry<T>> {
        let first = *self.nodes.first()?.next.first()?;
        if first == NIL {
            return None;
        }
        let node = self.nodes[first as usize];
        // The first node is the head's successor on every level it has.
        for l in 0..node.level as usize {
            self.nodes[HEAD as usize].next[l] = node.next[l];
        }
        self.release(first);
        self.stats.popped += 1;
        Some(Entry {
            rank: node.rank,
            item: node.item,
        })
    }

    fn peek_min(&self) -> Option<Entry<T>> {
        let first = self.nodes.first()?.next[0];
        let n = self.nodes.get(first as usize)?;
        Some(Entry {
            rank: n.rank,
            item: n.item,
        })
    }

    fn rank_of(&self, handle: Handle) -> Option<Rank> {
        let idx = handle.index();
        let n = self.nodes.get(idx as usize)?;
        (idx != HEAD && n.live && n.generation == handle.generation()).then_some(n.rank)
    }

    fn remove(&mut self, handle: Handle) -> Result<Entry<T>, StaleHandle> {
        let idx = handle.index();
        let valid = idx != HEAD
            && self
                .nodes
                .get(idx as usize)
                .is_some_and(|n| n.live && n.generation == handle.generation());
        if !valid {
            self.stats.stale_handles += 1;
            return Err(StaleHandle);
        }
        let node = self.nodes[idx as usize];
        let update = self.predecessors((node.rank, node.seq));
        for (l, &u) in update.iter().enumerate().take(node.level as usize) {
            debug_assert_eq!(self.nodes[u as usize].next[l], idx);
            self.nodes[u as usize].next[l] = node.next[l];
        }
        self.release(idx);
        self.stats.removed += 1;
        Ok(Entry {
            rank: node.rank,
            item: node.item,
        })
    }

    fn len(&self) -> usize {
        self.len
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn next_deadline(&self) -> Option<Rank> {
        self.peek_min().map(|e| e.rank)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }
}
