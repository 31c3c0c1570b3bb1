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
//! baseline), flows, packets. It builds and fills the scheduler, warms it up with `2 * flows`
//! packets like the report, then sends `packets` more (in [`timed`], which callgrind can be
//! told to count alone) and prints the time per packet.

use sluice_sched::workload::{Case, CaseLoop, Impl};
use std::time::Instant;

/// The timed packets: a function of its own so that a profiler can count only them.
#[inline(never)]
fn timed(l: &mut CaseLoop, packets: u64) -> u64 {
    l.run(packets)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: sched_probe CASE sluice|baseline FLOWS PACKETS";
    let case = args
        .get(1)
        .and_then(|s| Case::ALL.into_iter().find(|c| c.name() == s));
    let imp = args
        .get(2)
        .and_then(|s| Impl::ALL.into_iter().find(|i| i.name() == s));
    let flows = args.get(3).and_then(|s| s.parse::<usize>().ok());
    let packets = args.get(4).and_then(|s| s.parse::<u64>().ok());
    let (Some(case), Some(imp), Some(flows), Some(packets)) = (case, imp, flows, packets) else {
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
    let t = Instant::now();
    let sum = timed(&mut l, packets);
    let ns = t.elapsed().as_nanos() as f64 / packets as f64;
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
}
