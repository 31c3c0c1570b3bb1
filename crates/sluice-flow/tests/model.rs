//! The pipeline against a simple exact model, under random interleavings of ingress, egress and
//! time steps over small random configurations (few source ids, a tiny memory bound, one-slot
//! rings, any probe and paused order, shaped or not): every packet accepted leaves exactly
//! once (sent, or handed back as rejected), in its flow's order, or is still held; the counters
//! agree with what happened; and at quiescence nothing is paused, reserved or held.

use proptest::prelude::*;
use sluice_flow::admission::Probe;
use sluice_flow::pipeline::{IngressError, Pipeline, PipelineConfig, RankBy};
use sluice_sched::{NodeSpec, Packet, PolicyKind, Rate, SchedConfig, TreeBuilder};
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug)]
struct Cfg {
    sources: usize,
    buffer: usize,
    per_source: u32,
    fair: bool,
    rank_by: u8,
    max_packets: usize,
    ring_slots: usize,
    shaped: bool,
    sched_flows: usize,
    policy: u8,
}

fn cfg() -> impl Strategy<Value = Cfg> {
    (
        (1usize..6, 1usize..5, 1u32..4, any::<bool>(), 0u8..3),
        (1usize..12, 1usize..4, any::<bool>(), 1usize..6, 0u8..3),
    )
        .prop_map(
            |(
                (sources, buffer, per_source, fair, rank_by),
                (max_packets, ring_slots, shaped, sched_flows, policy),
            )| Cfg {
                sources,
                buffer,
                per_source,
                fair,
                rank_by,
                max_packets,
                ring_slots,
                shaped,
                sched_flows,
                policy,
            },
        )
}

fn pipeline(c: Cfg) -> Pipeline {
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: c.buffer,
        flows: c.sched_flows,
        ..SchedConfig::default()
    });
    let policy = match c.policy {
        0 => PolicyKind::Fq,
        1 => PolicyKind::Fifo,
        _ => PolicyKind::Prio,
    };
    let mut root = NodeSpec::new("root", policy);
    if c.shaped {
        // 12 Mbit/s: a 1500-byte packet a millisecond, with a one-packet burst.
        root = root.rate(Rate::mbit(12), 1500);
    }
    let root = b.root(root);
    b.default_leaf(root);
    let sched = b.build().unwrap();
    let pc = PipelineConfig {
        per_source: c.per_source,
        probe: if c.fair {
            Probe::FairShare
        } else {
            Probe::Fifo
        },
        rank_by: match c.rank_by {
            0 => RankBy::Fifo,
            1 => RankBy::Priority,
            _ => RankBy::RateLimit,
        },
        ring_slots: c.ring_slots,
        ..PipelineConfig::new(c.sources, c.buffer, c.max_packets)
    };
    Pipeline::new(sched, pc).unwrap()
}

const FLOWS: usize = 8;

/// The host: per flow, packets generated but refused (kept, in order), and what left.
struct Host {
    p: Pipeline,
    now: u64,
    next_gen: [u32; FLOWS],
    waiting: [VecDeque<u32>; FLOWS],
    /// Per flow: sequence numbers accepted and not yet out, in order.
    inside: [VecDeque<u32>; FLOWS],
    accepted: u64,
    sent: u64,
    rejected: u64,
}

impl Host {
    fn packet(flow: usize, seq: u32) -> Packet {
        let mut p = Packet {
            token: (flow as u64) << 32 | u64::from(seq),
            len: 1500,
            flow: flow as u64,
            ..Packet::default()
        };
        p.fields.priority = (flow % 3) as u8;
        if flow % 2 == 1 {
            // 24 Mbit/s of its own: a packet every 0.5 ms.
            p.fields.pacing_bps = 24_000_000;
        }
        p
    }

    /// Offer `flow`'s waiting packets (after a new one if `fresh`) until one is refused.
    fn offer(&mut self, flow: usize, fresh: bool) {
        if fresh {
            self.waiting[flow].push_back(self.next_gen[flow]);
            self.next_gen[flow] += 1;
        }
        while let Some(&seq) = self.waiting[flow].front() {
            match self.p.ingress(self.now, Self::packet(flow, seq)) {
                Ok(()) => {
                    self.waiting[flow].pop_front();
                    self.inside[flow].push_back(seq);
                    self.accepted += 1;
                }
                Err(IngressError::Backpressure(_)) => break,
                Err(e) => panic!("lossless pipeline refused with {e}"),
            }
            self.collect_rejected();
        }
    }

