//! The bounded flow table: flow keys to dense ids, per-flow state, reclaim on demand.
//!
//! A flow exists while it has packets in the scheduler, and stays after it empties for as long
//! as nothing needs its slot: its gate's last timestamp and its fair-queuing tags must outlive
//! short idle gaps (a TCP flow under TSQ empties after every packet; forgetting its pacing
//! state then would let it burst). Emptied flows wait on an idle list, at first in the order
//! they emptied; when the table is full, a new flow takes the slot of the first on the list
//! (O(1)), unless that flow is still paced (its gate has not gathered its whole burst again:
//! a new gate would start with it) or still owes its fair leaf service it had ahead of its
//! share while the leaf holds packets, whose service pays the debt (as Linux fq keeps a flow
//! with negative credit; once the leaf holds none nothing would pay it, and a table whose
//! leaves went idle must not turn new flows away for ever). Such a flow goes to the back of
//! the idle list and the next is tried, [`RECLAIM_TRIES`] at most; if all those whose gates
//! are whole owe, the first of them goes all the same (a debt is fairness, a refusal a lost
//! packet). A table whose flows all have packets, or whose first idle flows are all still
//! paced, is full: the enqueue is rejected and counted.
//!
//! Lookups go through a [`FlowIndex`] reserved at construction (one miss per lookup), so the
//! table never allocates after it is built.

use crate::flow_index::FlowIndex;
use crate::gate::Gate;
use crate::packet::{FlowId, Meta};
use crate::policy::Tags;
use sluice_queue::Handle;

pub(crate) const NIL: u32 = u32::MAX;

/// Idle flows a new flow tries before the table counts as full ([`FlowTable::get_or_insert`]).
pub(crate) const RECLAIM_TRIES: usize = 4;

/// A member's place in its node: how many packets it has available, where it sits in the
/// node's queue(s), and its ranking tags.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Member {
    pub available: u32,
    pub handles: [Option<Handle>; 2],
    pub tags: Tags,
}

/// A queued packet: its record and its link in its flow's FIFO. One cache line each.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(crate) struct Rec {
    pub meta: Meta,
    pub next: u32,
}

impl Rec {
    /// A record for `meta`, last in its FIFO.
    pub fn new(meta: Meta) -> Self {
        Rec { meta, next: NIL }
    }
}

/// Packet records a flow keeps in its own lines ([`Flow::slots`]).
pub(crate) const INLINE_SLOTS: u32 = 2;
// Packet ids keep one bit for the slot.
const _: () = assert!(INLINE_SLOTS == 2);

/// A packet id with this bit set names slot `id & 1` of flow `(id & !INLINE) >> 1`; without
/// it, a record of the scheduler's packet slab. Flow ids stay below 2^24 (`MAX_PACKETS`).
pub(crate) const INLINE: u32 = 1 << 31;

/// The packet id of slot `k` of flow `flow`.
#[inline]
pub(crate) fn inline_id(flow: FlowId, k: u32) -> u32 {
    INLINE | flow << 1 | k
}

/// The flow whose slot the `INLINE` packet id `pkt` names.
#[inline]
pub(crate) fn inline_flow(pkt: u32) -> usize {
    ((pkt & !INLINE) >> 1) as usize
}

/// The record of packet `pkt`: in `slots`, its flow's, if the id has [`INLINE`], else in `slab`.
#[inline]
pub(crate) fn record<'a>(slots: &'a [Rec], slab: &'a [Rec], pkt: u32) -> &'a Rec {
    if pkt & INLINE != 0 {
        &slots[(pkt & 1) as usize]
    } else {
        &slab[pkt as usize]
    }
}

