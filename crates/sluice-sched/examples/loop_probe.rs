//! What the benchmark's closed loop costs by itself: `sluice bench sched`'s loop and traffic
//! around a scheduler that does nothing (a FIFO of the packets), so that the ns per packet it
//! reports can be read against the real schedulers' (`sched_probe`):
//!
//! ```sh
//! cargo build --release -p sluice-sched --example loop_probe
//! ./target/release/examples/loop_probe pfabric 1000000 4000000
//! ```
//!
//! Arguments: case (hclock, pfabric, fq_pacing, eiffel_fig47), flows, packets. The loop is
//! filled and warmed up like the report's (`2 * flows` packets), then timed.

use sluice_sched::workload::{Case, ClosedLoop, Sched, Traffic};
use sluice_sched::{Dequeued, Packet};
use std::collections::VecDeque;
use std::time::Instant;

/// A FIFO of what the loop needs back: token, length, flow key.
struct Fifo {
    queue: VecDeque<(u64, u32, u64)>,
    sent: u64,
}

impl Sched for Fifo {
    #[inline]
    fn enqueue(&mut self, _now: u64, p: &Packet) -> bool {
        self.queue.push_back((p.token, p.len, p.flow));
        true
    }
    #[inline]
    fn dequeue(&mut self, _now: u64) -> Option<Dequeued> {
        let (token, len, flow) = self.queue.pop_front()?;
        self.sent += 1;
        Some(Dequeued {
            token,
            len,
            flow,
            flow_id: token as u32,
            leaf: 0,
            arrival: 0,
        })
    }
    fn next_event(&self, now: u64) -> Option<u64> {
        (!self.queue.is_empty()).then_some(now)
    }
    fn held(&self) -> usize {
        self.queue.len()
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = args
        .get(1)
        .and_then(|s| Case::ALL.into_iter().find(|c| c.name() == s));
    let flows = args.get(2).and_then(|s| s.parse::<usize>().ok());
    let packets = args.get(3).and_then(|s| s.parse::<u64>().ok());
    let (Some(case), Some(flows @ 1..), Some(packets @ 1..)) = (case, flows, packets) else {
        eprintln!("usage: loop_probe CASE FLOWS PACKETS");
        std::process::exit(2);
    };
    let fifo = Fifo {
        queue: VecDeque::with_capacity(2 * flows),
        sent: 0,
    };
    let mut l = ClosedLoop::new(fifo, Traffic::new(case, flows));
    l.run(2 * flows as u64);
    let t = Instant::now();
    let sum = l.run(packets);
    let ns = t.elapsed().as_nanos() as f64 / packets as f64;
    println!(
        "{} loop alone, flows={flows}: {ns:.1} ns/packet (checksum {sum:x})",
        case.name()
    );
}
