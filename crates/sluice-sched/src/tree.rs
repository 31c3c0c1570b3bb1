//! The scheduler: a PIFO tree with Eiffel's extensions and one shaper for every rate limit.
//!
//! ## How a packet moves
//!
//! ```text
//!   enqueue ─> classify to a leaf ─> its flow ─> [flow gate] ─> leaf ─> [leaf gate] ─> parent
//!              ─> ... ─> root ─> ready ─> dequeue [root gate]
//! ```
//!
//! A node is *given* a packet when one becomes available below it. It then holds an entry for
//! it: per packet, one entry ranked once (classic PIFO tree: at an internal node the entry
//! names the child); per member, the member's single entry is activated or re-ranked (Eiffel's
//! per-flow ranking, see [`crate::policy`]). Then the node passes the packet up: if it has a
//! gate (a rate limit), the gate stamps a release time (Carousel timestamping) and, if that is
//! in the future, a record waits in the **one shaper**, a timing wheel shared by the whole tree;
//! when the shaper releases it, the packet continues to the parent (Eiffel Fig. 4.8). A flow's
//! pacing rate is a gate in front of its leaf, with at most `PAST_GATE` of the flow's
//! packets past it at a time (`Scheduler::admit`).
//!
//! The root's gate is the link, and it charges the packet that leaves: `dequeue` sends nothing
//! while the gate's last timestamp is ahead of `now`, and stamps the length of the packet it
//! sends. (Stamping arrivals instead, as the other gates do, lets the root's policy send other
//! packets than the ones stamped: with fq over frames of 1.5 to 64 KB and thousands queued, a
//! 100 ms window went 3% over the rate. Below the root the same holds for a gate over a
//! reordering subtree: its rate is exact over time, within the subtree's backlog per window.)
//!
//! `dequeue` first lets the shaper release everything due, then walks from the root down: a
//! per-packet node pops its first entry and follows it; a per-member node picks its first member
//! (for dual policies, a due reservation before the first share) and follows it; the leaf
//! yields the packet. On the way back up every per-member node re-ranks the member that sent,
//! with the packet actually sent, in O(1) (`RankQueue::requeue` by handle); a member whose rank
//! did not change keeps its place, ahead of equal ranks (a DRR or fq flow with credit left
//! sends again, as in DRR and fq).
//!
//! Invariant (checked by [`Scheduler::check`] in tests): every node holds exactly as many
//! entries-worth of packets as its children have passed up to it, so following entries from
//! the root always ends at a packet.
//!
//! Nothing allocates after construction: packets, flows, shaper records and every queue are
//! reserved for the configured capacities. Time is passed in; nothing reads a clock.
//!
//! This file holds the walk (enqueue, the way up, dequeue and its re-ranking); the rest of the
//! `impl` is in submodules: `shaping` (the gates and the shaper), `far` (releases beyond the
//! shaper's horizon), `runtime` (changes of rates, weights and reservations) and `describe`
//! (the compiled tree as text).

use crate::builder::Horizon;
use crate::classify::{Classifier, Match, RuleIndex};
use crate::flow::{Flow, FlowTable, INLINE, Member, NIL, Rec, rec_of, record};
use crate::gate::{Gate, GateLine, Pacing, leaf_cap, own_rate, retune};
use crate::packet::{FlowId, Meta, Packet};
use crate::policy::{ABSENT, AnyPolicy, Backlog, MemberCfg, Mode, Policy, REBASE_AT};
use crate::units::Rate;
use sluice_queue::{
    AnyQueue, Entry, Handle, Overflow, QueueSpec, Rank, RankQueue, UPCOMING, Upcoming, prefetch,
};
use std::fmt;

mod check;
mod describe;
mod far;
mod runtime;
mod shaping;
pub(crate) use describe::Uses;
use far::FarReleases;

/// Index of a node; 0 is the root. Ids come from the scheduler itself (the builder's
/// `root` and `child`, [`Scheduler::node_by_name`], [`Scheduler::classify`]), numbered
/// `0..node_count()`. An id beyond them is a bug in the host and may panic, as a slice index
/// past its end does: a host that takes ids from its users checks them against
/// [`Scheduler::node_count`], or looks nodes up by name, as the daemon's control socket does.
pub type NodeId = u16;

/// Deepest tree accepted.
pub const MAX_DEPTH: usize = 16;

/// Why a packet was not accepted. Every rejection is counted per reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum RejectReason {
    /// The scheduler holds `capacity` packets already.
    #[error("packet buffer full")]
    BufferFull,
    /// No flow slot could be given to a new flow: every slot holds a flow with packets, or the
    /// idle flows tried are still paced (their gates have not gathered their whole burst
    /// again, and a new gate would start with it).
    #[error("flow table full")]
    FlowTableFull,
    /// No classifier rule matched and there is no default class.
    #[error("no class matched")]
    NoClass,
    /// The packet's release time is beyond the shaper's horizon and the shaper rejects.
    #[error("release time beyond the shaper horizon")]
    BeyondHorizon,
    /// A zero-length packet.
    #[error("zero-length packet")]
    ZeroLength,
}

impl RejectReason {
    /// Every reason, for counters.
    pub const ALL: [RejectReason; 5] = [
        RejectReason::BufferFull,
        RejectReason::FlowTableFull,
        RejectReason::NoClass,
        RejectReason::BeyondHorizon,
        RejectReason::ZeroLength,
    ];

    /// Stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            RejectReason::BufferFull => "buffer_full",
            RejectReason::FlowTableFull => "flow_table_full",
            RejectReason::NoClass => "no_class",
            RejectReason::BeyondHorizon => "beyond_horizon",
            RejectReason::ZeroLength => "zero_length",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A rejected packet: the reason and the host's token, so it can complete or retry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("packet {token} rejected: {reason}")]
pub struct Rejected {
    /// Why.
    pub reason: RejectReason,
    /// The packet's token.
    pub token: u64,
}

/// A packet leaving the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dequeued {
    /// The host's token.
    pub token: u64,
    /// Bytes on the wire.
    pub len: u32,
    /// Its flow key.
    pub flow: u64,
    /// The scheduler's id of its flow: give it back in [`Packet::flow_id`] with the flow's next
    /// packet to save the lookup.
    pub flow_id: FlowId,
    /// The leaf it went through.
    pub leaf: NodeId,
    /// When it arrived.
    pub arrival: u64,
}