/// One flow: four cache lines, aligned to 128 bytes. The first holds what every packet
/// touches at enqueue and dequeue (its FIFO, its count, its place in its leaf); the second its
/// gate and how many of its packets are past it, its leaf and what dequeue reports (key) or
/// emptying touches (the idle list); the third
/// and fourth the records of up to two of its queued packets. Admission in `sluice-flow` (and
/// TCP Small Queues in a host) keeps about two packets per flow in the scheduler, so a flow
/// and its packets usually share one page: with a million flows, one page walk instead of
/// three per visit (`sluice bench sched`, fq_pacing). Further packets go to the slab. The
/// scheduler's look-aheads load the first two lines of the flows they name.
#[derive(Clone, Debug)]
#[repr(C, align(128))]
pub(crate) struct Flow {
    /// FIFO of its packets, linked through the packet records: all of them at a per-member
    /// leaf; at a per-packet leaf only those waiting at its gate.
    pub head: u32,
    pub tail: u32,
    /// The first packet of the FIFO still waiting at the gate (`NIL`: none), and those after
    /// it behind it. It is in the shaper (as this flow) when `parked`, the gate's packet in
    /// flight; otherwise it waits for one of the flow's packets past the gate to leave.
    pub gate_next: u32,
    /// Packets of this flow anywhere in the scheduler.
    pub queued: u32,
    pub member: Member,
    /// Pacing or limit gate, if its leaf or its packets ask for one.
    pub gate: Option<Gate>,
    pub key: u64,
    pub leaf: u16,
    /// Bit k set: `slots[k]` holds a queued packet.
    pub slots_used: u8,
    /// `gate_next` is in the shaper.
    pub parked: bool,
    /// Packets past the gate (at the leaf or above) that have not left yet (`PAST_GATE` in
    /// the tree bounds them).
    pub passed: u32,
    /// Idle list links (valid while `queued == 0`).
    idle_prev: u32,
    idle_next: u32,
    /// Records of queued packets (see [`INLINE`]).
    pub slots: [Rec; INLINE_SLOTS as usize],
}

const _: () = assert!(std::mem::size_of::<Flow>() == 256);
const _: () = assert!(std::mem::offset_of!(Flow, gate) == 64);
const _: () = assert!(std::mem::offset_of!(Flow, slots) == 128);

impl Flow {
    /// Take a free slot for a packet record of this flow (`id` is the flow's): its packet id,
    /// or `None` when both hold packets.
    #[inline]
    pub fn take_slot(&mut self, id: FlowId, rec: Rec) -> Option<u32> {
        let k = (!self.slots_used).trailing_zeros();
        if k >= INLINE_SLOTS {
            return None;
        }
        self.slots[k as usize] = rec;
        self.slots_used |= 1 << k;
        Some(inline_id(id, k))
    }

    /// The record of packet `pkt`, one of this flow's, in its slots or in `slab`.
    #[inline]
    pub fn rec<'a>(&'a self, slab: &'a [Rec], pkt: u32) -> &'a Rec {
        record(&self.slots, slab, pkt)
    }

    /// [`Flow::rec`], to change.
    #[inline]
    pub fn rec_mut<'a>(&'a mut self, slab: &'a mut [Rec], pkt: u32) -> &'a mut Rec {
        if pkt & INLINE != 0 {
            &mut self.slots[(pkt & 1) as usize]
        } else {
            &mut slab[pkt as usize]
        }
    }
}

/// The record of any packet `pkt`, or `None` for an id out of range.
#[inline]
pub(crate) fn rec_of<'a>(flows: &'a [Flow], slab: &'a [Rec], pkt: u32) -> Option<&'a Rec> {
    if pkt & INLINE != 0 {
        let f = flows.get(inline_flow(pkt))?;
        Some(&f.slots[(pkt & 1) as usize])
    } else {
        slab.get(pkt as usize)
    }
}

/// See the module note.
pub(crate) struct FlowTable {
    index: FlowIndex,
    pub flows: Vec<Flow>,
    idle_head: u32,
    idle_tail: u32,
    capacity: usize,
    /// Flows reclaimed to make room.
    pub reclaimed: u64,
}

impl FlowTable {
    /// A table of `capacity` flows, or an error if that much memory cannot be reserved.
    pub fn new(capacity: usize) -> Result<Self, std::collections::TryReserveError> {
        let index = FlowIndex::new(capacity)?;
        let mut flows = Vec::new();
        flows.try_reserve_exact(capacity)?;
        Ok(FlowTable {
            index,
            flows,
            idle_head: NIL,
            idle_tail: NIL,
            capacity,
            reclaimed: 0,
        })
    }

