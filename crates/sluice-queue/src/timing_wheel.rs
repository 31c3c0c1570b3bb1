//! `TimingWheel`: Carousel's single time-indexed queue (Algorithm 1, §3.4.1).
//!
//! A circular array of `slots` FIFO slots, each `slot_ns` wide, covering the horizon
//! `[front, front + slots)` in slot units; `front` is the slot of "now". A packet's timestamp
//! picks its slot: timestamps at or before the front slot go to the front slot (they are due),
//! timestamps beyond the horizon follow [`Overflow`] (`Clamp`: the last slot, for pacing, with
//! a brief overshoot; `Reject`: returned to the caller and counted, for hard limits). Within a
//! slot packets leave in FIFO order. Slot lists draw their nodes from one global pool of
//! pre-allocated chunks of eight references (the `store` module): no allocation per insert.
//!
//! Unlike Algorithm 1, which visits every slot between `front` and `now`, the wheel keeps a
//! [`HierBitmap`] of non-empty slots and jumps straight to the next one, searching circularly
//! from the front. That removes the cost the TAS report measured for sparse wheels (fewer than
//! ~16k flows) and gives [`RankQueue::next_deadline`] (Eiffel's `SoonestDeadline`) in
//! O(log64 slots), so a host can sleep until the next release instead of spinning.
//!
//! `front` only moves forward: [`RankQueue::advance`], and [`RankQueue::pop_due`] when nothing
//! is due, move it to `now` (never past a queued packet); [`RankQueue::pop_min`], and `pop_due`
//! when it pops, to the popped packet's slot, which may lie well before `now` (finding the
//! next packet to stop at would cost a second search per pop). A host that pushes between
//! pops calls `advance(now)` first, or a timestamp within the horizon of `now` may be beyond
//! the horizon of the front (clamped or rejected).
//!
//! | parameter | meaning | Carousel's example |
//! |---|---|---|
//! | `slot_ns` | granularity g_min: the finest gap the wheel can express | 8 us |
//! | `slots` | horizon / g_min | 500 000 (4 s) |
//! | horizon | `slots * slot_ns`: slowest rate = one packet per horizon | 4 s, 1.5 Mbit/s at 1500 B |

use crate::bitmap::HierBitmap;
use crate::error::check_capacity;
use crate::fixed::{Granularity, MAX_BUCKETS, check_buckets};
use crate::store::BucketStore;
use crate::{
    ConfigError, Entry, Handle, Overflow, PushError, QueueStats, Rank, RankQueue, StaleHandle,
    Upcoming,
};

/// Configuration of a [`TimingWheel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WheelConfig {
    /// Slot width in nanoseconds (rank units) (>= 1).
    pub slot_ns: u64,
    /// Number of slots (>= 1); the horizon is `slots * slot_ns`.
    pub slots: usize,
    /// What to do with timestamps beyond the horizon.
    pub overflow: Overflow,
    /// Most packets held at once.
    pub capacity: usize,
    /// The time the wheel starts at: its first front slot.
    pub start_ns: u64,
}

impl WheelConfig {
    /// `slots` slots of `slot_ns` from time 0, clamping, for `capacity` packets.
    pub fn new(slots: usize, slot_ns: u64, capacity: usize) -> Self {
        WheelConfig {
            slot_ns,
            slots,
            overflow: Overflow::Clamp,
            capacity,
            start_ns: 0,
        }
    }
}

/// Carousel's timing wheel. See the module note.
pub struct TimingWheel<T> {
    store: BucketStore<T>,
    occupied: HierBitmap,
    /// Absolute slot number of the front slot.
    front: u64,
    /// Its position in the circular array.
    front_pos: usize,
    slots: usize,
    granularity: Granularity,
    overflow: Overflow,
    stats: QueueStats,
}

impl<T: Copy> TimingWheel<T> {
    /// A timing wheel; errors for zero slot width, slots or capacity, or too many slots.
    pub fn new(cfg: WheelConfig) -> Result<Self, ConfigError> {
        let granularity = Granularity::new(cfg.slot_ns)?;
        check_buckets(cfg.slots, MAX_BUCKETS)?;
        check_capacity(cfg.capacity)?;
        let front = granularity.bucket(cfg.start_ns);
        Ok(TimingWheel {
            store: BucketStore::new(cfg.slots, cfg.capacity)?,
            occupied: HierBitmap::new(cfg.slots)?,
            front,
            front_pos: (front % cfg.slots as u64) as usize,
            slots: cfg.slots,
            granularity,
            overflow: cfg.overflow,
            stats: QueueStats::default(),
        })
    }

    /// The time the front slot starts at.
    pub fn front_ns(&self) -> u64 {
        self.front * self.granularity.units()
    }

    /// The horizon in nanoseconds.
    pub fn horizon_ns(&self) -> u64 {
        (self.slots as u64).saturating_mul(self.granularity.units())
    }

    /// The first non-empty slot: (array position, absolute slot).
    #[inline]
    fn first(&self) -> Option<(usize, u64)> {
        if self.store.len() == 0 {
            return None;
        }
        let pos = self.occupied.find_circular(self.front_pos)?;
        let ahead = if pos >= self.front_pos {
            pos - self.front_pos
        } else {
            pos + self.slots - self.front_pos
        };
        Some((pos, self.front + ahead as u64))
    }

