//! Differential tests: the scheduler against the plain reference interpreter
//! ([`sluice_sched::oracle::OracleTree`]) on random trees, random policies at every node,
//! random queue structures (every exact kind, and bucketed kinds whose filing the oracle
//! models exactly), random rate limits and flow pacing, and random traffic over time. Every
//! enqueue result, every departure and every `next_event` must agree, and the scheduler's
//! counters (accepted per leaf, refused per reason, sent through each node) must match what
//! the test counts itself. Every other case runs the scheduler with its cache prefetch hints
//! on, which must change nothing.

use proptest::prelude::*;
use sluice_queue::{Overflow, QueueKind};
use sluice_sched::classify::Match;
use sluice_sched::oracle::OracleTree;
use sluice_sched::{
    Dequeued, Fields, NodeId, NodeSpec, Packet, PolicyKind, QueueChoice, Rate, RejectReason,
    SchedConfig, Scheduler, ShaperConfig, TreeBuilder, units::MAX_RATE_BPS,
};

/// Queue structures the oracle models exactly (the approximate ones are tested elsewhere).
/// (Not the timing wheel: it is the shaper's, and the builder refuses it for nodes.)
const KINDS: [QueueKind; 8] = [
    QueueKind::BinaryHeap,
    QueueKind::BTree,
    QueueKind::SkipList,
    QueueKind::Cffs,
    QueueKind::HierFfs,
    QueueKind::Ffs,
    QueueKind::BucketHeap,
    QueueKind::Gradient,
];

/// Kinds the oracle models that follow ranks moving forward without bound (a moving range or
/// an exact order).
const FOLLOWING: [QueueKind; 4] = [
    QueueKind::Cffs,
    QueueKind::BinaryHeap,
    QueueKind::BTree,
    QueueKind::SkipList,
];

/// Kind `k` of [`KINDS`] for a node with `policy`, unless its range is fixed and the policy's
/// ranks move (the builder refuses that): then one of [`FOLLOWING`].
fn kind_for(policy: PolicyKind, k: usize) -> QueueKind {
    match KINDS[k % KINDS.len()] {
        kind if policy.moving_ranks() && !kind.moving_range() && !kind.exact() => {
            FOLLOWING[k % FOLLOWING.len()]
        }
        kind => kind,
    }
}

const INTERNAL: [PolicyKind; 9] = [
    PolicyKind::Fifo,
    PolicyKind::Prio,
    PolicyKind::Wfq,
    PolicyKind::Drr,
    PolicyKind::Edf,
    PolicyKind::Lstf,
    PolicyKind::Lqf,
    PolicyKind::HClock,
    PolicyKind::Htb,
];

const LEAF: [PolicyKind; 10] = [
    PolicyKind::Fifo,
    PolicyKind::Prio,
    PolicyKind::Wfq,
    PolicyKind::Drr,
    PolicyKind::Edf,
    PolicyKind::Lstf,
    PolicyKind::Pfabric,
    PolicyKind::Lqf,
    PolicyKind::HClock,
    PolicyKind::Fq,
];

#[derive(Clone, Debug)]
struct NodeGen {
    parent: usize,
    policy: usize,
    kind: usize,
    buckets: usize,
    granularity: u64,
    rate_kbit: Option<u64>,
    burst: u64,
    weight: u32,
    priority: u8,
    quantum: u32,
    reservation_kbit: Option<u64>,
    flow_rate_kbit: Option<u64>,
}

fn node_gen() -> impl Strategy<Value = NodeGen> {
    (
        any::<usize>(),
        any::<usize>(),
        any::<usize>(),
        prop_oneof![Just(1usize), 2usize..64, Just(4096)],
        prop_oneof![Just(1u64), Just(1024), Just(1 << 20)],
        prop::option::weighted(0.3, 500u64..100_000),
        prop_oneof![Just(0u64), 1500u64..20_000],
        1u32..6,
        0u8..4,
        200u32..4000,
        prop::option::weighted(0.4, 500u64..50_000),
        prop::option::weighted(0.3, 500u64..50_000),
    )
        .prop_map(
            |(
                parent,
                policy,
                kind,
                buckets,
                granularity,
                rate_kbit,
                burst,
                weight,
                priority,
                quantum,
                reservation_kbit,
                flow_rate_kbit,
            )| NodeGen {
                parent,
                policy,
                kind,
                buckets,
                granularity,
                rate_kbit,
                burst,
                weight,
                priority,
                quantum,
                reservation_kbit,
                flow_rate_kbit,
            },
        )
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        class: u32,
        flow: u64,
        len: u32,
        priority: u8,
        deadline: u64,
        slack: u64,
        remaining: u64,
        pacing_kbit: u64,
    },
    Dequeue,
    Advance(u64),
    /// Run-time changes: node `node % nodes`'s rate limit (`None` removes it), its weight or
    /// reservation in its parent, or the pacing rate of flow `flow` in the leaf `class` maps to.
    SetRate {
        node: usize,
        rate: Option<Rate>,
        burst: u64,
    },
    SetWeight {
        node: usize,
        weight: u32,
    },
    SetReservation {
        node: usize,
        rate: Option<Rate>,
    },
    SetFlowRate {
        class: u32,
        flow: u64,
        rate: Option<Rate>,
    },
}

