//! Edge cases an audit found, each once a bug: a source the scheduler refused was never
//! forgotten; a paused-sources queue that could refuse a rank lost the source; bad flow ids
//! were counted as memory bounds and blocked a doorbell lane for good; an engine that
//! stalled installed an old rate when it resumed.

use sluice_flow::admission::{Admission, AdmissionConfig, PausedOrder, Verdict};
use sluice_flow::completion::Completions;
use sluice_flow::doorbell::{DoorbellEngine, lane};
use sluice_flow::dpfq::{Dpfq, RingPool};
use sluice_flow::engine::{EnginesConfig, build, engine_for};
use sluice_flow::nba::{Aggregate, NbaConfig};
use sluice_flow::pipeline::{Pipeline, PipelineConfig, PipelineError};
use sluice_queue::{Overflow, QueueKind, QueueSpec};
use sluice_sched::{NodeSpec, Packet, PolicyKind, Rate, SchedConfig, TreeBuilder};

const MS: u64 = 1_000_000;

fn pkt(flow: u64, token: u64, len: u32) -> Packet {
    Packet {
        token,
        len,
        flow,
        ..Packet::default()
    }
}

#[test]
fn a_source_whose_packets_the_scheduler_refused_is_forgotten() {
    // The scheduler's flow table holds one flow, the pipeline four sources: flows 2 to 4 are
    // accepted, then refused by the scheduler (its table is full) and handed back.
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 8,
        flows: 1,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Fq));
    b.default_leaf(root);
    let mut p = Pipeline::new(b.build().unwrap(), PipelineConfig::new(4, 4, 64)).unwrap();
    p.ingress(0, pkt(1, 1, 100)).unwrap();
    for f in 2..=4 {
        p.ingress(0, pkt(f, f, 100)).unwrap();
    }
    assert_eq!(std::iter::from_fn(|| p.take_rejected()).count(), 3);
    assert_eq!(p.egress(0).map(|x| x.flow), Some(1));
    assert!(p.is_empty());
    p.check();
    // Nothing held, nothing tracked: two new flows fit the four sources.
    assert_eq!(p.sources(), 0);
    assert!(p.ingress(1, pkt(99, 99, 100)).is_ok());
    assert!(p.ingress(1, pkt(100, 100, 100)).is_ok());
}

#[test]
fn a_rank_ordered_paused_queue_never_refuses_a_source() {
    // A spec that would reject ranks beyond its range: the paused queue clamps instead, so a
    // source paused at a far rank is paused (and resumed later), not lost.
    let spec = QueueSpec {
        overflow: Overflow::Reject,
        ..QueueSpec::new(QueueKind::Ffs, 64, 1, 4)
    };
    let mut a = Admission::new(AdmissionConfig {
        order: PausedOrder::Rank(spec),
        ..AdmissionConfig::new(1, 4)
    })
    .unwrap();
    assert_eq!(a.offer(0, 0), Verdict::Admit);
    assert_eq!(a.offer(1, 1_000), Verdict::Paused);
}

#[test]
fn a_flow_id_beyond_the_tables_is_counted_as_such() {
    let mut c = Completions::new(4, 2, 2);
    assert!(c.admit(7, 0).is_none());
    assert_eq!((c.stats().full, c.stats().unknown_flow), (0, 1));
    let mut q = Dpfq::new(RingPool::new(4, 4, 16).unwrap(), 2);
    assert!(q.push(9, 0).is_err());
    assert_eq!((q.stats().bound_packets, q.stats().unknown_flow), (0, 1));
}

#[test]
fn a_doorbell_for_an_unknown_flow_does_not_block_its_lane() {
    // The lane was told 100 flows, the engine has 8: flow 50's doorbell is discarded and
    // counted; flow 3's, behind it, is delivered.
    let (mut tx, rx) = lane(100, 8, 32).unwrap();
    let mut e = DoorbellEngine::new(RingPool::new(16, 4, 64).unwrap(), 8, vec![rx]).unwrap();
    tx.send(50, &[1]).unwrap();
    tx.send(3, &[2]).unwrap();
    let mut got = Vec::new();
    for _ in 0..10 {
        e.drain(usize::MAX, |f, i| got.push((f, i)));
    }
    assert_eq!(got, [(3, 2)]);
}

fn tenant(_: usize) -> Result<Pipeline, PipelineError> {
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: 64,
        flows: 64,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", PolicyKind::Wfq));
    let leaf = b.child(
        root,
        NodeSpec::new("tenant", PolicyKind::Fq).rate(Rate::gbit(1), 3000),
    );
    b.default_leaf(leaf);
    Pipeline::new(b.build().unwrap(), PipelineConfig::new(64, 32, 64))
}

#[test]
fn an_engine_that_stalled_installs_the_latest_rate() {
    // Two engines share 1 Gbit/s. Engine 1 is not stepped for 1 s (ten allocations); engine
    // 0 idles, then offers 300 Mbit/s. When engine 1 steps, it installs the allocator's
    // latest rate for it, and the two installed rates stay within the aggregate.
    let cfg = EnginesConfig {
        nba: NbaConfig {
            interval_ns: 100 * MS,
            ..NbaConfig::default()
        },
        ring_slots: 64,
        report_ns: 10 * MS,
        ..EnginesConfig::new(vec![Aggregate::new("tenant", Rate::gbit(1))])
    };
    let mut parts = build(2, &cfg, tenant).unwrap();
    let flows: Vec<u64> = (0u64..)
        .filter(|&f| engine_for(f, 2) == 0)
        .take(4)
        .collect();
    let (mut token, mut credit, mut now) = (0, 0u64, 0);
    const STEP: u64 = 100_000;
    while now <= 1000 * MS {
        if now >= 500 * MS {
            credit += 300 * STEP / 1000; // bits per step at 300 Mbit/s
            while credit >= 12_000 {
                let p = pkt(flows[(token % 4) as usize], token, 1500);
                if parts.dispatchers[0].send(p).is_err() {
                    break;
                }
                credit -= 12_000;
                token += 1;
            }
        }
        parts.engines[0].step(now, &mut |_| {});
        parts.allocator.step(now);
        now += STEP;
    }
    parts.engines[1].step(now, &mut |_| {});
    let nba = parts.allocator.nba();
    let (want0, want1) = (nba.rate(0, 0), nba.rate(1, 0));
    let got1 = parts.engines[1].rate(0).unwrap();
    let got0 = parts.engines[0].rate(0).unwrap();
    assert_eq!(got1, want1, "engine 1 installed an older rate");
    assert!(
        got0.bps() + got1.bps() <= 1_000_000_000,
        "{want0} + {want1}"
    );
}