/// Per-node counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Packets that became available at this node.
    pub arrived: u64,
    /// Packets that left through this node.
    pub sent: u64,
    /// Bytes that left through this node.
    pub sent_bytes: u64,
    /// Packets its gate held in the shaper.
    pub shaped: u64,
    /// Packets classified to it (leaves).
    pub enqueued: u64,
    /// Times its fair policy's virtual time was lowered before it could overflow
    /// ([`Policy::rebase`]).
    pub rebases: u64,
}

/// Scheduler-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// Packets accepted.
    pub enqueued: u64,
    /// Packets dequeued.
    pub dequeued: u64,
    /// Rejections, by [`RejectReason`] (index = reason as usize).
    pub rejected: [u64; 5],
    /// Releases beyond the shaper's horizon (rates so low that a packet's wait exceeds it):
    /// each waits outside the wheel, in order of time, until it is within the horizon.
    pub clamped: u64,
    /// Ranks that fell beyond a node queue's range and were filed at its edge, where their
    /// order is approximate. Expected under hClock and HTB for a member that gets more than
    /// its weighted share (by its reservation, or while the others wait at their limits): its
    /// share tag runs ahead of the window, and the edge keeps it behind the others there, so
    /// the rates hold. Otherwise a sign of packets longer than the queues were sized for (more
    /// than twice [`crate::SchedConfig::max_packet`]) or of deadlines further ahead than EDF's
    /// window, whose order is then approximate.
    pub ranks_clamped: u64,
    /// Idle flows whose slot was reused.
    pub flows_reclaimed: u64,
}

impl SchedStats {
    /// Rejections for `reason`.
    pub fn rejected(&self, reason: RejectReason) -> u64 {
        self.rejected[reason.index()]
    }
}

/// A packet that passed `node`, waiting for `node`'s gate (in the gate's line, or in the shaper
/// as its packet in flight), then the parent; and the next record in the line. A copy of the
/// packet's record: packets of a member are interchangeable above it, so the packet itself may
/// leave before this record does.
///
/// A flow's gate needs no such record: the packets waiting at it are the end of the flow's own
/// FIFO, from [`Flow::gate_next`](crate::flow::Flow) on, and the shaper holds the flow itself.
#[derive(Clone, Copy, Debug)]
struct Held {
    node: NodeId,
    meta: Meta,
    next: u32,
}

/// How many of the items a queue names as leaving next (`upcoming`) to prefetch for. With a
/// million flows nearly every touch of a flow or packet misses the cache; the shaper releases
/// flows in bursts and a fair-queuing leaf serves its flows in a known order, so loading the
/// next few while the current one is handled overlaps their misses (`sluice bench sched`,
/// fq_pacing at 1e6 flows: about a fifth less time per packet). A bucketed queue names this
/// many if its first bucket's first two chunks hold them ([`sluice_queue::Upcoming`]).
const PREFETCH_AHEAD: usize = 4;
const _: () = assert!(PREFETCH_AHEAD <= UPCOMING);

/// Prefetch only when flows and packet records take more than this: below it they stay in
/// the caches, and the hints would only cost instructions (about a tenth more time per packet
/// at 1e3 flows).
const PREFETCH_MIN_BYTES: usize = 8 << 20;

/// Most packets of a gated flow past its gate (at its leaf or above) at once; the others
/// wait at the gate unstamped, and each is stamped when one of those leaves. Without a bound,
/// a paced flow that fair queuing held below its rate kept passing its gate at its rate, and
/// once the other flows stopped, all it had passed, then each new packet (its gate's stamps
/// lagged behind), left at the link's rate. With it, the flow sends at most `PAST_GATE` + 1
/// packets (and its burst) back to back, then its rate: as Linux fq, which sends a quantum of
/// two packets at once. Two, not one, so that a flow with the two packets in the scheduler
/// that TCP Small Queues or zD admission keep never waits for its own departures (with one,
/// fq_pacing at 1e6 flows in `sluice bench sched` cost half as much again).
pub(crate) const PAST_GATE: u32 = 2;

/// A shaper item with this bit set is a flow id (its gate's packet in flight is the flow's
/// `gate_next`); without it (unless it is [`FAR_WAKE`]), a [`Held`] record id. Ids stay
/// below 2^24 (`MAX_PACKETS`).
const FLOW_ITEM: u32 = 1 << 31;

/// The shaper item that is the wake of the releases beyond its horizon ([`far`]).
const FAR_WAKE: u32 = 1 << 30;

/// What a gate does with an arriving packet.
enum Verdict {
    /// Through at once.
    Pass,
    /// Behind the gate's line.
    Hold,
    /// Into the shaper until this time, as the gate's packet in flight.
    Park(u64),
}

/// A fixed-capacity slab with a free stack (packet records and shaper records). Its owner
/// counts what it holds and never inserts beyond the capacity.
struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T: Copy> Slab<T> {
    fn new(capacity: usize) -> Result<Self, std::collections::TryReserveError> {
        let (mut items, mut free) = (Vec::new(), Vec::new());
        items.try_reserve_exact(capacity)?;
        free.try_reserve_exact(capacity)?;
        Ok(Slab { items, free })
    }
    fn insert(&mut self, v: T) -> u32 {
        if let Some(i) = self.free.pop() {
            self.items[i as usize] = v;
            i
        } else {
            self.items.push(v);
            (self.items.len() - 1) as u32
        }
    }
    fn release(&mut self, i: u32) -> T {
        self.free.push(i);
        self.items[i as usize]
    }
}

/// A flow's queued packets, for policies that look (pFabric): its FIFO from `head`, through
/// its own slots and the slab.
struct FlowBacklog<'a> {
    head: u32,
    /// Packets available at the leaf: the first ones of the FIFO. Those after them still
    /// wait at the flow's gate and reach the leaf later (pFabric counted them twice, there
    /// and when they arrived, and kept a flow at the rank of a packet that had left).
    available: u32,
    slots: &'a [Rec],
    slab: &'a [Rec],
}

