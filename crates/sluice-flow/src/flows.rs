//! One record per flow for everything a resume touches.
//!
//! Admission ([`Admission`]), the per-flow queues ([`Dpfq`]) and completions ([`Completions`])
//! each keep per-flow state: the admission source (16 B), the queue head with its inline
//! packets (32 B) and the in-flight count (4 B). Kept in three arrays, resuming a random paused
//! flow costs three cache misses once the flows outgrow the cache. [`FlowTable`] keeps the
//! three in one 64-byte record per flow (with `X`, the host's own per-flow word, in the spare
//! bytes), aligned to a cache line, so a resume costs one miss, which [`FlowTable::prefetch`]
//! starts early. The components work unchanged on these records; their own per-flow arrays
//! stay empty, so per-flow queries go through the table.

use crate::Slots;
use crate::admission::{Admission, AdmissionConfig, AdmissionError, Source, Verdict};
use crate::completion::{Completion, CompletionError, Completions, Outcome, Ticket};
use crate::dpfq::{AtBound, Dpfq, FlowQueue, RingPool};
use sluice_queue::Rank;
use std::sync::Arc;

/// One flow's state: admission, queue and in-flight count, and the host's `extra`; one cache
/// line.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
pub struct FlowRecord<X> {
    adm: Source,
    queue: FlowQueue,
    inflight: u32,
    extra: X,
}

const _: () = assert!(std::mem::size_of::<FlowRecord<()>>() == 64);
const _: () = assert!(std::mem::size_of::<FlowRecord<u64>>() == 64);

impl<X> Slots<Source> for [FlowRecord<X>] {
    #[inline(always)]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn slot(&self, i: u32) -> Option<&Source> {
        self.get(i as usize).map(|r| &r.adm)
    }
    #[inline(always)]
    fn slot_mut(&mut self, i: u32) -> Option<&mut Source> {
        self.get_mut(i as usize).map(|r| &mut r.adm)
    }
}

impl<X> Slots<FlowQueue> for [FlowRecord<X>] {
    #[inline(always)]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn slot(&self, i: u32) -> Option<&FlowQueue> {
        self.get(i as usize).map(|r| &r.queue)
    }
    #[inline(always)]
    fn slot_mut(&mut self, i: u32) -> Option<&mut FlowQueue> {
        self.get_mut(i as usize).map(|r| &mut r.queue)
    }
}

impl<X> Slots<u32> for [FlowRecord<X>] {
    #[inline(always)]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn slot(&self, i: u32) -> Option<&u32> {
        self.get(i as usize).map(|r| &r.inflight)
    }
    #[inline(always)]
    fn slot_mut(&mut self, i: u32) -> Option<&mut u32> {
        self.get_mut(i as usize).map(|r| &mut r.inflight)
    }
}

/// Admission, per-flow queues and completions over one record per flow; see the module note.
/// Each method is the component's method of the same name.
pub struct FlowTable<X = ()> {
    recs: Vec<FlowRecord<X>>,
    adm: Admission,
    queues: Dpfq,
    comp: Completions,
}

impl<X: Copy + Default> FlowTable<X> {
    /// Flows `0..cfg.sources` admitted into a buffer of `cfg.capacity` packets, queued in rings
    /// of `pool`, each with at most `inflight_limit` packets in flight (see
    /// [`Completions::may_send`]).
    pub fn new(
        cfg: AdmissionConfig,
        pool: Arc<RingPool>,
        inflight_limit: u32,
    ) -> Result<Self, AdmissionError> {
        Ok(FlowTable {
            recs: vec![FlowRecord::default(); cfg.sources],
            adm: Admission::detached(cfg)?,
            queues: Dpfq::detached(pool),
            comp: Completions::detached(cfg.capacity, inflight_limit),
            // `Source::default` is not all zeros, so the records are written once here.
        })
    }
}

impl<X> FlowTable<X> {
    /// Flow ids `0..flows()`.
    pub fn flows(&self) -> usize {
        self.recs.len()
    }

    /// The regulator: its counters and buffer state (per-flow queries go through the table).
    pub fn admission(&self) -> &Admission {
        &self.adm
    }

    /// The per-flow queues: pool, counters and packets held (per-flow queries go through the
    /// table).
    pub fn queues(&self) -> &Dpfq {
        &self.queues
    }

    /// The completion tracker: counters and packets in flight (per-flow queries go through the
    /// table).
    pub fn completions(&self) -> &Completions {
        &self.comp
    }

    /// The host's word of `flow`.
    #[inline]
    pub fn extra(&self, flow: u32) -> Option<&X> {
        self.recs.get(flow as usize).map(|r| &r.extra)
    }

    /// The host's word of `flow`, to change.
    #[inline]
    pub fn extra_mut(&mut self, flow: u32) -> Option<&mut X> {
        self.recs.get_mut(flow as usize).map(|r| &mut r.extra)
    }

    /// Start loading `flow`'s record into the cache (see [`crate::prefetch`]); out-of-range ids
    /// are ignored.
    #[inline]
    pub fn prefetch(&self, flow: u32) {
        if let Some(r) = self.recs.get(flow as usize) {
            crate::prefetch(r);
        }
    }

    /// [`Admission::upcoming`].
    #[inline]
    pub fn upcoming(&self, k: usize) -> Option<u32> {
        self.adm.upcoming_in(&self.recs[..], k)
    }

    /// [`Dpfq::push`].
    #[inline]
    pub fn push(&mut self, flow: u32, item: u32) -> Result<(), AtBound> {
        self.queues.push_in(&mut self.recs[..], flow, item)
    }

