//! `OracleTree`: the plain reference interpreter of the scheduler's semantics.
//!
//! A PIFO tree as in "Formal Abstractions for Packet Scheduling" (Mohan et al.): every node a
//! PIFO; a per-packet node holds one reference to a child (or a packet at a leaf) per available
//! packet; popping the root follows references down to a packet. Plus Eiffel's extensions as
//! [`crate::tree`] documents them: per-member nodes (one reference per member with packets,
//! re-ranked on arrival and service), dual queues, and gates whose waiting packets sit in one
//! shaper.
//!
//! It is written for obviousness, not speed: flows are a `HashMap` of `VecDeque`s (a full table
//! reclaims the first idle flow that may go of the first few in a plain list), every PIFO is
//! [`sluice_queue::oracle::Oracle`] (a sorted map) filing ranks exactly as the node's real
//! queue would (its [`KeyModel`]), and nothing is shared with [`crate::tree`] except the rank
//! arithmetic it is meant to check the structures against: the policies, the gates and the
//! classifier. A differential test runs both on the same packets and
//! demands the same departures. Approximate queues have no exact model and are not supported.

use crate::builder::{BuildError, Horizon, TreeBuilder, widened_reservation_queue};
use crate::classify::Classifier;
use crate::flow::RECLAIM_TRIES;
use crate::gate::{Gate, Pacing, capped, leaf_cap, own_rate, retune};
use crate::packet::{Meta, Packet};
use crate::policy::{ABSENT, AnyPolicy, Backlog, MemberCfg, Mode, Policy, Service, Tags};
use crate::tree::{Dequeued, NodeId, PAST_GATE, RejectReason};
use crate::units::Rate;
use sluice_queue::oracle::{KeyModel, Oracle, key_model};
use sluice_queue::{QueueSpec, Rank};
use std::collections::{HashMap, VecDeque};

#[derive(Clone, Copy, Debug, Default)]
struct OMember {
    available: u32,
    ids: [Option<u64>; 2],
    tags: Tags,
}

struct OFlow {
    key: u64,
    leaf: NodeId,
    /// Packets of the flow anywhere in the tree; 0: idle, and reclaimable.
    queued: u32,
    /// Packets of a per-member leaf, in order.
    fifo: VecDeque<Meta>,
    member: OMember,
    gate: Option<Gate>,
    line: Line<u32>,
    /// Packets past its gate that have not left: a gate stamps its next one only while
    /// fewer than [`PAST_GATE`] are.
    passed: u32,
}

/// A gate's packet in flight (in the shaper) and the packets waiting behind it, in order: a
/// flow's packet ids, or a node's packets.
struct Line<T> {
    in_flight: bool,
    waiting: VecDeque<T>,
}

impl<T> Default for Line<T> {
    fn default() -> Self {
        Line {
            in_flight: false,
            waiting: VecDeque::new(),
        }
    }
}

struct ONode {
    parent: Option<NodeId>,
    slot: u32,
    children: Vec<NodeId>,
    leaf: bool,
    mode: Mode,
    dual: bool,
    policy: AnyPolicy,
    pifos: Vec<Oracle<u32>>,
    gate: Option<Gate>,
    line: Line<Meta>,
    members: Vec<OMember>,
    member_cfg: Vec<MemberCfg>,
    flow_rate: Option<(Rate, u64)>,
    /// The reservation queue's spec, if a slower reservation widens it.
    widens: Option<QueueSpec>,
}

/// What waits in the shaper: a flow's packet, or a node's.
#[derive(Clone, Copy)]
enum Wait {
    Flow(u32),
    Node(NodeId, Meta),
}

/// The shaper item that wakes the releases beyond its horizon ([`OracleTree::wake_up`]).
const WAKE: u32 = u32::MAX;

