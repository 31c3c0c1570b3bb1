//! Shaping: the gates and the one shaper. A gate (a node's rate limit, a flow's pacing rate)
//! stamps each packet's release time (Carousel timestamping); a packet not yet due waits in
//! the shaper, a timing wheel shared by the whole tree, as its gate's one packet in flight,
//! and the packets behind it wait in the gate's line. When the shaper releases it, the packet
//! continues up the tree and the next in line is stamped. Releases beyond the shaper's
//! horizon wait among the [`FarReleases`](super::far::FarReleases) until they are within it.

use super::{FAR_WAKE, FLOW_ITEM, Held, NodeId, PAST_GATE, PREFETCH_AHEAD, Scheduler, Verdict};
use crate::flow::{NIL, rec_of};
use crate::gate::Pacing;
use crate::packet::{FlowId, Meta, Packet};
use crate::policy::Mode;
use sluice_queue::{PushError, RankQueue, prefetch};

impl Scheduler {
    /// A packet of `len` bytes reached the gate of node `n`, not the root (whose gate acts at
    /// dequeue), at `now`: does it pass, wait behind the gate's line, or wait in the shaper
    /// (then it is the line's one packet in flight)?
    pub(super) fn at_gate(&mut self, n: NodeId, len: u32, now: u64) -> Verdict {
        let node = &mut self.nodes[n as usize];
        // Behind the packets already waiting, even if the rate was removed since (`set_rate`).
        if !node.line.is_idle() {
            return Verdict::Hold;
        }
        let Some(gate) = node.gate.as_mut() else {
            return Verdict::Pass;
        };
        let t = gate.stamp(now, len);
        if t <= now {
            return Verdict::Pass;
        }
        node.line.waiting = true;
        Verdict::Park(t)
    }

    /// Append a record to the end of node `n`'s line.
    pub(super) fn hold(&mut self, n: NodeId, meta: &Meta) {
        let id = self.pending.insert(Held {
            node: n,
            meta: *meta,
            next: NIL,
        });
        let line = &mut self.nodes[n as usize].line;
        if line.tail == NIL {
            line.head = id;
        } else {
            self.pending.items[line.tail as usize].next = id;
        }
        line.tail = id;
    }

    /// Put a shaper item (see [`FLOW_ITEM`]) in the shaper until `at`: its gate's one packet
    /// in flight. A release beyond the horizon is counted as clamped and filed at the
    /// horizon's end (see [`Scheduler::file`]).
    pub(super) fn park(&mut self, at: u64, now: u64, item: u32) {
        if self.file(at, now, item) {
            self.stats.clamped += 1;
        }
    }

    /// [`Scheduler::park`] without counting: the item is filed until `at`; beyond the
    /// horizon (then true), among the [`FarReleases`], which the shaper's wake brings back in
    /// time. (Released at the horizon's end, as before, a packet that takes longer than the
    /// horizon at its gate's rate broke the rate: 124 Mbit/s through a 100 Mbit/s node with
    /// 65 000 B frames and a 4 ms horizon.)
    fn file(&mut self, at: u64, now: u64, item: u32) -> bool {
        // Time passes for the shaper even while nothing is due (release_due then skips it), so
        // that `at` is placed within its horizon from `now`.
        self.shaper.advance(now);
        match self.horizon.beyond(at, now) {
            None => {
                self.push_shaper(at, item, now);
                false
            }
            Some(latest) => {
                self.file_far(at, latest, item, now);
                true
            }
        }
    }

    /// Push `item` into the shaper until `at`, within its horizon.
    #[inline]
    fn push_shaper(&mut self, at: u64, item: u32, now: u64) {
        match self.shaper.push(at, item) {
            Ok(_) => self.pushed(at),
            Err(e) => {
                // The shaper holds at most one item per packet (the wake only while a packet
                // waits beyond the horizon, outside it) and was sized for all of them, and
                // `at` is within its horizon: neither error can happen.
                debug_assert!(false, "shaper refused an item: {e:?}");
                let (PushError::Full { item, .. } | PushError::OutOfRange { item, .. }) = e;
                self.unpark(item, u64::MAX, now);
            }
        }
    }

    /// An item was pushed into the shaper until `at`.
    #[inline]
    fn pushed(&mut self, at: u64) {
        // A later item cannot come first (its bucket starts no earlier than the first's). At
        // equal times too: a release at u64::MAX (the end of time) is due at its slot's start.
        if at <= self.shaper_due {
            self.shaper_due = self.shaper.next_deadline().unwrap_or(u64::MAX);
        }
    }

