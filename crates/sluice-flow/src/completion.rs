//! Deferred completions (Carousel §3.4.2): every packet admitted gets exactly one completion,
//! when it leaves — sent, or explicitly rejected — in whatever order packets leave.
//!
//! Carousel holds the completion signal until the shaper releases the packet; the source may
//! not send more until then, which bounds the packets a flow has in the shaper without drops.
//! Completions come out of order (a fast flow's packets overtake a slow flow's), so they are
//! tracked per packet, not per queue position: [`Completions::admit`] issues a [`Ticket`],
//! [`Completions::complete`] redeems it exactly once.
//!
//! A ticket carries the generation of its slot. Redeeming it twice, or redeeming one that was
//! never issued (a corrupt ticket), is detected, counted and refused, and changes nothing: a
//! buggy or hostile host cannot make the tracker complete a packet twice or free a slot that is
//! in use. Each tracker's generations start at a seed of its own, so a foreign ticket (another
//! tracker's) is caught and refused too, unless the 32-bit generations collide (it names a slot
//! of this tracker and the generation live in it, as a forged value may by chance); it counts
//! as unknown, or as a double if the slot has already issued its generation.
//!
//! A slot that has issued all 2^32 generations (the free list is LIFO, so under light load one
//! slot takes every packet: 2^32 packets are 71 minutes at 1 Mpps) is retired rather than start
//! over, which would make its old tickets good again; a new slot takes its place (24 bytes per
//! 2^32 packets).
//!
//! The per-flow count of packets in flight implements a TSQ-like limit: with the default of
//! two, a flow may have two packets between admission and completion, and must wait for a
//! completion before it sends a third.

use crate::Slots;
use std::sync::atomic::{AtomicU32, Ordering};

/// Default packets a flow may have in flight (TSQ, zD §4.1).
pub const DEFAULT_INFLIGHT_LIMIT: u32 = 2;

/// Redeems one admitted packet's completion. Eight bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    index: u32,
    generation: u32,
}

impl Ticket {
    /// The raw parts, for hosts that must pass a ticket through foreign code (a descriptor
    /// field, a wire format).
    pub fn to_raw(self) -> u64 {
        u64::from(self.index) << 32 | u64::from(self.generation)
    }

    /// A ticket from its raw parts. Any value is accepted here; `complete` judges it.
    pub fn from_raw(raw: u64) -> Ticket {
        Ticket {
            index: (raw >> 32) as u32,
            generation: raw as u32,
        }
    }
}

/// How a packet left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Transmitted.
    Sent,
    /// Refused after admission (e.g. the scheduler rejected it); `code` says why.
    Rejected {
        /// A reason code the host defines.
        code: u8,
    },
}

/// A delivered completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The host's packet token given at admission.
    pub token: u64,
    /// The flow (source) it belonged to.
    pub flow: u32,
    /// How it left.
    pub outcome: Outcome,
    /// Packets the flow still has in flight after this one.
    pub inflight: u32,
}

/// Why a completion was refused. Each is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompletionError {
    /// The packet was already completed (or, for another tracker's ticket, the slot it names
    /// has already issued its generation).
    #[error("double completion")]
    Double,
    /// No packet was ever admitted with this ticket (by this tracker).
    #[error("completion for a packet never admitted")]
    Unknown,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletionStats {
    /// Packets admitted.
    pub admitted: u64,
    /// Completions delivered with `Sent`.
    pub sent: u64,
    /// Completions delivered with `Rejected`.
    pub rejected: u64,
    /// Refused: already completed.
    pub double: u64,
    /// Refused: never admitted.
    pub unknown: u64,
    /// Admissions refused because the tracker was full.
    pub full: u64,
    /// Admissions refused because the flow id is beyond the tracker's flows.
    pub unknown_flow: u64,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    token: u64,
    flow: u32,
    generation: u32,
    live: bool,
    /// Every generation has been issued: the slot is never used again.
    retired: bool,
}

/// A generation to start a new tracker's slots from, different for each tracker made, so that
/// a ticket of one tracker names a generation another has not issued (unless their 32-bit
/// generations happen to meet), as sluice-queue does for its handles.
fn next_seed() -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(1);
    // Spread consecutive trackers far apart in generation space (golden-ratio stride).
    COUNTER
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9)
}

/// The tracker; see the module note. Capacity and flows are fixed at construction.
#[derive(Debug)]
pub struct Completions {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slots retired (neither free nor in flight).
    retired: usize,
    /// The generation every slot starts at (see [`next_seed`]).
    seed: u32,
    inflight: Vec<u32>,
    capacity: usize,
    limit: u32,
    stats: CompletionStats,
}