/// The reference interpreter; see the module note.
pub struct OracleTree {
    nodes: Vec<ONode>,
    classifier: Classifier,
    flows: Vec<OFlow>,
    by_key: HashMap<(u64, NodeId), u32>,
    /// Most flows at once; a new flow beyond them takes the place of an idle one.
    flow_capacity: usize,
    /// Idle flows, in the order they emptied, but for those passed over for a new flow (to
    /// the back).
    idle: VecDeque<u32>,
    /// Packets by id (per-packet leaves reference them; per-member leaves keep them in FIFOs).
    packets: Vec<Meta>,
    waits: Vec<Wait>,
    shaper: Oracle<u32>,
    /// Releases beyond the horizon, `(time, wait)`, in the order of their times, then of
    /// their arrival; the shaper holds [`WAKE`] for them.
    far: Vec<(u64, u32)>,
    /// The wake's id in the shaper and its time, while there.
    wake: Option<(u64, u64)>,
    /// A release later than the shaper's latest waits only until then.
    horizon: Horizon,
    /// Whether a flow's packet beyond the horizon is rejected.
    beyond_reject: bool,
    held: usize,
    capacity: usize,
    /// The largest packet, bytes.
    max_packet: u32,
    ready: u32,
    /// The latest `now` passed in.
    clock: u64,
}

/// A flow's packets at its leaf: the first `available` of its FIFO (the rest wait at its gate).
struct Fifo<'a>(&'a VecDeque<Meta>, u32);

impl Backlog for Fifo<'_> {
    fn for_each(&self, f: &mut dyn FnMut(&Meta)) {
        self.0.iter().take(self.1 as usize).for_each(f);
    }
}

