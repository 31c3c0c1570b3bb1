//! Changes at run time: a node's rate limit and burst, its weight or reservation in its
//! parent, a flow's pacing rate. Each holds from the `now` it is made at; packets already
//! queued keep their order.

use super::{NodeId, Scheduler, place};
use crate::builder::widened_reservation_queue;
use crate::flow::Member;
use crate::gate::{Gate, capped, leaf_cap, retune};
use crate::policy::{MemberCfg, Policy};
use crate::units::Rate;
use sluice_queue::RankQueue;

impl Scheduler {
    /// Change a node's rate limit (`None` removes it) and burst (at most
    /// [`crate::config::MAX_SIZE`], as in a policy file), at run time, at `now` (the host's
    /// time, as for `enqueue` and `dequeue`; it must not go backwards): what the gate still
    /// owes then is paid at the new rate ([`Gate::set_rate`]). Packets waiting at the gate keep
    /// their place: they pass when the one in the shaper is released, at the time it was
    /// given (those after it are stamped at the new rate, or pass at once without one), and
    /// packets that arrive meanwhile wait behind them. A new burst counts from the gate's last
    /// packet: once the gate has been idle for the burst's time, it may send the whole burst
    /// at once, as a token bucket refilled to its new size.
    pub fn set_rate(&mut self, now: u64, n: NodeId, rate: Option<Rate>, burst: u64) {
        self.clock = self.clock.max(now);
        let burst = burst.min(crate::config::MAX_SIZE);
        let node = &mut self.nodes[n as usize];
        node.gate = match (node.gate, rate) {
            (Some(mut g), Some(r)) => {
                g.set_rate(r, self.clock);
                g.set_burst(burst);
                Some(g)
            }
            (None, Some(r)) => Some(Gate::new(r, burst)),
            (_, None) => None,
        };
    }

    /// A node's current rate limit.
    pub fn rate(&self, n: NodeId) -> Option<Rate> {
        self.nodes[n as usize].gate.map(|g| g.rate())
    }

    /// The burst of a node's rate limit, bytes (0 without a limit).
    pub fn burst(&self, n: NodeId) -> u64 {
        self.nodes[n as usize].gate.map_or(0, |g| g.burst())
    }

    /// Change node `n`'s weight in its parent at run time; on a root that is a leaf, the
    /// weight of its flows (one configuration serves all of them). The weight is clamped to
    /// `1..=MAX_WEIGHT`. False, and nothing changed, for an internal root (it has no parent
    /// to be weighed in) and for a node whose parent does not share by weight (prio, edf,
    /// drr, fq...: [`Policy::weighs`]).
    pub fn set_weight(&mut self, n: NodeId, weight: u32) -> bool {
        let node = &self.nodes[n as usize];
        let ranked_by = node.parent.unwrap_or(n);
        if !self.nodes[ranked_by as usize].policy.weighs() {
            return false;
        }
        let weight = weight.clamp(1, crate::policy::MAX_WEIGHT);
        let Some(cfg) = self.member_cfg_mut(n) else {
            return false;
        };
        if let Some(was) = cfg.edit(|c| c.weight = weight) {
            self.reconfigured(n, &was, self.clock);
        }
        true
    }

    /// Change node `n`'s reservation (hClock) or guaranteed rate (HTB) in its parent at run
    /// time `now`; on a root that is a leaf, its flows'. False, and nothing changed, for an
    /// internal root and for a node whose parent guarantees no reservations (any policy but
    /// hclock and htb: [`Policy::dual`]). It holds from `now`: service the node had ahead of
    /// the old reservation is paid at the new one, and a new reservation claims nothing from
    /// before `now`. A
    /// reservation slower than the node's bucketed reservation queue was sized for widens its
    /// buckets to what a build with it would give, unless the policy gave their granularity
    /// (docs/policy-files.md): at the edge of a window too narrow, a tag not due for long hid
    /// the due ones behind it.
    pub fn set_reservation(&mut self, now: u64, n: NodeId, rate: Option<Rate>) -> bool {
        self.clock = self.clock.max(now);
        if !self.nodes[self.ranked_by(n).0 as usize].policy.dual() {
            return false;
        }
        let Some(cfg) = self.member_cfg_mut(n) else {
            return false;
        };
        if let Some(was) = cfg.edit(|c| c.reservation = rate) {
            self.fit_reservation_queue(self.ranked_by(n).0);
            self.reconfigured(n, &was, self.clock);
        }
        true
    }