    fn collect_rejected(&mut self) {
        while let Some((pkt, _)) = self.p.take_rejected() {
            let (flow, seq) = ((pkt.token >> 32) as usize, pkt.token as u32);
            let pos = self.inside[flow]
                .iter()
                .position(|&s| s == seq)
                .expect("a rejected packet was accepted and is still inside");
            self.inside[flow].remove(pos);
            self.rejected += 1;
        }
    }

    fn egress(&mut self) -> bool {
        let Some(pkt) = self.p.egress(self.now) else {
            self.collect_rejected();
            return false;
        };
        let (flow, seq) = ((pkt.token >> 32) as usize, pkt.token as u32);
        // Everything older of this flow left already (sent or rejected).
        assert_eq!(
            self.inside[flow].pop_front(),
            Some(seq),
            "flow {flow}: reordered, duplicated or never accepted"
        );
        self.sent += 1;
        self.collect_rejected();
        true
    }

    fn check(&self) {
        self.p.check();
        let inside: usize = self.inside.iter().map(VecDeque::len).sum();
        assert_eq!(inside, self.p.len(), "held packets");
        let st = self.p.stats();
        assert_eq!(st.accepted, self.accepted);
        assert_eq!(st.sent, self.sent);
        assert_eq!(st.sched_rejected, self.rejected);
        let c = self.p.completions().stats();
        assert_eq!(
            c.admitted,
            c.sent + c.rejected + self.p.completions().len() as u64
        );
        assert_eq!(c.sent, self.sent);
        assert_eq!(c.rejected, self.rejected);
        assert_eq!((c.double, c.unknown, c.full), (0, 0, 0));
        let a = self.p.admission().stats();
        assert_eq!(a.admitted, c.admitted);
        assert_eq!(a.bad_source, 0);
    }