impl Backlog for FlowBacklog<'_> {
    fn for_each(&self, f: &mut dyn FnMut(&Meta)) {
        let mut cur = self.head;
        for _ in 0..self.available {
            if cur == NIL {
                break;
            }
            let r = record(self.slots, self.slab, cur);
            f(&r.meta);
            cur = r.next;
        }
    }
}

/// A node of the tree.
pub(crate) struct Node {
    pub name: String,
    pub parent: Option<NodeId>,
    /// Index among the parent's children.
    pub slot: u32,
    pub children: Vec<NodeId>,
    pub leaf: bool,
    pub mode: Mode,
    pub dual: bool,
    pub policy: AnyPolicy,
    /// One queue, or two for dual policies (reservation, share).
    pub queues: Vec<AnyQueue<u32>>,
    /// The rank of `queues[0]`'s first member when a pick last looked and found it not yet
    /// due (`Rank::MAX`: the queue was empty), as long as nothing was pushed to or removed
    /// from that queue since; 0 otherwise. A dual node's pick looks at its reservation queue
    /// again only once `now` reaches it: reservations are mostly not yet due, and a member
    /// served by share leaves that queue untouched.
    pub first_seen: Rank,
    /// What each queue was built from.
    pub queue_specs: Vec<QueueSpec>,
    /// The rank units each queue's ranks spread over.
    pub rank_spans: Vec<u64>,
    /// This node's rate limit.
    pub gate: Option<Gate>,
    /// Packets waiting at the gate.
    pub line: GateLine,
    /// Internal nodes: each child's place in this node.
    pub members: Vec<Member>,
    /// Internal nodes: each child's configuration; leaves: the one configuration of its flows.
    pub member_cfg: Vec<MemberCfg>,
    /// Leaves: pacing rate and burst given to each new flow.
    pub flow_rate: Option<(Rate, u64)>,
    pub stats: NodeStats,
    /// Whether a slower reservation set at run time widens the reservation queue's buckets
    /// ([`crate::builder::widened_reservation_queue`]).
    pub widens: bool,
}

/// The programmable scheduler. Build one with [`crate::TreeBuilder`] or from a policy file.
///
/// Time is passed in (`now`, ns) and should not go backwards from call to call. A `now`
/// earlier than one already seen is safe (nothing is lost or sent twice, nothing panics), but
/// what is decided at it follows that earlier time; run-time changes of rates and weights,
/// a flow's pacing rate that comes with a packet too, apply from the latest `now` seen.
pub struct Scheduler {
    pub(crate) nodes: Vec<Node>,
    pub(crate) classifier: Classifier,
    /// The classifier's rules indexed by class id, DSCP and VLAN, if any are (`classifier`
    /// decides; the index finds its answer without trying every rule).
    rule_index: Option<Box<RuleIndex>>,
    flows: FlowTable,
    /// Records of packets their flow's slots do not hold (see [`crate::flow::INLINE`]).
    packets: Slab<Rec>,
    /// Packets held, wherever their records are.
    held: usize,
    pending: Slab<Held>,
    /// Releases beyond the shaper's horizon, in the order of their times.
    far: FarReleases,
    shaper: AnyQueue<u32>,
    /// The shaper's next deadline (`u64::MAX`: empty), so that the many calls that find
    /// nothing due cost one comparison. Refreshed after every release and every push that
    /// could come first.
    shaper_due: u64,
    shaper_spec: QueueSpec,
    horizon: Horizon,
    beyond_horizon: Overflow,
    /// Packets given to the root, ready to leave (through the root's gate, at dequeue).
    ready: u32,
    /// A dequeue found the root's gate closed since the last packet left (for its `shaped`).
    root_waited: bool,
    /// The latest `now` passed in: run-time changes of rates apply from then.
    clock: u64,
    stats: SchedStats,
    /// The way down of the current dequeue (kept here so that no dequeue initializes it).
    path: [Step; MAX_DEPTH],
    /// Whether to prefetch ([`PREFETCH_MIN_BYTES`]).
    pub(crate) prefetch: bool,
    /// A rebase's list of one queue's members in order, reserved for the largest queue of a
    /// node whose policy has a virtual time, so that rebasing never allocates.
    rebase_order: Vec<u32>,
    /// Settings the builder dropped because they cannot take effect where they were given,
    /// as notes for [`Scheduler::describe`].
    pub(crate) ignored: Vec<String>,
    /// The largest packet, bytes ([`crate::SchedConfig::max_packet`]), for queues re-sized
    /// at run time.
    pub(crate) max_packet: u32,
}

/// Which member a node picked on the way down.
#[derive(Clone, Copy)]
struct Step {
    node: NodeId,
    /// Child slot (internal) or flow id (per-member leaf) or packet id (per-packet leaf).
    item: u32,
    /// Rank of the popped entry (per packet) or the queue picked from (per member).
    rank: Rank,
    from: usize,
}

impl Scheduler {
    pub(crate) fn from_parts(
        nodes: Vec<Node>,
        classifier: Classifier,
        capacity: usize,
        flow_capacity: usize,
        shaper: (AnyQueue<u32>, QueueSpec),
        horizon: Horizon,
        beyond_horizon: Overflow,
    ) -> Result<Self, std::collections::TryReserveError> {
        let (shaper, shaper_spec) = shaper;
        let state_bytes = flow_capacity * std::mem::size_of::<crate::flow::Flow>()
            + capacity * std::mem::size_of::<Rec>();
        let rebase_members = nodes
            .iter()
            .filter(|n| n.policy.virtual_time().is_some())
            .flat_map(|n| n.queues.iter().map(RankQueue::capacity))
            .max()
            .unwrap_or(0);
        let mut rebase_order = Vec::new();
        rebase_order.try_reserve_exact(rebase_members)?;
        Ok(Scheduler {
            rebase_order,
            ignored: Vec::new(),
            max_packet: u32::from(u16::MAX) + 1,
            prefetch: state_bytes > PREFETCH_MIN_BYTES,
            nodes,
            rule_index: Some(RuleIndex::new(&classifier))
                .filter(RuleIndex::is_useful)
                .map(Box::new),
            classifier,
            flows: FlowTable::new(flow_capacity)?,
            packets: Slab::new(capacity)?,
            held: 0,
            pending: Slab::new(capacity)?,
            far: FarReleases::new(capacity)?,
            shaper,
            shaper_due: u64::MAX,
            shaper_spec,
            horizon,
            beyond_horizon,
            ready: 0,
            root_waited: false,
            clock: 0,
            stats: SchedStats::default(),
            path: [Step {
                node: 0,
                item: 0,
                rank: 0,
                from: 0,
            }; MAX_DEPTH],
        })
    }