    /// Move the front slot forward to `slot` (no-op if it is not ahead).
    fn move_front(&mut self, slot: u64) {
        if slot > self.front {
            let ahead = slot - self.front;
            // Usually a short step: no division.
            let step = if ahead < self.slots as u64 {
                ahead as usize
            } else {
                (ahead % self.slots as u64) as usize
            };
            let pos = self.front_pos + step;
            self.front_pos = if pos >= self.slots {
                pos - self.slots
            } else {
                pos
            };
            self.front = slot;
        }
    }

    fn take(&mut self, pos: usize, slot: u64) -> Option<Entry<T>> {
        let entry = self.store.pop_front(pos)?;
        if !self.store.is_occupied(pos) {
            self.occupied.clear(pos);
        }
        self.front = slot;
        self.front_pos = pos;
        Some(entry)
    }
}

impl<T: Copy> RankQueue<T> for TimingWheel<T> {
    #[inline]
    fn push(&mut self, rank: Rank, item: T) -> Result<Handle, PushError<T>> {
        let ahead = self.granularity.bucket(rank).saturating_sub(self.front);
        let clamped = ahead >= self.slots as u64;
        let ahead = if !clamped {
            ahead as usize
        } else {
            match self.overflow {
                Overflow::Clamp => self.slots - 1,
                Overflow::Reject => {
                    self.stats.rejected_range += 1;
                    return Err(PushError::OutOfRange { rank, item });
                }
            }
        };
        let mut pos = self.front_pos + ahead;
        if pos >= self.slots {
            pos -= self.slots;
        }
        let fresh = !self.store.is_occupied(pos);
        let handle = self.store.push_back(pos, rank, item)?;
        if fresh {
            self.occupied.set(pos);
        }
        // Counted once filed: a push refused as full was not clamped.
        self.stats.clamped += u64::from(clamped);
        Ok(handle)
    }

    #[inline]
    fn pop_min(&mut self) -> Option<Entry<T>> {
        let (pos, slot) = self.first()?;
        self.take(pos, slot)
    }

    #[inline]
    fn peek_min(&self) -> Option<Entry<T>> {
        self.store.front(self.first()?.0)
    }

    #[inline]
    fn rank_of(&self, handle: Handle) -> Option<Rank> {
        self.store.rank_of(handle)
    }

    fn remove(&mut self, handle: Handle) -> Result<Entry<T>, StaleHandle> {
        let (pos, entry) = self.store.remove(handle)?;
        if !self.store.is_occupied(pos) {
            self.occupied.clear(pos);
        }
        Ok(entry)
    }

    fn len(&self) -> usize {
        self.store.len()
    }

    fn capacity(&self) -> usize {
        self.store.capacity()
    }

    fn next_deadline(&self) -> Option<Rank> {
        Some(self.first()?.1 * self.granularity.units())
    }

    /// Carousel's Extract(now): the first packet of the first non-empty slot at or before
    /// `now`'s slot; if none is due, the front moves on to `now`.
    #[inline]
    fn pop_due(&mut self, now: Rank) -> Option<Entry<T>> {
        let now_slot = self.granularity.bucket(now);
        // Still in the front slot and it is empty: whatever is queued lies ahead, not due.
        if now_slot <= self.front && !self.store.is_occupied(self.front_pos) {
            return None;
        }
        match self.first() {
            Some((pos, slot)) if slot <= now_slot => self.take(pos, slot),
            _ => {
                self.move_front(now_slot);
                None
            }
        }
    }

    #[inline]
    fn peek_upcoming(&self) -> Option<(Entry<T>, Upcoming<'_, T>)> {
        self.store.front_and_items(self.first()?.0)
    }

    fn upcoming(&self) -> Upcoming<'_, T> {
        match self.first() {
            Some((pos, _)) => self.store.front_items(pos),
            None => Upcoming::EMPTY,
        }
    }

    /// Move the front to `now`'s slot, or to the first queued packet's slot if that comes
    /// earlier. Later pushes with timestamps before the front go to the front.
    #[inline]
    fn advance(&mut self, now: Rank) {
        let target = self.granularity.bucket(now);
        if target <= self.front {
            return; // already there (the common case: one call per push)
        }
        let target = match self.first() {
            Some((_, slot)) => target.min(slot),
            None => target,
        };
        self.move_front(target);
    }

    fn stats(&self) -> QueueStats {
        self.store.stats().with_range(&self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module note: a `pop_due` that pops leaves the front at the popped packet's slot,
    /// not at `now`; a push relative to `now` is placed right after `advance(now)` (or a
    /// `pop_due` that finds nothing due).
    #[test]
    fn a_pop_due_that_pops_leaves_the_front_at_the_packet() {
        let mut cfg = WheelConfig::new(8, 1, 16);
        cfg.overflow = Overflow::Reject;
        let mut w = TimingWheel::new(cfg).unwrap();
        w.push(2, 1u32).unwrap();
        assert_eq!(w.pop_due(100).map(|e| e.item), Some(1));
        assert_eq!(w.front_ns(), 2);
        assert!(matches!(w.push(103, 2), Err(PushError::OutOfRange { .. })));
        w.advance(100);
        assert_eq!(w.front_ns(), 100);
        w.push(103, 2).unwrap();
        assert_eq!(w.pop_due(102), None);
        assert_eq!(w.front_ns(), 102, "nothing due: the front moves to now");
        assert_eq!(w.pop_due(103).map(|e| e.item), Some(2));
    }
}