/// A rate of 500 kbit/s to 100 Mbit/s (`some` times in 10), or none.
fn maybe_rate(some: u32) -> impl Strategy<Value = Option<Rate>> {
    prop_oneof![some => (500u64..100_000).prop_map(|k| Some(kbit(k))), 10 - some => Just(None)]
}

/// One run-time change, for [`op`].
fn change() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            any::<usize>(),
            maybe_rate(6),
            prop_oneof![Just(0u64), 1500u64..20_000]
        )
            .prop_map(|(node, rate, burst)| Op::SetRate { node, rate, burst }),
        (any::<usize>(), 0u32..8).prop_map(|(node, weight)| Op::SetWeight { node, weight }),
        (any::<usize>(), maybe_rate(7)).prop_map(|(node, rate)| Op::SetReservation { node, rate }),
        (0u32..8, 0u64..12, maybe_rate(5)).prop_map(|(class, flow, rate)| Op::SetFlowRate {
            class,
            flow,
            rate
        }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u32..8, 0u64..12, prop_oneof![Just(1500u32), 40u32..9000], 0u8..4, 0u64..10_000_000, 0u64..5_000_000, 1u64..10_000_000, prop_oneof![16 => Just(0u64), 2 => 100u64..100_000, 1 => Just(u64::MAX)])
            .prop_map(|(class, flow, len, priority, deadline, slack, remaining, pacing_kbit)| Op::Enqueue { class, flow, len, priority, deadline, slack, remaining, pacing_kbit }),
        5 => Just(Op::Dequeue),
        2 => (0u64..2_000_000).prop_map(Op::Advance),
        1 => change(),
    ]
}

fn kbit(k: u64) -> Rate {
    Rate::from_bps(k * 1000).expect("positive rate")
}

/// The shaper most tests use: a timing wheel with a 4 ms horizon (slow pacing reaches it).
const WHEEL: Shaper = Shaper {
    kind: 0,
    reject: false,
};

/// The shaper's structure (`SHAPERS[kind % 3]`) and what a flow's release beyond its horizon
/// does: clamped, or the packet rejected (a horizon only the wheel has).
#[derive(Clone, Copy, Debug)]
struct Shaper {
    kind: usize,
    reject: bool,
}

/// Shaper structures the oracle models exactly.
const SHAPERS: [QueueKind; 3] = [
    QueueKind::TimingWheel,
    QueueKind::BinaryHeap,
    QueueKind::SkipList,
];

/// Which queues [`tree`] gives its nodes.
#[derive(Clone, Copy, PartialEq)]
enum Queues {
    /// The generated kind, buckets and granularity of each node (what the oracle models).
    Generated,
    /// The generated kind and buckets, their granularity sized by the builder (which widens
    /// a reservation queue for a slower reservation set at run time).
    Sized,
    /// `auto` everywhere, as a policy file without `queue` keys gets.
    Auto,
}

/// Build the tree described by `gens` (node i's parent is some node before it), holding at
/// most `capacity` packets and `flows` flows, on `queues`.
fn tree(
    gens: &[NodeGen],
    capacity: usize,
    flows: usize,
    shaper: Shaper,
    queues: Queues,
) -> TreeBuilder {
    let n = gens.len();
    let parents: Vec<Option<usize>> = (0..n)
        .map(|i| (i > 0).then(|| gens[i].parent % i))
        .collect();
    let is_leaf: Vec<bool> = (0..n).map(|i| !parents.contains(&Some(i))).collect();
    let cfg = SchedConfig {
        capacity,
        flows,
        max_packet: 9000,
        shaper: ShaperConfig {
            kind: SHAPERS[shaper.kind % SHAPERS.len()],
            slots: 4096,
            slot_ns: 1024,
            beyond_horizon: if shaper.reject {
                Overflow::Reject
            } else {
                Overflow::Clamp
            },
        },
    };
    let mut b = TreeBuilder::new(cfg);
    let mut ids = Vec::new();
    for (i, g) in gens.iter().enumerate() {
        let policy = if is_leaf[i] {
            LEAF[g.policy % LEAF.len()]
        } else {
            INTERNAL[g.policy % INTERNAL.len()]
        };
        let mut spec = NodeSpec::new(&format!("n{i}"), policy);
        if queues != Queues::Auto {
            spec.queue = QueueChoice::Kind {
                kind: kind_for(policy, g.kind),
                buckets: Some(g.buckets),
                granularity: (queues == Queues::Generated).then_some(g.granularity),
            };
        }
        if let Some(r) = g.rate_kbit {
            spec = spec.rate(kbit(r), g.burst);
        }
        spec.member.weight = g.weight;
        spec.member.priority = Some(g.priority);
        spec.member.quantum = g.quantum;
        spec.member.reservation = g.reservation_kbit.map(kbit);
        spec.flows.quantum = g.quantum;
        spec.flows.reservation = g.reservation_kbit.map(kbit);
        spec.flow_rate = g.flow_rate_kbit.map(kbit);
        spec.flow_burst = g.burst;
        let id = match parents[i] {
            None => b.root(spec),
            Some(p) => b.child(ids[p], spec),
        };
        ids.push(id);
    }
    let leaves: Vec<usize> = (0..n).filter(|&i| is_leaf[i]).collect();
    for class in 0..6u32 {
        b.rule(
            vec![Match::Class(class)],
            ids[leaves[class as usize % leaves.len()]],
        );
    }
    b.default_leaf(ids[leaves[0]]);
    b
}