    /// Packets held (queued, or waiting in the shaper).
    pub fn len(&self) -> usize {
        self.held
    }

    /// True when no packet is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Most packets held at once.
    pub fn capacity(&self) -> usize {
        self.packets.items.capacity()
    }

    /// Flows in the flow table.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Flow table slots.
    pub fn flow_capacity(&self) -> usize {
        self.flows.capacity()
    }

    /// Scheduler-wide counters.
    pub fn stats(&self) -> SchedStats {
        SchedStats {
            flows_reclaimed: self.flows.reclaimed,
            clamped: self.stats.clamped + self.shaper.stats().clamped,
            ranks_clamped: self
                .nodes
                .iter()
                .flat_map(|n| &n.queues)
                .map(|q| q.stats().clamped)
                .sum(),
            ..self.stats
        }
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Node `n`'s parent (`None` for the root).
    pub fn parent(&self, n: NodeId) -> Option<NodeId> {
        self.nodes[n as usize].parent
    }

    /// The name of node `n`'s policy (`wfq`, `drr`, ...).
    pub fn node_policy(&self, n: NodeId) -> &'static str {
        self.nodes[n as usize].policy.name()
    }

    /// A node's name.
    pub fn node_name(&self, n: NodeId) -> &str {
        &self.nodes[n as usize].name
    }