    /// `item`'s release at `at`, beyond the horizon from `now`, which ends at `latest`: among
    /// the [`FarReleases`], with the wake filed no later than `at`. (At `latest`, not at
    /// `now + horizon`, which the wheel would clamp again: [`Horizon::latest`].)
    #[cold]
    fn file_far(&mut self, at: u64, latest: u64, item: u32, now: u64) {
        self.far.insert(at, item);
        match self.far.wake {
            // Nearly always: filed from an earlier `now`, the wake ends an earlier horizon.
            Some((_, wake)) if wake <= at => {}
            // A host whose `now` went back.
            Some((handle, _)) => {
                let removed = self.shaper.remove(handle);
                debug_assert!(removed.is_ok(), "the wake is in the shaper");
                self.shaper_due = self.shaper.next_deadline().unwrap_or(u64::MAX);
                self.file_wake(latest, now);
            }
            None => self.file_wake(latest, now),
        }
    }

    /// File the wake of the [`FarReleases`] until `at`.
    fn file_wake(&mut self, at: u64, now: u64) {
        match self.shaper.push(at, FAR_WAKE) {
            Ok(handle) => {
                self.far.wake = Some((handle, at));
                self.pushed(at);
            }
            Err(e) => {
                // As in `push_shaper`: it cannot happen. Release them all rather than lose
                // them.
                debug_assert!(false, "shaper refused the wake: {e:?}");
                self.far.wake = None;
                while let Some((_, item)) = self.far.pop_by(u64::MAX) {
                    self.unpark(item, u64::MAX, now);
                }
            }
        }
    }

    /// Park node `n`'s packet in flight, a copy of `meta`.
    pub(super) fn park_node(&mut self, at: u64, now: u64, n: NodeId, meta: &Meta) {
        let id = self.pending.insert(Held {
            node: n,
            meta: *meta,
            next: NIL,
        });
        self.park(at, now, id);
    }

    /// A hard limit (`beyond_horizon = reject`) turns away packet `p` if its flow's gate, at
    /// the rate `p` gives it (`own`), is already further ahead than the shaper's horizon: no
    /// packet of the flow could go before then. Asked before anything changes, so that a
    /// refused packet leaves its flow as it was (its rate applied, a raise repaid the gate's
    /// debt at it; an idle flow went to the back of the reclaim order). A new flow's gate is
    /// idle. (A packet waiting at the gate is stamped later, so one accepted before can still
    /// go beyond the horizon; it waits outside the wheel until its time.)
    pub(super) fn refused_beyond_horizon(
        &self,
        p: &Packet,
        leaf: NodeId,
        own: Pacing,
        now: u64,
    ) -> bool {
        let Some(id) = self.flows.peek(p.flow, leaf, p.flow_id) else {
            return false;
        };
        let gate = self.flows.flows[id as usize].gate;
        let Some(g) = gate.and_then(|g| own.applied(g, self.clock)) else {
            return false;
        };
        self.horizon.beyond(g.next_free(), now).is_some()
    }

    /// A shaper item filed until `filed` is due at `now`: its gate's packet in flight goes
    /// through, then the packets waiting behind it are stamped, those already due going
    /// through too, until one must wait in the shaper. Time passes for them from when the
    /// item was due, `filed` (or `now` if earlier), so that chained gates keep exact spacing
    /// whatever the host's lateness. The wake of the releases beyond the horizon brings them
    /// into the shaper instead ([`Scheduler::unpark_far`]).
    fn unpark(&mut self, item: u32, filed: u64, now: u64) {
        if item & FLOW_ITEM != 0 {
            self.unpark_flow(item & !FLOW_ITEM, filed, now);
        } else if item == FAR_WAKE {
            self.unpark_far(now);
        } else {
            self.unpark_node(item, filed, now);
        }
    }

    /// See [`Scheduler::unpark`]; the wake of the releases beyond the horizon ([`far`]), due
    /// at `now`. The shaper's front moves to the earliest of them, or to `now` if earlier, or
    /// to its own first item if that comes first still; the releases within the horizon from
    /// there go into the shaper at their own times (those due leave in this `dequeue`, in
    /// the order of their times), and the wake again at the horizon's end for the rest. So
    /// the wake hops a horizon at a time only while the shaper holds items due before them.
    #[cold]
    fn unpark_far(&mut self, now: u64) {
        self.far.wake = None;
        let Some(first) = self.far.first() else {
            return;
        };
        let target = first.min(now);
        self.shaper.advance(target);
        let front = self
            .shaper
            .next_deadline()
            .map_or(target, |d| d.min(target));
        let latest = self.horizon.latest(front);
        while let Some((at, item)) = self.far.pop_by(latest) {
            self.push_shaper(at, item, now);
        }
        if self.far.first().is_some() {
            self.file_wake(latest, now);
        }
    }

    /// See [`Scheduler::unpark`]; a flow's gate, whose line is its FIFO from `gate_next` on.
    fn unpark_flow(&mut self, flow: FlowId, filed: u64, now: u64) {
        let f = &self.flows.flows[flow as usize];
        let pkt = f.gate_next;
        let len = f.rec(&self.packets.items, pkt).meta.len;
        self.flow_released(flow, pkt, len, filed.min(now));
    }