/// How the packets' ranking fields are drawn.
#[derive(Clone, Copy, PartialEq)]
enum FieldsFrom {
    /// As each packet's `Op::Enqueue` says.
    PerPacket,
    /// The same for every packet of a flow (a deadline as far ahead of its arrival, a slack,
    /// a priority), which no policy may reorder: departures are checked to keep each flow's
    /// order too.
    PerFlow,
}

/// The counters a scheduler must show, as the test counts them itself: packets accepted per
/// leaf, refused per reason, and sent (packets, bytes) through each node.
#[derive(Default)]
struct Counted {
    enqueued: std::collections::HashMap<NodeId, u64>,
    refused: [u64; 5],
    sent: std::collections::HashMap<NodeId, (u64, u64)>,
    dequeued: u64,
}

impl Counted {
    fn enqueue(&mut self, s: &Scheduler, p: &Packet, result: Result<(), RejectReason>) {
        match result {
            Ok(()) => {
                let leaf = s.classify(p).expect("an accepted packet has a leaf");
                *self.enqueued.entry(leaf).or_default() += 1;
            }
            Err(reason) => self.refused[reason as usize] += 1,
        }
    }

    fn dequeue(&mut self, s: &Scheduler, d: &Option<Dequeued>) {
        let Some(d) = d else { return };
        self.dequeued += 1;
        let mut n = Some(d.leaf);
        while let Some(node) = n {
            let sent = self.sent.entry(node).or_default();
            (sent.0, sent.1) = (sent.0 + 1, sent.1 + u64::from(d.len));
            n = s.parent(node);
        }
    }

    /// `s`'s counters against these; `drained`: nothing is held, so every packet that became
    /// available at a node has left it.
    fn check(&self, s: &Scheduler, drained: bool) -> Result<(), TestCaseError> {
        let stats = s.stats();
        let enqueued: u64 = self.enqueued.values().sum();
        prop_assert_eq!(stats.enqueued, enqueued);
        prop_assert_eq!(stats.dequeued, self.dequeued);
        prop_assert_eq!(stats.rejected, self.refused);
        prop_assert_eq!(s.len() as u64, enqueued - self.dequeued);
        for n in 0..s.node_count() as NodeId {
            let node = s.node_stats(n);
            let (sent, bytes) = self.sent.get(&n).copied().unwrap_or_default();
            prop_assert_eq!((node.sent, node.sent_bytes), (sent, bytes), "node {}", n);
            prop_assert_eq!(
                node.enqueued,
                self.enqueued.get(&n).copied().unwrap_or(0),
                "node {}",
                n
            );
            prop_assert!(node.arrived >= node.sent, "node {}: {:?}", n, node);
            if drained {
                prop_assert_eq!(node.arrived, node.sent, "node {}", n);
            }
        }
        Ok(())
    }
}

/// The packets the operations offer: each `Op::Enqueue` made a [`Packet`] at its time, with
/// the flow's remaining size shrinking, a flow-id hint right, stale or wrong, and with
/// `FieldsFrom::PerFlow`, a flow's class and ranking fields fixed by the flow.
struct Traffic {
    fields: FieldsFrom,
    token: u64,
    remaining: std::collections::HashMap<u64, u64>,
    /// Each flow's id as its last departure named it (for the hints).
    last_id: std::collections::HashMap<u64, u32>,
    class_of: std::collections::HashMap<u64, u32>,
}

impl Traffic {
    fn new(fields: FieldsFrom) -> Self {
        Traffic {
            fields,
            token: 0,
            remaining: Default::default(),
            last_id: Default::default(),
            class_of: Default::default(),
        }
    }

    /// The packet `op` offers at `now`, if it is an `Op::Enqueue`.
    fn packet(&mut self, op: &Op, now: u64) -> Option<Packet> {
        let Op::Enqueue {
            class,
            flow,
            len,
            priority,
            deadline,
            slack,
            remaining: r,
            pacing_kbit,
        } = *op
        else {
            return None;
        };
        let (class, priority, deadline, slack) = match self.fields {
            FieldsFrom::PerPacket => (class, priority, deadline, slack),
            // A flow's class too: in another leaf its packets are another flow.
            FieldsFrom::PerFlow => (
                *self.class_of.entry(flow).or_insert(class),
                (flow % 3) as u8,
                flow * 1_000_003,
                flow * 999_983,
            ),
        };
        // A flow's remaining size only shrinks (what pFabric assumes of its senders).
        let rem = self.remaining.entry(flow).or_insert(r + 20_000);
        *rem = (*rem).saturating_sub(u64::from(len)).max(1);
        let token = self.token;
        self.token += 1;
        // The fast scheduler also gets flow-id hints, right, stale or wrong; the oracle has no
        // use for them. Hints only save lookups: both must behave the same whatever they say.
        let flow_id = match token % 4 {
            0 => None,
            1 => self.last_id.get(&flow).copied(),
            2 => Some((token % 7) as u32),
            _ => Some(u32::MAX),
        };
        Some(Packet {
            token,
            len,
            flow,
            class: Some(class),
            fields: Fields {
                priority,
                deadline: now + deadline,
                slack,
                remaining: *rem,
                pacing_bps: pacing_kbit.saturating_mul(1000),
            },
            flow_id,
            ..Packet::default()
        })
    }