impl Completions {
    /// A tracker for `capacity` packets in flight over `flows` flow ids, each limited to
    /// `limit` packets in flight.
    pub fn new(capacity: usize, flows: usize, limit: u32) -> Self {
        Completions {
            slots: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
            retired: 0,
            seed: next_seed(),
            inflight: vec![0; flows],
            capacity,
            limit,
            stats: CompletionStats::default(),
        }
    }

    /// Packets in flight.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len() - self.retired
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Packets `flow` has in flight.
    pub fn inflight(&self, flow: u32) -> u32 {
        self.inflight.get(flow as usize).copied().unwrap_or(0)
    }

    /// Start loading `flow`'s in-flight counter into the cache ahead of use (a prefetch hint,
    /// see [`crate::prefetch`]). Out-of-range ids are ignored.
    #[inline]
    pub fn prefetch(&self, flow: u32) {
        if let Some(n) = self.inflight.get(flow as usize) {
            crate::prefetch(n);
        }
    }

    /// Whether `flow` may send another packet under the per-flow limit.
    pub fn may_send(&self, flow: u32) -> bool {
        self.inflight(flow) < self.limit
    }

    /// The per-flow limit.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Counters.
    pub fn stats(&self) -> CompletionStats {
        self.stats
    }

    /// Admit packet `token` of `flow`: a ticket for its completion, or `None` if the tracker is
    /// full or `flow` is out of range (counted). The per-flow limit is the caller's to check
    /// ([`Completions::may_send`]); admitting beyond it is allowed (a resumed flow's second
    /// packet, zD §4.1).
    pub fn admit(&mut self, flow: u32, token: u64) -> Option<Ticket> {
        let mut inflight = std::mem::take(&mut self.inflight);
        let r = self.admit_in(&mut inflight[..], flow, token);
        self.inflight = inflight;
        r
    }

    /// A tracker whose per-flow counters live elsewhere (the `_in` methods take them).
    pub(crate) fn detached(capacity: usize, limit: u32) -> Self {
        Completions::new(capacity, 0, limit)
    }

    /// Packets `flow` has in flight, counters in `ss`.
    #[inline]
    pub(crate) fn inflight_in<S: Slots<u32> + ?Sized>(ss: &S, flow: u32) -> u32 {
        ss.slot(flow).copied().unwrap_or(0)
    }

