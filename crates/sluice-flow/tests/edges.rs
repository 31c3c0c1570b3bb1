//! Edge cases an audit found, each once a bug: a source the scheduler refused was never
//! forgotten; a paused-sources queue that could refuse a rank lost the source; bad flow ids
//! were counted as memory bounds and blocked a doorbell lane for good; a source that could
//! send at once ranked 0 among sources paused by rate limit and unsorted them. (An engine that
//! stalled and installed an old rate is tested in `engine.rs`.)

use sluice_flow::admission::{Admission, AdmissionConfig, PausedOrder, Verdict};
use sluice_flow::completion::Completions;
use sluice_flow::doorbell::{DoorbellEngine, lane};
use sluice_flow::dpfq::{Dpfq, RingPool};
use sluice_flow::pipeline::{Pipeline, PipelineConfig};
use sluice_queue::{Overflow, QueueKind, QueueSpec};
use sluice_sched::{NodeSpec, Packet, PolicyKind, SchedConfig, TreeBuilder};

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

#[test]
fn by_rate_limit_a_source_that_may_send_now_does_not_unsort_the_paced_ones() {
    // A scheduled buffer of one packet, paused sources ordered by when their rate limit lets
    // them send, at 5 s. P (12 Mbit/s: next packet in 1 ms) and Q (24 Mbit/s: in 0.5 ms) have
    // each sent one packet; G fills the buffer; then H (no rate), P and Q pause. H used to
    // rank 0, which moved the time-ordered queue's window to time 0: P and Q, 5 s later, were
    // filed at its edge in arrival order, and P went first. Now H ranks as now: H, Q, P.
    let mut b = TreeBuilder::new(SchedConfig::default());
    let root = b.root(NodeSpec::new("root", PolicyKind::Fq));
    b.default_leaf(root);
    let cfg = PipelineConfig {
        rank_by: sluice_flow::pipeline::RankBy::RateLimit,
        per_source: 1,
        ..PipelineConfig::new(8, 1, 64)
    };
    let mut p = Pipeline::new(b.build().unwrap(), cfg).unwrap();
    let paced = |flow: u64, token: u64, bps: u64| {
        let mut x = pkt(flow, token, 1500);
        x.fields.pacing_bps = bps;
        x
    };
    let t = 5_000_000_000;
    for (flow, bps) in [(1, 12_000_000), (2, 24_000_000)] {
        p.ingress(t, paced(flow, flow, bps)).unwrap();
        assert_eq!(p.egress(t).map(|x| x.flow), Some(flow));
    }
    p.ingress(t, pkt(3, 3, 1500)).unwrap(); // G: fills the buffer
    p.ingress(t, pkt(4, 4, 1500)).unwrap(); // H: paused, may send now
    p.ingress(t, paced(1, 11, 12_000_000)).unwrap(); // P: paused until t + 1 ms
    p.ingress(t, paced(2, 12, 24_000_000)).unwrap(); // Q: paused until t + 0.5 ms
    let mut order = Vec::new();
    let mut now = t;
    for _ in 0..100 {
        while let Some(x) = p.egress(now) {
            order.push(x.token);
        }
        match p.next_event(now) {
            Some(next) => now = next.max(now + 1),
            None => break,
        }
    }
    assert_eq!(order, [3, 4, 12, 11]);
}