    /// A departure: its flow's id is the next hint.
    fn left(&mut self, d: &Option<Dequeued>) {
        if let Some(d) = d {
            self.last_id.insert(d.flow, d.flow_id);
        }
    }
}

/// The run-time changes the scheduler and the oracle both take, so that [`apply`] makes an
/// [`Op`]'s change to either.
trait Changes {
    fn rate(&mut self, now: u64, n: NodeId, rate: Option<Rate>, burst: u64);
    fn weight(&mut self, n: NodeId, weight: u32) -> bool;
    fn reservation(&mut self, now: u64, n: NodeId, rate: Option<Rate>) -> bool;
    fn flow_rate(&mut self, now: u64, leaf: NodeId, key: u64, rate: Option<Rate>) -> bool;
}

macro_rules! changes {
    ($t:ty) => {
        impl Changes for $t {
            fn rate(&mut self, now: u64, n: NodeId, rate: Option<Rate>, burst: u64) {
                self.set_rate(now, n, rate, burst)
            }
            fn weight(&mut self, n: NodeId, weight: u32) -> bool {
                self.set_weight(n, weight)
            }
            fn reservation(&mut self, now: u64, n: NodeId, rate: Option<Rate>) -> bool {
                self.set_reservation(now, n, rate)
            }
            fn flow_rate(&mut self, now: u64, leaf: NodeId, key: u64, rate: Option<Rate>) -> bool {
                self.set_flow_rate(now, leaf, key, rate)
            }
        }
    };
}
changes!(Scheduler);
changes!(OracleTree);

/// Where a run-time change `op` applies in `s`'s tree: the node its `node` names, and the
/// leaf its `class` goes to (if any).
fn targets(op: &Op, s: &Scheduler) -> (NodeId, Option<NodeId>) {
    let (node, class) = match *op {
        Op::SetRate { node, .. } | Op::SetWeight { node, .. } | Op::SetReservation { node, .. } => {
            (node, None)
        }
        Op::SetFlowRate { class, .. } => (0, Some(class)),
        _ => (0, None),
    };
    let leaf = class.and_then(|class| {
        s.classify(&Packet {
            class: Some(class),
            ..Packet::default()
        })
    });
    ((node % s.node_count()) as NodeId, leaf)
}

/// Make run-time change `op` to `s` at `now`, on the node or leaf [`targets`] found: what the
/// call returned (`None` for `set_rate`, which returns nothing, and for a flow rate whose
/// class has no leaf).
fn apply(
    s: &mut impl Changes,
    op: &Op,
    now: u64,
    (n, leaf): (NodeId, Option<NodeId>),
) -> Option<bool> {
    match *op {
        Op::SetRate { rate, burst, .. } => {
            s.rate(now, n, rate, burst);
            None
        }
        Op::SetWeight { weight, .. } => Some(s.weight(n, weight)),
        Op::SetReservation { rate, .. } => Some(s.reservation(now, n, rate)),
        Op::SetFlowRate { flow, rate, .. } => leaf.map(|leaf| s.flow_rate(now, leaf, flow, rate)),
        _ => None,
    }
}