    /// Find a node by name.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .map(|i| i as NodeId)
    }

    /// A node's counters.
    pub fn node_stats(&self, n: NodeId) -> NodeStats {
        self.nodes[n as usize].stats
    }

    /// Turn the cache prefetch hints on or off (on by default when flows and packet records
    /// outgrow the caches: more than 8 MiB). They never change what is scheduled.
    pub fn set_prefetch(&mut self, on: bool) {
        self.prefetch = on;
    }

    /// Packets waiting in the shaper.
    pub fn shaped(&self) -> usize {
        self.shaper.len() - usize::from(self.far.wake.is_some()) + self.far.len()
    }

    fn reject(&mut self, reason: RejectReason, token: u64) -> Result<(), Rejected> {
        self.stats.rejected[reason.index()] += 1;
        Err(Rejected { reason, token })
    }

    /// Offer a packet at time `now`. Accepted packets leave through [`Scheduler::dequeue`];
    /// rejected ones are returned with their reason (and counted). `now` must not go backwards.
    pub fn enqueue(&mut self, now: u64, p: &Packet) -> Result<(), Rejected> {
        self.clock = self.clock.max(now);
        if p.len == 0 {
            return self.reject(RejectReason::ZeroLength, p.token);
        }
        // A tree without rules (the host's flows all in one leaf) only reads its default, as
        // the scan of no rules would; the rules' classification is a call of its own, so that
        // this path stays as short as it was before the rules had an index (callgrind: the
        // index inlined here cost hClock's packets 20 instructions).
        let leaf = if self.classifier.rules.is_empty() {
            self.classifier.default
        } else {
            self.classify(p)
        };
        let Some(leaf) = leaf else {
            return self.reject(RejectReason::NoClass, p.token);
        };
        if self.held == self.capacity() {
            return self.reject(RejectReason::BufferFull, p.token);
        }
        // Let time pass first: releases what is due and moves the shaper's front to `now`.
        self.release_due(now);
        let (cap, burst) = leaf_cap(self.nodes[leaf as usize].flow_rate);
        let own = own_rate(p.fields.pacing_bps, cap);
        if self.beyond_horizon == Overflow::Reject && self.refused_beyond_horizon(p, leaf, own, now)
        {
            return self.reject(RejectReason::BeyondHorizon, p.token);
        }
        let nodes = &self.nodes;
        let gate = || own.for_new_flow(cap).map(|r| Gate::new(r, burst));
        let owes = |f: &Flow| owes_busy_leaf(nodes, f);
        let Some(flow) = self
            .flows
            .get_or_insert(p.flow, leaf, p.flow_id, now, gate, owes)
        else {
            return self.reject(RejectReason::FlowTableFull, p.token);
        };
        let meta = Meta::new(p, flow, now);
        let f = &mut self.flows.flows[flow as usize];
        // The packet's own pacing rate (Carousel: set by the transport), at most the leaf's
        // `flow_rate`, updates the gate, or gives one to a flow that had none (its earlier
        // packets carried no rate), or removes it (no pacing asked, no `flow_rate`). As every
        // change of rate, from the latest time seen.
        if let Pacing::Set(rate) = own {
            retune(&mut f.gate, rate, burst, self.clock);
        }
        let per_member = self.nodes[leaf as usize].mode == Mode::PerMember;
        let f = &mut self.flows.flows[flow as usize];
        let pkt = match f.take_slot(flow, Rec::new(meta)) {
            Some(pkt) => pkt,
            None => self.packets.insert(Rec::new(meta)),
        };
        self.held += 1;
        f.queued += 1;
        // The flow's gate: the packet passes, waits in the shaper as the gate's packet in
        // flight, or waits behind it or behind the flow's packets past the gate
        // ([`PAST_GATE`], [`Scheduler::admit`]). Packets already waiting go first, even if the
        // gate's rate was removed since (`set_flow_rate`).
        let verdict = match f.gate.as_mut() {
            _ if f.gate_next != NIL => Verdict::Hold,
            None => Verdict::Pass,
            Some(_) if f.passed >= PAST_GATE => Verdict::Hold,
            Some(g) => match g.stamp(now, p.len) {
                t if t <= now => Verdict::Pass,
                t => Verdict::Park(t),
            },
        };
        // The flow's FIFO: every packet at a per-member leaf; at a per-packet leaf (which
        // holds the packets themselves) only those waiting at the gate.
        if per_member || !matches!(verdict, Verdict::Pass) {
            if f.tail == NIL {
                f.head = pkt;
            } else {
                let tail = f.tail;
                f.rec_mut(&mut self.packets.items, tail).next = pkt;
            }
            f.tail = pkt;
        }
        self.nodes[leaf as usize].stats.enqueued += 1;
        self.stats.enqueued += 1;
        match verdict {
            Verdict::Pass => {
                f.passed += 1;
                self.enter(leaf, pkt, &meta, now)
            }
            Verdict::Hold => {
                if f.gate_next == NIL {
                    f.gate_next = pkt;
                }
                // Waiting without one in flight: behind the packets past the gate, or behind
                // a line whose gate was removed since (which goes now).
                if !f.parked {
                    self.admit(flow, now);
                }
            }
            Verdict::Park(t) => {
                (f.gate_next, f.parked) = (pkt, true);
                self.park(t, now, FLOW_ITEM | flow);
            }
        }
        Ok(())
    }

    #[inline]
    fn enter_leaf(&mut self, flow: FlowId, pkt: u32, now: u64) {
        let f = &self.flows.flows[flow as usize];
        let (meta, leaf) = (f.rec(&self.packets.items, pkt).meta, f.leaf);
        self.enter(leaf, pkt, &meta, now);
    }

    /// [`Scheduler::enter_leaf`] with the packet's record and leaf at hand.
    #[inline]
    fn enter(&mut self, leaf: NodeId, pkt: u32, meta: &Meta, now: u64) {
        let item = if self.nodes[leaf as usize].mode == Mode::PerMember {
            meta.flow
        } else {
            pkt
        };
        self.give(leaf, item, meta, now);
        self.pass_up(leaf, meta, now);
    }

    /// Node `n` is given a packet from its member `item` (child slot, flow, or the packet itself).
    #[inline]
    fn give(&mut self, n: NodeId, item: u32, meta: &Meta, now: u64) {
        let node = &mut self.nodes[n as usize];
        node.stats.arrived += 1;
        let (tags, cfg) = if node.leaf {
            (
                &mut self.flows.flows[meta.flow as usize].member,
                &node.member_cfg[0],
            )
        } else {
            (
                &mut node.members[item as usize],
                &node.member_cfg[item as usize],
            )
        };
        match node.mode {
            Mode::PerPacket => {
                let floor = if node.policy.ranks_by_time() {
                    node.queues[0].peek_min().map_or(now, |e| e.rank)
                } else {
                    now
                };
                let rank = node
                    .policy
                    .rank_packet(&mut tags.tags, cfg, meta, now, floor);
                let _ = node.queues[0].push(rank, item);
            }
            Mode::PerMember => {
                tags.available += 1;
                let ranks = if tags.available == 1 {
                    // The node held nothing before this packet (what arrived has all left): a
                    // busy period begins. Counted rather than read from its queues: two
                    // numbers at hand instead of a look into a queue per activation.
                    let idle = node.stats.arrived == node.stats.sent + 1;
                    debug_assert_eq!(idle, node.queues.iter().all(|q| q.is_empty()));
                    if idle {
                        node.policy.busy();
                    }
                    Some(node.policy.activate(&mut tags.tags, cfg, meta, now))
                } else {
                    node.policy
                        .arrived(&mut tags.tags, cfg, meta, tags.available, now)
                };
                if let Some(ranks) = ranks {
                    place(
                        &mut node.queues,
                        &mut node.first_seen,
                        tags,
                        ranks,
                        item,
                        None,
                    );
                }
            }
        }
    }

    /// Node `n` has a new packet available: pass it through `n`'s gate to its parent, and on up.
    #[inline(always)]
    fn pass_up(&mut self, n: NodeId, meta: &Meta, now: u64) {
        // A leaf that is the root (one node: pfabric, fq, an hClock over flows) only counts
        // the packet ready; the walk up, a call of its own, is for deeper trees.
        if self.nodes[n as usize].parent.is_none() {
            self.ready += 1;
            return;
        }
        self.pass_up_walk(n, meta, now);
    }

    /// [`Scheduler::pass_up`] from a node that has a parent.
    fn pass_up_walk(&mut self, mut n: NodeId, meta: &Meta, now: u64) {
        loop {
            let node = &self.nodes[n as usize];
            let Some(p) = node.parent else {
                // The root's gate acts at dequeue.
                self.ready += 1;
                return;
            };
            let slot = node.slot;
            if node.gate.is_some() || !node.line.is_idle() {
                match self.at_gate(n, meta.len, now) {
                    Verdict::Pass => {}
                    Verdict::Hold => {
                        self.nodes[n as usize].stats.shaped += 1;
                        return self.hold(n, meta);
                    }
                    Verdict::Park(t) => {
                        self.nodes[n as usize].stats.shaped += 1;
                        return self.park_node(t, now, n, meta);
                    }
                }
            }
            self.give(p, slot, meta, now);
            n = p;
        }
    }

    /// A record passed node `node`'s gate at `now`: its packet continues up.
    fn pass_node(&mut self, node: NodeId, meta: &Meta, now: u64) {
        match self.nodes[node as usize].parent {
            None => self.ready += 1,
            Some(p) => {
                let slot = self.nodes[node as usize].slot;
                self.give(p, slot, meta, now);
                self.pass_up(p, meta, now);
            }
        }
    }

    /// The record of queued packet `pkt`, in its flow's slots or in the slab.
    #[inline]
    fn rec(&self, pkt: u32) -> &Rec {
        rec_of(&self.flows.flows, &self.packets.items, pkt).expect("a queued packet has a record")
    }

    /// Free the record of packet `pkt` of flow `flow`.
    #[inline]
    fn release_packet(&mut self, flow: FlowId, pkt: u32) {
        self.held -= 1;
        if pkt & INLINE != 0 {
            self.flows.flows[flow as usize].slots_used &= !(1 << (pkt & 1));
        } else {
            self.packets.release(pkt);
        }
    }

    /// When something may next be dequeued: `now` if a packet is ready, else the shaper's next
    /// release, or `None` if nothing is held. A host sleeps until then, and asks again if
    /// `dequeue` then finds nothing: a release may move a packet on to another gate that holds
    /// it, and while the shaper holds other items, the wake of the releases beyond its horizon
    /// wakes the host at the horizon's end, to be filed again (each answer is later than the
    /// last).
    /// When it holds only such releases, the answer is the first one's time (its slot's).
    pub fn next_event(&self, now: u64) -> Option<u64> {
        let link_free = self.nodes[0].gate.map_or(0, |g| g.next_free());
        // `shaper_due` is u64::MAX both for an empty shaper and for releases at the end of
        // time (a stamp saturates there): asked of the shaper, a host holding such a release
        // is not told that nothing is held.
        let ready_at = if self.ready > 0 {
            Some(now)
        } else if self.far.wake.is_some() && self.shaper.len() == 1 {
            // Only the wake is in the shaper: nothing comes before the first release beyond
            // the horizon, and its `dequeue` brings it in (due at its slot's start, as it
            // would be in the shaper), but not before the wake's own time: a host whose `now`
            // went back may have filed it at the shaper's front, past that release (told the
            // release's time, such a host found nothing and was told it again).
            self.far
                .first()
                .map(|t| self.horizon.slot_start(t).max(self.shaper_due))
        } else {
            (!self.shaper.is_empty()).then_some(self.shaper_due)
        };
        ready_at.map(|t| t.max(link_free).max(now))
    }

    /// Take the next packet to send at `now`, if any is ready.
    #[inline]
    pub fn dequeue(&mut self, now: u64) -> Option<Dequeued> {
        self.clock = self.clock.max(now);
        self.release_due(now);
        if self.ready == 0 {
            return None;
        }
        if self.nodes[0].gate.is_some_and(|g| g.next_free() > now) {
            self.root_waited = true;
            return None;
        }
        self.dequeue_ready(now)
    }

    /// [`Scheduler::dequeue`] once a packet may leave: a function of its own, so that the calls
    /// that find nothing to send (a host polling, a closed root gate) stay a few instructions.
    #[inline(never)]
    fn dequeue_ready(&mut self, now: u64) -> Option<Dequeued> {
        self.ready -= 1;
        let mut depth = 0;
        let mut n: NodeId = 0;
        let pkt = loop {
            let node = &mut self.nodes[n as usize];
            let (item, rank, from, upcoming) = match node.mode {
                Mode::PerPacket => {
                    let e = node.queues[0].pop_min()?;
                    (e.item, e.rank, 0, Upcoming::EMPTY)
                }
                Mode::PerMember => pick(&node.queues, &mut node.first_seen, node.dual, now)?,
            };
            self.path[depth] = Step {
                node: n,
                item,
                rank,
                from,
            };
            depth += 1;
            if !node.leaf {
                n = node.children[item as usize];
                continue;
            }
            break match node.mode {
                Mode::PerPacket => item,
                Mode::PerMember => {
                    if self.prefetch {
                        prefetch_members(&self.flows.flows, &self.packets.items, upcoming);
                    }
                    let f = &mut self.flows.flows[item as usize];
                    let pkt = f.head;
                    f.head = f.rec(&self.packets.items, pkt).next;
                    if f.head == NIL {
                        f.tail = NIL;
                    } else if self.prefetch {
                        // A departure is when a flow's next packet comes (TSQ in a host
                        // stack; zD admission in sluice-flow, two packets in flight per flow),
                        // and its arrival writes the flow's last record: load that now.
                        prefetch(f.rec(&self.packets.items, f.tail));
                    }
                    pkt
                }
            };
        };
        let meta = self.rec(pkt).meta;
        let root = &mut self.nodes[0];
        // Taken whether or not the gate is still there (`set_rate` may have removed it since
        // the packet waited), so that it never counts a later packet.
        let waited = std::mem::take(&mut self.root_waited);
        if let Some(g) = root.gate.as_mut() {
            g.stamp(now, meta.len);
            root.stats.shaped += u64::from(waited);
        }
        for d in (0..depth).rev() {
            let step = self.path[d];
            self.account(&step, &meta, now);
        }
        let f = &mut self.flows.flows[meta.flow as usize];
        f.queued -= 1;
        f.passed -= 1;
        let (key, leaf, emptied) = (f.key, f.leaf, f.queued == 0);
        let waiting = f.gate_next != NIL && !f.parked;
        if emptied {
            self.flows.emptied(meta.flow);
        }
        self.release_packet(meta.flow, pkt);
        if waiting {
            self.admit(meta.flow, now);
        }
        self.stats.dequeued += 1;
        Some(Dequeued {
            token: meta.token,
            len: meta.len,
            flow: key,
            flow_id: meta.flow,
            leaf,
            arrival: meta.arrival,
        })
    }

    /// After `meta` left through `step.node`: count it and re-rank the member it came from.
    fn account(&mut self, step: &Step, meta: &Meta, now: u64) {
        let node = &mut self.nodes[step.node as usize];
        node.stats.sent += 1;
        node.stats.sent_bytes += u64::from(meta.len);
        match node.mode {
            Mode::PerPacket => node.policy.popped(step.rank, meta, now),
            Mode::PerMember => {
                let (m, cfg, head, slots) = if node.leaf {
                    let f = &mut self.flows.flows[step.item as usize];
                    (&mut f.member, &node.member_cfg[0], f.head, &f.slots[..])
                } else {
                    (
                        &mut node.members[step.item as usize],
                        &node.member_cfg[step.item as usize],
                        NIL,
                        &[][..],
                    )
                };
                m.available -= 1;
                let available = m.available;
                let slab = &self.packets.items[..];
                let backlog = move || FlowBacklog {
                    head,
                    available,
                    slots,
                    slab,
                };
                let ranks = node.policy.served_by(
                    &mut m.tags,
                    cfg,
                    meta,
                    available,
                    backlog,
                    step.from,
                    now,
                );
                if m.available > 0 {
                    let served = Served {
                        from: step.from,
                        rank: step.rank,
                        kept: node.policy.keeps(step.from),
                    };
                    place(
                        &mut node.queues,
                        &mut node.first_seen,
                        m,
                        ranks,
                        step.item,
                        Some(served),
                    );
                } else {
                    node.first_seen = 0;
                    for (q, h) in node.queues.iter_mut().zip(m.handles.iter_mut()) {
                        if let Some(h) = h.take() {
                            let _ = q.remove(h);
                        }
                    }
                }
                if node.policy.virtual_time().is_some_and(|v| v >= REBASE_AT) {
                    self.rebase(step.node);
                }
            }
        }
    }

    /// Lower node `n`'s virtual time before it overflows ([`Policy::rebase`]): every member's
    /// tags go down by the same amount, and each queue is emptied in order and refilled in that
    /// order at the members' new ranks. O(members of the node, and for a leaf the flow table),
    /// once per about 2^62 units of virtual time (it rebases at [`REBASE_AT`], down to below
    /// 2^41): an hour and a half at the fastest (one weight-1 member alone at 100 Gbit/s), days
    /// at the rates of most classes.
    #[cold]
    #[inline(never)]
    fn rebase(&mut self, n: NodeId) {
        let node = &mut self.nodes[n as usize];
        let d = node.policy.rebase();
        node.stats.rebases += 1;
        node.first_seen = 0;
        if node.leaf {
            let cfg = &node.member_cfg[0];
            for f in self.flows.flows.iter_mut().filter(|f| f.leaf == n) {
                node.policy.shifted(&mut f.member.tags, cfg, d);
            }
        } else {
            for (m, cfg) in node.members.iter_mut().zip(&node.member_cfg) {
                node.policy.shifted(&mut m.tags, cfg, d);
            }
        }
        let order = &mut self.rebase_order;
        for (i, q) in node.queues.iter_mut().enumerate() {
            order.clear();
            order.extend(std::iter::from_fn(|| q.pop_min().map(|e| e.item)));
            for &item in order.iter() {
                let (m, cfg) = if node.leaf {
                    let f = &mut self.flows.flows[item as usize];
                    (&mut f.member, &node.member_cfg[0])
                } else {
                    (
                        &mut node.members[item as usize],
                        &node.member_cfg[item as usize],
                    )
                };
                // Shifted already: by 0 gives the ranks its tags have now.
                let rank = node.policy.shifted(&mut m.tags, cfg, 0)[i];
                m.handles[i] = q.push(rank, item).ok();
                // Ranks keep their distances from the queue's minimum, so each fits again.
                debug_assert!(m.handles[i].is_some(), "rebase lost a member");
            }
        }
    }

    /// The leaf a packet would be classified to (`None`: no rule and no default).
    #[inline(never)]
    pub fn classify(&self, p: &Packet) -> Option<NodeId> {
        match &self.rule_index {
            None => self.classifier.classify(p),
            Some(index) => index.classify(&self.classifier, p),
        }
    }

    /// How many classifier rules test the host-given class id ([`Packet::class`]): a host that
    /// gives its packets none (the daemon, which classifies the frames it parses) sends no
    /// packet through them.
    pub fn class_rules(&self) -> usize {
        self.classifier
            .rules
            .iter()
            .filter(|r| r.all.iter().any(|m| matches!(m, Match::Class(_))))
            .count()
    }

    /// How many classifier rules ask for the ports of a protocol other than TCP and UDP
    /// (SCTP, DCCP, UDP-Lite): a host may fill those in, but the daemon reads the ports of
    /// TCP and UDP only, so there these rules match no packet.
    pub fn port_rules_beyond_tcp_udp(&self) -> usize {
        self.classifier
            .rules
            .iter()
            .filter(|r| {
                let ports = r
                    .all
                    .iter()
                    .any(|m| matches!(m, Match::Sport(..) | Match::Dport(..)));
                ports
                    && r.all
                        .iter()
                        .any(|m| matches!(m, Match::Proto(p) if *p != 6 && *p != 17))
            })
            .count()
    }

    /// When the flow `key` in `leaf` could release a packet through its own gate (its pacing
    /// rate) after those it holds, if it has one: the gate's last timestamp, moved on by the
    /// packets that wait at the gate unstamped (behind the one in the shaper, or for one of
    /// those past the gate to leave), as if each were stamped as soon as it may be. The rank
    /// of a rate-limit ordered paused-sources queue. O(packets waiting at the gate). (A
    /// packet it holds may leave earlier; the timestamp alone left out those waiting, 36 ms
    /// early for three 1500 B packets at 1 Mbit/s.)
    pub fn flow_next_release(&self, leaf: NodeId, key: u64) -> Option<u64> {
        let id = self.flows.find(key, leaf)?;
        let f = &self.flows.flows[id as usize];
        let mut gate = f.gate?;
        // The one in the shaper was stamped; those after it were not.
        let mut pkt = match f.gate_next {
            NIL => NIL,
            first if f.parked => f.rec(&self.packets.items, first).next,
            first => first,
        };
        while pkt != NIL {
            let rec = f.rec(&self.packets.items, pkt);
            gate.stamp(gate.next_free(), rec.meta.len);
            pkt = rec.next;
        }
        Some(gate.next_free())
    }

    /// The flow id of `key` in `leaf`, if present.
    pub fn flow_id(&self, leaf: NodeId, key: u64) -> Option<FlowId> {
        self.flows.find(key, leaf)
    }
}

