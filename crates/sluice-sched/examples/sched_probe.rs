//! Drive one case of `sluice bench sched` exactly as the report does, for callgrind
//! (instruction counts are repeatable on a noisy machine):
//!
//! ```sh
//! cargo build --release -p sluice-sched --example sched_probe
//! valgrind --tool=callgrind ./target/release/examples/sched_probe hclock sluice 1000 1000000
//! # only the timed packets, with the cache simulated (a 32 MiB last level):
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*sched_probe::timed*' \
//!     --cache-sim=yes --LL=33554432,16,64 \
//!     ./target/release/examples/sched_probe fq_pacing sluice 1000000 200000
//! ```
//!
//! Arguments: case (hclock, pfabric, fq_pacing, eiffel_fig47), implementation (sluice,
//! baseline), flows, packets, and optionally blocks (default 1). It builds and fills the
//! scheduler, warms it up with `2 * flows` packets like the report, then sends `packets` more
//! (in [`timed`], which callgrind can be told to count alone) and prints the time per packet.
//! With more than one block it sends `blocks` consecutive timings of `packets` and prints each,
//! which shows how the cost moves as the traffic goes through its phases:
//!
//! ```sh
//! ./target/release/examples/sched_probe hclock baseline 1000000 1000000 12
//! ```

use sluice_sched::workload::{Case, CaseLoop, Impl};
use std::time::Instant;

/// The timed packets: a function of its own so that a profiler can count only them.
#[inline(never)]
fn timed(l: &mut CaseLoop, packets: u64) -> u64 {
    l.run(packets)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: sched_probe CASE sluice|baseline FLOWS PACKETS [BLOCKS]";
    let case = args
        .get(1)
        .and_then(|s| Case::ALL.into_iter().find(|c| c.name() == s));
    let imp = args
        .get(2)
        .and_then(|s| Impl::ALL.into_iter().find(|i| i.name() == s));
    let flows = args.get(3).and_then(|s| s.parse::<usize>().ok());
    let packets = args.get(4).and_then(|s| s.parse::<u64>().ok());
    let blocks = args.get(5).map_or(Some(1), |s| s.parse::<u32>().ok());
    let (Some(case), Some(imp), Some(flows), Some(packets), Some(blocks)) =
        (case, imp, flows, packets, blocks)
    else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let mut l = match CaseLoop::new(case, imp, flows) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sched_probe: {e}");
            std::process::exit(1);
        }
    };
    l.run(2 * flows as u64);
    let (mut sum, mut total_ns, mut each) = (0, 0, Vec::new());
    for _ in 0..blocks.max(1) {
        let t = Instant::now();
        sum ^= timed(&mut l, packets);
        let ns = t.elapsed().as_nanos();
        total_ns += ns;
        each.push(format!("{:.1}", ns as f64 / packets as f64));
    }
    let ns = total_ns as f64 / (packets * u64::from(blocks.max(1))) as f64;
    if let Err(e) = l.verify() {
        eprintln!("sched_probe: {e}");
        std::process::exit(1);
    }
    println!(
        "{} {} flows={flows}: {ns:.1} ns/packet, {:.1} Gbit/s virtual (checksum {sum:x})",
        case.name(),
        imp.name(),
        l.rate_bps() / 1e9
    );
    if blocks > 1 {
        println!(
            "each block of {packets} packets, ns/packet: {}",
            each.join(" ")
        );
    }
}