    /// Drain: egress and retry the waiting packets, moving time to the next event, until
    /// nothing is held or waiting.
    fn drain(&mut self) {
        for _ in 0..100_000 {
            for f in 0..FLOWS {
                self.offer(f, false);
            }
            while self.egress() {}
            self.check();
            let waiting = self.waiting.iter().any(|w| !w.is_empty());
            if self.p.is_empty() && !waiting {
                return;
            }
            match self.p.next_event(self.now) {
                Some(t) => self.now = t.max(self.now + 1),
                None => {
                    assert!(
                        self.p.is_empty(),
                        "stuck: {} held, nothing to release; paused {}, reserved {}, \
                         occupancy {}, sources {}",
                        self.p.len(),
                        self.p.admission().paused(),
                        self.p.admission().reserved(),
                        self.p.admission().occupancy(),
                        self.p.sources()
                    );
                    self.now += 1_000_000;
                }
            }
        }
        panic!("no progress");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn every_accepted_packet_leaves_once_in_order(
        c in cfg(),
        ops in prop::collection::vec((0u8..4, 0usize..FLOWS, 0u64..3_000_000), 0..120),
    ) {
        let mut h = Host {
            p: pipeline(c),
            now: 1_000_000_000,
            next_gen: [0; FLOWS],
            waiting: Default::default(),
            inside: Default::default(),
            accepted: 0,
            sent: 0,
            rejected: 0,
        };
        for (op, flow, dt) in ops {
            match op {
                0 | 1 => h.offer(flow, true),
                2 => {
                    h.egress();
                }
                _ => h.now += dt,
            }
            h.check();
        }
        h.drain();
        let a = h.p.admission();
        prop_assert_eq!((a.paused(), a.reserved(), a.occupancy()), (0, 0, 0));
        prop_assert_eq!(h.p.sources(), 0, "every idle source forgotten");
        prop_assert_eq!(h.p.queues().pool().packets(), 0, "budget back");
        let generated: u64 = h.next_gen.iter().map(|&n| u64::from(n)).sum();
        prop_assert_eq!(h.sent + h.rejected, generated);
    }
}

/// zD admission alone: whenever a freed slot (a departure or an idle grant) resumes a source,
/// it is the best paused one at that moment in the configured order (FIFO: paused first;
/// priority: lowest level, FIFO within it), and a paused source is never admitted or resumed
/// twice.
mod resume_order {
    use super::*;
    use sluice_flow::admission::{Admission, AdmissionConfig, PausedOrder, Verdict};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn resumes_follow_the_paused_order(
            capacity in 1usize..5,
            sources in 1usize..8,
            per_source in 1u32..4,
            credit in 1u32..4,
            fair in any::<bool>(),
            priority in any::<bool>(),
            ranks in prop::collection::vec(0u64..300, 8),
            ops in prop::collection::vec((0u8..4, 0usize..8), 0..200),
        ) {
            let mut adm = Admission::new(AdmissionConfig {
                capacity,
                sources,
                per_source,
                resume_credit: credit,
                probe: if fair { Probe::FairShare } else { Probe::Fifo },
                order: if priority { PausedOrder::Priority } else { PausedOrder::Fifo },
            })
            .unwrap();
            let key = |src: usize, seq: u64| {
                let level = if priority { ranks[src].min(255) } else { 0 };
                (level, seq)
            };
            // The model: paused sources with their key; buffer contents (FIFO departures);
            // sources owed a slot.
            let mut paused: Vec<(usize, (u64, u64))> = Vec::new();
            let mut buffer: VecDeque<usize> = VecDeque::new();
            let mut granted: Vec<usize> = Vec::new();
            let mut seq = 0u64;
            let resumed = |r: Option<u32>, paused: &mut Vec<(usize, (u64, u64))>, granted: &mut Vec<usize>| {
                if let Some(r) = r {
                    let best = paused.iter().min_by_key(|(_, k)| *k).map(|(s, _)| *s);
                    assert_eq!(Some(r as usize), best, "resume out of order: paused {:?}", paused);
                    paused.retain(|(s, _)| *s != r as usize);
                    granted.push(r as usize);
                }
            };
            for (op, src) in ops {
                let src = src % sources;
                match op {
                    0 | 1 => {
                        let was_paused = paused.iter().any(|(s, _)| *s == src);
                        match adm.offer(src as u32, ranks[src]) {
                            Verdict::Admit => {
                                prop_assert!(!was_paused, "a paused source admitted");
                                granted.retain(|&g| g != src);
                                buffer.push_back(src);
                            }
                            Verdict::Paused => {
                                if !was_paused {
                                    prop_assert!(!granted.contains(&src), "a granted source paused");
                                    paused.push((src, key(src, seq)));
                                    seq += 1;
                                }
                            }
                            Verdict::Throttled => prop_assert!(!was_paused),
                        }
                    }
                    2 => {
                        if let Some(s) = buffer.pop_front() {
                            let r = adm.departed(s as u32);
                            resumed(r, &mut paused, &mut granted);
                        }
                    }
                    _ => {
                        // The source has nothing to send (if it was owed a slot, it hands it on).
                        let r = adm.idle(src as u32);
                        if r.is_some() || granted.contains(&src) {
                            granted.retain(|&g| g != src);
                        }
                        resumed(r, &mut paused, &mut granted);
                    }
                }
                adm.check();
                prop_assert_eq!(adm.paused(), paused.len());
                prop_assert_eq!(adm.reserved(), granted.len());
                prop_assert_eq!(adm.occupancy(), buffer.len());
                for s in 0..sources {
                    let p = paused.iter().any(|(x, _)| *x == s);
                    prop_assert_eq!(adm.is_paused(s as u32), p);
                }
            }
        }
    }
}

