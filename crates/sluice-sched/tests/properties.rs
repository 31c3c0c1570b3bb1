//! What each policy promises, checked on simulated traffic over simulated time:
//! fair shares, rate limits sampled every 100 ms (Carousel's metric), bursts after idle,
//! pFabric's least-remaining-first, hClock's reservations, hClock's and HTB's splits of a tree
//! against a model written from the documents, order within a flow, an approximate
//! queue's error bound, rejections.

use proptest::prelude::*;
use sluice_queue::QueueKind;
use sluice_sched::classify::Match;
use sluice_sched::{
    Fields, NodeId, NodeSpec, Packet, PolicyKind, QueueChoice, Rate, RejectReason, SchedConfig,
    Scheduler, ShaperConfig, TreeBuilder,
};
use std::collections::HashMap;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

fn cfg(capacity: usize) -> SchedConfig {
    SchedConfig {
        capacity,
        flows: 10_000,
        max_packet: 9000,
        ..SchedConfig::default()
    }
}

/// A tree of one leaf, the root, running `policy` over flows each paced at `rate`, with
/// `shaper` (the leaf's id is 0).
fn paced_leaf(
    policy: PolicyKind,
    rate: Rate,
    shaper: ShaperConfig,
) -> Result<Scheduler, sluice_sched::BuildError> {
    let mut b = TreeBuilder::new(SchedConfig { shaper, ..cfg(100) });
    let mut leaf = NodeSpec::new("leaf", policy);
    leaf.flow_rate = Some(rate);
    let leaf = b.root(leaf);
    b.default_leaf(leaf);
    b.build()
}

/// A tree of one node, `root`, a leaf that every packet goes to.
fn one_leaf(cfg: SchedConfig, root: NodeSpec) -> Scheduler {
    let mut b = TreeBuilder::new(cfg);
    let leaf = b.root(root);
    b.default_leaf(leaf);
    b.build().unwrap()
}

fn packet(token: u64, class: u32, flow: u64, len: u32) -> Packet {
    Packet {
        token,
        len,
        flow,
        class: Some(class),
        ..Packet::default()
    }
}

/// A host that keeps every class backlogged (`depth` packets per flow in the scheduler) and
/// sends at `link` (None: as fast as the scheduler releases), from `start` until `end`.
/// Returns the departures as (time, token, len, flow, class).
struct Host {
    next_token: u64,
    class_of: HashMap<u64, u32>,
    len_of: HashMap<u64, u32>,
    fields_of: HashMap<u64, Fields>,
}

#[derive(Clone, Copy, Debug)]
struct Departure {
    at: u64,
    token: u64,
    len: u32,
    flow: u64,
    class: u32,
}

impl Host {
    fn new() -> Self {
        Host {
            next_token: 0,
            class_of: HashMap::new(),
            len_of: HashMap::new(),
            fields_of: HashMap::new(),
        }
    }

    fn send(&mut self, s: &mut Scheduler, now: u64, class: u32, flow: u64, len: u32) {
        let mut p = packet(self.next_token, class, flow, len);
        p.fields = self.fields_of.get(&flow).copied().unwrap_or_default();
        self.next_token += 1;
        s.enqueue(now, &p).expect("accepted");
        self.class_of.insert(flow, class);
        self.len_of.insert(flow, len);
    }

    /// Run closed-loop: every flow in `flows` (flow, class, len) keeps `depth` packets queued.
    fn run(
        &mut self,
        s: &mut Scheduler,
        flows: &[(u64, u32, u32)],
        depth: usize,
        link: Option<Rate>,
        start: u64,
        end: u64,
    ) -> Vec<Departure> {
        for &(f, c, l) in flows {
            for _ in 0..depth {
                self.send(s, start, c, f, l);
            }
        }
        let mut out = Vec::new();
        let mut now = start;
        while now < end {
            match s.dequeue(now) {
                Some(d) => {
                    let class = self.class_of[&d.flow];
                    out.push(Departure {
                        at: now,
                        token: d.token,
                        len: d.len,
                        flow: d.flow,
                        class,
                    });
                    if let Some(l) = link {
                        now += l.tx_time_ns(u64::from(d.len));
                    }
                    let len = self.len_of[&d.flow];
                    self.send(s, now, class, d.flow, len);
                }
                None => match s.next_event(now) {
                    Some(t) if t > now => now = t,
                    Some(_) => now += 1,
                    None => break,
                },
            }
        }
        out
    }
}

fn bytes_by<K: std::hash::Hash + Eq>(
    deps: &[Departure],
    key: impl Fn(&Departure) -> K,
) -> HashMap<K, u64> {
    let mut m = HashMap::new();
    for d in deps {
        *m.entry(key(d)).or_insert(0) += u64::from(d.len);
    }
    m
}

/// `root` over `classes` (class `k`, the `k`th, takes the packets of class id `k`), holding
/// `capacity` packets.
fn over_classes(root: NodeSpec, classes: Vec<NodeSpec>, capacity: usize) -> Scheduler {
    let mut b = TreeBuilder::new(cfg(capacity));
    let root = b.root(root);
    for (i, class) in classes.into_iter().enumerate() {
        let leaf = b.child(root, class);
        b.rule(vec![Match::Class(i as u32)], leaf);
    }
    b.build().unwrap()
}

/// `root` over one FIFO class per share (class `k` has the `k`th: its weight, or under DRR
/// its quantum in bytes), holding `capacity` packets.
fn weighted_classes(root: NodeSpec, shares: &[u32], capacity: usize) -> Scheduler {
    let classes = shares
        .iter()
        .enumerate()
        .map(|(i, &share)| {
            sharing(
                NodeSpec::new(&format!("c{i}"), PolicyKind::Fifo),
                &root,
                share,
            )
        })
        .collect();
    over_classes(root, classes, capacity)
}

/// `child` with `share` in `parent`: its quantum in bytes under DRR, else its weight.
fn sharing(mut child: NodeSpec, parent: &NodeSpec, share: u32) -> NodeSpec {
    if parent.policy == PolicyKind::Drr {
        child.member.quantum = share;
        child
    } else {
        child.weight(share)
    }
}

/// A `policy` root over one FIFO class per weight, each class backlogged by one flow of
/// packets of its size in `sizes`, for 200 ms at 10 Gbit/s: every class's share of the bytes is
/// within 1% of its share of the weights.
fn assert_weighted_shares(policy: PolicyKind, weights: &[u32], sizes: &[u32]) {
    let mut s = weighted_classes(NodeSpec::new("root", policy), weights, 10_000);
    let flows: Vec<(u64, u32, u32)> = (0..weights.len())
        .map(|i| (i as u64, i as u32, sizes[i]))
        .collect();
    let deps = Host::new().run(&mut s, &flows, 4, Some(Rate::gbit(10)), S, S + 200 * MS);
    let bytes = bytes_by(&deps, |d| d.class);
    let total: u64 = bytes.values().sum();
    let all: u32 = weights.iter().sum();
    for (i, &w) in weights.iter().enumerate() {
        let share = bytes[&(i as u32)] as f64 / total as f64;
        let want = f64::from(w) / f64::from(all);
        assert!(
            (share - want).abs() / want < 0.01,
            "{policy:?} class {i}: share {share:.4}, want {want:.4}"
        );
    }
}

/// A departure from [`through_classes`].
#[derive(Clone, Copy, Debug)]
struct Dep {
    class: usize,
    len: u32,
    /// When it left (ns).
    at: u64,
    /// Bit `k`: class `k` had packets in the scheduler both before and after it.
    through: u32,
}

/// An exact queue, for a root whose order the properties below check to the byte.
const HEAP: QueueChoice = QueueChoice::Kind {
    kind: QueueKind::BinaryHeap,
    buckets: None,
    granularity: None,
};

/// Sends `arrivals` (class, bytes, gap after the arrival before it in ns) through `s`, whose
/// root is over `classes` classes (or a leaf over as many flows: class `k`'s packets are flow
/// `k`), to a 1 Gbit/s link that sends whenever it is free and the scheduler lets a packet
/// go. A packet refused for a full flow table is dropped; any other refusal fails.
fn through_classes(s: Scheduler, classes: usize, arrivals: &[(usize, u32, u64)]) -> Vec<Dep> {
    through_changing_classes(s, classes, arrivals, |_, _, _| {}).0
}

/// [`through_classes`], calling `change(s, next, now)` before the `next`th arrival, at its time.
/// Also returns, for each time the link found nothing to send while packets were held, the
/// classes that had packets then (bit `k`: class `k`).
fn through_changing_classes(
    mut s: Scheduler,
    classes: usize,
    arrivals: &[(usize, u32, u64)],
    mut change: impl FnMut(&mut Scheduler, usize, u64),
) -> (Vec<Dep>, Vec<u32>) {
    let mut queued = vec![0u32; classes];
    let backlogged = |queued: &[u32]| {
        (0..queued.len())
            .filter(|&k| queued[k] > 0)
            .fold(0u32, |m, k| m | 1 << k)
    };
    let (mut deps, mut idle, mut next, mut at, mut link_free) = (Vec::new(), Vec::new(), 0, S, S);
    loop {
        let arrival = arrivals.get(next).map(|&(_, _, gap)| at + gap);
        let held = queued.iter().any(|&q| q > 0);
        match arrival {
            Some(t) if !held || t <= link_free => {
                let (class, len, _) = arrivals[next];
                let class = class % classes;
                change(&mut s, next, t);
                let p = packet(next as u64, class as u32, class as u64, len);
                match s.enqueue(t, &p) {
                    Ok(()) => queued[class] += 1,
                    Err(e) => assert_eq!(e.reason, RejectReason::FlowTableFull),
                }
                // An idle link is free from now on.
                link_free = link_free.max(t);
                (at, next) = (t, next + 1);
            }
            _ if held => {
                let before = backlogged(&queued);
                let Some(d) = s.dequeue(link_free) else {
                    // All at their gates: on when the first may go.
                    idle.push(before);
                    let t = s.next_event(link_free).expect("a packet is held");
                    link_free = t.max(link_free + 1);
                    continue;
                };
                let class = d.flow as usize;
                queued[class] -= 1;
                deps.push(Dep {
                    class,
                    len: d.len,
                    at: link_free,
                    through: before & backlogged(&queued),
                });
                link_free += u64::from(d.len) * 8;
            }
            _ => return (deps, idle),
        }
    }
}

/// [`through_classes`] with a `policy` root, on an exact queue, over one FIFO class per
/// weight ([`weighted_classes`]).
fn through_weighted_classes(
    policy: PolicyKind,
    weights: &[u32],
    arrivals: &[(usize, u32, u64)],
) -> Vec<Dep> {
    let s = weighted_classes(NodeSpec::new("root", policy).queue(HEAP), weights, 1000);
    through_classes(s, weights.len(), arrivals)
}

