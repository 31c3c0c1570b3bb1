//! A fixed-capacity slab with generation-checked handles, for the baselines that keep their
//! items outside their ordering structure (binary heap, B-tree).

use crate::error::reserved;
use crate::{ConfigError, Handle};
use std::num::NonZeroU32;

struct Slot<V> {
    value: Option<V>,
    generation: NonZeroU32,
}

/// Values addressed by [`Handle`]; a freed slot bumps its generation so old handles go stale.
pub(crate) struct Slab<V> {
    slots: Vec<Slot<V>>,
    free: Vec<u32>,
    len: usize,
    capacity: usize,
    /// Generation of a slot's first use: per slab, so that another queue's handles are stale.
    seed: NonZeroU32,
}

impl<V: Copy> Slab<V> {
    pub(crate) fn new(capacity: usize) -> Result<Self, ConfigError> {
        Ok(Slab {
            slots: reserved(capacity, "slab slots")?,
            free: reserved(capacity, "slab free list")?,
            len: 0,
            capacity,
            seed: crate::store::next_seed(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Store `value`; `None` when full.
    pub(crate) fn insert(&mut self, value: V) -> Option<Handle> {
        if self.len == self.capacity {
            return None;
        }
        self.len += 1;
        if let Some(idx) = self.free.pop() {
            let slot = &mut self.slots[idx as usize];
            slot.value = Some(value);
            return Some(Handle::new(idx, slot.generation));
        }
        let idx = self.slots.len() as u32;
        self.slots.push(Slot {
            value: Some(value),
            generation: self.seed,
        });
        Some(Handle::new(idx, self.seed))
    }

    /// The value at slot `idx` if it is occupied (no generation check: for internal links).
    pub(crate) fn at(&self, idx: u32) -> Option<V> {
        self.slots[idx as usize].value
    }

    /// Replace the value at an occupied slot `idx` (internal link).
    pub(crate) fn set_at(&mut self, idx: u32, value: V) {
        let slot = &mut self.slots[idx as usize];
        if slot.value.is_some() {
            slot.value = Some(value);
        }
    }

    /// Take the value at slot `idx` (internal link, known occupied).
    pub(crate) fn take_at(&mut self, idx: u32) -> Option<V> {
        let slot = &mut self.slots[idx as usize];
        let value = slot.value.take()?;
        slot.generation = slot.generation.checked_add(1).unwrap_or(NonZeroU32::MIN);
        self.free.push(idx);
        self.len -= 1;
        Some(value)
    }

    /// The value behind `handle`; `None` if the handle is stale or foreign.
    pub(crate) fn get(&self, handle: Handle) -> Option<V> {
        let slot = self.slots.get(handle.index() as usize)?;
        if slot.generation != handle.generation() {
            return None;
        }
        slot.value
    }

    /// Take the value behind `handle`; `None` if the handle is stale or foreign.
    pub(crate) fn take(&mut self, handle: Handle) -> Option<V> {
        let slot = self.slots.get(handle.index() as usize)?;
        if slot.generation != handle.generation() || slot.value.is_none() {
            return None;
        }
        self.take_at(handle.index())
    }
}