    /// Flows in the table (active and idle).
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The flow for (key, leaf), created if needed with `gate`. `None` when the table is full of
    /// active flows, or the first idle flows it tries ([`FlowTable::reclaimable`]) are all
    /// still paced at `now`, their gates not yet whole again. (Reclaimed, a paced flow's state
    /// was lost: a flow sharing a one-slot table with another sent at 500 times its rate;
    /// reclaimed as soon as its next release had come, a flow with a 15 000 B burst at 10
    /// Mbit/s got a fresh burst each time and sent at 110.) An idle flow that `owes` its policy
    /// service it had ahead of its share goes only if no other tried can (reclaimed, its debt
    /// is forgotten: an fq flow that sent a 65 000 B frame came back first as a new flow
    /// instead of sitting out the 21 rounds it owed).
    pub fn get_or_insert(
        &mut self,
        key: u64,
        leaf: u16,
        hint: Option<FlowId>,
        now: u64,
        gate: impl FnOnce() -> Option<Gate>,
        owes: impl Fn(&Flow) -> bool,
    ) -> Option<FlowId> {
        if let Some(id) = self.hinted(key, leaf, hint) {
            if self.flows[id as usize].queued == 0 {
                self.unlink_idle(id);
            }
            return Some(id);
        }
        let h = self.index.hash(key, leaf);
        if let Some(id) = self.find_hashed(h, key, leaf) {
            if self.flows[id as usize].queued == 0 {
                self.unlink_idle(id);
            }
            return Some(id);
        }
        let fresh = Flow {
            key,
            leaf,
            head: NIL,
            tail: NIL,
            queued: 0,
            member: Member::default(),
            gate: gate(),
            gate_next: NIL,
            slots_used: 0,
            parked: false,
            passed: 0,
            idle_prev: NIL,
            idle_next: NIL,
            slots: [Rec::new(Meta::default()); INLINE_SLOTS as usize],
        };
        let id = if self.flows.len() < self.capacity {
            self.flows.push(fresh);
            (self.flows.len() - 1) as FlowId
        } else {
            let id = self.reclaimable(now, owes)?;
            self.unlink_idle(id);
            let old = &self.flows[id as usize];
            let h_old = self.index.hash(old.key, old.leaf);
            self.index.remove(h_old, id);
            self.flows[id as usize] = fresh;
            self.reclaimed += 1;
            id
        };
        self.index.insert(h, id);
        Some(id)
    }

    /// The idle flow whose slot a new flow may take: the first on the idle list whose gate has
    /// gathered its whole burst again and that `owes` nothing (see
    /// [`FlowTable::get_or_insert`]). One that may not go goes to the back of the list and the
    /// next is tried, up to [`RECLAIM_TRIES`] of them, so that one slow flow at the front does
    /// not turn every new flow away while others behind it could go, at O(1) per new flow.
    /// If every one tried whose gate is whole owes, the first of them goes, debt and all: a
    /// debt is a matter of fairness (a packet or so), a refusal a lost packet. A gate not
    /// whole is a rate limit, and is never given up.
    fn reclaimable(&mut self, now: u64, owes: impl Fn(&Flow) -> bool) -> Option<FlowId> {
        let mut indebted = None;
        for _ in 0..RECLAIM_TRIES {
            let id = self.idle_head;
            if id == NIL {
                break;
            }
            let f = &self.flows[id as usize];
            if f.gate.is_none_or(|g| g.full(now)) {
                if !owes(f) {
                    return Some(id);
                }
                indebted.get_or_insert(id);
            }
            if id == self.idle_tail {
                break;
            }
            self.unlink_idle(id);
            self.emptied(id);
        }
        indebted
    }

    /// The flow's last packet left: put it on the idle list.
    pub fn emptied(&mut self, id: FlowId) {
        let f = &mut self.flows[id as usize];
        f.idle_prev = self.idle_tail;
        f.idle_next = NIL;
        if self.idle_tail == NIL {
            self.idle_head = id;
        } else {
            self.flows[self.idle_tail as usize].idle_next = id;
        }
        self.idle_tail = id;
    }

    fn unlink_idle(&mut self, id: FlowId) {
        let (prev, next) = {
            let f = &self.flows[id as usize];
            (f.idle_prev, f.idle_next)
        };
        if prev == NIL {
            self.idle_head = next;
        } else {
            self.flows[prev as usize].idle_next = next;
        }
        if next == NIL {
            self.idle_tail = prev;
        } else {
            self.flows[next as usize].idle_prev = prev;
        }
    }

    /// Verify the idle list and the index: the idle list holds exactly the flows without
    /// packets, and every flow is found by its key and leaf; for tests. O(flows).
    pub fn check(&self) {
        let (mut n, mut prev, mut cur) = (0usize, NIL, self.idle_head);
        while cur != NIL {
            assert!(n < self.flows.len(), "the idle list loops");
            let f = &self.flows[cur as usize];
            assert_eq!(f.queued, 0, "flow {cur} is idle with packets");
            assert_eq!(f.idle_prev, prev, "flow {cur}: its idle link back");
            (n, prev, cur) = (n + 1, cur, f.idle_next);
        }
        assert_eq!(self.idle_tail, prev, "the idle list's tail");
        let idle = self.flows.iter().filter(|f| f.queued == 0).count();
        assert_eq!(n, idle, "flows without packets against the idle list");
        for (id, f) in self.flows.iter().enumerate() {
            assert_eq!(
                self.find(f.key, f.leaf),
                Some(id as FlowId),
                "flow {id} not indexed"
            );
        }
    }