/// Whether idle flow `f` still owes its leaf's policy service it had ahead of its share
/// ([`Policy::owes`]) while the leaf holds packets (at the leaf, at their flows' gates or in
/// the shaper), so that its slot is not given to a new flow ([`FlowTable::get_or_insert`]).
/// Those packets' service pays the debt. Once the leaf holds none, nothing would: a debt kept
/// then could keep the slot for good, so it is forgotten with the flow.
fn owes_busy_leaf(nodes: &[Node], f: &Flow) -> bool {
    let leaf = &nodes[f.leaf as usize];
    leaf.stats.enqueued != leaf.stats.sent && leaf.policy.owes(&f.member.tags, &leaf.member_cfg[0])
}

/// Pick the member to serve from a per-member node's queue(s): for a dual policy, the first
/// reservation if it is due (looked at only once `now` reaches `first_seen`, see
/// [`Node::first_seen`]), else the first share. Also names the members that the queue picked
/// from serves next ([`RankQueue::upcoming`], found by the same search), for prefetching.
#[inline]
fn pick<'q>(
    queues: &'q [AnyQueue<u32>],
    first_seen: &mut Rank,
    dual: bool,
    now: u64,
) -> Option<(u32, Rank, usize, Upcoming<'q, u32>)> {
    if dual {
        if now >= *first_seen {
            match peek_upcoming(&queues[0]) {
                Some((e, up)) if e.rank <= now => return Some((e.item, e.rank, 0, up)),
                Some((e, _)) => *first_seen = e.rank,
                None => *first_seen = Rank::MAX,
            }
        }
        let (e, up) = peek_upcoming(&queues[1])?;
        return Some((e.item, e.rank, 1, up));
    }
    let (e, up) = queues[0].peek_upcoming()?;
    Some((e.item, e.rank, 0, up))
}

