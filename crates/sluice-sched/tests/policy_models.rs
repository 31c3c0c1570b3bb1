//! Textbook models of the built-in policies, written from their definitions (and
//! docs/policy-files.md), not from the scheduler's rank arithmetic: the differential test's
//! oracle reuses the policies' own ranks, so a policy whose arithmetic is wrong would pass it.
//! Each property builds one scheduling decision (a leaf over flows at the root, or a root over
//! FIFO leaves) on an exact queue, feeds random packets over time with dequeues in between,
//! drains it, and checks every departure against the model.
//!
//! Tie-breaks the models assume, and where the docs say them:
//! - fifo, prio, edf, lstf: equal ranks leave in arrival order (the docs: prio "FIFO within a
//!   level"; sluice-queue: equal ranks leave FIFO on every queue; edf/lstf on an exact queue
//!   rank by the times themselves).
//! - edf: a packet without a deadline (0) leaves after every packet with one (the docs: "on an
//!   exact queue, after every packet with a deadline").
//! - lqf: ties in the order the queues reached their length (the policy's doc).
//! - wfq, pfabric: the docs name no tie-break, so the models accept any of the tied members:
//!   a departure must be the head of a member whose start tag (wfq) or least remaining size
//!   (pfabric) is the least; the model then follows the scheduler's choice.
//! - drr: within a round, members leave in the order they joined it (the policy's doc:
//!   "members in one round leave in the order they joined it"); see the DRR model for how this
//!   differs from Linux fq's cyclic list.
//! - fq: Linux fq's lists (new flows, then old, each in order), in a regime where the docs'
//!   additions (a bank of missed rounds, a debt kept across idle time) do not apply.

use proptest::prelude::*;
use sluice_queue::QueueKind;
use sluice_sched::classify::Match;
use sluice_sched::{
    Fields, NodeSpec, Packet, PolicyKind, QueueChoice, SchedConfig, Scheduler, TreeBuilder,
};
use std::collections::VecDeque;

const HEAP: QueueChoice = QueueChoice::Kind {
    kind: QueueKind::BinaryHeap,
    buckets: None,
    granularity: None,
};

/// One step of a run: time passes by `dt` ns, then a packet arrives or one is asked for.
#[derive(Clone, Debug)]
enum Op {
    /// A packet of `len` bytes for member `key` (a flow, or a class), with field value `x`.
    Enq { key: usize, len: u32, x: u64 },
    /// A dequeue.
    Deq,
}

#[derive(Clone, Debug)]
struct Step {
    dt: u64,
    op: Op,
}

fn steps(
    keys: usize,
    lens: std::ops::RangeInclusive<u32>,
    x: BoxedStrategy<u64>,
) -> impl Strategy<Value = Vec<Step>> {
    let op = prop_oneof![
        3 => (0..keys, lens, x).prop_map(|(key, len, x)| Op::Enq { key, len, x }),
        2 => Just(Op::Deq),
    ];
    prop::collection::vec(
        (prop_oneof![Just(0u64), 1u64..1000], op).prop_map(|(dt, op)| Step { dt, op }),
        1..160,
    )
}

/// A model of one policy: told every arrival, asked to check every departure.
trait Model {
    fn arrive(&mut self, now: u64, token: u64, key: usize, len: u32, x: u64);
    /// Check that the scheduler's departure `got` at `now` is one the model allows, and apply it.
    fn depart(&mut self, now: u64, got: Option<u64>) -> Result<(), String>;
}

/// How a run feeds the scheduler: member `key` is flow `key` of the root leaf, or class `key`
/// (a child leaf of the root, built with `Match::Class(key)`).
#[derive(Clone, Copy)]
enum Members {
    Flows,
    Classes,
}