impl OracleTree {
    /// Interpret the tree `b` describes.
    pub fn new(b: &TreeBuilder) -> Result<Self, BuildError> {
        let plan = b.plan()?;
        let mut nodes = Vec::new();
        for p in plan.nodes {
            let mut pifos = Vec::new();
            for spec in &p.queues {
                let model = key_model(spec).ok_or_else(|| {
                    BuildError::Invalid(format!(
                        "node `{}`: the oracle has no exact model of `{}`",
                        p.name, spec.kind
                    ))
                })?;
                pifos.push(Oracle::new(model, usize::MAX));
            }
            nodes.push(ONode {
                parent: p.parent,
                slot: p.slot,
                members: vec![OMember::default(); p.children.len()],
                children: p.children,
                leaf: p.leaf,
                mode: p.mode,
                dual: p.dual,
                policy: p.policy,
                pifos,
                gate: p.gate,
                line: Line::default(),
                member_cfg: p.member_cfg,
                flow_rate: p.flow_rate,
                widens: p.widens.then_some(p.queues[0]),
            });
        }
        let model = key_model(&plan.shaper).ok_or_else(|| {
            BuildError::Invalid("the oracle has no exact model of the shaper".into())
        })?;
        Ok(OracleTree {
            nodes,
            classifier: plan.classifier,
            flows: Vec::new(),
            by_key: HashMap::new(),
            flow_capacity: plan.flows,
            idle: VecDeque::new(),
            packets: Vec::new(),
            waits: Vec::new(),
            shaper: Oracle::new(model, usize::MAX),
            far: Vec::new(),
            wake: None,
            horizon: plan.horizon,
            beyond_reject: plan.beyond_horizon == sluice_queue::Overflow::Reject,
            held: 0,
            capacity: plan.capacity,
            max_packet: plan.max_packet,
            ready: 0,
            clock: 0,
        })
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.held
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Offer a packet (same contract as [`crate::Scheduler::enqueue`]).
    pub fn enqueue(&mut self, now: u64, p: &Packet) -> Result<(), RejectReason> {
        self.clock = self.clock.max(now);
        if p.len == 0 {
            return Err(RejectReason::ZeroLength);
        }
        let leaf = self.classifier.classify(p).ok_or(RejectReason::NoClass)?;
        if self.held == self.capacity {
            return Err(RejectReason::BufferFull);
        }
        self.release_due(now);
        let (cap, burst) = leaf_cap(self.nodes[leaf as usize].flow_rate);
        let own = own_rate(p.fields.pacing_bps, cap);
        // Asked before anything changes (same contract as the scheduler's).
        if self.beyond_reject {
            let gate = self
                .by_key
                .get(&(p.flow, leaf))
                .and_then(|&id| own.applied(self.flows[id as usize].gate?, self.clock));
            if gate.is_some_and(|g| self.horizon.beyond(g.next_free(), now).is_some()) {
                return Err(RejectReason::BeyondHorizon);
            }
        }
        let id = match self.by_key.get(&(p.flow, leaf)) {
            Some(&id) => {
                self.idle.retain(|&i| i != id);
                id
            }
            None => {
                let gate = own.for_new_flow(cap).map(|r| Gate::new(r, burst));
                let fresh = OFlow {
                    key: p.flow,
                    leaf,
                    queued: 0,
                    fifo: VecDeque::new(),
                    member: OMember::default(),
                    gate,
                    line: Line::default(),
                    passed: 0,
                };
                let id = if self.flows.len() < self.flow_capacity {
                    self.flows.push(fresh);
                    (self.flows.len() - 1) as u32
                } else {
                    // Not one still paced at `now`: its pacing state must outlive the gap. Nor
                    // one that owes its leaf's policy while others are queued there.
                    let paced = |f: &OFlow| f.gate.is_some_and(|g| !g.full(now));
                    let holds =
                        |leaf: NodeId| self.flows.iter().any(|f| f.leaf == leaf && f.queued > 0);
                    let owes = |f: &OFlow| {
                        let node = &self.nodes[f.leaf as usize];
                        holds(f.leaf) && node.policy.owes(&f.member.tags, &node.member_cfg[0])
                    };
                    // The first of the first few idle flows that may go and owes nothing; one
                    // that may not goes to the back.
                    let (mut found, mut indebted) = (None, None);
                    for _ in 0..RECLAIM_TRIES {
                        let Some(&id) = self.idle.front() else { break };
                        let f = &self.flows[id as usize];
                        if !paced(f) {
                            if !owes(f) {
                                found = Some(id);
                                break;
                            }
                            indebted.get_or_insert(id);
                        }
                        if self.idle.len() == 1 {
                            break;
                        }
                        self.idle.rotate_left(1);
                    }
                    // All those tried that may go owe: the first of them goes, debt and all.
                    let Some(id) = found.or(indebted) else {
                        return Err(RejectReason::FlowTableFull);
                    };
                    self.idle.retain(|&i| i != id);
                    let old = &self.flows[id as usize];
                    self.by_key.remove(&(old.key, old.leaf));
                    self.flows[id as usize] = fresh;
                    id
                };
                self.by_key.insert((p.flow, leaf), id);
                id
            }
        };
        let meta = Meta::new(p, id, now);
        let f = &mut self.flows[id as usize];
        // A packet's pacing rate, at most the leaf's, updates its flow's gate, or gives it one
        // (from the latest time seen, as the scheduler's), or takes it away.
        if let Pacing::Set(rate) = own {
            retune(&mut f.gate, rate, burst, self.clock);
        }
        self.held += 1;
        self.flows[id as usize].queued += 1;
        self.packets.push(meta);
        let pkt = (self.packets.len() - 1) as u32;
        if self.nodes[leaf as usize].mode == Mode::PerMember {
            self.flows[id as usize].fifo.push_back(meta);
        }
        self.flows[id as usize].line.waiting.push_back(pkt);
        self.admit(id, now);
        Ok(())
    }

    fn pass_flow_gate(&mut self, pkt: u32, now: u64) {
        let flow = self.packets[pkt as usize].flow;
        self.flows[flow as usize].passed += 1;
        self.enter_leaf(pkt, now);
    }

    /// A flow's waiting packets, in order, are stamped by its gate while fewer than
    /// [`PAST_GATE`] of its packets are past it and none is in the shaper: those due go
    /// through, the first not due waits in the shaper (all of them go if it has no gate).
    fn admit(&mut self, flow: u32, now: u64) {
        loop {
            let f = &mut self.flows[flow as usize];
            if f.line.in_flight {
                return;
            }
            let Some(&pkt) = f.line.waiting.front() else {
                return;
            };
            let t = match f.gate.as_mut() {
                None => now,
                Some(_) if f.passed >= PAST_GATE => return,
                Some(g) => g.stamp(now, self.packets[pkt as usize].len),
            };
            f.line.waiting.pop_front();
            if t > now {
                f.line.in_flight = true;
                return self.wait(t, now, Wait::Flow(pkt));
            }
            self.pass_flow_gate(pkt, now);
        }
    }

    /// Into the shaper until `at`; beyond its horizon, among the far releases, with the
    /// wake no later than `at`.
    fn wait(&mut self, at: u64, now: u64, w: Wait) {
        self.shaper.advance(now);
        self.waits.push(w);
        let id = (self.waits.len() - 1) as u32;
        let latest = self.horizon.latest(now);
        if at <= latest {
            let _ = self.shaper.push(at, id);
            return;
        }
        let place = self.far.partition_point(|&(t, _)| t <= at);
        self.far.insert(place, (at, id));
        match self.wake {
            Some((_, wake)) if wake <= at => {}
            Some((wake, _)) => {
                self.shaper.remove(wake);
                self.file_wake(latest);
            }
            None => self.file_wake(latest),
        }
    }

    fn file_wake(&mut self, at: u64) {
        self.wake = self.shaper.push(at, WAKE).ok().map(|id| (id, at));
    }

    /// The wake is due at `now`: the shaper's front moves to the first far release, or to
    /// `now`, or to the shaper's first item, whichever is earliest; the far releases within
    /// the horizon from there go into the shaper at their times, and the wake again for the
    /// rest at the horizon's end.
    fn wake_up(&mut self, now: u64) {
        self.wake = None;
        let Some(&(first, _)) = self.far.first() else {
            return;
        };
        let target = first.min(now);
        self.shaper.advance(target);
        let front = self
            .shaper
            .next_deadline()
            .map_or(target, |d| d.min(target));
        let latest = self.horizon.latest(front);
        let within = self.far.partition_point(|&(t, _)| t <= latest);
        for (at, id) in self.far.drain(..within) {
            let _ = self.shaper.push(at, id);
        }
        if !self.far.is_empty() {
            self.file_wake(latest);
        }
    }

    fn enter_leaf(&mut self, pkt: u32, now: u64) {
        let meta = self.packets[pkt as usize];
        let leaf = self.flows[meta.flow as usize].leaf;
        let item = if self.nodes[leaf as usize].mode == Mode::PerMember {
            meta.flow
        } else {
            pkt
        };
        self.give(leaf, item, &meta, now);
        self.pass_up(leaf, &meta, now);
    }

    fn give(&mut self, n: NodeId, item: u32, meta: &Meta, now: u64) {
        let node = &mut self.nodes[n as usize];
        let (m, cfg) = if node.leaf {
            (
                &mut self.flows[meta.flow as usize].member,
                node.member_cfg[0],
            )
        } else {
            (
                &mut node.members[item as usize],
                node.member_cfg[item as usize],
            )
        };
        if node.mode == Mode::PerPacket {
            let floor = if node.policy.ranks_by_time() {
                node.pifos[0].peek_min().map_or(now, |e| e.rank)
            } else {
                now
            };
            let rank = node.policy.rank_packet(&mut m.tags, &cfg, meta, now, floor);
            let _ = node.pifos[0].push(rank, item);
            return;
        }
        m.available += 1;
        let ranks = if m.available == 1 {
            // No member has packets: the node was idle, and a busy period begins.
            if node.pifos.iter().all(|q| q.is_empty()) {
                node.policy.busy();
            }
            Some(node.policy.activate(&mut m.tags, &cfg, meta, now))
        } else {
            node.policy
                .arrived(&mut m.tags, &cfg, meta, m.available, now)
        };
        if let Some(r) = ranks {
            put(&mut node.pifos, m, r, item, false);
        }
    }

    fn pass_up(&mut self, mut n: NodeId, meta: &Meta, now: u64) {
        loop {
            let node = &mut self.nodes[n as usize];
            // The root's gate is the link: it charges the packet that leaves, at dequeue.
            let gate = if node.parent.is_none() {
                None
            } else {
                node.gate.as_mut()
            };
            match arrive_at_gate(gate, &mut node.line, meta.len, now) {
                None => {}
                Some(None) => return node.line.waiting.push_back(*meta),
                Some(Some(t)) => return self.wait(t, now, Wait::Node(n, *meta)),
            }
            let Some(p) = self.nodes[n as usize].parent else {
                self.ready += 1;
                return;
            };
            let slot = self.nodes[n as usize].slot;
            self.give(p, slot, meta, now);
            n = p;
        }
    }

    /// A node's packet passed its gate at `t`: on to its parent.
    fn pass_node(&mut self, n: NodeId, meta: &Meta, t: u64) {
        match self.nodes[n as usize].parent {
            None => self.ready += 1,
            Some(p) => {
                let slot = self.nodes[n as usize].slot;
                self.give(p, slot, meta, t);
                self.pass_up(p, meta, t);
            }
        }
    }

    fn release_due(&mut self, now: u64) {
        while let Some(e) = self.shaper.pop_due(now) {
            if e.item == WAKE {
                self.wake_up(now);
                continue;
            }
            let t = e.rank.min(now);
            let w = self.waits[e.item as usize];
            match w {
                Wait::Flow(pkt) => {
                    let p = self.packets[pkt as usize];
                    let f = &mut self.flows[p.flow as usize];
                    f.line.in_flight = false;
                    if let Some(g) = f.gate.as_mut() {
                        g.released(t, p.len);
                    }
                    let flow = p.flow;
                    self.pass_flow_gate(pkt, t);
                    self.admit(flow, t);
                }
                Wait::Node(n, meta) => {
                    let node = &mut self.nodes[n as usize];
                    node.line.in_flight = false;
                    if let Some(g) = node.gate.as_mut() {
                        g.released(t, meta.len);
                    }
                    self.pass_node(n, &meta, t);
                    // Stamp those waiting in line, in order, until one has to wait.
                    while let Some(next) = self.nodes[n as usize].line.waiting.pop_front() {
                        let node = &mut self.nodes[n as usize];
                        let at = node.gate.as_mut().map_or(t, |g| g.stamp(t, next.len));
                        if at > t {
                            node.line.in_flight = true;
                            self.wait(at, t, Wait::Node(n, next));
                            break;
                        }
                        self.pass_node(n, &next, t);
                    }
                }
            }
        }
    }

    /// The next departure at `now` (same contract as [`crate::Scheduler::dequeue`]).
    pub fn dequeue(&mut self, now: u64) -> Option<Dequeued> {
        self.clock = self.clock.max(now);
        self.release_due(now);
        if self.ready == 0 || self.nodes[0].gate.is_some_and(|g| g.next_free() > now) {
            return None;
        }
        self.ready -= 1;
        let mut path: Vec<(NodeId, u32, Rank, usize)> = Vec::new();
        let mut n: NodeId = 0;
        let meta = loop {
            let node = &mut self.nodes[n as usize];
            let (item, rank, from) = if node.mode == Mode::PerPacket {
                let e = node.pifos[0].pop_min()?;
                (e.item, e.rank, 0)
            } else {
                let reserved = node
                    .dual
                    .then(|| node.pifos[0].peek_min())
                    .flatten()
                    .filter(|e| e.rank <= now);
                match reserved {
                    Some(e) => (e.item, e.rank, 0),
                    None => {
                        let q = usize::from(node.dual);
                        let e = node.pifos[q].peek_min()?;
                        (e.item, e.rank, q)
                    }
                }
            };
            path.push((n, item, rank, from));
            if !node.leaf {
                n = node.children[item as usize];
                continue;
            }
            break if node.mode == Mode::PerPacket {
                self.packets[item as usize]
            } else {
                self.flows[item as usize].fifo.pop_front()?
            };
        };
        for &(n, item, rank, from) in path.iter().rev() {
            let node = &mut self.nodes[n as usize];
            if node.mode == Mode::PerPacket {
                node.policy.popped(rank, &meta, now);
                continue;
            }
            let (m, cfg, fifo) = if node.leaf {
                let f = &mut self.flows[item as usize];
                (&mut f.member, node.member_cfg[0], Some(&f.fifo))
            } else {
                (
                    &mut node.members[item as usize],
                    node.member_cfg[item as usize],
                    None,
                )
            };
            m.available -= 1;
            let empty = VecDeque::new();
            let backlog = Fifo(fifo.unwrap_or(&empty), m.available);
            let s = Service {
                sent: &meta,
                available: m.available,
                backlog: &backlog,
                from,
                now,
            };
            let ranks = node.policy.served(&mut m.tags, &cfg, &s);
            if m.available > 0 {
                put(&mut node.pifos, m, ranks, item, true);
            } else {
                for (q, id) in node.pifos.iter_mut().zip(m.ids.iter_mut()) {
                    if let Some(id) = id.take() {
                        q.remove(id);
                    }
                }
            }
        }
        if let Some(g) = self.nodes[0].gate.as_mut() {
            g.stamp(now, meta.len);
        }
        self.held -= 1;
        let f = &mut self.flows[meta.flow as usize];
        f.queued -= 1;
        f.passed -= 1;
        if f.queued == 0 {
            self.idle.push_back(meta.flow);
        }
        self.admit(meta.flow, now);
        let f = &self.flows[meta.flow as usize];
        Some(Dequeued {
            token: meta.token,
            len: meta.len,
            flow: f.key,
            flow_id: meta.flow,
            leaf: f.leaf,
            arrival: meta.arrival,
        })
    }

    /// When something may next be dequeued (same contract as the scheduler's).
    pub fn next_event(&self, now: u64) -> Option<u64> {
        let link_free = self.nodes[0].gate.map_or(0, |g| g.next_free());
        let ready_at = if self.ready > 0 {
            Some(now)
        } else if self.wake.is_some() && self.shaper.len() == 1 {
            let wake = self.shaper.next_deadline().unwrap_or(0);
            self.far
                .first()
                .map(|&(at, _)| self.horizon.slot_start(at).max(wake))
        } else {
            self.shaper.next_deadline()
        };
        ready_at.map(|t| t.max(link_free).max(now))
    }

    /// Change a node's rate limit and burst, or remove it (same contract as
    /// [`crate::Scheduler::set_rate`]).
    pub fn set_rate(&mut self, now: u64, n: NodeId, rate: Option<Rate>, burst: u64) {
        self.clock = self.clock.max(now);
        let gate = &mut self.nodes[n as usize].gate;
        *gate = rate.map(|r| match *gate {
            Some(mut g) => {
                g.set_rate(r, self.clock);
                g.set_burst(burst);
                g
            }
            None => Gate::new(r, burst),
        });
    }

    /// Change a node's weight in its parent, or a root leaf's flows' (same contract as
    /// [`crate::Scheduler::set_weight`]).
    pub fn set_weight(&mut self, n: NodeId, weight: u32) -> bool {
        let ranked_by = self.nodes[n as usize].parent.unwrap_or(n);
        if !self.nodes[ranked_by as usize].policy.weighs() {
            return false;
        }
        let weight = weight.clamp(1, crate::policy::MAX_WEIGHT);
        let Some(cfg) = self.cfg_of(n) else {
            return false;
        };
        if let Some(was) = cfg.edit(|c| c.weight = weight) {
            self.reconfigured(n, &was, self.clock);
        }
        true
    }

    /// Change a node's reservation in its parent, or a root leaf's flows', at `now` (same
    /// contract as [`crate::Scheduler::set_reservation`]).
    pub fn set_reservation(&mut self, now: u64, n: NodeId, rate: Option<Rate>) -> bool {
        self.clock = self.clock.max(now);
        let ranked_by = self.nodes[n as usize].parent.unwrap_or(n);
        if !self.nodes[ranked_by as usize].policy.dual() {
            return false;
        }
        let Some(cfg) = self.cfg_of(n) else {
            return false;
        };
        if let Some(was) = cfg.edit(|c| c.reservation = rate) {
            self.widen_reservation_queue(self.nodes[n as usize].parent.unwrap_or(n));
            self.reconfigured(n, &was, self.clock);
        }
        true
    }

    /// Widen node `n`'s reservation queue if its members' reservations now need it (as
    /// [`crate::Scheduler::set_reservation`] does): a PIFO of the wider buckets, its members
    /// moved in their order.
    fn widen_reservation_queue(&mut self, n: NodeId) {
        let node = &mut self.nodes[n as usize];
        let Some(spec) = node.widens else {
            return;
        };
        let Some((wider, _)) = widened_reservation_queue(
            &spec,
            &node.policy,
            &node.member_cfg,
            self.max_packet,
            self.capacity,
        ) else {
            return;
        };
        let Some(model) = key_model(&wider) else {
            return;
        };
        let mut old = std::mem::replace(&mut node.pifos[0], Oracle::new(model, usize::MAX));
        while let Some(e) = old.pop_min() {
            let m = if node.leaf {
                &mut self.flows[e.item as usize].member
            } else {
                &mut node.members[e.item as usize]
            };
            m.ids[0] = node.pifos[0].push(e.rank, e.item).ok();
        }
        node.widens = Some(wider);
    }

    /// Re-rank node `n` in its parent, or a root leaf's flows, after its configuration
    /// changed at `now` from `was`, as the policy says.
    fn reconfigured(&mut self, n: NodeId, was: &MemberCfg, now: u64) {
        let (by, slot) = match self.nodes[n as usize].parent {
            Some(p) => (p, self.nodes[n as usize].slot as usize),
            None => (n, 0),
        };
        let node = &mut self.nodes[by as usize];
        let cfg = node.member_cfg[slot];
        let members: Vec<(u32, &mut OMember)> = if node.leaf {
            (0u32..)
                .zip(self.flows.iter_mut())
                .filter(|(_, f)| f.leaf == by)
                .map(|(id, f)| (id, &mut f.member))
                .collect()
        } else {
            vec![(slot as u32, &mut node.members[slot])]
        };
        for (item, m) in members {
            if let Some(ranks) = node.policy.reconfigured(&mut m.tags, was, &cfg, now) {
                if m.available > 0 {
                    put(&mut node.pifos, m, ranks, item, false);
                }
            }
        }
    }

    fn cfg_of(&mut self, n: NodeId) -> Option<&mut MemberCfg> {
        let (parent, slot, leaf) = {
            let node = &self.nodes[n as usize];
            (node.parent, node.slot as usize, node.leaf)
        };
        match parent {
            Some(p) => Some(&mut self.nodes[p as usize].member_cfg[slot]),
            None if leaf => Some(&mut self.nodes[n as usize].member_cfg[0]),
            None => None,
        }
    }

    /// Change the pacing rate of flow `key` in `leaf` (same contract as
    /// [`crate::Scheduler::set_flow_rate`]): a new gate gets the leaf's flow burst, an
    /// existing one keeps its own.
    pub fn set_flow_rate(&mut self, now: u64, leaf: NodeId, key: u64, rate: Option<Rate>) -> bool {
        self.clock = self.clock.max(now);
        let Some(&id) = self.by_key.get(&(key, leaf)) else {
            return false;
        };
        let (cap, burst) = leaf_cap(self.nodes[leaf as usize].flow_rate);
        let rate = rate.map(|r| capped(r, cap)).or(cap);
        retune(&mut self.flows[id as usize].gate, rate, burst, self.clock);
        true
    }

    /// The key model of node `n`'s first queue (for tests).
    pub fn model(&self, n: NodeId) -> KeyModel {
        self.nodes[n as usize].pifos[0].model()
    }
}

/// A packet reaches a node's gate: `None` passes, `Some(None)` waits in line, `Some(Some(t))` goes
/// to the shaper until `t` as the gate's packet in flight. A line keeps its order when its
/// gate loses its rate: newcomers wait behind it until it has drained.
fn arrive_at_gate(
    gate: Option<&mut Gate>,
    line: &mut Line<Meta>,
    len: u32,
    now: u64,
) -> Option<Option<u64>> {
    if line.in_flight || !line.waiting.is_empty() {
        return Some(None);
    }
    let gate = gate?;
    let t = gate.stamp(now, len);
    if t <= now {
        return None;
    }
    line.in_flight = true;
    Some(Some(t))
}

/// Re-rank a member. After a service (`served`) it keeps its place in each queue where its rank
/// is unchanged; after an arrival (the policy said its ranks changed) it moves in every queue.
fn put(pifos: &mut [Oracle<u32>], m: &mut OMember, ranks: [Rank; 2], item: u32, served: bool) {
    for (i, q) in pifos.iter_mut().enumerate() {
        if served && m.ids[i].is_some_and(|id| q.rank_of(id) == Some(ranks[i])) {
            continue;
        }
        if let Some(id) = m.ids[i].take() {
            q.remove(id);
        }
        if ranks[i] != ABSENT {
            m.ids[i] = q.push(ranks[i], item).ok();
        }
    }
}