/// The allocator over many intervals of random usage (engines going idle, coming back, sending
/// a trickle, limited by their share), with the engines' shares checked after every
/// reallocation: they sum to the aggregate exactly while any engine is active (and to the
/// idle engines' headroom when none is), each idle engine has exactly the headroom, and every
/// share installs as the rate it is.
mod shares {
    use super::*;
    use sluice_flow::nba::{Aggregate, Demand, Nba, NbaConfig, Usage};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn shares_sum_to_the_aggregate_after_every_reallocation(
            engines in 1usize..7,
            rate in prop_oneof![Just(1_000_000_000u64), 1_000u64..100_000_000_000],
            headroom_bp in 1u32..=1000,
            steps in prop::collection::vec(
                (prop::collection::vec((0u8..4, 0u64..4_000_000_000), 6), 1u64..300_000_000),
                1..25,
            ),
        ) {
            let cfg = NbaConfig { interval_ns: 100_000_000, headroom_bp };
            let agg = [Aggregate::new("a", Rate::new(rate).unwrap())];
            let Ok(mut nba) = Nba::new(engines, &agg, cfg) else {
                return Ok(());
            };
            let mut sent = vec![0u64; engines];
            let mut now = 0u64;
            for e in 0..engines {
                nba.record(e, Usage { aggregate: 0, bytes: 0, at: 0 });
            }
            nba.tick(0);
            for (offers, dt) in steps {
                now += dt;
                for e in 0..engines {
                    let (kind, bps) = offers[e];
                    // Idle, a trickle, what it offers, or all of its share (limited).
                    let want = match kind {
                        0 => 0,
                        1 => 1 + bps % 10_000,
                        2 => bps,
                        _ => u64::MAX,
                    };
                    let r = u128::from(want.min(nba.allocation(e, 0)));
                    sent[e] += (r * u128::from(dt) / 8_000_000_000) as u64;
                    nba.record(e, Usage { aggregate: 0, bytes: sent[e], at: now });
                }
                if !nba.tick(now) {
                    continue;
                }
                let shares: Vec<u64> = (0..engines).map(|e| nba.allocation(e, 0)).collect();
                let sum: u128 = shares.iter().map(|&s| u128::from(s)).sum();
                let h = nba.headroom(0);
                let idle: Vec<bool> =
                    (0..engines).map(|e| nba.demand(e, 0) == Demand::Bounded(0)).collect();
                if idle.iter().all(|&i| i) {
                    prop_assert_eq!(sum, u128::from(h) * engines as u128, "{:?}", shares);
                } else {
                    prop_assert_eq!(sum, u128::from(rate), "{:?} {:?}", shares, idle);
                }
                for e in 0..engines {
                    if idle[e] {
                        prop_assert_eq!(shares[e], h);
                    }
                    prop_assert!(shares[e] >= 1);
                    prop_assert_eq!(nba.rate(e, 0).bps(), shares[e]);
                }
            }
        }
    }
}

/// Engines and their allocator stepped with injected time under random traffic: every packet
/// dispatched is sent once, held, still in a ring, or refused and counted (zero length); the
/// engine counters agree; and once every engine has stepped after an allocation, the rates
/// they installed on the aggregate sum to exactly what the allocator gave.
mod engines {
    use super::*;
    use sluice_flow::engine::{EnginesConfig, build};
    use sluice_flow::nba::{Aggregate, NbaConfig};
    use sluice_flow::pipeline::PipelineError;

