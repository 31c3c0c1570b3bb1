//! Releases beyond the shaper's horizon, in the order of their times.
//!
//! The timing wheel reaches one horizon ahead of its front. A release further ahead waits
//! here instead, and the wheel holds one item for all of them, the *wake*, at the horizon's
//! end (so before the earliest of them). When the wake comes up, the
//! scheduler moves the wheel's front as far as nothing else in the wheel comes first (to
//! the earliest release here, or to `now` if earlier), files every release then within the
//! horizon at its own time, and files the wake again for the rest ([`super::Scheduler`]'s
//! `unpark_far`). A release keeps the time it was given, as every release does, whatever
//! its gate's rate does meanwhile. (A flow's packet used to have its time worked out from
//! its gate when it came up, and so followed the gate's rate changes since: lowered from 1
//! to 0.5 kbit/s, a gate let a 1500 B packet due 12 s later go at the horizon's end, 1 ms
//! after the one before.)
//!
//! (Each release used to wait in the wheel itself, at the horizon's end, and was filed
//! again from there until its time. Several due at once had to hop one horizon at a time
//! from where each was filed, so that they left in the order of their times: a host that
//! slept a day with releases at 1 bit/s waiting paid a push per release per horizon in the
//! `dequeue` that woke it. Here each release is filed in the wheel once, and the wake hops
//! only while other items in the wheel come first.)
//!
//! A binary heap, not a sluice-queue: these release times are unbounded and rare (each is a
//! packet that takes longer than the horizon at its gate's rate), so O(log n) is cheap and
//! an exact order is worth more than O(1).

use sluice_queue::Handle;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, TryReserveError};

/// Releases beyond the horizon and the wheel's wake for them; see the module note.
pub(super) struct FarReleases {
    /// (time, arrival order, shaper item): equal times leave in the order they came.
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    arrivals: u64,
    /// The wake in the wheel, if filed: its handle and time (never later than the earliest
    /// release here).
    pub wake: Option<(Handle, u64)>,
}

impl FarReleases {
    /// Room for `capacity` releases (the shaper holds one item per packet at most), so that
    /// [`FarReleases::insert`] never allocates.
    pub fn new(capacity: usize) -> Result<Self, TryReserveError> {
        let mut heap = BinaryHeap::new();
        heap.try_reserve_exact(capacity)?;
        Ok(FarReleases {
            heap,
            arrivals: 0,
            wake: None,
        })
    }

    pub fn insert(&mut self, at: u64, item: u32) {
        debug_assert!(
            self.heap.len() < self.heap.capacity(),
            "reserved for every packet"
        );
        self.heap.push(Reverse((at, self.arrivals, item)));
        self.arrivals += 1;
    }

    /// The earliest release time held.
    pub fn first(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The earliest release, `(time, item)`, if it is due by `latest`.
    pub fn pop_by(&mut self, latest: u64) -> Option<(u64, u32)> {
        if self.first()? > latest {
            return None;
        }
        self.heap.pop().map(|Reverse((at, _, item))| (at, item))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_leave_by_time_then_by_arrival() {
        let mut far = FarReleases::new(8).expect("room");
        for (at, item) in [(30, 1), (10, 2), (30, 3), (20, 4), (10, 5)] {
            far.insert(at, item);
        }
        assert_eq!(far.first(), Some(10));
        assert_eq!(far.pop_by(9), None);
        let mut out = Vec::new();
        while let Some(r) = far.pop_by(25) {
            out.push(r);
        }
        assert_eq!(out, [(10, 2), (10, 5), (20, 4)]);
        assert_eq!(far.len(), 2);
        assert_eq!(far.pop_by(u64::MAX), Some((30, 1)));
        assert_eq!(far.pop_by(u64::MAX), Some((30, 3)));
        assert_eq!(far.first(), None);
    }
}