fn run(
    mut s: Scheduler,
    model: &mut dyn Model,
    members: Members,
    fields: fn(u64) -> Fields,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut now = 1_000_000;
    let mut token = 0;
    let mut log = Vec::new();
    for step in steps {
        now += step.dt;
        match step.op {
            Op::Enq { key, len, x } => {
                token += 1;
                let p = Packet {
                    token,
                    len,
                    flow: key as u64,
                    class: matches!(members, Members::Classes).then_some(key as u32),
                    fields: fields(x),
                    ..Packet::default()
                };
                prop_assert!(s.enqueue(now, &p).is_ok(), "packet {token} refused");
                model.arrive(now, token, key, len, x);
                log.push(format!("{now}: +{token} key {key} len {len} x {x}"));
            }
            Op::Deq => {
                let got = s.dequeue(now).map(|d| d.token);
                log.push(format!("{now}: -{got:?}"));
                if let Err(e) = model.depart(now, got) {
                    return Err(TestCaseError::fail(format!("{e}\n{}", log.join("\n"))));
                }
            }
        }
    }
    loop {
        let got = s.dequeue(now).map(|d| d.token);
        log.push(format!("{now}: -{got:?}"));
        if let Err(e) = model.depart(now, got) {
            return Err(TestCaseError::fail(format!("{e}\n{}", log.join("\n"))));
        }
        if got.is_none() {
            return Ok(());
        }
    }
}

fn config() -> SchedConfig {
    SchedConfig {
        capacity: 1024,
        flows: 64,
        ..SchedConfig::default()
    }
}

/// A scheduler whose root is a leaf with `policy` on an exact queue, its flows set by `flows`.
fn leaf(policy: PolicyKind, flows: impl FnOnce(&mut NodeSpec)) -> Scheduler {
    let mut b = TreeBuilder::new(config());
    let mut spec = NodeSpec::new("root", policy).queue(HEAP);
    flows(&mut spec);
    let root = b.root(spec);
    b.default_leaf(root);
    b.build().expect("builds")
}

/// A scheduler whose root has `policy` on an exact queue over FIFO leaves, one per `specs`
/// entry (class `k` to leaf `k`).
fn over_classes(policy: PolicyKind, children: Vec<NodeSpec>) -> Scheduler {
    let mut b = TreeBuilder::new(config());
    let root = b.root(NodeSpec::new("root", policy).queue(HEAP));
    for (k, child) in children.into_iter().enumerate() {
        let leaf = b.child(root, child);
        b.rule(vec![Match::Class(k as u32)], leaf);
    }
    b.build().expect("builds")
}

fn no_fields(_: u64) -> Fields {
    Fields::default()
}

/// Expected departure against the scheduler's.
fn expect(want: Option<u64>, got: Option<u64>) -> Result<(), String> {
    if want == got {
        Ok(())
    } else {
        Err(format!("expected {want:?}, the scheduler sent {got:?}"))
    }
}

/// Which of `queues` (of packets whose token is `.0`) has the packet the scheduler sent, `got`,
/// at its head: `None` when it sent nothing and nothing is queued, an error when it sent
/// nothing while something is, or a packet at no queue's head (`head` names a queue's).
fn head_of<T>(
    queues: &[VecDeque<T>],
    token: impl Fn(&T) -> u64,
    got: Option<u64>,
    head: &str,
) -> Result<Option<usize>, String> {
    let Some(got) = got else {
        if queues.iter().all(VecDeque::is_empty) {
            return Ok(None);
        }
        return Err("the scheduler sent nothing while packets were queued".into());
    };
    match queues
        .iter()
        .position(|q| q.front().is_some_and(|p| token(p) == got))
    {
        Some(k) => Ok(Some(k)),
        None => Err(format!("{got} is no {head}")),
    }
}

// ---------------------------------------------------------------------------------------------
// FIFO, strict priority, EDF, LSTF: a packet's key fixed at arrival, smallest first, arrival
// order among equal keys.

/// Packets ranked once at arrival by `key(now, x)`: the least leaves first, the earliest among
/// equal keys.
struct Keyed {
    key: fn(u64, u64) -> u128,
    queued: Vec<(u128, u64)>,
}

impl Keyed {
    fn new(key: fn(u64, u64) -> u128) -> Self {
        Keyed {
            key,
            queued: Vec::new(),
        }
    }
}