    fn tenant(_: usize) -> Result<Pipeline, PipelineError> {
        let mut b = TreeBuilder::new(SchedConfig {
            capacity: 8,
            flows: 8,
            ..SchedConfig::default()
        });
        let root = b.root(NodeSpec::new("root", PolicyKind::Wfq));
        let leaf = b.child(
            root,
            NodeSpec::new("tenant", PolicyKind::Fq).rate(Rate::mbit(100), 3000),
        );
        b.default_leaf(leaf);
        Pipeline::new(b.build().unwrap(), PipelineConfig::new(6, 4, 12))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        #[test]
        fn engines_lose_nothing_and_install_what_the_allocator_gave(
            n in 1usize..4,
            ops in prop::collection::vec((0u8..3, 0u64..32, 0u64..20_000_000), 1..300),
        ) {
            let cfg = EnginesConfig {
                nba: NbaConfig { interval_ns: 10_000_000, headroom_bp: 100 },
                ring_slots: 4,
                batch: 3,
                report_ns: 1_000_000,
                producers: 2,
                ..EnginesConfig::new(vec![Aggregate::new("tenant", Rate::mbit(100))])
            };
            let mut parts = build(n, &cfg, tenant).unwrap();
            let mut now = 0u64;
            let mut dispatched = 0u64;
            let mut zero = 0u64;
            let mut out: Vec<u64> = Vec::new();
            let mut token = 0u64;
            for (op, flow, dt) in ops {
                match op {
                    0 => {
                        let len = if flow == 31 { 0 } else { 1500 };
                        let p = Packet { token, len, flow, ..Packet::default() };
                        if parts.dispatchers[(flow % 2) as usize].send(p).is_ok() {
                            dispatched += 1;
                            zero += u64::from(len == 0);
                            token += 1;
                        }
                    }
                    1 => {
                        for e in &mut parts.engines {
                            e.step(now, &mut |p| out.push(p.token));
                        }
                    }
                    _ => {
                        now += dt;
                        if parts.allocator.step(now) {
                            for e in &mut parts.engines {
                                e.step(now, &mut |p| out.push(p.token));
                            }
                            let nba = parts.allocator.nba();
                            for e in 0..n {
                                prop_assert_eq!(parts.engines[e].rate(0), Some(nba.rate(e, 0)));
                            }
                        }
                    }
                }
                let (mut held, mut rings, mut sent, mut refused, mut taken) = (0, 0, 0, 0, 0);
                for e in &parts.engines {
                    e.pipeline().check();
                    held += e.held() as u64;
                    rings += e.in_rings() as u64;
                    sent += e.stats().sent;
                    refused += e.stats().refused;
                    taken += e.stats().taken;
                    prop_assert_eq!(e.stats().rejected, 0);
                }
                prop_assert_eq!(sent, out.len() as u64);
                prop_assert!(refused <= zero, "only zero-length packets are refused");
                prop_assert_eq!(taken, sent + held);
                prop_assert_eq!(taken + refused + rings, dispatched);
            }
            // Drain with time: everything leaves once.
            for _ in 0..10_000 {
                let left: usize = parts.engines.iter().map(|e| e.held() + e.in_rings()).sum();
                if left == 0 {
                    break;
                }
                now += 1_000_000;
                parts.allocator.step(now);
                for e in &mut parts.engines {
                    e.step(now, &mut |p| out.push(p.token));
                }
            }
            let refused: u64 = parts.engines.iter().map(|e| e.stats().refused).sum();
            prop_assert_eq!(refused, zero);
            out.sort_unstable();
            let before = out.len();
            out.dedup();
            prop_assert_eq!(before, out.len(), "a packet sent twice");
            prop_assert_eq!(out.len() as u64 + zero, dispatched, "a packet lost");
        }
    }
}