    /// The id of (key, leaf), if present.
    pub fn find(&self, key: u64, leaf: u16) -> Option<FlowId> {
        self.find_hashed(self.index.hash(key, leaf), key, leaf)
    }

    /// The flow `hint` if it is `key` at `leaf` (a host's [`crate::Packet::flow_id`]).
    #[inline]
    fn hinted(&self, key: u64, leaf: u16, hint: Option<FlowId>) -> Option<FlowId> {
        let id = hint?;
        let f = self.flows.get(id as usize)?;
        (f.key == key && f.leaf == leaf).then_some(id)
    }

    /// [`FlowTable::get_or_insert`]'s flow, if it exists, without changing the table.
    pub fn peek(&self, key: u64, leaf: u16, hint: Option<FlowId>) -> Option<FlowId> {
        self.hinted(key, leaf, hint)
            .or_else(|| self.find(key, leaf))
    }

    #[inline]
    fn find_hashed(&self, h: u32, key: u64, leaf: u16) -> Option<FlowId> {
        let flows = &self.flows;
        self.index.find(h, |id| {
            let f = &flows[id as usize];
            f.key == key && f.leaf == leaf
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reclaims_the_longest_idle_flow_and_never_an_active_one() {
        let mut t = FlowTable::new(2).unwrap();
        let a = t.get_or_insert(1, 0, None, 0, || None, |_| false).unwrap();
        let b = t.get_or_insert(2, 0, None, 0, || None, |_| false).unwrap();
        t.flows[a as usize].queued = 1;
        t.flows[b as usize].queued = 1;
        assert_eq!(
            t.get_or_insert(3, 0, None, 0, || None, |_| false),
            None,
            "full of active flows"
        );
        t.flows[b as usize].queued = 0;
        t.emptied(b);
        t.flows[a as usize].queued = 0;
        t.emptied(a);
        // b went idle first: it is reclaimed first.
        let c = t.get_or_insert(3, 0, None, 0, || None, |_| false).unwrap();
        assert_eq!(c, b);
        assert_eq!(t.find(2, 0), None);
        assert_eq!(t.find(1, 0), Some(a));
        // An idle flow that gets a packet again leaves the idle list.
        assert_eq!(t.get_or_insert(1, 0, None, 0, || None, |_| false), Some(a));
        t.flows[a as usize].queued = 1;
        t.flows[c as usize].queued = 1;
        assert_eq!(t.get_or_insert(4, 0, None, 0, || None, |_| false), None);
        assert_eq!(t.reclaimed, 1);
    }

    #[test]
    fn a_hint_saves_the_lookup_only_when_it_names_the_flow() {
        let mut t = FlowTable::new(2).unwrap();
        let a = t.get_or_insert(1, 0, None, 0, || None, |_| false).unwrap();
        assert_eq!(
            t.get_or_insert(1, 0, Some(a), 0, || None, |_| false),
            Some(a)
        );
        // Out of range, another flow's id, another leaf: ignored, the lookup decides.
        let b = t
            .get_or_insert(2, 0, Some(99), 0, || None, |_| false)
            .unwrap();
        assert_ne!(a, b);
        assert_eq!(
            t.get_or_insert(2, 0, Some(a), 0, || None, |_| false),
            Some(b)
        );
        assert_eq!(
            t.get_or_insert(1, 1, Some(a), 0, || None, |_| false),
            None,
            "full"
        );
        // Stale: `a` was reclaimed for key 3; key 1's old id no longer names it.
        t.emptied(a);
        let c = t
            .get_or_insert(3, 0, Some(a), 0, || None, |_| false)
            .unwrap();
        assert_eq!(c, a, "the idle slot was reused");
        t.flows[c as usize].queued = 1;
        t.flows[b as usize].queued = 1;
        assert_eq!(
            t.get_or_insert(1, 0, Some(a), 0, || None, |_| false),
            None,
            "not key 3's flow"
        );
        assert_eq!(t.find(3, 0), Some(c));
    }

    #[test]
    fn same_key_in_two_leaves_is_two_flows() {
        let mut t = FlowTable::new(4).unwrap();
        let a = t.get_or_insert(7, 0, None, 0, || None, |_| false).unwrap();
        let b = t.get_or_insert(7, 1, None, 0, || None, |_| false).unwrap();
        assert_ne!(a, b);
    }
}