/// The widest gap, over any stretch of `deps` (from [`through_weighted_classes`]) through
/// which classes `f` and `m` both have packets waiting, between the bytes each is served
/// divided by its share (`sf`, `sm`): the spread of their running difference over each such
/// run of departures.
fn widest_gap(deps: &[Dep], f: usize, m: usize, sf: f64, sm: f64) -> f64 {
    let both = 1 << f | 1 << m;
    let (mut run, mut lo, mut hi, mut widest) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for &Dep {
        class,
        len,
        through,
        ..
    } in deps
    {
        if through & both != both {
            (run, lo, hi) = (0.0, 0.0, 0.0);
            continue;
        }
        if class == f {
            run += f64::from(len) / sf;
        } else if class == m {
            run -= f64::from(len) / sm;
        }
        (lo, hi) = (lo.min(run), hi.max(run));
        widest = widest.max(hi - lo);
    }
    widest
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Start-time fair queuing's fairness bound (Goyal, Vin and Cheng, 1996): over any
    /// stretch in which two classes both have packets waiting, the bytes each is served,
    /// divided by its weight, differ by at most the largest packet of each divided by its
    /// weight. For WFQ, and for hClock's and HTB's shares (no reservation, rate or ceiling
    /// here). Checked with whole packets counted at both ends of a stretch (so against twice
    /// the bound), on random weights, sizes and arrivals, without the oracle, which shares the
    /// policies' virtual time.
    #[test]
    fn weighted_shares_keep_the_fairness_bound_between_any_two_backlogged_classes(
        policy in prop::sample::select(vec![PolicyKind::Wfq, PolicyKind::HClock, PolicyKind::Htb]),
        weights in prop::collection::vec(1u32..16, 2..5),
        arrivals in prop::collection::vec((0usize..4, 64u32..1500, 0u64..4_000), 1..300),
    ) {
        let deps = through_weighted_classes(policy, &weights, &arrivals);
        prop_assert_eq!(deps.len(), arrivals.len());
        let lmax = |k: usize| {
            deps.iter().filter(|d| d.class == k).map(|d| d.len).max().unwrap_or(0)
        };
        for f in 0..weights.len() {
            for m in f + 1..weights.len() {
                let (wf, wm) = (f64::from(weights[f]), f64::from(weights[m]));
                let bound = 2.0 * (f64::from(lmax(f)) / wf + f64::from(lmax(m)) / wm);
                let spread = widest_gap(&deps, f, m, wf, wm);
                prop_assert!(
                    spread <= bound + 1e-9,
                    "{:?}, classes {} and {} (weights {:?}): {:.1} apart, bound {:.1}",
                    policy, f, m, weights, spread, bound
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Deficit round robin's fairness (Shreedhar and Varghese, 1995): over any stretch in
    /// which two classes both have packets waiting, the bytes each is served, in rounds of its
    /// quantum, differ by a bounded number of rounds: each round serves a class its quantum
    /// give or take its deficit, under a packet. Checked against 2 + 3 (Max/Q_f + Max/Q_m)
    /// rounds with whole packets counted, quanta at least the largest packet, on random
    /// arrivals, without the oracle.
    #[test]
    fn drr_keeps_its_fairness_bound_between_any_two_backlogged_classes(
        quanta in prop::collection::vec(1500u32..6000, 2..5),
        arrivals in prop::collection::vec((0usize..4, 64u32..1500, 0u64..4_000), 1..300),
    ) {
        let deps = through_weighted_classes(PolicyKind::Drr, &quanta, &arrivals);
        prop_assert_eq!(deps.len(), arrivals.len());
        for f in 0..quanta.len() {
            for m in f + 1..quanta.len() {
                let (qf, qm) = (f64::from(quanta[f]), f64::from(quanta[m]));
                let bound = 2.0 + 3.0 * (1500.0 / qf + 1500.0 / qm);
                let spread = widest_gap(&deps, f, m, qf, qm);
                prop_assert!(
                    spread <= bound + 1e-9,
                    "classes {} and {} (quanta {:?}): {:.2} rounds apart, bound {:.2}",
                    f, m, quanta, spread, bound
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// hClock's reservations (mClock's, Gulati et al., 2010) and HTB's rates: over any
    /// stretch in which a class with one has packets waiting, it is served at least that rate
    /// times the stretch, or its own limit's (hClock's limit, HTB's ceil: the class's `rate`)
    /// if that is less, less `SLACK` (a packet of its own and one of another class that held
    /// the link) and a shaper slot at its limit. They add up to at most 800 Mbit/s of the
    /// 1 Gbit/s link; the traffic overloads it, on random weights, limits, sizes and arrivals;
    /// checked without the oracle.
    #[test]
    fn every_backlogged_guaranteed_rate_is_served_over_any_stretch(
        policy in prop::sample::select(vec![PolicyKind::HClock, PolicyKind::Htb]),
        classes in prop::collection::vec((1u32..8, 0u64..=4, 0usize..4), 2..5),
        arrivals in prop::collection::vec((0usize..4, 64u32..1500, 0u64..4_000), 1..300),
    ) {
        const SLACK: f64 = 3000.0;
        const LIMITS: [Option<u64>; 4] = [None, Some(50), Some(200), Some(600)];
        // Reservations in units of 50 Mbit/s, scaled down to fit 800 Mbit/s in all.
        let units: u64 = classes.iter().map(|c| c.1).sum();
        let reserved = |k: usize| classes[k].1 * 50_000_000 * 16 / units.max(16);
        let limit = |k: usize| LIMITS[classes[k].2].map(Rate::mbit);
        let bps = |k: usize| limit(k).map_or(reserved(k), |l| l.bps().min(reserved(k)));
        let specs = (0..classes.len())
            .map(|k| {
                let mut spec = NodeSpec::new(&format!("c{k}"), PolicyKind::Fifo).weight(classes[k].0);
                if let Some(r) = Rate::new(reserved(k)) {
                    spec = spec.reservation(r);
                }
                match limit(k) {
                    Some(l) => spec.rate(l, 0),
                    None => spec,
                }
            })
            .collect();
        let root = NodeSpec::new("root", policy).queue(HEAP);
        let s = over_classes(root, specs, 1000);
        let deps = through_classes(s, classes.len(), &arrivals);
        prop_assert_eq!(deps.len(), arrivals.len());
        for k in 0..classes.len() {
            let slot = limit(k).map_or(0.0, |l| l.bps() as f64 / 8e9 * 1024.0);
            if let Some((behind, at)) = furthest_behind(&deps, k, bps(k)) {
                prop_assert!(
                    behind <= SLACK + slot,
                    "{:?}, class {} ({} bit/s of {:?}): {:.0} B behind at {} ns",
                    policy, k, bps(k), classes, behind, at - S
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Every policy over classes is work-conserving: the link finds nothing to send only when
    /// every class with packets is held by its own limit. Classes with and without limits
    /// (and reservations, which hClock and HTB use) under every policy an internal node may
    /// have, on random weights, quanta, priorities, sizes and arrivals, without the oracle.
    #[test]
    fn the_link_idles_only_while_every_class_with_packets_is_held_by_its_limit(
        policy in prop::sample::select(vec![
            PolicyKind::Fifo, PolicyKind::Prio, PolicyKind::Wfq, PolicyKind::Drr,
            PolicyKind::Edf, PolicyKind::Lstf, PolicyKind::Lqf, PolicyKind::HClock,
            PolicyKind::Htb,
        ]),
        classes in prop::collection::vec((1u32..8, prop::option::of(1u64..600), prop::option::of(1u64..200)), 2..5),
        arrivals in prop::collection::vec((0usize..4, 64u32..1500, 0u64..4_000), 1..300),
    ) {
        let root = NodeSpec::new("root", policy);
        let s = over_classes(root, any_classes(&classes), 1000);
        let (deps, idle) = through_changing_classes(s, classes.len(), &arrivals, |_, _, _| {});
        prop_assert_eq!(deps.len(), arrivals.len());
        let limited = (0..classes.len())
            .filter(|&k| classes[k].1.is_some())
            .fold(0u32, |m, k| m | 1 << k);
        for with_packets in idle {
            prop_assert!(
                with_packets & !limited == 0,
                "{:?} idled with classes {:b} holding packets, limited {:b}: {:?}",
                policy, with_packets, limited, classes
            );
        }
    }
}

/// FIFO classes for any internal policy, from (share, limit in Mbit/s, reservation in Mbit/s):
/// class `k` has the share as its weight and (times 1500 B) its quantum, priority `k % 3`, and
/// the limit as its `rate`, without burst.
fn any_classes(classes: &[(u32, Option<u64>, Option<u64>)]) -> Vec<NodeSpec> {
    classes
        .iter()
        .enumerate()
        .map(|(k, &(share, limit, reserved))| {
            let mut spec = NodeSpec::new(&format!("c{k}"), PolicyKind::Fifo);
            spec.member.weight = share;
            spec.member.quantum = share * 1500;
            spec.member.priority = Some(k as u8 % 3);
            spec.member.reservation = reserved.map(Rate::mbit);
            match limit {
                Some(mbit) => spec.rate(Rate::mbit(mbit), 0),
                None => spec,
            }
        })
        .collect()
}

/// How far class `k` fell behind `bps` over any stretch of `deps` through which it had
/// packets waiting, in bytes, and when: over each run of departures through which it is
/// backlogged, its bytes served since the run began less the rate's, against the most they
/// have been. `None` if it never fell behind.
fn furthest_behind(deps: &[Dep], k: usize, bps: u64) -> Option<(f64, u64)> {
    let per_ns = bps as f64 / 8e9;
    let (mut served, mut best, mut worst) = (0.0f64, None::<f64>, None::<(f64, u64)>);
    for d in deps {
        if d.through & 1 << k == 0 {
            (served, best) = (0.0, None);
            continue;
        }
        if d.class == k {
            served += f64::from(d.len);
        }
        let ahead = served - per_ns * d.at as f64;
        let most = best.map_or(ahead, |b| b.max(ahead));
        if most - ahead > worst.map_or(0.0, |w| w.0) {
            worst = Some((most - ahead, d.at));
        }
        best = Some(most);
    }
    worst
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The two properties above hold from the moment a class's weight, reservation and limit
    /// change at run time, with the new values: every backlogged reservation is served over
    /// any stretch after the change (or the class's new limit, if less), and two classes
    /// without one or a limit keep start-time fair queuing's bound. On random classes,
    /// changes, sizes and arrivals, without the oracle (which shares the policies' reaction
    /// to a change).
    #[test]
    fn guarantees_and_shares_hold_from_a_change_at_run_time(
        policy in prop::sample::select(vec![PolicyKind::Wfq, PolicyKind::HClock, PolicyKind::Htb]),
        classes in prop::collection::vec((1u32..8, 0u64..=4), 2..5),
        change in (0usize..300, 0usize..4, 1u32..8, 0u64..=4, prop::option::of(1u64..600)),
        arrivals in prop::collection::vec((0usize..4, 64u32..1500, 0u64..4_000), 1..300),
    ) {
        const SLACK: f64 = 3000.0;
        let (when, changed, weight, units, limit) = change;
        let changed = changed % classes.len();
        // WFQ has weights only.
        let reserves = |units: u64| if policy == PolicyKind::Wfq { 0 } else { units };
        let before: Vec<(u32, u64)> = classes.iter().map(|&(w, u)| (w, reserves(u))).collect();
        let mut after = before.clone();
        after[changed] = (weight, reserves(units));
        // Reservations in units of 50 Mbit/s, scaled down to fit 800 Mbit/s before and after.
        let total = |c: &[(u32, u64)]| c.iter().map(|c| c.1).sum::<u64>();
        let scale = total(&before).max(total(&after)).max(16);
        let bps = |c: &[(u32, u64)], k: usize| c[k].1 * 50_000_000 * 16 / scale;
        let rate = |c: &[(u32, u64)], k: usize| Rate::new(bps(c, k));
        let specs = (0..classes.len())
            .map(|k| {
                let spec = NodeSpec::new(&format!("c{k}"), PolicyKind::Fifo).weight(before[k].0);
                match rate(&before, k) {
                    Some(r) => spec.reservation(r),
                    None => spec,
                }
            })
            .collect();
        let root = NodeSpec::new("root", policy).queue(HEAP);
        let s = over_classes(root, specs, 1000);
        let mut changed_at = None;
        let (deps, _) = through_changing_classes(s, classes.len(), &arrivals, |s, next, now| {
            if next == when.min(arrivals.len() - 1) {
                let n = s.node_by_name(&format!("c{changed}")).expect("a class");
                s.set_weight(n, weight);
                s.set_reservation(now, n, rate(&after, changed));
                if let Some(mbit) = limit {
                    s.set_rate(now, n, Some(Rate::mbit(mbit)), 0);
                }
                changed_at = Some(now);
            }
        });
        prop_assert_eq!(deps.len(), arrivals.len());
        let changed_at = changed_at.expect("changed before an arrival");
        // The largest packets before the change too: the last one sent before it may set
        // where a class starts after it.
        let lmax = |k: usize| {
            deps.iter().filter(|d| d.class == k).map(|d| d.len).max().unwrap_or(0)
        };
        let deps = &deps[deps.partition_point(|d| d.at < changed_at)..];
        // What each class is guaranteed after the change, and the slack of its limit's slot.
        let limit_of = |k: usize| if k == changed { limit } else { None };
        let guaranteed = |k: usize| {
            limit_of(k).map_or(bps(&after, k), |mbit| bps(&after, k).min(mbit * 1_000_000))
        };
        for k in 0..classes.len() {
            let slot = limit_of(k).map_or(0.0, |mbit| mbit as f64 / 8e3 * 1024.0);
            if let Some((behind, at)) = furthest_behind(deps, k, guaranteed(k)) {
                prop_assert!(
                    behind <= SLACK + slot,
                    "{:?}, class {} ({} bit/s of {:?}, {:?} and {:?} Mbit/s after {} ns): \
                     {:.0} B behind at {} ns",
                    policy, k, guaranteed(k), before, after, limit, changed_at - S, behind,
                    at - S
                );
            }
        }
        let shared: Vec<usize> = (0..classes.len())
            .filter(|&k| after[k].1 == 0 && limit_of(k).is_none())
            .collect();
        for (i, &f) in shared.iter().enumerate() {
            for &m in &shared[i + 1..] {
                let (wf, wm) = (f64::from(after[f].0), f64::from(after[m].0));
                let bound = 2.0 * (f64::from(lmax(f)) / wf + f64::from(lmax(m)) / wm);
                let spread = widest_gap(deps, f, m, wf, wm);
                prop_assert!(
                    spread <= bound + 1e-9,
                    "{:?}, classes {} and {} ({:?}, {:?} after {} ns): {:.1} apart, bound {:.1}",
                    policy, f, m, before, after, changed_at - S, spread, bound
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The fairness bounds above hold between the flows of a per-flow leaf too, with a flow
    /// table too small for them all: idle flows are reclaimed for new ones (and a packet is
    /// refused when no slot is free), and a flow that comes back must start where a new one
    /// would or behind, never ahead of what it was served. Start-time fair queuing's bound
    /// for WFQ's and hClock's flows (equal weights), DRR's in rounds of its 3028 B quantum.
    #[test]
    fn flows_of_a_leaf_keep_the_fairness_bound_with_a_small_flow_table(
        policy in prop::sample::select(vec![PolicyKind::Wfq, PolicyKind::HClock, PolicyKind::Drr]),
        flows in 2usize..6,
        table in 1usize..6,
        arrivals in prop::collection::vec((0usize..6, 64u32..1500, 0u64..4_000), 1..300),
    ) {
        let config = SchedConfig { flows: table, ..cfg(1000) };
        let s = one_leaf(config, NodeSpec::new("leaf", policy).queue(HEAP));
        let deps = through_classes(s, flows, &arrivals);
        let lmax = |k: usize| {
            deps.iter().filter(|d| d.class == k).map(|d| d.len).max().unwrap_or(0)
        };
        for f in 0..flows {
            for m in f + 1..flows {
                let (spread, bound) = if policy == PolicyKind::Drr {
                    let q = 3028.0;
                    (widest_gap(&deps, f, m, q, q), 2.0 + 6.0 * 1500.0 / q)
                } else {
                    let bound = 2.0 * f64::from(lmax(f) + lmax(m));
                    (widest_gap(&deps, f, m, 1.0, 1.0), bound)
                };
                prop_assert!(
                    spread <= bound + 1e-9,
                    "{:?}, flows {} and {} of {} in {} slots: {:.2} apart, bound {:.2}",
                    policy, f, m, flows, table, spread, bound
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Every flow of an hClock leaf with a `flow_reservation` gets it over any stretch in
    /// which it has packets waiting, less a packet of its own and one of another flow, with a
    /// flow table too small for them all (a flow reclaimed and back starts anew). At most
    /// five flows of at most 160 Mbit/s each on the 1 Gbit/s link, on random arrivals,
    /// without the oracle.
    #[test]
    fn flows_of_an_hclock_leaf_get_their_reservations_with_a_small_flow_table(
        mbit in prop::sample::select(vec![10u64, 50, 160]),
        flows in 2usize..6,
        table in 1usize..6,
        arrivals in prop::collection::vec((0usize..6, 64u32..1500, 0u64..4_000), 1..300),
    ) {
        const SLACK: f64 = 3000.0;
        let config = SchedConfig { flows: table, ..cfg(1000) };
        let mut leaf = NodeSpec::new("leaf", PolicyKind::HClock).queue(HEAP);
        leaf.flows.reservation = Some(Rate::mbit(mbit));
        let deps = through_classes(one_leaf(config, leaf), flows, &arrivals);
        for k in 0..flows {
            if let Some((behind, at)) = furthest_behind(&deps, k, mbit * 1_000_000) {
                prop_assert!(
                    behind <= SLACK,
                    "flow {} of {} in {} slots at {} Mbit/s: {:.0} B behind at {} ns",
                    k, flows, table, mbit, behind, at - S
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// A paced flow never sends faster than its rate on the wire, beyond its burst and the
    /// packets past its gate: over any stretch from one of its departures to a later one,
    /// its bytes are at most its rate's over the stretch and a shaper slot, plus its burst
    /// and three of its largest packets (at most two are past its gate at a time, waiting
    /// for the leaf's policy, and one more may be released as the stretch begins). For every
    /// policy that runs flows at a leaf, whose fair queuing holds flows back and lets them
    /// go, on random rates, bursts, sizes and arrivals, without the oracle.
    #[test]
    fn a_paced_flow_keeps_its_rate_on_the_wire_whatever_its_leaf(
        policy in prop::sample::select(vec![
            PolicyKind::Fq, PolicyKind::Wfq, PolicyKind::Drr, PolicyKind::HClock,
            PolicyKind::Fifo, PolicyKind::Pfabric, PolicyKind::Lqf,
        ]),
        mbit in prop::sample::select(vec![10u64, 100, 400, 900]),
        burst in prop::sample::select(vec![0u64, 3000, 15_000]),
        flows in 1usize..5,
        arrivals in prop::collection::vec((0usize..4, 64u32..1500, 0u64..4_000), 1..300),
    ) {
        const SLOT: f64 = 1024.0;
        let mut leaf = NodeSpec::new("leaf", policy);
        leaf.flow_rate = Some(Rate::mbit(mbit));
        leaf.flow_burst = burst;
        let s = one_leaf(cfg(1000), leaf);
        let deps = through_classes(s, flows, &arrivals);
        prop_assert_eq!(deps.len(), arrivals.len());
        let per_ns = mbit as f64 / 8e3;
        for k in 0..flows {
            let mine: Vec<Dep> = deps.iter().filter(|d| d.class == k).copied().collect();
            let lmax = mine.iter().map(|d| d.len).max().unwrap_or(0);
            let allowed = burst as f64 + 3.0 * f64::from(lmax) + per_ns * SLOT;
            let (over, at) = furthest_ahead(&mine, mbit * 1_000_000);
            prop_assert!(
                over <= allowed + 1e-6,
                "{:?}, flow {} of {} at {} Mbit/s, burst {}: {:.0} B over its rate by {} ns, \
                 {:.0} allowed",
                policy, k, flows, mbit, burst, over, at.saturating_sub(S), allowed
            );
        }
    }
}

/// The most that `deps` went beyond `bps`, in bytes, and when: over any stretch from one
/// departure to a later one (both counted), its bytes less the rate's over the stretch.
fn furthest_ahead(deps: &[Dep], bps: u64) -> (f64, u64) {
    let per_ns = bps as f64 / 8e9;
    // Bytes from departure i to j, less the rate's over [t_i, t_j]: the least of
    // (bytes before i - rate * t_i) over i, against (bytes up to j - rate * t_j).
    let (mut before, mut least, mut most) = (0.0f64, f64::MAX, (0.0f64, 0));
    for d in deps {
        least = least.min(before - per_ns * d.at as f64);
        before += f64::from(d.len);
        let over = before - per_ns * d.at as f64 - least;
        if over > most.0 {
            most = (over, d.at);
        }
    }
    most
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The root's rate holds on the wire: over any stretch from one departure to a later
    /// one, the bytes sent are at most its rate's over the stretch (and a ns: times are whole
    /// ns, and a packet due within one may go at its start) plus its burst and the largest
    /// packet, whatever the tree below it limits and however its policy orders, on random
    /// rates, bursts, classes and arrivals (with idle stretches long enough to gather the
    /// burst), without the oracle.
    #[test]
    fn the_roots_rate_holds_on_the_wire(
        policy in prop::sample::select(vec![
            PolicyKind::Fifo, PolicyKind::Prio, PolicyKind::Wfq, PolicyKind::Drr,
            PolicyKind::HClock, PolicyKind::Htb,
        ]),
        mbit in prop::sample::select(vec![1u64, 10, 100, 400, 900]),
        burst in prop::sample::select(vec![0u64, 3000, 15_000]),
        classes in prop::collection::vec((1u32..8, prop::option::of(1u64..600), prop::option::of(1u64..200)), 1..5),
        arrivals in prop::collection::vec((0usize..4, 64u32..1500, 0u64..4_000), 1..300),
        idle in prop::sample::select(vec![1u64, 100, 10_000]),
    ) {
        // Gaps stretched by `idle`, up to 40 ms: the root idles long enough to gather its burst.
        let arrivals: Vec<_> = arrivals.iter().map(|&(c, len, gap)| (c, len, gap * idle)).collect();
        let root = NodeSpec::new("root", policy).rate(Rate::mbit(mbit), burst);
        let s = over_classes(root, any_classes(&classes), 1000);
        let deps = through_classes(s, classes.len(), &arrivals);
        prop_assert_eq!(deps.len(), arrivals.len());
        let lmax = deps.iter().map(|d| d.len).max().unwrap_or(0);
        let allowed = burst as f64 + f64::from(lmax) + mbit as f64 / 8e3;
        let (over, at) = furthest_ahead(&deps, mbit * 1_000_000);
        prop_assert!(
            over <= allowed + 1e-6,
            "{:?} root at {} Mbit/s, burst {}: {:.1} B over its rate by {} ns, {:.1} allowed",
            policy, mbit, burst, over, at.saturating_sub(S), allowed
        );
    }
}

/// A packet in the scheduler, as the order properties see it.
#[derive(Clone, Copy, Debug)]
struct Queued {
    token: u64,
    flow: u64,
    priority: u8,
    /// EDF's deadline (none: the latest there is).
    deadline: u64,
    /// LSTF's time: arrival + slack.
    out_of_slack: u64,
    remaining: u64,
}

/// Whether `policy`, at a leaf on an exact queue, may serve `sent` next from `queued` (in
/// arrival order), by its published definition; ties between flows go either way.
fn first_by_definition(policy: PolicyKind, queued: &[Queued], sent: &Queued) -> bool {
    let head_of_its_flow = || queued.iter().find(|q| q.flow == sent.flow).map(|q| q.token);
    let per_flow = |of: &dyn Fn(&[&Queued]) -> u64, most: bool| {
        let mut flows: HashMap<u64, Vec<&Queued>> = HashMap::new();
        for q in queued {
            flows.entry(q.flow).or_default().push(q);
        }
        let mine = of(&flows[&sent.flow]);
        let best = flows.values().map(|f| of(f));
        head_of_its_flow() == Some(sent.token)
            && if most {
                best.max() == Some(mine)
            } else {
                best.min() == Some(mine)
            }
    };
    // The first packet in arrival order with the least `key`.
    let first_least = |key: &dyn Fn(&Queued) -> u64| {
        let least = queued.iter().map(key).min();
        queued
            .iter()
            .find(|q| Some(key(q)) == least)
            .map(|q| q.token)
            == Some(sent.token)
    };
    match policy {
        PolicyKind::Fifo => first_least(&|_| 0),
        PolicyKind::Prio => first_least(&|q| u64::from(q.priority)),
        PolicyKind::Edf => first_least(&|q| q.deadline),
        PolicyKind::Lstf => first_least(&|q| q.out_of_slack),
        PolicyKind::Pfabric => per_flow(&|f| f.iter().map(|q| q.remaining).min().unwrap(), false),
        PolicyKind::Lqf => per_flow(&|f| f.len() as u64, true),
        other => unreachable!("{other:?} is not an order policy"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every order policy serves next what its definition puts first, on random packets and
    /// times, at a leaf on an exact queue, checked without the oracle (which shares the
    /// policies' ranks): FIFO the oldest packet; strict priority the oldest of the most
    /// urgent level; EDF the oldest with the earliest deadline; LSTF the oldest that runs
    /// out of slack first; pFabric a flow's first packet, of a flow with the least remaining
    /// size among its packets; LQF a flow's first packet, of a flow with the most packets.
    #[test]
    fn every_order_policy_serves_first_what_its_definition_puts_first(
        policy in prop::sample::select(vec![
            PolicyKind::Fifo, PolicyKind::Prio, PolicyKind::Edf, PolicyKind::Lstf,
            PolicyKind::Pfabric, PolicyKind::Lqf,
        ]),
        ops in prop::collection::vec(
            (any::<bool>(), 0u64..6, 0u8..4, 0u64..4, 0u64..3_000_000, 1u64..100_000, 0u64..500_000),
            1..400,
        ),
    ) {
        let mut s = one_leaf(cfg(1000), NodeSpec::new("leaf", policy).queue(HEAP));
        let (mut queued, mut now) = (Vec::<Queued>::new(), S);
        for (token, (send, flow, priority, due_ms, slack, remaining, gap)) in (0u64..).zip(ops) {
            now += gap;
            if send || queued.is_empty() {
                let mut p = packet(token, 0, flow, 100);
                p.fields = Fields {
                    priority,
                    // Whole ms from now, or none (0).
                    deadline: if due_ms == 0 { 0 } else { now + due_ms * MS },
                    slack,
                    remaining,
                    pacing_bps: 0,
                };
                s.enqueue(now, &p).unwrap();
                queued.push(Queued {
                    token,
                    flow,
                    priority,
                    deadline: if due_ms == 0 { u64::MAX } else { now + due_ms * MS },
                    out_of_slack: now + slack,
                    remaining,
                });
            } else {
                let d = s.dequeue(now).expect("packets are held");
                let at = queued.iter().position(|q| q.token == d.token).expect("a queued packet");
                prop_assert!(
                    first_by_definition(policy, &queued, &queued[at]),
                    "{:?} served {:?} before {:?}", policy, queued[at], queued
                );
                queued.remove(at);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// EDF and LSTF leaves on `auto` queues (bucketed) serve in their order to within a
    /// bucket (2^19 ns): the packet served next ranks at most a bucket after the first rank
    /// queued, a rank being the deadline (or arrival + slack) held to between the packet's
    /// arrival (overdue: due now) and a second after it (later, or none: as a second ahead).
    /// On random deadlines, slacks and times within a backlog younger than a second, without
    /// the oracle.
    #[test]
    fn edf_and_lstf_on_bucketed_queues_serve_in_order_to_within_a_bucket(
        policy in prop::sample::select(vec![PolicyKind::Edf, PolicyKind::Lstf]),
        ops in prop::collection::vec(
            (any::<bool>(), 0u64..1_700_000, 0u64..200_000),
            1..400,
        ),
    ) {
        const BUCKET: u64 = 1 << 19;
        let mut s = one_leaf(cfg(1000), NodeSpec::new("leaf", policy));
        // (token, rank as defined above)
        let (mut queued, mut now) = (Vec::<(u64, u64)>::new(), S);
        for (token, (send, due_us, gap)) in (0u64..).zip(ops) {
            now += gap;
            if send || queued.is_empty() {
                let mut p = packet(token, 0, token, 100);
                // EDF: from 100 ms overdue to 1.6 s ahead, or none (0 us); LSTF: a slack.
                let at = match (policy, due_us) {
                    (PolicyKind::Edf, 0) => u64::MAX,
                    (PolicyKind::Edf, _) => now + due_us * 1000 - 100 * MS,
                    _ => now + due_us * 1000,
                };
                p.fields.deadline = if at == u64::MAX { 0 } else { at };
                p.fields.slack = due_us * 1000;
                s.enqueue(now, &p).unwrap();
                queued.push((token, at.clamp(now, now + S)));
            } else {
                let d = s.dequeue(now).expect("packets are held");
                let at = queued.iter().position(|q| q.0 == d.token).expect("a queued packet");
                let first = queued.iter().map(|q| q.1).min().unwrap_or(0);
                prop_assert!(
                    queued[at].1 <= first + BUCKET,
                    "{:?} served rank {} while {} waited ({} ns later)",
                    policy, queued[at].1 - S, first - S, queued[at].1 - first
                );
                queued.remove(at);
            }
        }
    }
}

/// Start-time fair queuing's bound between `f` and `m` (shares `sf`, `sm`: weights) over
/// `deps`, as the properties above check it, or DRR's (shares: quanta). Returns the widest
/// gap and the bound.
fn gap_and_bound(
    policy: PolicyKind,
    deps: &[Dep],
    f: usize,
    m: usize,
    sf: u32,
    sm: u32,
) -> (f64, f64) {
    let (sf, sm) = (f64::from(sf), f64::from(sm));
    let lmax = |k: usize| {
        let most = deps.iter().filter(|d| d.class == k).map(|d| d.len).max();
        f64::from(most.unwrap_or(0))
    };
    let bound = if policy == PolicyKind::Drr {
        2.0 + 3.0 * (1500.0 / sf + 1500.0 / sm)
    } else {
        2.0 * (lmax(f) / sf + lmax(m) / sm)
    };
    (widest_gap(deps, f, m, sf, sm), bound)
}

/// `deps` of a tree's leaves seen as departures of the groups they are in (`group_of`, by
/// leaf): a group has packets waiting while any of its leaves has.
fn by_group(deps: &[Dep], group_of: &[usize]) -> Vec<Dep> {
    deps.iter()
        .map(|d| Dep {
            class: group_of[d.class],
            through: (0..group_of.len())
                .filter(|&k| d.through & 1 << k != 0)
                .fold(0, |m, k| m | 1 << group_of[k]),
            ..*d
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// The fairness bounds hold at every level of a two-level tree: between the root's
    /// children (a FIFO leaf or a fair node over FIFO leaves), counting all their leaves'
    /// packets, and between the leaves of each fair node, over any stretch in which both have
    /// packets waiting, however their parent is served. Start-time fair queuing's bound for
    /// WFQ's, hClock's and HTB's shares, DRR's in rounds; random shapes, shares, sizes and
    /// arrivals, without the oracle.
    #[test]
    fn every_level_of_a_tree_keeps_its_fairness_bound(
        root in prop::sample::select(vec![
            PolicyKind::Wfq, PolicyKind::Drr, PolicyKind::HClock, PolicyKind::Htb,
        ]),
        groups in prop::collection::vec(
            (
                1u32..8,
                prop::option::of((
                    prop::sample::select(vec![
                        PolicyKind::Wfq, PolicyKind::Drr, PolicyKind::HClock, PolicyKind::Htb,
                    ]),
                    prop::collection::vec(1u32..8, 2..4),
                )),
            ),
            2..4,
        ),
        arrivals in prop::collection::vec((0usize..8, 64u32..1500, 0u64..4_000), 1..300),
    ) {
        // Shares 1..8: weights, or quanta of that many 1500 B under DRR.
        let share = |policy: PolicyKind, w: u32| if policy == PolicyKind::Drr { 1500 * w } else { w };
        let mut b = TreeBuilder::new(cfg(1000));
        let root_spec = NodeSpec::new("root", root).queue(HEAP);
        let top = b.root(root_spec.clone());
        let (mut group_of, mut leaf_share) = (Vec::new(), Vec::new());
        for (g, (w, inner)) in groups.iter().enumerate() {
            let name = format!("g{g}");
            match inner {
                None => {
                    let spec = sharing(NodeSpec::new(&name, PolicyKind::Fifo), &root_spec, share(root, *w));
                    let leaf = b.child(top, spec);
                    b.rule(vec![Match::Class(group_of.len() as u32)], leaf);
                    group_of.push(g);
                    leaf_share.push(None);
                }
                Some((policy, shares)) => {
                    let spec = NodeSpec::new(&name, *policy).queue(HEAP);
                    let node = b.child(top, sharing(spec.clone(), &root_spec, share(root, *w)));
                    for (i, &ws) in shares.iter().enumerate() {
                        let leaf = NodeSpec::new(&format!("{name}l{i}"), PolicyKind::Fifo);
                        let leaf = b.child(node, sharing(leaf, &spec, share(*policy, ws)));
                        b.rule(vec![Match::Class(group_of.len() as u32)], leaf);
                        group_of.push(g);
                        leaf_share.push(Some((*policy, share(*policy, ws))));
                    }
                }
            }
        }
        let s = b.build().unwrap();
        let deps = through_classes(s, group_of.len(), &arrivals);
        prop_assert_eq!(deps.len(), arrivals.len());
        let tops = by_group(&deps, &group_of);
        for f in 0..groups.len() {
            for m in f + 1..groups.len() {
                let (sf, sm) = (share(root, groups[f].0), share(root, groups[m].0));
                let (gap, bound) = gap_and_bound(root, &tops, f, m, sf, sm);
                prop_assert!(
                    gap <= bound + 1e-9,
                    "{:?} root, groups {} and {} of {:?}: {:.2} apart, bound {:.2}",
                    root, f, m, groups, gap, bound
                );
            }
        }
        for f in 0..group_of.len() {
            for m in f + 1..group_of.len() {
                if group_of[f] != group_of[m] {
                    continue;
                }
                if let (Some((policy, sf)), Some((_, sm))) = (leaf_share[f], leaf_share[m]) {
                    let (gap, bound) = gap_and_bound(policy, &deps, f, m, sf, sm);
                    prop_assert!(
                        gap <= bound + 1e-9,
                        "{:?} under {:?} root, leaves {} and {} of {:?}: {:.2} apart, bound {:.2}",
                        policy, root, f, m, groups, gap, bound
                    );
                }
            }
        }
    }
}

#[test]
fn wfq_shares_are_within_one_percent_over_long_runs() {
    // Internal WFQ (per-packet tags) over four weighted classes of mixed packet sizes.
    assert_weighted_shares(PolicyKind::Wfq, &[1, 2, 3, 4], &[1500, 64, 900, 1200]);
}

#[test]
fn heavy_weights_share_as_light_ones_do_over_long_runs() {
    // Weights are relative: 60000 : 30000 : 10000 must share as 6 : 3 : 1. A 1500 B packet at
    // weight 60000 moves a tag 1/1280 of auto's cFFS bucket, so members take turns within a
    // bucket; a member's next start tag re-anchored at the virtual time used to erase the
    // lead its weight earned there, and these shared 33 : 33 : 33.
    for policy in [PolicyKind::Wfq, PolicyKind::HClock, PolicyKind::Htb] {
        assert_weighted_shares(policy, &[60_000, 30_000, 10_000], &[1500; 3]);
    }
}

#[test]
fn small_packets_at_weights_that_do_not_divide_the_unit_share_within_one_percent() {
    // A 64 B packet at weight 59 927 is 69.99 units of virtual time, a 40 B one at 63 953
    // 40.99: each charge truncated to whole units, the heavy class got ahead of its share
    // and the light one lost 1.4% and 2.4% of its own. Carried, the charges add up.
    for policy in [PolicyKind::Wfq, PolicyKind::HClock, PolicyKind::Htb] {
        for queue in [QueueChoice::Auto, HEAP] {
            for (weights, len) in [([59_927, 1024], 64), ([63_953, 1024], 40)] {
                let root = NodeSpec::new("root", policy).queue(queue);
                let mut s = weighted_classes(root, &weights, 10_000);
                let bytes = saturate(&mut s, 2, |_| len, 2_000_000);
                let light = bytes[1] as f64 / (bytes[0] + bytes[1]) as f64;
                let want = 1024.0 / f64::from(weights[0] + 1024);
                assert!(
                    (light - want).abs() / want < 0.01,
                    "{policy:?} {queue:?} {weights:?} {len} B: light share {light:.5}, want {want:.5}"
                );
            }
        }
    }
}

#[test]
fn a_flow_weight_that_does_not_divide_the_unit_keeps_small_and_large_packets_fair() {
    // Flow weight 59 927: truncated, each 64 B packet's charge lost 0.99 of 69.99 units and
    // each 1500 B one 0.4 of 1640.4: the 64 B flow got 1.2% more bytes. On an exact queue
    // the shares are now exact to a packet; on auto's, to a bucket (2^21 units, 1.9 MB at
    // this weight, a few percent of the run's 60 MB per flow at worst).
    for (queue, within) in [(HEAP, 0.001), (QueueChoice::Auto, 0.01)] {
        let mut leaf = NodeSpec::new("leaf", PolicyKind::Wfq).queue(queue);
        leaf.flows.weight = 59_927;
        let mut s = one_leaf(cfg(10_000), leaf);
        let bytes = saturate(&mut s, 2, |class| [64, 1500][class as usize], 1_000_000);
        let ratio = bytes[0] as f64 / bytes[1] as f64;
        assert!(
            (ratio - 1.0).abs() < within,
            "{queue:?}: 64 B / 1500 B bytes: {ratio:.5}"
        );
    }
}

#[test]
fn a_heavy_flow_weight_keeps_small_and_large_packets_fair_in_bytes() {
    // Per-flow WFQ with flow_weight 256: a flow of 64 B packets got 0.14 of the bytes of a
    // flow of 1500 B packets when the start tags were re-anchored (above).
    let mut leaf = NodeSpec::new("leaf", PolicyKind::Wfq);
    leaf.flows.weight = 256;
    let mut s = one_leaf(cfg(10_000), leaf);
    let flows = [(0, 0, 64), (1, 0, 1500)];
    let deps = Host::new().run(&mut s, &flows, 4, Some(Rate::gbit(10)), S, S + 100 * MS);
    let bytes = bytes_by(&deps, |d| d.flow as u32);
    let ratio = bytes[&0] as f64 / bytes[&1] as f64;
    assert!(
        (ratio - 1.0).abs() < 0.01,
        "64 B / 1500 B bytes: {ratio:.4}"
    );
}

#[test]
fn per_flow_wfq_and_drr_and_fq_share_equally() {
    // Fair in bytes, also for packets larger than the quantum (9000 B against 3028 B: the
    // flow overdraws and sits out the rounds it owes, as Linux fq does).
    for policy in [PolicyKind::Wfq, PolicyKind::Drr, PolicyKind::Fq] {
        assert_within_one_percent(policy, [1500, 100, 9000, 1448], 3);
    }
}

/// 20 flows of packets of `sizes` (in turn) through a `policy` leaf, each keeping `depth`
/// packets queued, for 100 ms at 10 Gbit/s: every flow's bytes are within 1% of the mean.
fn assert_within_one_percent(policy: PolicyKind, sizes: [u32; 4], depth: usize) {
    let mut b = TreeBuilder::new(cfg(10_000));
    let leaf = b.root(NodeSpec::new("leaf", policy));
    b.default_leaf(leaf);
    let mut s = b.build().unwrap();
    let flows: Vec<(u64, u32, u32)> = (0..20).map(|f| (f, 0, sizes[f as usize % 4])).collect();
    let deps = Host::new().run(&mut s, &flows, depth, Some(Rate::gbit(10)), S, S + 100 * MS);
    let bytes = bytes_by(&deps, |d| d.flow);
    let mean = bytes.values().sum::<u64>() as f64 / 20.0;
    for (f, b) in &bytes {
        assert!(
            (*b as f64 - mean).abs() / mean < 0.01,
            "{policy} {sizes:?} depth {depth}: flow {f} got {b}, mean {mean}"
        );
    }
}

#[test]
fn drr_and_fq_stay_fair_in_bytes_when_flows_empty_after_every_packet() {
    // One packet queued per flow: each flow empties when it is served and comes back at
    // once, so an overdraft (packets up to 9000 B against a 3028 B quantum) must survive
    // going idle. DRR gives an emptied member a fresh quantum next round, so its packets are
    // all at least a quantum here; fq keeps a flow's credit, so small packets are fair too.
    for (policy, sizes) in [
        (PolicyKind::Drr, [3028, 4000, 9000, 6100]),
        (PolicyKind::Fq, [3028, 4000, 9000, 6100]),
        (PolicyKind::Fq, [1500, 100, 9000, 1448]),
    ] {
        assert_within_one_percent(policy, sizes, 1);
    }
}

#[test]
fn drr_quanta_set_the_shares() {
    let mut b = TreeBuilder::new(cfg(10_000));
    let root = b.root(NodeSpec::new("root", PolicyKind::Drr));
    for (i, q) in [1500u32, 4500].iter().enumerate() {
        let mut spec = NodeSpec::new(&format!("c{i}"), PolicyKind::Fifo);
        spec.member.quantum = *q;
        let leaf = b.child(root, spec);
        b.rule(vec![Match::Class(i as u32)], leaf);
    }
    let mut s = b.build().unwrap();
    let deps = Host::new().run(
        &mut s,
        &[(0, 0, 1500), (1, 1, 1500)],
        4,
        Some(Rate::gbit(10)),
        S,
        S + 100 * MS,
    );
    let bytes = bytes_by(&deps, |d| d.class);
    let ratio = bytes[&1] as f64 / bytes[&0] as f64;
    assert!((ratio - 3.0).abs() < 0.03, "ratio {ratio}");
}

/// Achieved rate per 100 ms window (Carousel's conformance metric), skipping the first window.
fn windows(deps: &[Departure], start: u64, end: u64) -> Vec<f64> {
    let w = 100 * MS;
    let mut bins = vec![0u64; ((end - start) / w) as usize];
    for d in deps {
        if let Some(b) = bins.get_mut(((d.at - start) / w) as usize) {
            *b += u64::from(d.len);
        }
    }
    bins.iter().skip(1).map(|&b| b as f64 * 8.0 / 0.1).collect()
}

#[test]
fn a_rate_limit_holds_within_one_percent_per_100ms_at_10m_1g_40g() {
    for (rate, len, secs) in [
        (Rate::mbit(10), 1500, 3),
        (Rate::gbit(1), 1500, 1),
        (Rate::gbit(40), 9000, 1),
        // Past where BESS's limiter diverged (68 Gbit/s).
        (Rate::gbit(100), 9000, 1),
    ] {
        // The limit sits on an internal node above a per-flow leaf, so packets pass the leaf,
        // wait in the shaper, and continue to the root.
        let mut b = TreeBuilder::new(cfg(10_000));
        let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
        let limited = b.child(
            root,
            NodeSpec::new("limited", PolicyKind::Wfq).rate(rate, 0),
        );
        let leaf = b.child(limited, NodeSpec::new("flows", PolicyKind::Fq));
        b.default_leaf(leaf);
        let mut s = b.build().unwrap();
        let flows: Vec<(u64, u32, u32)> = (0..8).map(|f| (f, 0, len)).collect();
        let end = S + secs * S + 100 * MS;
        let deps = Host::new().run(&mut s, &flows, 2, None, S, end);
        let w = windows(&deps, S, end);
        assert!(w.len() >= 10, "{} windows", w.len());
        for r in &w {
            let err = (r - rate.bps() as f64).abs() / rate.bps() as f64;
            assert!(
                err < 0.01,
                "{rate}: window at {r:.0} bit/s, error {:.3}%",
                err * 100.0
            );
        }
    }
}

#[test]
fn flow_pacing_holds_each_flows_rate() {
    let mut b = TreeBuilder::new(cfg(10_000));
    let mut leaf = NodeSpec::new("paced", PolicyKind::Fq);
    leaf.flow_rate = Some(Rate::mbit(50));
    let leaf = b.root(leaf);
    b.default_leaf(leaf);
    let mut s = b.build().unwrap();
    let mut host = Host::new();
    // Flows 3 and 4 ask for their own pacing rates (Carousel: the transport's 2 cwnd / RTT).
    // The leaf's rate caps them, as Linux fq's maxrate does: 200 Mbit/s gets 50 (it used to
    // get 200: a packet's rate replaced the leaf's).
    for (f, bps) in [(3, 20_000_000), (4, 200_000_000)] {
        host.fields_of.insert(
            f,
            Fields {
                pacing_bps: bps,
                ..Fields::default()
            },
        );
    }
    let flows: Vec<(u64, u32, u32)> = (0..5).map(|f| (f, 0, 1500)).collect();
    let end = S + S + 100 * MS;
    let deps = host.run(&mut s, &flows, 2, None, S, end);
    for f in 0..5u64 {
        let mine: Vec<Departure> = deps.iter().copied().filter(|d| d.flow == f).collect();
        let want = if f == 3 { 20e6 } else { 50e6 };
        for r in windows(&mine, S, end) {
            assert!(
                (r - want).abs() / want < 0.01,
                "flow {f}: {r:.0} bit/s, want {want}"
            );
        }
    }
}

/// A train of 200 packets of 1000 B offered at once to `s` at `t0`: when each left.
fn train(s: &mut Scheduler, t0: u64) -> Vec<(u64, u64)> {
    for t in 0..200 {
        s.enqueue(t0, &packet(100 + t, 0, 1, 1000)).unwrap();
    }
    let mut sent = Vec::new();
    let mut now = t0;
    while sent.len() < 200 {
        match s.dequeue(now) {
            Some(d) => sent.push((now, u64::from(d.len))),
            None => now = s.next_event(now).unwrap().max(now + 1),
        }
    }
    sent
}

/// Send three packets of 1000 B of flow 1 from `S` on, through `s`: when the last left.
fn three_packets_through(s: &mut Scheduler) -> u64 {
    let mut now = S;
    for t in 0..3 {
        s.enqueue(now, &packet(t, 0, 1, 1000)).unwrap();
    }
    while let Some(t) = s.next_event(now) {
        now = now.max(t);
        s.dequeue(now);
    }
    now
}

/// `sent`, a train that started at `t0` through a gate of `rate` and `burst`, never went
/// faster than the gate allows: in any window of length w, at most the burst, a packet and
/// what the rate sends in w (plus one shaper slot of rounding); right at t0, at most the
/// burst and the packet that crosses it. Also, if the idle period before it refilled the
/// burst (`refilled`), that it was a burst: at least `burst` at once.
fn assert_within_burst(sent: &[(u64, u64)], t0: u64, rate: Rate, burst: u64, refilled: bool) {
    let slot = 1024;
    for i in 0..sent.len() {
        let mut bytes = 0;
        for &(at, len) in &sent[i..] {
            bytes += len;
            let w = at - sent[i].0 + slot;
            let allowed = burst + 1000 + rate.bytes_in(w);
            assert!(
                bytes <= allowed,
                "{rate}, burst {burst}: {bytes} B within {w} ns, allowed {allowed}"
            );
        }
    }
    let at_once: u64 = sent
        .iter()
        .filter(|(at, _)| *at == t0)
        .map(|(_, l)| l)
        .sum();
    let least = if refilled { burst } else { 0 };
    assert!(
        (least..=burst + 1000).contains(&at_once),
        "{rate}, burst {burst}: {at_once} B at once after idle"
    );
}

/// No train after an idle period goes out faster than the gate's burst allows, at low and
/// high rates, with the burst it was built with and with one changed at run time (raised
/// and lowered; a raise counts from the gate's last packet, so after the idle period it is
/// whole at once, as a token bucket refilled to its new size).
#[test]
fn no_burst_above_the_configured_burst_after_idle_at_low_and_high_rates() {
    for (rate, burst, changed) in [
        (Rate::from_bps(64_000).unwrap(), 0u64, 3000),
        (Rate::mbit(10), 15_000, 0),
        (Rate::gbit(1), 64_000, 150_000),
        (Rate::gbit(1), 64_000, 2000),
    ] {
        let mut b = TreeBuilder::new(SchedConfig {
            shaper: ShaperConfig {
                slot_ns: 1024,
                slots: 1 << 22,
                ..ShaperConfig::default()
            },
            ..cfg(10_000)
        });
        let root = b.root(NodeSpec::new("root", PolicyKind::Fifo).rate(rate, burst));
        b.default_leaf(root);
        let mut s = b.build().unwrap();
        // Some traffic, a long idle period, then a large train all at once.
        let now = three_packets_through(&mut s);
        let t0 = now + 100 * S;
        let sent = train(&mut s, t0);
        assert_within_burst(&sent, t0, rate, burst, true);
        // The burst changed while the gate is busy, then a long idle period and a train.
        let last = sent.last().map_or(t0, |&(at, _)| at);
        s.set_rate(last, root, Some(rate), changed);
        let t1 = last + 100 * S;
        let sent = train(&mut s, t1);
        assert_within_burst(&sent, t1, rate, changed, true);
    }
}

/// The same of an internal node's gate and of a flow's (`flow_rate`), whose packets wait in the
/// shaper (the root's gate above is checked at each dequeue), at rates whose packets take from
/// 1 us to 8 s, beyond the shaper's horizon (1.07 s) too, after idle periods from 0.1 s to 100 s.
#[test]
fn no_burst_above_the_configured_burst_after_idle_at_node_and_flow_gates() {
    for (bps, burst) in [
        (1_000, 0),
        (1_000, 3000),
        (10_000, 3000),
        (64_000, 0),
        (1_000_000_000, 64_000),
    ] {
        let rate = Rate::from_bps(bps).unwrap();
        for internal in [true, false] {
            let mut b = TreeBuilder::new(cfg(10_000));
            let leaf = if internal {
                let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
                let limited = b.child(
                    root,
                    NodeSpec::new("lim", PolicyKind::Wfq).rate(rate, burst),
                );
                b.child(limited, NodeSpec::new("flows", PolicyKind::Fifo))
            } else {
                let mut leaf = NodeSpec::new("flows", PolicyKind::Fifo);
                leaf.flow_rate = Some(rate);
                leaf.flow_burst = burst;
                b.root(leaf)
            };
            b.default_leaf(leaf);
            let mut s = b.build().unwrap();
            let mut now = three_packets_through(&mut s);
            for idle in [100 * S, 10 * S, S / 10] {
                let t0 = now + idle;
                let sent = train(&mut s, t0);
                // The burst and the last packet's time refill it (10 s do not, at 1 kbit/s).
                let refilled = idle >= rate.tx_time_ns(burst + 1000);
                assert_within_burst(&sent, t0, rate, burst, refilled);
                now = sent.last().map_or(t0, |&(at, _)| at);
            }
        }
    }
}

#[test]
fn pfabric_always_serves_the_flow_with_the_least_remaining_size() {
    let mut b = TreeBuilder::new(cfg(10_000));
    let leaf = b.root(NodeSpec::new("pfabric", PolicyKind::Pfabric));
    b.default_leaf(leaf);
    let mut s = b.build().unwrap();
    let mut rng = sluice_queue::workload::Rng::new(42);
    let mut remaining: HashMap<u64, u64> = HashMap::new();
    // Queued packets per flow: their remaining sizes, in order.
    let mut queued: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut token = 0;
    for step in 0..20_000 {
        if rng.next_u64() % 3 != 0 || s.is_empty() {
            let f = rng.next_u64() % 50;
            let rem = remaining
                .entry(f)
                .or_insert_with(|| 1500 + rng.next_u64() % 10_000_000);
            let len = 1500u32;
            let mut p = packet(token, 0, f, len);
            p.fields.remaining = *rem;
            token += 1;
            s.enqueue(0, &p).unwrap();
            queued.entry(f).or_default().push(*rem);
            *rem = rem.saturating_sub(u64::from(len));
            if *rem == 0 {
                remaining.remove(&f);
            }
        } else {
            let d = s.dequeue(0).unwrap();
            let mine = *queued[&d.flow].iter().min().unwrap();
            // Ranks keep 10 bits of mantissa: flows within 0.1% of each other may tie.
            for (g, other) in &queued {
                if let Some(&m) = other.iter().min() {
                    assert!(
                        mine as f64 <= m as f64 * 1.001,
                        "step {step}: served flow {} ({mine}) over flow {g} ({m})",
                        d.flow
                    );
                }
            }
            let q = queued.get_mut(&d.flow).unwrap();
            q.remove(0);
            if q.is_empty() {
                queued.remove(&d.flow);
            }
        }
    }
}

#[test]
fn a_slow_reservation_beside_fast_ones_takes_nothing_from_them() {
    // On a 1 Gbit/s link, b and c reserve 500 and 400 Mbit/s and d (weight 100, no
    // reservation) takes the rest; a reserves 1 kbit/s. Sized for a's next tag, auto's moving
    // range had half-second buckets, where a due b or c waited behind one that was not: b got
    // 485 and c 379.
    for policy in [PolicyKind::HClock, PolicyKind::Htb] {
        let mut b = TreeBuilder::new(cfg(10_000));
        let root = b.root(NodeSpec::new("root", policy));
        let specs = [
            ("a", Some(Rate::from_bps(1000).unwrap()), 1),
            ("b", Some(Rate::mbit(500)), 1),
            ("c", Some(Rate::mbit(400)), 1),
            ("d", None, 100),
        ];
        for (i, (name, r, w)) in specs.iter().enumerate() {
            let mut spec = NodeSpec::new(name, PolicyKind::Fifo).weight(*w);
            spec.member.reservation = *r;
            let leaf = b.child(root, spec);
            b.rule(vec![Match::Class(i as u32)], leaf);
        }
        let mut s = b.build().unwrap();
        let flows: Vec<(u64, u32, u32)> = (0..4).map(|i| (i, i as u32, 1500)).collect();
        let deps = Host::new().run(&mut s, &flows, 4, Some(Rate::gbit(1)), S, S + S);
        let bytes = bytes_by(&deps, |d| d.class);
        let mbit = |c: u32| bytes[&c] as f64 * 8.0 / 1e6;
        assert!(mbit(1) >= 495.0, "{policy:?}: b got {:.1} Mbit/s", mbit(1));
        assert!(mbit(2) >= 396.0, "{policy:?}: c got {:.1} Mbit/s", mbit(2));
    }
}

#[test]
fn hclock_meets_reservations_and_shares_the_rest_by_weight() {
    // Three VMs on a 1 Gbit/s link: A reserves 300 Mbit/s with weight 1; B and C reserve
    // nothing, weights 1 and 3. hClock (like mClock) gives each at least its reservation and
    // divides the rest by weight: A's weighted share (200) is below its reservation, so A gets
    // exactly 300 and B and C split the other 700 at 1:3.
    let mut b = TreeBuilder::new(cfg(10_000));
    let root = b.root(NodeSpec::new("root", PolicyKind::HClock));
    let specs = [
        ("a", 1u32, Some(Rate::mbit(300))),
        ("b", 1, None),
        ("c", 3, None),
    ];
    for (i, (name, w, r)) in specs.iter().enumerate() {
        let mut spec = NodeSpec::new(name, PolicyKind::Fifo).weight(*w);
        spec.member.reservation = *r;
        let leaf = b.child(root, spec);
        b.rule(vec![Match::Class(i as u32)], leaf);
    }
    let mut s = b.build().unwrap();
    let flows: Vec<(u64, u32, u32)> = (0..3).map(|i| (i, i as u32, 1500)).collect();
    let deps = Host::new().run(&mut s, &flows, 4, Some(Rate::gbit(1)), S, S + S);
    let bytes = bytes_by(&deps, |d| d.class);
    let mbit = |c: u32| bytes[&c] as f64 * 8.0 / 1e6;
    assert!(
        (mbit(0) - 300.0).abs() < 3.0,
        "A at its reservation: {:.1} Mbit/s",
        mbit(0)
    );
    assert!((mbit(1) - 175.0).abs() < 3.0, "B {:.1}", mbit(1));
    assert!((mbit(2) - 525.0).abs() < 5.0, "C {:.1}", mbit(2));
    // With a weight above its reservation's worth, A gets its weighted share instead.
    let (mut s, _) = two_leaves(
        NodeSpec::new("root", PolicyKind::HClock),
        NodeSpec::new("a", PolicyKind::Fifo)
            .weight(3)
            .reservation(Rate::mbit(100)),
        NodeSpec::new("c", PolicyKind::Fifo).weight(1),
    );
    let deps = Host::new().run(
        &mut s,
        &[(0, 0, 1500), (1, 1, 1500)],
        4,
        Some(Rate::gbit(1)),
        S,
        S + S,
    );
    let bytes = bytes_by(&deps, |d| d.class);
    let a_mbit = bytes[&0] as f64 * 8.0 / 1e6;
    assert!((a_mbit - 750.0).abs() < 8.0, "A by weight: {a_mbit:.1}");
}

#[test]
fn htb_guarantees_rates_and_lends_up_to_ceilings() {
    // 1 Gbit/s link. Gold: rate 600M, ceil 1G. Bronze: rate 100M, ceil 250M. Both greedy:
    // bronze gets its 100 plus borrowing up to its 250 ceiling; gold the rest (750).
    let mut b = TreeBuilder::new(cfg(10_000));
    let root = b.root(NodeSpec::new("root", PolicyKind::Htb));
    let gold = b.child(
        root,
        NodeSpec::new("gold", PolicyKind::Fifo)
            .reservation(Rate::mbit(600))
            .rate(Rate::gbit(1), 15_000),
    );
    let bronze = b.child(
        root,
        NodeSpec::new("bronze", PolicyKind::Fifo)
            .reservation(Rate::mbit(100))
            .rate(Rate::mbit(250), 15_000),
    );
    b.rule(vec![Match::Class(0)], gold);
    b.rule(vec![Match::Class(1)], bronze);
    let mut s = b.build().unwrap();
    let deps = Host::new().run(
        &mut s,
        &[(0, 0, 1500), (1, 1, 1500)],
        8,
        Some(Rate::gbit(1)),
        S,
        S + S,
    );
    let bytes = bytes_by(&deps, |d| d.class);
    let mbit = |c: u32| bytes[&c] as f64 * 8.0 / 1e6;
    assert!(
        (mbit(1) - 250.0).abs() < 5.0,
        "bronze at its ceiling: {:.1}",
        mbit(1)
    );
    assert!(
        (mbit(0) - 750.0).abs() < 10.0,
        "gold takes the rest: {:.1}",
        mbit(0)
    );
    // Bronze alone: capped at its ceiling, not the link.
    let mut s2 = b.build().unwrap();
    let deps = Host::new().run(&mut s2, &[(1, 1, 1500)], 8, Some(Rate::gbit(1)), S, S + S);
    let alone = bytes_by(&deps, |d| d.class)[&1] as f64 * 8.0 / 1e6;
    assert!((alone - 250.0).abs() < 5.0, "bronze alone: {alone:.1}");
}

#[test]
fn strict_priority_serves_high_before_low() {
    let mut b = TreeBuilder::new(cfg(10_000));
    let root = b.root(NodeSpec::new("root", PolicyKind::Prio));
    let hi = b.child(root, NodeSpec::new("hi", PolicyKind::Fifo).priority(0));
    let lo = b.child(root, NodeSpec::new("lo", PolicyKind::Fifo).priority(7));
    b.rule(vec![Match::Class(0)], hi);
    b.rule(vec![Match::Class(1)], lo);
    let mut s = b.build().unwrap();
    let deps = Host::new().run(
        &mut s,
        &[(0, 0, 1500), (1, 1, 1500)],
        4,
        Some(Rate::gbit(1)),
        S,
        S + 10 * MS,
    );
    assert!(
        deps.iter().all(|d| d.class == 0),
        "low priority never served while high is backlogged"
    );
}

#[test]
fn lqf_serves_the_longest_queue() {
    let mut b = TreeBuilder::new(cfg(10_000));
    let leaf = b.root(NodeSpec::new("lqf", PolicyKind::Lqf));
    b.default_leaf(leaf);
    let mut s = b.build().unwrap();
    let mut t = 0;
    for (flow, n) in [(1u64, 3), (2, 7), (3, 5)] {
        for _ in 0..n {
            s.enqueue(0, &packet(t, 0, flow, 100)).unwrap();
            t += 1;
        }
    }
    let flows: Vec<u64> = std::iter::from_fn(|| s.dequeue(0).map(|d| d.flow)).collect();
    // Flow 2 until it ties with flow 3 at 5, then they alternate by who reached the length first.
    assert_eq!(&flows[..2], &[2, 2]);
    let mut left = HashMap::from([(1u64, 3i32), (2, 7), (3, 5)]);
    for f in flows {
        let longest = *left.values().max().unwrap();
        assert_eq!(left[&f], longest, "served a shorter queue");
        *left.get_mut(&f).unwrap() -= 1;
    }
}

#[test]
fn lqf_tells_adjacent_lengths_apart_at_any_capacity() {
    // The default capacity (65536) and one far larger: `auto` sized the queue for one rank too
    // many (capacity + 1), which gave adjacent lengths one bucket at the default, and four
    // lengths one bucket at 2^18.
    for capacity in [SchedConfig::default().capacity, 1 << 18] {
        let config = SchedConfig {
            capacity,
            ..SchedConfig::default()
        };
        let mut s = one_leaf(config, NodeSpec::new("lqf", PolicyKind::Lqf));
        let mut t = 0;
        for (flow, n) in [(1u64, 3), (2, 4), (3, 1), (4, 2)] {
            for _ in 0..n {
                s.enqueue(0, &packet(t, 0, flow, 100)).unwrap();
                t += 1;
            }
        }
        let first: Vec<u64> = (0..2)
            .filter_map(|_| s.dequeue(0).map(|d| d.flow))
            .collect();
        // Flow 2 (4 packets), then flow 1, which reached 3 before flow 2 came down to it.
        assert_eq!(first, [2, 1], "capacity {capacity}");
    }
}

#[test]
fn edf_and_lstf_keep_deadlines_in_order_behind_a_backlog() {
    // A rate-limited root holds overdue packets for `wait`, then gets A (due in 1 s) and B (due
    // in 0.9 s). Deadlines were capped at now + 1 s while the queue's windows follow its
    // oldest entry: behind 74 ms of backlog at the worst phase, ranks went past the windows,
    // the queue clamped them, and B left after A.
    for policy in [PolicyKind::Edf, PolicyKind::Lstf] {
        for wait in [100 * MS, 500 * MS, 900 * MS] {
            let mut s = one_leaf(
                SchedConfig::default(),
                NodeSpec::new("root", policy).rate(Rate::mbit(10), 0),
            );
            let overdue = |token: u64| Fields {
                deadline: S,
                slack: 0,
                ..packet(token, 0, token, 1500).fields
            };
            for t in 0..1000 {
                let p = Packet {
                    fields: overdue(t),
                    ..packet(t, 0, t, 1500)
                };
                s.enqueue(S, &p).unwrap();
            }
            let mut now = S;
            while now < S + wait {
                if s.dequeue(now).is_none() {
                    now = s.next_event(now).unwrap().max(now + 1);
                }
            }
            let due = |token: u64, ahead: u64| Packet {
                fields: Fields {
                    deadline: now + ahead,
                    slack: ahead,
                    ..Fields::default()
                },
                ..packet(token, 0, token, 100)
            };
            s.enqueue(now, &due(10_001, S)).unwrap();
            s.enqueue(now, &due(10_002, 900 * MS)).unwrap();
            let mut order = Vec::new();
            while !s.is_empty() {
                match s.dequeue(now) {
                    Some(d) => order.push(d.token),
                    None => now = s.next_event(now).unwrap().max(now + 1),
                }
            }
            let at = |t: u64| order.iter().position(|&x| x == t).unwrap();
            assert!(
                at(10_002) < at(10_001),
                "{policy:?} after {wait} ns of backlog"
            );
            assert_eq!(s.stats().ranks_clamped, 0, "{policy:?} after {wait} ns");
        }
    }
}

/// An internal LSTF node on `auto` gets the approximate `circular_approx` queue (671 buckets
/// of 4.2 ms, alpha 16): inside the scheduler, with ranks computed by the policy from each
/// packet's arrival and slack, every child it picks must be within the queue's error bound
/// (sluice-queue checks the queue alone against the same bound). One packet per child at a
/// time, so each of the root's entries stands for one known packet and its rank; slacks mix a
/// few urgent packets with dense blocks far behind, the pattern that pulls the estimate off.
#[test]
fn an_approximate_root_serves_within_its_error_bound() {
    const CHILDREN: u32 = 400;
    const GRANULARITY: u64 = 1 << 22;
    let bound = sluice_queue::approx_gradient::Window::for_alpha(16)
        .expect("alpha 16")
        .error_bound as u64;
    let mut b = TreeBuilder::new(cfg(4 * CHILDREN as usize));
    let root = b.root(NodeSpec::new("root", PolicyKind::Lstf));
    let mut child_of = HashMap::new();
    for c in 0..CHILDREN {
        let leaf = b.child(root, NodeSpec::new(&format!("c{c}"), PolicyKind::Fifo));
        child_of.insert(leaf, c);
        b.rule(vec![Match::Class(c)], leaf);
        if c == 0 {
            b.default_leaf(leaf);
        }
    }
    let mut s = b.build().unwrap();
    assert!(
        s.describe()
            .contains(&format!("circular_approx(671 x {GRANULARITY})")),
        "auto's queue for an internal LSTF node:\n{}",
        s.describe()
    );
    let mut rng = sluice_queue::workload::Rng::new(5);
    // Child -> (token, rank) of its one queued packet.
    let mut queued: HashMap<u32, (u64, u64)> = HashMap::new();
    let (mut now, mut token, mut served, mut worst) = (10 * S, 0u64, 0u64, 0u64);
    for round in 0..300 {
        // A few urgent packets, then a dense block of slacks somewhere in the next second.
        let block_from = rng.next_u64() % (900 * MS);
        let block_len = 1 + rng.next_u64() % (100 * MS);
        let arrivals = 20 + rng.next_u64() % 300;
        for i in 0..arrivals {
            let free: Vec<u32> = (0..CHILDREN).filter(|c| !queued.contains_key(c)).collect();
            let Some(&child) = free.get((rng.next_u64() % free.len().max(1) as u64) as usize)
            else {
                break;
            };
            let slack = if i < 3 {
                rng.next_u64() % (10 * MS)
            } else {
                block_from + rng.next_u64() % block_len
            };
            let mut p = packet(token, child, u64::from(child), 100);
            p.fields.slack = slack;
            s.enqueue(now, &p).unwrap();
            queued.insert(child, (token, now + slack));
            token += 1;
        }
        // Serve part of it: each departure against the exact first rank queued.
        for _ in 0..rng.next_u64() % (arrivals + 1) {
            let Some(d) = s.dequeue(now) else { break };
            let child = child_of[&d.leaf];
            let (t, rank) = queued.remove(&child).expect("a queued child's packet");
            assert_eq!(t, d.token, "round {round}: child {child}'s own packet");
            let first = queued.values().fold(rank, |m, &(_, r)| m.min(r));
            let err = rank / GRANULARITY - first / GRANULARITY;
            assert!(
                err <= bound,
                "round {round}: served bucket {} with bucket {} queued: {err} > {bound}",
                rank / GRANULARITY,
                first / GRANULARITY
            );
            worst = worst.max(err);
            served += 1;
        }
        now += rng.next_u64() % (2 * MS);
    }
    while let Some(d) = s.dequeue(now) {
        let left = queued.remove(&child_of[&d.leaf]).map(|(t, _)| t);
        assert_eq!(left, Some(d.token), "a queued packet, once");
    }
    assert!(
        queued.is_empty() && s.is_empty(),
        "every packet leaves once"
    );
    assert_eq!(s.stats().ranks_clamped, 0);
    assert!(served > 10_000, "{served} checked departures");
    assert!(
        worst > 0,
        "the approximation must err here for the test to check its bound"
    );
    println!("worst order error {worst} buckets of {GRANULARITY} ns (bound {bound})");
}

#[test]
fn edf_and_lstf_order_by_deadline_and_slack() {
    for policy in [PolicyKind::Edf, PolicyKind::Lstf] {
        let mut b = TreeBuilder::new(cfg(1000));
        let leaf = b.root(NodeSpec::new("leaf", policy));
        b.default_leaf(leaf);
        let mut s = b.build().unwrap();
        let times = [50u64, 10, 30, 20, 40];
        for (i, &t) in times.iter().enumerate() {
            let mut p = packet(i as u64, 0, i as u64, 100);
            p.fields.deadline = S + t * MS;
            p.fields.slack = t * MS;
            s.enqueue(S, &p).unwrap();
        }
        let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(S).map(|d| d.token)).collect();
        assert_eq!(order, vec![1, 3, 2, 4, 0], "{policy}");
    }
}

#[test]
fn no_reordering_within_a_flow() {
    // Every policy, under a WFQ root with a rate-limited class (EDF and LSTF too: a flow
    // without deadlines, or slack, is served first come first served).
    for policy in [
        PolicyKind::Fifo,
        PolicyKind::Prio,
        PolicyKind::Wfq,
        PolicyKind::Drr,
        PolicyKind::Fq,
        PolicyKind::Pfabric,
        PolicyKind::Lqf,
        PolicyKind::HClock,
        PolicyKind::Edf,
        PolicyKind::Lstf,
    ] {
        let mut b = TreeBuilder::new(cfg(10_000));
        let root = b.root(NodeSpec::new("root", PolicyKind::Wfq));
        let a = b.child(root, NodeSpec::new("a", policy).rate(Rate::mbit(500), 3000));
        let c = b.child(root, NodeSpec::new("c", policy).weight(2));
        b.rule(vec![Match::Class(0)], a);
        b.default_leaf(c);
        let mut s = b.build().unwrap();
        let mut host = Host::new();
        for f in 0..10u64 {
            host.fields_of.insert(
                f,
                Fields {
                    remaining: 1_000_000 - f,
                    priority: (f % 3) as u8,
                    ..Fields::default()
                },
            );
        }
        let flows: Vec<(u64, u32, u32)> = (0..10)
            .map(|f| (f, (f % 2) as u32, [1500, 200][f as usize % 2]))
            .collect();
        let deps = host.run(&mut s, &flows, 5, Some(Rate::gbit(1)), S, S + 20 * MS);
        let mut last: HashMap<u64, u64> = HashMap::new();
        for d in &deps {
            if let Some(prev) = last.insert(d.flow, d.token) {
                assert!(
                    d.token > prev,
                    "{policy}: flow {} reordered ({} after {prev})",
                    d.flow,
                    d.token
                );
            }
        }
        assert!(deps.len() > 1000);
    }
}

/// The queues a per-packet node that ranks by time may have, `auto` first.
fn time_ranked_queues() -> impl Strategy<Value = QueueChoice> {
    let kind = |kind| QueueChoice::Kind {
        kind,
        buckets: None,
        granularity: None,
    };
    prop::sample::select(vec![
        QueueChoice::Auto,
        kind(QueueKind::Cffs),
        kind(QueueKind::CircularApprox),
        kind(QueueKind::BinaryHeap),
        kind(QueueKind::BTree),
        kind(QueueKind::SkipList),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// No reordering within a flow under EDF and LSTF on any queue, as a leaf (where `auto`
    /// takes a cFFS) and as an internal node over two FIFO leaves (where it takes the
    /// approximate `circular_approx`): each flow has its own slack (and a deadline as far
    /// ahead), and packets arrive and leave at random times. On `auto`'s approximate queue a
    /// leaf sent a flow's packets out of order, buckets of 4 ms apart; such a leaf now refuses
    /// one. Every accepted packet leaves once.
    #[test]
    fn no_reordering_within_a_flow_on_any_queue_of_a_time_ranked_node(
        policy in prop_oneof![Just(PolicyKind::Edf), Just(PolicyKind::Lstf)],
        queue in time_ranked_queues(),
        internal in any::<bool>(),
        slacks in prop::collection::vec(0u64..2 * S, 1..20),
        ops in prop::collection::vec((0usize..20, 0u64..5 * MS, any::<bool>()), 1..400),
    ) {
        let mut b = TreeBuilder::new(cfg(4096));
        let node = NodeSpec::new("n", policy).queue(queue);
        if internal {
            let root = b.root(node);
            let a = b.child(root, NodeSpec::new("a", PolicyKind::Fifo));
            let c = b.child(root, NodeSpec::new("c", PolicyKind::Fifo));
            b.rule(vec![Match::Class(0)], a);
            b.default_leaf(c);
        } else {
            let leaf = b.root(node);
            b.default_leaf(leaf);
        }
        let mut s = match b.build() {
            Ok(s) => s,
            Err(e) => {
                prop_assert!(!internal, "{e}");
                prop_assert!(matches!(e, sluice_sched::BuildError::ApproximateLeaf { .. }), "{e}");
                return Ok(());
            }
        };
        let mut now = S;
        let mut last: HashMap<u64, u64> = HashMap::new();
        let (mut accepted, mut departed) = (0u64, 0u64);
        let mut check = |d: sluice_sched::Dequeued| -> Result<(), TestCaseError> {
            if let Some(prev) = last.insert(d.flow, d.token) {
                prop_assert!(d.token > prev, "flow {}: {} after {prev}", d.flow, d.token);
            }
            departed += 1;
            Ok(())
        };
        for (token, (flow, dt, dequeue)) in ops.into_iter().enumerate() {
            now += dt;
            let flow = (flow % slacks.len()) as u64;
            let mut p = packet(token as u64, (flow % 2) as u32, flow, 1500);
            p.fields.slack = slacks[flow as usize];
            p.fields.deadline = now + slacks[flow as usize];
            if s.enqueue(now, &p).is_ok() {
                accepted += 1;
            }
            if dequeue && let Some(d) = s.dequeue(now) {
                check(d)?;
            }
        }
        while let Some(d) = s.dequeue(now) {
            check(d)?;
        }
        prop_assert_eq!(departed, accepted);
        prop_assert!(s.is_empty());
    }
}

#[test]
fn eiffel_fig47_two_limits_on_the_rightmost_leaf() {
    // Root paced at 40 Mbit/s; WFQ halves: left leaf, and an internal node limited to
    // 10 Mbit/s holding two leaves, the rightmost limited to 7 Mbit/s.
    let mut b = TreeBuilder::new(cfg(10_000));
    let root = b.root(NodeSpec::new("root", PolicyKind::Wfq).rate(Rate::mbit(40), 3000));
    let left = b.child(root, NodeSpec::new("left", PolicyKind::Fifo));
    let inner = b.child(
        root,
        NodeSpec::new("inner", PolicyKind::Wfq).rate(Rate::mbit(10), 3000),
    );
    let mid = b.child(inner, NodeSpec::new("mid", PolicyKind::Fifo));
    let right = b.child(
        inner,
        NodeSpec::new("right", PolicyKind::Fifo).rate(Rate::mbit(7), 3000),
    );
    for (c, n) in [(0u32, left), (1, mid), (2, right)] {
        b.rule(vec![Match::Class(c)], n);
    }
    let mut s = b.build().unwrap();
    let deps = Host::new().run(
        &mut s,
        &[(0, 0, 1500), (1, 1, 1500), (2, 2, 1500)],
        4,
        None,
        S,
        S + 2 * S,
    );
    let mbit =
        |c: u32| bytes_by(&deps, |d| d.class).get(&c).copied().unwrap_or(0) as f64 * 8.0 / 2e6;
    assert!(
        (mbit(2) - 5.0).abs() < 0.2,
        "right shares inner's 10 with mid: {:.2}",
        mbit(2)
    );
    assert!((mbit(1) - 5.0).abs() < 0.2, "mid: {:.2}", mbit(1));
    assert!(
        (mbit(0) - 30.0).abs() < 0.5,
        "left takes the rest of 40: {:.2}",
        mbit(0)
    );
    // With mid idle, right is held to its own 7 Mbit/s, under inner's 10.
    let mut s = b.build().unwrap();
    let deps = Host::new().run(&mut s, &[(2, 2, 1500)], 4, None, S, S + 2 * S);
    let r = bytes_by(&deps, |d| d.class)[&2] as f64 * 8.0 / 2e6;
    assert!((r - 7.0).abs() < 0.15, "right alone: {r:.2}");
}

#[test]
fn rejections_are_typed_and_counted() {
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 3,
        flows: 2,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Prio));
    let only = b.child(root, NodeSpec::new("only", PolicyKind::Fifo));
    b.rule(vec![Match::Class(1)], only);
    let mut s = b.build().unwrap();
    let reason = |r: Result<(), sluice_sched::Rejected>| r.unwrap_err().reason;
    assert_eq!(
        reason(s.enqueue(0, &packet(0, 9, 1, 100))),
        RejectReason::NoClass
    );
    assert_eq!(
        reason(s.enqueue(0, &packet(1, 1, 1, 0))),
        RejectReason::ZeroLength
    );
    s.enqueue(0, &packet(2, 1, 1, 100)).unwrap();
    s.enqueue(0, &packet(3, 1, 2, 100)).unwrap();
    assert_eq!(
        reason(s.enqueue(0, &packet(4, 1, 3, 100))),
        RejectReason::FlowTableFull
    );
    s.enqueue(0, &packet(5, 1, 2, 100)).unwrap();
    assert_eq!(
        reason(s.enqueue(0, &packet(6, 1, 2, 100))),
        RejectReason::BufferFull
    );
    let st = s.stats();
    for r in [
        RejectReason::NoClass,
        RejectReason::ZeroLength,
        RejectReason::FlowTableFull,
        RejectReason::BufferFull,
    ] {
        assert_eq!(st.rejected(r), 1, "{r:?}");
    }
    // A flow that emptied gives its slot to a new one.
    while s.dequeue(0).is_some() {}
    s.enqueue(0, &packet(7, 1, 3, 100)).unwrap();
    assert_eq!(s.stats().flows_reclaimed, 1);
}

#[test]
fn beyond_horizon_rejects_when_configured_and_clamps_otherwise() {
    for reject in [true, false] {
        let shaper = ShaperConfig {
            slot_ns: 1024,
            slots: 1024,
            beyond_horizon: if reject {
                sluice_queue::Overflow::Reject
            } else {
                sluice_queue::Overflow::Clamp
            },
            ..ShaperConfig::default()
        };
        let mut s = paced_leaf(PolicyKind::Fifo, Rate::mbit(1), shaper).unwrap();
        // 1500 B at 1 Mbit/s = 12 ms apart; the horizon is about 1 ms.
        s.enqueue(S, &packet(0, 0, 1, 1500)).unwrap();
        let second = s.enqueue(S, &packet(1, 0, 1, 1500));
        if reject {
            assert_eq!(second.unwrap_err().reason, RejectReason::BeyondHorizon);
            assert_eq!(s.len(), 1);
        } else {
            assert!(second.is_ok());
            assert!(s.stats().clamped >= 1);
        }
    }
}

/// A packet refused beyond the horizon leaves its flow as it was. (Its pacing rate was applied
/// first: 10 Mbit/s on a 1 Mbit/s flow repaid the gate's debt at the new rate, and the flow's
/// next release moved from 12 ms ahead to 1.2 ms.)
#[test]
fn a_packet_refused_beyond_the_horizon_leaves_its_flow_as_it_was() {
    let shaper = ShaperConfig {
        slot_ns: 1024,
        slots: 1024,
        beyond_horizon: sluice_queue::Overflow::Reject,
        ..ShaperConfig::default()
    };
    let mut s = one_leaf(
        SchedConfig { shaper, ..cfg(100) },
        NodeSpec::new("leaf", PolicyKind::Fifo),
    );
    let paced = |token, bps| Packet {
        fields: Fields {
            pacing_bps: bps,
            ..Fields::default()
        },
        ..packet(token, 0, 1, 1500)
    };
    s.enqueue(S, &paced(0, 1_000_000)).unwrap();
    assert_eq!(s.dequeue(S).unwrap().token, 0);
    let before = s.flow_next_release(0, 1);
    assert_eq!(before, Some(S + 12 * MS));
    let refused = s.enqueue(S + 1000, &paced(1, 10_000_000)).unwrap_err();
    assert_eq!(refused.reason, RejectReason::BeyondHorizon);
    assert_eq!(s.flow_next_release(0, 1), before);
    assert_eq!(s.stats().rejected(RejectReason::BeyondHorizon), 1);
}

#[test]
fn a_clamped_release_is_counted_once_and_leaves_at_its_time() {
    // On a slot boundary and off one: from mid-slot, now + horizon lies past the wheel's
    // window (which starts at the start of now's slot), so the wheel clamped the release
    // again and the scheduler counted it twice. And the release waits beyond the wheel
    // until its time: it used to leave from the wheel's last slot, 11 ms early.
    let shaper = ShaperConfig {
        slot_ns: 1024,
        slots: 1024,
        ..ShaperConfig::default()
    };
    for now in [1024 * 1_000_000, S + 1, S + 1023] {
        let mut s = paced_leaf(PolicyKind::Fifo, Rate::mbit(1), shaper).unwrap();
        s.enqueue(now, &packet(0, 0, 1, 1500)).unwrap();
        s.enqueue(now, &packet(1, 0, 1, 1500)).unwrap();
        // The first one's departure puts the gate 12 ms ahead: the second is clamped.
        assert_eq!(s.dequeue(now).unwrap().token, 0);
        assert_eq!(s.stats().clamped, 1, "now {now}: {:?}", s.stats());
        let (mut t, mut wakeups) = (now, 0);
        let sent = loop {
            t = s.next_event(t).unwrap();
            wakeups += 1;
            if let Some(d) = s.dequeue(t) {
                break (d.token, t);
            }
        };
        assert_eq!(sent.0, 1);
        let due = now + 12 * MS;
        assert!(
            sent.1 + 1024 > due && sent.1 <= due,
            "now {now}: left at {}",
            sent.1
        );
        // Nothing else waits in the shaper: the host is told the release's time. (It was
        // woken once per horizon.)
        assert_eq!(wakeups, 1, "now {now}");
        assert_eq!(s.stats().clamped, 1, "now {now}: {:?}", s.stats());
    }
}

/// A node's rate holds when one packet takes longer than the shaper's horizon at that rate:
/// 65 000 B at 100 Mbit/s is 5.2 ms, the horizon 4.2 ms. (Released at the horizon's end, the
/// node sent 124 Mbit/s.)
#[test]
fn a_node_rate_holds_with_packets_longer_than_the_horizon() {
    let c = SchedConfig {
        max_packet: 65536,
        shaper: ShaperConfig {
            slot_ns: 1024,
            slots: 4096,
            ..ShaperConfig::default()
        },
        ..cfg(1000)
    };
    let mut b = TreeBuilder::new(c);
    let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
    let n = b.child(
        root,
        NodeSpec::new("n", PolicyKind::Fifo).rate(Rate::mbit(100), 0),
    );
    b.default_leaf(n);
    let mut s = b.build().unwrap();
    for t in 0..100 {
        s.enqueue(S, &packet(t, 0, t, 65_000)).unwrap();
    }
    let mut now = S;
    let mut sent = Vec::new();
    while let Some(t) = s.next_event(now) {
        now = t.max(now);
        if let Some(d) = s.dequeue(now) {
            sent.push((now, u64::from(d.len)));
        }
    }
    assert_eq!(sent.len(), 100);
    let bytes: u64 = sent.iter().map(|d| d.1).sum::<u64>() - 65_000;
    let span = sent[99].0 - sent[0].0;
    let mbit = bytes as f64 * 8e3 / span as f64;
    assert!((mbit - 100.0).abs() < 0.1, "{mbit:.3} Mbit/s");
}

/// A release at the end of time (a stamp saturates at u64::MAX) is still something held, and
/// `next_event` names it: it said `None`, "nothing held", and a host would sleep for ever.
#[test]
fn next_event_names_a_release_at_the_end_of_time() {
    use sluice_queue::QueueKind;
    for kind in [
        QueueKind::TimingWheel,
        QueueKind::BTree,
        QueueKind::BinaryHeap,
        QueueKind::SkipList,
    ] {
        let shaper = ShaperConfig {
            kind,
            ..ShaperConfig::default()
        };
        let flow_gated = paced_leaf(PolicyKind::Fifo, Rate::mbit(1), shaper).unwrap();
        let mut b = TreeBuilder::new(SchedConfig { shaper, ..cfg(100) });
        let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
        let n = b.child(
            root,
            NodeSpec::new("n", PolicyKind::Fifo).rate(Rate::mbit(1), 0),
        );
        b.default_leaf(n);
        for mut s in [flow_gated, b.build().unwrap()] {
            let now = u64::MAX - 5 * MS;
            for t in 0..3 {
                s.enqueue(now, &packet(t, 0, 1, 1500)).unwrap();
            }
            assert_eq!(s.dequeue(now).unwrap().token, 0);
            assert_eq!(s.len(), 2);
            let t = s.next_event(now);
            assert!(t.is_some_and(|t| t > now), "{kind:?}: {t:?}");
        }
    }
}

#[test]
fn pacing_holds_at_the_end_of_time() {
    // Within a packet's time of u64::MAX ns the gate's stamp wrapped into the past and a
    // 1 Mbit/s flow sent three 1500 B packets at once.
    let mut s = paced_leaf(PolicyKind::Fifo, Rate::mbit(1), ShaperConfig::default()).unwrap();
    let now = u64::MAX - 5 * MS;
    for t in 0..3 {
        s.enqueue(now, &packet(t, 0, 1, 1500)).unwrap();
    }
    let sent = std::iter::from_fn(|| s.dequeue(now)).count();
    assert_eq!(sent, 1);
}

#[test]
fn next_event_says_when_to_wake() {
    let mut b = TreeBuilder::new(cfg(100));
    let leaf = b.root(NodeSpec::new("leaf", PolicyKind::Fifo).rate(Rate::mbit(12), 0));
    b.default_leaf(leaf);
    let mut s = b.build().unwrap();
    assert_eq!(s.next_event(S), None);
    s.enqueue(S, &packet(0, 0, 1, 1500)).unwrap();
    s.enqueue(S, &packet(1, 0, 1, 1500)).unwrap();
    assert_eq!(s.next_event(S), Some(S));
    assert_eq!(s.dequeue(S).unwrap().token, 0);
    // The second leaves 1 ms later (1500 B at 12 Mbit/s), within one shaper slot.
    let t = s.next_event(S).unwrap();
    assert!(t > S && t <= S + MS && S + MS - t < 1024, "wake at {t}");
    assert_eq!(s.dequeue(t - 1025), None);
    assert_eq!(s.dequeue(t).unwrap().token, 1);
    assert_eq!(s.next_event(t), None);
}

#[test]
fn rates_and_weights_change_at_run_time() {
    let mut b = TreeBuilder::new(cfg(10_000));
    let root = b.root(NodeSpec::new("root", PolicyKind::Wfq).rate(Rate::mbit(100), 0));
    let a = b.child(root, NodeSpec::new("a", PolicyKind::Fifo));
    let c = b.child(root, NodeSpec::new("c", PolicyKind::Fifo));
    b.rule(vec![Match::Class(0)], a);
    b.default_leaf(c);
    let mut s = b.build().unwrap();
    let mut host = Host::new();
    let flows = [(0u64, 0u32, 1500u32), (1, 1, 1500)];
    let first = host.run(&mut s, &flows, 2, None, S, S + S);
    let total = |d: &[Departure]| d.iter().map(|d| u64::from(d.len)).sum::<u64>() as f64 * 8.0;
    assert!((total(&first) / 1e6 - 100.0).abs() < 1.0);
    s.set_rate(2 * S, 0 as NodeId, Some(Rate::mbit(200)), 0);
    s.set_weight(a, 3);
    let second = host.run(&mut s, &[], 0, None, 2 * S, 3 * S);
    assert!(
        (total(&second) / 1e6 - 200.0).abs() < 2.0,
        "{}",
        total(&second) / 1e6
    );
    let by = bytes_by(&second, |d| d.class);
    let ratio = by[&0] as f64 / by[&1] as f64;
    assert!((ratio - 3.0).abs() < 0.05, "weights 3:1 -> {ratio:.3}");
    assert_eq!(s.rate(0), Some(Rate::mbit(200)));
    assert_eq!(s.burst(0), 0);
    s.set_rate(3 * S, 0 as NodeId, Some(Rate::mbit(300)), 15_000);
    assert_eq!((s.rate(0), s.burst(0)), (Some(Rate::mbit(300)), 15_000));
    s.set_rate(3 * S, 0 as NodeId, None, 15_000);
    assert_eq!((s.rate(0), s.burst(0)), (None, 0), "no limit, no burst");
}

/// Send everything `s` holds, from `now` on, as fast as it releases: the tokens in order.
fn drain(s: &mut Scheduler, now: u64) -> Vec<u64> {
    timed_drain(s, now).into_iter().map(|(t, _)| t).collect()
}

/// [`drain`], with when each packet left: (token, ns after `start`).
fn timed_drain(s: &mut Scheduler, start: u64) -> Vec<(u64, u64)> {
    let mut sent = Vec::new();
    let mut now = start;
    while let Some(t) = s.next_event(now) {
        now = now.max(t);
        if let Some(d) = s.dequeue(now) {
            sent.push((d.token, now - start));
        }
    }
    sent
}

/// `times` (from [`timed_drain`]) are tokens `first`, `first + 1`, ... leaving `gap` apart
/// from the start, to within the shaper's slot (1024 ns by default).
fn assert_spaced(times: &[(u64, u64)], count: usize, first: u64, gap: u64, what: &str) {
    assert_eq!(times.len(), count, "{what}: {times:?}");
    for (i, &(token, at)) in times.iter().enumerate() {
        assert_eq!(token, first + i as u64, "{what}: {times:?}");
        assert!(at.abs_diff(i as u64 * gap) < 1024, "{what}: {times:?}");
    }
}

/// A flow's pacing rate removed at run time (an overlay pause frame lifted, `set_flow_rate`)
/// while its packets wait at its gate, one of them in the shaper: they still leave first and
/// in order, and the flow's next packet waits behind them. (It used to pass them: reordered at
/// a per-packet leaf, and at a per-flow leaf a panic once the flow was served.)
#[test]
fn a_flow_gate_removed_at_run_time_lets_its_line_leave_first_in_order() {
    for policy in [PolicyKind::Fifo, PolicyKind::Fq, PolicyKind::Pfabric] {
        let mut s = one_leaf(cfg(100), NodeSpec::new("leaf", policy));
        let leaf = 0;
        for token in 0..3 {
            let mut p = packet(token, 0, 7, 1500);
            p.fields.pacing_bps = 10_000_000;
            s.enqueue(S, &p).unwrap();
        }
        assert_eq!(
            s.shaped(),
            1,
            "{policy:?}: the second packet is in the shaper"
        );
        assert!(s.set_flow_rate(S, leaf, 7, None));
        s.enqueue(S, &packet(3, 0, 7, 1500)).unwrap();
        assert_eq!(drain(&mut s, S), [0, 1, 2, 3], "{policy:?}");
        s.check();
        // Without a gate and without a line, packets pass at once.
        s.enqueue(S + S, &packet(4, 0, 7, 1500)).unwrap();
        s.enqueue(S + S, &packet(5, 0, 7, 1500)).unwrap();
        assert_eq!(s.shaped(), 0, "{policy:?}");
        assert_eq!(drain(&mut s, S + S), [4, 5], "{policy:?}");
    }
}

/// A flow's pacing rate set at run time is capped by its leaf's `flow_rate`, which is what
/// is left when it is removed. (Set, it replaced the leaf's; removed, the flow was unpaced.)
#[test]
fn a_flow_rate_set_at_run_time_stays_under_its_leafs() {
    let mut s = paced_leaf(PolicyKind::Fq, Rate::mbit(12), ShaperConfig::default()).unwrap();
    let leaf = 0;
    // 1500 B: 1 ms at 12 Mbit/s, 0.1 ms at 120.
    let spacing = |s: &mut Scheduler, start: u64, first: u64| {
        for token in first..first + 3 {
            s.enqueue(start, &packet(token, 0, 7, 1500)).unwrap();
        }
        let mut at = Vec::new();
        let mut now = start;
        while at.len() < 3 {
            match s.dequeue(now) {
                Some(_) => at.push(now),
                None => now = s.next_event(now).unwrap().max(now + 1),
            }
        }
        at[2] - at[1]
    };
    assert!(spacing(&mut s, S, 0).abs_diff(MS) < 2048);
    assert!(s.set_flow_rate(2 * S, leaf, 7, Some(Rate::mbit(120))));
    assert!(spacing(&mut s, 2 * S, 3).abs_diff(MS) < 2048);
    assert!(s.set_flow_rate(3 * S, leaf, 7, Some(Rate::mbit(6))));
    assert!(spacing(&mut s, 3 * S, 6).abs_diff(2 * MS) < 2048);
    assert!(s.set_flow_rate(4 * S, leaf, 7, None));
    assert!(spacing(&mut s, 4 * S, 9).abs_diff(MS) < 2048);
}

/// The same for a node's rate limit removed while packets wait at its gate: they reach the
/// parent first, when the one in the shaper is released, and a newcomer behind them.
#[test]
fn a_node_gate_removed_at_run_time_lets_its_line_leave_first() {
    let mut b = TreeBuilder::new(cfg(64));
    let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
    let a = b.child(
        root,
        NodeSpec::new("a", PolicyKind::Fifo).rate(Rate::mbit(10), 0),
    );
    let c = b.child(root, NodeSpec::new("c", PolicyKind::Fifo));
    b.rule(vec![Match::Class(0)], a);
    b.default_leaf(c);
    let mut s = b.build().unwrap();
    for token in 0..3 {
        s.enqueue(S, &packet(token, 0, token, 1500)).unwrap();
    }
    assert_eq!(s.shaped(), 1);
    s.set_rate(S, a, None, 0);
    s.enqueue(S, &packet(3, 1, 9, 1500)).unwrap();
    s.enqueue(S, &packet(4, 0, 4, 1500)).unwrap();
    // `c`'s packet passes at once; `a`'s newcomer waits behind `a`'s line.
    let now: Vec<u64> = std::iter::from_fn(|| s.dequeue(S).map(|d| d.token)).collect();
    assert_eq!(now, [0, 3]);
    assert!(
        s.next_event(S).unwrap() > S,
        "a's line waits for the shaper"
    );
    assert_eq!(drain(&mut s, S), [1, 2, 4]);
    s.check();
}

/// Rates a gate moves between at run time (bit/s): at 100 kbit/s and 1 Mbit/s a packet
/// waits beyond the 1 ms horizon of [`through_one_gate`].
const RATES: [u64; 5] = [100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000];

/// A departure: its time and its bytes.
type Sent = (u64, u32);

/// A rate in force from a time on: the time and the rate (bit/s).
type RateFrom = (u64, u64);

/// The fastest rate in force at any time from `from` to `to`, by a `schedule` of changes (time,
/// bit/s) in order, the first at or before `from`.
fn fastest(schedule: &[RateFrom], from: u64, to: u64) -> u64 {
    let start = schedule.iter().rposition(|&(t, _)| t <= from).unwrap_or(0);
    schedule[start..]
        .iter()
        .take_while(|&&(t, _)| t <= to)
        .map(|&(_, bps)| bps)
        .max()
        .unwrap_or(0)
}

/// Sends `arrivals` (time after 1 s, bytes) through one gate without a burst, a flow's pacing
/// rate (`flow_gate`; carried by its packets and set with `set_flow_rate`) or a node's limit,
/// alone, so that each packet leaves as its gate releases it; the gate's rate starts at
/// `RATES[first]` and changes at run time (`changes`: time after 1 s, index into [`RATES`]).
/// Returns the departures (time, bytes) and the rates in force from each time on.
fn through_one_gate(
    flow_gate: bool,
    first: usize,
    changes: &[(u64, usize)],
    arrivals: &[(u64, u32)],
) -> (Vec<Sent>, Vec<RateFrom>) {
    let shaper = ShaperConfig {
        slot_ns: 1024,
        slots: 1024,
        ..ShaperConfig::default()
    };
    let mut b = TreeBuilder::new(SchedConfig { shaper, ..cfg(100) });
    let rate = |k: usize| Rate::from_bps(RATES[k]).unwrap();
    let n = if flow_gate {
        b.root(NodeSpec::new("leaf", PolicyKind::Fifo))
    } else {
        let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
        b.child(
            root,
            NodeSpec::new("n", PolicyKind::Fifo).rate(rate(first), 0),
        )
    };
    b.default_leaf(n);
    let mut s = b.build().unwrap();
    // Events in time order: a rate change (Some) or an arrival of `len` bytes (None).
    let mut events: Vec<(u64, Option<usize>, u32)> = changes
        .iter()
        .map(|&(at, k)| (S + at, Some(k), 0))
        .chain(arrivals.iter().map(|&(at, len)| (S + at, None, len)))
        .collect();
    events.sort_by_key(|e| e.0);
    let mut schedule = vec![(0, RATES[first])];
    let (mut current, mut now, mut token, mut sent) = (first, S, 0, Vec::new());
    let drain = |s: &mut Scheduler, now: &mut u64, until: u64, sent: &mut Vec<Sent>| loop {
        if let Some(d) = s.dequeue(*now) {
            sent.push((*now, d.len));
            continue;
        }
        match s.next_event(*now) {
            Some(t) if t <= until => *now = t.max(*now + 1),
            _ => return,
        }
    };
    for (at, change, len) in events {
        drain(&mut s, &mut now, at, &mut sent);
        now = now.max(at);
        match change {
            Some(k) => {
                current = k;
                schedule.push((now, RATES[k]));
                if flow_gate {
                    s.set_flow_rate(now, n, 1, Some(rate(k)));
                } else {
                    s.set_rate(now, n, Some(rate(k)), 0);
                }
            }
            None => {
                let mut p = packet(token, 0, 1, len);
                if flow_gate {
                    p.fields.pacing_bps = RATES[current];
                }
                s.enqueue(now, &p).unwrap();
                token += 1;
            }
        }
    }
    drain(&mut s, &mut now, u64::MAX, &mut sent);
    (sent, schedule)
}

/// The first pair of consecutive departures closer together than the fastest rate in force
/// between them allows, less the shaper's slot (and a ns of rounding either way).
fn too_close(sent: &[Sent], schedule: &[RateFrom]) -> Option<String> {
    sent.windows(2).find_map(|w| {
        let ((from, len), (to, _)) = (w[0], w[1]);
        let bps = fastest(schedule, from, to);
        let least = u64::from(len) * 8_000_000_000 / bps;
        (to - from + 1024 + 2 < least).then(|| {
            format!(
                "{len} B left at {} ns, the next {} ns later, at most {bps} bit/s: {schedule:?}",
                from - S,
                to - from
            )
        })
    })
}

/// A lowered rate while a flow's packet waits beyond the horizon: the packet keeps its time.
#[test]
fn a_lowered_rate_keeps_a_waiting_packets_time_at_either_gate() {
    for flow_gate in [true, false] {
        let arrivals = [(0, 1500), (0, 1500), (0, 1500)];
        let (sent, schedule) = through_one_gate(flow_gate, 1, &[(5 * MS, 0)], &arrivals);
        assert_eq!(sent.len(), 3);
        assert_eq!(
            too_close(&sent, &schedule),
            None,
            "flow gate {flow_gate}: {sent:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever its rate does at run time, up and down, within the shaper's horizon and
    /// beyond it, a gate without a burst never lets two packets go closer together than the
    /// fastest rate it had between them allows, less the shaper's slot: the packet in the
    /// shaper keeps its time and the gate's debt is paid at the new rate
    /// ([`through_one_gate`]). Checked without the oracle, which shares the scheduler's
    /// reading of release times. (A flow's packet beyond the horizon had its time worked out
    /// again from its gate when it came up, and a lowered rate let it go at the horizon's
    /// end.)
    #[test]
    fn no_gate_lets_packets_closer_than_its_fastest_rate_allows(
        flow_gate in any::<bool>(),
        first in 0..RATES.len(),
        changes in prop::collection::vec((0..100 * MS, 0..RATES.len()), 0..8),
        arrivals in prop::collection::vec((0..20 * MS, 64u32..1500), 1..24),
    ) {
        let (sent, schedule) = through_one_gate(flow_gate, first, &changes, &arrivals);
        prop_assert_eq!(sent.len(), arrivals.len());
        let close = too_close(&sent, &schedule);
        prop_assert!(close.is_none(), "{:?}", close);
    }
}

/// Weights and reservations belong to a node's place in its parent; a root that is a leaf
/// has its flows' instead, and an internal root has none to change. A weight counts only
/// under a parent that shares by weight, a reservation only under one that guarantees them
/// (hclock, htb): elsewhere the change is refused, not taken and ignored.
#[test]
fn only_an_internal_root_has_no_weight_to_change() {
    for (parent, reserves) in [
        (PolicyKind::Wfq, false),
        (PolicyKind::HClock, true),
        (PolicyKind::Htb, true),
    ] {
        let mut b = TreeBuilder::new(cfg(64));
        let root = b.root(NodeSpec::new("root", parent));
        let a = b.child(root, NodeSpec::new("a", PolicyKind::Fifo));
        b.default_leaf(a);
        let mut s = b.build().unwrap();
        assert!(!s.set_weight(root, 5), "{parent}");
        assert!(!s.set_reservation(0, root, Some(Rate::mbit(1))), "{parent}");
        assert!(s.set_weight(a, 5), "{parent}");
        assert_eq!(
            s.set_reservation(0, a, Some(Rate::mbit(1))),
            reserves,
            "{parent}"
        );
    }
    for (policy, reserves) in [(PolicyKind::Wfq, false), (PolicyKind::HClock, true)] {
        let mut b = TreeBuilder::new(cfg(64));
        let root = b.root(NodeSpec::new("flows", policy));
        b.default_leaf(root);
        let mut s = b.build().unwrap();
        assert!(s.set_weight(root, 5), "{policy}");
        assert_eq!(
            s.set_reservation(0, root, Some(Rate::mbit(1))),
            reserves,
            "{policy}"
        );
    }
    // Under a parent that shares by quantum or priority, a weight changes nothing: refused.
    for parent in [PolicyKind::Drr, PolicyKind::Prio] {
        let mut b = TreeBuilder::new(cfg(64));
        let root = b.root(NodeSpec::new("root", parent));
        let a = b.child(root, NodeSpec::new("a", PolicyKind::Fifo));
        b.default_leaf(a);
        let mut s = b.build().unwrap();
        assert!(!s.set_weight(a, 5), "{parent}");
    }
    let mut b = TreeBuilder::new(cfg(64));
    let root = b.root(NodeSpec::new("flows", PolicyKind::Fq));
    b.default_leaf(root);
    assert!(!b.build().unwrap().set_weight(root, 5));
}

/// The shaper paces as well long after time 0 on every structure the builder takes for it,
/// the timing wheel and the exact ones (release times outgrow a fixed range, and a moving
/// range files a release that comes before its minimum behind it, so those are refused): a
/// flow paced at 10 Mbit/s sends 1500-byte packets 1.2 ms apart, five seconds into a run as at
/// its start.
#[test]
fn every_shaper_structure_paces_at_any_time_or_is_refused() {
    use sluice_queue::QueueKind;
    for kind in QueueKind::ALL {
        // The approximate circular queue holds at most 671 buckets: wider slots.
        let (slots, slot_ns) = match kind {
            QueueKind::CircularApprox => (512, 16_384),
            _ => (4096, 1024),
        };
        let shaper = ShaperConfig {
            kind,
            slots,
            slot_ns,
            ..ShaperConfig::default()
        };
        let mut s = match paced_leaf(PolicyKind::Fifo, Rate::mbit(10), shaper) {
            Ok(s) => s,
            Err(e) => {
                assert!(
                    kind != QueueKind::TimingWheel && !kind.exact(),
                    "{kind}: refused: {e}"
                );
                assert!(
                    e.to_string().contains("cannot order release times"),
                    "{kind}: {e}"
                );
                continue;
            }
        };
        assert!(
            kind == QueueKind::TimingWheel || kind.exact(),
            "{kind} was taken"
        );
        for start in [0, 5 * S] {
            let base = start / 1000;
            for token in base..base + 5 {
                s.enqueue(start, &packet(token, 0, 7, 1500)).unwrap();
            }
            let mut now = start;
            let mut gaps = Vec::new();
            while let Some(t) = s.next_event(now) {
                now = now.max(t);
                if s.dequeue(now).is_some() {
                    gaps.push(now - start);
                }
            }
            assert_eq!(gaps.len(), 5, "{kind} at {start}");
            for (k, &at) in gaps.iter().enumerate() {
                let want = k as u64 * 1_200_000;
                assert!(
                    at.abs_diff(want) < 2 * slot_ns,
                    "{kind} at {start}: packet {k} left at {at} ns, want {want}"
                );
            }
        }
    }
}

/// Keep `classes` classes backlogged (class `k` is flow `k`, its packets `len(k)` bytes long)
/// and send `packets` as fast as `s` releases them, one per ns: the bytes each class sent.
fn saturate(s: &mut Scheduler, classes: u32, len: impl Fn(u32) -> u32, packets: u64) -> Vec<u64> {
    let mut token = 0;
    for _ in 0..100 {
        for class in 0..classes {
            s.enqueue(0, &packet(token, class, u64::from(class), len(class)))
                .unwrap();
            token += 1;
        }
    }
    let mut bytes = vec![0u64; classes as usize];
    for now in 0..packets {
        let d = s.dequeue(now).expect("every class backlogged");
        bytes[d.flow as usize] += u64::from(d.len);
        let class = d.flow as u32;
        s.enqueue(now, &packet(token, class, d.flow, len(class)))
            .unwrap();
        token += 1;
    }
    bytes
}

/// Under WFQ a weight raised at run time holds from the member's next packet: what it was
/// served ahead of its share (the packet it just sent) is paid at the new weight. Raised from
/// 1 to 4 just after sending 1500 B beside a member of weight 7, it waits for that one's next
/// two 1500 B packets (its lead, 1500 / 4, over their 1500 / 7 each); kept at weight 1, the
/// lead made it wait for eight.
#[test]
fn a_weight_raised_at_run_time_holds_from_the_next_packet() {
    let mut s = weighted_classes(
        NodeSpec::new("root", PolicyKind::Wfq).queue(HEAP),
        &[1, 7],
        100,
    );
    for t in 0..40 {
        s.enqueue(0, &packet(t, (t % 2) as u32, t % 2, 1500))
            .unwrap();
    }
    // On until class 0 has just sent a packet.
    while s.dequeue(0).expect("backlogged").flow != 0 {}
    assert!(s.set_weight(s.node_by_name("c0").unwrap(), 4));
    let before_next = std::iter::from_fn(|| s.dequeue(0))
        .take_while(|d| d.flow != 0)
        .count();
    assert_eq!(before_next, 2);
}

/// A weight lowered at run time below every weight the tree was built with still counts: the
/// member gets its 1/2001 share under WFQ and hClock, and no rank is filed at a queue's edge.
/// (The windows were sized for the built weights: every tag of the member fell past them and it
/// got a third of the link.)
#[test]
fn a_weight_lowered_at_run_time_below_all_others_still_counts() {
    for policy in [PolicyKind::Wfq, PolicyKind::HClock] {
        let mut b = TreeBuilder::new(cfg(4096));
        let root = b.root(NodeSpec::new("root", policy));
        let leaves: Vec<NodeId> = (0..3)
            .map(|i| {
                b.child(
                    root,
                    NodeSpec::new(&format!("l{i}"), PolicyKind::Fifo).weight(1000),
                )
            })
            .collect();
        for (class, &leaf) in leaves.iter().enumerate() {
            b.rule(vec![Match::Class(class as u32)], leaf);
        }
        let mut s = b.build().unwrap();
        assert!(s.set_weight(leaves[0], 1));
        let bytes = saturate(&mut s, 3, |_| 1500, 200_000);
        let share = bytes[0] as f64 / bytes.iter().sum::<u64>() as f64;
        assert!(
            (share - 1.0 / 2001.0).abs() < 1e-4 && s.stats().ranks_clamped == 0,
            "{policy:?}: share {share:.5}"
        );
    }
}

/// Fair shares hold between packets of very different sizes: a class sending packets up to
/// twice `max_packet` (GSO frames in wire bytes run over 64 KiB) and one sending 1500-byte
/// packets, equal weights, each get half the bytes under WFQ, DRR and hClock's shares, with no
/// rank filed at a queue's edge. On the exact heap `auto` gives a node of two children, so for
/// packets of any length; on cFFS, a bucketed moving range sized from `max_packet`, up to twice
/// it. (With cFFS filing a re-ranked member of a just-emptied range behind the next range, WFQ
/// and hClock gave the large packets 56% at 32 KB and 65% at 64 KB; DRR's range held no packet
/// over `max_packet`.) On cFFS, packets four times longer are counted where their order
/// becomes approximate.
#[test]
fn fair_shares_hold_between_large_and_small_packets() {
    let cffs = QueueChoice::Kind {
        kind: QueueKind::Cffs,
        buckets: None,
        granularity: None,
    };
    for queue in [QueueChoice::Auto, cffs] {
        for policy in [PolicyKind::Wfq, PolicyKind::Drr, PolicyKind::HClock] {
            for big in [9000u32, 32_768, 65_536, 131_072, 262_144] {
                let mut b = TreeBuilder::new(SchedConfig {
                    max_packet: 65_536,
                    ..cfg(4096)
                });
                let root = b.root(NodeSpec::new("root", policy).queue(queue));
                let a = b.child(root, NodeSpec::new("a", PolicyKind::Fifo));
                let c = b.child(root, NodeSpec::new("c", PolicyKind::Fifo));
                b.rule(vec![Match::Class(0)], a);
                b.default_leaf(c);
                let mut s = b.build().unwrap();
                let bytes = saturate(
                    &mut s,
                    2,
                    |class| if class == 0 { big } else { 1500 },
                    50_000,
                );
                let share = bytes[0] as f64 / (bytes[0] + bytes[1]) as f64;
                let clamped = s.stats().ranks_clamped;
                if queue == cffs && big > 2 * 65_536 {
                    assert!(clamped > 0, "{policy:?}, {big}: edge filings counted");
                    continue;
                }
                assert!(
                    (share - 0.5).abs() < 0.01 && clamped == 0,
                    "{policy:?} on {queue:?}, {big}-byte packets against 1500: share {share:.3}, \
                     {clamped} clamped"
                );
            }
        }
    }
}

/// A root rate limit over a policy that reorders (fq across flows), packets of very different
/// sizes (1.5 KB to 64 KB, like GSO super-frames): every 100 ms window carries the rate
/// within the burst and one packet, and no window of any length carries more than
/// rate * length + burst + one packet. The root's gate must charge the packet that leaves,
/// not the one that arrived: fq sends them in another order.
#[test]
fn a_root_limit_over_fq_holds_per_window_with_mixed_packet_sizes() {
    let rate = Rate::gbit(1);
    let burst = 100 * 1024;
    let max_len = 64_000u32;
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 10_000,
        flows: 10_000,
        max_packet: max_len,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Fq).rate(rate, burst));
    b.default_leaf(root);
    let mut s = b.build().unwrap();
    // A deterministic spread of sizes per packet.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut size = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        1500 + (seed % u64::from(max_len - 1500 + 1)) as u32
    };
    let (start, end) = (S, 3 * S);
    let mut token = 0;
    // Each flow keeps 20 packets queued (the daemon's scheduled buffer holds thousands).
    for flow in 0..100u64 {
        for _ in 0..20 {
            s.enqueue(start, &packet(token, 0, flow, size())).unwrap();
            token += 1;
        }
    }
    let mut deps = Vec::new();
    let mut now = start;
    while now < end {
        match s.dequeue(now) {
            Some(d) => {
                deps.push(Departure {
                    at: now,
                    token: d.token,
                    len: d.len,
                    flow: d.flow,
                    class: 0,
                });
                s.enqueue(now, &packet(token, 0, d.flow, size())).unwrap();
                token += 1;
            }
            None => now = s.next_event(now).unwrap().max(now + 1),
        }
    }
    let slack = (burst + u64::from(max_len)) as f64 * 8.0 / 0.1;
    for r in windows(&deps, start, end) {
        assert!(
            (r - rate.bps() as f64).abs() <= slack,
            "a 100 ms window at {:.1} Mbit/s",
            r / 1e6
        );
    }
    for i in (0..deps.len()).step_by(7) {
        let mut bytes = 0u64;
        for d in &deps[i..] {
            bytes += u64::from(d.len);
            let allowed = burst + u64::from(max_len) + rate.bytes_in(d.at - deps[i].at + 1024);
            assert!(
                bytes <= allowed,
                "{bytes} B in {} ns, allowed {allowed}",
                d.at - deps[i].at
            );
            if d.at - deps[i].at > 50 * MS {
                break;
            }
        }
    }
}

#[test]
fn htb_guarantees_a_rate_at_once_after_a_class_borrowed_for_a_long_time() {
    // 1 Gbit/s link. Gold: rate 600M, weight 1. Bronze: no rate, weight 10. Gold alone first
    // borrows the whole link for 2 s; then bronze comes. Gold's 600M is guaranteed whatever it
    // borrowed before (Linux HTB charges borrowed bytes to the lender, not to the class's
    // rate): gold must get it, and its eleventh of the 400M left, from the first 100 ms window
    // on, not only after its "debt" of 2 s * 400M has been paid back at bronze's expense.
    let mut b = TreeBuilder::new(cfg(10_000));
    let root = b.root(NodeSpec::new("root", PolicyKind::Htb));
    let gold = b.child(
        root,
        NodeSpec::new("gold", PolicyKind::Fifo)
            .reservation(Rate::mbit(600))
            .weight(1),
    );
    let bronze = b.child(root, NodeSpec::new("bronze", PolicyKind::Fifo).weight(10));
    b.rule(vec![Match::Class(0)], gold);
    b.rule(vec![Match::Class(1)], bronze);
    let mut s = b.build().unwrap();
    let mut host = Host::new();
    let link = Some(Rate::gbit(1));
    let alone = host.run(&mut s, &[(0, 0, 1500)], 8, link, S, 3 * S);
    let gold_alone = bytes_by(&alone, |d| d.class)[&0] as f64 * 8.0 / 2e6;
    assert!(gold_alone > 990.0, "gold borrows the link: {gold_alone:.1}");
    let both = host.run(&mut s, &[(1, 1, 1500)], 8, link, 3 * S, 3 * S + S / 2);
    for (i, start) in (0..5).map(|i| (i, 3 * S + i * 100 * MS)) {
        let window: Vec<Departure> = both
            .iter()
            .copied()
            .filter(|d| d.at >= start && d.at < start + 100 * MS)
            .collect();
        let gold_mbit =
            bytes_by(&window, |d| d.class).get(&0).copied().unwrap_or(0) as f64 * 8.0 / 1e5;
        let want = 600.0 + 400.0 / 11.0;
        assert!(
            (gold_mbit - want).abs() < 12.0,
            "window {i}: gold {gold_mbit:.1} Mbit/s, want {want:.1}"
        );
    }
}

#[test]
fn a_reservation_of_one_bit_per_second_with_gigabyte_packets_builds_and_runs() {
    // A packet's time at the reservation is near 2^64 ns: the reservation queue's window, the
    // tags and the policy file's compilation saturate instead of overflowing.
    for policy in ["htb", "hclock"] {
        let text = format!(
            "[scheduler]\nmax_packet = \"1GB\"\ndefault = \"a\"\n\
             [[node]]\nname = \"r\"\npolicy = \"{policy}\"\n\
             [[node]]\nname = \"a\"\nparent = \"r\"\npolicy = \"fifo\"\nreservation = \"1bit\"\n\
             [[node]]\nname = \"b\"\nparent = \"r\"\npolicy = \"fifo\"\n"
        );
        let mut s = sluice_sched::config::build_str(&text, "t.toml").unwrap();
        let mut out = Vec::new();
        for (i, now) in (0..6u64).map(|i| (i, i * S)) {
            s.enqueue(now, &packet(i, 0, 1, 1_000_000_000)).unwrap();
            out.extend(s.dequeue(now).map(|d| d.token));
        }
        assert_eq!(out, [0, 1, 2, 3, 4, 5], "{policy}");
    }
}

/// `root` over two leaves: `a` for class 0 and `c` for class 1. Returns `a`'s id.
fn two_leaves(root: NodeSpec, a: NodeSpec, c: NodeSpec) -> (Scheduler, NodeId) {
    let mut b = TreeBuilder::new(cfg(10_000));
    let root = b.root(root);
    let a = b.child(root, a);
    let c = b.child(root, c);
    b.rule(vec![Match::Class(0)], a);
    b.rule(vec![Match::Class(1)], c);
    (b.build().unwrap(), a)
}

/// Two greedy classes `a` and `c` of equal weight under an hClock or HTB root.
fn two_classes(policy: PolicyKind, a_reserves: Option<Rate>) -> (Scheduler, NodeId) {
    let mut a = NodeSpec::new("a", PolicyKind::Fifo);
    a.member.reservation = a_reserves;
    let c = NodeSpec::new("c", PolicyKind::Fifo);
    two_leaves(NodeSpec::new("root", policy), a, c)
}

/// Mbit/s of class `class` among `deps` in `[start, start + len)`.
fn mbit_in(deps: &[Departure], class: u32, start: u64, len: u64) -> f64 {
    let bytes: u64 = deps
        .iter()
        .filter(|d| d.class == class && d.at >= start && d.at < start + len)
        .map(|d| u64::from(d.len))
        .sum();
    bytes as f64 * 8.0 / len as f64 * 1e3
}

#[test]
fn reservations_the_node_could_not_meet_for_a_while_are_not_paid_back_at_length() {
    // A 1 Gbit/s node reserves 600 and 300 Mbit/s for `a` and `b`; `c` has none. Its rate
    // lowered to 300 Mbit/s for 5 s, the tags of `a` and `b` fell 4.5 s behind, and once
    // the rate was back they took the whole node for 23 s to catch up, `c` nothing. What a
    // member is owed is capped (4 of the largest packets), so `c` gets its share back at once
    // (hClock: its weighted share beside them; HTB: a third of the 100 Mbit/s they leave).
    for policy in [PolicyKind::HClock, PolicyKind::Htb] {
        let mut b = TreeBuilder::new(cfg(10_000));
        let root = b.root(NodeSpec::new("root", policy).rate(Rate::gbit(1), 0));
        for (i, res) in [Some(Rate::mbit(600)), Some(Rate::mbit(300)), None]
            .into_iter()
            .enumerate()
        {
            let mut class = NodeSpec::new(&format!("c{i}"), PolicyKind::Fifo);
            class.member.reservation = res;
            let leaf = b.child(root, class);
            b.rule(vec![Match::Class(i as u32)], leaf);
        }
        let mut s = b.build().unwrap();
        let mut host = Host::new();
        let flows = [(0, 0, 1500), (1, 1, 1500), (2, 2, 1500)];
        let before = host.run(&mut s, &flows, 4, None, S, 2 * S);
        s.set_rate(2 * S, root, Some(Rate::mbit(300)), 0);
        host.run(&mut s, &[], 0, None, 2 * S, 7 * S);
        s.set_rate(7 * S, root, Some(Rate::gbit(1)), 0);
        let after = host.run(&mut s, &[], 0, None, 7 * S, 8 * S);
        let c_before = mbit_in(&before, 2, S, S);
        assert!(c_before > 30.0, "{policy}: c before the dip: {c_before:.1}");
        for w in 1..10 {
            let start = 7 * S + w * 100 * MS;
            let got: Vec<f64> = (0..3)
                .map(|c| mbit_in(&after, c, start, 100 * MS))
                .collect();
            assert!(
                (got[2] - c_before).abs() < 0.05 * c_before,
                "{policy}, window {w} after the dip: a, b, c got {got:.1?} Mbit/s, c had {c_before:.1}"
            );
        }
    }
}

/// `examples/policies/htb.toml` splits the office's 1 Gbit/s as its header says, as Linux
/// HTB would: each busy class its guaranteed rate plus a weighted share of what the rates
/// leave (voip 100 + 50, staff 600 + 150 of which web 400 + 100 and other 200 + 50, guests
/// 50 + 50 Mbit/s).
#[test]
fn the_htb_example_gives_each_class_its_rate_and_a_weighted_share_of_the_rest() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/policies/htb.toml"
    );
    let text = std::fs::read_to_string(path).expect("the example is there");
    // Class ids after the example's own rules, which these packets (no DSCP, no addresses)
    // do not match.
    let leaves = ["voip", "web", "other", "guests"];
    let rules: String = leaves
        .iter()
        .enumerate()
        .map(|(i, leaf)| format!("\n[[classify]]\nto = \"{leaf}\"\nclass = {i}\n"))
        .collect();
    let mut s = sluice_sched::config::build_str(&(text + &rules), "htb.toml").unwrap();
    let mut host = Host::new();
    let flows: Vec<(u64, u32, u32)> = (0..4).map(|c| (u64::from(c), c, 1500)).collect();
    let deps = host.run(&mut s, &flows, 8, Some(Rate::gbit(10)), S, 3 * S);
    for (class, want) in [150.0, 500.0, 250.0, 100.0].into_iter().enumerate() {
        let got = mbit_in(&deps, class as u32, 2 * S, S);
        assert!(
            (got - want).abs() < want * 0.01,
            "{}: {got:.1} Mbit/s, want {want}",
            leaves[class]
        );
    }
}

#[test]
fn a_reservation_given_at_run_time_claims_no_time_from_before() {
    // Equal weights on a 1 Gbit/s link: 500/500. A 300 Mbit/s reservation for `a` holds from
    // then: under hClock, below its share, it changes nothing; under HTB `a` gets it and half
    // of the 700 left. It used to date from when `a` became backlogged, 2 s before, and `a`
    // took the whole link for 0.86 s to catch up.
    for (policy, want) in [(PolicyKind::HClock, 500.0), (PolicyKind::Htb, 650.0)] {
        let (mut s, a) = two_classes(policy, None);
        let mut host = Host::new();
        let link = Some(Rate::gbit(1));
        let flows = [(0, 0, 1500), (1, 1, 1500)];
        host.run(&mut s, &flows, 4, link, S, 3 * S);
        assert!(s.set_reservation(3 * S, a, Some(Rate::mbit(300))));
        let deps = host.run(&mut s, &[], 0, link, 3 * S, 3 * S + S / 2);
        for w in 0..5 {
            let start = 3 * S + w * 100 * MS;
            let mbit = mbit_in(&deps, 0, start, 100 * MS);
            assert!(
                (mbit - want).abs() < 12.0,
                "{policy}, window {w}: a got {mbit:.1} Mbit/s, want {want}"
            );
        }
    }
}

#[test]
fn a_pacing_rate_that_comes_with_later_packets_paces_the_flow() {
    // The flow's first packet carries no rate, so the flow is made without a gate; the rate
    // its next packets carry must still pace them (it was ignored until the flow was
    // reclaimed).
    let mut s = one_leaf(cfg(100), NodeSpec::new("leaf", PolicyKind::Fq));
    s.enqueue(S, &packet(0, 0, 7, 1500)).unwrap();
    assert_eq!(s.dequeue(S).map(|d| d.token), Some(0));
    for t in 1..=5 {
        let mut p = packet(t, 0, 7, 1500);
        p.fields.pacing_bps = 12_000_000; // 1500 B per ms
        s.enqueue(S, &p).unwrap();
    }
    // 1 ms apart.
    assert_spaced(&timed_drain(&mut s, S), 5, 1, MS, "paced");
}

/// An fq leaf with `flow_rate`, whose flow 7 has sent one packet (token 0, at `S`) that gave
/// a pacing rate of 12 Mbit/s (1500 B per ms).
fn paced_once(flow_rate: Option<Rate>) -> Scheduler {
    let mut leaf = NodeSpec::new("leaf", PolicyKind::Fq);
    leaf.flow_rate = flow_rate;
    let mut s = one_leaf(cfg(100), leaf);
    let mut p = packet(0, 0, 7, 1500);
    p.fields.pacing_bps = 12_000_000;
    s.enqueue(S, &p).unwrap();
    assert_eq!(s.dequeue(S).map(|d| d.token), Some(0));
    s
}

/// Packets that give no pacing rate keep the flow at the rate its packets last gave, while
/// the flow is in the flow table: over an idle gap too, and under a leaf's higher
/// `flow_rate`.
#[test]
fn packets_without_a_rate_keep_the_rate_the_flows_packets_last_gave() {
    for flow_rate in [None, Some(Rate::gbit(1))] {
        let mut s = paced_once(flow_rate);
        // Idle for a second, then five packets with no rate of their own.
        for t in 1..=5 {
            s.enqueue(2 * S, &packet(t, 0, 7, 1500)).unwrap();
        }
        // The first at once (the gate's burst is the one packet), then 1 ms apart.
        let times = timed_drain(&mut s, 2 * S);
        assert_spaced(&times, 5, 1, MS, &format!("{flow_rate:?}"));
    }
}

/// A pacing rate of 2^63 bit/s or more (`u64::MAX`, as Linux's `~0UL` for a socket not
/// paced) takes the flow's own rate away: its packets go unpaced, or at the leaf's
/// `flow_rate` if it has one. (Read as no rate given, they kept the 1500 B per ms the
/// flow's first packet had asked for.)
#[test]
fn a_pacing_rate_beyond_the_largest_means_no_pacing_of_the_flows_own() {
    for (flow_rate, gap) in [(None, 0), (Some(Rate::mbit(24)), MS / 2)] {
        let mut s = paced_once(flow_rate);
        for t in 1..=4 {
            let mut p = packet(t, 0, 7, 1500);
            p.fields.pacing_bps = u64::MAX;
            s.enqueue(S + MS, &p).unwrap();
        }
        let times = timed_drain(&mut s, S + MS);
        assert_spaced(&times, 4, 1, gap, &format!("{flow_rate:?}"));
    }
}

/// Unpaced means as a flow that never had a rate: no gate at all, so none of its packets wait
/// at one for the others to leave. At a FIFO leaf without `flow_rate`, a flow whose packets
/// say `u64::MAX` (first, and after a rate of its own) keeps its place against a later
/// flow's packet, as one whose packets say nothing. (Given a gate at the largest rate
/// instead, all but two of its packets waited at it until one of those had left, and the
/// later flow's packet went ahead of them: 0, 1, 4, 2, 3.)
#[test]
fn an_unpaced_flow_keeps_its_place_at_a_fifo_leaf() {
    for (first, then) in [(0, 0), (u64::MAX, u64::MAX), (1_000_000_000, u64::MAX)] {
        let mut s = one_leaf(cfg(100), NodeSpec::new("leaf", PolicyKind::Fifo));
        let mut p = packet(0, 0, 1, 1500);
        p.fields.pacing_bps = first;
        s.enqueue(S, &p).unwrap();
        for token in 1..4 {
            let mut p = packet(token, 0, 1, 1500);
            p.fields.pacing_bps = then;
            s.enqueue(S, &p).unwrap();
        }
        s.enqueue(S, &packet(4, 0, 2, 1500)).unwrap();
        let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(S).map(|d| d.token)).collect();
        assert_eq!(order, [0, 1, 2, 3, 4], "pacing_bps {first} then {then}");
    }
}

/// A pacing rate that comes with a packet stamped with a `now` behind the latest (a clock
/// that lags or stepped back), or one set by `set_flow_rate` at such a `now`, applies from
/// the latest time seen: what the gate owes is its lead over that time. (Counted from the
/// packet's `now`, 0 here, the lead was the whole second since, and slowed 100-fold it held
/// the third packet 99 s.)
#[test]
fn a_pacing_rate_given_at_a_lagging_timestamp_applies_from_the_latest_time() {
    for by_call in [false, true] {
        let mut s = one_leaf(cfg(100), NodeSpec::new("leaf", PolicyKind::Fq));
        for token in 0..2 {
            let mut p = packet(token, 0, 7, 1500);
            p.fields.pacing_bps = 100_000_000;
            s.enqueue(S, &p).unwrap();
        }
        let mut p = packet(2, 0, 7, 1500);
        if by_call {
            assert!(s.set_flow_rate(0, 0, 7, Some(Rate::mbit(1))));
        } else {
            p.fields.pacing_bps = 1_000_000;
        }
        s.enqueue(0, &p).unwrap();
        let times = timed_drain(&mut s, S);
        let order: Vec<u64> = times.iter().map(|&(t, _)| t).collect();
        assert_eq!(order, [0, 1, 2], "by call: {by_call}");
        // The third once the two packets' 3000 B the gate owed at 1 s (its lead of 240 us at
        // 100 Mbit/s) are paid at 1 Mbit/s: 24 ms, to within the shaper's slot.
        assert!(
            times[2].1.abs_diff(24 * MS) < 1024,
            "by call {by_call}: {times:?}"
        );
    }
}

#[test]
fn edf_and_lstf_keep_their_order_after_a_far_or_past_rank() {
    // A deadline 10 s ahead (or u64::MAX, or 0) reached an empty queue first: the queue's
    // window moved there, and every nearer deadline after it was filed below the window, in
    // arrival order (1, 2, 3, 0 instead of 3, 2, 1, 0; LSTF's approximate queue too). Deadlines now count from `now`: up to
    // a second ahead in order, later ones at a second, past ones as due now.
    for policy in [PolicyKind::Edf, PolicyKind::Lstf] {
        for first in [10 * S, u64::MAX - S, 0] {
            let mut s = one_leaf(cfg(1000), NodeSpec::new("leaf", policy));
            for (token, ahead) in [(0, first), (1, 30 * MS), (2, 20 * MS), (3, 10 * MS)] {
                let mut p = packet(token, 0, token, 100);
                p.fields.deadline = S.saturating_add(ahead);
                p.fields.slack = ahead;
                s.enqueue(S, &p).unwrap();
            }
            let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(S).map(|d| d.token)).collect();
            let want = if first == 0 {
                [0, 3, 2, 1]
            } else {
                [3, 2, 1, 0]
            };
            assert_eq!(order, want, "{policy}, first {first}");
        }
    }
}

#[test]
fn edf_serves_deadlines_in_order_to_within_a_bucket_whatever_came_first() {
    // Random deadlines from the past to 3 s ahead, enqueued as time moves on, served as time
    // moves on: each departure's deadline (as ranked: at least its enqueue time, at most a
    // second after it) is no earlier than one bucket (2^19 ns with `auto`, whose queue spans
    // two seconds) before the previous one's, unless the earlier one arrived after it left.
    let mut rng = sluice_queue::workload::Rng::new(7);
    let mut s = one_leaf(cfg(10_000), NodeSpec::new("leaf", PolicyKind::Edf));
    let mut rank_of = HashMap::new();
    let mut now = S;
    let mut last: Option<(u64, u64)> = None; // (rank, departure time)
    for token in 0..20_000u64 {
        now += rng.next_u64() % (100 * 1000);
        let deadline = (now + rng.next_u64() % (3 * S)).saturating_sub(S / 2);
        let mut p = packet(token, 0, token, 100);
        p.fields.deadline = deadline;
        s.enqueue(now, &p).unwrap();
        rank_of.insert(token, (deadline.clamp(now, now + S), now));
        if rng.next_u64() % 3 != 0 {
            if let Some(d) = s.dequeue(now) {
                let (rank, arrived) = rank_of[&d.token];
                if let Some((prev, left)) = last {
                    assert!(
                        rank + (1 << 19) >= prev || arrived > left,
                        "token {} ranked {rank} left after one ranked {prev}",
                        d.token
                    );
                }
                last = Some((rank, now));
            }
        }
    }
    assert_eq!(s.stats().ranks_clamped, 0);
}

#[test]
fn pfabric_ranks_a_paced_flow_by_the_packets_at_its_leaf_only() {
    // A paced flow (3000 B of burst at 10 Mbit/s: three packets pass at once, the rest wait at
    // its gate) whose `remaining` goes up within it (a new message on the connection). Once
    // both packets with remaining 100 left, the flow holds only packets of 5000 and 6000; it
    // was still ranked at 100 (the gate's packets were counted at the leaf too) and went
    // before a flow of 1000.
    let mut spec = NodeSpec::new("pf", PolicyKind::Pfabric);
    spec.flow_rate = Some(Rate::mbit(10));
    spec.flow_burst = 3000;
    let mut s = one_leaf(cfg(1000), spec);
    let with = |token: u64, flow: u64, remaining: u64| {
        let mut p = packet(token, 0, flow, 1500);
        p.fields.remaining = remaining;
        p
    };
    for (i, r) in [100, 5000, 5000, 100, 6000, 6000, 6000, 6000]
        .into_iter()
        .enumerate()
    {
        s.enqueue(S, &with(i as u64, 1, r)).unwrap();
    }
    let mut sent = vec![s.dequeue(S).expect("the first packet passes").token];
    let t1 = S + 5 * MS;
    while sent.last() != Some(&3) {
        sent.push(s.dequeue(t1).expect("flow 1 has packets").token);
    }
    s.enqueue(t1, &with(100, 2, 1000)).unwrap();
    assert_eq!(
        s.dequeue(t1).map(|d| d.flow),
        Some(2),
        "sent before: {sent:?}"
    );
}

#[test]
fn fq_keeps_a_debt_until_rounds_pay_it_however_long_the_flow_was_idle() {
    // X overdraws with a 64 KiB frame (it owes about 21 rounds of 3028 B); Y is backlogged.
    // 41 ms later, with only a few rounds gone, X's next frame must wait for its turn, as in
    // Linux fq (a flow with negative credit stays on the old list, queued or not). Forgiven
    // after 40 ms idle, X got twice its share with a frame every 41 ms.
    let big = SchedConfig {
        max_packet: 65_536,
        ..cfg(10_000)
    };
    let mut s = one_leaf(big, NodeSpec::new("leaf", PolicyKind::Fq));
    for t in 0..1000 {
        s.enqueue(0, &packet(t, 0, 1, 1500)).unwrap(); // Y
    }
    s.enqueue(0, &packet(5000, 0, 0, 65_536)).unwrap(); // X
    let mut n = 0;
    while s.dequeue(n).map(|d| d.flow) != Some(0) {
        n += 1;
    }
    for k in 0..4 {
        assert_eq!(s.dequeue(n + 1 + k).map(|d| d.flow), Some(1));
    }
    let t = n + 41 * MS;
    s.enqueue(t, &packet(5001, 0, 0, 65_536)).unwrap();
    let next: Vec<u64> = (0..5)
        .filter_map(|k| s.dequeue(t + k).map(|d| d.flow))
        .collect();
    assert_eq!(next, [1, 1, 1, 1, 1], "X's debt was forgiven");
}

#[test]
fn fq_serves_a_new_flow_first_with_a_tiny_quantum_too() {
    // A 100 B quantum at a 64 KiB max_packet makes 2626 ranks of rounds: `auto` gave them an
    // approximate queue of two ranks per bucket, where a new flow waited behind the old ones.
    let big = SchedConfig {
        max_packet: 65_536,
        ..cfg(10_000)
    };
    let mut leaf = NodeSpec::new("leaf", PolicyKind::Fq);
    leaf.flows.quantum = 100;
    let mut s = one_leaf(big, leaf);
    // Ten flows of 50 B packets, two per round each once their initial credit (10 MTU, 302
    // packets) is spent: a new flow arrives mid-round, among old flows of the same round.
    let mut token = 0;
    for flow in 0..10 {
        for _ in 0..1000 {
            s.enqueue(0, &packet(token, 0, flow, 50)).unwrap();
            token += 1;
        }
    }
    for now in 0..5000 {
        s.dequeue(now).unwrap();
    }
    s.enqueue(5000, &packet(token, 0, 99, 50)).unwrap();
    assert_eq!(s.dequeue(5000).map(|d| d.flow), Some(99));
}

/// A flow's pacing rate holds on the wire, to within a few packets: a paced flow that fair
/// queuing held below its rate does not make up for it once the others stop. (Held back at
/// its leaf, it used to keep passing its gate at its rate; once the others stopped, the 20
/// packets it had passed, then each new one, as its gate's stamps lagged, left at the link's
/// rate, twice its pacing rate here.)
#[test]
fn a_paced_flow_held_back_by_fair_queuing_never_exceeds_its_rate_on_the_wire() {
    let pace = Rate::mbit(50);
    for policy in [
        PolicyKind::Fq,
        PolicyKind::Wfq,
        PolicyKind::Drr,
        PolicyKind::Pfabric,
    ] {
        let root = NodeSpec::new("link", policy).rate(Rate::mbit(100), 0);
        let mut s = one_leaf(cfg(1000), root);
        let send = |s: &mut Scheduler, now: u64, token: u64, flow: u64| {
            let mut p = packet(token, 0, flow, 1500);
            if flow == 0 {
                p.fields.pacing_bps = pace.bps();
            }
            p.fields.remaining = 1 << 40;
            s.enqueue(now, &p).expect("accepted");
        };
        // Ten flows keep 20 packets each queued until 1 s; then only flow 0 (paced) does.
        let mut token = 0;
        for flow in 0..10 {
            for _ in 0..20 {
                send(&mut s, S, token, flow);
                token += 1;
            }
        }
        let (mut now, end, others_stop) = (S, 3 * S, 2 * S);
        let mut mine = Vec::new();
        while now < end {
            match s.dequeue(now) {
                Some(d) => {
                    if d.flow == 0 {
                        mine.push((now, u64::from(d.len)));
                    }
                    if d.flow == 0 || now < others_stop {
                        send(&mut s, now, token, d.flow);
                        token += 1;
                    }
                }
                None => now = s.next_event(now).expect("backlogged").max(now + 1),
            }
        }
        assert!(mine.len() > 100, "{policy:?}: {} packets", mine.len());
        // Within any stretch of its departures: the rate over the stretch's length (and a
        // shaper slot of rounding), and three packets: the two past its gate and the one
        // stamped when the first leaves (`PAST_GATE`), never more.
        for i in 0..mine.len() {
            let mut bytes = 0;
            for &(at, len) in &mine[i..] {
                bytes += len;
                let allowed = 3 * 1500 + pace.bytes_in(at - mine[i].0 + 1024);
                assert!(
                    bytes <= allowed,
                    "{policy:?}: {bytes} B in {} us from {} ms, allowed {allowed}",
                    (at - mine[i].0) / 1000,
                    (mine[i].0 - S) / MS
                );
            }
        }
        // And alone it gets its rate.
        let alone: u64 = mine
            .iter()
            .filter(|d| d.0 >= others_stop + 100 * MS)
            .map(|d| d.1)
            .sum();
        let mbit = alone as f64 * 8.0 / 0.9e6;
        assert!(
            (mbit - 50.0).abs() < 0.5,
            "{policy:?}: alone {mbit:.2} Mbit/s"
        );
    }
}

/// `a` reserving 300 Mbit/s at weight 1 beside `c` at weight 9, under `policy`.
fn reserved_beside_heavy(policy: PolicyKind) -> (Scheduler, NodeId) {
    two_leaves(
        NodeSpec::new("root", policy),
        NodeSpec::new("a", PolicyKind::Fifo)
            .weight(1)
            .reservation(Rate::mbit(300)),
        NodeSpec::new("c", PolicyKind::Fifo).weight(9),
    )
}

/// A reservation set at run time far slower than any the node was built with would put its
/// tag past its bucketed reservation queue's window (sized from the reservations it was built
/// with), at its edge, where it hid a sibling's due reservation for as long as it was not due
/// itself: a class whose reservation went from 300 Mbit/s to 10 bit/s (20 minutes a packet)
/// left its sibling 3 of its 200 Mbit/s. The queue's buckets are widened instead, and the
/// sibling keeps its reservation.
#[test]
fn a_reservation_slower_than_the_queue_was_sized_for_widens_it() {
    // `a` weight 9 beside `c` weight 1 reserving 200 Mbit/s, on 1 Gbit/s. hClock: `c` gets
    // its reservation, above its 100 share, `a` the rest. HTB: `c` its rate and a tenth of
    // what the rates leave, `a` nine tenths (of 500 with `a` at 300 Mbit/s, of 800 after).
    for (policy, before, after) in [
        (PolicyKind::HClock, [800.0, 200.0], [800.0, 200.0]),
        (PolicyKind::Htb, [750.0, 250.0], [720.0, 280.0]),
    ] {
        let mut root = NodeSpec::new("root", policy);
        root.queue = QueueChoice::Kind {
            kind: sluice_queue::QueueKind::Cffs,
            buckets: None,
            granularity: None,
        };
        let (mut s, a) = two_leaves(
            root,
            NodeSpec::new("a", PolicyKind::Fifo)
                .weight(9)
                .reservation(Rate::mbit(300)),
            NodeSpec::new("c", PolicyKind::Fifo)
                .weight(1)
                .reservation(Rate::mbit(200)),
        );
        let reservation_granularity = |s: &Scheduler| {
            let d = s.describe();
            let line = d.lines().find(|l| l.contains("root")).unwrap_or_default();
            line.to_string()
        };
        let built = reservation_granularity(&s);
        let mut host = Host::new();
        let flows = [(0, 0, 1500), (1, 1, 1500)];
        let link = Some(Rate::gbit(1));
        let deps = host.run(&mut s, &flows, 4, link, S, 2 * S);
        // 10 bit/s: 1500 B take 20 minutes, far past a window sized for 200 Mbit/s.
        assert!(s.set_reservation(2 * S, a, Rate::new(10)));
        assert_ne!(
            reservation_granularity(&s),
            built,
            "{policy:?}: the queue was not widened"
        );
        let later = host.run(&mut s, &flows, 4, link, 2 * S, 3 * S);
        for (deps, start, want) in [(&deps, S, before), (&later, 2 * S, after)] {
            for (class, want) in want.into_iter().enumerate() {
                let got = mbit_in(deps, class as u32, start + S / 10, S * 9 / 10);
                assert!(
                    (got - want).abs() < 2.0,
                    "{policy:?} from {start}: class {class} {got:.1}, want {want}"
                );
            }
        }
    }
}

/// A reservation removed, or a weight raised, at run time takes effect at once. While an
/// hClock reservation (a floor) gives a member more than its weighted share, all it sends
/// counts against its share; that lead used to outlive the reservation: removed after 2 s, a
/// 300 Mbit/s reservation left its member 3 Mbit/s of its 100 for 4 s, and a weight raised
/// from 1 to 9 changed nothing for as long. (An HTB rate counts nothing against the share.)
#[test]
fn a_reservation_removed_or_a_weight_raised_at_run_time_takes_effect_at_once() {
    // On 1 Gbit/s, `a` gets under hClock its 300, then 500 at weight 9; under HTB its 300
    // and a tenth of the 700 left, then half of it; without the reservation, 100 under both.
    for (policy, reserved_want, raised_want) in [
        (PolicyKind::HClock, 300.0, 500.0),
        (PolicyKind::Htb, 370.0, 650.0),
    ] {
        for raise_weight in [false, true] {
            let (mut s, a) = reserved_beside_heavy(policy);
            let mut host = Host::new();
            let flows = [(0, 0, 1500), (1, 1, 1500)];
            let link = Some(Rate::gbit(1));
            let before = host.run(&mut s, &flows, 4, link, S, 3 * S);
            let reserved = mbit_in(&before, 0, 2 * S, S);
            assert!(
                (reserved - reserved_want).abs() < 3.0,
                "{policy:?}: {reserved:.1}"
            );
            let want = if raise_weight {
                assert!(s.set_weight(a, 9));
                raised_want
            } else {
                assert!(s.set_reservation(3 * S, a, None));
                100.0
            };
            let after = host.run(&mut s, &flows, 0, link, 3 * S, 4 * S);
            let got = mbit_in(&after, 0, 3 * S + 10 * MS, 240 * MS);
            assert!(
                (got - want).abs() < want * 0.02,
                "{policy:?}, weight raised {raise_weight}: {got:.1} Mbit/s, want {want}"
            );
        }
    }
}

/// A sibling's weight lowered at run time, which raises a reserved member's weighted share
/// above its reservation, forgives nothing under hClock (docs/policy-files.md): the member
/// keeps its reservation until the sibling has caught up with its lead, then gets its new
/// share. Weights 1 and 9 on 1 Gbit/s with a 300 Mbit/s reservation for the first: 300 / 700
/// for 2 s, in which the first ran ahead of the second by 300 / 1 - 700 / 9 = 222 Mbit/s per
/// unit of weight, a lead of 444 Mbit. The second's weight lowered to 1, it closes that at
/// 700 / 1 - 300 / 1 = 400 Mbit/s: 300 / 700 for 1.1 s more, then 500 / 500. Under HTB the
/// rate is not charged to the share, so there is no lead: 370 / 630, then 650 / 350 at once.
#[test]
fn a_siblings_weight_lowered_at_run_time_forgives_a_reserved_lead_nothing() {
    for (policy, reserved_want, wants) in [
        (PolicyKind::HClock, 300.0, [300.0, 500.0]),
        (PolicyKind::Htb, 370.0, [650.0, 650.0]),
    ] {
        let (mut s, _) = reserved_beside_heavy(policy);
        let c = s
            .classify(&packet(0, 1, 0, 1500))
            .expect("class 1 has a leaf");
        let mut host = Host::new();
        let flows = [(0, 0, 1500), (1, 1, 1500)];
        let link = Some(Rate::gbit(1));
        let before = host.run(&mut s, &flows, 4, link, S, 3 * S);
        let reserved = mbit_in(&before, 0, S + 10 * MS, 2 * S - 10 * MS);
        assert!(
            (reserved - reserved_want).abs() < 3.0,
            "{policy:?}: {reserved:.1}"
        );
        assert!(s.set_weight(c, 1));
        let after = host.run(&mut s, &flows, 0, link, 3 * S, 6 * S);
        let [first, then] = wants;
        for (start, len, want) in [(3 * S + 10 * MS, S, first), (4 * S + 200 * MS, S, then)] {
            let got = mbit_in(&after, 0, start, len);
            assert!(
                (got - want).abs() < want * 0.02,
                "{policy:?} from {start}: {got:.1} Mbit/s, want {want}"
            );
        }
    }
}

/// A reservation raised at run time holds from then, and one lowered pays what its member
/// was served ahead of it at the new rate; so does one removed and given again. (The
/// reservation tag kept its time: raised from 10 kbit/s to 500 Mbit/s, a member whose last
/// packet had put its tag 1.2 s ahead got its weighted share of 100 Mbit/s, not its
/// reservation, until then.)
#[test]
fn a_reservation_changed_at_run_time_takes_effect_at_once() {
    // Beside `c` at weight 9 on 1 Gbit/s, `a` at weight 1 gets its reservation under hClock,
    // and under HTB that and a tenth of what is left.
    let cases = [
        (Rate::new(10_000).unwrap(), Rate::mbit(500), [500.0, 550.0]),
        (Rate::mbit(500), Rate::mbit(300), [300.0, 370.0]),
    ];
    for (p, policy) in [PolicyKind::HClock, PolicyKind::Htb]
        .into_iter()
        .enumerate()
    {
        for ((from, to, wants), removed_first) in
            cases.into_iter().flat_map(|c| [(c, false), (c, true)])
        {
            let want = wants[p];
            let (mut s, a) = two_leaves(
                NodeSpec::new("root", policy),
                NodeSpec::new("a", PolicyKind::Fifo)
                    .weight(1)
                    .reservation(from),
                NodeSpec::new("c", PolicyKind::Fifo).weight(9),
            );
            let mut host = Host::new();
            let flows = [(0, 0, 1500), (1, 1, 1500)];
            let link = Some(Rate::gbit(1));
            host.run(&mut s, &flows, 4, link, S, S + 500 * MS);
            if removed_first {
                assert!(s.set_reservation(S + 500 * MS, a, None));
            }
            assert!(s.set_reservation(S + 500 * MS, a, Some(to)));
            let after = host.run(&mut s, &[], 0, link, S + 500 * MS, S + 600 * MS);
            let got = mbit_in(&after, 0, S + 500 * MS, 100 * MS);
            assert!(
                (got - want).abs() < want * 0.02,
                "{policy:?}, {from} to {to} (removed first: {removed_first}): {got:.1} Mbit/s, \
                 want {want}"
            );
        }
    }
}

/// A rate raised at run time holds from then: what the gate owed at the old rate is paid at
/// the new one. (The packet in the shaper kept the gate for its whole time at the old rate:
/// the one after it left 480 ms later at 1 Mbit/s raised to 10 Gbit/s.)
#[test]
fn a_rate_raised_at_run_time_takes_effect_behind_the_packet_in_the_shaper() {
    let mut b = TreeBuilder::new(SchedConfig {
        max_packet: 65536,
        ..cfg(100)
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
    let n = b.child(
        root,
        NodeSpec::new("n", PolicyKind::Fifo).rate(Rate::mbit(1), 0),
    );
    b.default_leaf(n);
    let mut s = b.build().unwrap();
    for t in 0..5 {
        s.enqueue(S, &packet(t, 0, 1, 60_000)).unwrap();
    }
    assert_eq!(s.dequeue(S).map(|d| d.token), Some(0));
    s.set_rate(S, n, Some(Rate::gbit(10)), 0);
    let mut now = S;
    let mut at = Vec::new();
    while let Some(t) = s.next_event(now) {
        now = t.max(now);
        if let Some(d) = s.dequeue(now) {
            at.push((d.token, now - S));
        }
    }
    // Token 1 keeps the release it was given (480 ms, 60 000 B at 1 Mbit/s); the others
    // follow at 10 Gbit/s (48 us apart, to within a shaper slot).
    assert_eq!(at.len(), 4, "{at:?}");
    assert_eq!(at[0].0, 1);
    assert!(at[0].1.abs_diff(480 * MS) < 1024, "{at:?}");
    for w in at.windows(2) {
        let gap = w[1].1 - w[0].1;
        assert!(gap < 48_000 + 1024 && gap + 1024 > 48_000, "{at:?}");
    }
}

/// The root gate counts as shaped only the packets that waited for it, also across its
/// removal and return at run time.
#[test]
fn the_root_counts_as_shaped_only_packets_that_waited_for_it() {
    let mut b = TreeBuilder::new(cfg(100));
    let root = b.root(NodeSpec::new("root", PolicyKind::Fifo).rate(Rate::mbit(10), 0));
    b.default_leaf(root);
    let mut s = b.build().unwrap();
    for t in 0..3 {
        s.enqueue(S, &packet(t, 0, 1, 1500)).unwrap();
    }
    assert!(s.dequeue(S).is_some());
    assert!(s.dequeue(S).is_none(), "waits at the root's gate");
    s.set_rate(S, root, None, 0);
    assert!(s.dequeue(S).is_some(), "the gate is gone");
    s.set_rate(S, root, Some(Rate::mbit(10)), 0);
    assert!(s.dequeue(S + S).is_some(), "long after: no wait");
    assert_eq!(s.node_stats(root).shaped, 0);
}

/// Rates moved up and down at run time by a host that sleeps until the gate is free, as a
/// daemon engine does, and installs its allocator's rate at its time before its next call:
/// the rate achieved is what the rates give, packet by packet. (Stretching what the gate owed
/// at each lowering, counted from the last time the scheduler had been given instead of the
/// host's, took 3% off a 200 Mbit/s limit two engines shared.)
#[test]
fn rates_moved_up_and_down_at_run_time_keep_their_average() {
    let mut b = TreeBuilder::new(cfg(100));
    let root = b.root(NodeSpec::new("root", PolicyKind::Fifo).rate(Rate::mbit(100), 0));
    b.default_leaf(root);
    let mut s = b.build().unwrap();
    let (mut now, mut token, mut sent, mut ideal_ns) = (S, 0u64, 0u64, 0f64);
    for _ in 0..4 {
        s.enqueue(now, &packet(token, 0, 1, 1500)).unwrap();
        token += 1;
    }
    let rates = [Rate::mbit(90), Rate::mbit(110)];
    for i in 0..20_000 {
        // The host sleeps until the gate is free, then installs its allocator's rate for the
        // next packet, then sends.
        now = s.next_event(now).unwrap().max(now);
        let rate = rates[i % 2];
        s.set_rate(now, root, Some(rate), 0);
        now = s.next_event(now).unwrap().max(now);
        let d = s.dequeue(now).expect("the gate is free");
        sent += u64::from(d.len);
        ideal_ns += rate.tx_time_ns(u64::from(d.len)) as f64;
        s.enqueue(now, &packet(token, 0, 1, 1500)).unwrap();
        token += 1;
    }
    let achieved = sent as f64 * 8.0 / (now - S) as f64;
    let ideal = sent as f64 * 8.0 / ideal_ns;
    assert!(
        (achieved / ideal - 1.0).abs() < 0.005,
        "{:.2} Mbit/s, the rates give {:.2}",
        achieved * 1e3,
        ideal * 1e3
    );
}

/// A weight or reservation set to what it is already changes nothing: re-ranked (its lead
/// forgiven) each time, a reserved member given the same weight every 100 us got 360 Mbit/s
/// of its 300.
#[test]
fn setting_a_weight_to_what_it_is_changes_nothing() {
    let (mut s, a) = reserved_beside_heavy(PolicyKind::HClock);
    let mut host = Host::new();
    let flows = [(0, 0, 1500), (1, 1, 1500)];
    let link = Some(Rate::gbit(1));
    let mut deps = host.run(&mut s, &flows, 4, link, S, S + 100 * MS);
    let mut t = S + 100 * MS;
    while t < 2 * S {
        assert!(s.set_weight(a, 1));
        assert!(s.set_reservation(t, a, Some(Rate::mbit(300))));
        deps.extend(host.run(&mut s, &flows, 0, link, t, t + 100_000));
        t += 100_000;
    }
    let got = mbit_in(&deps, 0, S + S / 2, S / 2);
    assert!((got - 300.0).abs() < 6.0, "{got:.1} Mbit/s, reserved 300");
}

/// A flow still paced (its gate's next release ahead) is not reclaimed for another: a full
/// table refuses the newcomer instead, counted. (Reclaimed, its pacing state went with it:
/// two flows alternating in a one-flow table each sent at 500 times its 1 Mbit/s.)
#[test]
fn a_flow_still_paced_keeps_its_slot() {
    let mut b = TreeBuilder::new(SchedConfig {
        flows: 1,
        ..cfg(100)
    });
    let mut root = NodeSpec::new("root", PolicyKind::Fifo);
    root.flow_rate = Some(Rate::mbit(1));
    let root = b.root(root);
    b.default_leaf(root);
    let mut s = b.build().unwrap();
    let mut now = S;
    let mut sent: HashMap<u64, Vec<u64>> = HashMap::new();
    for token in 0..1000u64 {
        let flow = token % 2;
        if s.enqueue(now, &packet(token, 0, flow, 1500)).is_ok() {
            now = now.max(s.next_event(now).unwrap());
            let d = s.dequeue(now).unwrap();
            sent.entry(d.flow).or_default().push(now);
        }
        now += 12_000;
    }
    assert!(s.stats().rejected(RejectReason::FlowTableFull) > 0);
    for (flow, times) in &sent {
        for w in times.windows(2) {
            assert!(w[1] - w[0] + 1024 >= 12 * MS, "flow {flow}: {times:?}");
        }
    }
}

/// A reservation is met exactly over a long run, however small a packet's time at it: 64 B
/// at 60 Gbit/s is 8.53 ns. `a` reserves 60 Gbit/s of a 100 Gbit/s root beside `b` of weight
/// 1000, so `a`'s weighted share (0.1 Gbit/s) is below its reservation and it gets exactly
/// 60, `b` the other 40. (Charged in whole ns, rounded to 9, `a` got 56.9; rounded down to 8
/// it would get 64.)
#[test]
fn a_reservation_holds_with_small_packets_at_high_rates() {
    for policy in [PolicyKind::HClock, PolicyKind::Htb] {
        let (mut s, _) = two_leaves(
            NodeSpec::new("root", policy).rate(Rate::gbit(100), 0),
            NodeSpec::new("a", PolicyKind::Fifo).reservation(Rate::gbit(60)),
            NodeSpec::new("b", PolicyKind::Fifo).weight(1000),
        );
        let len = 2 * MS;
        let deps = Host::new().run(&mut s, &[(0, 0, 64), (1, 1, 64)], 8, None, S, S + len);
        let gbit = |c: u32| mbit_in(&deps, c, S, len) / 1e3;
        assert!(
            (gbit(0) - 60.0).abs() < 0.1,
            "{policy:?}: a got {:.2} of its 60 Gbit/s",
            gbit(0)
        );
        assert!(
            (gbit(1) - 40.0).abs() < 0.1,
            "{policy:?}: b got {:.2} Gbit/s",
            gbit(1)
        );
    }
}

/// Start-time fair queuing forgets what a member sent once its node goes idle (Goyal et al.:
/// at the end of a busy period the virtual time is the largest finish tag served). `a` sends
/// one 9000 B packet alone and the node empties; then `a` and `b`, of equal weight, both
/// become backlogged with 1500 B packets: they alternate from the first packet. (With the
/// virtual time left at the largest start tag served, `a`'s 9000 B were held against it:
/// b, b, b, b, b, b, a, b.)
#[test]
fn fair_queuing_forgets_a_busy_period_once_the_node_is_idle() {
    let mut wrong = Vec::new();
    for policy in [PolicyKind::Wfq, PolicyKind::HClock, PolicyKind::Htb] {
        let mut b = TreeBuilder::new(cfg(100));
        let root = b.root(NodeSpec::new("root", policy));
        for class in 0..2u32 {
            let leaf = b.child(root, NodeSpec::new(&format!("c{class}"), PolicyKind::Fifo));
            b.rule(vec![Match::Class(class)], leaf);
        }
        let mut s = b.build().unwrap();
        s.enqueue(S, &packet(0, 0, 0, 9000)).unwrap();
        assert_eq!(s.dequeue(S).map(|d| d.token), Some(0));
        assert!(s.is_empty());
        let t = 2 * S;
        for token in 1..=16u64 {
            let class = (token - 1) as u32 % 2;
            s.enqueue(t, &packet(token, class, u64::from(class), 1500))
                .unwrap();
        }
        let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(t).map(|d| d.flow)).collect();
        let alternate: Vec<u64> = (0..16).map(|i| i % 2).collect();
        if order != alternate {
            wrong.push(format!("{policy:?}: {order:?}"));
        }
    }
    assert!(wrong.is_empty(), "not alternating: {wrong:#?}");
}

/// A flow that owes its fair leaf service it had ahead of its share keeps its slot while the
/// leaf holds packets and another idle flow can give its slot instead: flows 1 and 2 stay
/// backlogged, flow 3 overdraws with one 65 000 B frame and empties, then flow 5 sends one
/// small packet and empties; new flow 4 takes 5's slot, and 3 comes back behind 1 and 2.
/// (Reclaimed, flow 3 came back first as a new flow instead of sitting out the rounds it
/// owed.) When every idle flow tried owes, the first goes all the same: a new flow is not
/// refused for a debt.
#[test]
fn a_flow_that_owes_its_fair_leaf_keeps_its_slot_while_others_wait() {
    for policy in [PolicyKind::Fq, PolicyKind::Drr, PolicyKind::Wfq] {
        let c = SchedConfig {
            flows: 4,
            max_packet: 65_536,
            ..cfg(1000)
        };
        let mut s = one_leaf(c, NodeSpec::new("leaf", policy));
        let mut token = 0;
        let mut send = |s: &mut Scheduler, flow: u64, len: u32| {
            token += 1;
            s.enqueue(S, &packet(token, 0, flow, len))
        };
        for _ in 0..30 {
            send(&mut s, 1, 1500).unwrap();
            send(&mut s, 2, 1500).unwrap();
        }
        send(&mut s, 3, 65_000).unwrap();
        while s.dequeue(S).is_some_and(|d| d.flow != 3) {}
        send(&mut s, 5, 100).unwrap();
        while s.dequeue(S).is_some_and(|d| d.flow != 5) {}
        // A few packets of 1 and 2: under wfq the virtual time passes 5's finish tag (100 B
        // ahead), not 3's (65 000 B ahead).
        for _ in 0..4 {
            s.dequeue(S).unwrap();
        }
        send(&mut s, 4, 100).unwrap();
        assert_eq!(s.flow_id(0, 5), None, "{policy:?}: 5 gave its slot");
        assert!(
            s.flow_id(0, 3).is_some(),
            "{policy:?}: 3 owes and keeps its slot"
        );
        // Flow 3 comes back behind 1 and 2 (fq and drr: rounds of 1500 B quanta; wfq: their
        // finish tags).
        send(&mut s, 3, 1500).unwrap();
        let next: Vec<u64> = (0..4).map(|_| s.dequeue(S).unwrap().flow).collect();
        assert_ne!(next[0], 3, "{policy:?}: the debt is kept ({next:?})");
        // Whatever the idle flows owe, a new flow gets in.
        while s.dequeue(S).is_some_and(|d| d.flow != 3) {}
        assert!(
            send(&mut s, 6, 100).is_ok(),
            "{policy:?}: not refused for a debt"
        );
        assert!(send(&mut s, 7, 100).is_ok(), "{policy:?}");
    }
}

/// A one-leaf policy file: `policy` on `queue`.
fn one_leaf_file(policy: &str, queue: &str) -> Scheduler {
    let text = format!(
        "[[node]]\nname = \"leaf\"\npolicy = \"{policy}\"\nqueue = \"{queue}\"\n\
         [scheduler]\ndefault = \"leaf\"\n"
    );
    sluice_sched::config::build_str(&text, "leaf.toml").unwrap()
}

/// On an exact queue pFabric ranks by the remaining sizes themselves: 1 000 000 B left goes
/// before 1 000 400 B left, whatever came first. (Ranked by compressed sizes, as a bucketed
/// queue needs, the two tied within 0.1% and left in arrival order on any queue.) On `auto`'s
/// bucketed queue they still tie, as documented.
#[test]
fn pfabric_on_an_exact_queue_orders_by_exact_remaining_size() {
    for (queue, first) in [
        ("btree", 2),
        ("binary_heap", 2),
        ("skiplist", 2),
        ("auto", 1),
    ] {
        let mut s = one_leaf_file("pfabric", queue);
        for (token, remaining) in [(1u64, 1_000_400u64), (2, 1_000_000)] {
            let mut p = packet(token, 0, token, 1500);
            p.fields.remaining = remaining;
            s.enqueue(0, &p).unwrap();
        }
        assert_eq!(s.dequeue(0).unwrap().flow, first, "{queue}");
    }
}

/// On an exact queue EDF and LSTF rank by the times themselves: overdue packets leave by
/// their deadlines too (a bucketed queue's window ranks them as due now, in arrival order).
/// A packet without a deadline (0) goes after every packet with one, on any queue.
#[test]
fn edf_on_an_exact_queue_orders_overdue_packets_by_deadline() {
    let mut s = one_leaf_file("edf", "btree");
    let mut a = packet(1, 0, 1, 100);
    a.fields.deadline = MS;
    s.enqueue(0, &a).unwrap();
    let mut b = packet(2, 0, 2, 100);
    b.fields.deadline = MS / 2;
    s.enqueue(2 * MS, &b).unwrap();
    let order: Vec<u64> = (0..2).map(|_| s.dequeue(2 * MS).unwrap().token).collect();
    assert_eq!(order, [2, 1]);

    let mut s = one_leaf_file("lstf", "btree");
    let mut a = packet(1, 0, 1, 100);
    a.fields.slack = MS;
    s.enqueue(0, &a).unwrap();
    let b = packet(2, 0, 2, 100); // no slack: due on arrival, at 0.5 ms
    s.enqueue(MS / 2, &b).unwrap();
    let order: Vec<u64> = (0..2).map(|_| s.dequeue(2 * MS).unwrap().token).collect();
    assert_eq!(order, [2, 1]);

    for queue in ["btree", "auto", "cffs"] {
        let mut s = one_leaf_file("edf", queue);
        let now = 10 * S;
        s.enqueue(now, &packet(1, 0, 1, 100)).unwrap();
        let mut due = packet(2, 0, 2, 100);
        due.fields.deadline = now + 900 * MS;
        s.enqueue(now, &due).unwrap();
        s.enqueue(now, &packet(3, 0, 3, 100)).unwrap();
        let order: Vec<u64> = (0..3).map(|_| s.dequeue(now).unwrap().token).collect();
        assert_eq!(order, [2, 1, 3], "{queue}: without a deadline, last");
    }
}

/// A paced flow keeps its slot until its gate has gathered its whole burst again, when a new
/// gate would be no different. Flow 7 (10 Mbit/s, 15 000 B burst) sends 11 packets of 1500 B
/// and drains; flow 8 asks for the one slot as soon as 7's next release has come. (Reclaimed
/// then, and 8 as soon, 7 came back with a fresh burst every cycle and sent at 110 Mbit/s.)
#[test]
fn a_paced_flow_keeps_its_slot_until_its_burst_is_whole_again() {
    let mut b = TreeBuilder::new(SchedConfig {
        flows: 1,
        ..cfg(1000)
    });
    let mut leaf = NodeSpec::new("leaf", PolicyKind::Fifo);
    leaf.flow_rate = Some(Rate::mbit(10));
    leaf.flow_burst = 15_000;
    let leaf = b.root(leaf);
    b.default_leaf(leaf);
    let mut s = b.build().unwrap();
    let (start, mut now, mut token, mut bytes) = (S, S, 0, 0u64);
    for _ in 0..50 {
        for _ in 0..11 {
            token += 1;
            s.enqueue(now, &packet(token, 0, 7, 1500)).unwrap();
        }
        while let Some(t) = s.next_event(now) {
            now = t;
            while let Some(d) = s.dequeue(now) {
                bytes += u64::from(d.len);
            }
        }
        now = s.flow_next_release(leaf, 7).unwrap().max(now);
        token += 1;
        let _ = s.enqueue(now, &packet(token, 0, 8, 64));
        while s.dequeue(now).is_some() {}
        // If 8 took the slot, 7 takes it back once 8's next release has come.
        now = s.flow_next_release(leaf, 8).map_or(now, |t| t.max(now));
    }
    let mbit = bytes as f64 * 8.0 / ((now - start) as f64 / 1e9) / 1e6;
    assert!(mbit < 10.5, "{mbit:.1} Mbit/s at 10");
}

/// `flow_next_release` names when a packet after those the flow holds could go, counting
/// those that wait at its gate unstamped: five 1500 B packets at 1 Mbit/s (12 ms each) at
/// once, the first goes, the second waits in the shaper until 12 ms, the other three at the
/// gate; a sixth then goes at 60 ms, which is what the host is told, to within the shaper's
/// slot. (Told the gate's last timestamp alone, 24 ms, a host that ranks paused sources by
/// it woke one 36 ms early.)
#[test]
fn the_next_release_counts_the_packets_waiting_at_the_gate() {
    let mut leaf = NodeSpec::new("leaf", PolicyKind::Fifo);
    leaf.flow_rate = Some(Rate::mbit(1));
    let mut s = one_leaf(cfg(100), leaf);
    for token in 0..5 {
        s.enqueue(S, &packet(token, 0, 7, 1500)).unwrap();
    }
    assert_eq!(s.flow_next_release(0, 7), Some(S + 60 * MS));
    s.enqueue(S, &packet(5, 0, 7, 1500)).unwrap();
    assert_eq!(s.flow_next_release(0, 7), Some(S + 72 * MS));
    let times = timed_drain(&mut s, S);
    let sixth = times
        .iter()
        .find(|&&(token, _)| token == 5)
        .map(|&(_, t)| t);
    assert!(
        sixth.is_some_and(|t| t <= 60 * MS && 60 * MS - t < 1024),
        "{times:?}"
    );
    // Drained, the gate's last timestamp is the answer again.
    assert_eq!(s.flow_next_release(0, 7), Some(S + 72 * MS));
}

/// An idle flow that may not give up its slot yet (its gate not whole again) does not turn
/// new flows away while one idle behind it may: it goes to the back of the idle list. Flow 1
/// (paced at 1 kbit/s: 12 s a packet) and flow 2 (unpaced) fill a two-flow table and empty,
/// 1 first; flow 3 takes 2's slot. (Before, only the flow idle the longest was looked at, and
/// flow 3 was refused for 12 s.)
#[test]
fn a_flow_that_may_not_go_does_not_block_the_idle_flows_behind_it() {
    let mut b = TreeBuilder::new(SchedConfig {
        flows: 2,
        ..cfg(100)
    });
    let leaf = b.root(NodeSpec::new("leaf", PolicyKind::Fifo));
    b.default_leaf(leaf);
    let mut s = b.build().unwrap();
    let mut slow = packet(1, 0, 1, 1500);
    slow.fields.pacing_bps = 1000;
    s.enqueue(S, &slow).unwrap();
    assert_eq!(s.dequeue(S).map(|d| d.flow), Some(1));
    s.enqueue(S, &packet(2, 0, 2, 1500)).unwrap();
    assert_eq!(s.dequeue(S).map(|d| d.flow), Some(2));
    s.enqueue(S, &packet(3, 0, 3, 1500)).unwrap();
    assert_eq!(s.stats().flows_reclaimed, 1);
    assert_eq!(s.flow_id(leaf, 2), None, "2's slot went to 3");
    assert!(
        s.flow_next_release(leaf, 1).is_some_and(|t| t > S),
        "1 keeps its pacing"
    );
    // Both left may not go now: 1 is still paced, 3 is not idle.
    assert!(s.enqueue(S, &packet(4, 0, 4, 1500)).is_err());
}

/// A debt is kept while the leaf holds packets anywhere, at the leaf or at their flows'
/// gates: flow 2 overdraws by a 65 000 B frame while flow 1, paced at 1 Mbit/s or not, has
/// packets left; flow 5 then sends one small packet and empties, and new flow 3 takes 5's
/// slot, not 2's. (Counted only at the leaf, the leaf looked idle between flow 1's paced
/// releases, and 2's debt went with its slot.)
#[test]
fn a_debt_is_kept_while_the_leaf_holds_packets_at_their_gates() {
    for paced in [false, true] {
        let c = SchedConfig {
            flows: 3,
            max_packet: 65_536,
            ..cfg(1000)
        };
        let mut s = one_leaf(c, NodeSpec::new("leaf", PolicyKind::Fq));
        for token in 1..=12 {
            let mut p = packet(token, 0, 1, 1500);
            if paced {
                p.fields.pacing_bps = 1_000_000;
            }
            s.enqueue(S, &p).unwrap();
        }
        s.enqueue(S, &packet(100, 0, 2, 65_000)).unwrap();
        while s.dequeue(S).is_some_and(|d| d.flow != 2) {}
        s.enqueue(S, &packet(101, 0, 5, 100)).unwrap();
        while s.dequeue(S).is_some_and(|d| d.flow != 5) {}
        assert!(!s.is_empty());
        s.enqueue(S, &packet(200, 0, 3, 100)).unwrap();
        assert_eq!(s.flow_id(0, 5), None, "paced {paced}: 5 gave its slot");
        assert!(
            s.flow_id(0, 2).is_some(),
            "paced {paced}: 2 owes and keeps it"
        );
    }
}

/// A DRR flow that spent its deficit exactly is where a new flow would start (the next round,
/// a quantum): it owes nothing, and its slot, the first on the idle list, is the one a new
/// flow takes (counted as owing, it was passed over for flow 5's).
#[test]
fn a_drr_flow_that_spent_its_deficit_exactly_owes_nothing() {
    let mut leaf = NodeSpec::new("leaf", PolicyKind::Drr);
    leaf.flows.quantum = 1500;
    let c = SchedConfig {
        flows: 4,
        ..cfg(1000)
    };
    let mut s = one_leaf(c, leaf);
    let mut token = 0;
    for _ in 0..5 {
        for flow in [1, 2] {
            token += 1;
            s.enqueue(S, &packet(token, 0, flow, 1500)).unwrap();
        }
    }
    s.enqueue(S, &packet(100, 0, 3, 1500)).unwrap();
    s.enqueue(S, &packet(101, 0, 5, 100)).unwrap();
    while s.dequeue(S).is_some_and(|d| d.flow != 5) {}
    s.enqueue(S, &packet(102, 0, 4, 100)).unwrap();
    assert_eq!(s.flow_id(0, 3), None, "3 gave its slot");
    assert!(s.flow_id(0, 5).is_some());
}

/// An hClock leaf whose flows reserve more than the link gives them serves every packet by
/// reservation, so its share virtual time stands still: new flows still get slots from idle
/// ones. (Counted as a lead against that virtual time, every flow ever served "owed" while
/// the leaf was busy, and every new flow was refused.) Six flows reserve 2 Mbit/s each on a
/// 10 Mbit/s link; a new one-packet flow comes every 50 ms in a ten-flow table.
#[test]
fn new_flows_get_slots_beside_reserved_flows_that_take_the_whole_link() {
    let mut leaf = NodeSpec::new("leaf", PolicyKind::HClock);
    leaf.flows.reservation = Some(Rate::mbit(2));
    let c = SchedConfig {
        flows: 10,
        ..cfg(1000)
    };
    let mut s = one_leaf(c, leaf);
    let (mut token, mut refused, mut now) = (0u64, 0, S);
    let mut newcomer = 100u64;
    while now < 4 * S {
        while s.len() < 30 {
            token += 1;
            s.enqueue(now, &packet(token, 0, 1 + token % 6, 1500))
                .unwrap();
        }
        if now % (50 * MS) < 1_200_000 {
            token += 1;
            newcomer += 1;
            if s.enqueue(now, &packet(token, 0, newcomer, 1500)).is_err() {
                refused += 1;
            }
        }
        let _ = s.dequeue(now);
        now += 1_200_000; // 1500 B at 10 Mbit/s
    }
    let came = newcomer - 100;
    let accepted = came - refused;
    // Refused only while all ten slots hold packets (a newcomer's reservation tag starts at
    // now, behind the long flows' lagging ones, so a few wait their turn).
    assert!(
        came >= 60 && refused * 10 < came,
        "{refused} of {came} refused"
    );
    // Every newcomer but the first four took an idle one's slot.
    assert_eq!(s.stats().flows_reclaimed, accepted - 4);
}

/// A flow whose deadlines lie past the second EDF and LSTF tell apart keeps its order behind a
/// backlog older than a second. Such deadlines rank at the queue's first entry + 2 s; within a
/// bucket entries leave in arrival order, so the first entry's rank stepped back and forth
/// (deadlines 0.9 and 1.2 ms ahead share a 0.5 ms bucket here), + 2 s crossed a bucket's edge
/// with it, and the flow's packets took turns between two buckets: one left 1.1 s of the
/// flow's packets after it was due.
#[test]
fn a_flow_due_far_ahead_keeps_its_order_behind_an_old_backlog() {
    for policy in [PolicyKind::Edf, PolicyKind::Lstf] {
        let mut s = one_leaf(
            SchedConfig::default(),
            NodeSpec::new("root", policy).rate(Rate::mbit(10), 0),
        );
        // 2.4 s of backlog, deadlines 0 to 1.8 ms ahead, not in arrival order.
        for t in 0..2000u64 {
            let ahead = 1000 + (t % 7) * 300_000;
            let mut p = packet(t, 0, 1000 + t, 1500);
            p.fields.deadline = S + ahead;
            p.fields.slack = ahead;
            s.enqueue(S, &p).unwrap();
        }
        // Flow 7 sends one packet due 10 s ahead per departure, for 4 s.
        let (mut now, mut token, mut last) = (S, 2000u64, None);
        while now < 5 * S {
            let mut p = packet(token, 0, 7, 100);
            p.fields.deadline = now + 10 * S;
            p.fields.slack = 10 * S;
            s.enqueue(now, &p).unwrap();
            token += 1;
            match s.dequeue(now) {
                Some(d) if d.flow == 7 => {
                    assert!(
                        last < Some(d.token),
                        "{policy}: flow 7 sent {} after {last:?} at {now}",
                        d.token
                    );
                    last = Some(d.token);
                }
                Some(_) => {}
                None => now = s.next_event(now).unwrap().max(now + 1),
            }
        }
        assert!(last.is_some(), "{policy}: flow 7 was served");
        assert_eq!(s.stats().ranks_clamped, 0, "{policy}");
    }
}

/// After an idle period a fair node's virtual time is the largest finish tag its last busy
/// period served, not the last one: class 0 sends 9000 B, then class 1 1500 B (both start at
/// 0; class 1 empties last, with the smaller finish tag). Back after the idle, class 0 and a
/// new class 2 alternate. (From class 1's finish tag, class 2 started 7500 B ahead of class
/// 0 and sent five packets first.)
#[test]
fn fair_queuing_comes_back_from_idle_at_the_largest_finish_tag() {
    let mut wrong = Vec::new();
    for policy in [PolicyKind::Wfq, PolicyKind::HClock, PolicyKind::Htb] {
        let mut b = TreeBuilder::new(cfg(100));
        let root = b.root(NodeSpec::new("root", policy));
        for class in 0..3u32 {
            let leaf = b.child(root, NodeSpec::new(&format!("c{class}"), PolicyKind::Fifo));
            b.rule(vec![Match::Class(class)], leaf);
        }
        let mut s = b.build().unwrap();
        s.enqueue(S, &packet(0, 0, 0, 9000)).unwrap();
        s.enqueue(S, &packet(1, 1, 1, 1500)).unwrap();
        let first: Vec<u64> = std::iter::from_fn(|| s.dequeue(S).map(|d| d.token)).collect();
        assert_eq!(first, [0, 1], "{policy:?}");
        let t = 2 * S;
        for token in 2..18u64 {
            let class = if token % 2 == 0 { 0 } else { 2 };
            s.enqueue(t, &packet(token, class, u64::from(class), 1500))
                .unwrap();
        }
        let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(t).map(|d| d.flow)).collect();
        let alternate: Vec<u64> = (0..16).map(|i| if i % 2 == 0 { 0 } else { 2 }).collect();
        if order != alternate {
            wrong.push(format!("{policy:?}: {order:?}"));
        }
    }
    assert!(wrong.is_empty(), "not alternating: {wrong:#?}");
}

#[test]
fn wfq_stays_fair_in_bytes_when_flows_empty_after_every_packet() {
    // As drr and fq (above): a wfq flow that empties keeps its finish tag and comes back at
    // max(V, F), so a flow of 9000 B packets does not get six times the bytes of one of
    // 1500 B by coming back level with it every time.
    assert_within_one_percent(PolicyKind::Wfq, [1500, 100, 9000, 1448], 1);
}

/// An idle flow owes its fair leaf exactly when it would come back behind where a new flow
/// starts. A wfq flow whose finish tag is the virtual time, or a drr flow in the round being
/// served, owes nothing: the longest idle goes first. A drr flow a round ahead with less than
/// a quantum (it overdrew) owes, and the idle flow behind it goes instead.
#[test]
fn whether_an_idle_flow_owes_is_exact_at_the_boundary() {
    // (policy, flow 1's packet, flow 2's packet, the flow that gives its slot)
    for (policy, first, second, gone) in [
        // wfq: after flow 3's second packet V = 1500 B = flow 1's finish tag.
        (PolicyKind::Wfq, 1500, 100, 1),
        // drr (3028 B quanta): flow 1 overdraws by 972 B, one round ahead with 2056 B.
        (PolicyKind::Drr, 4000, 100, 2),
    ] {
        let c = SchedConfig {
            flows: 3,
            ..cfg(1000)
        };
        let mut s = one_leaf(c, NodeSpec::new("leaf", policy));
        s.enqueue(S, &packet(1, 0, 1, first)).unwrap();
        s.enqueue(S, &packet(2, 0, 2, second)).unwrap();
        for token in 3..8 {
            s.enqueue(S, &packet(token, 0, 3, 1500)).unwrap();
        }
        let sent: Vec<u64> = (0..4).map(|_| s.dequeue(S).unwrap().flow).collect();
        assert_eq!(sent, [1, 2, 3, 3], "{policy:?}");
        s.enqueue(S, &packet(8, 0, 4, 100)).unwrap();
        let kept = 3 - gone;
        assert_eq!(s.flow_id(0, gone), None, "{policy:?}: {gone} gave its slot");
        assert!(
            s.flow_id(0, kept).is_some(),
            "{policy:?}: {kept} kept its slot"
        );
    }
}

/// DRR resets an emptied member: a drr flow that empties with deficit left in the round being
/// served comes back in the next round with a fresh quantum, behind the flows still in the
/// line. (Kept in the round it emptied in, with its deficit, a flow that empties after every
/// small packet went ahead of backlogged flows again and again.)
#[test]
fn a_drr_flow_that_empties_comes_back_in_the_next_round() {
    let mut s = one_leaf(cfg(1000), NodeSpec::new("leaf", PolicyKind::Drr));
    for token in 0..10 {
        s.enqueue(S, &packet(token, 0, 1, 1500)).unwrap();
    }
    s.enqueue(S, &packet(10, 0, 2, 100)).unwrap();
    // Flow 1 spends its quantum (three packets), then flow 2 sends 100 B of its own.
    while s.dequeue(S).is_some_and(|d| d.flow != 2) {}
    s.enqueue(S, &packet(11, 0, 2, 100)).unwrap();
    assert_eq!(s.dequeue(S).map(|d| d.flow), Some(1));
}

/// LSTF ranks a packet by when its slack runs out, arrival + slack, also when it reaches the
/// leaf later, held at its flow's gate: packet 1 arrives at 0 with 10 ms of slack and waits
/// 5 ms behind packet 0 at its flow's 2.4 Mbit/s; packet 2 arrives at 5 ms with 7 ms. Packet
/// 1 runs out first and goes first.
#[test]
fn lstf_ranks_a_packet_held_at_its_gate_from_its_arrival() {
    for queue in ["auto", "btree"] {
        let mut s = one_leaf_file("lstf", queue);
        let with = |token, flow, slack, pacing_bps| {
            let mut p = packet(token, 0, flow, 1500);
            (p.fields.slack, p.fields.pacing_bps) = (slack, pacing_bps);
            p
        };
        s.enqueue(0, &with(0, 1, 10 * MS, 2_400_000)).unwrap();
        s.enqueue(0, &with(1, 1, 10 * MS, 2_400_000)).unwrap();
        assert_eq!(s.dequeue(0).map(|d| d.token), Some(0));
        s.enqueue(5 * MS, &with(2, 2, 7 * MS, 0)).unwrap();
        let t = 6 * MS;
        let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(t).map(|d| d.token)).collect();
        assert_eq!(order, [1, 2], "{queue}");
    }
}

/// On `auto`'s bucketed queue pFabric ranks compressed sizes, and a packet that lowers its
/// flow's least remaining size within the same code keeps the flow's place: flow 1 (1 000
/// 400 B left) came before flow 2 (1 000 000 B, the same code), and its next packet (1 000
/// 300 B) does not send it behind flow 2.
#[test]
fn pfabric_keeps_a_flows_place_when_its_rank_does_not_change() {
    let mut s = one_leaf_file("pfabric", "auto");
    for (token, flow, remaining) in [
        (1u64, 1u64, 1_000_400u64),
        (2, 2, 1_000_000),
        (3, 1, 1_000_300),
    ] {
        let mut p = packet(token, 0, flow, 1500);
        p.fields.remaining = remaining;
        s.enqueue(0, &p).unwrap();
    }
    assert_eq!(s.dequeue(0).map(|d| d.flow), Some(1));
}

#[test]
fn lqf_ties_a_new_flow_by_when_it_reached_one_packet() {
    // Flow 1's single packet came before flow 2 came down from two packets to one: it goes
    // first, on an exact queue as on `auto`'s, whose range holds every rank LQF gives.
    for queue in ["auto", "btree"] {
        let mut s = one_leaf_file("lqf", queue);
        for (token, flow) in [(0, 1), (1, 2), (2, 2)] {
            s.enqueue(0, &packet(token, 0, flow, 100)).unwrap();
        }
        let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(0).map(|d| d.flow)).collect();
        assert_eq!(order, [2, 1, 2], "{queue}");
        assert_eq!(s.stats().ranks_clamped, 0, "{queue}");
    }
}

/// On a bucketed queue EDF ranks overdue packets as due now, in arrival order, ahead of those
/// still due, and never outside the queue's windows.
#[test]
fn edf_on_a_bucketed_queue_sends_overdue_packets_first_in_arrival_order() {
    let mut s = one_leaf_file("edf", "auto");
    let now = 10 * S;
    for (token, deadline) in [
        (1u64, now + 300 * MS),
        (2, now - 500 * MS),
        (3, now - 9 * S),
    ] {
        let mut p = packet(token, 0, token, 1500);
        p.fields.deadline = deadline;
        s.enqueue(now, &p).unwrap();
    }
    let order: Vec<u64> = std::iter::from_fn(|| s.dequeue(now).map(|d| d.token)).collect();
    assert_eq!(order, [2, 3, 1]);
    assert_eq!(s.stats().ranks_clamped, 0);
}

/// A node's counters: `shaped` counts every packet that waited at its gate (in the shaper or
/// in line behind the one there), `sent_bytes` what left through it.
#[test]
fn node_stats_count_packets_held_at_a_gate_and_bytes_sent() {
    let mut b = TreeBuilder::new(cfg(100));
    let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
    let leaf = b.child(
        root,
        NodeSpec::new("leaf", PolicyKind::Fifo).rate(Rate::mbit(1), 0),
    );
    b.default_leaf(leaf);
    let mut s = b.build().unwrap();
    for token in 0..3 {
        s.enqueue(S, &packet(token, 0, 1, 1500)).unwrap();
    }
    // The first passes; the second waits in the shaper, the third in line behind it.
    assert_eq!(s.node_stats(leaf).shaped, 2);
    assert_eq!(drain(&mut s, S), [0, 1, 2]);
    for n in [root, leaf] {
        assert_eq!(s.node_stats(n).sent_bytes, 4500);
    }
}

/// A weight set at run time is clamped to 1..=MAX_WEIGHT (2^16), as the builder and a policy
/// file require: what the compiled tree shows is the weight in effect.
#[test]
fn a_weight_set_at_run_time_is_clamped_to_its_range() {
    let mut b = TreeBuilder::new(cfg(64));
    let root = b.root(NodeSpec::new("root", PolicyKind::Wfq));
    let a = b.child(root, NodeSpec::new("a", PolicyKind::Fifo));
    b.default_leaf(a);
    let mut s = b.build().unwrap();
    for (set, shown) in [(u32::MAX, 65_536), (0, 1), (65_536, 65_536), (7, 7)] {
        assert!(s.set_weight(a, set));
        let d = s.describe();
        let line = d.lines().find(|l| l.contains("─ a [")).unwrap();
        assert!(line.ends_with(&format!(" weight {shown}")), "{set}: {line}");
    }
}

/// A class of a tree for the split model below: its place in its parent (weight; reservation
/// and ceil, its `rate`, in Mbit/s) and, if it has children, the policy that shares it among
/// them (a leaf is a FIFO). The root's place is ignored.
#[derive(Clone, Debug)]
struct SplitClass {
    weight: u32,
    reservation: Option<u64>,
    ceil: Option<u64>,
    policy: PolicyKind,
    children: Vec<SplitClass>,
}

impl SplitClass {
    fn leaf(weight: u32, reservation: Option<u64>, ceil: Option<u64>) -> Self {
        SplitClass {
            weight,
            reservation,
            ceil,
            policy: PolicyKind::Fifo,
            children: Vec::new(),
        }
    }

    fn node(policy: PolicyKind, children: Vec<SplitClass>) -> Self {
        SplitClass {
            policy,
            children,
            ..SplitClass::leaf(1, None, None)
        }
    }

    /// What the class can take with every leaf greedy, Mbit/s: its ceil, and no more than its
    /// children can take.
    fn demand(&self) -> f64 {
        let own = self.ceil.map_or(f64::INFINITY, |m| m as f64);
        if self.children.is_empty() {
            own
        } else {
            own.min(self.children.iter().map(SplitClass::demand).sum())
        }
    }

    /// Its children as members of its split: (weight, reservation, cap), Mbit/s.
    fn members(&self) -> Vec<(f64, f64, f64)> {
        self.children
            .iter()
            .map(|c| {
                let reserved = c.reservation.map_or(0.0, |m| m as f64);
                (f64::from(c.weight), reserved, c.demand())
            })
            .collect()
    }
}

/// How `policy` shares `capacity` among members (weight, reservation, cap) that all take
/// what they are given up to their caps, in the documents' terms, not the scheduler's
/// arithmetic (docs/policy-files.md). A member's reservation counts up to its cap. Water-filling
/// over a level `lambda` of service per unit of weight: under hClock a reservation is a floor,
/// min(cap, max(reservation, lambda x weight)) (mClock); under HTB it comes on top,
/// reservation + min(cap - reservation, lambda x weight) (Linux HTB). `lambda` is the one at
/// which the members take the whole capacity, or all take their caps if those add up to less.
/// The reservations must fit in the capacity.
fn split_model(policy: PolicyKind, capacity: f64, members: &[(f64, f64, f64)]) -> Vec<f64> {
    let at = |lambda: f64| -> Vec<f64> {
        members
            .iter()
            .map(|&(weight, reserved, cap)| {
                let floor = reserved.min(cap);
                let weighted = lambda * weight;
                match policy {
                    PolicyKind::HClock => cap.min(floor.max(weighted)),
                    PolicyKind::Htb => floor + (cap - floor).min(weighted),
                    _ => unreachable!("{policy:?} has no reservations"),
                }
            })
            .collect()
    };
    let total = |x: &[f64]| x.iter().sum::<f64>();
    let capped = at(f64::INFINITY);
    if total(&capped) <= capacity {
        return capped;
    }
    assert!(
        total(&at(0.0)) <= capacity,
        "reservations {members:?} above {capacity}: no split to model"
    );
    // Every weight is at least 1: at `capacity` per unit of weight one member alone takes it.
    let (mut lo, mut hi) = (0.0, capacity);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if total(&at(mid)) < capacity {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    at(hi)
}

/// What each leaf of `tree` (depth first, in order) gets of `capacity` Mbit/s by
/// [`split_model`] at every level, each child splitting what it gets.
fn leaf_rates_model(tree: &SplitClass, capacity: f64) -> Vec<f64> {
    fn walk(class: &SplitClass, got: f64, out: &mut Vec<f64>) {
        if class.children.is_empty() {
            out.push(got);
            return;
        }
        let split = split_model(class.policy, got, &class.members());
        for (child, got) in class.children.iter().zip(split) {
            walk(child, got, out);
        }
    }
    let mut out = Vec::new();
    walk(tree, capacity, &mut out);
    out
}

/// Lowers the reservations of `tree`, top down, so that at every node its children's (up to
/// their caps) add up to at most 90% of what the node gets by the model with `capacity` Mbit/s
/// at the root: where they would not, the split is unspecified. What a node gets depends on
/// its ancestors and siblings (their reservations, weights and caps) only, not on the
/// reservations below it, so each level is fitted once. Reservations stay in tens of Mbit/s.
fn fit_reservations(tree: &mut SplitClass, capacity: f64) {
    if tree.children.is_empty() {
        return;
    }
    let budget = 0.9 * capacity;
    let reserved: f64 = tree
        .members()
        .iter()
        .map(|&(_, reserved, cap)| reserved.min(cap))
        .sum();
    if reserved > budget {
        let scale = budget / reserved;
        let members = tree.members();
        for (child, (_, r, cap)) in tree.children.iter_mut().zip(members) {
            let tens = (r.min(cap) * scale / 10.0).floor() as u64;
            child.reservation = (tens > 0).then_some(tens * 10);
        }
    }
    let split = split_model(tree.policy, capacity, &tree.members());
    for (child, got) in tree.children.iter_mut().zip(split) {
        fit_reservations(child, got);
    }
}

/// Builds `tree` (leaf `k`, depth first, takes class id `k`), runs one greedy flow of
/// 1500 B packets per leaf on a 1 Gbit/s link, and returns each leaf's Mbit/s over `window`
/// ns after `warm_up` ns.
fn leaf_rates_measured(tree: &SplitClass, warm_up: u64, window: u64) -> Vec<f64> {
    fn add(
        b: &mut TreeBuilder,
        parent: NodeId,
        class: &SplitClass,
        name: String,
        leaves: &mut u32,
    ) {
        let policy = if class.children.is_empty() {
            PolicyKind::Fifo
        } else {
            class.policy
        };
        let mut spec = NodeSpec::new(&name, policy).weight(class.weight);
        if let Some(m) = class.reservation {
            spec = spec.reservation(Rate::mbit(m));
        }
        if let Some(m) = class.ceil {
            spec = spec.rate(Rate::mbit(m), 0);
        }
        let node = b.child(parent, spec);
        if class.children.is_empty() {
            b.rule(vec![Match::Class(*leaves)], node);
            *leaves += 1;
        }
        for (i, child) in class.children.iter().enumerate() {
            add(b, node, child, format!("{name}.{i}"), leaves);
        }
    }
    let mut b = TreeBuilder::new(cfg(1000));
    let root = b.root(NodeSpec::new("root", tree.policy));
    let mut leaves = 0;
    for (i, child) in tree.children.iter().enumerate() {
        add(&mut b, root, child, format!("c{i}"), &mut leaves);
    }
    let mut s = b.build().unwrap();
    let flows: Vec<(u64, u32, u32)> = (0..leaves).map(|k| (u64::from(k), k, 1500)).collect();
    let end = S + warm_up + window;
    let deps = Host::new().run(&mut s, &flows, 8, Some(Rate::gbit(1)), S, end);
    (0..leaves)
        .map(|k| mbit_in(&deps, k, S + warm_up, window))
        .collect()
}

/// Trees whose splits of 1 Gbit/s were worked by hand (docs/policy-files.md,
/// examples/policies, the tests above), with those splits per leaf, Mbit/s.
fn splits_worked_by_hand() -> Vec<(&'static str, SplitClass, Vec<f64>)> {
    let (hclock, htb) = (PolicyKind::HClock, PolicyKind::Htb);
    let leaf = SplitClass::leaf;
    // Reservations of 100 and 500, equal weights: a floor under hClock, on top under HTB.
    let two = |policy| {
        SplitClass::node(
            policy,
            vec![leaf(1, Some(100), None), leaf(1, Some(500), None)],
        )
    };
    // 300 reserved beside weights 1 : 1 : 3. hClock: above its weighted share (200), the
    // reservation holds and the rest goes 1 : 3; HTB: 300 and a fifth of the 700 left.
    let three = |policy| {
        SplitClass::node(
            policy,
            vec![
                leaf(1, Some(300), None),
                leaf(1, None, None),
                leaf(3, None, None),
            ],
        )
    };
    // A weighted share above the reservation: 750 / 250 under hClock, 100 + 675 / 225 under
    // HTB.
    let above =
        |policy| SplitClass::node(policy, vec![leaf(3, Some(100), None), leaf(1, None, None)]);
    // A ceil gives back what it cuts: bronze at its 250 ceil, gold the 750 left, under both
    // (htb_guarantees_rates_and_lends_up_to_ceilings).
    let ceiled = |policy| {
        SplitClass::node(
            policy,
            vec![
                leaf(1, Some(600), Some(1000)),
                leaf(1, Some(100), Some(250)),
            ],
        )
    };
    // Water-filling: weights 1 : 1 : 2, the 2 capped at 100: 450 / 450 / 100 under both.
    let capped = |policy| {
        SplitClass::node(
            policy,
            vec![
                leaf(1, None, None),
                leaf(1, None, None),
                leaf(2, None, Some(100)),
            ],
        )
    };
    // examples/policies/htb.toml: voip 100 + 50, staff 600 + 150 (web 400 + 100, other
    // 200 + 50), guests 50 + 50.
    let staff = SplitClass {
        weight: 3,
        reservation: Some(600),
        ceil: Some(1000),
        ..SplitClass::node(
            htb,
            vec![
                leaf(2, Some(400), Some(1000)),
                leaf(1, Some(200), Some(800)),
            ],
        )
    };
    let office = SplitClass::node(
        htb,
        vec![
            leaf(1, Some(100), Some(200)),
            staff,
            leaf(1, Some(50), Some(300)),
        ],
    );
    // An internal child takes no more than its leaves can: under an hClock root, one of
    // weight 9 over leaves capped at 100 and 50 takes 150, and a leaf beside it the rest.
    let small = SplitClass {
        weight: 9,
        ..SplitClass::node(
            hclock,
            vec![leaf(1, None, Some(100)), leaf(1, None, Some(50))],
        )
    };
    let demand = SplitClass::node(hclock, vec![small, leaf(1, None, None)]);
    // An HTB child reserved 400 of weight 1 beside a leaf of weight 3 under an hClock root
    // (its weighted share 250, below the reservation: 400 / 600); inside, 100 reserved and
    // 300 shared 1 : 2.
    let inner = SplitClass {
        reservation: Some(400),
        ..SplitClass::node(htb, vec![leaf(1, Some(100), None), leaf(2, None, None)])
    };
    let mixed = SplitClass::node(hclock, vec![inner, leaf(3, None, None)]);
    vec![
        ("hclock 100 / 500", two(hclock), vec![500.0, 500.0]),
        ("htb 100 / 500", two(htb), vec![300.0, 700.0]),
        ("hclock 1 : 1 : 3", three(hclock), vec![300.0, 175.0, 525.0]),
        ("htb 1 : 1 : 3", three(htb), vec![440.0, 140.0, 420.0]),
        ("hclock above", above(hclock), vec![750.0, 250.0]),
        ("htb above", above(htb), vec![775.0, 225.0]),
        ("hclock ceiled", ceiled(hclock), vec![750.0, 250.0]),
        ("htb ceiled", ceiled(htb), vec![750.0, 250.0]),
        ("hclock capped", capped(hclock), vec![450.0, 450.0, 100.0]),
        ("htb capped", capped(htb), vec![450.0, 450.0, 100.0]),
        ("htb.toml", office, vec![150.0, 500.0, 250.0, 100.0]),
        ("internal demand", demand, vec![100.0, 50.0, 850.0]),
        ("htb under hclock", mixed, vec![200.0, 200.0, 600.0]),
    ]
}

/// The split model gives the splits worked by hand; reservations that do not fit are
/// lowered to 90% of what the node gets.
#[test]
fn the_split_model_gives_the_splits_worked_by_hand() {
    for (what, tree, want) in splits_worked_by_hand() {
        let got = leaf_rates_model(&tree, 1000.0);
        assert_eq!(got.len(), want.len(), "{what}");
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-6, "{what}: {got:?}, want {want:?}");
        }
    }
    let mut tree = SplitClass::node(
        PolicyKind::Htb,
        vec![
            SplitClass::leaf(1, Some(800), None),
            SplitClass::leaf(1, Some(400), Some(200)),
        ],
    );
    fit_reservations(&mut tree, 1000.0);
    let fitted: Vec<Option<u64>> = tree.children.iter().map(|c| c.reservation).collect();
    assert_eq!(fitted, [Some(720), Some(180)]);
}

/// The scheduler gives the splits worked by hand, each leaf within 2% of the 1 Gbit/s link
/// over 200 ms after 50 ms.
#[test]
fn hclock_and_htb_give_the_splits_worked_by_hand() {
    for (what, tree, want) in splits_worked_by_hand() {
        let got = leaf_rates_measured(&tree, 50 * MS, 200 * MS);
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 20.0,
                "{what}: {got:.1?} Mbit/s, worked by hand {want:.1?}"
            );
        }
    }
}

/// A class of a random tree: weight 1-9, a reservation and a ceil in tens of Mbit/s, each
/// or both absent.
fn split_leaf() -> impl Strategy<Value = SplitClass> {
    (
        1u32..=9,
        prop::option::of((1u64..=50).prop_map(|t| t * 10)),
        prop::option::weighted(0.5, (5u64..=100).prop_map(|t| t * 10)),
    )
        .prop_map(|(weight, reservation, ceil)| SplitClass::leaf(weight, reservation, ceil))
}

fn split_policy() -> impl Strategy<Value = PolicyKind> {
    prop::sample::select(vec![PolicyKind::HClock, PolicyKind::Htb])
}

/// A random tree of one or two levels under a 1 Gbit/s root, 2-4 children a node, hClock
/// and HTB mixed, reservations fitted to what each node gets ([`fit_reservations`]).
fn split_tree() -> impl Strategy<Value = SplitClass> {
    let inner = (
        split_leaf(),
        split_policy(),
        prop::collection::vec(split_leaf(), 2..=4),
    )
        .prop_map(|(place, policy, children)| SplitClass {
            policy,
            children,
            ..place
        });
    let child = prop_oneof![2 => split_leaf(), 1 => inner];
    (split_policy(), prop::collection::vec(child, 2..=4)).prop_map(|(policy, children)| {
        let mut tree = SplitClass::node(policy, children);
        fit_reservations(&mut tree, 1000.0);
        tree
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// End to end, hClock and HTB split the link as the split model says ([`split_model`],
    /// written from the documents, not from the policies' arithmetic, which the oracle
    /// shares): on random trees of one or two levels with weights, reservations that fit and
    /// ceils, one greedy flow of 1500 B packets per leaf on a 1 Gbit/s link, every leaf gets
    /// its modelled rate over 200 ms after 50 ms, within 2% of the link.
    #[test]
    fn hclock_and_htb_split_the_link_as_the_model_says(tree in split_tree()) {
        let want = leaf_rates_model(&tree, 1000.0);
        let got = leaf_rates_measured(&tree, 50 * MS, 200 * MS);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert!(
                (g - w).abs() <= 20.0,
                "leaf {}: {:.1} Mbit/s, model {:.1}; all {:.1?}, model {:.1?}; {:#?}",
                k, g, w, got, want, tree
            );
        }
    }
}