/// [`RankQueue::peek_upcoming`], with cFFS's (what `auto` gives hClock's two queues) inlined,
/// so that a dual node's pick skips the dispatch's jump, its register saves and the answer
/// written to memory: callgrind, hclock at 1e3 flows, 1326.5 -> 1291.9 instructions per
/// packet, 1209.3 -> 1172.3 at 1e6. Single-queue nodes keep the one call (inlined there too,
/// pfabric, whose queue is no cFFS, took 5 more).
#[inline(always)]
fn peek_upcoming(q: &AnyQueue<u32>) -> Option<(Entry<u32>, Upcoming<'_, u32>)> {
    match q {
        AnyQueue::Cffs(c) => c.peek_upcoming(),
        q => q.peek_upcoming(),
    }
}

/// Start loading the flows that a per-member leaf serves after the one it serves now
/// (`upcoming`, the current one first): the next one's first packet record, the lines of those
/// after it.
#[inline]
fn prefetch_members(flows: &[Flow], packets: &[Rec], upcoming: Upcoming<'_, u32>) {
    if let Some(f) = upcoming.get(1).and_then(|flow| flows.get(flow as usize)) {
        if let Some(r) = rec_of(flows, packets, f.head) {
            prefetch(r);
        }
    }
    for k in 2..PREFETCH_AHEAD {
        if let Some(f) = upcoming.get(k).and_then(|flow| flows.get(flow as usize)) {
            // Both lines: a departure reads the second one too (the key and leaf it reports).
            prefetch(f);
            prefetch(&f.gate);
        }
    }
}