fn run(
    gens: &[NodeGen],
    capacity: usize,
    flows: usize,
    shaper: Shaper,
    ops: &[Op],
    fields: FieldsFrom,
    queues: Queues,
) -> Result<(), TestCaseError> {
    let b = tree(gens, capacity, flows, shaper, queues);
    let mut fast = b.build().expect("valid tree");
    // The cache prefetch hints, on by default only for tables beyond the caches, never change
    // what is scheduled: on in every other case.
    fast.set_prefetch(ops.len() % 2 == 1);
    let mut slow = OracleTree::new(&b).expect("modelled tree");
    let mut now = 1_000_000_000u64;
    let mut counted = Counted::default();
    let mut traffic = Traffic::new(fields);
    // Each flow's last departure, with `FieldsFrom::PerFlow`.
    let mut last_token = std::collections::HashMap::new();
    let mut in_order = |d: &Option<sluice_sched::Dequeued>| -> Result<(), TestCaseError> {
        if let (Some(d), FieldsFrom::PerFlow) = (d, fields)
            && let Some(prev) = last_token.insert(d.flow, d.token)
        {
            prop_assert!(
                prev < d.token,
                "flow {}: {} after {}",
                d.flow,
                d.token,
                prev
            );
        }
        Ok(())
    };
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Enqueue { .. } => {
                let p = traffic.packet(op, now).expect("an enqueue");
                let a = fast.enqueue(now, &p).map_err(|r| r.reason);
                counted.enqueue(&fast, &p, a);
                let o = slow.enqueue(now, &p);
                prop_assert_eq!(a, o, "step {}: enqueue", step);
            }
            Op::Dequeue => {
                let a = fast.dequeue(now);
                counted.dequeue(&fast, &a);
                traffic.left(&a);
                in_order(&a)?;
                let o = slow.dequeue(now);
                prop_assert_eq!(a, o, "step {}: dequeue at {}", step, now);
            }
            Op::Advance(dt) => now += dt,
            _ => {
                let at = targets(op, &fast);
                let (a, o) = (apply(&mut fast, op, now, at), apply(&mut slow, op, now, at));
                prop_assert_eq!(a, o, "step {}: {:?}", step, op);
            }
        }
        prop_assert_eq!(fast.len(), slow.len(), "step {}: held", step);
        counted.check(&fast, false)?;
        fast.check();
        prop_assert_eq!(
            fast.next_event(now),
            slow.next_event(now),
            "step {}: next_event",
            step
        );
    }
    // Drain both over time: the same departures to the end.
    for _ in 0..100_000 {
        match fast.next_event(now) {
            None => break,
            Some(t) => now = now.max(t),
        }
        let a = fast.dequeue(now);
        counted.dequeue(&fast, &a);
        in_order(&a)?;
        let o = slow.dequeue(now);
        prop_assert_eq!(a, o, "drain at {}", now);
    }
    prop_assert!(fast.is_empty() && slow.is_empty(), "both drained");
    counted.check(&fast, true)?;
    fast.check();
    Ok(())
}

/// How far behind the latest time a call's `now` is: mostly not at all, often by up to 2 ms
/// (clocks of different cores, timestamps taken before a wait), now and then by up to 2 s
/// (a clock stepped back; from the start's 1 s, to time 0).
fn lag() -> impl Strategy<Value = u64> {
    prop_oneof![8 => Just(0u64), 3 => 0u64..2_000_000, 1 => 0u64..2_000_000_000]
}

/// A rate from 1 bit/s to `max`, as likely between 1 and 2 bit/s as between 1 and 2 Tbit/s.
fn any_rate_bps(max: u64) -> impl Strategy<Value = u64> {
    (0..=max.ilog2(), any::<u64>())
        .prop_map(move |(e, x)| ((1u64 << e) | (x & ((1u64 << e) - 1))).min(max))
}

/// A packet's length and ranking fields as a host may give them, with no regard for what
/// makes sense: any priority, deadline, slack and remaining size (0 and `u64::MAX` among
/// them), lengths past `max_packet`, and pacing rates of none, the largest and beyond it.
fn wild_packet() -> impl Strategy<Value = (u32, Fields)> {
    let any_time = prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()];
    (
        prop_oneof![1u32..100_000, Just(9001u32)],
        any::<u8>(),
        any_time.clone(),
        any_time.clone(),
        any_time,
        prop_oneof![
            Just(0u64),
            Just(u64::MAX),
            Just(1 << 63),
            Just(1u64),
            any_rate_bps(1 << 63)
        ],
    )
        .prop_map(|(len, priority, deadline, slack, remaining, pacing_bps)| {
            let fields = Fields {
                priority,
                deadline,
                slack,
                remaining,
                pacing_bps,
            };
            (len, fields)
        })
}

/// A run-time change with any values a host may pass: rates from 1 bit/s to the largest,
/// bursts and weights from 0 to their type's largest. (At 1 bit/s a packet waits hours of the
/// host's time beyond the shaper's horizon; the drain is told its time by `next_event`.
/// Releases beyond the horizon used to hop through the wheel a horizon at a time, and these
/// rates stayed at 100 kbit/s or more: below, a case took minutes.)
fn wild_change() -> impl Strategy<Value = Op> {
    let bps = prop_oneof![Just(1u64), Just(MAX_RATE_BPS), any_rate_bps(MAX_RATE_BPS)];
    let rate = prop::option::weighted(0.8, bps.prop_map(|b| Rate::new(b).expect("in range")));
    let burst = prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()];
    let weight = prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()];
    prop_oneof![
        (any::<usize>(), rate.clone(), burst).prop_map(|(node, rate, burst)| Op::SetRate {
            node,
            rate,
            burst
        }),
        (any::<usize>(), weight).prop_map(|(node, weight)| Op::SetWeight { node, weight }),
        (any::<usize>(), rate.clone()).prop_map(|(node, rate)| Op::SetReservation { node, rate }),
        (0u32..8, 0u64..12, rate).prop_map(|(class, flow, rate)| Op::SetFlowRate {
            class,
            flow,
            rate
        }),
    ]
}