    /// The node that ranks node `n` as a member, and `n`'s slot there: its parent, or for a
    /// root (a leaf whose flows are its members) itself.
    fn ranked_by(&self, n: NodeId) -> (NodeId, usize) {
        match self.nodes[n as usize].parent {
            Some(p) => (p, self.nodes[n as usize].slot as usize),
            None => (n, 0),
        }
    }

    /// Widen node `n`'s reservation queue if its members' reservations now need it
    /// ([`widened_reservation_queue`]): rebuilt, its members moved in their order.
    /// O(members). A queue is only ever widened.
    fn fit_reservation_queue(&mut self, n: NodeId) {
        let capacity = self.capacity();
        let node = &mut self.nodes[n as usize];
        if !node.widens {
            return;
        }
        let Some((wider, span)) = widened_reservation_queue(
            &node.queue_specs[0],
            &node.policy,
            &node.member_cfg,
            self.max_packet,
            capacity,
        ) else {
            return;
        };
        let Ok(queue) = wider.build::<u32>() else {
            return; // the old one keeps ordering as it can
        };
        let mut old = std::mem::replace(&mut node.queues[0], queue);
        while let Some(e) = old.pop_min() {
            let m = if node.leaf {
                &mut self.flows.flows[e.item as usize].member
            } else {
                &mut node.members[e.item as usize]
            };
            m.handles[0] = node.queues[0].push(e.rank, e.item).ok();
            debug_assert!(m.handles[0].is_some(), "a wider queue lost a member");
        }
        (node.queue_specs[0], node.rank_spans[0], node.first_seen) = (wider, span, 0);
    }

    /// Node `n`'s configuration as a member changed at `now` from `was` (its weight or
    /// reservation, or for a root leaf its flows'): re-rank it, or every flow of the leaf, as
    /// the policy says ([`Policy::reconfigured`]). O(flows in the table) for a leaf.
    fn reconfigured(&mut self, n: NodeId, was: &MemberCfg, now: u64) {
        let (ranked_by, slot) = self.ranked_by(n);
        let node = &mut self.nodes[ranked_by as usize];
        let cfg = &node.member_cfg[slot];
        let mut move_one = |m: &mut Member, item: u32| {
            if let Some(ranks) = node.policy.reconfigured(&mut m.tags, was, cfg, now) {
                if m.available > 0 {
                    place(&mut node.queues, &mut node.first_seen, m, ranks, item, None);
                }
            }
        };
        if node.leaf {
            for (id, f) in self.flows.flows.iter_mut().enumerate() {
                if f.leaf == ranked_by {
                    move_one(&mut f.member, id as u32);
                }
            }
        } else {
            move_one(&mut node.members[slot], slot as u32);
        }
    }

    /// The configuration node `n` is ranked by: its own in its parent, or for a root that is a
    /// leaf the one its flows share (an internal node's list is its children's).
    fn member_cfg_mut(&mut self, n: NodeId) -> Option<&mut MemberCfg> {
        let node = &self.nodes[n as usize];
        match node.parent {
            Some(p) => {
                let slot = node.slot as usize;
                Some(&mut self.nodes[p as usize].member_cfg[slot])
            }
            None if node.leaf => Some(&mut self.nodes[n as usize].member_cfg[0]),
            None => None,
        }
    }

    /// Change the pacing rate of the flow `key` in leaf `leaf` (`None` removes it) at `now`;
    /// false if no such flow. The leaf's `flow_rate` still caps it ([`capped`]), and is what is
    /// left when it is removed. As with [`Scheduler::set_rate`], what the gate owes is paid at
    /// the new rate, the flow's packets waiting at its gate keep their order and its next
    /// packets wait behind them.
    pub fn set_flow_rate(&mut self, now: u64, leaf: NodeId, key: u64, rate: Option<Rate>) -> bool {
        self.clock = self.clock.max(now);
        let Some(id) = self.flows.find(key, leaf) else {
            return false;
        };
        let (cap, burst) = leaf_cap(self.nodes[leaf as usize].flow_rate);
        let rate = rate.map(|r| capped(r, cap)).or(cap);
        let gate = &mut self.flows.flows[id as usize].gate;
        retune(gate, rate, burst, self.clock);
        true
    }
}
