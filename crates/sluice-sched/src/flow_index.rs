//! `FlowIndex`: (flow key, leaf) to flow id in one cache miss.
//!
//! Written here rather than taken from a hash map crate because the lookup is on every
//! enqueue and, with a million flows, its misses are the cost. A general map (hashbrown) reads
//! a control byte group and then the bucket holding the key: two misses. This index is one
//! array of 8-byte slots, open addressing with linear probing, each slot holding 32 bits of the
//! hash and the flow id: a lookup reads one slot (rarely two, in the same line or the next)
//! and compares the key itself in the flow's record, which the caller reads next anyway.
//!
//! The table has at least twice as many slots as flows, so it is at most half full and probe
//! runs stay short (1.5 slots on average for a hit, by Knuth's analysis of linear probing).
//! Removal shifts later entries of the run back (no tombstones), so lookups never slow down
//! as flows come and go. A slot's home is its stored hash bits masked to the table size, so
//! shifting needs no access to the flows.
//!
//! The hash is keyed with a random seed per table: flow keys come from packet headers (the
//! daemon's are a stable hash of the 5-tuple), and without a secret an attacker could pick
//! addresses and ports whose keys share a home slot and make every lookup walk a long run.
//! Only the index's layout depends on the seed, never which flow id a key gets.

/// An empty slot.
const EMPTY: u64 = 0;

/// See the module note.
pub(crate) struct FlowIndex {
    /// `hash32 << 32 | (id + 1)`, or [`EMPTY`].
    slots: Vec<u64>,
    mask: usize,
    seed: u64,
}

impl FlowIndex {
    /// An index for up to `flows` flows (at most 2^31), or an error if the memory cannot be
    /// reserved.
    pub fn new(flows: usize) -> Result<Self, std::collections::TryReserveError> {
        let size = flows.saturating_mul(2).next_power_of_two().max(16);
        let mut slots = Vec::new();
        slots.try_reserve_exact(size)?;
        slots.resize(size, EMPTY);
        Ok(FlowIndex {
            slots,
            mask: size - 1,
            seed: random_seed(),
        })
    }

    /// The hash of (key, leaf): splitmix64's finalizer over both and the seed, so that keys
    /// differing in few bits (sequential ids from a host) spread over the whole table.
    #[inline]
    pub fn hash(&self, key: u64, leaf: u16) -> u32 {
        let mut z = key ^ self.seed ^ (u64::from(leaf) << 48);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 32) as u32
    }

    /// The id stored under `h` for which `is` holds, if any.
    #[inline]
    pub fn find(&self, h: u32, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let mut i = h as usize & self.mask;
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if (s >> 32) as u32 == h {
                let id = (s as u32).wrapping_sub(1);
                if is(id) {
                    return Some(id);
                }
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Store `id` under `h`. The caller keeps at most half the slots used (the table was
    /// sized for its flows) and never inserts a key twice.
    pub fn insert(&mut self, h: u32, id: u32) {
        let mut i = h as usize & self.mask;
        while self.slots[i] != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = (u64::from(h) << 32) | u64::from(id + 1);
    }

    /// Remove `id`, stored under `h`; false if it is not there.
    pub fn remove(&mut self, h: u32, id: u32) -> bool {
        let want = (u64::from(h) << 32) | u64::from(id + 1);
        let mut hole = h as usize & self.mask;
        loop {
            match self.slots[hole] {
                EMPTY => return false,
                s if s == want => break,
                _ => hole = (hole + 1) & self.mask,
            }
        }
        // Backward shift: an entry later in the run moves into the hole if the hole lies on
        // its probe path (between its home and where it is).
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let s = self.slots[j];
            if s == EMPTY {
                break;
            }
            let home = (s >> 32) as usize & self.mask;
            if j.wrapping_sub(home) & self.mask >= j.wrapping_sub(hole) & self.mask {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = EMPTY;
        true
    }
}

/// A secret per table, from the standard library's randomly keyed hasher.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0x5eed_u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Look `key` up the way the flow table does: the id's own key must match.
    fn find(ix: &FlowIndex, keys: &[u64], key: u64) -> Option<u32> {
        ix.find(ix.hash(key, 0), |id| keys[id as usize] == key)
    }

    #[test]
    fn colliding_hashes_stay_apart_and_survive_removal() {
        // Three keys under one hash and one under the next slot: a run of four.
        let mut ix = FlowIndex::new(8).unwrap();
        let keys = [10u64, 11, 12, 13];
        for id in 0..3 {
            ix.insert(5, id);
        }
        ix.insert(6, 3);
        let find_h = |ix: &FlowIndex, h: u32, key: u64| ix.find(h, |id| keys[id as usize] == key);
        assert_eq!(find_h(&ix, 5, 12), Some(2));
        assert_eq!(find_h(&ix, 6, 13), Some(3));
        assert!(ix.remove(5, 0));
        assert!(!ix.remove(5, 0), "already gone");
        assert_eq!(find_h(&ix, 5, 10), None);
        assert_eq!(find_h(&ix, 5, 11), Some(1));
        assert_eq!(find_h(&ix, 5, 12), Some(2));
        assert_eq!(find_h(&ix, 6, 13), Some(3), "shifted back, still found");
    }

    #[test]
    fn wraps_around_the_end_of_the_table() {
        let mut ix = FlowIndex::new(8).unwrap();
        let last = ix.mask as u32;
        let keys = [1u64, 2, 3];
        for id in 0..3 {
            ix.insert(last, id);
        }
        assert!(ix.remove(last, 0));
        for (id, &k) in keys.iter().enumerate().skip(1) {
            assert_eq!(ix.find(last, |i| keys[i as usize] == k), Some(id as u32));
        }
    }

    #[test]
    fn the_same_key_in_two_leaves_hashes_apart_and_tables_differ() {
        let (a, b) = (FlowIndex::new(8).unwrap(), FlowIndex::new(8).unwrap());
        assert_ne!(a.hash(7, 0), a.hash(7, 1));
        assert_ne!(a.hash(0, 0), a.hash(1, 0));
        // Each table has its own seed (equal hashes for 64 keys would be a 2^-2048 event).
        assert!((0..64).any(|k| a.hash(k, 0) != b.hash(k, 0)));
    }

    proptest! {
        /// Against a HashMap: random inserts and removals of keys from a small universe
        /// (so that hashes collide and runs form), at up to the full load the flow table uses.
        #[test]
        fn matches_a_hash_map(ops in prop::collection::vec((0u64..64, any::<bool>()), 1..400)) {
            const FLOWS: usize = 32;
            let mut ix = FlowIndex::new(FLOWS).unwrap();
            let mut oracle: HashMap<u64, u32> = HashMap::new();
            let mut keys = vec![u64::MAX; FLOWS];
            let mut free: Vec<u32> = (0..FLOWS as u32).rev().collect();
            for (key, insert) in ops {
                // Fold keys onto few hash values too, for long runs.
                let key = key % 48;
                match (oracle.get(&key).copied(), insert) {
                    (None, true) => {
                        if let Some(id) = free.pop() {
                            keys[id as usize] = key;
                            ix.insert(ix.hash(key, 0), id);
                            oracle.insert(key, id);
                        }
                    }
                    (Some(id), false) => {
                        prop_assert!(ix.remove(ix.hash(key, 0), id));
                        keys[id as usize] = u64::MAX;
                        free.push(id);
                        oracle.remove(&key);
                    }
                    _ => {}
                }
                for k in 0..48 {
                    prop_assert_eq!(find(&ix, &keys, k), oracle.get(&k).copied());
                }
            }
        }
    }
}