    #[inline]
    pub(crate) fn admit_in<S: Slots<u32> + ?Sized>(
        &mut self,
        ss: &mut S,
        flow: u32,
        token: u64,
    ) -> Option<Ticket> {
        if flow as usize >= ss.count() {
            self.stats.unknown_flow += 1;
            return None;
        }
        if self.len() == self.capacity {
            self.stats.full += 1;
            return None;
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                // Tickets name slots by 32 bits (beyond the capacity only after 2^64 packets,
                // one slot retired every 2^32).
                let Ok(i) = u32::try_from(self.slots.len()) else {
                    self.stats.full += 1;
                    return None;
                };
                self.slots.push(Slot {
                    token: 0,
                    flow: 0,
                    generation: self.seed,
                    live: false,
                    retired: false,
                });
                i
            }
        };
        let s = &mut self.slots[index as usize];
        s.token = token;
        s.flow = flow;
        s.live = true;
        *ss.slot_mut(flow).expect("checked above") += 1;
        self.stats.admitted += 1;
        Some(Ticket {
            index,
            generation: s.generation,
        })
    }

    /// Redeem `ticket`: the packet left with `outcome`. Exactly once per admitted packet.
    pub fn complete(
        &mut self,
        ticket: Ticket,
        outcome: Outcome,
    ) -> Result<Completion, CompletionError> {
        let mut inflight = std::mem::take(&mut self.inflight);
        let r = self.complete_in(&mut inflight[..], ticket, outcome);
        self.inflight = inflight;
        r
    }

    #[inline]
    pub(crate) fn complete_in<S: Slots<u32> + ?Sized>(
        &mut self,
        ss: &mut S,
        ticket: Ticket,
        outcome: Outcome,
    ) -> Result<Completion, CompletionError> {
        let Some(s) = self.slots.get_mut(ticket.index as usize) else {
            self.stats.unknown += 1;
            return Err(CompletionError::Unknown);
        };
        if !s.live || s.generation != ticket.generation {
            // Older generations of this slot were completed; the slot's own one is live, or,
            // once that was completed, the next one, not issued yet; newer ones never were.
            // A retired slot issued and completed them all.
            let age = |g: u32| g.wrapping_sub(self.seed);
            if s.retired || age(ticket.generation) < age(s.generation) {
                self.stats.double += 1;
                return Err(CompletionError::Double);
            }
            self.stats.unknown += 1;
            return Err(CompletionError::Unknown);
        }
        s.live = false;
        s.generation = s.generation.wrapping_add(1);
        let (token, flow) = (s.token, s.flow);
        if s.generation == self.seed {
            // Every generation has been issued (2^32 packets): reused, the slot would make its
            // first ticket, long redeemed, good again. Retired, it costs its 24 bytes.
            s.retired = true;
            self.retired += 1;
        } else {
            self.free.push(ticket.index);
        }
        // Slots only ever hold flows admitted in range.
        let n = ss.slot_mut(flow).expect("admitted flows are in range");
        *n -= 1;
        match outcome {
            Outcome::Sent => self.stats.sent += 1,
            Outcome::Rejected { .. } => self.stats.rejected += 1,
        }
        Ok(Completion {
            token,
            flow,
            outcome,
            inflight: *n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn out_of_order_exactly_once() {
        let mut c = Completions::new(8, 4, 2);
        let a = c.admit(0, 10).unwrap();
        let b = c.admit(1, 11).unwrap();
        let d = c.admit(0, 12).unwrap();
        assert!(!c.may_send(0) && c.may_send(1));
        assert_eq!(c.complete(d, Outcome::Sent).unwrap().token, 12);
        assert_eq!(
            c.complete(b, Outcome::Rejected { code: 3 }).unwrap().flow,
            1
        );
        assert_eq!(c.complete(d, Outcome::Sent), Err(CompletionError::Double));
        let done = c.complete(a, Outcome::Sent).unwrap();
        assert_eq!((done.token, done.inflight), (10, 0));
        assert!(c.is_empty());
        let st = c.stats();
        assert_eq!((st.admitted, st.sent, st.rejected, st.double), (3, 2, 1, 1));
    }

    #[test]
    fn unknown_and_stale_tickets_change_nothing() {
        let mut c = Completions::new(4, 2, 2);
        let t = c.admit(0, 1).unwrap();
        assert_eq!(
            c.complete(Ticket::from_raw(99 << 32), Outcome::Sent),
            Err(CompletionError::Unknown)
        );
        assert_eq!(
            c.complete(Ticket::from_raw(t.to_raw() + 1), Outcome::Sent),
            Err(CompletionError::Unknown)
        );
        assert_eq!(c.len(), 1);
        c.complete(t, Outcome::Sent).unwrap();
        // The slot is reused: the old ticket stays a double, the new one is good.
        let t2 = c.admit(1, 2).unwrap();
        assert_eq!(t2.index, t.index);
        assert_eq!(c.complete(t, Outcome::Sent), Err(CompletionError::Double));
        assert_eq!(c.complete(t2, Outcome::Sent).unwrap().token, 2);
        assert_eq!(c.stats().unknown, 2);
        assert_eq!(c.stats().double, 1);
    }

    #[test]
    fn a_never_issued_ticket_is_unknown_not_double() {
        // Completing a packet moves its slot to the next generation, not issued yet: a ticket
        // naming it was never admitted (it used to count as a double).
        let mut c = Completions::new(4, 2, 2);
        let t = c.admit(0, 7).unwrap();
        c.complete(t, Outcome::Sent).unwrap();
        let never_issued = Ticket::from_raw(t.to_raw() + 1);
        assert_eq!(
            c.complete(never_issued, Outcome::Sent),
            Err(CompletionError::Unknown)
        );
        assert_eq!(c.complete(t, Outcome::Sent), Err(CompletionError::Double));
        assert_eq!((c.stats().double, c.stats().unknown), (1, 1));
        assert!(c.is_empty());
    }

    #[test]
    fn another_trackers_tickets_are_refused_as_unknown() {
        // Two trackers made alike: the first ticket of each used to be slot 0, generation 0.
        let mut a = Completions::new(4, 2, 2);
        let mut b = Completions::new(4, 2, 2);
        let ta = a.admit(0, 1).unwrap();
        let tb = b.admit(0, 2).unwrap();
        assert_eq!(a.complete(tb, Outcome::Sent), Err(CompletionError::Unknown));
        assert_eq!(b.complete(ta, Outcome::Sent), Err(CompletionError::Unknown));
        for c in [&a, &b] {
            assert_eq!((c.len(), c.stats().unknown, c.stats().double), (1, 1, 0));
        }
        assert_eq!(a.complete(ta, Outcome::Sent).unwrap().token, 1);
        assert_eq!(b.complete(tb, Outcome::Sent).unwrap().token, 2);
    }

    /// Move free slot `index` on to where `uses_left` more packets use up its generations (as
    /// if it had taken 2^32 - `uses_left` packets since the tracker was made).
    fn near_its_last_generation(c: &mut Completions, index: usize, uses_left: u32) {
        assert!(!c.slots[index].live);
        c.slots[index].generation = c.seed.wrapping_sub(uses_left);
    }

    #[test]
    fn a_redeemed_ticket_stays_refused_when_its_slot_has_used_every_generation() {
        // Under light load the free list hands one slot every packet; after 2^32 packets its
        // 32-bit generation came back to its first, and the first ticket completed the live
        // packet then in the slot (whose own ticket was then refused as a double).
        let mut c = Completions::new(1, 1, 2);
        let first = c.admit(0, 1).unwrap();
        c.complete(first, Outcome::Sent).unwrap();
        near_its_last_generation(&mut c, 0, 1);
        let last = c.admit(0, 2).unwrap();
        c.complete(last, Outcome::Sent).unwrap();
        let t = c.admit(0, 3).expect("room for one packet");
        for stale in [first, last] {
            assert_eq!(
                c.complete(stale, Outcome::Sent),
                Err(CompletionError::Double)
            );
        }
        assert_ne!(
            t.index, first.index,
            "a used-up slot is not handed out again"
        );
        assert!(c.admit(0, 4).is_none(), "still one packet at most");
        assert_eq!(c.len(), 1);
        assert_eq!(c.complete(t, Outcome::Sent).unwrap().token, 3);
        assert!(c.is_empty());
        assert_eq!((c.stats().double, c.stats().full), (2, 1));
    }

    #[test]
    fn full_and_out_of_range_flows_are_refused() {
        let mut c = Completions::new(1, 1, 2);
        assert!(c.admit(5, 0).is_none());
        assert!(c.admit(0, 0).is_some());
        assert!(c.admit(0, 1).is_none());
        assert_eq!((c.stats().full, c.stats().unknown_flow), (1, 1));
    }

    proptest! {
        /// Any interleaving of admissions and completions, genuine, repeated or forged: every
        /// admitted token is completed exactly once and the counts add up.
        #[test]
        fn every_admitted_packet_completes_once(ops in prop::collection::vec((any::<u8>(), any::<u64>()), 1..400)) {
            let mut c = Completions::new(16, 4, 2);
            let mut live: Vec<(Ticket, u64)> = Vec::new();
            let mut done: Vec<Ticket> = Vec::new();
            let mut completed = std::collections::HashSet::new();
            let mut token = 0u64;
            for (op, x) in ops {
                match op % 4 {
                    0 | 1 => {
                        if let Some(t) = c.admit((x % 4) as u32, token) {
                            live.push((t, token));
                        }
                        token += 1;
                    }
                    2 if !live.is_empty() => {
                        let (t, tok) = live.swap_remove(x as usize % live.len());
                        let got = c.complete(t, Outcome::Sent).unwrap();
                        prop_assert_eq!(got.token, tok);
                        prop_assert!(completed.insert(tok));
                        done.push(t);
                    }
                    _ => {
                        // Any value, a redeemed ticket, or the generation after one (issued
                        // later, or not yet).
                        let forged = match (done.is_empty(), x % 3) {
                            (true, _) | (_, 0) => Ticket::from_raw(x),
                            (_, 1) => done[x as usize % done.len()],
                            _ => Ticket::from_raw(done[x as usize % done.len()].to_raw() + 1),
                        };
                        let before = c.len();
                        match c.complete(forged, Outcome::Sent) {
                            Ok(got) => {
                                // A forged value can only succeed by naming a live ticket exactly.
                                let pos = live.iter().position(|(t, _)| *t == forged).expect("only live tickets complete");
                                let (_, tok) = live.swap_remove(pos);
                                prop_assert_eq!(got.token, tok);
                                prop_assert!(completed.insert(tok));
                                done.push(forged);
                            }
                            Err(e) => {
                                prop_assert_eq!(c.len(), before);
                                // A double is a ticket issued and completed; anything else
                                // was never issued.
                                let issued = done.contains(&forged);
                                let double = e == CompletionError::Double;
                                prop_assert_eq!(double, issued, "{:?} {:?}", forged, e);
                            }
                        }
                    }
                }
                prop_assert_eq!(c.len(), live.len());
            }
        }
    }
}