/// Doorbell lanes from two producers, stepped in one thread in any interleaving, over a data
/// queue pool so small that doorbells are cut by the memory bound and by the drain budget,
/// with doorbells for flows the engine does not have: every item of a known flow is taken
/// exactly once, in its producer's order for that flow, and nothing is left at the end.
mod lanes {
    use super::*;
    use sluice_flow::doorbell::{DoorbellEngine, PostError, lane};
    use sluice_flow::dpfq::RingPool;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        #[test]
        fn two_producers_every_item_once_in_order(
            bound in 1usize..8,
            ops in prop::collection::vec((0u8..3, 0u32..6, 1usize..5, 0usize..6), 0..200),
        ) {
            const KNOWN: u32 = 5;
            let pool = RingPool::new(8, 2, bound).unwrap();
            let (mut tx0, rx0) = lane(6, 3, 6).unwrap();
            let (mut tx1, rx1) = lane(6, 3, 6).unwrap();
            let mut e = DoorbellEngine::new(pool, KNOWN as usize, vec![rx0, rx1]).unwrap();
            // Items: producer << 24 | flow << 16 | seq.
            let mut next = [[0u32; 6]; 2];
            let mut expect = [[0u32; 6]; 2];
            let mut sent_known = 0usize;
            let mut taken = 0usize;
            let take = |f: u32, item: u32, expect: &mut [[u32; 6]; 2]| {
                let (p, fl, seq) = ((item >> 24) as usize, (item >> 16) & 0xff, item & 0xffff);
                assert_eq!(fl, f, "item delivered for another flow");
                assert!(f < KNOWN);
                assert_eq!(seq, expect[p][f as usize], "producer {p} flow {f}: order or duplicate");
                expect[p][f as usize] += 1;
            };
            for (op, flow, n, budget) in ops {
                match op {
                    0 | 1 => {
                        let p = op as usize;
                        let run: Vec<u32> = (0..n as u32)
                            .map(|k| (p as u32) << 24 | flow << 16 | (next[p][flow as usize] + k))
                            .collect();
                        let tx = if p == 0 { &mut tx0 } else { &mut tx1 };
                        match tx.send(flow, &run) {
                            Ok(()) => {
                                next[p][flow as usize] += n as u32;
                                if flow < KNOWN {
                                    sent_known += n;
                                }
                            }
                            Err(PostError::Full) => {}
                            Err(err) => panic!("{err}"),
                        }
                    }
                    _ => {
                        taken += e.drain(budget, |f, i| take(f, i, &mut expect));
                    }
                }
                prop_assert!(taken <= sent_known);
            }
            for _ in 0..1000 {
                if e.drain(usize::MAX, |f, i| take(f, i, &mut expect)) == 0
                    && e.rings().iter().all(|r| r.is_empty())
                {
                    break;
                }
            }
            let total: u32 = expect.iter().flat_map(|p| p[..KNOWN as usize].iter()).sum();
            prop_assert_eq!(total as usize, sent_known, "items left behind");
            prop_assert!(e.rings().iter().all(|r| r.is_empty()));
            prop_assert_eq!(e.stats().packets as usize, sent_known);
            for f in 0..KNOWN {
                prop_assert!(e.queues().is_empty(f));
            }
        }
    }
}

/// A paused-sources queue of any kind a policy may name (`PausedOrder::Rank`), with ranks in
/// and far beyond its range: every paused source is resumed in the end, and the buffer drains
/// (a queue whose `pop_min` came up empty while it held a source would pause it for good).
mod any_paused_queue {
    use super::*;
    use sluice_flow::admission::{Admission, AdmissionConfig, PausedOrder, Verdict};
    use sluice_queue::{QueueKind, QueueSpec};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn every_kind_resumes_every_paused_source(
            kind in 0usize..QueueKind::ALL.len(),
            granularity in prop_oneof![Just(1u64), 1u64..64],
            capacity in 1usize..4,
            backlog in prop::collection::vec(0u32..6, 1..12),
            ranks in prop::collection::vec(prop_oneof![0u64..64, 0u64..1_000_000, Just(u64::MAX)], 12),
        ) {
            let n = backlog.len();
            let spec = QueueSpec::new(QueueKind::ALL[kind], 64, granularity, n);
            let Ok(mut adm) = Admission::new(AdmissionConfig {
                order: PausedOrder::Rank(spec),
                ..AdmissionConfig::new(capacity, n)
            }) else {
                panic!("kind {:?} g {}", QueueKind::ALL[kind], granularity);
            };
            let mut backlog = backlog;
            let mut buffer = VecDeque::new();
            let mut todo: VecDeque<u32> = (0..n as u32).collect();
            let mut steps = 0;
            loop {
                while let Some(s) = todo.pop_front() {
                    loop {
                        if backlog[s as usize] == 0 {
                            if let Some(r) = adm.idle(s) {
                                todo.push_back(r);
                            }
                            break;
                        }
                        match adm.offer(s, ranks[s as usize]) {
                            Verdict::Admit => {
                                backlog[s as usize] -= 1;
                                buffer.push_back(s);
                            }
                            _ => break,
                        }
                    }
                    adm.check();
                }
                let Some(s) = buffer.pop_front() else { break };
                if let Some(r) = adm.departed(s) {
                    todo.push_back(r);
                }
                todo.push_back(s);
                steps += 1;
                prop_assert!(steps < 10_000);
            }
            prop_assert!(backlog.iter().all(|&b| b == 0), "stuck: {:?}, paused {}", backlog, adm.paused());
            prop_assert_eq!(adm.paused(), 0);
        }
    }
}