/// What [`place`] knows after a service without reading the queues.
#[derive(Clone, Copy)]
struct Served {
    /// The queue the member was picked from, and its rank there.
    from: usize,
    rank: Rank,
    /// The queue whose rank the service left as it was ([`Policy::keeps`]).
    kept: Option<usize>,
}

/// Put `member` at `ranks` in `queues` (moving it if it is there already). After a service
/// (`served`), a member whose rank in a queue is unchanged keeps its place there, ahead of
/// members of equal rank pushed later (a DRR or fq flow with credit left is served again, as in
/// DRR and fq; an hClock member served by share keeps its place among equal reservation tags),
/// and that queue is not touched. After an arrival (`served` is `None`) the policy has said its
/// ranks changed ([`Policy::arrived`]): the member moves in every queue.
// Always inlined into its two callers: as a call, its argument passing and register saves
// cost pfabric 4% and hclock 3.5% of their instructions per packet (callgrind, 1e3 flows).
#[inline(always)]
fn place(
    queues: &mut [AnyQueue<u32>],
    first_seen: &mut Rank,
    m: &mut Member,
    ranks: [Rank; 2],
    item: u32,
    served: Option<Served>,
) {
    // Unrolled over the one or two queues: the loop over the slice cost about 17 instructions
    // per packet in bounds checks and iterator state (callgrind, hclock at 1e3 flows).
    let [q0, rest @ ..] = queues else {
        return;
    };
    if place_in::<false>(q0, &mut m.handles[0], ranks[0], item, served, 0) {
        *first_seen = 0; // queue 0 changed: look again
    }
    if let [q1, ..] = rest {
        place_in::<true>(q1, &mut m.handles[1], ranks[1], item, served, 1);
    }
}

/// [`place`] in queue `i` (`q`), where the member sits at `handle`; true if it moved. With
/// `CFFS`, a cFFS queue's requeue is inlined (see [`requeue`]).
#[inline(always)]
fn place_in<const CFFS: bool>(
    q: &mut AnyQueue<u32>,
    handle: &mut Option<Handle>,
    rank: Rank,
    item: u32,
    served: Option<Served>,
    i: usize,
) -> bool {
    if let Some(h) = *handle {
        let unchanged = match served {
            // The rank there is known without reading the queue: the one picked, or one the
            // service cannot have changed (unless the member's configuration lost it since).
            Some(s) if s.from == i => s.rank == rank,
            Some(s) if s.kept == Some(i) && rank != ABSENT => {
                debug_assert_eq!(q.rank_of(h), Some(rank), "a kept rank changed");
                true
            }
            Some(_) => q.rank_of(h) == Some(rank),
            None => false,
        };
        if unchanged {
            return false;
        }
    }
    *handle = match (*handle, rank != ABSENT) {
        (Some(h), true) if CFFS => requeue(q, h, rank, item),
        (Some(h), true) => q.requeue(h, rank, item).ok(),
        (Some(h), false) => {
            let _ = q.remove(h);
            None
        }
        (None, true) => q.push(rank, item).ok(),
        (None, false) => None,
    };
    true
}

/// [`RankQueue::requeue`], with cFFS's (what `auto` gives a dual node's share queue) inlined:
/// hClock re-ranks the member it served there on nearly every packet, and without the
/// dispatch's jump, register saves and the answer written to memory, callgrind, hclock at 1e3
/// flows, went 1291.9 -> 1269.6 instructions per packet (1172.3 -> 1145.8 at 1e6). Only for a
/// dual node's second queue: single-queue nodes keep the one call (inlined for the first queue
/// too, pfabric, whose queue is no cFFS, took 11 more).
#[inline(always)]
fn requeue(q: &mut AnyQueue<u32>, h: Handle, rank: Rank, item: u32) -> Option<Handle> {
    match q {
        AnyQueue::Cffs(c) => c.requeue_inlined(h, rank, item).ok(),
        q => q.requeue(h, rank, item).ok(),
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("nodes", &self.nodes.len())
            .field("packets", &self.held)
            .field("shaped", &self.shaped())
            .field("ready", &self.ready)
            .finish()
    }
}

#[cfg(test)]
mod horizon_tests;
#[cfg(test)]
mod rebase_tests;