/// How a careless host calls the scheduler in [`run_without_oracle`], step by step (each list
/// may run out, and then the host is careful): how far behind the latest time each call's
/// `now` is, the length and fields that replace a packet's, and a change with any values
/// made after the step's operation.
#[derive(Default)]
struct Careless<'a> {
    lags: &'a [u64],
    packets: &'a [Option<(u32, Fields)>],
    changes: &'a [Option<Op>],
}

/// `ops` on the tree of `c` alone (no oracle), as a careless host may call it (`host`). The
/// scheduler promises such a host is safe: nothing panics, nothing is lost or sent twice, its
/// counters stay true, and every packet leaves once time moves on; and `next_event` is never
/// late. With `FieldsFrom::PerFlow`, also that no flow's packets leave out of order, unless
/// an EDF or LSTF node ranks them by times counted from the lagging `now`. The host that
/// drains it at the end sleeps until each `next_event`, however far (rates of 1 bit/s hold
/// packets for hours), and finds every packet gone within the steps it is given.
fn run_without_oracle(
    c: &Case,
    host: &Careless<'_>,
    fields: FieldsFrom,
) -> Result<(), TestCaseError> {
    let mut s = tree(&c.gens, c.capacity, c.flows, c.shaper, Queues::Generated)
        .build()
        .expect("valid tree");
    s.set_prefetch(c.ops.len() % 2 == 1);
    let mut latest = 1_000_000_000u64;
    let mut counted = Counted::default();
    let mut traffic = Traffic::new(fields);
    let mut accepted = std::collections::HashSet::new();
    let by_time = (0..s.node_count() as NodeId).any(|n| matches!(s.node_policy(n), "edf" | "lstf"));
    let in_order = fields == FieldsFrom::PerFlow && !by_time;
    let mut last_token = std::collections::HashMap::new();
    // A departure must be of a packet accepted and not yet sent, and after its flow's earlier
    // packets if they keep their order.
    let mut left = |accepted: &mut std::collections::HashSet<u64>, d: &Option<Dequeued>| {
        let Some(d) = d else { return Ok(()) };
        if !accepted.remove(&d.token) {
            return Err(TestCaseError::fail(format!(
                "token {} left twice or was never accepted",
                d.token
            )));
        }
        match last_token.insert(d.flow, d.token) {
            Some(prev) if in_order && prev > d.token => Err(TestCaseError::fail(format!(
                "flow {}: {} after {}",
                d.flow, d.token, prev
            ))),
            _ => Ok(()),
        }
    };
    for (step, op) in c.ops.iter().enumerate() {
        let lag = host.lags.get(step).copied().unwrap_or(0);
        let now = latest.saturating_sub(lag);
        match *op {
            Op::Enqueue { .. } => {
                let mut p = traffic.packet(op, now).expect("an enqueue");
                if let Some(Some((len, fields))) = host.packets.get(step) {
                    (p.len, p.fields) = (*len, *fields);
                }
                let a = s.enqueue(now, &p).map_err(|r| r.reason);
                counted.enqueue(&s, &p, a);
                if a.is_ok() {
                    accepted.insert(p.token);
                }
            }
            Op::Dequeue => {
                let d = s.dequeue(now);
                counted.dequeue(&s, &d);
                traffic.left(&d);
                left(&mut accepted, &d)?;
            }
            Op::Advance(dt) => latest += dt,
            _ => {
                let at = targets(op, &s);
                apply(&mut s, op, now, at);
            }
        }
        if let Some(Some(change)) = host.changes.get(step) {
            let at = targets(change, &s);
            apply(&mut s, change, now, at);
        }
        counted.check(&s, false).map_err(|e| {
            TestCaseError::fail(format!("step {step} at {now} (latest {latest}): {e}"))
        })?;
        // `next_event` is never late: it names no time past the first a packet may leave.
        // Every third step the host wakes early and finds nothing to send: halfway there, or
        // every other time a nanosecond before, so that no answer is late by even that much.
        if let Some(t) = s.next_event(now) {
            prop_assert!(t >= now, "step {}: wake at {} before {}", step, t, now);
            if step % 3 == 0 && t > now + 1 {
                let early = if step % 6 == 0 {
                    now + (t - now) / 2
                } else {
                    t - 1
                };
                let d = s.dequeue(early);
                prop_assert!(
                    d.is_none(),
                    "step {}: told {} at {}, but token {:?} left at {}",
                    step,
                    t,
                    now,
                    d.map(|d| d.token),
                    early
                );
                latest = latest.max(early);
            }
            // And a host told "now" that finds nothing to send is told a later time (else
            // it would spin). Asked every third step, at `now`, which may lag the latest.
            if step % 3 == 1 && t == now {
                let d = s.dequeue(now);
                moves_on(&s, now, &d)
                    .map_err(|e| TestCaseError::fail(format!("step {step}: {e}")))?;
                counted.dequeue(&s, &d);
                traffic.left(&d);
                left(&mut accepted, &d)?;
            }
        }
        s.check();
    }
    // Time moves on from the last step's `now`, which may lag the latest: every packet still
    // held leaves, once, and a host told a time at which it finds nothing to send is told a
    // later one.
    let last_lag = host.lags.get(c.ops.len() - 1).copied().unwrap_or(0);
    let mut now = latest.saturating_sub(last_lag);
    for _ in 0..100_000 {
        let Some(t) = s.next_event(now) else { break };
        prop_assert!(t >= now, "drain: wake at {} before {}", t, now);
        now = t;
        let d = s.dequeue(now);
        moves_on(&s, now, &d).map_err(|e| TestCaseError::fail(format!("drain: {e}")))?;
        counted.dequeue(&s, &d);
        left(&mut accepted, &d)?;
    }
    prop_assert!(
        s.is_empty(),
        "{} held at {} (latest {}), next event {:?}",
        s.len(),
        now,
        latest,
        s.next_event(now)
    );
    prop_assert!(accepted.is_empty(), "never left: {:?}", accepted);
    counted.check(&s, true)?;
    s.check();
    Ok(())
}