impl Model for Keyed {
    fn arrive(&mut self, now: u64, token: u64, _: usize, _: u32, x: u64) {
        self.queued.push(((self.key)(now, x), token));
    }
    fn depart(&mut self, _: u64, got: Option<u64>) -> Result<(), String> {
        // Tokens grow with arrival, so (key, token) is (key, arrival order).
        let first = self
            .queued
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|(_, e)| *e);
        let want = first.map(|(i, _)| self.queued.remove(i).1);
        expect(want, got)
    }
}

/// Field values: mostly small (times near the run's clock, small priorities), some extremes.
fn any_x() -> BoxedStrategy<u64> {
    prop_oneof![
        1 => Just(0u64),
        6 => 0u64..3_000_000,
        1 => Just(u64::MAX),
        1 => Just(u64::MAX - 1),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// FIFO: arrival order, whatever the flows.
    #[test]
    fn fifo_is_arrival_order(steps in steps(5, 1..=1500, any_x())) {
        let s = leaf(PolicyKind::Fifo, |_| {});
        run(s, &mut Keyed::new(|_, _| 0), Members::Flows, no_fields, &steps)?;
    }

    /// Strict priority at a leaf: the packet's priority, 0 first, FIFO within a level.
    #[test]
    fn prio_is_least_priority_first_fifo_within(steps in steps(5, 1..=1500, any_x())) {
        let s = leaf(PolicyKind::Prio, |_| {});
        let fields = |x: u64| Fields { priority: (x % 5) as u8, ..Fields::default() };
        run(s, &mut Keyed::new(|_, x| u128::from(x % 5)), Members::Flows, fields, &steps)?;
    }

    /// Strict priority inside the tree: a child's configured priority.
    #[test]
    fn prio_over_children_is_their_priority(
        prios in prop::collection::vec(0u8..4, 4),
        steps in steps(4, 1..=1500, any_x()),
    ) {
        let children = prios
            .iter()
            .enumerate()
            .map(|(k, &p)| NodeSpec::new(&format!("c{k}"), PolicyKind::Fifo).priority(p))
            .collect();
        let s = over_classes(PolicyKind::Prio, children);
        // The key is the class's priority: `x` carries the class here.
        let mut model = ClassKeyed { prios: prios.clone(), inner: Keyed::new(|_, x| u128::from(x)) };
        run(s, &mut model, Members::Classes, no_fields, &steps)?;
    }

    /// EDF on an exact queue: earliest absolute deadline first, whether past or far ahead;
    /// packets without a deadline after every packet with one; arrival order among equals.
    #[test]
    fn edf_is_earliest_deadline_first(steps in steps(5, 1..=1500, any_x())) {
        let s = leaf(PolicyKind::Edf, |_| {});
        let fields = |x: u64| Fields { deadline: x, ..Fields::default() };
        let key = |_, x: u64| if x == 0 { u128::MAX } else { u128::from(x) };
        run(s, &mut Keyed::new(key), Members::Flows, fields, &steps)?;
    }

    /// LSTF on an exact queue: least slack first. A packet's slack at time t is its slack at
    /// arrival less the time it waited, so every queued packet's slack falls at the same pace
    /// and the least slack now is the least arrival + slack.
    #[test]
    fn lstf_is_least_slack_first(steps in steps(5, 1..=1500, any_x())) {
        let s = leaf(PolicyKind::Lstf, |_| {});
        let fields = |x: u64| Fields { slack: x % 5_000_000, ..Fields::default() };
        let key = |now: u64, x: u64| u128::from(now) + u128::from(x % 5_000_000);
        run(s, &mut Keyed::new(key), Members::Flows, fields, &steps)?;
    }
}

/// [`Keyed`] by the priority of the packet's class.
struct ClassKeyed {
    prios: Vec<u8>,
    inner: Keyed,
}

impl Model for ClassKeyed {
    fn arrive(&mut self, now: u64, token: u64, key: usize, len: u32, _: u64) {
        self.inner
            .arrive(now, token, key, len, u64::from(self.prios[key]));
    }
    fn depart(&mut self, now: u64, got: Option<u64>) -> Result<(), String> {
        self.inner.depart(now, got)
    }
}

// ---------------------------------------------------------------------------------------------
// LQF: the member with the most packets queued; ties in the order they reached that length.

#[derive(Default)]
struct Lqf {
    queues: Vec<VecDeque<u64>>,
    /// When each queue reached its length (an event count).
    since: Vec<u64>,
    events: u64,
}

impl Lqf {
    fn member(&mut self, key: usize) {
        if self.queues.len() <= key {
            self.queues.resize_with(key + 1, VecDeque::new);
            self.since.resize(key + 1, 0);
        }
    }
}

impl Model for Lqf {
    fn arrive(&mut self, _: u64, token: u64, key: usize, _: u32, _: u64) {
        self.member(key);
        self.queues[key].push_back(token);
        self.events += 1;
        self.since[key] = self.events;
    }
    fn depart(&mut self, _: u64, got: Option<u64>) -> Result<(), String> {
        let longest = (0..self.queues.len())
            .filter(|&k| !self.queues[k].is_empty())
            .min_by_key(|&k| (std::cmp::Reverse(self.queues[k].len()), self.since[k]));
        let want = longest.map(|k| {
            self.events += 1;
            self.since[k] = self.events;
            self.queues[k].pop_front().expect("not empty")
        });
        expect(want, got)
    }
}

// ---------------------------------------------------------------------------------------------
// pFabric: the flow holding the packet with the least remaining size sends its earliest
// packet.

#[derive(Default)]
struct Pfabric {
    queues: Vec<VecDeque<(u64, u64)>>,
}

impl Model for Pfabric {
    fn arrive(&mut self, _: u64, token: u64, key: usize, _: u32, x: u64) {
        if self.queues.len() <= key {
            self.queues.resize_with(key + 1, VecDeque::new);
        }
        self.queues[key].push_back((token, x));
    }
    fn depart(&mut self, _: u64, got: Option<u64>) -> Result<(), String> {
        let least = self.queues.iter().flatten().map(|p| p.1).min();
        let Some(k) = head_of(&self.queues, |p| p.0, got, "flow's earliest packet")? else {
            return Ok(());
        };
        let min_k = self.queues[k].iter().map(|p| p.1).min();
        if min_k != least {
            return Err(format!(
                "{got:?}'s flow {k} holds least remaining {min_k:?}, another flow {least:?}"
            ));
        }
        self.queues[k].pop_front();
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// LQF over flows at a leaf: the longest queue in packets first.
    #[test]
    fn lqf_over_flows_is_longest_queue_first(steps in steps(5, 1..=1500, any_x())) {
        let s = leaf(PolicyKind::Lqf, |_| {});
        run(s, &mut Lqf::default(), Members::Flows, no_fields, &steps)?;
    }

    /// LQF over children: the child with the most packets available.
    #[test]
    fn lqf_over_children_is_longest_queue_first(steps in steps(4, 1..=1500, any_x())) {
        let children = (0..4).map(|k| NodeSpec::new(&format!("c{k}"), PolicyKind::Fifo)).collect();
        let s = over_classes(PolicyKind::Lqf, children);
        run(s, &mut Lqf::default(), Members::Classes, no_fields, &steps)?;
    }

    /// pFabric / SRPT on an exact queue: least remaining size first, by whole bytes, a flow's
    /// packets in order.
    #[test]
    fn pfabric_is_least_remaining_first_in_flow_order(
        steps in steps(5, 1..=1500, prop_oneof![0u64..4000, 1_000_000u64..1_000_100].boxed()),
    ) {
        let s = leaf(PolicyKind::Pfabric, |_| {});
        let fields = |x: u64| Fields { remaining: x, ..Fields::default() };
        run(s, &mut Pfabric::default(), Members::Flows, fields, &steps)?;
    }
}

// ---------------------------------------------------------------------------------------------
// WFQ: start-time fair queuing (Goyal, Vin and Cheng). A packet arriving at time A gets
// S = max(v(A), F of its member's previous packet) and F = S + len / w; the packet with the
// least S is served; v is the start tag of the packet in service, and at the end of a busy
// period the largest finish tag served. Tags here are exact: units of 1/LCM byte, where LCM is
// a multiple of every weight.

/// A multiple of every weight the WFQ properties use (1..=6).
const LCM: u128 = 60;

struct Sfq {
    weights: Vec<u32>,
    /// Per member: queued (token, S, F).
    queues: Vec<VecDeque<(u64, u128, u128)>>,
    last_finish: Vec<u128>,
    v: u128,
    max_finish: u128,
}

impl Sfq {
    fn new(weights: Vec<u32>) -> Self {
        let n = weights.len();
        Sfq {
            weights,
            queues: vec![VecDeque::new(); n],
            last_finish: vec![0; n],
            v: 0,
            max_finish: 0,
        }
    }
}

impl Model for Sfq {
    fn arrive(&mut self, _: u64, token: u64, key: usize, len: u32, _: u64) {
        if self.queues.iter().all(|q| q.is_empty()) {
            // The server was idle: the busy period ended with v at the largest finish tag.
            self.v = self.v.max(self.max_finish);
        }
        let start = self.v.max(self.last_finish[key]);
        let finish = start + u128::from(len) * LCM / u128::from(self.weights[key]);
        self.last_finish[key] = finish;
        self.queues[key].push_back((token, start, finish));
    }
    fn depart(&mut self, _: u64, got: Option<u64>) -> Result<(), String> {
        let least = self
            .queues
            .iter()
            .filter_map(|q| q.front())
            .map(|p| p.1)
            .min();
        let Some(k) = head_of(&self.queues, |p| p.0, got, "member's head packet")? else {
            return Ok(());
        };
        let (_, start, finish) = self.queues[k].pop_front().expect("head");
        if Some(start) != least {
            return Err(format!(
                "{got:?} of member {k} has start tag {start}/{LCM} B, the least is {least:?}"
            ));
        }
        self.v = start;
        self.max_finish = self.max_finish.max(finish);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// WFQ over children of weights 1..=6: start-time fair queuing, exactly.
    #[test]
    fn wfq_over_children_is_start_time_fair_queuing(
        weights in prop::collection::vec(1u32..=6, 4),
        steps in steps(4, 1..=9000, any_x()),
    ) {
        let children = weights
            .iter()
            .enumerate()
            .map(|(k, &w)| NodeSpec::new(&format!("c{k}"), PolicyKind::Fifo).weight(w))
            .collect();
        let s = over_classes(PolicyKind::Wfq, children);
        run(s, &mut Sfq::new(weights.clone()), Members::Classes, no_fields, &steps)?;
    }

    /// WFQ over the flows of a leaf, all of the leaf's `flow_weight`.
    #[test]
    fn wfq_over_flows_is_start_time_fair_queuing(
        weight in 1u32..=6,
        steps in steps(5, 1..=9000, any_x()),
    ) {
        let s = leaf(PolicyKind::Wfq, |spec| spec.flows.weight = weight);
        run(s, &mut Sfq::new(vec![weight; 5]), Members::Flows, no_fields, &steps)?;
    }
}

// ---------------------------------------------------------------------------------------------
// DRR (Shreedhar and Varghese) in the overdraft form the docs describe ("a member sends while
// its deficit is positive, so a visit can send up to a quantum plus a packet"), by rounds:
// every round gives each member its quantum; a member sends in a round while its deficit is
// positive and it has packets; one whose deficit is then not positive sits out the rounds in
// which a quantum more still leaves it not positive, one at a time. Members in one round leave
// in the order they joined it (the policy's doc); a member that keeps a positive deficit keeps
// its turn. A member that empties with a positive deficit gets a fresh one (DRR's reset) and
// joins the next round when it comes back; one that empties owing rounds keeps its deficit and
// the round it owes if that round has not begun when it comes back ("rounds pay a debt, not
// time"), and is fresh otherwise.
//
// (Linux fq, whose credit this form follows, keeps its flows in one cyclic list, so within a
// round they leave in the list's order, not in the order they joined the round: a member that
// skips several rounds at once, or comes back owing, can leave before one that joined that
// round later. The shares are the same; the order within a round is not, and this model
// follows the docs, not fq.)

struct Drr {
    quanta: Vec<i64>,
    queues: Vec<VecDeque<(u64, u32)>>,
    /// Per member: the round it is served in next, its deficit in that round, and when it
    /// joined that round.
    round: Vec<u64>,
    deficit: Vec<i64>,
    joined: Vec<u64>,
    seen: Vec<bool>,
    /// The round being served.
    current: u64,
    joins: u64,
}

impl Drr {
    fn new(quanta: Vec<u32>) -> Self {
        let n = quanta.len();
        Drr {
            quanta: quanta.into_iter().map(i64::from).collect(),
            queues: vec![VecDeque::new(); n],
            round: vec![0; n],
            deficit: vec![0; n],
            joined: vec![0; n],
            seen: vec![false; n],
            current: 0,
            joins: 0,
        }
    }

    fn join(&mut self, m: usize) {
        self.joins += 1;
        self.joined[m] = self.joins;
    }
}

impl Model for Drr {
    fn arrive(&mut self, _: u64, token: u64, m: usize, len: u32, _: u64) {
        if self.queues[m].is_empty() {
            if !self.seen[m] || self.round[m] <= self.current {
                // New, or back after the round it owed began: the next round, a fresh quantum.
                self.round[m] = self.current + 1;
                self.deficit[m] = self.quanta[m];
            }
            self.seen[m] = true;
            self.join(m);
        }
        self.queues[m].push_back((token, len));
    }
    fn depart(&mut self, _: u64, got: Option<u64>) -> Result<(), String> {
        let next = (0..self.queues.len())
            .filter(|&m| !self.queues[m].is_empty())
            .min_by_key(|&m| (self.round[m], self.joined[m]));
        let Some(m) = next else {
            return expect(None, got);
        };
        self.current = self.round[m];
        let (token, len) = self.queues[m].pop_front().expect("not empty");
        self.deficit[m] -= i64::from(len);
        if self.deficit[m] <= 0 {
            while self.deficit[m] <= 0 {
                self.round[m] += 1;
                self.deficit[m] += self.quanta[m];
            }
            self.join(m);
        }
        expect(Some(token), got)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// DRR over children with their own quanta.
    #[test]
    fn drr_over_children_is_deficit_round_robin(
        quanta in prop::collection::vec(200u32..4000, 4),
        steps in steps(4, 1..=3000, any_x()),
    ) {
        let children = quanta
            .iter()
            .enumerate()
            .map(|(k, &q)| {
                let mut spec = NodeSpec::new(&format!("c{k}"), PolicyKind::Fifo);
                spec.member.quantum = q;
                spec
            })
            .collect();
        let s = over_classes(PolicyKind::Drr, children);
        run(s, &mut Drr::new(quanta.clone()), Members::Classes, no_fields, &steps)?;
    }

    /// DRR over the flows of a leaf, each with the leaf's `flow_quantum`.
    #[test]
    fn drr_over_flows_is_deficit_round_robin(
        quantum in 200u32..4000,
        steps in steps(5, 1..=3000, any_x()),
    ) {
        let s = leaf(PolicyKind::Drr, |spec| spec.flows.quantum = quantum);
        run(s, &mut Drr::new(vec![quantum; 5]), Members::Flows, no_fields, &steps)?;
    }
}

/// On an exact queue a packet without a deadline leaves after every packet with one, however
/// late: a deadline of 2^64 - 1 ns ranked as late as none, and a packet without a deadline
/// that came first left before it.
#[test]
fn edf_sends_a_packet_without_a_deadline_after_the_latest_deadline() {
    let mut s = leaf(PolicyKind::Edf, |_| {});
    for (token, deadline) in [(1, 0), (2, u64::MAX), (3, u64::MAX - 1), (4, 5)] {
        let p = Packet {
            token,
            len: 100,
            flow: token,
            fields: Fields {
                deadline,
                ..Fields::default()
            },
            ..Packet::default()
        };
        s.enqueue(0, &p).unwrap();
    }
    let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(0).map(|d| d.token)).collect();
    assert_eq!(order, [4, 3, 2, 1]);
}

// ---------------------------------------------------------------------------------------------
// fq: Linux fq's flow scheduling (net/sched/sch_fq.c, fq_dequeue): a flow that becomes active
// joins the tail of the new flows with `initial quantum` (10 x 1514 B) of credit; new flows are
// served before old ones; at its turn a flow whose credit is not positive gets a quantum and
// goes to the tail of the old flows; otherwise it sends its first packet, charged to its
// credit; an empty flow leaves. The docs add a bank of quanta for a flow that comes back after
// rounds ended and keep a debt across idle time; so that those do not apply, the properties
// below send each flow its packets at once (a flow never comes back), and packets no longer
// than the quantum (a flow never owes more than one round).

#[derive(Default)]
struct LinuxFq {
    quantum: i64,
    queues: Vec<VecDeque<(u64, u32)>>,
    credit: Vec<i64>,
    new: VecDeque<usize>,
    old: VecDeque<usize>,
}

impl Model for LinuxFq {
    fn arrive(&mut self, _: u64, token: u64, f: usize, len: u32, _: u64) {
        if self.queues.len() <= f {
            self.queues.resize_with(f + 1, VecDeque::new);
            self.credit.resize(f + 1, 0);
        }
        let listed = self.new.contains(&f) || self.old.contains(&f);
        if !listed {
            self.credit[f] = 10 * 1514;
            self.new.push_back(f);
        }
        self.queues[f].push_back((token, len));
    }
    fn depart(&mut self, _: u64, got: Option<u64>) -> Result<(), String> {
        loop {
            let (f, from_new) = match (self.new.front(), self.old.front()) {
                (Some(&f), _) => (f, true),
                (None, Some(&f)) => (f, false),
                (None, None) => return expect(None, got),
            };
            let list = if from_new {
                &mut self.new
            } else {
                &mut self.old
            };
            if self.credit[f] <= 0 {
                self.credit[f] += self.quantum;
                list.pop_front();
                self.old.push_back(f);
                continue;
            }
            let Some((token, len)) = self.queues[f].pop_front() else {
                // Empty: a new flow takes a turn among the old ones first, if there are any.
                list.pop_front();
                if from_new && !self.old.is_empty() {
                    self.old.push_back(f);
                }
                continue;
            };
            self.credit[f] -= i64::from(len);
            return expect(Some(token), got);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// fq over flows that each send a burst once: Linux fq's order.
    #[test]
    fn fq_is_linux_fq_for_flows_that_send_once(
        quantum in 1514u32..4000,
        bursts in prop::collection::vec((1usize..12, 0usize..4), 1..24),
        lens in prop::collection::vec(1u32..=1514, 64),
    ) {
        let s = leaf(PolicyKind::Fq, |spec| spec.flows.quantum = quantum);
        // Flow k sends its burst of n packets at once, after d dequeues.
        let mut steps = Vec::new();
        let mut l = 0;
        for (k, &(n, d)) in bursts.iter().enumerate() {
            steps.extend((0..d).map(|_| Step { dt: 1, op: Op::Deq }));
            for _ in 0..n {
                l += 1;
                steps.push(Step { dt: 0, op: Op::Enq { key: k, len: lens[l % lens.len()], x: 0 } });
            }
        }
        let mut model = LinuxFq { quantum: i64::from(quantum), ..LinuxFq::default() };
        run(s, &mut model, Members::Flows, no_fields, &steps)?;
    }
}
