//! What `sluice bench sched`'s pfabric case would cost with nothing around its queue: a
//! scheduler written for this one workload (one pFabric leaf, two packets per flow, no
//! classes, gates, idle list or look-aheads), on hierarchical FFS or on the binary heap, in
//! the bench's own closed loop ([`ClosedLoop`]) on the same traffic.
//!
//! ```sh
//! cargo build --release -p sluice-sched --example pfabric_floor --example sched_probe
//! ./target/release/examples/pfabric_floor sluice 1000000 4000000
//! ./target/release/examples/sched_probe pfabric sluice 1000000 4000000
//! ```
//!
//! It serves every packet in the order the tree does: its checksum equals `sched_probe`'s
//! for the same arguments (its test checks that). The difference in time between the two is
//! what the tree's generality costs per packet, which both of the bench's implementations pay;
//! the ratio between this probe's two queues is what the queues alone give
//! (`docs/benchmarks.md`).

use sluice_queue::{
    BinaryHeapQueue, ConfigError, Handle, HierFfsQueue, Overflow, RangeConfig, RankQueue,
};
use sluice_sched::policy::compress;
use sluice_sched::workload::{Case, ClosedLoop, PACKETS_PER_FLOW, Sched, Traffic};
use sluice_sched::{Dequeued, Packet};
use std::time::Instant;

#[derive(Clone, Copy, Default)]
struct Rec {
    token: u64,
    arrival: u64,
    remaining: u64,
    len: u32,
}

/// A flow and its two packets (a ring of two), ranked as pFabric ranks it: `min` is the least
/// remaining size among its packets, `at_min` how many carry it.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Flow {
    key: u64,
    head: u8,
    count: u8,
    at_min: u32,
    min: u64,
    handle: Option<Handle>,
    slots: [Rec; 2],
}

struct Floor<Q> {
    queue: Q,
    /// Rank by remaining sizes themselves (an exact queue, as the tree does), not compressed.
    exact: bool,
    flows: Vec<Flow>,
    held: usize,
    sent: u64,
}

impl<Q: RankQueue<u32>> Sched for Floor<Q> {
    /// The flow is the packet's flow id when the loop gives it back, else its index in the
    /// traffic (the token's low half), which is where the loop's first packets start.
    #[inline]
    fn enqueue(&mut self, now: u64, p: &Packet) -> bool {
        let id = p.flow_id.unwrap_or(p.token as u32);
        let exact = self.exact;
        let rank_of = |bytes| if exact { bytes } else { compress(bytes) };
        let f = &mut self.flows[id as usize];
        assert!(f.count < 2, "the loop keeps two packets per flow");
        let rec = Rec {
            token: p.token,
            arrival: now,
            remaining: p.fields.remaining,
            len: p.len,
        };
        f.key = p.flow;
        f.slots[usize::from((f.head + f.count) & 1)] = rec;
        f.count += 1;
        self.held += 1;
        if f.count == 1 {
            (f.min, f.at_min) = (rec.remaining, 1);
            f.handle = self.queue.push(rank_of(f.min), id).ok();
        } else if rec.remaining < f.min {
            let before = rank_of(f.min);
            (f.min, f.at_min) = (rec.remaining, 1);
            let rank = rank_of(f.min);
            if let (Some(h), true) = (f.handle, rank != before) {
                f.handle = self.queue.requeue(h, rank, id).ok();
            }
        } else if rec.remaining == f.min {
            f.at_min += 1;
        }
        true
    }