    /// [`Dpfq::peek`].
    #[inline]
    pub fn peek(&self, flow: u32) -> Option<u32> {
        self.queues.peek_in(&self.recs[..], flow)
    }

    /// [`Dpfq::pop`].
    #[inline]
    pub fn pop(&mut self, flow: u32) -> Option<u32> {
        self.queues.pop_in(&mut self.recs[..], flow)
    }

    /// [`Dpfq::len`]: packets `flow` has queued.
    #[inline]
    pub fn len(&self, flow: u32) -> usize {
        Dpfq::len_in(&self.recs[..], flow)
    }

    /// [`Dpfq::is_empty`].
    #[inline]
    pub fn is_empty(&self, flow: u32) -> bool {
        self.len(flow) == 0
    }

    /// [`Admission::offer`].
    #[inline]
    pub fn offer(&mut self, flow: u32, rank: Rank) -> Verdict {
        self.adm.offer_in(&mut self.recs[..], flow, rank)
    }

    /// [`Admission::departed`].
    #[inline]
    pub fn departed(&mut self, flow: u32) -> Option<u32> {
        self.adm.departed_in(&mut self.recs[..], flow)
    }

    /// [`Admission::idle`].
    #[inline]
    pub fn idle(&mut self, flow: u32) -> Option<u32> {
        self.adm.idle_in(&mut self.recs[..], flow)
    }

    /// Give `flow`'s id, which holds nothing, to another flow: the resume credit the old flow
    /// left is dropped (the id's queue and in-flight count are empty already).
    #[inline]
    pub(crate) fn reuse(&mut self, flow: u32) {
        Admission::reuse_in(&mut self.recs[..], flow);
    }

    /// [`Admission::is_paused`].
    #[inline]
    pub fn is_paused(&self, flow: u32) -> bool {
        Admission::is_paused_in(&self.recs[..], flow)
    }

    /// [`Admission::queued`]: packets `flow` has in the scheduled buffer.
    #[inline]
    pub fn queued(&self, flow: u32) -> u32 {
        Admission::queued_in(&self.recs[..], flow)
    }

    /// [`Completions::admit`].
    #[inline]
    pub fn admit(&mut self, flow: u32, token: u64) -> Option<Ticket> {
        self.comp.admit_in(&mut self.recs[..], flow, token)
    }

    /// [`Completions::complete`].
    #[inline]
    pub fn complete(
        &mut self,
        ticket: Ticket,
        outcome: Outcome,
    ) -> Result<Completion, CompletionError> {
        self.comp.complete_in(&mut self.recs[..], ticket, outcome)
    }

    /// [`Completions::inflight`].
    #[inline]
    pub fn inflight(&self, flow: u32) -> u32 {
        Completions::inflight_in(&self.recs[..], flow)
    }

    /// Check the counters against the records; for tests. O(flows).
    pub fn check(&self) {
        self.adm.check_in(&self.recs[..]);
        let inflight: usize = self.recs.iter().map(|r| r.inflight as usize).sum();
        assert_eq!(inflight, self.comp.len(), "in-flight counts");
        let queued: usize = self.recs.iter().map(|r| r.queue.len() as usize).sum();
        assert_eq!(queued, self.queues.packets(), "queued packets");
    }
}

impl<X> Drop for FlowTable<X> {
    /// Give every ring the flows still hold back to the pool (the queues then return their
    /// cache and budget).
    fn drop(&mut self) {
        for f in 0..self.recs.len() as u32 {
            while self.queues.pop_in(&mut self.recs[..], f).is_some() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_touches_one_record() {
        let pool = RingPool::new(16, 4, 64).unwrap();
        let mut t: FlowTable<u32> =
            FlowTable::new(AdmissionConfig::new(1, 3), pool.clone(), 2).unwrap();
        for f in 0..3 {
            t.push(f, 10 + f).unwrap();
        }
        assert_eq!(t.offer(0, 0), Verdict::Admit);
        assert_eq!(t.pop(0), Some(10));
        let tk = t.admit(0, 10).unwrap();
        assert_eq!(t.offer(1, 0), Verdict::Paused);
        assert_eq!(t.offer(2, 0), Verdict::Paused);
        assert_eq!(t.upcoming(0), Some(1));
        assert_eq!(t.upcoming(1), Some(2));
        assert_eq!(t.inflight(0), 1);
        t.check();
        assert_eq!(t.complete(tk, Outcome::Sent).unwrap().token, 10);
        assert_eq!(t.departed(0), Some(1));
        assert_eq!(t.offer(1, 0), Verdict::Admit);
        assert_eq!(t.pop(1), Some(11));
        assert!(t.is_paused(2) && !t.is_paused(1));
        assert_eq!((t.queued(1), t.len(2)), (1, 1));
        *t.extra_mut(2).unwrap() = 7;
        assert_eq!(t.extra(2), Some(&7));
        // Bad input is refused and counted, harmlessly.
        assert_eq!(t.complete(tk, Outcome::Sent), Err(CompletionError::Double));
        assert_eq!(t.departed(9), None);
        assert!(t.push(9, 0).is_err());
        t.admit(1, 11).unwrap();
        t.check();
        // A queue extended into a ring gives it back when the table goes.
        for i in 0..6 {
            t.push(2, i).unwrap();
        }
        assert!(pool.free_rings() < 16);
        drop(t);
        assert_eq!(pool.free_rings(), 16);
        assert_eq!(pool.packets(), 0);
    }
}