/// A host told to wake at `now` that found nothing there (`d`) must be told a later time, or
/// it would spin.
fn moves_on(s: &Scheduler, now: u64, d: &Option<Dequeued>) -> Result<(), String> {
    let again = s.next_event(now);
    match (d, again) {
        (None, Some(t)) if t <= now => Err(format!("found nothing at {now}, told {t} again")),
        _ => Ok(()),
    }
}

/// A random tree, its sizes and shaper, and what happens to it.
#[derive(Clone, Debug)]
struct Case {
    gens: Vec<NodeGen>,
    capacity: usize,
    flows: usize,
    shaper: Shaper,
    ops: Vec<Op>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(node_gen(), 1..7),
        prop_oneof![Just(4usize), 16usize..64, Just(10_000)],
        // Few flows: a full table reclaims an idle flow, or rejects a new one.
        prop_oneof![Just(1usize), 2usize..6, Just(1000)],
        (0usize..3, any::<bool>()).prop_map(|(kind, reject)| Shaper { kind, reject }),
        prop::collection::vec(op(), 1..300),
    )
        .prop_map(|(gens, capacity, flows, shaper, ops)| Case {
            gens,
            capacity,
            flows,
            shaper,
            ops,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn scheduler_matches_the_oracle(c in case()) {
        run(&c.gens, c.capacity, c.flows, c.shaper, &c.ops, FieldsFrom::PerPacket, Queues::Generated)?;
    }

    /// The same with the buckets' granularity sized by the builder, as a policy file that
    /// names a queue kind and no granularity gets.
    #[test]
    fn scheduler_matches_the_oracle_on_buckets_the_builder_sized(c in case()) {
        run(&c.gens, c.capacity, c.flows, c.shaper, &c.ops, FieldsFrom::PerPacket, Queues::Sized)?;
    }

    /// The same trees and operations, with ranking fields that stay the same within a flow:
    /// no policy on any structure, with rates, weights and reservations changed at run time,
    /// sends a flow's packets out of order.
    #[test]
    fn no_tree_reorders_a_flow(c in case()) {
        run(&c.gens, c.capacity, c.flows, c.shaper, &c.ops, FieldsFrom::PerFlow, Queues::Generated)?;
    }

    /// A `now` earlier than one already seen, as a host whose clock lags or steps back gives:
    /// nothing panics, is lost or sent twice, and the counters stay true.
    #[test]
    fn a_now_that_goes_back_loses_nothing(
        c in case(),
        lags in prop::collection::vec(lag(), 0..300),
    ) {
        let host = Careless { lags: &lags, ..Careless::default() };
        run_without_oracle(&c, &host, FieldsFrom::PerPacket)?;
    }

    /// With ranking fields fixed per flow and a lagging clock, no flow's packets leave out of
    /// order (but under EDF and LSTF, whose ranks count from the packet's `now`).
    #[test]
    fn a_now_that_goes_back_reorders_no_flow(
        c in case(),
        lags in prop::collection::vec(lag(), 0..300),
    ) {
        let host = Careless { lags: &lags, ..Careless::default() };
        run_without_oracle(&c, &host, FieldsFrom::PerFlow)?;
    }

    /// Packets with any priority, deadline, slack and remaining size, lengths past
    /// `max_packet` and pacing rates from 1 bit/s to `u64::MAX`: nothing panics, is lost or
    /// sent twice.
    #[test]
    fn any_field_values_lose_nothing(
        c in case(),
        wild in prop::collection::vec(prop::option::weighted(0.5, wild_packet()), 0..300),
    ) {
        let host = Careless { packets: &wild, ..Careless::default() };
        run_without_oracle(&c, &host, FieldsFrom::PerPacket)?;
    }

    /// Rates, bursts, weights and reservations changed at run time to any values (up to the
    /// largest rate, bursts and weights from 0 to their type's largest), among packets with
    /// any field values: nothing panics, is lost or sent twice.
    #[test]
    fn any_run_time_change_loses_nothing(
        c in case(),
        wild in prop::collection::vec(prop::option::weighted(0.3, wild_packet()), 0..300),
        changes in prop::collection::vec(prop::option::weighted(0.1, wild_change()), 1..300),
    ) {
        let host = Careless { packets: &wild, changes: &changes, ..Careless::default() };
        run_without_oracle(&c, &host, FieldsFrom::PerPacket)?;
    }
}

/// One policy at a time, in a two-level tree, over many operations: every policy is covered
/// on every structure the oracle models and the builder lets it have, not left to chance.
#[test]
fn every_policy_on_every_structure() {
    let mut rng = sluice_queue::workload::Rng::new(0xD1FF);
    let mut pick = |n: u64| rng.next_u64() % n;
    for (li, _) in LEAF.iter().enumerate() {
        for (ii, _) in INTERNAL.iter().enumerate() {
            for (ki, _) in KINDS.iter().enumerate() {
                let mut base = |parent: usize, policy: usize| NodeGen {
                    parent,
                    policy,
                    kind: ki,
                    buckets: 64,
                    granularity: 1024,
                    rate_kbit: None,
                    burst: 3000,
                    weight: 1 + pick(4) as u32,
                    priority: pick(3) as u8,
                    quantum: 1500,
                    reservation_kbit: (pick(2) == 0).then_some(20_000),
                    flow_rate_kbit: None,
                };
                let mut gens = vec![base(0, ii), base(0, li), base(0, li)];
                gens[1].rate_kbit = Some(50_000);
                gens[2].flow_rate_kbit = Some(30_000);
                let ops: Vec<Op> = (0..400)
                    .map(|_| match pick(10) {
                        0..=5 => Op::Enqueue {
                            class: pick(6) as u32,
                            flow: pick(6),
                            len: 200 + pick(1300) as u32,
                            priority: pick(3) as u8,
                            deadline: pick(1_000_000),
                            slack: pick(1_000_000),
                            remaining: 1 + pick(1_000_000),
                            pacing_kbit: 0,
                        },
                        6..=8 => Op::Dequeue,
                        _ => Op::Advance(pick(300_000)),
                    })
                    .collect();
                if let Err(e) = run(
                    &gens,
                    10_000,
                    1000,
                    WHEEL,
                    &ops,
                    FieldsFrom::PerPacket,
                    Queues::Generated,
                ) {
                    panic!(
                        "leaf {:?} under {:?} on {:?}: {e}",
                        LEAF[li], INTERNAL[ii], KINDS[ki]
                    );
                }
            }
        }
    }
}

/// With `auto` queues (which give an internal LSTF node an approximate gradient queue) there
/// is no exact model, but nothing may be lost, duplicated or invented, and every packet leaves.
#[test]
fn auto_queues_deliver_every_packet_exactly_once() {
    let mut rng = sluice_queue::workload::Rng::new(77);
    for round in 0..200 {
        let n = 1 + (rng.next_u64() % 6) as usize;
        let gens: Vec<NodeGen> = (0..n)
            .map(|_| NodeGen {
                parent: rng.next_u64() as usize,
                policy: rng.next_u64() as usize,
                kind: 0,
                buckets: 1,
                granularity: 1,
                rate_kbit: (rng.next_u64() % 3 == 0).then(|| 1000 + rng.next_u64() % 100_000),
                burst: rng.next_u64() % 10_000,
                weight: 1 + (rng.next_u64() % 4) as u32,
                priority: (rng.next_u64() % 3) as u8,
                quantum: 300 + (rng.next_u64() % 3000) as u32,
                reservation_kbit: (rng.next_u64() % 2 == 0).then(|| 1000 + rng.next_u64() % 50_000),
                flow_rate_kbit: (rng.next_u64() % 4 == 0).then(|| 1000 + rng.next_u64() % 50_000),
            })
            .collect();
        let mut s = tree(&gens, 512, 1000, WHEEL, Queues::Auto)
            .build()
            .expect("valid tree");
        let mut now = 1_000_000_000u64;
        let mut sent = std::collections::HashSet::new();
        let mut accepted = 0u64;
        for token in 0..3000u64 {
            let mut p = Packet {
                token,
                len: 64 + (rng.next_u64() % 1500) as u32,
                flow: rng.next_u64() % 20,
                class: Some((rng.next_u64() % 6) as u32),
                ..Packet::default()
            };
            p.fields.slack = rng.next_u64() % 10_000_000;
            p.fields.deadline = now + rng.next_u64() % 10_000_000;
            p.fields.remaining = 1 + rng.next_u64() % 1_000_000;
            if s.enqueue(now, &p).is_ok() {
                accepted += 1;
            }
            if rng.next_u64() % 2 == 0 {
                if let Some(d) = s.dequeue(now) {
                    assert!(
                        sent.insert(d.token),
                        "round {round}: token {} twice",
                        d.token
                    );
                }
            }
            now += rng.next_u64() % 20_000;
        }
        while let Some(t) = s.next_event(now) {
            now = now.max(t);
            if let Some(d) = s.dequeue(now) {
                assert!(
                    sent.insert(d.token),
                    "round {round}: token {} twice",
                    d.token
                );
            }
        }
        assert_eq!(
            sent.len() as u64,
            accepted,
            "round {round}: every accepted packet leaves once"
        );
        assert!(s.is_empty());
    }
}
