//! Sparse flows among backlogged ones, through the lossless pipeline and an fq root at
//! 100 Mbit/s, as in the daemon: a ping must not wait a round of the round robin (with 1000
//! flows a round is 1000 quanta, 240 ms here), and a flow that empties often must still get no
//! more than its share.

use sluice_flow::pipeline::{Pipeline, PipelineConfig};
use sluice_sched::{Fields, NodeSpec, Packet, PolicyKind, Rate, SchedConfig, TreeBuilder};

const RATE: u64 = 100_000_000;
const BULK_LEN: u32 = 1514;
const PING_LEN: u32 = 98;
/// Packets each bulk flow keeps queued (a window-limited sender: one more for each that leaves).
const WINDOW: u32 = 4;
const SPARSE_KEY: u64 = 1 << 40;
const MS: u64 = 1_000_000;

fn pipeline() -> Pipeline {
    let buffer = 4096;
    let mut b = TreeBuilder::new(SchedConfig {
        capacity: buffer,
        flows: buffer,
        ..SchedConfig::default()
    });
    let root = b
        .root(NodeSpec::new("root", PolicyKind::Fq).rate(Rate::from_bps(RATE).unwrap(), 96 * 1024));
    b.default_leaf(root);
    let sched = b.build().unwrap();
    Pipeline::new(sched, PipelineConfig::new(buffer, buffer, 100_000)).unwrap()
}

/// What the sparse flow does.
#[derive(Clone, Copy)]
enum Sparse {
    /// One small packet every `gap` ns.
    Ping { gap: u64 },
    /// `burst` full packets `gap` ns after the last one it sent left.
    OnOff { burst: u32, gap: u64 },
}

struct Outcome {
    /// Sparse packets' waits (ns), after the warm-up.
    waits: Vec<u64>,
    /// Bytes the sparse flow and the bulk flows (on average) sent after the warm-up.
    sparse_bytes: u64,
    bulk_bytes_mean: f64,
}

fn run(flows: u64, sparse: Sparse) -> Outcome {
    let mut p = pipeline();
    let mut now = 1_000_000_000u64;
    let warm = now + 2_000 * MS;
    let end = warm + 5_000 * MS;
    for f in 0..flows {
        for _ in 0..WINDOW {
            let pkt = Packet {
                len: BULK_LEN,
                flow: f,
                ..Packet::default()
            };
            p.ingress(now, pkt).unwrap();
        }
    }
    let mut next_sparse = Some(now);
    let mut sparse_queued = 0;
    let mut out = Outcome {
        waits: Vec::new(),
        sparse_bytes: 0,
        bulk_bytes_mean: 0.0,
    };
    let mut bulk_bytes = 0u64;
    while now < end {
        if next_sparse.is_some_and(|t| now >= t) {
            let (count, len) = match sparse {
                Sparse::Ping { .. } => (1, PING_LEN),
                Sparse::OnOff { burst, .. } => (burst, BULK_LEN),
            };
            for _ in 0..count {
                let pkt = Packet {
                    len,
                    flow: SPARSE_KEY,
                    fields: Fields {
                        deadline: now, // its arrival, to measure the wait
                        ..Fields::default()
                    },
                    ..Packet::default()
                };
                p.ingress(now, pkt).unwrap();
            }
            sparse_queued += count;
            next_sparse = match sparse {
                Sparse::Ping { gap } => next_sparse.map(|t| t + gap),
                Sparse::OnOff { .. } => None,
            };
        }
        while let Some(pkt) = p.egress(now) {
            let counted = now >= warm;
            if pkt.flow == SPARSE_KEY {
                sparse_queued -= 1;
                if counted {
                    out.waits.push(now - pkt.fields.deadline);
                    out.sparse_bytes += u64::from(pkt.len);
                }
                if let (Sparse::OnOff { gap, .. }, 0) = (sparse, sparse_queued) {
                    next_sparse = Some(now + gap);
                }
            } else {
                if counted {
                    bulk_bytes += u64::from(pkt.len);
                }
                p.ingress(now, pkt).unwrap();
            }
        }
        let wake = p.next_event(now).into_iter().chain(next_sparse).min();
        now = wake.unwrap_or(end).max(now + 1);
    }
    out.bulk_bytes_mean = bulk_bytes as f64 / flows as f64;
    out
}

fn percentile(mut v: Vec<u64>, pct: usize) -> u64 {
    v.sort_unstable();
    v[(v.len() * pct / 100).min(v.len() - 1)]
}

#[test]
fn a_ping_waits_no_round_among_backlogged_flows() {
    for flows in [10, 100, 1000] {
        let o = run(flows, Sparse::Ping { gap: 10 * MS });
        assert_eq!(o.waits.len(), 500, "{flows} flows: every ping left");
        let (p50, p99) = (percentile(o.waits.clone(), 50), percentile(o.waits, 99));
        // A ping waits for the bulk packet on the wire and its own: ~0.12 ms each. Before
        // fq refilled the credit of flows that miss a round: 82 / 242 ms at 1000 flows.
        assert!(
            p99 < MS,
            "{flows} flows: ping waited p50 {p50} ns, p99 {p99} ns"
        );
    }
}

#[test]
fn a_flow_that_empties_often_gets_no_more_than_its_share() {
    for (flows, burst, gap) in [(100, 4, MS), (100, 1, 0), (1000, 8, 10 * MS)] {
        let o = run(flows, Sparse::OnOff { burst, gap });
        let ratio = o.sparse_bytes as f64 / o.bulk_bytes_mean;
        // It asks for far more than its share whenever it is on; it may get its share, as a
        // backlogged flow would, and not more.
        assert!(
            (0.9..=1.05).contains(&ratio),
            "{flows} flows, bursts of {burst} every {gap} ns: {ratio:.3} of a bulk flow's bytes"
        );
    }
}
