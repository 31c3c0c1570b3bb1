//! Edge cases an audit found, each once a bug: a source the scheduler refused was never
//! forgotten; a paused-sources queue that could refuse a rank lost the source; bad flow ids
//! were counted as memory bounds and blocked a doorbell lane for good (then ended the drain
//! they were read in); a source that could send at once ranked 0 among sources paused by rate
//! limit and unsorted them; a new flow given a forgotten flow's source id spent that flow's
//! resume credit to pass paused sources. (An engine that stalled and installed an old rate is
//! tested in `engine.rs`.)

use sluice_flow::admission::{Admission, AdmissionConfig, PausedOrder, Probe, Verdict};
use sluice_flow::completion::Completions;
use sluice_flow::doorbell::{DoorbellEngine, lane};
use sluice_flow::dpfq::{Dpfq, RingPool};
use sluice_flow::pipeline::{Pipeline, PipelineConfig};
use sluice_queue::{Overflow, QueueKind, QueueSpec};
use sluice_sched::{NodeSpec, Packet, PolicyKind, SchedConfig, Scheduler, TreeBuilder};

/// A scheduler of one leaf running `policy`, holding `capacity` packets of up to `flows`
/// flows.
fn one_leaf(policy: PolicyKind, capacity: usize, flows: usize) -> Scheduler {
    let mut b = TreeBuilder::new(SchedConfig {
        capacity,
        flows,
        ..SchedConfig::default()
    });
    let root = b.root(NodeSpec::new("root", policy));
    b.default_leaf(root);
    b.build().unwrap()
}

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
    let sched = one_leaf(PolicyKind::Fq, 8, 1);
    let mut p = Pipeline::new(sched, PipelineConfig::new(4, 4, 64)).unwrap();
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

#[test]
fn a_new_flow_on_a_reused_source_id_has_no_resume_credit() {
    // A scheduled buffer of three, fair share, three packets per source. B is resumed with a
    // credit of two, spends one, and is forgotten when its packets leave. D then gets B's
    // source id while A is paused: D, a new flow, must queue behind A, not spend B's credit.
    let cfg = PipelineConfig {
        per_source: 3,
        probe: Probe::FairShare,
        ..PipelineConfig::new(8, 3, 64)
    };
    let mut p = Pipeline::new(one_leaf(PolicyKind::Fifo, 3, 64), cfg).unwrap();
    p.ingress(0, pkt(1, 10, 100)).unwrap(); // A: admitted
    p.ingress(0, pkt(2, 20, 100)).unwrap(); // B: admitted
    p.ingress(0, pkt(2, 21, 100)).unwrap(); // B: above its share: paused
    p.ingress(0, pkt(1, 11, 100)).unwrap(); // A: above its share: paused
    assert_eq!(p.egress(0).unwrap().token, 10); // B resumed with credit 2, places 21
    p.ingress(0, pkt(1, 12, 100)).unwrap(); // A still paused
    p.ingress(0, pkt(3, 30, 100)).unwrap(); // C: room, but A is paused ahead of it
    assert_eq!(p.egress(0).unwrap().token, 20); // A resumed, places 11, paused again
    assert_eq!(p.egress(0).unwrap().token, 21); // C resumed; B holds nothing: forgotten
    assert_eq!(p.admission().paused(), 1, "A waits");
    assert!(p.flows().is_paused(0), "A is source 0");
    let admitted = p.admission().stats().admitted;
    p.ingress(0, pkt(4, 40, 100)).unwrap(); // D: B's old source id
    assert_eq!(
        p.admission().stats().admitted,
        admitted,
        "D was admitted ahead of the paused A"
    );
    assert_eq!(p.admission().paused(), 2, "D waits behind A");
    p.check();
}

#[test]
fn a_doorbell_for_an_unknown_flow_does_not_end_a_drain() {
    // The lane was told 100 flows, the engine has 8. Flow 50's doorbell is discarded; the
    // poll used to report the lane empty on it, so the drain stopped (returned 0, counted an
    // empty poll) with flow 3's doorbell still waiting behind: a host that sleeps when a drain
    // takes nothing slept on a packet it could have delivered.
    let (mut tx, rx) = lane(100, 8, 32).unwrap();
    let mut e = DoorbellEngine::new(RingPool::new(16, 4, 64).unwrap(), 8, vec![rx]).unwrap();
    tx.send(50, &[1]).unwrap();
    tx.send(3, &[2]).unwrap();
    let mut got = Vec::new();
    assert_eq!(e.drain(usize::MAX, |f, i| got.push((f, i))), 1);
    assert_eq!(got, [(3, 2)]);
    assert_eq!(e.rings()[0].unknown_flow(), 1);
    assert_eq!(e.stats().doorbells, 1);
}
