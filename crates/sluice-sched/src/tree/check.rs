//! The engine's invariant and the exact bookkeeping behind it, verified in full
//! ([`Scheduler::check`]); for tests, which call it after every step. O(everything).

use super::{Mode, PAST_GATE, Scheduler};
use crate::flow::{INLINE, Member, NIL};
use sluice_queue::RankQueue;

impl Scheduler {
    /// Verify the invariant of the module note, and the exact bookkeeping behind it (each
    /// node's counters, each flow's FIFO, slots and idle link, the slabs and the shaper); for
    /// tests. O(everything).
    pub fn check(&self) {
        let mut available = vec![0u64; self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            available[i] = self.entries(i, node);
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if node.leaf || node.mode == Mode::PerMember {
                continue;
            }
            // Per-packet internal node: entries per child must be counted by the child's
            // available packets minus those parked at the child's gate (not yet given).
            let entries = node.queues[0].len() as u64;
            assert!(
                entries <= self.children_available(i, &available),
                "node {i} holds more entries than its children have"
            );
        }
        assert!(u64::from(self.ready) <= available[0]);
        self.check_bookkeeping();
    }

    /// The exact bookkeeping behind [`Scheduler::check`]: every node's counters against what
    /// it holds, every flow's FIFO, slots and place in the idle list, and the slabs and the
    /// shaper against the packets and gates that use them. O(everything).
    fn check_bookkeeping(&self) {
        // Packets available at each node that it has not yet passed up (in its gate's line or
        // in the shaper as its packet in flight).
        let mut gated = vec![0u64; self.nodes.len()];
        let mut in_flight = 0usize;
        for (i, node) in self.nodes.iter().enumerate() {
            let mut cur = node.line.head;
            let mut last = NIL;
            while cur != NIL {
                assert!(gated[i] <= self.held as u64, "node {i}: its line loops");
                gated[i] += 1;
                last = cur;
                cur = self.pending.items[cur as usize].next;
            }
            assert_eq!(node.line.tail, last, "node {i}: its line's tail");
            assert!(
                node.line.head == NIL || node.line.waiting,
                "node {i}: a line with nothing in flight"
            );
            if node.line.waiting {
                gated[i] += 1;
                in_flight += 1;
            }
        }
        let pending_used = self.pending.items.len() - self.pending.free.len();
        assert_eq!(
            pending_used as u64,
            gated.iter().sum::<u64>(),
            "held records in use against those in lines and in the shaper"
        );
        // Per node: what arrived and has not left is what it holds.
        let mut passed_up = vec![0u64; self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            let s = node.stats;
            assert!(s.arrived >= s.sent, "node {i}: {s:?}");
            let holds = s.arrived - s.sent;
            let members = self.entries(i, node);
            assert_eq!(
                members, holds,
                "node {i}: entries against its counters {s:?}"
            );
            assert!(
                gated[i] <= holds,
                "node {i}: more at its gate than it holds"
            );
            passed_up[i] = holds - gated[i];
            if node.mode == Mode::PerMember {
                let with = |m: &Member, k: usize| {
                    let h = m.handles[k]?;
                    assert!(
                        node.queues[k].rank_of(h).is_some(),
                        "node {i}: a stale handle"
                    );
                    Some(())
                };
                let mut counted = vec![0usize; node.queues.len()];
                let mut member = |m: &Member| {
                    if m.available == 0 {
                        assert!(
                            m.handles.iter().all(Option::is_none),
                            "node {i}: idle member queued"
                        );
                    } else {
                        let k = usize::from(node.dual);
                        assert!(
                            with(m, k).is_some(),
                            "node {i}: a member with packets not queued"
                        );
                    }
                    for (k, c) in counted.iter_mut().enumerate() {
                        *c += usize::from(with(m, k).is_some());
                    }
                };
                if node.leaf {
                    self.flows
                        .flows
                        .iter()
                        .filter(|f| f.leaf as usize == i)
                        .for_each(|f| member(&f.member));
                } else {
                    node.members.iter().for_each(&mut member);
                }
                for (k, q) in node.queues.iter().enumerate() {
                    assert_eq!(
                        q.len(),
                        counted[k],
                        "node {i}: queue {k} against its members"
                    );
                }
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            match node.parent {
                None => assert_eq!(
                    u64::from(self.ready),
                    passed_up[i],
                    "ready against the root's counters"
                ),
                Some(p) => {
                    let parent = &self.nodes[p as usize];
                    if parent.mode == Mode::PerMember {
                        assert_eq!(
                            u64::from(parent.members[node.slot as usize].available),
                            passed_up[i],
                            "node {i}: passed up against its place in its parent"
                        );
                    }
                }
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.leaf && node.mode == Mode::PerPacket {
                assert_eq!(
                    node.queues[0].len() as u64,
                    self.children_available(i, &passed_up),
                    "node {i}: entries against what its children passed up"
                );
            }
        }
        // Per flow: its FIFO, the packets past its gate, its slots.
        let (mut queued, mut inline, mut parked) = (0usize, 0usize, 0usize);
        let mut passed_at = vec![0u64; self.nodes.len()];
        for (id, f) in self.flows.flows.iter().enumerate() {
            let leaf = &self.nodes[f.leaf as usize];
            let per_member = leaf.mode == Mode::PerMember;
            queued += f.queued as usize;
            inline += f.slots_used.count_ones() as usize;
            parked += usize::from(f.parked);
            passed_at[f.leaf as usize] += u64::from(f.passed);
            assert!(
                f.passed <= f.queued,
                "flow {id}: more past its gate than queued"
            );
            assert!(
                f.slots_used.count_ones() <= f.queued,
                "flow {id}: slots without packets"
            );
            let (mut len, mut cur, mut last, mut gate_at) = (0u32, f.head, NIL, None);
            while cur != NIL {
                assert!(
                    len < f.queued,
                    "flow {id}: its FIFO is longer than its packets"
                );
                if cur == f.gate_next {
                    gate_at = Some(len);
                }
                if cur & INLINE != 0 {
                    assert_eq!(
                        crate::flow::inline_flow(cur),
                        id,
                        "flow {id}: another's slot"
                    );
                    assert!(
                        f.slots_used & (1 << (cur & 1)) != 0,
                        "flow {id}: a free slot"
                    );
                }
                len += 1;
                last = cur;
                cur = f.rec(&self.packets.items, cur).next;
            }
            assert_eq!(f.tail, last, "flow {id}: its FIFO's tail");
            let waiting = if per_member {
                f.queued
            } else {
                f.queued - f.passed
            };
            assert_eq!(len, waiting, "flow {id}: its FIFO's length");
            if per_member {
                assert_eq!(
                    f.member.available, f.passed,
                    "flow {id}: available at its leaf"
                );
            }
            match f.gate_next {
                NIL => assert_eq!(f.passed, f.queued, "flow {id}: packets waiting unlisted"),
                _ => {
                    let at = if per_member { f.passed } else { 0 };
                    assert_eq!(gate_at, Some(at), "flow {id}: its gate's first packet");
                }
            }
            assert!(
                !f.parked || f.gate_next != NIL,
                "flow {id}: parked with nothing"
            );
            if f.gate_next != NIL && !f.parked {
                // Waiting for one of its packets past the gate to leave.
                assert!(f.passed > 0, "flow {id}: waits at its gate for nothing");
                assert!(
                    f.gate.is_none() || f.passed >= PAST_GATE,
                    "flow {id}: waits at its gate with room past it"
                );
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if node.leaf {
                assert_eq!(
                    passed_at[i],
                    node.stats.arrived - node.stats.sent,
                    "leaf {i}"
                );
            }
        }
        assert_eq!(queued, self.held, "flows' packets against those held");
        let slab_used = self.packets.items.len() - self.packets.free.len();
        assert_eq!(
            slab_used + inline,
            self.held,
            "records in use against packets held"
        );
        let mut free = self.packets.free.clone();
        free.sort_unstable();
        free.dedup();
        assert_eq!(free.len(), self.packets.free.len(), "a record freed twice");
        let mut free = self.pending.free.clone();
        free.sort_unstable();
        free.dedup();
        assert_eq!(
            free.len(),
            self.pending.free.len(),
            "a held record freed twice"
        );
        assert_eq!(
            self.shaped(),
            parked + in_flight,
            "shaper items against parked flows and nodes' packets in flight"
        );
        self.flows.check();
    }

    /// What node `i` holds ready for its parent: its per-packet entries, or the packets its
    /// members (its flows, at a leaf) have available.
    fn entries(&self, i: usize, node: &super::Node) -> u64 {
        match node.mode {
            Mode::PerPacket => node.queues[0].len() as u64,
            Mode::PerMember if node.leaf => self
                .flows
                .flows
                .iter()
                .filter(|f| f.leaf as usize == i)
                .map(|f| u64::from(f.member.available))
                .sum(),
            Mode::PerMember => node.members.iter().map(|m| u64::from(m.available)).sum(),
        }
    }

    fn children_available(&self, i: usize, available: &[u64]) -> u64 {
        self.nodes[i]
            .children
            .iter()
            .map(|&c| available[c as usize])
            .sum()
    }
}