    #[inline]
    fn dequeue(&mut self, _now: u64) -> Option<Dequeued> {
        let first = self.queue.peek_min()?;
        let id = first.item;
        let exact = self.exact;
        let f = &mut self.flows[id as usize];
        let rec = f.slots[usize::from(f.head)];
        f.head ^= 1;
        f.count -= 1;
        self.held -= 1;
        self.sent += 1;
        if rec.remaining == f.min {
            f.at_min -= 1;
        }
        if f.count == 0 {
            if let Some(h) = f.handle.take() {
                let _ = self.queue.remove(h);
            }
        } else {
            if f.at_min == 0 {
                (f.min, f.at_min) = (f.slots[usize::from(f.head)].remaining, 1);
            }
            let rank = if exact { f.min } else { compress(f.min) };
            if let (Some(h), true) = (f.handle, rank != first.rank) {
                f.handle = self.queue.requeue(h, rank, id).ok();
            }
        }
        Some(Dequeued {
            token: rec.token,
            len: rec.len,
            flow: f.key,
            flow_id: id,
            leaf: 0,
            arrival: rec.arrival,
        })
    }

    fn next_event(&self, now: u64) -> Option<u64> {
        (self.held > 0).then_some(now)
    }
    fn held(&self) -> usize {
        self.held
    }
    fn dequeued(&self) -> u64 {
        self.sent
    }
    fn rejected(&self) -> u64 {
        0
    }
    fn clamped(&self) -> u64 {
        0
    }
}

/// Fill, warm up with `2 * flows` packets and time `packets` more, like `sched_probe`: the
/// time per packet and the loop's checksum.
fn measure<Q: RankQueue<u32>>(queue: Q, exact: bool, flows: usize, packets: u64) -> (f64, u64) {
    let floor = Floor {
        queue,
        exact,
        flows: vec![Flow::default(); flows],
        held: 0,
        sent: 0,
    };
    let mut l = ClosedLoop::new(floor, Traffic::new(Case::Pfabric, flows));
    l.run(2 * flows as u64);
    let start = Instant::now();
    let sum = l.run(packets);
    let ns = start.elapsed().as_nanos() as f64 / packets as f64;
    assert_eq!(l.verify(), Ok(()));
    (ns, sum)
}

/// What `queue = "auto"` builds for pFabric: one bucket per compressed size.
fn hffs(capacity: usize) -> Result<HierFfsQueue<u32>, ConfigError> {
    HierFfsQueue::new(RangeConfig {
        base: 0,
        granularity: 1,
        buckets: compress(u64::MAX) as usize + 1,
        overflow: Overflow::Clamp,
        capacity,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let imp = args.get(1).map(String::as_str);
    let flows = args.get(2).and_then(|s| s.parse::<usize>().ok());
    let packets = args.get(3).and_then(|s| s.parse::<u64>().ok());
    let (Some(imp @ ("sluice" | "baseline")), Some(flows @ 1..), Some(packets @ 1..)) =
        (imp, flows, packets)
    else {
        eprintln!("usage: pfabric_floor sluice|baseline FLOWS PACKETS");
        std::process::exit(2);
    };
    let capacity = PACKETS_PER_FLOW * flows;
    let built = if imp == "sluice" {
        hffs(capacity).map(|q| measure(q, false, flows, packets))
    } else {
        BinaryHeapQueue::new(capacity).map(|q| measure(q, true, flows, packets))
    };
    match built {
        Ok((ns, sum)) => {
            println!("pfabric floor {imp} flows={flows}: {ns:.1} ns/packet (checksum {sum:x})")
        }
        Err(e) => {
            eprintln!("pfabric_floor: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_sched::workload::{CaseLoop, Impl};

    /// The floor sends the tree's packets in the tree's order, on either queue: the checksum
    /// of (token, arrival) over the timed packets matches the tree's.
    #[test]
    fn serves_the_same_packets_in_the_same_order_as_the_tree() {
        let (flows, packets) = (3000, 30_000);
        for imp in Impl::ALL {
            let mut tree = CaseLoop::new(Case::Pfabric, imp, flows).unwrap();
            tree.run(2 * flows as u64);
            let want = tree.run(packets);
            let capacity = PACKETS_PER_FLOW * flows;
            let got = match imp {
                Impl::Sluice => measure(hffs(capacity).unwrap(), false, flows, packets),
                Impl::Baseline => measure(
                    BinaryHeapQueue::new(capacity).unwrap(),
                    true,
                    flows,
                    packets,
                ),
            }
            .1;
            assert_eq!(got, want, "{imp:?}");
        }
    }
}