    /// [`Scheduler::unpark_flow`] once its packet in flight, `pkt` of `len` bytes, goes at
    /// `at`.
    #[inline]
    fn flow_released(&mut self, flow: FlowId, pkt: u32, len: u32, at: u64) {
        let f = &mut self.flows.flows[flow as usize];
        if let Some(g) = f.gate.as_mut() {
            g.released(at, len);
        }
        f.parked = false;
        self.pass_flow_gate(flow, pkt, at);
        self.admit(flow, at);
    }

    /// Packet `pkt`, the flow's `gate_next`, goes through its gate into its leaf: the cursor
    /// moves on (and a per-packet leaf's FIFO, which holds only the packets at the gate, loses
    /// its head).
    #[inline]
    fn pass_flow_gate(&mut self, flow: FlowId, pkt: u32, now: u64) {
        let f = &mut self.flows.flows[flow as usize];
        let (next, leaf) = (f.rec(&self.packets.items, pkt).next, f.leaf);
        f.gate_next = next;
        f.passed += 1;
        if self.nodes[leaf as usize].mode == Mode::PerPacket {
            f.head = next;
            if next == NIL {
                f.tail = NIL;
            }
        }
        self.enter_leaf(flow, pkt, now);
    }

    /// Stamp the packets waiting at a flow's gate, in order, at `now`: those due go through
    /// while fewer than [`PAST_GATE`] of the flow's packets are past it, and the first one
    /// not due goes to the shaper as the gate's packet in flight. Without a gate (its rate
    /// removed), they all go.
    #[inline]
    pub(super) fn admit(&mut self, flow: FlowId, now: u64) {
        loop {
            let f = &mut self.flows.flows[flow as usize];
            let pkt = f.gate_next;
            if pkt == NIL || f.parked {
                return;
            }
            let len = f.rec(&self.packets.items, pkt).meta.len;
            let t = match f.gate.as_mut() {
                None => now,
                Some(_) if f.passed >= PAST_GATE => return,
                Some(g) => g.stamp(now, len),
            };
            if t > now {
                f.parked = true;
                return self.park(t, now, FLOW_ITEM | flow);
            }
            self.pass_flow_gate(flow, pkt, now);
        }
    }

    /// See [`Scheduler::unpark`]; a node's gate, whose line is a list of [`Held`] records.
    fn unpark_node(&mut self, id: u32, filed: u64, now: u64) {
        let now = filed.min(now);
        let held = self.pending.release(id);
        let n = held.node;
        let node = &mut self.nodes[n as usize];
        node.line.waiting = false;
        if let Some(g) = node.gate.as_mut() {
            g.released(now, held.meta.len);
        }
        self.pass_node(n, &held.meta, now);
        loop {
            let head = self.nodes[n as usize].line.head;
            if head == NIL {
                return;
            }
            let held = self.pending.items[head as usize];
            let node = &mut self.nodes[n as usize];
            node.line.head = held.next;
            if held.next == NIL {
                node.line.tail = NIL;
            }
            let t = node
                .gate
                .as_mut()
                .map_or(now, |g| g.stamp(now, held.meta.len));
            if t > now {
                // The record becomes the packet in flight: into the shaper as it is.
                node.line.waiting = true;
                self.pending.items[head as usize].next = NIL;
                return self.park(t, now, head);
            }
            self.pending.release(head);
            self.pass_node(n, &held.meta, now);
        }
    }

    /// Release every shaper item due at `now`.
    #[inline(always)]
    pub(super) fn release_due(&mut self, now: u64) {
        if now >= self.shaper_due {
            self.release_due_slow(now);
        }
    }

    fn release_due_slow(&mut self, now: u64) {
        while let Some(e) = self.shaper.pop_due(now) {
            if self.prefetch {
                self.prefetch_releases();
            }
            self.unpark(e.item, e.rank, now);
        }
        self.shaper_due = self.shaper.next_deadline().unwrap_or(u64::MAX);
    }

    /// Start loading what the next shaper releases will touch (see [`PREFETCH_AHEAD`]): the
    /// next item's packet record (its flow's line was loaded by an earlier call) and the lines
    /// of the flows or records after it.
    #[inline]
    fn prefetch_releases(&self) {
        let upcoming = self.shaper.upcoming();
        for (k, item) in upcoming.iter().take(PREFETCH_AHEAD).enumerate() {
            if item & FLOW_ITEM == 0 {
                if let Some(h) = self.pending.items.get(item as usize) {
                    prefetch(h);
                }
            } else if let Some(f) = self.flows.flows.get((item & !FLOW_ITEM) as usize) {
                match k {
                    // The packet going through.
                    0 => self.prefetch_packet(f.gate_next),
                    _ => {
                        // Both lines: a release reads the second one too (the gate, the leaf).
                        prefetch(f);
                        prefetch(&f.gate);
                    }
                }
            }
        }
    }

    #[inline]
    fn prefetch_packet(&self, pkt: u32) {
        if let Some(r) = rec_of(&self.flows.flows, &self.packets.items, pkt) {
            prefetch(r);
        }
    }
}
